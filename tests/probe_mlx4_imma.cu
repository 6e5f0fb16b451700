// A probe (not a test of hkv, not built into hkv): the exact MLX4 product (docs/ARITHMETIC.md §2) with its integer
// sums T on the tensor cores, split over a block's warps by contract lane, against the engine's decode kernel.
//
// What it computes, y[r] = dot_row(W, r, x) byte for byte:
//   Block: one tile of 16 rows, NW warps. Chunk c (32 weights) is contract lane c % 32's; a step is 4 chunks
//   (4s .. 4s + 3). Warp w takes the steps s ≡ w (mod NW), in increasing order, so all the chunks of a contract lane
//   (c = l, l + 32, …: steps ≡ l / 4 mod 8) pass through one warp, in order, and its fma chain is the oracle's.
//   Thread (g, t) = (lane / 4, lane % 4) loads chunk 4s + t of rows g and g + 8 (16 bytes each) and closes that
//   chunk for both rows: T, qx = float(T)·unit, acc = fma(s, qx, fma(b, xsum, acc)).
//   T by mma.sync.m16n8k32 (A = codes as u8, rows g, g + 8; B = byte planes of X): product j of a step takes code word
//   j of each thread's chunk (low nibbles in the k slots of a0/a1, high nibbles in a2/a3, the records' word order:
//   word 8p + 2j + h holds byte p of elements 8j + h + 2i). B is block diagonal: column n belongs to chunk
//   4s + n/2, so only the lanes whose column's chunk is the chunk their k slots carry hold record words, the
//   rest zeros. Tile 01 (u8·u8): column 2t + p = plane p of chunk 4s + t. Tile 2 (u8·s8): column 2t = plane 2.
//   After the step's 4 products thread (g, t) holds P0, P1, P2 of (g, 4s + t) and (g + 8, 4s + t):
//   T = P0 + (P1 << 8) + (P2 << 16), exact (|T| < 2^31).
//   End: the 32 contract-lane sums of each row meet in shared memory; a warp takes a row, lane l holding contract
//   lane l's sum, and runs lane_tree32 as the xor butterfly.
// Forms (the arithmetic above in each; they differ in how the codes reach the registers): step (each warp loads U
// steps of its codes, records and scales straight from global memory, optionally prefetching into L2; a block a
// tile, or persistent blocks looping over tiles), ring (a cp.async ring a warp, below) and bulk (a producer warp
// copying whole tiles by cp.async.bulk, below).
// Checked: every row of every shape equal to the oracle's hkv::matvec as bytes, and the engine's decode kernel too.
// Timed: µs a launch (median of 20, alone) against the weight bytes over the card's copy bandwidth (a 1 GiB copy).
// Build: cuda/run_gpu_suite.sh probe-mlx4-imma (target hkv_mlx4_imma_probe). Its timings are in docs/RESULTS.md §11;
// docs/PERFORMANCE.md says what the bulk form does inside the engine's decode launches (slower a token).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <type_traits>
#include <vector>

#include "cuda/device.cuh"  // prefetch_l2, cp_async16, cp_async_commit, cp_async_wait, warp_tree_sum
#include "cuda/kernels.h"
#include "cuda/prefill_attention_wgmma.cuh"  // wg:: mbarriers and bulk copies
#include "reference/scalar.h"
#include "reference/weights.h"
#include "tests/probe_util.cuh"

