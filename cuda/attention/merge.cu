// attn_merge_kernel: the chunks' partials (mc, lc, oc) of one row and query head, merged in order as attend()
// (contract.cuh): mn = max(m, mc), a = exp_c(m − mn), b = exp_c(mc − mn), l = fma(l, a, lc·b),
// o[d] = fma(o[d], a, oc[d]·b); out = o/l, rotated back for q4h (warp_wht32); then (engine) out · sigmoid_c(gate), and
// where a.xq_out is set the records of out (xq_chunk) for the o product.
// Launch: grid (rows, H), head_dim threads: the running maximum over chunks in order (a scan by warp 0), the factors
// a, b of every chunk (all threads), l's chain (one thread) and o[d]'s chain (thread d), its oc values loaded 32 chunks
// at a time into two buffers taken in turn, a whole batch without a test a chunk (64 at a time gives the same token
// time).
// attn_merge_wide_kernel (Tuning's merge_wide): the same operations in the same order, a block a (row, head, 32
// elements), so that every partial of a tile is in flight at once over head_dim/32 times as many blocks; see its
// comment.
#include <algorithm>
#include <cmath>

#include "cuda/attention/launch.h"
#include "cuda/check.h"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace hkv::cuda {
namespace {
using namespace attn;

constexpr int kMergeTile = 512;  // chunks whose factors are held in shared memory at once
constexpr int kMergeLoads = 32;  // chunks whose oc values a thread loads before it runs their part of the chain

// The larger of m and o as the merge takes it (m > o ? m : o). A maximum is exact and does not depend on the order it
// is taken in (NaN aside; +0 and −0 may come out either way, and every use of it, a difference fed to exp_c, gives the
// same factor with either), so any grouping of the running maximum gives attn_merge_kernel's factors.
__device__ __forceinline__ float max_step_m(float m, float o) { return m > o ? m : o; }

// Each lane's inclusive running maximum over the warp's 32 values, lanes in order (five shuffles).
__device__ __forceinline__ float warp_running_max(float m, int lane) {
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const float o = __shfl_up_sync(kFull, m, off);
    if (lane >= off) m = max_step_m(m, o);
  }
  return m;
}

// The end of a merge for element d (lane `lane` of its warp) of head h: out = o/l, rotated back for q4h (warp_wht32:
// the warp's 32 elements are one group), gated, stored, and where a.xq_out is set the record of the warp's 32 outputs
// (xq_chunk: chunk h·D/32 + d/32 of the row's H·D values), c4 the warp's 32 floats of shared memory.
__device__ __forceinline__ void merge_out(const AttnArgs& a, int64_t row, int h, int D, int d, int lane, float o,
                                          float l, bool rotated, float4* c4) {
  float out = o / l;
  if (rotated) out = warp_wht32(out, lane);
  if (a.gate) out = out * hkv::sigmoid_c(a.gate[row * a.ldg + int64_t(h) * a.gate_stride + d]);
  a.out[row * a.ldo + int64_t(h) * D + d] = out;
  if (a.xq_out) {
    reinterpret_cast<float*>(c4)[lane] = out;
    __syncwarp();
    xq_chunk(out, c4, a.xq_out + (row * (int64_t(a.H) * D / 32) + int64_t(h) * (D / 32) + (d >> 5)) * kXqWords);
  }
}

