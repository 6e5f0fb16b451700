// Attention of each query head over its sequence's cache, read in the cache's format: reference/model.cpp
// attend() (docs/ARITHMETIC.md §6), for decode and prefill alike (each row attends to n_keys[row] slots).
//   q4h: the query is rotated once per group (warp_wht32) and the output rotated back once.
//   Keys in fixed chunks of 512. In chunk c, for each key in order:
//     score = (Σ_g fma(s_g, p_g, acc)) · scale, p_g = fma chain of u_j·q_j from 0 over the group's 32
//     elements, scale = fp32(1/sqrt(head_dim)); mc = the chunk's maximum;
//     p = exp_c(score − mc); lc = lc + p (keys in order); oc[d] = fma(p, s_g·u_d, oc[d]) (keys in order).
//   Chunks merged in order: mn = max(m, mc), a = exp_c(m − mn), b = exp_c(mc − mn), l = fma(l, a, lc·b),
//   o[d] = fma(o[d], a, oc[d]·b); out = o/l; then (engine) out · sigmoid_c(gate).
// The chunks' (mc, lc, oc) do not depend on each other, so each is its own block (split-K over chunks);
// only the merge is sequential, in a second kernel. A maximum does not depend on the order it is taken in
// (±0 ties only reach exp_c of a difference, where they give the same value).
// Launch: attn_chunk_kernel grid (chunks, KV heads × ⌈group/8⌉, rows), 256 threads: a block serves up to
// 8 query heads that share a KV head, so each K/V row is read once for all of them; a thread takes whole
// keys for the scores (one key's score is one thread's chain) and one d for the value sums.
// attn_merge_kernel grid (rows, H), head_dim threads.
// Measured (H200, 2026-11-29, hkv bench, 27B shape, batch 1): depth 32K minus depth 1K costs 0.82 ms for
// 2.08 GB more bf16 cache (≈ 2.5 TB/s) and 0.64 ms for 0.58 GB more q4h cache (≈ 0.9 TB/s: the q4h
// decode, fp16 scale conversions per element, is instruction-bound).
#include <cmath>

