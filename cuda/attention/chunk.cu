// attn_chunk_kernel: one chunk of 512 keys of one row, for the query heads of one head block of a KV head, in the
// order of contract.cuh: the query loaded (q4h: rotated, held as records), every key's score, the chunk's maximum and
// weights, lc, then the weighted values oc; the partials (mc, lc, oc) go to a.part for the merge (merge.cu).
// Launch: grid (KV heads × ⌈group/8⌉, chunks, rows), NG (2, 4, 6 or 8 ≥ the heads served; padding heads get q = 0 and
// are not stored) query heads a block, each K/V row read once for all of them.
// Scores: a thread takes keys tid and tid + T (then + 2T, …), each key's score one chain in that thread, both keys
// sharing each 16-byte load of q from shared memory. Weighted values: q4h a warp a group (q4h_int_values, every
// shape); bf16 and fp8 thread tid owns DPT consecutive d (one group) for all NG heads and runs their chains over the
// chunk's keys in order (over staged rows the loop unrolled by HKV_ATTN_VU keys, 32 by default, so later keys' loads
// issue early); lc is kept by threads T−1−h. Two thread counts, same arithmetic: T = 64, DPT = 8 (unstaged-x8: one
// 4-byte word of q4h codes a key) when there are at least 4 blocks per multiprocessor; else T = 256, DPT = 1 (more
// threads for few chunks). At head_dim 256 the fp8 scores go through slim_scores instead (the same chains, the piece
// loop unrolled by two into two buffers; a.fast_scores), and fp8 and q4h beyond one chunk block a multiprocessor take
// attn_slim_kernel (slim.cu; auto_attn_shape, policy.cu). Staged shapes copy the chunk's rows with cp.async; in decode
// (a.pre, from pre_ok) the rows below n − N, which the kernel ahead cannot be writing, are copied before pdl_wait. The
// staged shapes with one element a thread (kv-staged, kv-staged-h1, kv-staged-h2) take each chunk and head block over
// two blocks where the doubled grid still fits one wave (a.dsplit, attn_dsplit: q4h and fp8 to 8K at batch 1): both
// compute every score, the maximum and the weights; block r the value chains of elements [r·D/2, (r+1)·D/2), block 0
// also lc. Few chunks leave most multiprocessors idle, and the value phase, one chain of a chunk's keys a thread, is
// half a block's cycles. The shapes' instantiations (launch_chunk_kernel, at the end): unstaged-x8 <F, NG, 64, 8>;
// kv-staged, kv-staged-h1 and kv-staged-h2 <F, NG, 256, 1, 2> (K and V staged) where a chunk's K and V rows fit
// kStageMax, else <F, NG, 256, 1, 1> (V staged alone); v-staged-x2 <F, NG, 256, 1, 1, 2> (V staged, two elements a
// thread); bf16's staged shapes with Tuning's attn_bf16_halves <F, NG, 256, 1, 3> (the rows half a chunk at a time);
// bf16 otherwise, and rows that cannot be staged, <F, NG, 256, 1>. The staged ones have a PH twin for
// attn_phases_begin.
// In this file, in order: the fp32 score chains (key_scores), the value chains over global or staged V rows, the row
// copies (stage_rows), the kernel, its launch, the phases diagnostic.
#include <cmath>
#include <type_traits>

