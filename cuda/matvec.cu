// The weight matrix-vector product for 1..N input rows: Y[n][r] = W[r,:]·X[n,:], in the canonical order of
// reference/weights.cpp (dot_row; docs/ARITHMETIC.md §2):
//   dense (f32: 4 values, bf16/f16: 8 values per 16-byte chunk): lane l of the row's warp takes chunks
//   l, l+32, l+64, …, each element one fma into the lane's accumulator, in index order;
//   MLX4 (32 weights per 16-byte chunk, inside one group): per chunk the exact integer T = Σ q_j·X_j of
//   the codes with x's block fixed point X (reference x_chunks: X_j = round_even(x_j·2^(21−e)), e from the
//   chunk's largest |x|), qx = float(T)·unit, then acc = fma(s, qx, fma(b, xsum_chunk, acc)); the records
//   of x (xq_chunk in device.cuh: X's bytes, the chunk sum, the unit) are made once per input row;
//   lanes combined by the xor butterfly, which gives lane_tree32's value in every lane.
// Every (n, r) is its own chain: the bytes do not depend on N, on the other rows, on how rows are grouped
// into warps and launches, or on the grid (batch-invariant).
//
// matvec_multi runs up to four matrices that read the same x (q|k|v, qkv|z|b|a, gate|up) in one launch:
// the grid is the concatenation of each matrix's blocks, so no block straddles two matrices.
//
// MLX4 kernel (the decode hot path, about 90% of a 27B token's bytes). At 4.2 TB/s a 4-bit weight arrives
// every ~0.13 ns, about 4.4 thread-instructions of an H200's issue budget, so the work a weight must be
// small. T is an exact integer (|T| < 2^31), so any order of its sum gives the same bytes; the kernel takes
// it as three dp4a chains, one for each byte of X. Per code word (8 weights) and row:
//   lo = w & 0x0f0f0f0f (the codes of elements 0, 2, 4, 6), hi = (w >> 4) & 0x0f0f0f0f (1, 3, 5, 7);
//   s_p = dp4a(lo, record word 8p + 2k, s_p), then dp4a(hi, record word 8p + 2k + 1, s_p), p = 0, 1, 2
//   (unsigned for bytes 0 and 1, signed for byte 2): 9 instructions, 1.125 a weight;
// per chunk and row: T = (s_2 << 16) + (s_1 << 8) + s_0 (mod 2^32, exact since T fits), one I2F, one
// multiply by the unit and the two closing fmas. The record (7 of its 8 16-byte units) is loaded once a
// chunk and shared by the RW rows a warp carries. Each lane issues the 16-byte loads of U chunks for its
// RW rows before computing any (U·RW loads in flight a lane), then computes them in chunk order. SASS of
// the H200 build: 549 instructions for a round of 2 rows × 4 chunks, 2.1 a weight with the loads, addresses
// and closing steps (192 IDP.4A). An fp32 fma chain of float(q)·x takes 3 instructions a weight at best (4.1–5.0
// as compiled), more than the issue budget; docs/PERFORMANCE.md has the two contracts' token times.
// Kernels: matvec_mlx4_smem_kernel (N ≤ 2, decode: the records in shared memory, persistent blocks), and
// matvec_mlx4_kernel (N of 4 or 8, or x too wide for shared memory: records through L1: the prefill's
// exact path).
// Measured: a 27B token's MLX4 matvecs take 5,030 µs at 1K against a floor of 3,420 at copy bandwidth (H200,
// docs/PERFORMANCE.md).
#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace hkv::cuda {

size_t DMat::nbytes() const { return matrix_bytes(type, rows, cols, group); }

int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    HKV_CUDA_CHECK(cudaGetDevice(&dev));
    HKV_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    return v;
  }();
  return n;
}

namespace {

bool g_stamps = false;  // the dependent decode launches take their STAMP instantiation (mlx4_stamps_begin)

constexpr int kWarps = 8;
// The norm weights a block reads before pdl_wait (the 27B hidden size; the rest after).
constexpr int kNormPreload = 5120;
// matvec_mlx4_smem_kernel's opt bits
constexpr unsigned kOptStage = 1u, kOptNormW = 2u, kOptTrigger = 16u;
// (opt >> kOptPfShift) & 0xff: the chunks a lane prefetches into L2 for each row of its first row group before pdl_wait
constexpr unsigned kOptPfShift = 16u;
// The decode kernel's choices (Tuning): tu.mv_stage, the staging of x's records from xq 8 loads a thread at a time
// (kOptStage); tu.mv_normw, its norm weights read before pdl_wait (kOptNormW); tu.mv_prefetch, what a lane prefetches
// into L2 for each row of its first row group before pdl_wait: 3 (the default: its first round, U chunks; 8 MB a
// 20-warp launch), 6 or 9 (two or three rounds), 1 (one chunk) or 0 (none). The dependent decode launch lets its own
// dependent launch at its start (kOptTrigger, griddepcontrol.launch_dependents), so that the next kernel's blocks take
// each multiprocessor as this launch's block there ends and read their norm weights and prefetch before their
// pdl_wait; the next kernel reads nothing this one writes before its own pdl_wait, which waits for this whole grid.
// With the trigger the next launch's prefetch overlaps this one's tail: a whole round is then the fastest prefetch
// (docs/PERFORMANCE.md has the A-B figures).
constexpr int kSmemMax = 2 * 17408 * 4;  // x of two inputs of the widest matrix (the 27B down_proj)

// Phase stamps (hkv bench-ops --chain --phases; only the STAMP instantiations, which mlx4_stamps_begin selects, touch
// them): for each decode launch, over its blocks, the earliest and the latest %globaltimer (ns) at a block's start,
// after its pdl_wait, once x's records are in its shared memory, and at each warp's end (kStampWords words a launch:
// min, max of each). The launch's slot is g_stamp_launch, read at a block's start; the last block to end moves it
// on (the chain's next launch starts after this one has completed, so it reads the new slot).
// After a launch's kStampWords words, three words a multiprocessor (kStampSms at most): the latest %globaltimer at
// which a block on it had x's records staged, the latest at which a warp on it ended, and the earliest at which a
// warp on it ended (the spread of the tail over the multiprocessors and within each, hkv bench-ops --phases).
constexpr int kStampWords = 8, kStampSms = 256, kSlotWords = kStampWords + 3 * kStampSms;
__device__ unsigned long long* g_stamp_buf;
__device__ unsigned g_stamp_launch, g_stamp_done, g_stamp_cap;

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void stamp(unsigned slot, int word, unsigned long long t) {
  if (slot >= g_stamp_cap) return;
  unsigned long long* p = g_stamp_buf + size_t(slot) * kSlotWords + word;
  atomicMin(p, t);
  atomicMax(p + 1, t);
}
// word 0: records staged (latest), 1: a warp's end (latest), 2: a warp's end (earliest); the multiprocessor this
// runs on
__device__ __forceinline__ void stamp_sm(unsigned slot, int word, unsigned long long t) {
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  if (slot >= g_stamp_cap || sm >= unsigned(kStampSms)) return;
  unsigned long long* p = g_stamp_buf + size_t(slot) * kSlotWords + kStampWords + word * kStampSms + sm;
  if (word == 2)
    atomicMin(p, t);
  else
    atomicMax(p, t);
}

// xq[n][c]: a block covers 8 chunks of one row, warp w the record of chunk 8·blockIdx.x + w (xq_chunk).
__global__ void xq_records_kernel(const float* X, int64_t ldx, int64_t nch, uint32_t* xq) {
  pdl_wait();     // launch_k (device.cuh): nothing is read or written before the kernel ahead has completed
  pdl_trigger();  // the matvec that reads xq may launch (it waits for this grid before reading)
  __shared__ float4 vs4[8][8];  // each warp's chunk
  const int64_t n = blockIdx.y, c = int64_t(blockIdx.x) * 8 + (threadIdx.x >> 5);
  if (c >= nch) return;  // a whole warp
  const float v = X[n * ldx + 32 * c + (threadIdx.x & 31)];
  float4* c4 = vs4[threadIdx.x >> 5];
  reinterpret_cast<float*>(c4)[threadIdx.x & 31] = v;
  __syncwarp();
  xq_chunk(v, c4, xq + (n * nch + c) * kXqWords);
}

template <WType T>
__device__ __forceinline__ float dense_at(const void* row, int64_t j) {
  if constexpr (T == WType::F32)
    return static_cast<const float*>(row)[j];
  else if constexpr (T == WType::BF16)
    return hkv::f32_from_bf16(static_cast<const uint16_t*>(row)[j]);
  else
    return hkv::f32_from_f16(static_cast<const uint16_t*>(row)[j]);
}

struct Tasks {
  MatTask t[kMaxTasks];
  int64_t block_start[kMaxTasks + 1];
  int n;
};

// The task of unit b (a block, or a row group), and b's index within that task.
__device__ __forceinline__ int find_task(const Tasks& ts, int64_t b, int64_t& local) {
  int i = 0;
#pragma unroll
  for (int k = 1; k < kMaxTasks; k++)
    if (k < ts.n && b >= ts.block_start[k]) i = k;
  local = b - ts.block_start[i];
  return i;
}

template <WType T, int NB>
__global__ void __launch_bounds__(kWarps * 32) matvec_dense_kernel(Tasks ts, const float* X, int64_t ldx, bool vec) {
  constexpr int width = T == WType::F32 ? 4 : 8;
  constexpr int esize = T == WType::F32 ? 4 : 2;
  int64_t local;
  const MatTask& task = ts.t[find_task(ts, blockIdx.x, local)];
  const DMat& W = task.W;
  const int lane = threadIdx.x & 31;
  const int64_t r = local * kWarps + (threadIdx.x >> 5);
  if (r >= W.rows) return;
  const int64_t n = W.cols, nchunks = (n + width - 1) / width;
  const char* wrow = static_cast<const char*>(W.data) + r * n * esize;
  float acc[NB];
#pragma unroll
  for (int b = 0; b < NB; b++) acc[b] = 0.0f;
  for (int64_t c = lane; c < nchunks; c += 32) {
    float w[width];
    if (vec) {
      uint4 u = __ldg(reinterpret_cast<const uint4*>(wrow) + c);
      if constexpr (T == WType::F32) {
        w[0] = __uint_as_float(u.x), w[1] = __uint_as_float(u.y), w[2] = __uint_as_float(u.z),
        w[3] = __uint_as_float(u.w);
      } else {
        uint32_t v4[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 8; i++) {
          uint16_t h = uint16_t(v4[i / 2] >> (16 * (i % 2)));
          w[i] = T == WType::BF16 ? hkv::f32_from_bf16(h) : hkv::f32_from_f16(h);
        }
      }
#pragma unroll
      for (int b = 0; b < NB; b++) {
        const float4* x4 = reinterpret_cast<const float4*>(X + b * ldx + c * width);
#pragma unroll
        for (int i = 0; i < width / 4; i++) {
          float4 xv = x4[i];
          acc[b] = hkv::fma_rn(w[4 * i + 0], xv.x, acc[b]);
          acc[b] = hkv::fma_rn(w[4 * i + 1], xv.y, acc[b]);
          acc[b] = hkv::fma_rn(w[4 * i + 2], xv.z, acc[b]);
          acc[b] = hkv::fma_rn(w[4 * i + 3], xv.w, acc[b]);
        }
      }
    } else {
      for (int64_t j = c * width; j < c * width + width && j < n; j++) {
        float wj = dense_at<T>(wrow, j);
#pragma unroll
        for (int b = 0; b < NB; b++) acc[b] = hkv::fma_rn(wj, X[b * ldx + j], acc[b]);
      }
    }
  }
#pragma unroll
  for (int b = 0; b < NB; b++) {
    float v = warp_tree_sum(acc[b]);
    if (lane == 0) {
      float* y = task.y + b * task.ldy + r;
      *y = task.add ? *y + v : v;
    }
  }
}

// Chunk c (32 weights) of RW rows into their accumulators: u[r] holds row r's 32 codes, sb[r] and bb[r] the
// bf16 scale and bias of the chunk's group; rec_at(n, c, P) gives units 0..6 of the record of chunk c of
// input n. T = Σ q_j·X_j by three dp4a chains (see the top of the file), qx = float(T)·unit, then
// acc = fma(s, qx, fma(b, xsum_c, acc)).
template <int NB, int RW, class RecAt>
__device__ __forceinline__ void mlx4_chunk(const uint4 (&u)[RW], const uint16_t (&sb)[RW], const uint16_t (&bb)[RW],
                                           int c, RecAt rec_at, float (&acc)[RW][NB]) {
#pragma unroll
  for (int n = 0; n < NB; n++) {
    uint32_t P[28];  // record words 0..27
    rec_at(n, c, reinterpret_cast<uint4(&)[7]>(P));
#pragma unroll
    for (int r = 0; r < RW; r++) {
      const uint32_t w4[4] = {u[r].x, u[r].y, u[r].z, u[r].w};
      uint32_t s0 = 0, s1 = 0;
      int s2 = 0;
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const uint32_t lo = w4[k] & 0x0f0f0f0fu, hi = (w4[k] >> 4) & 0x0f0f0f0fu;
        s0 = __dp4a(lo, P[2 * k], s0);
        s0 = __dp4a(hi, P[2 * k + 1], s0);
        s1 = __dp4a(lo, P[8 + 2 * k], s1);
        s1 = __dp4a(hi, P[8 + 2 * k + 1], s1);
        s2 = __dp4a(int(lo), int(P[16 + 2 * k]), s2);
        s2 = __dp4a(int(hi), int(P[16 + 2 * k + 1]), s2);
      }
      const int T = int((uint32_t(s2) << 16) + (s1 << 8) + s0);
      const float qx = __int2float_rn(T) * __uint_as_float(P[25]);
      acc[r][n] = hkv::fma_rn(hkv::f32_from_bf16(sb[r]), qx,
                              hkv::fma_rn(hkv::f32_from_bf16(bb[r]), __uint_as_float(P[24]), acc[r][n]));
    }
  }
}