#include "cuda/check.h"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace hkv::cuda {
namespace {

constexpr int kChunk = 512, kMaxG = 8, kMaxD = 256, kThreads = 256;

// The code bytes of group g of a row (64 B bf16, 32 B fp8, 16 B q4h) as little-endian words.
template <KvKind F, bool V16>
__device__ __forceinline__ void load_group(const uint8_t* row, int g, uint32_t* w) {
  constexpr int nb = F == KvKind::BF16 ? 64 : F == KvKind::FP8 ? 32 : 16;
  const uint8_t* p = row + g * nb;
  if constexpr (V16) {
#pragma unroll
    for (int i = 0; i < nb / 16; i++) {
      uint4 u = __ldg(reinterpret_cast<const uint4*>(p) + i);
      w[4 * i] = u.x, w[4 * i + 1] = u.y, w[4 * i + 2] = u.z, w[4 * i + 3] = u.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < nb / 4; i++)
      w[i] = uint32_t(p[4 * i]) | uint32_t(p[4 * i + 1]) << 8 | uint32_t(p[4 * i + 2]) << 16 |
             uint32_t(p[4 * i + 3]) << 24;
  }
}

template <KvKind F>
__device__ __forceinline__ float unit(const uint32_t* w, int j) {
  if constexpr (F == KvKind::BF16)
    return hkv::f32_from_bf16(uint16_t(w[j / 2] >> (16 * (j % 2))));
  else if constexpr (F == KvKind::FP8)
    return hkv::f32_from_e4m3(uint8_t(w[j / 4] >> (8 * (j % 4))));
  else
    return float(int((w[j / 8] >> (4 * (j % 8))) & 0xfu) - 8);
}

template <KvKind F>
__device__ __forceinline__ float group_scale(const uint8_t* row, int D, int g) {
  if constexpr (F == KvKind::BF16) return 1.0f;
  const uint8_t* p = row + (F == KvKind::FP8 ? D : D / 2) + 2 * g;
  return hkv::f32_from_f16(uint16_t(p[0] | (p[1] << 8)));
}

// Element d of a row as (scale, unit).
template <KvKind F>
__device__ __forceinline__ float value_at(const uint8_t* row, int D, int d) {
  if constexpr (F == KvKind::BF16) {
    return 1.0f * hkv::f32_from_bf16(uint16_t(row[2 * d] | (row[2 * d + 1] << 8)));
  } else if constexpr (F == KvKind::FP8) {
    return group_scale<F>(row, D, d / 32) * hkv::f32_from_e4m3(row[d]);
  } else {
    return group_scale<F>(row, D, d / 32) * float(int((row[d / 2] >> (4 * (d % 2))) & 0xf) - 8);
  }
}

template <KvKind F, bool V16>
__global__ void __launch_bounds__(kThreads) attn_chunk_kernel(AttnArgs a, int qblocks, int maxch, float scale) {
  __shared__ float q_s[kMaxG * kMaxD];
  __shared__ float e_s[kMaxG * kChunk];
  __shared__ float red_s[kThreads / 32][kMaxG];
  __shared__ float mc_s[kMaxG];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t row = blockIdx.z;
  const int c = blockIdx.x, n = a.n_keys[row], c0 = c * kChunk;
  if (c0 >= n) return;
  const int len = min(kChunk, n - c0);
  const int D = a.D, qpk = a.H / a.KV, kvh = blockIdx.y / qblocks, qb = blockIdx.y % qblocks;
  const int h0 = kvh * qpk + qb * kMaxG, ng = min(kMaxG, qpk - qb * kMaxG);

  for (int i = tid; i < ng * D; i += kThreads) q_s[i] = a.q[row * a.ldq + int64_t(h0) * D + i];
  __syncthreads();
  if constexpr (F == KvKind::Q4H) {
    for (int gi = warp; gi < ng * D / 32; gi += kThreads / 32)
      q_s[gi * 32 + lane] = warp_wht32(q_s[gi * 32 + lane], lane);
    __syncthreads();
  }

  // scores, one key per thread
  const size_t stride = size_t(a.KV) * a.row_bytes;
  const uint8_t* kbase = a.k_rows[row] + size_t(kvh) * a.row_bytes;
  const uint8_t* vbase = a.v_rows[row] + size_t(kvh) * a.row_bytes;
  float mloc[kMaxG];
#pragma unroll
  for (int qh = 0; qh < kMaxG; qh++) mloc[qh] = -INFINITY;
  for (int j = tid; j < len; j += kThreads) {
    const uint8_t* krow = kbase + size_t(c0 + j) * stride;
    float acc[kMaxG];
#pragma unroll
    for (int qh = 0; qh < kMaxG; qh++) acc[qh] = 0.0f;
    for (int g = 0; g < D / 32; g++) {
      uint32_t w[16];
      load_group<F, V16>(krow, g, w);
      const float s = group_scale<F>(krow, D, g);
      float p[kMaxG];
#pragma unroll
      for (int qh = 0; qh < kMaxG; qh++) p[qh] = 0.0f;
#pragma unroll
      for (int jj = 0; jj < 32; jj++) {
        const float u = unit<F>(w, jj);
#pragma unroll
        for (int qh = 0; qh < kMaxG; qh++)
          if (qh < ng) p[qh] = hkv::fma_rn(u, q_s[qh * D + g * 32 + jj], p[qh]);
      }
#pragma unroll
      for (int qh = 0; qh < kMaxG; qh++)
        if (qh < ng) acc[qh] = hkv::fma_rn(s, p[qh], acc[qh]);
    }
#pragma unroll
    for (int qh = 0; qh < kMaxG; qh++)
      if (qh < ng) {
        const float e = acc[qh] * scale;
        e_s[qh * kChunk + j] = e;
        mloc[qh] = max_step(mloc[qh], e);
      }
  }
  // the chunk's maximum per query head
#pragma unroll
  for (int qh = 0; qh < kMaxG; qh++) {
    float m = warp_max(mloc[qh]);
    if (lane == 0) red_s[warp][qh] = m;
  }
  __syncthreads();
  if (tid < ng) {
    float m = -INFINITY;
    for (int wi = 0; wi < kThreads / 32; wi++) m = max_step(m, red_s[wi][tid]);
    mc_s[tid] = m;
  }
  __syncthreads();
  for (int i = tid; i < ng * kChunk; i += kThreads) {
    const int qh = i / kChunk, j = i % kChunk;
    if (j < len) e_s[i] = hkv::exp_c(e_s[i] - mc_s[qh]);
  }
  __syncthreads();
  float* part = a.part + ((row * a.H + h0) * int64_t(maxch) + c) * (D + 2);
  const int64_t head_stride = int64_t(maxch) * (D + 2);
  if (tid < ng) {  // lc, keys in order
    float lc = 0.0f;
    for (int j = 0; j < len; j++) lc = lc + e_s[tid * kChunk + j];
    part[tid * head_stride] = mc_s[tid];
    part[tid * head_stride + 1] = lc;
  }
  for (int d = tid; d < D; d += kThreads) {  // oc[d], keys in order
    float oc[kMaxG];
#pragma unroll
    for (int qh = 0; qh < kMaxG; qh++) oc[qh] = 0.0f;
#pragma unroll 8
    for (int j = 0; j < len; j++) {
      const float v = value_at<F>(vbase + size_t(c0 + j) * stride, D, d);
#pragma unroll
      for (int qh = 0; qh < kMaxG; qh++)
        if (qh < ng) oc[qh] = hkv::fma_rn(e_s[qh * kChunk + j], v, oc[qh]);
    }
#pragma unroll
    for (int qh = 0; qh < kMaxG; qh++)
      if (qh < ng) part[qh * head_stride + 2 + d] = oc[qh];
  }
}

__global__ void attn_merge_kernel(AttnArgs a, int maxch, bool rotated) {
  const int d = threadIdx.x, lane = d & 31, h = blockIdx.y;
  const int64_t row = blockIdx.x;
  const int D = a.D, n = a.n_keys[row], nch = (n + kChunk - 1) / kChunk;
  const float* part = a.part + (row * a.H + h) * int64_t(maxch) * (D + 2);
  float m = -INFINITY, l = 0.0f, o = 0.0f;
  for (int c = 0; c < nch; c++) {
    const float* pc = part + int64_t(c) * (D + 2);
    const float mc = pc[0], lc = pc[1], oc = pc[2 + d];
    const float mn = m > mc ? m : mc;
    const float fa = hkv::exp_c(m - mn), fb = hkv::exp_c(mc - mn);
    l = hkv::fma_rn(l, fa, lc * fb);
    o = hkv::fma_rn(o, fa, oc * fb);
    m = mn;
  }
  float out = o / l;
  if (rotated) out = warp_wht32(out, lane);
  if (a.gate) out = out * hkv::sigmoid_c(a.gate[row * a.ldg + int64_t(h) * a.gate_stride + d]);
  a.out[row * a.ldo + int64_t(h) * D + d] = out;
}

template <KvKind F>
void launch_chunks(const AttnArgs& a, dim3 grid, int qblocks, int maxch, bool v16, cudaStream_t st) {
  const float scale = float(1.0 / std::sqrt(double(a.D)));  // as attend(): fp32(1/sqrt(head_dim))
  if (v16)
    attn_chunk_kernel<F, true><<<grid, kThreads, 0, st>>>(a, qblocks, maxch, scale);
  else
    attn_chunk_kernel<F, false><<<grid, kThreads, 0, st>>>(a, qblocks, maxch, scale);
  HKV_CHECK_LAUNCH();
}

}  // namespace