// DC: the head_dim as a constant (256, the 27B's), so that a chunk's partials lie a constant stride apart and the loads
// of a batch take immediate offsets; 0 for any other (a.D).
// fast: the whole batches take the path without tests (Tuning's merge_fast); else every batch takes the tested one.
template <int DC>
__global__ void attn_merge_kernel(AttnArgs a, int maxch, bool rotated, bool fast) {
  pdl_wait();                    // as attn_chunk_kernel
  if (a.trigger) pdl_trigger();  // out_trigger: the o product may launch (it waits for this grid before reading)
  __shared__ float mn_s[kMergeTile], mc_s[kMergeTile], lc_s[kMergeTile];
  __shared__ __align__(16) float fa_s[kMergeTile], fb_s[kMergeTile];
  __shared__ float l_s;
  __shared__ __align__(16) float4 c4_s[kMaxD / 32][8];  // xq_out: each warp's 32 outputs
  const int d = threadIdx.x, lane = d & 31, h = blockIdx.y;
  const int64_t row = blockIdx.x;
  const int D = DC ? DC : a.D, n = a.n_keys[row], nch = (n + kChunk - 1) / kChunk;
  const float* part = a.part + (row * a.H + h) * int64_t(maxch) * (D + 2);
  float o = 0.0f, l = 0.0f;  // l: thread 0's chain
  float carry = -INFINITY;   // warp 0: the running maximum before the next chunk
  for (int t0 = 0; t0 < nch; t0 += kMergeTile) {
    const int tn = min(kMergeTile, nch - t0);
    __syncthreads();
    // every chunk's (mc, lc) of the tile into shared memory at once: the chains below then wait on no
    // global load (loaded in the chain, each chunk costs thread 0's l chain one load's latency: 512 at depth 262,144)
    for (int i = d; i < tn; i += blockDim.x) {
      const float* p = part + int64_t(t0 + i) * (D + 2);
      mc_s[i] = p[0];
      lc_s[i] = p[1];
    }
    __syncthreads();
    if (d < 32) {  // the running maximum m_i = max(m_{i-1}, mc_i), chunks in order, as a scan by warp 0:
      // a maximum is exact and does not depend on the order it is taken in (NaN aside), so 32 chunks at a
      // time, each lane's prefix by five shuffles, give the sequential loop's values (a loop in one thread takes
      // tens of cycles a chunk: 512 chunks at depth 262,144)
      for (int i0 = 0; i0 < tn; i0 += 32) {
        const int i = i0 + lane;
        const float m = max_step_m(carry, warp_running_max(i < tn ? mc_s[i] : -INFINITY, lane));  // through chunk i
        const float before = __shfl_up_sync(kFull, m, 1);
        if (i < tn) {
          fa_s[i] = lane == 0 ? carry : before;  // the maximum before chunk i, for its factor a
          mn_s[i] = m;
        }
        carry = __shfl_sync(kFull, m, 31);
      }
    }
    __syncthreads();
    for (int i = d; i < tn; i += blockDim.x) {
      const float mc = mc_s[i], mn = mn_s[i];
      fa_s[i] = hkv::exp_c(fa_s[i] - mn);
      fb_s[i] = hkv::exp_c(mc - mn);
    }
    __syncthreads();
    if (d == 0) {
#pragma unroll 32
      for (int i = 0; i < tn; i++) l = hkv::fma_rn(l, fa_s[i], lc_s[i] * fb_s[i]);
    }
    // o's chain, kMergeLoads chunks at a time, the next batch's oc values loaded while this batch's run through
    // the chain, so that a batch's loads are in flight together whatever order the compiler gives them (with the
    // loop only unrolled, "#pragma unroll 64", each load sits next to its use and about one is in flight).
    // A whole batch (all kMergeLoads chunks below tn) takes a path without a test a chunk: its loads from one base at
    // k·(D + 2) floats (immediate offsets where D is the constant DC) and its factors as 16-byte shared loads (with a
    // test a chunk, the loop holds 19 instructions a chunk, scalar shared loads and predicates among them). The batches
    // load into two buffers in turn, so that no batch is copied from one to the other.
    float va[kMergeLoads], vb[kMergeLoads];
    auto load = [&](float(&v)[kMergeLoads], int i0) {
      const float* p = part + int64_t(t0 + i0) * (D + 2) + 2 + d;
      if (fast && i0 + kMergeLoads <= tn) {
#pragma unroll
        for (int k = 0; k < kMergeLoads; k++) v[k] = p[k * (D + 2)];
      } else {
#pragma unroll
        for (int k = 0; k < kMergeLoads; k++) v[k] = i0 + k < tn ? p[k * (D + 2)] : 0.0f;
      }
    };
    auto chain = [&](const float(&v)[kMergeLoads], int i0) {
      if (fast && i0 + kMergeLoads <= tn) {
        const float4* fa4 = reinterpret_cast<const float4*>(fa_s + i0);
        const float4* fb4 = reinterpret_cast<const float4*>(fb_s + i0);
#pragma unroll
        for (int k = 0; k < kMergeLoads; k += 4) {
          const float4 fa = fa4[k / 4], fb = fb4[k / 4];
          o = hkv::fma_rn(o, fa.x, v[k] * fb.x);
          o = hkv::fma_rn(o, fa.y, v[k + 1] * fb.y);
          o = hkv::fma_rn(o, fa.z, v[k + 2] * fb.z);
          o = hkv::fma_rn(o, fa.w, v[k + 3] * fb.w);
        }
      } else {
#pragma unroll
        for (int k = 0; k < kMergeLoads; k++)
          if (i0 + k < tn) o = hkv::fma_rn(o, fa_s[i0 + k], v[k] * fb_s[i0 + k]);
      }
    };
    load(va, 0);
    for (int i0 = 0; i0 < tn; i0 += 2 * kMergeLoads) {
      if (i0 + kMergeLoads < tn) load(vb, i0 + kMergeLoads);
      chain(va, i0);
      if (i0 + kMergeLoads >= tn) break;
      if (i0 + 2 * kMergeLoads < tn) load(va, i0 + 2 * kMergeLoads);
      chain(vb, i0 + kMergeLoads);
    }
  }
  if (d == 0) l_s = l;
  __syncthreads();
  merge_out(a, row, h, D, d, lane, o, l_s, rotated, c4_s[d >> 5]);
}