// One row group, the body of both MLX4 kernels: rows r0 … r0 + RW − 1 of the task's matrix, each lane's
// chunks lane, lane + 32, … in rounds of U (the weight loads of a round issued before any is used), the
// chunks in index order, the lane tree and the store. rec_at(n, c, P) gives units 0..6 of the record of
// chunk c of input n; STREAM loads the weights with the streaming hint (each is read once a token). before(m), where
// given, runs ahead of the m-th chunk of every lane (chunks 32m … 32m + 31: columns 1024m … 1024m + 1023), once a row
// group and after that chunk's round is loaded, by the whole warp together where nch is a multiple of 32 (the chain's
// slices, matvec_chain_slices_kernel).
struct NoHook {
  __device__ void operator()(int) const {}
};
template <int NB, int RW, int U, bool STREAM, class RecAt, class Before = NoHook>
__device__ __forceinline__ void mlx4_rows(const MatTask& task, int64_t r0, int lane, RecAt rec_at, Before before = {}) {
  const DMat& W = task.W;
  const int cols = int(W.cols), nch = cols / 32, gpr = cols / W.group;  // 32-bit: no 64-bit divisions
  const int gshift = W.group == 32 ? 0 : W.group == 64 ? 1 : 2;         // chunk c lies in group c >> gshift
  const uint4* q[RW];
  const uint16_t *srow[RW], *brow[RW];
#pragma unroll
  for (int r = 0; r < RW; r++) {
    const int64_t rr = r0 + r < W.rows ? r0 + r : W.rows - 1;  // a missing row re-reads the last (not stored)
    q[r] = reinterpret_cast<const uint4*>(static_cast<const uint32_t*>(W.data) + rr * (cols / 8));
    srow[r] = W.scales + rr * gpr;
    brow[r] = W.biases + rr * gpr;
  }
  float acc[RW][NB];
#pragma unroll
  for (int r = 0; r < RW; r++)
#pragma unroll
    for (int n = 0; n < NB; n++) acc[r][n] = 0.0f;
  for (int c0 = lane, m0 = 0; c0 < nch; c0 += 32 * U, m0 += U) {
    uint4 u[U][RW];
    uint16_t sb[U][RW], bb[U][RW];
#pragma unroll
    for (int k = 0; k < U; k++) {
      const int c = c0 + 32 * k;
      if (c < nch) {
#pragma unroll
        for (int r = 0; r < RW; r++) {
          u[k][r] = STREAM ? __ldcs(q[r] + c) : __ldg(q[r] + c);
          sb[k][r] = __ldg(srow[r] + (c >> gshift));
          bb[k][r] = __ldg(brow[r] + (c >> gshift));
        }
      }
    }
#pragma unroll
    for (int k = 0; k < U; k++) {
      const int c = c0 + 32 * k;
      if (c >= nch) break;
      before(m0 + k);
      mlx4_chunk<NB, RW>(u[k], sb[k], bb[k], c, rec_at, acc);
    }
  }
#pragma unroll
  for (int r = 0; r < RW; r++)
#pragma unroll
    for (int n = 0; n < NB; n++) {
      const float v = warp_tree_sum(acc[r][n]);
      if (lane == 0 && r0 + r < W.rows) {
        float* y = task.y + n * task.ldy + r0 + r;
        *y = task.add ? *y + v : v;  // the residual add h = h + y, one fp32 addition
      }
    }
}

// N of 4 or 8 (and x too wide for shared memory): the records through L1. Warp w of a block carries rows
// (block·kWarps + w)·RW … + RW − 1 of its task's matrix.
template <int NB, int RW, int U>
__global__ void __launch_bounds__(kWarps * 32) matvec_mlx4_kernel(Tasks ts, const uint32_t* xq) {
  int64_t local;
  const MatTask& task = ts.t[find_task(ts, blockIdx.x, local)];
  const int64_t r0 = (local * kWarps + (threadIdx.x >> 5)) * RW;
  if (r0 >= task.W.rows) return;
  const int nch = int(task.W.cols / 32);
  mlx4_rows<NB, RW, U, false>(task, r0, int(threadIdx.x & 31), [&](int n, int c, uint4(&P)[7]) {
    const uint4* rec = reinterpret_cast<const uint4*>(xq) + (int64_t(n) * nch + c) * (kXqWords / 4);
#pragma unroll
    for (int v = 0; v < 7; v++) P[v] = __ldg(rec + v);
  });
}