namespace {

namespace hc = hkv::cuda;

__device__ __forceinline__ uint32_t word(const uint4& v, int j) {
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

// One step of thread (g, t): the four products of its chunk's code words qa (row g) and qb (row g + 8) with the
// block-diagonal B words (b01: tile 01, record units 2p and 2p + 1 of plane p; b2: tile 2, units 4 and 5; or zeros),
// then both rows' closing: T = P0 + (P1 << 8) + (P2 << 16), acc = fma(s, float(T)·unit, fma(b, xsum, acc)).
__device__ __forceinline__ void step(const uint4& qa, const uint4& qb, const uint4 (&b01)[2], const uint4 (&b2)[2],
                                     float xs, float unit, float sa, float ba, float sb, float bb, float& acc_a,
                                     float& acc_b) {
  int d01[4] = {0, 0, 0, 0}, d2[4] = {0, 0, 0, 0};
#pragma unroll
  for (int j = 0; j < 4; j++) {
    const uint32_t wa = word(qa, j), wb = word(qb, j);
    const uint32_t a[4] = {wa & 0x0f0f0f0fu, wb & 0x0f0f0f0fu, (wa >> 4) & 0x0f0f0f0fu, (wb >> 4) & 0x0f0f0f0fu};
    probe::imma_acc<false>(d01, a, word(b01[j / 2], 2 * (j % 2)), word(b01[j / 2], 2 * (j % 2) + 1));
    probe::imma_acc<true>(d2, a, word(b2[j / 2], 2 * (j % 2)), word(b2[j / 2], 2 * (j % 2) + 1));
  }
  const int32_t ta = int32_t(uint32_t(d01[0]) + (uint32_t(d01[1]) << 8) + (uint32_t(d2[0]) << 16));
  const int32_t tb = int32_t(uint32_t(d01[2]) + (uint32_t(d01[3]) << 8) + (uint32_t(d2[2]) << 16));
  acc_a = __fmaf_rn(sa, __fmul_rn(__int2float_rn(ta), unit), __fmaf_rn(ba, xs, acc_a));
  acc_b = __fmaf_rn(sb, __fmul_rn(__int2float_rn(tb), unit), __fmaf_rn(bb, xs, acc_b));
}

// A tile's last steps and its end, with NW warps a tile and NA = 8 / NW contract lanes a thread a row. in_slot0: step m
// of a warp's last ones, taken one at a time by f() into slot 0, with slot m % NA moved to slot 0 around it.
// put_lanes: the rows' 32 contract-lane sums into part (thread (g, t) of warp w holds lanes 4·((w + NW·k) % 8) + t).
// tree_rows: warp w takes rows w, w + nw, … and runs lane_tree32 as the xor butterfly (lane l holding lane l's sum),
// lane 0 storing y[r0 + r].
template <int NA, class F>
__device__ __forceinline__ void in_slot0(int m, float (&acc_a)[NA], float (&acc_b)[NA], F&& f) {
  auto swap = [&] {
    const float ta = acc_a[0], tb = acc_b[0];
    acc_a[0] = acc_a[NA - 1], acc_b[0] = acc_b[NA - 1], acc_a[NA - 1] = ta, acc_b[NA - 1] = tb;
  };
  if (m % NA) swap();
  f();
  if (m % NA) swap();
}
template <int NW, int NA>
__device__ __forceinline__ void put_lanes(float (*part)[32], int g, int t, int w, const float (&acc_a)[NA],
                                          const float (&acc_b)[NA]) {
#pragma unroll
  for (int k = 0; k < NA; k++) {
    const int l = 4 * ((w + NW * k) % 8) + t;
    part[g][l] = acc_a[k];
    part[g + 8][l] = acc_b[k];
  }
}
__device__ __forceinline__ void tree_rows(const float (*part)[32], int w, int nw, int lane, int64_t r0, int64_t rows,
                                          float* y) {
  for (int r = w; r < 16; r += nw) {
    const float v = hc::warp_tree_sum(part[r][lane]);
    if (lane == 0 && r0 + r < rows) y[r0 + r] = v;
  }
}

// NW warps a 16-row tile; U steps' code loads in flight a warp before they are computed.
// PF: each batch first prefetches into L2 the codes of this warp's batch PF batches ahead (0: none).
template <int NW, int U, int PF>
__global__ void __launch_bounds__(NW * 32, 24 / NW)
    mv_imma(const uint32_t* __restrict__ codes, const uint16_t* __restrict__ sc, const uint16_t* __restrict__ bi,
            const uint32_t* __restrict__ xq, const uint4* __restrict__ zeros, int64_t rows, int cols, int group,
            float* __restrict__ y) {
  constexpr int NA = 8 / NW;  // contract lanes a thread keeps a row: 4·((w + NW·k) % 8) + t, k < NA
  static_assert(U % NA == 0, "step s0 + NW·u is the warp's step U·m + u, so its lane slot is u % NA");
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  __shared__ float part[16][32];
  // a block takes tiles blockIdx.x, + gridDim.x, … (one tile when the grid covers them)
  for (int64_t tile = blockIdx.x; tile * 16 < rows; tile += gridDim.x) {
    const int64_t r0 = tile * 16;
    const int64_t ra = min(r0 + g, rows - 1), rb = min(r0 + g + 8, rows - 1);
    const int nsteps = cols / 128, gpr = cols / group, gsh = group == 32 ? 0 : group == 64 ? 1 : 2;
    // Step s = w + NW·m of this warp: chunk c = 4s + t; every pointer moves by a fixed stride a step.
    const int c0 = 4 * w + t;
    const uint4* pa = reinterpret_cast<const uint4*>(codes + ra * (cols / 8)) + c0;
    const uint4* pb = reinterpret_cast<const uint4*>(codes + rb * (cols / 8)) + c0;
    const uint4* const pend = reinterpret_cast<const uint4*>(codes + ra * (cols / 8)) + cols / 32;  // row a's end
    const uint4* xq4 = reinterpret_cast<const uint4*>(xq) + size_t(c0) * (hc::kXqWords / 4);
    const uint2* pxs = reinterpret_cast<const uint2*>(xq + size_t(c0) * hc::kXqWords + 24);  // xsum, unit
    // this lane's B words: tile 01 when its column's chunk is its k slots' chunk (g / 2 == t), plane g % 2; tile 2 when
    // g == 2t. The others read zeros and stay there.
    const bool on01 = (g >> 1) == t, on2 = g == 2 * t;
    const uint4* p01 = on01 ? xq4 + 2 * (g & 1) : zeros;
    const uint4* p2 = on2 ? xq4 + 4 : zeros;
    const int rs = 4 * NW * (hc::kXqWords / 4), rs01 = on01 ? rs : 0, rs2 = on2 ? rs : 0;
    const uint16_t* psa = sc + ra * gpr + (c0 >> gsh);
    const uint16_t* pba = bi + ra * gpr + (c0 >> gsh);
    const uint16_t* psb = sc + rb * gpr + (c0 >> gsh);
    const uint16_t* pbb = bi + rb * gpr + (c0 >> gsh);
    const int gs = (4 * NW) >> gsh;  // groups a step
    float acc_a[NA], acc_b[NA];
#pragma unroll
    for (int k = 0; k < NA; k++) acc_a[k] = acc_b[k] = 0.0f;
    // V steps of this warp from the pointers, which move past them: all loads first, then the products and closings.
    auto steps = [&](auto v) {
      constexpr int V = decltype(v)::value;
      uint4 qa[V], qb[V], b01[V][2], b2[V][2];
      uint2 xu[V];
      uint16_t sa[V], ba[V], sb[V], bb[V];
      if constexpr (PF > 0) {
#pragma unroll
        for (int u = 0; u < V; u++)
          if (pa + 4 * NW * (PF * V + u) < pend) {
            hc::prefetch_l2(pa + 4 * NW * (PF * V + u));
            hc::prefetch_l2(pb + 4 * NW * (PF * V + u));
          }
      }
#pragma unroll
      for (int u = 0; u < V; u++) {
        qa[u] = __ldg(pa + 4 * NW * u), qb[u] = __ldg(pb + 4 * NW * u);
        b01[u][0] = __ldg(p01 + rs01 * u), b01[u][1] = __ldg(p01 + rs01 * u + 1);
        b2[u][0] = __ldg(p2 + rs2 * u), b2[u][1] = __ldg(p2 + rs2 * u + 1);
        xu[u] = __ldg(pxs + 2 * rs * u);
        sa[u] = __ldg(psa + gs * u), ba[u] = __ldg(pba + gs * u), sb[u] = __ldg(psb + gs * u),
        bb[u] = __ldg(pbb + gs * u);
      }
      pa += 4 * NW * V, pb += 4 * NW * V, p01 += rs01 * V, p2 += rs2 * V, pxs += 2 * rs * V;
      psa += gs * V, pba += gs * V, psb += gs * V, pbb += gs * V;
#pragma unroll
      for (int u = 0; u < V; u++) {
        const int k = u % NA;
        step(qa[u], qb[u], b01[u], b2[u], __uint_as_float(xu[u].x), __uint_as_float(xu[u].y), hkv::f32_from_bf16(sa[u]),
             hkv::f32_from_bf16(ba[u]), hkv::f32_from_bf16(sb[u]), hkv::f32_from_bf16(bb[u]), acc_a[k], acc_b[k]);
      }
    };
    const int mine = (nsteps - w + NW - 1) / NW;  // this warp's steps
    int m = 0;
    for (; m + U <= mine; m += U) steps(std::integral_constant<int, U>{});
    // the last steps one at a time; their lane slots go on from m (NA divides U)
    for (; m < mine; m++) in_slot0(m, acc_a, acc_b, [&] { steps(std::integral_constant<int, 1>{}); });
    // the rows' 32 contract-lane sums meet in shared memory, then lane_tree32 a row (tree_rows)
    put_lanes<NW>(part, g, t, w, acc_a, acc_b);
    __syncthreads();
    tree_rows(part, w, NW, lane, r0, rows, y);
    __syncthreads();  // part is read before the next tile writes it
  }
}

// The ring form: 4 warps a 16-row tile; round m is chunks 32m .. 32m + 31 and warp w takes its 8 chunks 32m + 8w ..
// 32m + 8w + 7 (contract lanes 8w .. 8w + 7), thread t the two chunks 8w + 2t + q (q = 0, 1) of rows g and g + 8: 32
// contiguous bytes a row, 128 a row a warp. Each thread copies its own codes (4 × 16 bytes) and its groups' scales and
// biases (4 × 4 bytes, the aligned pair holding its group) into an S-stage ring in shared memory by cp.async, S rounds
// ahead, and reads back only what it copied (so a wait_group is all it needs). A round's two sub-steps are the
// products of the step above with chunk 8w + 2t + q in thread t's k slots.
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(uint32_t(__cvta_generic_to_shared(smem))), "l"(gmem));
}
constexpr int kRingWords = 4 * 32 * 4 + 4 * 32;  // a warp's stage: codes [4][32 lanes] uint4, scales [4][32] words