constexpr int kWideT = 256;          // threads a wide merge block: 8 warps
constexpr int kWideW = kWideT / 32;  // warps
// A warp's share of a tile's chunks, twice: its lanes' oc loads (chunks w, w + 8, w + 16, …, 64 a lane) and its run
// of the running maximum (chunks 64w … 64w + 63)
constexpr int kWideShare = kMergeTile / kWideW;
static_assert(kWideShare == 64, "a warp's run is two runs of 32 chunks, a chunk a lane");

// attn_merge_wide_kernel: attn_merge_kernel's operations in its order, a block a (row, head h, elements 32z …
// 32z + 31): grid (rows, H, head_dim/32), 256 threads, the tile's oc values of its 32 elements in dynamic shared
// memory (128 bytes a chunk, up to 64 KB; launch_wide sizes it). A tile of chunks, in order:
//   1. thread t loads (mc, lc) of chunks t and t + 256; then warp w loads the oc values of chunks w, w + 8, w + 16, …
//      (64 a lane, lane e the element 32z + e) into registers, every load issued before any is used, so that the
//      whole tile of partials is in flight at once over the grid;
//   2. the running maximum as a scan over the block: warp w takes chunks 64w … 64w + 63 (two runs of 32, five
//      shuffles each), the warps' maxima meet in shared memory, and chunk i's maximum before it and through it are the
//      carry into its warp's run with the run's prefix; the lane of chunk i makes its factors a = exp_c(before − mn),
//      b = exp_c(mc − mn) (max_step_m says why these are attn_merge_kernel's);
//   3. the oc values of the tile's chunks into shared memory, as they land;
//   4. warp 0 runs o's chain, lane e for element 32z + e, chunk by chunk in order, o = fma(o, a, oc·b), and warp 1's
//      lane 0 runs l's chain beside it, l = fma(l, a, lc·b): both wait on shared memory only.
// Then warp 0 makes out = o/l, rotated back for q4h (warp_wht32: the block's 32 elements are one group), gated, and
// the record of its 32 outputs (xq_chunk), as attn_merge_kernel's warp z does.
template <int DC>
__global__ void __launch_bounds__(kWideT) attn_merge_wide_kernel(AttnArgs a, int maxch, bool rotated) {
  pdl_wait();                      // as attn_chunk_kernel
  if (a.trigger) pdl_trigger();    // out_trigger: the o product may launch (it waits for this grid before reading)
  extern __shared__ float oc_s[];  // [tile chunk][32]: the block's oc values
  __shared__ float mc_s[kMergeTile], lc_s[kMergeTile];
  __shared__ __align__(16) float fa_s[kMergeTile], fb_s[kMergeTile];
  __shared__ float wmax_s[kWideW];
  __shared__ float l_s;
  __shared__ __align__(16) float4 c4_s[8];  // xq_out: the block's 32 outputs
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, h = blockIdx.y, d = 32 * blockIdx.z + lane;
  const int64_t row = blockIdx.x;
  const int D = DC ? DC : a.D, n = a.n_keys[row], nch = (n + kChunk - 1) / kChunk;
  const float* part = a.part + (row * a.H + h) * int64_t(maxch) * (D + 2);
  float o = 0.0f, l = 0.0f;  // o: warp 0's chains; l: warp 1's lane 0
  float carry = -INFINITY;   // the running maximum before the tile's first chunk (every thread holds it)
  for (int t0 = 0; t0 < nch; t0 += kMergeTile) {
    const int tn = min(kMergeTile, nch - t0);
    const float* pt = part + int64_t(t0) * (D + 2);
    __syncthreads();  // the last tile's reads of shared memory are done
    // 1. (mc, lc), then the oc values, all in flight
    float mcv[2], lcv[2];
#pragma unroll
    for (int k = 0; k < 2; k++) {
      const int i = tid + k * kWideT;
      mcv[k] = i < tn ? pt[int64_t(i) * (D + 2)] : -INFINITY;
      lcv[k] = i < tn ? pt[int64_t(i) * (D + 2) + 1] : 0.0f;
    }
    float v[kWideShare];
#pragma unroll
    for (int k = 0; k < kWideShare; k++) {
      const int i = w + kWideW * k;
      v[k] = i < tn ? pt[int64_t(i) * (D + 2) + 2 + d] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < 2; k++) {
      mc_s[tid + k * kWideT] = mcv[k];
      lc_s[tid + k * kWideT] = lcv[k];
    }
    __syncthreads();
    // 2. the running maximum and the factors: warp w's run, chunks i0 + lane and i0 + 32 + lane
    const int i0 = kWideShare * w;
    const float p0 = warp_running_max(mc_s[i0 + lane], lane);
    const float p1 = max_step_m(__shfl_sync(kFull, p0, 31), warp_running_max(mc_s[i0 + 32 + lane], lane));
    if (lane == 31) wmax_s[w] = p1;
    __syncthreads();
    float cin = carry;  // the maximum before the run's first chunk
    for (int u = 0; u < w; u++) cin = max_step_m(cin, wmax_s[u]);
    float next = carry;  // the maximum through the tile's last chunk
    for (int u = 0; u < kWideW; u++) next = max_step_m(next, wmax_s[u]);
    const float mn0 = max_step_m(cin, p0), mn1 = max_step_m(cin, p1);
    const float up0 = __shfl_up_sync(kFull, mn0, 1), up1 = __shfl_up_sync(kFull, mn1, 1);
    const float last0 = __shfl_sync(kFull, mn0, 31);
    const float b0 = lane == 0 ? cin : up0, b1 = lane == 0 ? last0 : up1;  // the maximum before each chunk
    if (i0 + lane < tn) {
      fa_s[i0 + lane] = hkv::exp_c(b0 - mn0);
      fb_s[i0 + lane] = hkv::exp_c(mc_s[i0 + lane] - mn0);
    }
    if (i0 + 32 + lane < tn) {
      fa_s[i0 + 32 + lane] = hkv::exp_c(b1 - mn1);
      fb_s[i0 + 32 + lane] = hkv::exp_c(mc_s[i0 + 32 + lane] - mn1);
    }
    carry = next;
    // 3. the oc values into shared memory
#pragma unroll
    for (int k = 0; k < kWideShare; k++)
      if (w + kWideW * k < tn) oc_s[(w + kWideW * k) * 32 + lane] = v[k];
    __syncthreads();
    // 4. the chains, chunks in order
    if (w == 0) {
      int i = 0;
      for (; i + 4 <= tn; i += 4) {
        const float4 fa = *reinterpret_cast<const float4*>(fa_s + i);
        const float4 fb = *reinterpret_cast<const float4*>(fb_s + i);
        o = hkv::fma_rn(o, fa.x, oc_s[i * 32 + lane] * fb.x);
        o = hkv::fma_rn(o, fa.y, oc_s[(i + 1) * 32 + lane] * fb.y);
        o = hkv::fma_rn(o, fa.z, oc_s[(i + 2) * 32 + lane] * fb.z);
        o = hkv::fma_rn(o, fa.w, oc_s[(i + 3) * 32 + lane] * fb.w);
      }
      for (; i < tn; i++) o = hkv::fma_rn(o, fa_s[i], oc_s[i * 32 + lane] * fb_s[i]);
    } else if (w == 1 && lane == 0) {
#pragma unroll 16
      for (int i = 0; i < tn; i++) l = hkv::fma_rn(l, fa_s[i], lc_s[i] * fb_s[i]);
    }
  }
  if (w == 1 && lane == 0) l_s = l;
  __syncthreads();
  if (w == 0) merge_out(a, row, h, D, d, lane, o, l_s, rotated, c4_s);
}

