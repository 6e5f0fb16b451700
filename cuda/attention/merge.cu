// attn_merge_kernel: the chunks' partials (mc, lc, oc) of one row and query head, merged in order as attend()
// (contract.cuh): mn = max(m, mc), a = exp_c(m − mn), b = exp_c(mc − mn), l = fma(l, a, lc·b),
// o[d] = fma(o[d], a, oc[d]·b); out = o/l, rotated back for q4h (warp_wht32); then (engine) out · sigmoid_c(gate), and
// where a.xq_out is set the records of out (xq_chunk) for the o product.
// Launch: grid (rows, H), head_dim threads: the running maximum over chunks in order (a scan by warp 0), the factors
// a, b of every chunk (all threads), l's chain (one thread) and o[d]'s chain (thread d), its oc values loaded 32 chunks
// at a time into two buffers taken in turn, a whole batch without a test a chunk (64 at a time gives the same token
// time).
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

// The running maximum over 32 chunks in order, a chunk a lane (v its mc, -inf past the tile), after `carry` (the
// maximum before the first): returns the maximum through the lane's chunk, and `before` the maximum before it. A
// maximum is exact and does not depend on the order it is taken in (NaN aside), so each lane's prefix by five
// shuffles gives a sequential loop's values.
__device__ __forceinline__ float running_max(float v, float carry, int lane, float& before) {
  float m = v;
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const float o = __shfl_up_sync(kFull, m, off);
    if (lane >= off) m = m > o ? m : o;
  }
  m = carry > m ? carry : m;  // the maximum through the lane's chunk
  const float up = __shfl_up_sync(kFull, m, 1);
  before = lane == 0 ? carry : up;
  return m;
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
    if (d < 32) {  // the running maximum m_i = max(m_{i-1}, mc_i), chunks in order, as a scan by warp 0, 32 chunks
      // at a time (running_max; a loop in one thread takes tens of cycles a chunk: 512 chunks at depth 262,144)
      for (int i0 = 0; i0 < tn; i0 += 32) {
        const int i = i0 + lane;
        float before;
        const float m = running_max(i < tn ? mc_s[i] : -INFINITY, carry, lane, before);
        if (i < tn) {
          fa_s[i] = before;  // the maximum before chunk i, for its factor a
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
  float out = o / l_s;
  if (rotated) out = warp_wht32(out, lane);
  if (a.gate) out = out * hkv::sigmoid_c(a.gate[row * a.ldg + int64_t(h) * a.gate_stride + d]);
  a.out[row * a.ldo + int64_t(h) * D + d] = out;
  if (a.xq_out) {  // the record of this warp's chunk of out (xq_chunk): chunk h·D/32 + d/32 of the row's H·D values
    float4* c4 = c4_s[d >> 5];
    reinterpret_cast<float*>(c4)[lane] = out;
    __syncwarp();
    xq_chunk(out, c4, a.xq_out + (row * (int64_t(a.H) * D / 32) + int64_t(h) * (D / 32) + (d >> 5)) * kXqWords);
  }
}

// attn_merge_staged_kernel (Tuning's merge_stage): the same merge, one warp a block over 32 elements of a head, grid
// (rows, H, D/32). Each tile's oc values of the warp's elements are copied into shared memory first, by cp.async of 4
// bytes (a chunk's partials lie D + 2 floats apart, so 16-byte copies would not be aligned), every copy of the tile in
// flight at once instead of 64 loads a thread; the chunks' (mc, lc), the scan and the factors are as above, by the
// one warp. Then every lane runs o[d]'s chain and l's chain side by side, chunk by chunk in order: l's operations
// are thread 0's above, made by every lane (so no lane waits for a chain of another), and out = o/l.
template <int DC>
__global__ void __launch_bounds__(32) attn_merge_staged_kernel(AttnArgs a, int maxch, bool rotated) {
  pdl_wait();                      // as attn_chunk_kernel
  if (a.trigger) pdl_trigger();    // out_trigger: the o product may launch (it waits for this grid before reading)
  extern __shared__ float oc_s[];  // [tile chunk][32]: the warp's oc values
  __shared__ float mc_s[kMergeTile], lc_s[kMergeTile], fa_s[kMergeTile], fb_s[kMergeTile];
  __shared__ __align__(16) float4 c4_s[8];  // xq_out: the warp's 32 outputs
  const int lane = threadIdx.x, h = blockIdx.y, d = 32 * blockIdx.z + lane;
  const int64_t row = blockIdx.x;
  const int D = DC ? DC : a.D, n = a.n_keys[row], nch = (n + kChunk - 1) / kChunk;
  const float* part = a.part + (row * a.H + h) * int64_t(maxch) * (D + 2);
  float o = 0.0f, l = 0.0f;
  float carry = -INFINITY;  // the running maximum before the next chunk
  for (int t0 = 0; t0 < nch; t0 += kMergeTile) {
    const int tn = min(kMergeTile, nch - t0);
    __syncwarp();  // the last tile's reads of shared memory are done
    for (int i = 0; i < tn; i++) cp_async4(oc_s + i * 32 + lane, part + int64_t(t0 + i) * (D + 2) + 2 + d);
    cp_async_commit();
    for (int i = lane; i < tn; i += 32) {
      const float* p = part + int64_t(t0 + i) * (D + 2);
      mc_s[i] = p[0];
      lc_s[i] = p[1];
    }
    __syncwarp();
    for (int i0 = 0; i0 < tn; i0 += 32) {  // the running maximum, as attn_merge_kernel's warp 0
      const int i = i0 + lane;
      float before;
      const float m = running_max(i < tn ? mc_s[i] : -INFINITY, carry, lane, before);
      if (i < tn) {
        fa_s[i] = hkv::exp_c(before - m);
        fb_s[i] = hkv::exp_c(mc_s[i] - m);
      }
      carry = __shfl_sync(kFull, m, 31);
    }
    cp_async_wait<0>();
    __syncwarp();
#pragma unroll 8
    for (int i = 0; i < tn; i++) {
      const float fa = fa_s[i], fb = fb_s[i];
      o = hkv::fma_rn(o, fa, oc_s[i * 32 + lane] * fb);
      l = hkv::fma_rn(l, fa, lc_s[i] * fb);
    }
  }
  float out = o / l;
  if (rotated) out = warp_wht32(out, lane);
  if (a.gate) out = out * hkv::sigmoid_c(a.gate[row * a.ldg + int64_t(h) * a.gate_stride + d]);
  a.out[row * a.ldo + int64_t(h) * D + d] = out;
  if (a.xq_out) {  // the record of this warp's chunk of out (xq_chunk), as attn_merge_kernel
    reinterpret_cast<float*>(c4_s)[lane] = out;
    __syncwarp();
    xq_chunk(out, c4_s, a.xq_out + (row * (int64_t(a.H) * D / 32) + int64_t(h) * (D / 32) + (d >> 5)) * kXqWords);
  }
}

}  // namespace

bool attn::launch_merge_kernel(const AttnArgs& a, int maxch, cudaStream_t st, bool pdl, bool fast, bool stage) {
  if (stage && a.D % 32 == 0) {
    const size_t smem = size_t(std::min(maxch, kMergeTile)) * 32 * sizeof(float);
    auto kernel = a.D == 256 ? attn_merge_staged_kernel<256> : attn_merge_staged_kernel<0>;
    static bool attr_set[2] = {false, false};
    if (!attr_set[a.D == 256]) {
      HKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(kMergeTile * 32 * sizeof(float))));
      attr_set[a.D == 256] = true;
    }
    launch_k(pdl, kernel, dim3(unsigned(a.N), unsigned(a.H), unsigned(a.D / 32)), dim3(32), smem, st, a, maxch,
             a.kind == KvKind::Q4H);
    return true;
  }
  launch_k(pdl, a.D == 256 ? attn_merge_kernel<256> : attn_merge_kernel<0>, dim3(unsigned(a.N), unsigned(a.H)),
           dim3(unsigned(a.D)), 0, st, a, maxch, a.kind == KvKind::Q4H, fast);
  return false;
}

}  // namespace hkv::cuda
