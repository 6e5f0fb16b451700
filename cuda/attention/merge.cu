// attn_merge_kernel: the chunks' partials (mc, lc, oc) of one row and query head, merged in order as attend()
// (contract.cuh): mn = max(m, mc), a = exp_c(m − mn), b = exp_c(mc − mn), l = fma(l, a, lc·b),
// o[d] = fma(o[d], a, oc[d]·b); out = o/l, rotated back for q4h (warp_wht32); then (engine) out · sigmoid_c(gate), and
// where a.xq_out is set the records of out (xq_chunk) for the o product.
// Launch: grid (rows, H), head_dim threads: the running maximum over chunks in order (a scan by warp 0), the factors
// a, b of every chunk (all threads), l's chain (one thread) and o[d]'s chain (thread d), its oc values loaded 32 chunks
// at a time into two buffers taken in turn, a whole batch without a test a chunk (64 at a time gives the same token
// time).
#include <cmath>

#include "cuda/attention/launch.h"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace hkv::cuda {
namespace {
using namespace attn;

constexpr int kMergeTile = 512;  // chunks whose factors are held in shared memory at once
constexpr int kMergeLoads = 32;  // chunks whose oc values a thread loads before it runs their part of the chain

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
        float m = i < tn ? mc_s[i] : -INFINITY;
#pragma unroll
        for (int off = 1; off < 32; off *= 2) {
          const float o = __shfl_up_sync(kFull, m, off);
          if (lane >= off) m = m > o ? m : o;
        }
        m = carry > m ? carry : m;  // the maximum through chunk i
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

}  // namespace

void attn::launch_merge_kernel(const AttnArgs& a, int maxch, cudaStream_t st, bool pdl, bool fast) {
  launch_k(pdl, a.D == 256 ? attn_merge_kernel<256> : attn_merge_kernel<0>, dim3(unsigned(a.N), unsigned(a.H)),
           dim3(unsigned(a.D)), 0, st, a, maxch, a.kind == KvKind::Q4H, fast);
}

}  // namespace hkv::cuda