template <int S>
__global__ void __launch_bounds__(128, 3)
    mv_ring(const uint32_t* __restrict__ codes, const uint16_t* __restrict__ sc, const uint16_t* __restrict__ bi,
            const uint32_t* __restrict__ xq, const uint4* __restrict__ zeros, int64_t rows, int cols, int group,
            float* __restrict__ y) {
  extern __shared__ uint4 ring_s[];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t r0 = int64_t(blockIdx.x) * 16;
  const int64_t ra = min(r0 + g, rows - 1), rb = min(r0 + g + 8, rows - 1);
  const int nr = cols / 1024, gpr = cols / group, gsh = group == 32 ? 0 : group == 64 ? 1 : 2;
  uint32_t* const ring = reinterpret_cast<uint32_t*>(ring_s) + size_t(w) * S * kRingWords;
  const int cw = 8 * w + 2 * t;  // this thread's first chunk of a round, less 32m
  const uint8_t* ca = reinterpret_cast<const uint8_t*>(codes + ra * (cols / 8)) + 16 * cw;
  const uint8_t* cb = reinterpret_cast<const uint8_t*>(codes + rb * (cols / 8)) + 16 * cw;
  const int gp = (cw >> gsh) & ~1;  // the aligned pair of groups holding this thread's chunks, less 32m's
  const uint16_t* s_a = sc + ra * gpr + gp;
  const uint16_t* b_a = bi + ra * gpr + gp;
  const uint16_t* s_b = sc + rb * gpr + gp;
  const uint16_t* b_b = bi + rb * gpr + gp;
  const int gr = 32 >> gsh;  // groups a round
  auto issue = [&](int m) {
    uint32_t* st = ring + (m % S) * kRingWords;
    uint4* c4 = reinterpret_cast<uint4*>(st);
    hc::cp_async16(c4 + 0 * 32 + lane, ca + 512 * m);
    hc::cp_async16(c4 + 1 * 32 + lane, ca + 512 * m + 16);
    hc::cp_async16(c4 + 2 * 32 + lane, cb + 512 * m);
    hc::cp_async16(c4 + 3 * 32 + lane, cb + 512 * m + 16);
    uint32_t* s4 = st + 4 * 32 * 4;
    cp_async4(s4 + 0 * 32 + lane, s_a + gr * m);
    cp_async4(s4 + 1 * 32 + lane, b_a + gr * m);
    cp_async4(s4 + 2 * 32 + lane, s_b + gr * m);
    cp_async4(s4 + 3 * 32 + lane, b_b + gr * m);
  };
#pragma unroll
  for (int m = 0; m < S; m++) {
    if (m < nr) issue(m);
    hc::cp_async_commit();
  }
  const bool on01 = (g >> 1) == t, on2 = g == 2 * t;
  float acc_a[2] = {0.0f, 0.0f}, acc_b[2] = {0.0f, 0.0f};
  for (int m = 0; m < nr; m++) {
    hc::cp_async_wait<S - 1>();
    const uint32_t* st = ring + (m % S) * kRingWords;
    const uint4* c4 = reinterpret_cast<const uint4*>(st);
    const uint4 q[2][2] = {{c4[0 * 32 + lane], c4[1 * 32 + lane]}, {c4[2 * 32 + lane], c4[3 * 32 + lane]}};
    const uint32_t* s4 = st + 4 * 32 * 4;
    const uint32_t sw[4] = {s4[lane], s4[32 + lane], s4[64 + lane], s4[96 + lane]};  // s_a, b_a, s_b, b_b pairs
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int c = 32 * m + cw + h;  // the chunk of this sub-step
      const uint4* rec = reinterpret_cast<const uint4*>(xq + size_t(c) * hc::kXqWords);
      const uint4* p01 = on01 ? rec + 2 * (g & 1) : zeros;
      const uint4* p2 = on2 ? rec + 4 : zeros;
      const uint4 b01[2] = {__ldg(p01), __ldg(p01 + 1)}, b2[2] = {__ldg(p2), __ldg(p2 + 1)};
      const uint2 xu = __ldg(reinterpret_cast<const uint2*>(xq + size_t(c) * hc::kXqWords + 24));
      const int half = (((cw + h) >> gsh) - gp) * 16;  // the group's half of each pair word
      const auto bf = [&](uint32_t v) { return hkv::f32_from_bf16(uint16_t(v >> half)); };
      step(q[0][h], q[1][h], b01, b2, __uint_as_float(xu.x), __uint_as_float(xu.y), bf(sw[0]), bf(sw[1]), bf(sw[2]),
           bf(sw[3]), acc_a[h], acc_b[h]);
    }
    if (m + S < nr) issue(m + S);  // into the stage just read (its values are in registers and used above)
    hc::cp_async_commit();
  }
  __shared__ float part[16][32];