size_t attn_part_floats(int64_t N, int H, int D, int max_keys) {
  const int64_t maxch = (max_keys + kChunk - 1) / kChunk;
  return size_t(N * H * maxch * (D + 2));
}

void attention(const AttnArgs& a, cudaStream_t st) {
  if (a.N <= 0 || a.max_keys <= 0) return;
  if (a.D % 32 != 0 || a.D > kMaxD)
    throw std::runtime_error("attention: head_dim must be a multiple of 32, at most 256");
  if (a.H % a.KV != 0) throw std::runtime_error("attention: heads must be a multiple of kv heads");
  const int maxch = (a.max_keys + kChunk - 1) / kChunk;
  const int qpk = a.H / a.KV, qblocks = (qpk + kMaxG - 1) / kMaxG;
  dim3 grid(unsigned(maxch), unsigned(a.KV * qblocks), unsigned(a.N));
  const bool v16 = a.row_bytes % 16 == 0;
  switch (a.kind) {
    case KvKind::BF16:
      launch_chunks<KvKind::BF16>(a, grid, qblocks, maxch, v16, st);
      break;
    case KvKind::FP8:
      launch_chunks<KvKind::FP8>(a, grid, qblocks, maxch, v16, st);
      break;
    case KvKind::Q4H:
      launch_chunks<KvKind::Q4H>(a, grid, qblocks, maxch, v16, st);
      break;
    case KvKind::F32:  // an oracle-only ablation: Engine::new_sequence refuses it before anything runs
      throw std::invalid_argument("engine attention: the f32 cache is an oracle-only ablation");
  }
  attn_merge_kernel<<<dim3(unsigned(a.N), unsigned(a.H)), unsigned(a.D), 0, st>>>(a, maxch, a.kind == KvKind::Q4H);
  HKV_CHECK_LAUNCH();
}

}  // namespace hkv::cuda