// Where unit i of the records (16-byte unit i % 8 of chunk i / 8) lies in the decode kernel's shared memory: unit v of
// chunk c at 8c + (v ^ (c & 7)) (below).
__device__ __forceinline__ int xs4_slot(int i) { return 8 * (i >> 3) + ((i & 7) ^ ((i >> 3) & 7)); }
// Units 0..6 of staged chunk i's records (chunk c of input n is i = n·nch + c) into P, read back through the swizzle.
__device__ __forceinline__ void xs4_record(const uint4* xs4, int i, uint4 (&P)[7]) {
  const uint4* base = xs4 + i * 8;
  const int sw = i & 7;
#pragma unroll
  for (int v = 0; v < 7; v++) P[v] = base[v ^ sw];
}

// The decode kernel (N = 1 or 2). x's records are staged once per block in shared memory, 16-byte unit v
// (0..7) of chunk c at 8c + (v ^ (c & 7)): the eight lanes of a quarter-warp, which read one unit of eight
// consecutive chunks, hit eight different 16-byte bank groups (no conflicts). Blocks are persistent:
// grid = what fits on the card, and each warp walks row groups g = warp id, + total warps, …; a group is
// RW consecutive rows of one task (tasks concatenated), so a block's warps may serve several matrices.
// A warp loads a round (the 16-byte chunks lane, lane + 32, … of U chunks for its RW rows), then computes
// it in chunk order; occupancy (20 warps an SM, or 2 blocks of 8 warps; see u3_fits_better) hides what it can, with
// no register double buffer and no cp.async pipeline of the weights, both slower (docs/PERFORMANCE.md).

// The records of chunk c (32 values, element j at v[j·vstride]) into its 7 used 16-byte units (unit u at
// dst[u ^ sw]), the bytes xq_chunk writes (device.cuh): the sum in index order, the largest |v| as bits
// (finite values order as floats), X_j = xq_int(v_j, e); unit u < 6 holds plane u/2 of elements 16·(u%2) …,
// word (8p + 2k + par) byte b being byte p of X_{8k + 2b + par}; unit 6 the sum, the unit and two zeros. One
// thread a chunk.
__device__ __forceinline__ void record_of_chunk(const float* v, int vstride, uint4* dst, int sw) {
  float s = 0.0f;
  uint32_t mb = 0u;
#pragma unroll 8
  for (int j = 0; j < 32; j++) {
    const float x = v[j * vstride];
    s = s + x;
    mb = max(mb, hkv::f32_bits(x) & 0x7fffffffu);
  }
  const bool bad = mb >= 0x7f800000u;  // an inf or NaN: X = 0, the sum and the unit the one NaN
  const bool live = !bad && mb != 0u;  // else X = 0
  const int e = live ? hkv::xq_exponent(mb) : 0;
  // xq_int(x, e) with its steps taken once a chunk: k = 21 − e; x · 2^127 first where k > 127 (else x · 1, the
  // same float), then · 2^k'; round_even_small's (y + 1.5·2^23) holds the integer in its low bits, as
  // bits(y + 1.5·2^23) − bits(1.5·2^23) for |y| ≤ 2^22 (the binade [2^23, 2^24) has unit 1), no conversion.
  const int k = 21 - e;
  const float s1 = k > 127 ? hkv::exp2i(127) : 1.0f, s2 = hkv::exp2i(k > 127 ? k - 127 : k);
#pragma unroll
  for (int half = 0; half < 2; half++) {  // elements 16·half … 16·half + 15: units half, 2 + half, 4 + half
    int32_t X[16];
#pragma unroll
    for (int j = 0; j < 16; j++) {
      const float y = (v[(16 * half + j) * vstride] * s1) * s2 + 12582912.0f;
      X[j] = live ? int32_t(hkv::f32_bits(y) - 0x4b400000u) : 0;
    }
#pragma unroll
    for (int p = 0; p < 3; p++) {
      uint32_t w[4];  // words 8p + 2k + par for k = 2·half, 2·half + 1
#pragma unroll
      for (int q = 0; q < 4; q++) {
        const int k = q >> 1, par = q & 1;  // elements 8k + par + 2b, b = 0..3, of this half
        const unsigned sel = unsigned(p) | unsigned(4 + p) << 4;
        const uint32_t lo = __byte_perm(uint32_t(X[8 * k + par]), uint32_t(X[8 * k + par + 2]), sel);
        const uint32_t hi = __byte_perm(uint32_t(X[8 * k + par + 4]), uint32_t(X[8 * k + par + 6]), sel);
        w[q] = __byte_perm(lo, hi, 0x5410u);
      }
      dst[(2 * p + half) ^ sw] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
  const uint32_t unit = bad ? 0x7fc00000u : mb == 0 ? 0u : hkv::f32_bits(hkv::xq_unit(e));
  dst[6 ^ sw] = make_uint4(bad ? 0x7fc00000u : hkv::f32_bits(s), unit, 0u, 0u);
}

// The prologue of a launch that makes its x's records (XSource): for each input n, the block stages x[n] (or
// h = x[n] for the norm: warp 0 takes the sum of squares in sum_squares' order, r = rsqrt_c(ss / cols + eps),
// and every element (h·r)·(1 + w), or (h·r)·w when plain, as add_rmsnorm_kernel), the values transposed
// (element 32c + j at vt[j·(nch + 1) + c], so that thread c reads chunk c without bank conflicts), then thread c
// makes chunk c's record into the swizzled records xs4. hs: cols floats (the norm only); vt: 32·(nch + 1).
// pre: the norm weights of elements tid + k·T, k < P, are already in wpre (loaded before the launch's pdl_wait; the
// rest are read here).
template <int NB, int T, int P>
__device__ void make_records(const XSource& src, int cols, uint4* xs4, float* hs, float* vt, const float (&wpre)[P],
                             bool pre) {
  const int nch = cols / 32, tp = nch + 1, tid = threadIdx.x;
  __shared__ float r_s;
  for (int n = 0; n < NB; n++) {
    const float* x = src.x + int64_t(n) * src.ldx;
    if (src.norm_w) {
      for (int i = tid; i < cols; i += T) hs[i] = x[i];
      __syncthreads();
      if (tid < 32) {
        const float acc = warp_sum_squares_smem<false>(hs, cols, tid);  // cols is a multiple of 32
        if (tid == 0) r_s = hkv::rsqrt_c(acc / float(cols) + src.eps);
      }
      __syncthreads();
      const float r = r_s;
      auto put = [&](int i, float w) {
        vt[(i & 31) * tp + (i >> 5)] = src.plain ? (hs[i] * r) * w : (hs[i] * r) * (1.0f + w);
      };
      int i0 = tid;
      if (pre) {
#pragma unroll
        for (int k = 0; k < P; k++)
          if (tid + k * T < cols) put(tid + k * T, wpre[k]);
        i0 = tid + P * T;
      }
      for (int i = i0; i < cols; i += T) put(i, src.norm_w[i]);
    } else {
      for (int i = tid; i < cols; i += T) vt[(i & 31) * tp + (i >> 5)] = x[i];
    }
    __syncthreads();
    for (int c = tid; c < nch; c += T) {
      const int cc = n * nch + c;
      record_of_chunk(vt + c, tp, xs4 + 8 * cc, cc & 7);
    }
    __syncthreads();  // vt and hs are reused by the next input
  }
}

// WARPS warps a block, MINB blocks a multiprocessor at least (the register cap). src.x null: the records come
// from xq; else the block makes them (make_records; the shared memory then also holds hs and vt after them).
// STAMP: the phase stamps above (a diagnostic instantiation; the default launches never take it).
// opt: kOptStage, the records from xq staged 8 loads a thread at a time (HKV_MV_STAGE); kOptNormW, the norm's
// weights read into registers at the start, before pdl_wait (HKV_MV_NORMW); kOptPfShift, the chunks of each first row
// a lane prefetches into L2 before pdl_wait (HKV_MV_PF); kOptTrigger, the dependent launch let go at the start (every
// launch but the stamped ones). None changes a byte.
template <int NB, int RW, int U, bool PDL, int MINB, int WARPS, bool STAMP = false>
__global__ void __launch_bounds__(WARPS * 32, MINB)
    matvec_mlx4_smem_kernel(Tasks ts, const uint32_t* xq, XSource src, unsigned opt) {
  extern __shared__ uint4 xs4[];                                 // [NB][nch·8], swizzled
  constexpr int T = WARPS * 32, P = (kNormPreload + T - 1) / T;  // P: the norm weights a thread preloads
  const int cols = int(ts.t[0].W.cols), nch = cols / 32;
  const int lane = threadIdx.x & 31;
  const int64_t total = ts.block_start[ts.n], stride = int64_t(gridDim.x) * WARPS;
  unsigned slot = 0;
  if constexpr (STAMP) {
    slot = g_stamp_launch;
    if (threadIdx.x == 0) stamp(slot, 0, global_ns());
  }
  if constexpr (PDL) {
    if (opt & kOptTrigger) pdl_trigger();
  }
  float wpre[P];  // norm weights (read-only) in flight while the kernel ahead finishes
  const bool pre = src.x && src.norm_w && (opt & kOptNormW);
  if (pre) {
#pragma unroll
    for (int k = 0; k < P; k++) wpre[k] = threadIdx.x + k * T < cols ? __ldg(src.norm_w + threadIdx.x + k * T) : 0.0f;
  }
  if constexpr (PDL) {  // launched as a dependent: the first weights (read-only) go to L2 while x is produced
    const int64_t g = int64_t(blockIdx.x) * WARPS + (threadIdx.x >> 5);
    if (g < total) {
      int64_t local;
      const MatTask& task = ts.t[find_task(ts, g, local)];
      const int64_t rows = task.W.rows;
      for (int r = 0; r < RW && local * RW + r < rows; r++) {
        const uint4* q = reinterpret_cast<const uint4*>(task.W.data) + (local * RW + r) * (cols / 32);
        const int pf = int(opt >> kOptPfShift) & 0xff;
        for (int k = 0; k < pf && lane + 32 * k < nch; k++) prefetch_l2(q + lane + 32 * k);
      }
    }
    pdl_wait();
  }
  if constexpr (STAMP) {
    if (threadIdx.x == 0) stamp(slot, 2, global_ns());
  }
  if (src.x) {
    float* hs = reinterpret_cast<float*>(xs4 + NB * nch * 8);
    make_records<NB, T>(src, cols, xs4, hs, hs + (src.norm_w ? cols : 0), wpre, pre);
  } else {
    // c counts the chunks of all NB inputs; unit v of chunk c to its swizzled place. Staged: 8 loads a thread in
    // flight before any store (one load per iteration left the down_proj's 70 KB to 7 round trips a thread)
    const uint4* x4 = reinterpret_cast<const uint4*>(xq);
    const int units = NB * nch * 8;
    auto place = [&](int i, const uint4& u) { xs4[xs4_slot(i)] = u; };
    if (opt & kOptStage) {
      for (int i0 = threadIdx.x; i0 < units; i0 += 8 * T) {
        uint4 u[8];
#pragma unroll
        for (int j = 0; j < 8; j++)
          if (i0 + j * T < units) u[j] = __ldg(x4 + i0 + j * T);
#pragma unroll
        for (int j = 0; j < 8; j++)
          if (i0 + j * T < units) place(i0 + j * T, u[j]);
      }
    } else {  // the loop before (one load an iteration)
#pragma unroll 1
      for (int i = threadIdx.x; i < units; i += T) place(i, __ldg(x4 + i));
    }
    __syncthreads();
  }
  if constexpr (STAMP) {
    if (threadIdx.x == 0) {
      const unsigned long long t = global_ns();
      stamp(slot, 4, t);
      stamp_sm(slot, 0, t);
    }
  }
  for (int64_t g = int64_t(blockIdx.x) * WARPS + (threadIdx.x >> 5); g < total; g += stride) {
    int64_t local;
    const int t = find_task(ts, g, local);
    mlx4_rows<NB, RW, U, true>(ts.t[t], local * RW, lane,
                               [&](int n, int c, uint4(&P)[7]) { xs4_record(xs4, n * nch + c, P); });
  }
  if constexpr (STAMP) {
    if (lane == 0) {
      const unsigned long long t = global_ns();
      stamp(slot, 6, t);
      stamp_sm(slot, 1, t);
      stamp_sm(slot, 2, t);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      if (atomicAdd(&g_stamp_done, 1u) == gridDim.x - 1) {  // the launch's last block: the next launch's slot
        g_stamp_done = 0;
        __threadfence();
        atomicAdd(&g_stamp_launch, 1u);
      }
    }
  }
}

// The tasks of a launch and, in block_start, the prefix sums of their units (blocks of kWarps rows for
// dense, of kWarps·RW rows for the MLX4 L1 kernel; row groups of RW rows for the shared-memory kernel).
Tasks make_tasks(const MatTask* tasks, int n, int64_t rows_per_block) {
  Tasks ts{};
  ts.n = n;
  int64_t b = 0;
  for (int i = 0; i < n && i < kMaxTasks; i++) {  // (n ≤ kMaxTasks: matvec_multi checks)
    ts.t[i] = tasks[i];
    ts.block_start[i] = b;
    b += (tasks[i].W.rows + rows_per_block - 1) / rows_per_block;
  }
  ts.block_start[n] = b;
  return ts;
}

// The grid of a persistent kernel with `units` row groups for its warps: as many blocks of `warps` warps as
// the card holds at this shared-memory size, no more than the units need. The occupancy is asked once per
// kernel and size (a decode token launches the MLX4 kernel ~500 times over 3 sizes); the first call for a
// kernel also lets it use up to max_smem.
int64_t persistent_grid(const void* kernel, int warps, size_t smem, size_t max_smem, int64_t units) {
  static std::map<std::pair<const void*, size_t>, int> per_sm;
  auto it = per_sm.find({kernel, smem});
  if (it == per_sm.end()) {
    HKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(max_smem)));
    int blocks = 0;
    HKV_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, warps * 32, smem));
    it = per_sm.emplace(std::make_pair(kernel, smem), std::max(blocks, 1)).first;
  }
  const int64_t want = (units + warps - 1) / warps;
  return std::max<int64_t>(1, std::min<int64_t>(want, int64_t(it->second) * sm_count()));
}