#pragma unroll
  for (int h = 0; h < 2; h++) part[g][cw + h] = acc_a[h], part[g + 8][cw + h] = acc_b[h];
  __syncthreads();
  tree_rows(part, w, 4, lane, r0, rows, y);
}

template <int S>
bool launch_ring(const hc::DMat& W, const uint32_t* xq, const uint4* zeros, float* y) {
  static const bool once = [] {
    CK(cudaFuncSetAttribute(mv_ring<S>, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * S * kRingWords * 4));
    return true;
  }();
  (void)once;
  mv_ring<S><<<unsigned((W.rows + 15) / 16), 128, 4 * S * kRingWords * 4>>>(
      static_cast<const uint32_t*>(W.data), W.scales, W.biases, xq, zeros, W.rows, int(W.cols), W.group, y);
  return true;
}

// The bulk form (rows a multiple of 16): persistent blocks, one a multiprocessor, of NW consumer warps and one producer
// warp. A block takes the tiles blockIdx.x, + gridDim.x, …; the producer's one thread copies each whole tile (its 16
// rows' codes, scales and biases: three contiguous ranges) into an S-stage ring in shared memory by cp.async.bulk, a
// full mbarrier counting the bytes, and refills a stage when the consumers have arrived at its empty mbarrier. x's
// records are staged once a block. The consumers compute a tile as the step form does (warp w the steps ≡ w mod NW,
// thread (g, t) chunk 4s + t of rows g and g + 8), reading codes, scales, biases and records from shared memory.
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(wg::saddr(bar)) : "memory");
}
__device__ __forceinline__ void consumers_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