constexpr size_t kWideSmem = size_t(kMergeTile) * 32 * sizeof(float);  // oc_s of a whole tile: 64 KB

// oc_s holds a tile's chunks, at most maxch (no row has more), so a short context's blocks ask for little shared
// memory and leave the multiprocessors to the o product, which may launch while they run (out_trigger).
template <int DC>
void launch_wide(const AttnArgs& a, int maxch, cudaStream_t st, bool pdl) {
  static bool attr_set = false;  // the dynamic shared memory above 48 KB, once a kernel
  if (!attr_set) {
    HKV_CUDA_CHECK(
        cudaFuncSetAttribute(attn_merge_wide_kernel<DC>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kWideSmem)));
    attr_set = true;
  }
  const size_t smem = size_t(std::min(maxch, kMergeTile)) * 32 * sizeof(float);
  launch_k(pdl, attn_merge_wide_kernel<DC>, dim3(unsigned(a.N), unsigned(a.H), unsigned(a.D / 32)), dim3(kWideT), smem,
           st, a, maxch, a.kind == KvKind::Q4H);
}

}  // namespace

bool attn::launch_merge_kernel(const AttnArgs& a, int maxch, cudaStream_t st, bool pdl, bool fast, bool wide) {
  if (wide) {  // (attention() has checked that head_dim is a multiple of 32)
    if (a.D == 256)
      launch_wide<256>(a, maxch, st, pdl);
    else
      launch_wide<0>(a, maxch, st, pdl);
    return true;
  }
  launch_k(pdl, a.D == 256 ? attn_merge_kernel<256> : attn_merge_kernel<0>, dim3(unsigned(a.N), unsigned(a.H)),
           dim3(unsigned(a.D)), 0, st, a, maxch, a.kind == KvKind::Q4H, fast);
  return false;
}

}  // namespace hkv::cuda