// The decode launches of one input (N = 1) under 16K rows (q|k|v, o, DeltaNet out, down) take 2 rows a warp and 3
// chunks a round (2 rounds for 6144 columns; the down_proj's 17 chunks a lane in 6 rounds) in one block of 20 warps a
// multiprocessor, 96 registers: the 2,560 row groups of a 5120-row launch on 128 multiprocessors, one group a warp,
// x's records staged into shared memory once a multiprocessor (the down_proj's are 70 KB). A launch of 16K rows or
// more takes the same launch where that leaves its warps less to carry than 4 rows a warp in 2 blocks of 8 warps
// (u3_fits_better): the 27B gate|up launch's 8,704 groups of 4 rows on 2,112 warps give 256 warps (32 of 264 blocks)
// a fifth group, the rest of the card idle meanwhile; 17,408 groups of 2 rows on 2,640 warps give at most 7 where the
// mean is 6.6. The same bytes (a row's bytes do not depend on the grouping). docs/PERFORMANCE.md has the launches
// these replaced and their token times.

// Whether the 3-chunk launch (2 rows a warp, one block of 20 warps a multiprocessor) leaves a bandwidth-bound
// launch of these tasks less time than 4 rows a warp in 2 blocks of 8 warps: each warp's time is the rows it
// carries, ⌈groups / warps⌉ groups of RW rows, over its share of its multiprocessor's bandwidth (1/20 or 1/16).
bool u3_fits_better(const MatTask* tasks, int n) {
  auto cost = [&](int64_t rw, int64_t warps_per_sm) {
    int64_t groups = 0;
    for (int i = 0; i < n; i++) groups += (tasks[i].W.rows + rw - 1) / rw;
    const int64_t warps = warps_per_sm * sm_count();
    return (groups + warps - 1) / warps * rw * warps_per_sm;
  };
  return cost(2, 20) < cost(4, 16);
}

// The decode kernel's shared memory: the records of NB inputs, and, when the launch makes them (made), the staged
// values (cols floats, for the norm only) and their transpose (32 · (cols/32 + 1) floats).
size_t smem_bytes(int nb, int64_t cols, bool made, bool norm) {
  size_t b = size_t(nb) * size_t(cols) * 4;
  if (made) b += (norm ? size_t(cols) * 4 : 0) + size_t(32) * size_t(cols / 32 + 1) * 4;
  return b;
}
size_t smem_bytes(int nb, int64_t cols, const XSource& src) {
  return smem_bytes(nb, cols, src.x != nullptr, src.norm_w != nullptr);
}