// G groups of NW consumer warps: group q takes the block's tiles i ≡ q (mod G), so G tiles are computed at once.
template <int NW, int S, int U, int G = 1>
__global__ void __launch_bounds__(32 * (G * NW + 1), 1)
    mv_bulk(const uint32_t* __restrict__ codes, const uint16_t* __restrict__ sc, const uint16_t* __restrict__ bi,
            const uint32_t* __restrict__ xq, int64_t rows, int cols, int group, float* __restrict__ y) {
  constexpr int NA = 8 / NW;
  static_assert(U % NA == 0, "the lane slot of the warp's step U·m + u is u % NA");
  extern __shared__ __align__(128) uint8_t smem[];
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int q = int(threadIdx.x >> 5) / NW, w = int(threadIdx.x >> 5) % NW;  // group, warp in it (producer: q = G)
  const int nch = cols / 32, gpr = cols / group, gsh = group == 32 ? 0 : group == 64 ? 1 : 2;
  const uint32_t rb = uint32_t(cols / 2), cbytes = 16 * rb, sbytes = 32 * uint32_t(gpr);  // a row's, a tile's bytes
  const uint32_t stage = cbytes + 2 * sbytes;
  uint4* xrec = reinterpret_cast<uint4*>(smem);  // [nch][8] records, then 2 zero uint4
  uint8_t* ring = smem + size_t(nch) * 128 + 32;
  uint64_t* full = reinterpret_cast<uint64_t*>(ring + size_t(S) * stage);
  uint64_t* empty = full + S;
  float(*part)[32] = reinterpret_cast<float(*)[32]>(empty + S) + 16 * (q < G ? q : 0);
  for (int i = threadIdx.x; i < nch * 8; i += blockDim.x) xrec[i] = __ldg(reinterpret_cast<const uint4*>(xq) + i);
  if (threadIdx.x < 2) xrec[nch * 8 + threadIdx.x] = make_uint4(0, 0, 0, 0);
  if (threadIdx.x == 0) {
    for (int i = 0; i < S; i++) wg::mbar_init(&full[i], 1), wg::mbar_init(&empty[i], 1);
    wg::mbar_init_fence();
  }
  __syncthreads();
  const int64_t ntiles = rows / 16;
  if (q == G) {  // the producer (warp G·NW)
    if (lane == 0)
      for (int64_t tile = blockIdx.x, i = 0; tile < ntiles; tile += gridDim.x, i++) {
        const int st = int(i % S);
        if (i >= S) wg::mbar_wait(&empty[st], uint32_t((i / S - 1) & 1));
        uint8_t* d = ring + size_t(st) * stage;
        wg::mbar_arrive_expect(&full[st], stage);
        wg::bulk_copy(d, reinterpret_cast<const uint8_t*>(codes) + tile * cbytes, cbytes, &full[st]);
        wg::bulk_copy(d + cbytes, reinterpret_cast<const uint8_t*>(sc) + tile * sbytes, sbytes, &full[st]);
        wg::bulk_copy(d + cbytes + sbytes, reinterpret_cast<const uint8_t*>(bi) + tile * sbytes, sbytes, &full[st]);
      }
    return;
  }
  const int nsteps = cols / 128;
  const bool on01 = (g >> 1) == t, on2 = g == 2 * t;
  const uint4* zero = xrec + nch * 8;
  for (int64_t i = q, tile = blockIdx.x + q * int64_t(gridDim.x); tile < ntiles;
       i += G, tile += G * int64_t(gridDim.x)) {
    const int st = int(i % S);
    wg::mbar_wait(&full[st], uint32_t((i / S) & 1));
    const uint8_t* d = ring + size_t(st) * stage;
    const uint4* qa = reinterpret_cast<const uint4*>(d + size_t(g) * rb);
    const uint4* qb = reinterpret_cast<const uint4*>(d + size_t(g + 8) * rb);
    const uint16_t* s16 = reinterpret_cast<const uint16_t*>(d + cbytes);
    const uint16_t* b16 = reinterpret_cast<const uint16_t*>(d + cbytes + sbytes);
    float acc_a[NA], acc_b[NA];
#pragma unroll
    for (int k = 0; k < NA; k++) acc_a[k] = acc_b[k] = 0.0f;
    auto steps = [&](int s0, auto v) {  // V steps s0, s0 + NW, …
      constexpr int V = decltype(v)::value;
      uint4 ca[V], cb[V], b01[V][2], b2[V][2];
      uint2 xu[V];
      float sa[V], ba[V], sb[V], bb[V];
#pragma unroll
      for (int u = 0; u < V; u++) {
        const int c = 4 * (s0 + NW * u) + t, gi = c >> gsh;
        ca[u] = qa[c], cb[u] = qb[c];
        const uint4* p01 = on01 ? xrec + c * 8 + 2 * (g & 1) : zero;
        const uint4* p2 = on2 ? xrec + c * 8 + 4 : zero;
        b01[u][0] = p01[0], b01[u][1] = p01[1], b2[u][0] = p2[0], b2[u][1] = p2[1];
        xu[u] = reinterpret_cast<const uint2*>(xrec + c * 8 + 6)[0];
        sa[u] = hkv::f32_from_bf16(s16[g * gpr + gi]), ba[u] = hkv::f32_from_bf16(b16[g * gpr + gi]);
        sb[u] = hkv::f32_from_bf16(s16[(g + 8) * gpr + gi]), bb[u] = hkv::f32_from_bf16(b16[(g + 8) * gpr + gi]);
      }
#pragma unroll
      for (int u = 0; u < V; u++) {
        const int k = u % NA;
        step(ca[u], cb[u], b01[u], b2[u], __uint_as_float(xu[u].x), __uint_as_float(xu[u].y), sa[u], ba[u], sb[u],
             bb[u], acc_a[k], acc_b[k]);
      }
    };
    const int mine = (nsteps - w + NW - 1) / NW;
    int m = 0;
    for (; m + U <= mine; m += U) steps(w + NW * m, std::integral_constant<int, U>{});
    for (; m < mine; m++) in_slot0(m, acc_a, acc_b, [&] { steps(w + NW * m, std::integral_constant<int, 1>{}); });
    put_lanes<NW>(part, g, t, w, acc_a, acc_b);
    consumers_sync(1 + q, NW * 32);  // the stage is read; part is written
    if (w == 0 && lane == 0) mbar_arrive(&empty[st]);
    tree_rows(part, w, NW, lane, tile * 16, rows, y);
    consumers_sync(1 + q, NW * 32);  // part is read before the next tile writes it
  }
}