#include "cuda/attention/contract.cuh"
#include "cuda/attention/launch.h"
#include "cuda/attention/q4h_values.cuh"
#include "cuda/check.h"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace hkv::cuda {
namespace {
using namespace attn;

// Diagnostic: the chunk kernel's phases, summed over blocks (attn_phases_begin / attn_phases_end)
bool g_attn_phases = false;  // host: the staged launches (all but slim and unstaged-x8) take their PH instantiation
__device__ unsigned long long g_attn_cycles[6];  // wait, q, scores, weights, values (cycles), blocks

constexpr size_t kStageMax = 160 * 1024;  // staged rows of a chunk (fp8 V at head_dim 256: 139 KB)

// The scaled scores of KPT keys (rows kr[k], read from shared memory when KS) for NG heads: per key and head
// one chain, acc = fma(s_g, p_g, acc) over the groups, p_g the fma chain of u_j·q_j; the keys share each
// 16-byte load of q. Keys with ok[k] false read a valid row and are not used.
template <KvKind F, int NG, int KPT, bool KS>
__device__ __forceinline__ void key_scores(const uint8_t* const (&kr)[KPT], const float* q_s, int D, bool v16,
                                           float scale, float (&score)[KPT][NG]) {
  static_assert(F != KvKind::Q4H, "q4h scores: q4h_int_scores");
  using Fm = Fmt<F>;
  float acc[KPT][NG], p[KPT][NG];
  zero_chains(acc, p);
  uint32_t cur[KPT][4], nxt[KPT][4];
  uint16_t sraw[KPT];
#pragma unroll
  for (int k = 0; k < KPT; k++) sraw[k] = 0, load16<KS>(kr[k], v16, cur[k]);
  const int npiece = D / Fm::epp;
  for (int pc = 0; pc < npiece; pc++) {
    const int e0 = pc * Fm::epp, g = e0 / 32;
    if (pc + 1 < npiece) {
#pragma unroll
      for (int k = 0; k < KPT; k++) load16<KS>(kr[k] + Fm::code_off(e0 + Fm::epp), v16, nxt[k]);
    }
    if constexpr (F != KvKind::BF16) {
      if (pc % Fm::ppg == 0) {
#pragma unroll
        for (int k = 0; k < KPT; k++) sraw[k] = load_u16<KS>(kr[k] + Fm::scale_off(D, g));
      }
    }
    uint32_t x[KPT][8];
#pragma unroll
    for (int k = 0; k < KPT; k++) prep<F>(cur[k], x[k]);
#pragma unroll
    for (int i4 = 0; i4 < Fm::epp; i4 += 4) {
      float4 qv[NG];
#pragma unroll
      for (int h = 0; h < NG; h++) qv[h] = *reinterpret_cast<const float4*>(&q_s[h * D + e0 + i4]);
#pragma unroll
      for (int ii = 0; ii < 4; ii++)
#pragma unroll
        for (int k = 0; k < KPT; k++) {
          const float u = unit<F>(x[k], i4 + ii);
#pragma unroll
          for (int h = 0; h < NG; h++) {
            const float qq = ii == 0 ? qv[h].x : ii == 1 ? qv[h].y : ii == 2 ? qv[h].z : qv[h].w;
            p[k][h] = hkv::fma_rn(u, qq, p[k][h]);
          }
        }
    }
    if (pc % Fm::ppg == Fm::ppg - 1) {  // the group's end: acc = fma(s_g, p_g, acc)
#pragma unroll
      for (int k = 0; k < KPT; k++) {
        const float s = scale_from<F>(sraw[k]);
#pragma unroll
        for (int h = 0; h < NG; h++) acc[k][h] = hkv::fma_rn(s, p[k][h], acc[k][h]), p[k][h] = 0.0f;
      }
    }
#pragma unroll
    for (int k = 0; k < KPT; k++)
#pragma unroll
      for (int i = 0; i < 4; i++) cur[k][i] = nxt[k][i];
  }
  scaled_scores(acc, scale, score);
}

// oc[h] = fma(e_t[h], v_t[d], oc[h]) over the chunk's keys in order, element d of each V row read from
// global memory; the values of KA keys are loaded before any is used, so KA loads are in flight.
template <KvKind F, int NG, int KA>
__device__ __forceinline__ void value_chains(const uint8_t* vbase, size_t stride, int D, int d, int len,
                                             const float* e_s, float (&oc)[NG]) {
  for (int j0 = 0; j0 < len; j0 += KA) {
    float vv[KA];
#pragma unroll
    for (int k = 0; k < KA; k++) vv[k] = j0 + k < len ? value_at<F>(vbase + size_t(j0 + k) * stride, D, d) : 0.0f;
#pragma unroll
    for (int k = 0; k < KA; k++) {
      if (j0 + k >= len) break;
      float e[NG];
      weights<NG>(e_s + (j0 + k) * kEs, e);
#pragma unroll
      for (int h = 0; h < NG; h++) oc[h] = hkv::fma_rn(e[h], vv[k], oc[h]);
    }
  }
}

// oc[h] = fma(e_t[h], v_t[d], oc[h]) over the chunk's keys in order, element d of each row (rows rstride
// bytes apart; in shared memory when SMEM), one key's value loaded at a time, unrolled by U keys.
template <KvKind F, int NG, bool SMEM, int U = 4>
__device__ __forceinline__ void value_loop(const uint8_t* base, size_t rstride, int D, int d, int len, const float* e_s,
                                           float (&oc)[NG]) {
#pragma unroll U
  for (int j = 0; j < len; j++) {
    const float v = value_at<F, SMEM>(base + size_t(j) * rstride, D, d);
    float e[NG];
    weights<NG>(e_s + j * kEs, e);
#pragma unroll
    for (int h = 0; h < NG; h++) oc[h] = hkv::fma_rn(e[h], v, oc[h]);
  }
}

// Elements d and d + 1 (d even, so one group) of a row as s_g·u_d and s_g·u_{d+1}, exactly as value_at: one
// scale load and conversion for both, and one code load (q4h: the byte of both nibbles; fp8: two bytes).
template <KvKind F, bool SMEM>
__device__ __forceinline__ void value_pair(const uint8_t* row, int D, int d, float& v0, float& v1) {
  if constexpr (F == KvKind::BF16) {  // compiled, never launched: bf16 takes the kv-staged shape
    v0 = value_at<F, SMEM>(row, D, d), v1 = value_at<F, SMEM>(row, D, d + 1);
  } else if constexpr (F == KvKind::FP8) {
    const float s = f32_from_f16_hw(load_u16<SMEM>(row + D + 2 * (d / 32)));
    const uint16_t w = load_u16<SMEM>(row + d);
    v0 = s * f32_from_e4m3_hw(uint8_t(w & 0xffu)), v1 = s * f32_from_e4m3_hw(uint8_t(w >> 8));
  } else {
    const float s = f32_from_f16_hw(load_u16<SMEM>(row + D / 2 + 2 * (d / 32)));
    const uint32_t b = load_u8<SMEM>(row + d / 2);  // low nibble d, high nibble d + 1 (see value_at)
    v0 = s * (__uint_as_float(masked_or<0x0fu, 0x4b000000u>(b)) - 8388616.0f);
    v1 = s * (__uint_as_float(masked_or<0xf0u, 0x49000000u>(b)) - 524296.0f);
  }
}

// value_loop for two elements a thread, d and d + 1 (the v-staged-x2 shape): both share the
// key's weights, its group scale and its code load; each (head, element) chain takes the keys in order as in
// value_loop.
// U: the keys unrolled (HKV_ATTN_VU), so that later keys' shared-memory loads issue before earlier keys' fmas.
template <KvKind F, int NG, bool SMEM, int U>
__device__ __forceinline__ void value_loop2(const uint8_t* base, size_t rstride, int D, int d, int len,
                                            const float* e_s, float (&oc)[NG][2]) {
#pragma unroll U
  for (int j = 0; j < len; j++) {
    const uint8_t* row = base + size_t(j) * rstride;
    float v0, v1;
    value_pair<F, SMEM>(row, D, d, v0, v1);
    float e[NG];
    weights<NG>(e_s + j * kEs, e);
#pragma unroll
    for (int h = 0; h < NG; h++) oc[h][0] = hkv::fma_rn(e[h], v0, oc[h][0]), oc[h][1] = hkv::fma_rn(e[h], v1, oc[h][1]);
  }
}

// f(std::integral_constant<int, U>{}) with U = vu for 32, 16 and 8, else 4: the value loops' unroll (HKV_ATTN_VU)
// chosen at run time, as a template argument.
template <class Fn>
__device__ __forceinline__ void with_unroll(int vu, Fn&& f) {
  if (vu == 32)
    f(std::integral_constant<int, 32>{});
  else if (vu == 16)
    f(std::integral_constant<int, 16>{});
  else if (vu == 8)
    f(std::integral_constant<int, 8>{});
  else
    f(std::integral_constant<int, 4>{});
}

// Rows j0 … j1 − 1 (row_bytes each, a multiple of 16; stride bytes apart in global memory) copied back to
// back into shared memory by cp.async, 16 bytes a copy, as one committed group (empty when j1 ≤ j0).
template <int T>
__device__ __forceinline__ void stage_rows(uint8_t* dst, const uint8_t* src, size_t stride, size_t row_bytes, int j0,
                                           int j1) {
  const int units = int(row_bytes / 16);
  for (int i = threadIdx.x; i < (j1 - j0) * units; i += T) {
    const int j = j0 + i / units, u = i % units;
    cp_async16(dst + size_t(j) * row_bytes + 16 * u, src + size_t(j) * stride + 16 * u);
  }
  cp_async_commit();
}

// STAGE (kv-staged shape, fp8 and q4h, rows a multiple of 16 bytes): 1, the chunk's V
// rows are copied into shared memory with cp.async when the block starts, so their loads run during the
// score phase and the value chains read shared memory; 2, the K rows too (a first cp.async group, waited
// for before the scores); 3 (bf16's staged shapes with Tuning's attn_bf16_halves, whose chunk of rows does not fit
// shared memory: 512 KB at head_dim 256), the chunk's rows half a chunk (kHalfRows) at a time through one buffer of
// kHalfRows rows: K's first half, its keys' scores (a key a thread), K's second half, its scores, then V's first
// half copied while the weights are made, each element's chain over its keys, V's second half, the same chains on
// over its keys; each half's copies are issued at once (every load of a half in flight), and while a half is
// computed the next half's rows are prefetched into L2. The operations and their order are unchanged.
// PH (a diagnostic; the staged shapes, fp8 and q4h: all but slim and unstaged-x8): thread 0 counts its cycles in each
// phase (attn_phases_begin): the wait (the block's start, the early copies, pdl_wait), q, the scores, the weights (the
// chunk's maximum, exp_c, and lc by threads T−1−h), the values (until every thread of the block has ended).
constexpr int kHalfRows = kChunk / 2;  // STAGE 3: rows a staged half

// Rows j0 … j1 − 1 (row_bytes each, stride bytes apart from src) into L2, a 128-byte line a prefetch.
template <int T>
__device__ __forceinline__ void prefetch_rows_l2(const uint8_t* src, size_t stride, size_t row_bytes, int j0, int j1) {
  const int lines = int((row_bytes + 127) / 128);
  for (int i = threadIdx.x; i < (j1 - j0) * lines; i += T)
    prefetch_l2(src + size_t(j0 + i / lines) * stride + 128 * size_t(i % lines));
}

template <KvKind F, int NG, int T, int DPT, int STAGE = 0, int VP = 1, bool PH = false>
// (__launch_bounds__(T) alone: a min-blocks hint of 1 lets ptxas give the v-staged-x2 shape 160 registers instead of
// 112, so one block fits a multiprocessor instead of two.)
__global__ void __launch_bounds__(T) attn_chunk_kernel(AttnArgs a, int qblocks, int hpb, int maxch, float scale) {
  constexpr bool phases = PH;  // a diagnostic (attn_phases_begin): thread 0's cycles a phase
  long long k0 = 0, kw = 0, k1 = 0, k2 = 0, kx = 0;
  if constexpr (phases)
    if (threadIdx.x == 0) k0 = clock64();
  extern __shared__ __align__(16) uint8_t stage_s[];  // STAGE 2: [kChunk][row_bytes] K, then V; STAGE 1: V
  __shared__ __align__(16) float q_s[NG * kMaxD];     // [head][D]
  __shared__ __align__(16) float e_s[kChunk * kEs];   // [key][head]: scores, then weights
  __shared__ float red_s[T / 32][NG];
  __shared__ float mc_s[NG];
  __shared__ Q4hScratch vq_s[F == KvKind::Q4H ? T / 32 : 1];  // q4h's values: a warp's scratch
  using Fm = Fmt<F>;
  const int tid = threadIdx.x;
  const int64_t row = blockIdx.z;
  const int c = blockIdx.y, c0 = c * kChunk;
  // a.dsplit blocks a (KV head, head block, chunk): block r of them the values of elements [r·D/ds, (r+1)·D/ds)
  const int ds = a.dsplit, r = int(blockIdx.x) % ds, bx = int(blockIdx.x) / ds;
  const int D = a.D, qpk = a.H / a.KV, kvh = bx / qblocks, qb = bx % qblocks;
  const int h0 = kvh * qpk + qb * hpb, ng = min(min(hpb, NG), qpk - qb * hpb);
  const bool v16 = a.row_bytes % 16 == 0;
  // the chunk's rows of KV head kvh, stride bytes apart (q4h: one contiguous block of the cache; kv_row_offset)
  constexpr int B = kv_block(F);
  const size_t stride = kv_row_stride(a.KV, a.row_bytes, B);
  const uint8_t* kbase = a.k_rows[row] + kv_row_offset(c0, kvh, a.KV, a.row_bytes, B);
  const uint8_t* vbase = a.v_rows[row] + kv_row_offset(c0, kvh, a.KV, a.row_bytes, B);
  constexpr bool KS = STAGE == 2;
  uint8_t* const vstage = stage_s + (KS ? size_t(kChunk) * a.row_bytes : 0);
  // a.pre (the caller's pre_ok): the rows no kernel that may still run writes are copied before pdl_wait, so that their
  // copies overlap the kernel ahead (attn_prep_pack, which lets this launch start once its blocks have passed their
  // own pdl_wait: every kernel before it has completed). That launch writes the rows of this step's positions, which
  // are among each row's last N keys (N rows in the batch); n_keys and the row pointers are written by the host before
  // the step's first kernel. So keys below n − N are copied first, the rest after pdl_wait.
  static_assert(STAGE != 3 || (T == kHalfRows && DPT == 1 && VP == 1), "STAGE 3: a key a thread, a half's keys");
  int early = 0;  // rows 0 … early − 1 of the chunk copied before pdl_wait
  if constexpr (STAGE == 1 || STAGE == 2)
    if (a.pre) {
      const int n = a.n_keys[row];
      if (c0 >= n) return;
      early = max(0, min(min(kChunk, n - c0), n - int(a.N) - c0));
      if constexpr (KS) stage_rows<T>(stage_s, kbase, stride, a.row_bytes, 0, early);
      stage_rows<T>(vstage, vbase, stride, a.row_bytes, 0, early);
    }
  pdl_wait();  // nothing else is read before the kernel ahead has completed (launch_k)
  if constexpr (phases)
    if (tid == 0) kw = clock64();
  const int n = a.n_keys[row];
  if (c0 >= n) return;
  const int len = min(kChunk, n - c0);
  load_q<F, NG, T>(a, row, h0, ng, q_s);
  if constexpr (phases)  // q loaded (and rotated), the rows' copies issued
    if (tid == 0) k1 = clock64();

  if constexpr (STAGE == 1 || STAGE == 2) {  // the groups in order: [K, V before pdl_wait,] K, V
    if constexpr (KS) stage_rows<T>(stage_s, kbase, stride, a.row_bytes, early, len);
    stage_rows<T>(vstage, vbase, stride, a.row_bytes, early, len);
  }
  if constexpr (KS) {  // the K rows are in (every group but the last)
    cp_async_wait<1>();
    __syncthreads();
  }
  const uint8_t* const kb = KS ? stage_s : kbase;  // the K rows the scores read, and their stride
  const size_t kstride = KS ? a.row_bytes : stride;

  // ---- scores: keys j and j + T of each 2T keys, one chain per (key, head) ----
  float mloc[NG];
#pragma unroll
  for (int h = 0; h < NG; h++) mloc[h] = -INFINITY;
  if constexpr (STAGE == 3) {  // K half by half, key j0 + tid of each (the chains of key_scores, one key a thread)
    for (int j0 = 0; j0 < len; j0 += kHalfRows) {
      const int rows = min(kHalfRows, len - j0);
      stage_rows<T>(stage_s, kbase + size_t(j0) * stride, stride, a.row_bytes, 0, rows);
      if (j0 + kHalfRows < len)  // the next half, K's or else V's first, into L2 meanwhile
        prefetch_rows_l2<T>(kbase, stride, a.row_bytes, j0 + kHalfRows, len);
      else
        prefetch_rows_l2<T>(vbase, stride, a.row_bytes, 0, min(kHalfRows, len));
      cp_async_wait<0>();
      __syncthreads();
      if (tid < rows) {
        const uint8_t* const kr[1] = {stage_s + size_t(tid) * a.row_bytes};
        float sc[1][NG];
        key_scores<F, NG, 1, true>(kr, q_s, D, v16, scale, sc);
#pragma unroll
        for (int h = 0; h < NG; h++) {
          e_s[(j0 + tid) * kEs + h] = sc[0][h];
          mloc[h] = max_step(mloc[h], sc[0][h]);
        }
      }
      __syncthreads();  // no thread reads this half any more
    }
    stage_rows<T>(stage_s, vbase, stride, a.row_bytes, 0, min(kHalfRows, len));  // V's first half, during the weights
  }
  for (int jb = 0; STAGE != 3 && jb < len; jb += 2 * T) {
    const int j[2] = {jb + tid, jb + T + tid};
    const bool ok[2] = {j[0] < len, j[1] < len};
    const uint8_t* const kr[2] = {kb + size_t(ok[0] ? j[0] : 0) * kstride, kb + size_t(ok[1] ? j[1] : 0) * kstride};
    float sc[2][NG];
    if constexpr (F == KvKind::Q4H) {
      q4h_int_scores<NG, 2, KS, false>(kr, q_s, D, v16, scale, sc);
    } else if constexpr (F == KvKind::FP8) {
      // attention() sets fast_scores only where slim_scores<…, 256> applies; the test here is the kernel's own guard
      if (a.fast_scores && D == 256 && v16)
        slim_scores<F, NG, 2, 256, KS>(kr, q_s, scale, sc);
      else
        key_scores<F, NG, 2, KS>(kr, q_s, D, v16, scale, sc);
    } else {
      key_scores<F, NG, 2, KS>(kr, q_s, D, v16, scale, sc);
    }
#pragma unroll
    for (int k = 0; k < 2; k++)
      if (ok[k]) {
#pragma unroll
        for (int h = 0; h < NG; h++) {
          e_s[j[k] * kEs + h] = sc[k][h];
          mloc[h] = max_step(mloc[h], sc[k][h]);
        }
      }
  }
  if constexpr (phases)  // every key's score
    if (tid == 0) k2 = clock64();
  chunk_weights<NG, T>(mloc, e_s, len, red_s, mc_s);

  float* part = a.part + ((row * a.H + h0) * int64_t(maxch) + c) * (D + 2);
  const int64_t head_stride = int64_t(maxch) * (D + 2);
  store_ml<NG, T>(part, head_stride, e_s, mc_s, len, r == 0 ? ng : 0);  // (mc, lc): the first of the ds blocks
  if constexpr (phases)  // the chunk's maximum and weights (and, in threads T−1−h, lc)
    if (tid == 0) kx = clock64();

  // ---- weighted values: q4h in integers, a warp a group (q4h_int_values); else thread tid owns d0 .. d0 + DPT − 1
  // for all NG heads, keys in order ----
  if constexpr (F == KvKind::Q4H) {
    if constexpr (STAGE > 0) {  // the V rows are in
      cp_async_wait<0>();
      __syncthreads();
    }
    const uint8_t* const vr = STAGE > 0 ? vstage : vbase;
    const size_t vs = STAGE > 0 ? size_t(a.row_bytes) : stride;
    const int G = D / 32;
    q4h_values_block<NG, kEs, T>(vr, vs, v16, vr + Fm::scale_off(D, 0), vs, 2, r * G / ds, (r + 1) * G / ds, len, e_s,
                                 ng, part, head_stride, vq_s);
  } else if constexpr (STAGE == 3) {  // V half by half: element d's chains go on over the second half's keys
    const int d = r * (D / ds) + tid;
    const bool mine = d < (r + 1) * (D / ds);  // T ≥ D: at most one element a thread
    float oc[NG];
#pragma unroll
    for (int h = 0; h < NG; h++) oc[h] = 0.0f;
    for (int j0 = 0; j0 < len; j0 += kHalfRows) {
      const int rows = min(kHalfRows, len - j0);
      if (j0 > 0) {
        __syncthreads();  // every chain done with the first half
        stage_rows<T>(stage_s, vbase + size_t(j0) * stride, stride, a.row_bytes, 0, rows);
      } else if (rows < len) {
        prefetch_rows_l2<T>(vbase, stride, a.row_bytes, kHalfRows, len);
      }
      cp_async_wait<0>();
      __syncthreads();
      if (mine)
        with_unroll(a.vu, [&](auto u) {
          value_loop<F, NG, true, decltype(u)::value>(stage_s, a.row_bytes, D, d, rows, e_s + j0 * kEs, oc);
        });
    }
    if (mine)
#pragma unroll
      for (int h = 0; h < NG; h++)
        if (h < ng) part[h * head_stride + 2 + d] = oc[h];
  } else if constexpr (DPT == 1) {
    if constexpr (STAGE > 0) {  // the V rows are in
      cp_async_wait<0>();
      __syncthreads();
    }
    if constexpr (VP == 2) {  // v-staged-x2: elements 2·tid and 2·tid + 1, staged V rows
      static_assert(STAGE > 0, "v-staged-x2 reads staged V rows");
      for (int d = 2 * tid; d < D; d += 2 * T) {
        float oc[NG][2];
#pragma unroll
        for (int h = 0; h < NG; h++) oc[h][0] = oc[h][1] = 0.0f;
        with_unroll(a.vu, [&](auto u) {
          value_loop2<F, NG, true, decltype(u)::value>(vstage, a.row_bytes, D, d, len, e_s, oc);
        });
#pragma unroll
        for (int h = 0; h < NG; h++)
          if (h < ng) part[h * head_stride + 2 + d] = oc[h][0], part[h * head_stride + 3 + d] = oc[h][1];
      }
    } else
      for (int d = r * (D / ds) + tid; d < (r + 1) * (D / ds); d += T) {
        float oc[NG];
#pragma unroll
        for (int h = 0; h < NG; h++) oc[h] = 0.0f;
        if constexpr (STAGE > 0) {
          with_unroll(a.vu, [&](auto u) {
            value_loop<F, NG, true, decltype(u)::value>(vstage, a.row_bytes, D, d, len, e_s, oc);
          });
        } else if constexpr (F == KvKind::BF16) {
          // 32 keys' values are loaded before any is used, so 32 loads are in flight; the chains still take
          // the keys in order. fp8 and q4h keep one key at a time (and, in the kv-staged shape, their rows staged
          // in shared memory): with 32 keys in flight q4h is slower.
          value_chains<F, NG, 32>(vbase, stride, D, d, len, e_s, oc);
        } else {
          value_loop<F, NG, false>(vbase, stride, D, d, len, e_s, oc);
        }
#pragma unroll
        for (int h = 0; h < NG; h++)
          if (h < ng) part[h * head_stride + 2 + d] = oc[h];
      }
  } else {
    static_assert(DPT == 8, "DPT is 1 or 8");
    constexpr int nw = F == KvKind::BF16 ? 4 : F == KvKind::FP8 ? 2 : 1;  // code words of 8 elements
    constexpr int KB = 8;                                                 // keys loaded ahead
    const int d0 = tid * DPT;
    if (d0 < D) {
      const int g = d0 / 32;
      const int coff = Fm::code_off(d0), soff = F == KvKind::BF16 ? 0 : Fm::scale_off(D, g);
      const bool vec = a.row_bytes % (4 * nw) == 0;  // the words are aligned
      float oc[NG][DPT];
#pragma unroll
      for (int h = 0; h < NG; h++)
#pragma unroll
        for (int i = 0; i < DPT; i++) oc[h][i] = 0.0f;
      for (int jb = 0; jb < len; jb += KB) {
        uint32_t w[KB][nw];
        uint16_t sr[KB];
#pragma unroll
        for (int kk = 0; kk < KB; kk++) {
          const uint8_t* r = vbase + size_t(jb + kk < len ? jb + kk : jb) * stride;
          if (vec) {
            if constexpr (nw == 4) {
              const uint4 u = __ldg(reinterpret_cast<const uint4*>(r + coff));
              w[kk][0] = u.x, w[kk][1] = u.y, w[kk][2] = u.z, w[kk][3] = u.w;
            } else if constexpr (nw == 2) {
              const uint2 u = __ldg(reinterpret_cast<const uint2*>(r + coff));
              w[kk][0] = u.x, w[kk][1] = u.y;
            } else {
              w[kk][0] = __ldg(reinterpret_cast<const unsigned*>(r + coff));
            }
          } else {
#pragma unroll
            for (int i = 0; i < nw; i++)
              w[kk][i] = uint32_t(__ldg(r + coff + 4 * i)) | uint32_t(__ldg(r + coff + 4 * i + 1)) << 8 |
                         uint32_t(__ldg(r + coff + 4 * i + 2)) << 16 | uint32_t(__ldg(r + coff + 4 * i + 3)) << 24;
          }
          sr[kk] = F == KvKind::BF16 ? uint16_t(0) : load_u16(r + soff);
        }
#pragma unroll
        for (int kk = 0; kk < KB; kk++) {
          if (jb + kk >= len) break;
          const int j = jb + kk;
          const float s = scale_from<F>(sr[kk]);
          uint32_t x[8];
          {
            uint32_t w4[4] = {w[kk][0], nw > 1 ? w[kk][nw > 1 ? 1 : 0] : 0u, nw > 2 ? w[kk][nw > 2 ? 2 : 0] : 0u,
                              nw > 3 ? w[kk][nw > 3 ? 3 : 0] : 0u};
            prep<F>(w4, x);
          }
          float v[DPT];
#pragma unroll
          for (int i = 0; i < DPT; i++) v[i] = s * unit<F>(x, i);  // s_g · u_d, exact (bf16: 1 · u)
          float e[NG];
          weights<NG>(e_s + j * kEs, e);
#pragma unroll
          for (int h = 0; h < NG; h++)
#pragma unroll
            for (int i = 0; i < DPT; i++) oc[h][i] = hkv::fma_rn(e[h], v[i], oc[h][i]);
        }
      }
#pragma unroll
      for (int h = 0; h < NG; h++)
        if (h < ng)
#pragma unroll
          for (int i = 0; i < DPT; i++) part[h * head_stride + 2 + d0 + i] = oc[h][i];
    }
  }
  if constexpr (phases) {  // (attn_phases_begin) the block's three phases, in thread 0's cycles
    __syncthreads();
    if (tid == 0) {
      const long long k3 = clock64();
      atomicAdd(&g_attn_cycles[0], (unsigned long long)(kw - k0));
      atomicAdd(&g_attn_cycles[1], (unsigned long long)(k1 - kw));
      atomicAdd(&g_attn_cycles[2], (unsigned long long)(k2 - k1));
      atomicAdd(&g_attn_cycles[3], (unsigned long long)(kx - k2));
      atomicAdd(&g_attn_cycles[4], (unsigned long long)(k3 - kx));
      atomicAdd(&g_attn_cycles[5], 1ull);
    }
  }
}

// A chunk kernel with staged rows (256 threads), its dynamic shared memory allowed up to kStageMax on the
// first launch (the static is per instantiation of this template: one per kernel), then launch_k.
template <auto Kernel, class... A>
void launch_staged(bool pdl, dim3 grid, size_t smem, cudaStream_t st, A... args) {
  static bool ready = false;
  if (!ready) HKV_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kStageMax));
  ready = true;
  launch_k(pdl, Kernel, grid, dim3(256), smem, st, args...);
}