template <int NB, int RW, int U, int MINB = 2, int WARPS = kWarps>
void launch_mlx4_smem(const MatTask* tasks, int n, const uint32_t* xq, const XSource& src, cudaStream_t st,
                      const Tuning& tu) {
  const Tasks ts = make_tasks(tasks, n, RW);  // block_start: here the first row group of each task
  const int64_t g = ts.block_start[n];
  if (g == 0) return;
  const size_t smem = smem_bytes(NB, tasks[0].W.cols, src);
  const int pf = tu.mv_prefetch;  // 0, 1 chunk, or 1, 2, 3 rounds of U
  unsigned opt = (tu.mv_stage ? kOptStage : 0u) | (tu.mv_normw ? kOptNormW : 0u);
  opt |= unsigned(pf <= 1 ? pf : pf / 3 * U) << kOptPfShift;
  // The phase stamps (mlx4_stamps_begin) need each launch to start after the one before it has completed (a block reads
  // its launch's slot at its start): under them the launches do not let their dependents go early.
  if (!g_stamps) opt |= kOptTrigger;
  if (tu.pdl) {  // a dependent launch (see matvec_mlx4_smem_kernel)
    auto kernel = g_stamps ? matvec_mlx4_smem_kernel<NB, RW, U, true, MINB, WARPS, true>
                           : matvec_mlx4_smem_kernel<NB, RW, U, true, MINB, WARPS>;
    const int64_t grid = persistent_grid(reinterpret_cast<const void*>(kernel), WARPS, smem, kSmemMax, g);
    launch_pdl(kernel, dim3(unsigned(grid)), dim3(WARPS * 32), smem, st, ts, xq, src, opt);
    return;
  }
  auto kernel = matvec_mlx4_smem_kernel<NB, RW, U, false, MINB, WARPS>;
  const int64_t grid = persistent_grid(reinterpret_cast<const void*>(kernel), WARPS, smem, kSmemMax, g);
  kernel<<<unsigned(grid), WARPS * 32, smem, st>>>(ts, xq, src, opt);
  HKV_CHECK_LAUNCH();
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <int NB, int RW, int U>
void launch_mlx4(const MatTask* tasks, int n, const uint32_t* xq, cudaStream_t st) {
  const Tasks ts = make_tasks(tasks, n, int64_t(kWarps) * RW);
  if (ts.block_start[n] == 0) return;
  matvec_mlx4_kernel<NB, RW, U><<<unsigned(ts.block_start[n]), kWarps * 32, 0, st>>>(ts, xq);
  HKV_CHECK_LAUNCH();
}

// N = 1 or 2 with x in shared memory (the decode path): RW rows a warp and U chunks in flight a lane for
// a shape. Wider inputs, or x over kSmemMax, take matvec_mlx4_kernel (x through L1).
template <int NB>
void dispatch_mlx4(const MatTask* tasks, int n, int64_t rows, int64_t cols, const uint32_t* xq, const XSource& src,
                   cudaStream_t st, const Tuning& tu) {
  if (smem_bytes(NB, cols, src) > size_t(kSmemMax)) {  // (matvec_fuses_records refuses src here)
    launch_mlx4<NB, 1, 2>(tasks, n, xq, st);
    return;
  }
  const int64_t per_lane = (cols / 32 + 31) / 32;
  if constexpr (NB == 1) {  // these configurations are instantiated for one input only
    if (rows >= 16384 && !u3_fits_better(tasks, n)) {
      per_lane >= 4 ? launch_mlx4_smem<NB, 4, 2>(tasks, n, xq, src, st, tu)
                    : launch_mlx4_smem<NB, 4, 1>(tasks, n, xq, src, st, tu);
    } else {  // 3 chunks a round, one block of 20 warps (see u3_fits_better)
      launch_mlx4_smem<NB, 2, 3, 1, 20>(tasks, n, xq, src, st, tu);
    }
    return;
  }
  per_lane >= 4 ? launch_mlx4_smem<NB, 2, 4>(tasks, n, xq, src, st, tu)
                : launch_mlx4_smem<NB, 2, 2>(tasks, n, xq, src, st, tu);
}

template <int NB>
void launch(const MatTask* tasks, int n, const float* X, int64_t ldx, const uint32_t* xq, bool vec, int64_t rows,
            const XSource& src, cudaStream_t st, const Tuning& tu) {
  const WType type = tasks[0].W.type;
  if (type == WType::MLX4) {
    if constexpr (NB <= 2)
      dispatch_mlx4<NB>(tasks, n, rows, tasks[0].W.cols, xq, src, st, tu);
    else {  // several inputs: one row a warp, fewer chunks in flight (the inputs' accumulators use registers)
      launch_mlx4<NB, 1, 2>(tasks, n, xq, st);
    }
    return;
  }
  const Tasks ts = make_tasks(tasks, n, kWarps);
  if (ts.block_start[n] == 0) return;
  const dim3 grid(unsigned(ts.block_start[n])), block(kWarps * 32);
  switch (type) {
    case WType::F32:
      matvec_dense_kernel<WType::F32, NB><<<grid, block, 0, st>>>(ts, X, ldx, vec);
      break;
    case WType::BF16:
      matvec_dense_kernel<WType::BF16, NB><<<grid, block, 0, st>>>(ts, X, ldx, vec);
      break;
    case WType::F16:
      matvec_dense_kernel<WType::F16, NB><<<grid, block, 0, st>>>(ts, X, ldx, vec);
      break;
    default:
      break;
  }
  HKV_CHECK_LAUNCH();
}

// ---- a chain of decode launches as one persistent launch (hkv bench-ops --chain --persistent) ----
// matvec_chain_kernel runs the MLX4 decode products of a list of steps (each step one matvec_multi launch's tasks,
// reading its fixed records xq, N = 1) as one launch of resident blocks, in the steps' order: no item of step k
// starts its products before every item of step k − 1 has stored its rows, as consecutive launches on a stream. An
// item is WARPS row groups of RW rows of one step (one a warp, the decode kernel's row groups); block b takes items
// b, b + grid, b + 2·grid, … in order, so every step's items are spread over the whole card. When a block reaches a
// new step it first prefetches into L2 the first round (U chunks a row) of each of its warps' rows, then waits
// (thread 0, an acquire load of the previous step's count, sleeping between tries), then stages the step's records
// into shared memory as the decode kernel does; an item ends with a barrier and thread 0 adding one to its step's
// count (after a fence). Each warp's rows are mlx4_rows', so every row's bytes are matvec_multi's (a row's bytes do
// not depend on how rows are grouped or launched). Every block must be resident (the grid is the occupancy): block b
// waits only on items of earlier steps, which blocks before it in their own lists have or will run.
// Measured (H100, docs/RESULTS.md §11): a 27B token's 257 steps in 8.6 ms against 5.6 ms as 257 launches in one
// graph; the barrier that closes each item makes a block's warps wait on its slowest every 32 rows.
// The chain kernels' shared steps. chain_enter: a block reaching step `step` (ts) prefetches into L2 the first round
// of each warp's first rows (group_rows: its row group g; none where first.task is null), waits (thread 0) until
// done[step − 1] reaches need, then stages the step's records xq into xs4 between two barriers. chain_rows: warp's
// row group g of ts from the staged records. chain_count: after a barrier (the block's rows stored), thread 0 adds one
// to done[step] after a fence.
// The warp's first rows: rows r0 … r0 + nr − 1 of task (null: none).
struct FirstRows {
  const MatTask* task = nullptr;
  int64_t r0 = 0;
  int nr = 0;
};
template <int RW>
__device__ __forceinline__ FirstRows group_rows(const Tasks& ts, int64_t g) {
  if (g >= ts.block_start[ts.n]) return {};
  int64_t local;
  const MatTask& task = ts.t[find_task(ts, g, local)];
  return {&task, local * RW, RW};
}
// Until *word (a count in global memory, acquired) reaches want, sleeping between tries.
__device__ __forceinline__ void spin_until_ge(const unsigned* word, unsigned want) {
  for (unsigned tries = 0;; tries++) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(word) : "memory");
    if (v >= want) return;
    if (tries > (1u << 26)) __trap();  // seconds without progress: a grid that is not all resident
    __nanosleep(64);
  }
}
template <int U, int WARPS>
__device__ __forceinline__ void chain_enter(const Tasks& ts, FirstRows first, int lane, const unsigned* done, int step,
                                            unsigned need, const uint32_t* xq, uint4* xs4,
                                            unsigned long long* st4 = nullptr) {
  const int nch = int(ts.t[0].W.cols / 32);
  if (first.task) {  // this warp's first round (its chunks lane + 32·k, k < U) into L2 while the step ahead finishes
    for (int r = 0; r < first.nr && first.r0 + r < first.task->W.rows; r++) {
      const uint4* q = reinterpret_cast<const uint4*>(first.task->W.data) + (first.r0 + r) * nch;
      for (int k = 0; k < U && lane + 32 * k < nch; k++) prefetch_l2(q + lane + 32 * k);
    }
  }
  if (step > 0 && threadIdx.x == 0) spin_until_ge(done + step - 1, need);
  __syncthreads();  // the step ahead complete; every warp done with the records staged before
  if (st4 && threadIdx.x == 0) st4[1] = global_ns();
  const uint4* x4 = reinterpret_cast<const uint4*>(xq);
  for (int i = threadIdx.x; i < nch * 8; i += WARPS * 32) xs4[xs4_slot(i)] = __ldg(x4 + i);
  __syncthreads();
  if (st4 && threadIdx.x == 0) st4[2] = global_ns();
}
template <int RW, int U>
__device__ __forceinline__ void chain_rows(const Tasks& ts, int64_t g, int lane, const uint4* xs4) {
  int64_t local;
  const int t = find_task(ts, g, local);
  mlx4_rows<1, RW, U, true>(ts.t[t], local * RW, lane, [&](int, int c, uint4(&P)[7]) { xs4_record(xs4, c, P); });
}
__device__ __forceinline__ void chain_count(unsigned* done, int step, unsigned long long* st4 = nullptr) {
  __syncthreads();
  if (threadIdx.x == 0) {
    if (st4) st4[3] = global_ns();
    __threadfence();
    atomicAdd(done + step, 1u);
  }
}