template <int NW, int S, int U, int G = 1>
bool launch_bulk(const hc::DMat& W, const uint32_t* xq, const uint4*, float* y) {
  const int nch = int(W.cols / 32), gpr = int(W.cols / W.group);
  const size_t stage = 16 * size_t(W.cols / 2) + 64 * size_t(gpr);
  const size_t bytes = size_t(nch) * 128 + 32 + S * stage + 16 * size_t(S) + G * 16 * 32 * 4;
  if (bytes > 227 * 1024) return false;  // the ring does not fit this width's tiles
  static int set = 0;
  if (set < int(bytes)) {
    CK(cudaFuncSetAttribute(mv_bulk<NW, S, U, G>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    set = int(bytes);
  }
  const int64_t tiles = W.rows / 16;
  mv_bulk<NW, S, U, G><<<unsigned(std::min<int64_t>(tiles, hc::sm_count())), 32 * (G * NW + 1), bytes>>>(
      static_cast<const uint32_t*>(W.data), W.scales, W.biases, xq, W.rows, int(W.cols), W.group, y);
  return true;
}

struct Shape {
  const char* name;
  int64_t rows;
  int cols;
};

// PERS: a persistent grid (the blocks a multiprocessor holds, times the multiprocessors), each block looping over tiles
template <int NW, int U, int PF, bool PERS = false>
bool launch(const hc::DMat& W, const uint32_t* xq, const uint4* zeros, float* y) {
  static const int grid = [] {
    int occ = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, mv_imma<NW, U, PF>, NW * 32, 0));
    return occ * hc::sm_count();
  }();
  const int64_t tiles = (W.rows + 15) / 16;
  mv_imma<NW, U, PF><<<unsigned(PERS ? std::min<int64_t>(grid, tiles) : tiles), NW * 32>>>(
      static_cast<const uint32_t*>(W.data), W.scales, W.biases, xq, zeros, W.rows, int(W.cols), W.group, y);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // argv[1]: only the shapes whose name contains it; HKV_PROBE_ONCE=1: one launch a kernel, no timing (for ncu)
  const char* only = argc > 1 ? argv[1] : nullptr;
  const bool once = std::getenv("HKV_PROBE_ONCE") != nullptr;
  const Shape shapes[] = {{"deltanet out", 5120, 6144},
                          {"mlp down", 5120, 17408},
                          {"full-attn q|k|v", 14336, 5120},
                          {"deltanet qkv|z|b|a", 16480, 5120},
                          {"mlp gate|up", 34816, 5120},
                          {"lm_head", 248320, 5120},
                          // small enough to stay in the 50 MB L2 across the timed launches: the arithmetic's side
                          {"L2-resident", 8192, 5120},
                          {"L2-resident", 16384, 5120}};
  constexpr int group = 64;
  int dev = 0;
  cudaDeviceProp prop{};
  CK(cudaGetDevice(&dev));
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("%s, %d multiprocessors\n", prop.name, prop.multiProcessorCount);
  uint64_t seed = 0x5eed;
  uint4* zeros = nullptr;
  CK(cudaMalloc(&zeros, 64));
  CK(cudaMemset(zeros, 0, 64));
  double bw = 0;
  {  // the card's copy bandwidth over 1 GiB
    void* big = nullptr;
    CK(cudaMalloc(&big, size_t(1) << 30));
    CK(cudaMemset(big, 0, size_t(1) << 30));
    bw = probe::copy_bandwidth(big, size_t(1) << 30);
    CK(cudaFree(big));
  }
  // the forms timed, beside the engine's decode kernel
  using Launch = bool (*)(const hc::DMat&, const uint32_t*, const uint4*, float*);
  struct Form {
    const char* name;
    Launch f;
  };
  const Form forms[] = {{"step 8/2/2", &launch<8, 2, 2>},
                        {"step 4/2/2 P", &launch<4, 2, 2, true>},
                        {"ring 4", &launch_ring<4>},
                        {"bulk 8/3/2", &launch_bulk<8, 3, 2>},
                        {"bulk 8/4/2 G2", &launch_bulk<8, 4, 2, 2>},
                        {"bulk 8/3/2 G2", &launch_bulk<8, 3, 2, 2>}};
  constexpr int nf = int(std::size(forms));
  std::printf(
      "forms: step NW/U/PF (NW warps a 16-row tile, U steps loaded at once, L2 prefetch PF batches ahead; P: "
      "persistent blocks), ring S (S rounds in flight by cp.async), bulk NW/S/U (persistent, a producer warp "
      "copying whole tiles into S stages by cp.async.bulk; G2: two groups of consumer warps, two tiles at once)\n");
  bool all_equal = true;
  std::printf("%-20s %7s %6s | %7s %5s", "launch", "rows", "MB", "engine", "copy");
  for (const Form& f : forms) std::printf(" | %12s", f.name);
  std::printf(" | rows equal to the oracle's (engine, forms)\n");
  for (const Shape& sh : shapes) {
    if (only != nullptr && std::strstr(sh.name, only) == nullptr) continue;
    const int64_t R = sh.rows, C = sh.cols, nw = R * C / 8, ng = R * C / group;
    std::vector<uint32_t> q(static_cast<size_t>(nw));
    std::vector<uint16_t> s(static_cast<size_t>(ng)), b(static_cast<size_t>(ng));
    for (auto& v : q) v = probe::rng(seed) ^ (probe::rng(seed) << 16);
    for (size_t i = 0; i < s.size(); i++) {
      s[i] = hkv::bf16_from_f32(0.002f + float(probe::rng(seed) % 1000) * 2e-5f);
      b[i] = hkv::bf16_from_f32(-0.02f + float(probe::rng(seed) % 1000) * 4e-5f);
    }
    std::vector<float> x(static_cast<size_t>(C));
    for (auto& v : x) v = (float(probe::rng(seed) % 20001) - 10000.0f) * 1e-4f;
    hkv::Matrix M;
    M.type = hkv::WType::MLX4, M.rows = R, M.cols = C, M.group = group;
    M.data = q.data(), M.scales = s.data(), M.biases = b.data();
    std::vector<float> want(static_cast<size_t>(R));
    hkv::matvec(M, x.data(), want.data());

    uint32_t *dq = nullptr, *dxq = nullptr;
    uint16_t *ds = nullptr, *db = nullptr;
    float *dx = nullptr, *dy = nullptr;
    CK(cudaMalloc(&dq, q.size() * 4));
    CK(cudaMalloc(&ds, s.size() * 2));
    CK(cudaMalloc(&db, b.size() * 2));
    CK(cudaMalloc(&dx, x.size() * 4));
    CK(cudaMalloc(&dy, size_t(R) * 4));
    CK(cudaMalloc(&dxq, size_t(C / 32) * hc::kXqWords * 4));
    CK(cudaMemcpy(dq, q.data(), q.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ds, s.data(), s.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    hc::DMat W;
    W.type = hkv::WType::MLX4, W.rows = R, W.cols = C, W.group = group, W.data = dq, W.scales = ds, W.biases = db;
    const double mb = double(W.nbytes()) / 1e6;
    std::vector<float> got(static_cast<size_t>(R));
    auto equal = [&] {
      CK(cudaMemcpy(got.data(), dy, size_t(R) * 4, cudaMemcpyDeviceToHost));
      int64_t n = 0;
      for (int64_t r = 0; r < R; r++) n += std::memcmp(&got[size_t(r)], &want[size_t(r)], 4) == 0;
      CK(cudaMemset(dy, 0xff, size_t(R) * 4));
      return n;
    };
    // the engine: records, then its decode launch alone
    hc::matvec(W, dx, C, 1, dy, R, dxq, nullptr);
    CK(cudaDeviceSynchronize());
    const int64_t eq_engine = equal();
    hc::MatTask task;
    task.W = W, task.y = dy, task.ldy = R;
    const double t_engine = once ? 0.0 : probe::time_us([&] { hc::matvec_multi(&task, 1, dx, C, 1, dxq, nullptr); });
    double t[nf];
    int64_t eq[nf];
    for (int i = 0; i < nf; i++) {
      if (!forms[i].f(W, dxq, zeros, dy)) {  // not run for this shape (its stages do not fit)
        eq[i] = -1, t[i] = std::nan("");     // printed as "-", neither equal nor counted
        continue;
      }
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      eq[i] = equal();
      t[i] = once ? 0.0 : probe::time_us([&] { forms[i].f(W, dxq, zeros, dy); });
      all_equal = all_equal && eq[i] == R;
    }
    all_equal = all_equal && eq_engine == R;
    const double floor_us = double(W.nbytes()) / bw * 1e6;  // µs, with the % of copy bandwidth beside each time
    std::printf("%-20s %7lld %6.1f | %7.1f %4.0f%%", sh.name, (long long)R, mb, t_engine, 100 * floor_us / t_engine);
    for (int i = 0; i < nf; i++)
      eq[i] < 0 ? std::printf(" | %12s", "-") : std::printf(" | %6.1f %4.0f%%", t[i], 100 * floor_us / t[i]);
    std::printf(" | %lld,", (long long)eq_engine);
    for (int i = 0; i < nf; i++) eq[i] < 0 ? std::printf(" -") : std::printf(" %lld", (long long)eq[i]);
    std::printf(" of %lld\n", (long long)R);
    for (void* p : {(void*)dq, (void*)ds, (void*)db, (void*)dx, (void*)dy, (void*)dxq}) CK(cudaFree(p));
  }
  std::printf("copy bandwidth %.3f TB/s\n", bw / 1e12);
  std::printf("%s\n", all_equal ? "every row equal to the oracle's, as bytes" : "MISMATCH");
  return all_equal ? 0 : 1;
}