// The staged shapes with one element a thread in the values (kv-staged, kv-staged-h1, kv-staged-h2): a with
// attn_dsplit's blocks a chunk and head block; recorded in rec for attn_last_launch.
AttnArgs with_dsplit(const AttnArgs& a, dim3 grid, AttnLaunch& rec) {
  AttnArgs b = a;
  b.dsplit = attn_dsplit(a.D, int64_t(grid.x) * grid.y * grid.z, sm_count());
  rec.dsplit = b.dsplit;
  return b;
}

}  // namespace

namespace attn {

template <KvKind F, int NG>
void launch_chunk_kernel(const ChunkGrid& cg, AttnShape shape, AttnLaunch& rec) {
  const AttnArgs& a = cg.a;
  const dim3 grid = cg.grid;
  const int qblocks = cg.qblocks, hpb = cg.hpb, maxch = cg.maxch;
  const float scale = cg.scale;
  const cudaStream_t st = cg.st;
  const bool pdl = cg.pdl;
  if (shape == AttnShape::UnstagedX8) {
    launch_k(pdl, attn_chunk_kernel<F, NG, 64, 8>, grid, dim3(64), 0, st, a, qblocks, hpb, maxch, scale);
  } else if (shape != AttnShape::VStagedX2 && F != KvKind::BF16 && a.row_bytes % 16 == 0 &&
             2 * kChunk * a.row_bytes <= kStageMax) {
    // K and V staged (q4h at head_dim 256: 144 KB); each chunk's values over b.dsplit blocks (attn_dsplit)
    const AttnArgs b = with_dsplit(a, grid, rec);
    const dim3 g(grid.x * unsigned(b.dsplit), grid.y, grid.z);
    if (g_attn_phases)
      launch_staged<attn_chunk_kernel<F, NG, 256, 1, 2, 1, true>>(pdl, g, 2 * kChunk * a.row_bytes, st, b, qblocks, hpb,
                                                                  maxch, scale);
    else
      launch_staged<attn_chunk_kernel<F, NG, 256, 1, 2>>(pdl, g, 2 * kChunk * a.row_bytes, st, b, qblocks, hpb, maxch,
                                                         scale);
  } else if (shape == AttnShape::VStagedX2 && F != KvKind::BF16 && a.row_bytes % 16 == 0 &&
             kChunk * a.row_bytes <= kStageMax) {
    // V staged, two elements a thread
    if (g_attn_phases)
      launch_staged<attn_chunk_kernel<F, NG, 256, 1, 1, 2, true>>(pdl, grid, kChunk * a.row_bytes, st, a, qblocks, hpb,
                                                                  maxch, scale);
    else
      launch_staged<attn_chunk_kernel<F, NG, 256, 1, 1, 2>>(pdl, grid, kChunk * a.row_bytes, st, a, qblocks, hpb, maxch,
                                                            scale);
  } else if (F != KvKind::BF16 && a.row_bytes % 16 == 0 && kChunk * a.row_bytes <= kStageMax) {
    // V staged (fp8 at head_dim 256: 139 KB; q4h 72 KB); b.dsplit as above
    const AttnArgs b = with_dsplit(a, grid, rec);
    const dim3 g(grid.x * unsigned(b.dsplit), grid.y, grid.z);
    if (g_attn_phases)
      launch_staged<attn_chunk_kernel<F, NG, 256, 1, 1, 1, true>>(pdl, g, kChunk * a.row_bytes, st, b, qblocks, hpb,
                                                                  maxch, scale);
    else
      launch_staged<attn_chunk_kernel<F, NG, 256, 1, 1>>(pdl, g, kChunk * a.row_bytes, st, b, qblocks, hpb, maxch,
                                                         scale);
  } else if (F == KvKind::BF16 && cg.bf16_halves && shape != AttnShape::VStagedX2 && a.row_bytes % 16 == 0 &&
             kHalfRows * a.row_bytes <= kStageMax) {
    if constexpr (F == KvKind::BF16) {  // bf16's staged shapes, the rows half a chunk at a time (STAGE 3); b.dsplit
      const AttnArgs b = with_dsplit(a, grid, rec);
      const dim3 g(grid.x * unsigned(b.dsplit), grid.y, grid.z);
      rec.halves = true;
      if (g_attn_phases)
        launch_staged<attn_chunk_kernel<F, NG, 256, 1, 3, 1, true>>(pdl, g, kHalfRows * a.row_bytes, st, b, qblocks,
                                                                    hpb, maxch, scale);
      else
        launch_staged<attn_chunk_kernel<F, NG, 256, 1, 3>>(pdl, g, kHalfRows * a.row_bytes, st, b, qblocks, hpb, maxch,
                                                           scale);
    }
  } else {
    launch_k(pdl, attn_chunk_kernel<F, NG, 256, 1>, grid, dim3(256), 0, st, a, qblocks, hpb, maxch, scale);
  }
  HKV_CHECK_LAUNCH();
}

template void launch_chunk_kernel<KvKind::BF16, 1>(const ChunkGrid&, AttnShape, AttnLaunch&);
template void launch_chunk_kernel<KvKind::BF16, 2>(const ChunkGrid&, AttnShape, AttnLaunch&);
template void launch_chunk_kernel<KvKind::BF16, 4>(const ChunkGrid&, AttnShape, AttnLaunch&);
template void launch_chunk_kernel<KvKind::BF16, 6>(const ChunkGrid&, AttnShape, AttnLaunch&);
template void launch_chunk_kernel<KvKind::BF16, 8>(const ChunkGrid&, AttnShape, AttnLaunch&);
template void launch_chunk_kernel<KvKind::FP8, 1>(const ChunkGrid&, AttnShape, AttnLaunch&);
template void launch_chunk_kernel<KvKind::FP8, 2>(const ChunkGrid&, AttnShape, AttnLaunch&);
template void launch_chunk_kernel<KvKind::FP8, 4>(const ChunkGrid&, AttnShape, AttnLaunch&);
template void launch_chunk_kernel<KvKind::FP8, 6>(const ChunkGrid&, AttnShape, AttnLaunch&);
template void launch_chunk_kernel<KvKind::FP8, 8>(const ChunkGrid&, AttnShape, AttnLaunch&);
template void launch_chunk_kernel<KvKind::Q4H, 1>(const ChunkGrid&, AttnShape, AttnLaunch&);
template void launch_chunk_kernel<KvKind::Q4H, 2>(const ChunkGrid&, AttnShape, AttnLaunch&);
template void launch_chunk_kernel<KvKind::Q4H, 4>(const ChunkGrid&, AttnShape, AttnLaunch&);
template void launch_chunk_kernel<KvKind::Q4H, 6>(const ChunkGrid&, AttnShape, AttnLaunch&);
template void launch_chunk_kernel<KvKind::Q4H, 8>(const ChunkGrid&, AttnShape, AttnLaunch&);

}  // namespace attn

void attn_phases_begin() {
  phase_sums_zero(g_attn_cycles);
  g_attn_phases = true;
}

AttnPhases attn_phases_end() {
  const std::array<double, 6> m = phase_sums_mean(g_attn_cycles);
  g_attn_phases = false;
  AttnPhases p;
  p.wait_cycles = m[0], p.q_cycles = m[1], p.score_cycles = m[2], p.weight_cycles = m[3], p.value_cycles = m[4];
  p.blocks = m[5];
  return p;
}

}  // namespace hkv::cuda