template <int RW, int U, int WARPS>
__global__ void __launch_bounds__(WARPS * 32, 1)
    matvec_chain_kernel(const Tasks* steps, const int* item_first, int nsteps, unsigned* done,
                        const uint32_t* const* xqs) {
  extern __shared__ uint4 xs4[];  // the current step's records, swizzled as matvec_mlx4_smem_kernel's
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int total = item_first[nsteps];
  int step = 0, staged = -1;
  for (int item = blockIdx.x; item < total; item += gridDim.x) {
    while (item >= item_first[step + 1]) step++;
    const Tasks& ts = steps[step];
    const int64_t g = int64_t(item - item_first[step]) * WARPS + warp;
    if (step != staged) {
      const unsigned need = step > 0 ? unsigned(item_first[step] - item_first[step - 1]) : 0u;
      chain_enter<U, WARPS>(ts, group_rows<RW>(ts, g), lane, done, step, need, xqs[step], xs4);
      staged = step;
    }
    if (g < ts.block_start[ts.n]) chain_rows<RW, U>(ts, g, lane, xs4);
    chain_count(done, step);  // the item's rows stored
  }
}

// matvec_chain_steps_kernel: the same chain with a barrier a step instead of an item (ChainForm::Steps with 16 warps a
// block, StepsWide with 20). A block takes, in each step, the row groups blockIdx·WARPS + warp + i·(grid·WARPS) (the
// decode kernel's striding), each warp through its groups without waiting on the others; a block with no group in a
// step skips it. On reaching a step each warp prefetches into L2 the first round of its first group; then the block
// waits until every block with groups in the step ahead has counted itself there, stages the records, and after its
// last group (a barrier) counts itself in this step. stamps (else null): thread 0 writes %globaltimer at (step, block)
// words 4·(step·grid + block) + 0..3 as the block reaches the step, passes its wait, has staged the records, and has
// stored its rows (before its count); a block with no group in a step writes nothing there (the STAMP instantiations
// alone; the timed ones have no stamps' code). Measured (H100, docs/RESULTS.md §11 2026-12-06-h and -i):
// Steps 7.68–7.81 ms, StepsWide 6.80–6.94 against 5.66–5.76 for the graph of launches; StepsWide spills 44 bytes (96
// registers at 20 warps). Dropped forms, their patches in docs/receipts/: each warp's first round copied into shared
// memory before the wait (7.76–7.77, 2026-12-06-h); a step's rows dealt evenly among the grid's warps, pairs and single
// rows (7.81, 2026-12-06-i); each warp's first 1, 2, 4 or 8 row groups prefetched whole into L2 before the wait
// (7.18–7.60 against 6.84, 2026-12-07-a).
template <int RW, int U, int WARPS, bool STAMP>
__global__ void __launch_bounds__(WARPS * 32, 1)
    matvec_chain_steps_kernel(const Tasks* steps, int nsteps, unsigned* done, const uint32_t* const* xqs,
                              unsigned long long* stamps) {
  extern __shared__ uint4 xs4[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t tw = int64_t(gridDim.x) * WARPS, g0 = int64_t(blockIdx.x) * WARPS;
  // the blocks with a row group in step k: min(grid, its items)
  auto blocks_in = [&](int k) {
    const int64_t items = (steps[k].block_start[steps[k].n] + WARPS - 1) / WARPS;
    return unsigned(items < int64_t(gridDim.x) ? items : int64_t(gridDim.x));
  };
  for (int step = 0; step < nsteps; step++) {
    const Tasks& ts = steps[step];
    const int64_t groups = ts.block_start[ts.n];
    if (g0 >= groups) continue;  // (the whole block)
    unsigned long long* st4 = STAMP ? stamps + (int64_t(step) * gridDim.x + blockIdx.x) * 4 : nullptr;
    if (STAMP && threadIdx.x == 0) st4[0] = global_ns();
    chain_enter<U, WARPS>(ts, group_rows<RW>(ts, g0 + warp), lane, done, step, step > 0 ? blocks_in(step - 1) : 0u,
                          xqs[step], xs4, st4);
    for (int64_t g = g0 + warp; g < groups; g += tw) chain_rows<RW, U>(ts, g, lane, xs4);
    chain_count(done, step, st4);  // the block's rows of this step stored, its records free
  }
}

// matvec_chain_slices_kernel (ChainForm::Slices): the chain with counters a slice of x instead of a step. Step t's x
// is in slices of 1024 columns, S_t of them (nch a multiple of 32): slice m is the m-th chunk of every lane, chunks
// 32m … 32m + 31. Slice m of step t + 1's x is made by step t's row groups g with g·S_{t+1} / G_t = m (G_t its groups;
// chain_slice_of): when a warp has stored a row group of step t it adds one to cnt[t][m] (after __syncwarp, lane 0,
// a fence and the add), and slice m of step t + 1 may be read once cnt[t][m] reaches need[t + 1][m], however far the
// rest of step t has got. Each warp strides through the row groups of every step as the step forms do (groups
// blockIdx·WARPS + warp + i·grid·WARPS), with no barrier: it takes its round's weights, and before its m-th chunk
// (mlx4_rows' before(m)) makes sure that slice m of the step's records is in the block's shared memory. The first warp
// of the block to need it (an atomicMax on claim_s[p][m], p = t & 1) waits (lane 0, an acquire load, sleeping between
// tries) until the slice's count is reached, copies the slice's records (32 chunks, 4 KB) into buffer p, then marks
// ready_s[p][m] = t + 1; the other warps wait for that mark. Step t's records live in buffer t & 1 (the chain_enter
// swizzle), which step t + 2 reuses only once every warp of the block has counted itself done with step t (fin_s[p]).
// Every row's bytes are mlx4_rows' (a row's bytes do not depend on when its chunks' records arrive). Every block must
// be resident, and every wait is on an earlier step, so the chain finishes: the warps of the earliest unfinished step
// wait on nothing that is not done.
constexpr int kChainSlices = 32;  // slices a step's x may have (a mask bit each): 32,768 columns
template <int RW, int U, int WARPS>
__global__ void __launch_bounds__(WARPS * 32, 1)
    matvec_chain_slices_kernel(const Tasks* steps, int nsteps, unsigned* cnt, const unsigned* need,
                               const uint32_t* const* xqs, int buf_units) {
  extern __shared__ uint4 xs4[];  // [2][buf_units]: step t's records in buffer t & 1, swizzled as chain_enter's
  __shared__ unsigned claim_s[2][kChainSlices], ready_s[2][kChainSlices], fin_s[2];
  for (int i = threadIdx.x; i < 2 * kChainSlices; i += WARPS * 32) (&claim_s[0][0])[i] = 0u, (&ready_s[0][0])[i] = 0u;
  if (threadIdx.x < 2) fin_s[threadIdx.x] = 0u;
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t tw = int64_t(gridDim.x) * WARPS, gw = int64_t(blockIdx.x) * WARPS + warp;
  for (int t = 0; t < nsteps; t++) {
    const Tasks& ts = steps[t];
    const int64_t groups = ts.block_start[ts.n];
    const int p = t & 1;
    if (gw < groups) {
      uint4* const buf = xs4 + size_t(p) * size_t(buf_units);
      const uint4* const x4 = reinterpret_cast<const uint4*>(xqs[t]);
      if (t >= 2 && lane == 0) {  // buffer p free: every warp of the block done with step t − 2
        for (;;) {
          const unsigned v = *reinterpret_cast<volatile unsigned*>(&fin_s[p]);
          if (v >= unsigned(WARPS) * unsigned(t >> 1)) break;
          __nanosleep(32);
        }
      }
      __syncwarp();
      const int next_slices = t + 1 < nsteps ? int(steps[t + 1].t[0].W.cols / 1024) : 0;
      unsigned have = 0;  // the slices this warp has seen staged in this step
      auto slice_in = [&](int m) {
        if ((have >> m) & 1u) return;
        have |= 1u << m;
        unsigned mine = 0;
        if (lane == 0) mine = atomicMax(&claim_s[p][m], unsigned(t + 1)) < unsigned(t + 1);
        mine = __shfl_sync(0xffffffffu, mine, 0);
        if (mine) {
          if (t > 0 && lane == 0) spin_until_ge(cnt + (t - 1) * kChainSlices + m, need[t * kChainSlices + m]);
          __syncwarp();
          for (int i = lane; i < 256; i += 32) buf[xs4_slot(256 * m + i)] = __ldg(x4 + 256 * m + i);
          __syncwarp();
          if (lane == 0) {
            __threadfence_block();
            *reinterpret_cast<volatile unsigned*>(&ready_s[p][m]) = unsigned(t + 1);
          }
        } else if (lane == 0) {
          while (*reinterpret_cast<volatile unsigned*>(&ready_s[p][m]) != unsigned(t + 1)) __nanosleep(32);
          __threadfence_block();
        }
        __syncwarp();
      };
      for (int64_t g = gw; g < groups; g += tw) {
        int64_t local;
        const int k = find_task(ts, g, local);
        mlx4_rows<1, RW, U, true>(
            ts.t[k], local * RW, lane, [&](int, int c, uint4(&P)[7]) { xs4_record(buf, c, P); }, slice_in);
        if (next_slices > 0) {  // the row group counted in its slice of step t + 1's x
          __syncwarp();
          if (lane == 0) {
            __threadfence();
            atomicAdd(cnt + t * kChainSlices + chain_slice_of(g, groups, next_slices), 1u);
          }
        }
      }
    }
    __syncwarp();  // the warp done with step t's records
    if (lane == 0) atomicAdd(&fin_s[p], 1u);
  }
}

constexpr int kChainRW = 2, kChainU = 3, kChainWarps = 16;
constexpr int kChainWideWarps = 20;  // the decode launches' block (launch_mlx4_smem<1, 2, 3, 1, 20>)

using StepsKernel = void (*)(const Tasks*, int, unsigned*, const uint32_t* const*, unsigned long long*);
int chain_warps(ChainForm form) { return form == ChainForm::StepsWide ? kChainWideWarps : kChainWarps; }
// A step form's kernel, timed or stamped.
StepsKernel steps_kernel(ChainForm form, bool stamp) {
  constexpr int RW = kChainRW, U = kChainU, W = kChainWarps, WW = kChainWideWarps;
  if (form == ChainForm::StepsWide)
    return stamp ? matvec_chain_steps_kernel<RW, U, WW, true> : matvec_chain_steps_kernel<RW, U, WW, false>;
  return stamp ? matvec_chain_steps_kernel<RW, U, W, true> : matvec_chain_steps_kernel<RW, U, W, false>;
}

}  // namespace

void xq_records(const float* X, int64_t ldx, int64_t N, int64_t cols, uint32_t* xq, cudaStream_t st, const Tuning& tu) {
  const int64_t nch = cols / 32;
  if (N <= 0 || nch <= 0) return;
  launch_k(tu.pdl_all, xq_records_kernel, dim3(unsigned((nch + 7) / 8), unsigned(N)), dim3(256), 0, st, X, ldx, nch,
           xq);
}

bool matvec_fuses_records(const MatTask* tasks, int ntasks, int64_t N, bool norm) {
  if (ntasks <= 0 || ntasks > kMaxTasks || N < 1 || N > 2) return false;
  const DMat& W0 = tasks[0].W;
  for (int i = 0; i < ntasks; i++) {
    const DMat& W = tasks[i].W;
    if (W.type != WType::MLX4 || W.cols != W0.cols || W.group != W0.group) return false;
  }
  if (W0.cols % 32 != 0 || W0.cols <= 0 || (W0.group != 32 && W0.group != 64 && W0.group != 128)) return false;
  return smem_bytes(int(N), W0.cols, true, norm) <= size_t(kSmemMax);
}

void matvec_multi(const MatTask* tasks, int ntasks, const float* X, int64_t ldx, int64_t N, const uint32_t* xq,
                  cudaStream_t st, const Tuning& tu, const XSource* src) {
  if (N <= 0 || ntasks <= 0) return;
  if (ntasks > kMaxTasks) throw std::runtime_error("matvec_multi: more than 4 matrices in one launch");
  if (src) {  // the launch makes X's records itself (the decode kernel's prologue)
    if (!src->x || !matvec_fuses_records(tasks, ntasks, N, src->norm_w != nullptr))
      throw std::runtime_error(
          "matvec_multi: records made in the launch need MLX4 matrices of one width and group, "
          "N <= 2 and a source x (matvec_fuses_records)");
    int64_t rows = 0;
    for (int i = 0; i < ntasks; i++) {
      if (!aligned16(tasks[i].W.data)) throw std::runtime_error("matvec: MLX4 needs 16-byte aligned rows");
      rows += tasks[i].W.rows;
    }
    if (N == 2)
      dispatch_mlx4<2>(tasks, ntasks, rows, tasks[0].W.cols, nullptr, *src, st, tu);
    else
      dispatch_mlx4<1>(tasks, ntasks, rows, tasks[0].W.cols, nullptr, *src, st, tu);
    return;
  }
  const XSource none;
  const DMat& W0 = tasks[0].W;
  int64_t rows = 0;
  bool rows16 = true;  // every matrix's rows 16-byte aligned
  for (int i = 0; i < ntasks; i++) {
    const DMat& W = tasks[i].W;
    if (W.type != W0.type || W.cols != W0.cols || W.group != W0.group)
      throw std::runtime_error("matvec_multi: the matrices of one launch need one type, width and group");
    rows += W.rows;
    rows16 = rows16 && aligned16(W.data);
  }
  bool vec = rows16 && ldx % 4 == 0 && aligned16(X);
  if (W0.type == WType::MLX4) {  // the MLX4 kernels read the records of x, never x itself
    if (W0.cols % 32 != 0 || (W0.group != 32 && W0.group != 64 && W0.group != 128) || !rows16)
      throw std::runtime_error(
          "matvec: MLX4 needs cols a multiple of 32, group 32, 64 or 128, and 16-byte aligned rows");
    if (!xq || !aligned16(xq))
      throw std::runtime_error("matvec: MLX4 needs the records of x (xq_records), 16-byte aligned");
  } else {
    const int width = W0.type == WType::F32 ? 4 : 8;
    vec = vec && W0.cols % width == 0;
  }
  const int64_t nch = W0.cols / 32;
  MatTask shifted[kMaxTasks];
  for (int64_t n0 = 0; n0 < N;) {
    const int64_t left = N - n0;
    const int nb = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
    for (int i = 0; i < ntasks; i++) shifted[i] = tasks[i], shifted[i].y = tasks[i].y + n0 * tasks[i].ldy;
    const float* x = X + n0 * ldx;
    const uint32_t* xs = W0.type == WType::MLX4 ? xq + n0 * nch * kXqWords : nullptr;
    switch (nb) {
      case 8:
        launch<8>(shifted, ntasks, x, ldx, xs, vec, rows, none, st, tu);
        break;
      case 4:
        launch<4>(shifted, ntasks, x, ldx, xs, vec, rows, none, st, tu);
        break;
      case 2:
        launch<2>(shifted, ntasks, x, ldx, xs, vec, rows, none, st, tu);
        break;
      default:
        launch<1>(shifted, ntasks, x, ldx, xs, vec, rows, none, st, tu);
        break;
    }
    n0 += nb;
  }
}

// The stamps' device buffer, from mlx4_stamps_begin to mlx4_stamps_end (which frees it, so that memcheck's leak check
// finds no buffer kept for the process).
static unsigned long long* g_stamp_host_buf = nullptr;

void mlx4_stamps_begin(int max_launches) {
  if (max_launches < 1) throw std::runtime_error("mlx4_stamps_begin: at least one launch");
  if (g_stamp_host_buf) HKV_CUDA_CHECK(cudaFree(g_stamp_host_buf));
  g_stamp_host_buf = nullptr;
  HKV_CUDA_CHECK(cudaMalloc(&g_stamp_host_buf, size_t(max_launches) * kSlotWords * 8));
  unsigned long long* const buf = g_stamp_host_buf;
  std::vector<unsigned long long> init(size_t(max_launches) * kSlotWords, 0ull);  // max words 0
  for (size_t i = 0; i < init.size(); i++)
    if ((i % kSlotWords < kStampWords && i % 2 == 0) || i % kSlotWords >= kStampWords + 2 * kStampSms)
      init[i] = ~0ull;  // min words high
  HKV_CUDA_CHECK(cudaMemcpy(buf, init.data(), init.size() * 8, cudaMemcpyHostToDevice));
  const unsigned zero = 0, ucap = unsigned(max_launches);
  HKV_CUDA_CHECK(cudaMemcpyToSymbol(g_stamp_buf, &buf, sizeof(buf)));
  HKV_CUDA_CHECK(cudaMemcpyToSymbol(g_stamp_launch, &zero, sizeof(zero)));
  HKV_CUDA_CHECK(cudaMemcpyToSymbol(g_stamp_done, &zero, sizeof(zero)));
  HKV_CUDA_CHECK(cudaMemcpyToSymbol(g_stamp_cap, &ucap, sizeof(ucap)));
  g_stamps = true;
}

std::vector<MatvecStamps> mlx4_stamps_end() {
  g_stamps = false;
  HKV_CUDA_CHECK(cudaDeviceSynchronize());
  unsigned launches = 0, cap = 0;
  HKV_CUDA_CHECK(cudaMemcpyFromSymbol(&launches, g_stamp_launch, sizeof(launches)));
  HKV_CUDA_CHECK(cudaMemcpyFromSymbol(&cap, g_stamp_cap, sizeof(cap)));
  const unsigned n = g_stamp_host_buf ? std::min(launches, cap) : 0u;
  std::vector<unsigned long long> h(size_t(n) * kSlotWords);
  if (n) HKV_CUDA_CHECK(cudaMemcpy(h.data(), g_stamp_host_buf, h.size() * 8, cudaMemcpyDeviceToHost));
  if (g_stamp_host_buf) HKV_CUDA_CHECK(cudaFree(g_stamp_host_buf));
  g_stamp_host_buf = nullptr;
  const unsigned zero = 0;
  HKV_CUDA_CHECK(cudaMemcpyToSymbol(g_stamp_cap, &zero, sizeof(zero)));  // no slot left to write
  std::vector<MatvecStamps> out(n);
  // every %smid word (ids need not be contiguous, so not only the first sm_count()); 0 where no block ran
  for (unsigned i = 0; i < n; i++) {
    const unsigned long long* w = h.data() + size_t(i) * kSlotWords;
    out[i] = {{w[0], w[1]}, {w[2], w[3]}, {w[4], w[5]}, {w[6], w[7]}, {}, {}, {}};
    out[i].sm_records.assign(w + kStampWords, w + kStampWords + kStampSms);
    out[i].sm_end.assign(w + kStampWords + kStampSms, w + kStampWords + 2 * kStampSms);
    out[i].sm_first_end.assign(w + kStampWords + 2 * kStampSms, w + kStampWords + 3 * kStampSms);
    for (uint64_t& e : out[i].sm_first_end)
      if (e == ~0ull) e = 0;  // no warp ended there
  }
  return out;
}

void matvec(const DMat& W, const float* X, int64_t ldx, int64_t N, float* Y, int64_t ldy, uint32_t* xq, cudaStream_t st,
            const Tuning& tu) {
  if (N <= 0 || W.rows == 0) return;
  if (W.type == WType::MLX4) xq_records(X, ldx, N, W.cols, xq, st, tu);
  const MatTask t{W, Y, ldy};
  matvec_multi(&t, 1, X, ldx, N, xq, st, tu);
}

struct ChainPlan::Dev {
  Tasks* steps = nullptr;
  int* item_first = nullptr;
  unsigned* done = nullptr;
  const uint32_t** xqs = nullptr;
  unsigned* cnt = nullptr;   // Slices: [steps][kChainSlices] counts of row groups stored
  unsigned* need = nullptr;  // Slices: [steps][kChainSlices] what each slice of a step's x waits for
  ~Dev() { cudaFree(steps), cudaFree(item_first), cudaFree(done), cudaFree(xqs), cudaFree(cnt), cudaFree(need); }
};

// The Slices form's kernel (the decode launches' block: 20 warps).
constexpr auto slices_kernel = matvec_chain_slices_kernel<kChainRW, kChainU, kChainWideWarps>;

ChainPlan::ChainPlan(const std::vector<ChainStep>& steps) : nsteps_(int(steps.size())), dev_(std::make_shared<Dev>()) {
  std::vector<Tasks> ts;
  std::vector<int> first{0};
  std::vector<const uint32_t*> xqs;
  size_t smem = 0;
  for (const ChainStep& s : steps) {
    if (s.tasks.empty() || s.tasks.size() > size_t(kMaxTasks))
      throw std::invalid_argument("matvec chain: a step takes 1 to " + std::to_string(kMaxTasks) + " tasks");
    for (const MatTask& t : s.tasks)
      if (t.W.type != WType::MLX4 || t.W.cols != s.tasks[0].W.cols || t.W.group != s.tasks[0].W.group ||
          t.W.cols % 32 != 0 || t.add)
        throw std::invalid_argument("matvec chain: a step's tasks are MLX4 of one width and group, no residual add");
    ts.push_back(make_tasks(s.tasks.data(), int(s.tasks.size()), kChainRW));
    const int64_t items = (ts.back().block_start[ts.back().n] + kChainWarps - 1) / kChainWarps;
    first.push_back(first.back() + int(items));
    xqs.push_back(s.xq);
    smem = std::max(smem, size_t(s.tasks[0].W.cols) * 4);
  }
  if (smem > size_t(kSmemMax)) throw std::invalid_argument("matvec chain: records wider than shared memory");
  smem_ = smem;
  HKV_CUDA_CHECK(cudaMalloc(&dev_->steps, ts.size() * sizeof(Tasks)));
  HKV_CUDA_CHECK(cudaMalloc(&dev_->item_first, first.size() * sizeof(int)));
  HKV_CUDA_CHECK(cudaMalloc(&dev_->done, std::max<size_t>(1, ts.size()) * sizeof(unsigned)));
  HKV_CUDA_CHECK(cudaMalloc(&dev_->xqs, std::max<size_t>(1, xqs.size()) * sizeof(uint32_t*)));
  HKV_CUDA_CHECK(cudaMemcpy(dev_->steps, ts.data(), ts.size() * sizeof(Tasks), cudaMemcpyHostToDevice));
  HKV_CUDA_CHECK(cudaMemcpy(dev_->item_first, first.data(), first.size() * sizeof(int), cudaMemcpyHostToDevice));
  HKV_CUDA_CHECK(cudaMemcpy(dev_->xqs, xqs.data(), xqs.size() * sizeof(uint32_t*), cudaMemcpyHostToDevice));
  items_ = first.back();
  auto resident = [&](const void* kernel, int warps) {
    HKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemMax)));
    int per_sm = 0;
    HKV_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, warps * 32, smem_));
    if (per_sm < 1) throw std::runtime_error("matvec chain: the kernel does not fit a multiprocessor");
    return per_sm * sm_count();
  };
  grids_[int(ChainForm::Items)] =
      resident(reinterpret_cast<const void*>(matvec_chain_kernel<kChainRW, kChainU, kChainWarps>), kChainWarps);
  // Slices: each step's x in slices of 1024 columns, what slice m of step t waits for from step t − 1's row groups
  std::vector<unsigned> need(ts.size() * kChainSlices, 0u);
  size_t widest = 0;
  for (size_t t = 0; t < steps.size() && slices_why_not_.empty(); t++) {
    const int64_t cols = steps[t].tasks[0].W.cols;
    if (cols % 1024 != 0 || cols / 1024 > kChainSlices)
      slices_why_not_ = "step " + std::to_string(t) + "'s width " + std::to_string(cols) +
                        " is not a multiple of 1024 columns up to " + std::to_string(kChainSlices * 1024);
    widest = std::max(widest, size_t(cols));
    if (t > 0 && slices_why_not_.empty()) {
      const std::vector<unsigned> n = chain_slice_needs(ts[t - 1].block_start[ts[t - 1].n], int(cols / 1024));
      std::copy(n.begin(), n.end(), need.begin() + t * kChainSlices);
    }
  }
  if (slices_why_not_.empty() && 2 * widest * 4 > size_t(kSmemMax))
    slices_why_not_ = "two steps' records wider than shared memory";
  if (slices_why_not_.empty()) {
    slices_smem_ = 2 * widest * 4;  // two buffers of the widest step's records
    HKV_CUDA_CHECK(cudaMalloc(&dev_->cnt, need.size() * sizeof(unsigned)));
    HKV_CUDA_CHECK(cudaMalloc(&dev_->need, need.size() * sizeof(unsigned)));
    HKV_CUDA_CHECK(cudaMemcpy(dev_->need, need.data(), need.size() * sizeof(unsigned), cudaMemcpyHostToDevice));
    const void* k = reinterpret_cast<const void*>(slices_kernel);
    HKV_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemMax)));
    int per_sm = 0;
    HKV_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kChainWideWarps * 32, slices_smem_));
    if (per_sm < 1) throw std::runtime_error("matvec chain: the slices kernel does not fit a multiprocessor");
    grids_[int(ChainForm::Slices)] = per_sm * sm_count();
  }
  // The STAMP instantiations run on the same grids, so each must hold as many blocks as its timed form.
  for (const ChainForm form : {ChainForm::Steps, ChainForm::StepsWide}) {
    grids_[int(form)] = resident(reinterpret_cast<const void*>(steps_kernel(form, false)), chain_warps(form));
    if (resident(reinterpret_cast<const void*>(steps_kernel(form, true)), chain_warps(form)) < grids_[int(form)])
      throw std::runtime_error("matvec chain: a stamped step kernel holds fewer blocks than its timed form");
  }
}

void ChainPlan::run(cudaStream_t st, ChainForm form, unsigned long long* stamps) const {
  if ((form == ChainForm::Items || form == ChainForm::Slices) && stamps)
    throw std::invalid_argument("matvec chain: stamps are the step forms'");
  if (form == ChainForm::Slices && !slices_why_not_.empty())
    throw std::invalid_argument("matvec chain: the slices form cannot run this chain: " + slices_why_not_);
  if (nsteps_ == 0) return;
  if (form == ChainForm::Slices) {
    HKV_CUDA_CHECK(cudaMemsetAsync(dev_->cnt, 0, size_t(nsteps_) * kChainSlices * sizeof(unsigned), st));
    slices_kernel<<<unsigned(grid(form)), kChainWideWarps * 32, slices_smem_, st>>>(
        dev_->steps, nsteps_, dev_->cnt, dev_->need, dev_->xqs, int(slices_smem_ / 2 / sizeof(uint4)));
    HKV_CHECK_LAUNCH();
    return;
  }
  HKV_CUDA_CHECK(cudaMemsetAsync(dev_->done, 0, size_t(nsteps_) * sizeof(unsigned), st));
  const unsigned blocks = unsigned(grid(form));
  if (form == ChainForm::Items) {
    matvec_chain_kernel<kChainRW, kChainU, kChainWarps>
        <<<blocks, kChainWarps * 32, smem_, st>>>(dev_->steps, dev_->item_first, nsteps_, dev_->done, dev_->xqs);
  } else {
    steps_kernel(form, stamps != nullptr)<<<blocks, chain_warps(form) * 32, smem_, st>>>(dev_->steps, nsteps_,
                                                                                         dev_->done, dev_->xqs, stamps);
  }
  HKV_CHECK_LAUNCH();
}

}  // namespace hkv::cuda
