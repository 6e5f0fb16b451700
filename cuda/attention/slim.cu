// attn_slim_kernel: every thread busy in both phases, V read from global memory (fp8 and q4h at head_dim 256).
// The operations and their order are attn_chunk_kernel's (attend(), contract.cuh); what changes is who runs them
// and how they are fed. In v-staged-x2 half the block waits in the value phase (128 of 256 threads own two elements
// each), and its SASS spends about two instructions an fma (register copies of the next piece, whose loop is not
// unrolled; three instructions a decoded value). Here 128 threads take a chunk of one KV head for its NG query heads:
//   scores: thread tid takes keys tid + 128·k (k < 4), the 4 keys in one pass, so each 16-byte shared load of q serves
//     4 keys; a key's 16-byte pieces are loaded one piece ahead into two buffers (the loop unrolled by two pieces, so
//     nothing is copied), its group scale with the piece that starts the group; a q4h unit is one lop3 and one add,
//     from the word where its nibble lies (slim_q4h_unit). The loop holds 1.45 instructions an fma (q4h, NG = 6);
//   values: q4h a warp two groups on the tensor cores (q4h_int_values), its scales from the staged
//     copy below; fp8 thread tid owns elements 2·tid and 2·tid + 1 for all NG heads; the V group scales (16 bytes a
//     row) are copied into shared memory by cp.async as the block starts (and the K rows' too, below) and converted to
//     fp32 once after the weights, the code bytes read from global memory, U = 16 keys a batch, the next batch's loads
//     issued before this batch's fmas; the whole batches in a loop without a test a key, the partial one after it.
// 21–41 KB of shared memory (q, the weights at NG floats a key, the scales), at most 128 registers: four blocks a
// multiprocessor. Auto takes it for fp8 and q4h beyond one chunk block a multiprocessor (auto_attn_shape says where and
// why). A 64-thread form (4 elements a thread in the values) is slower: at 168 registers, 2.6 waves of blocks at 262K;
// at 128, spills, instruction-cache misses and shared-memory queue stalls.
// In this file, in order: slim's units and value chains, its rolled fp8 score loop, the kernel, its launch.
#include <cstddef>
#include <cstdint>
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

// kSlimT, kSlimD and kSlimB (threads a block, its head_dim, blocks a multiprocessor) are in launch.h: policy.cu's
// choices read them too.
constexpr int kSlimKP = kChunk / kSlimT;  // keys a thread in the scores, one pass
constexpr int kSlimU = 16;                // keys a value batch (the next batch's loads issued before this one's fmas)

// Element E (0..7) of a q4h code word w (nibble E; the low nibble of a byte is the even element) as float(c − 8),
// exactly: the nibble masked where it lies under the exponent that makes its low bit worth 1 (2^(23−4k) for the
// nibble at bit 4k), so as_float((w & mask) | exponent) = 2^(23−4k) + c, minus 2^(23−4k) + 8. That exponent leaves
// the nibble in the mantissa for k ≤ 4; nibbles 5–7 are taken from w >> 12, where they are nibbles 2–4 (one shift
// a word, shared by the three).
template <int E>
__device__ __forceinline__ float slim_q4h_unit(uint32_t w) {
  constexpr int k = E < 5 ? E : E - 3;
  constexpr uint32_t mask = 0xfu << (4 * k), expo = uint32_t(127 + 23 - 4 * k) << 23;
  constexpr float off = float((1u << (23 - 4 * k)) + 8u);
  return __uint_as_float(masked_or<mask, expo>(E < 5 ? w : w >> 12)) - off;
}

// The DPT code bytes' word of a thread's elements in a stored row (q4h DPT/2 bytes, fp8 DPT), little-endian.
template <KvKind F, int DPT>
__device__ __forceinline__ uint32_t slim_codes(const uint8_t* p) {
  constexpr int bytes = F == KvKind::Q4H ? DPT / 2 : DPT;
  static_assert(bytes == 1 || bytes == 2, "a thread's codes are 1 or 2 bytes");
  if constexpr (bytes == 1)
    return __ldg(p);
  else
    return __ldg(reinterpret_cast<const unsigned short*>(p));
}

// Element I of a thread's code word as the stored value s · u, exactly (value_at).
template <KvKind F, int I>
__device__ __forceinline__ float slim_value(uint32_t c, float s) {
  if constexpr (F == KvKind::Q4H)
    return s * slim_q4h_unit<I>(c);
  else
    return s * f32_from_e4m3_hw(uint8_t(c >> (8 * I)));
}

// U keys from j0 of the value chains: oc[h][i] = fma(e_t[h], s_t·u_{d0+i}(t), oc[h][i]), keys in order; c the keys'
// code words, svg the thread's group's V scales of the chunk's keys in fp32 ([key], from svf_s). FULL: all U keys are
// below len (no test a key), their scales read 4 keys a 16-byte load.
template <KvKind F, int NG, int ES, int DPT, int U, bool FULL>
__device__ __forceinline__ void slim_values(const uint32_t (&c)[U], const float* svg, int j0, int len, const float* e_s,
                                            float (&oc)[NG][DPT]) {
  float sc[U];
  if constexpr (FULL) {
    static_assert(U % 4 == 0, "a batch of whole 16-byte scale loads");
#pragma unroll
    for (int u = 0; u < U; u += 4) {
      const float4 t = *reinterpret_cast<const float4*>(svg + j0 + u);
      sc[u] = t.x, sc[u + 1] = t.y, sc[u + 2] = t.z, sc[u + 3] = t.w;
    }
  }
#pragma unroll
  for (int u = 0; u < U; u++) {
    if (!FULL && j0 + u >= len) break;
    float e[NG];
    weights<NG, ES>(e_s + (j0 + u) * ES, e);
    const float s = FULL ? sc[u] : svg[j0 + u];
    float v[DPT];
    static_for<DPT>([&](auto ic) { v[decltype(ic)::value] = slim_value<F, decltype(ic)::value>(c[u], s); });
#pragma unroll
    for (int h = 0; h < NG; h++)
#pragma unroll
      for (int i = 0; i < DPT; i++) oc[h][i] = hkv::fma_rn(e[h], v[i], oc[h][i]);
  }
}

// slim_scores with its loops rolled (ROLL: attn_slim_kernel's fp8 form at the 27B's layout beyond one wave,
// attn_slim_fp8_rolled), for a loop body of a word instead of two pieces, so that the slim kernel's warps do not wait
// on instruction fetch: in the H200 build at NG = 6, 296 instructions (4.7 KB) in the inner loop and 416 in the outer,
// against 2,335 (37 KB) in slim_scores' loop. One piece an iteration, the next piece's loads issued into a second
// buffer and copied in; the piece one 4-byte word an inner iteration (4 elements), the words moved down after each.
// The group scales from skr[k] (the K scales staged). The same chains in the same order: each (key, head) chain takes
// its elements in order and ends its groups where slim_scores does. Within one wave of blocks the unrolled loop is
// faster for fp8, so fp8 takes this one only where the grid is more than one wave. Its element
// loop repeats slim_piece's with a word's unit: one helper for both keeps the arithmetic but reschedules 7 kernels'
// SASS, the 27B's q4h slim kernel among them, so it waits for a card to time it.
template <KvKind F, int NG, int KP, int D>
__device__ __forceinline__ void slim_scores_rolled(const uint8_t* const (&kr)[KP], const float* q_s, float scale,
                                                   float (&score)[KP][NG], const uint16_t* const* skr) {
  static_assert(F == KvKind::FP8, "slim_scores_rolled: fp8 (q4h: q4h_int_scores)");
  using Fm = Fmt<F>;
  constexpr int npiece = D / Fm::epp, epw = Fm::epp / 4;  // pieces a row; elements a word
  float acc[KP][NG], p[KP][NG];
  zero_chains(acc, p);
  uint32_t wn[KP][4];  // the next piece of every key
  auto load = [&](int P) {
#pragma unroll
    for (int k = 0; k < KP; k++) load16<false>(kr[k] + Fm::code_off(P * Fm::epp), true, wn[k]);
  };
  load(0);
#pragma unroll 1
  for (int pc = 0; pc < npiece; pc++) {
    uint32_t w[KP][4];
#pragma unroll
    for (int k = 0; k < KP; k++)
#pragma unroll
      for (int i = 0; i < 4; i++) w[k][i] = wn[k][i];
    if (pc + 1 < npiece) load(pc + 1);
#pragma unroll 1
    for (int i = 0; i < 4; i++) {  // word w[k][0] of each key: elements pc·epp + i·epw …
      const int e0 = pc * Fm::epp + i * epw;
      static_for<epw / 4>([&](auto i4c) {
        constexpr int i4 = 4 * decltype(i4c)::value;
        float4 qv[NG];
#pragma unroll
        for (int h = 0; h < NG; h++) qv[h] = *reinterpret_cast<const float4*>(&q_s[h * D + e0 + i4]);
        static_for<4>([&](auto iic) {
          constexpr int ii = decltype(iic)::value;
#pragma unroll
          for (int k = 0; k < KP; k++) {
            const float u = f32_from_e4m3_hw(uint8_t(w[k][0] >> (8 * (i4 + ii))));
#pragma unroll
            for (int h = 0; h < NG; h++) {
              const float qq = ii == 0 ? qv[h].x : ii == 1 ? qv[h].y : ii == 2 ? qv[h].z : qv[h].w;
              p[k][h] = hkv::fma_rn(u, qq, p[k][h]);
            }
          }
        });
      });
#pragma unroll
      for (int k = 0; k < KP; k++) w[k][0] = w[k][1], w[k][1] = w[k][2], w[k][2] = w[k][3];
    }
    if ((pc + 1) % Fm::ppg == 0) {  // the piece ends group pc / ppg
#pragma unroll
      for (int k = 0; k < KP; k++) {
        const float sg = scale_from<F>(skr[k][pc / Fm::ppg]);
#pragma unroll
        for (int h = 0; h < NG; h++) acc[k][h] = hkv::fma_rn(sg, p[k][h], acc[k][h]), p[k][h] = 0.0f;
      }
    }
  }
  scaled_scores(acc, scale, score);
}

// (__launch_bounds__(128, 4): at most 128 registers a thread, four blocks a multiprocessor; with a min-blocks hint of 1
// instead (more registers, fewer blocks) q4h at 262K is about 30% slower.)
// The K rows' group scales are staged in shared memory by cp.async too, each thread its own keys' rows (so no barrier:
// its own copies, waited for), and the score loop reads a row's codes alone from global memory. Loaded once a group in
// the score loop instead, an fp8 row takes 24 L2 sector requests (16 pieces, 8 scale loads), and the scale sector,
// touched once a group over the whole score loop, comes again from DRAM when the grid's 73 MB of K rows in flight have
// evicted it. ES, the floats a key's weights take in e_s: q4h 8 where NG > 4, so that the value loop loads them as two
// 16-byte pieces (at NG = 6, against three 8-byte ones); fp8 keeps NG rounded up to even, for which the two pieces are
// slower. The scores: q4h's by q4h_int_scores; fp8's by slim_scores, or with ROLL (at the 27B's layout beyond one
// wave, attn_slim_fp8_rolled) by slim_scores_rolled. The value loop: the V scales converted to fp32 once, into shared
// memory, and the whole batches without a test a key (sm_90a SASS of the q4h NG = 6 loop: 711 instructions, 22 a key,
// 384 of them the fmas; fp8 757). KVC: the KV heads as a constant (4, the 27B's; other layouts take KVC = 0), and with
// it the row stride, so that a batch's loads take immediate offsets. VLATE (q4h with KVC; Tuning's attn_q4h_form 1):
// the V rows' scales copied after the scores instead of as the block starts, nearer the value phase that reads the
// codes sharing their 32-byte sectors, and waited for after the weights (the same bytes).
template <KvKind F, int NG, bool ROLL = false, int KVC = 0, bool VLATE = false>
__global__ void __launch_bounds__(kSlimT, kSlimB)
    attn_slim_kernel(AttnArgs a, int qblocks, int hpb, int maxch, float scale) {
  constexpr int T = kSlimT, D = kSlimD, U = kSlimU, DPT = D / T;
  static_assert(!VLATE || (F == KvKind::Q4H && KVC != 0), "VLATE: q4h at a constant stride");
  constexpr int ES = F == KvKind::Q4H && NG > 4 ? 8 : (NG + 1) / 2 * 2;
  static_assert(kSlimKP * T == kChunk && 32 % DPT == 0, "a chunk's keys in one pass; a thread's elements in one group");
  // q_s [head][D] and sk_s [key][group] (the K rows' 8 group scales as stored; row kChunk: zeros) for the scores; the
  // same bytes then hold svf_s [group][key], the V scales in fp32, for the values
  constexpr int kQK = NG * D + (kChunk * 8 + 8) / 2, kQKV = 8 * kChunk > kQK ? 8 * kChunk : kQK;
  __shared__ __align__(16) float qk_s[kQKV];
  __shared__ __align__(16) float e_s[kChunk * ES];     // [key][head]: scores, then weights (ES floats a key)
  __shared__ __align__(16) uint16_t sv_s[kChunk * 8];  // [key][group]: the V rows' 8 group scales as stored
  __shared__ float red_s[T / 32][NG];
  __shared__ float mc_s[NG];
  __shared__ Q4hScratch vq_s[F == KvKind::Q4H ? T / 32 : 1];  // q4h's values: a warp's scratch
  float* const q_s = qk_s;
  uint16_t* const sk_s = reinterpret_cast<uint16_t*>(qk_s + NG * D);
  using Fm = Fmt<F>;
  const int tid = threadIdx.x;
  const int64_t row = blockIdx.z;
  const int c = blockIdx.y, c0 = c * kChunk;
  const int qpk = a.H / a.KV, kvh = blockIdx.x / qblocks, qb = blockIdx.x % qblocks;
  const int h0 = kvh * qpk + qb * hpb, ng = min(min(hpb, NG), qpk - qb * hpb);
  // The chunk's rows of KV head kvh, stride bytes apart (q4h: one contiguous block of the cache; kv_row_offset). KVC
  // (the caller has checked a.KV == KVC and that the rows are the format's at kSlimD): the stride as a constant, so
  // that the value loop's loads of a batch take immediate offsets from one address.
  constexpr int B = kv_block(F);
  const int KV = KVC ? KVC : a.KV;
  const size_t stride = KVC ? kv_row_stride(KVC, Fm::row_bytes(D), B) : kv_row_stride(a.KV, a.row_bytes, B);
  const uint8_t* kbase = a.k_rows[row] + kv_row_offset(c0, kvh, KV, a.row_bytes, B);
  const uint8_t* vbase = a.v_rows[row] + kv_row_offset(c0, kvh, KV, a.row_bytes, B);
  pdl_wait();  // nothing is read before the kernel ahead has completed (launch_k)
  const int n = a.n_keys[row];
  if (c0 >= n) return;
  const int len = min(kChunk, n - c0);
  // the K scales of this thread's keys (tid + T·k), a first group, waited for before the scores
  for (int j = tid; j < len; j += T) cp_async16(sk_s + 8 * j, kbase + size_t(j) * stride + Fm::scale_off(D, 0));
  cp_async_commit();
  if (tid < 8) sk_s[kChunk * 8 + tid] = 0;  // the row keys past len read (published by load_q's barrier)
  auto copy_v_scales = [&] {                // the V scales (16 bytes a row), waited for before the values
    for (int j = tid; j < len; j += T) cp_async16(sv_s + 8 * j, vbase + size_t(j) * stride + Fm::scale_off(D, 0));
    cp_async_commit();
  };
  if constexpr (!VLATE) copy_v_scales();
  load_q<F, NG, T>(a, row, h0, ng, q_s);
  if constexpr (VLATE)  // this thread's K-scale copies
    cp_async_wait<0>();
  else  // (the V group may still be in flight)
    cp_async_wait<1>();

  // ---- scores: keys tid + T·k (k < KP), one chain per (key, head) ----
  float mloc[NG];
#pragma unroll
  for (int h = 0; h < NG; h++) mloc[h] = -INFINITY;
#pragma unroll 1
  for (int jb = 0; jb < len; jb += kSlimKP * T) {  // one pass (kSlimKP · T = 512 keys)
    int j[kSlimKP];
    const uint8_t* kr[kSlimKP];
#pragma unroll
    for (int k = 0; k < kSlimKP; k++) j[k] = jb + k * T + tid, kr[k] = kbase + size_t(j[k] < len ? j[k] : 0) * stride;
    float sc[kSlimKP][NG];
    const uint16_t* skr[kSlimKP];
#pragma unroll
    for (int k = 0; k < kSlimKP; k++) skr[k] = sk_s + 8 * (j[k] < len ? j[k] : kChunk);
    if constexpr (F == KvKind::Q4H)
      q4h_int_scores<NG, kSlimKP, false, true>(kr, q_s, D, true, scale, sc, skr);
    else if constexpr (ROLL)
      slim_scores_rolled<F, NG, kSlimKP, D>(kr, q_s, scale, sc, skr);
    else
      slim_scores<F, NG, kSlimKP, D, false, true>(kr, q_s, scale, sc, skr);
#pragma unroll
    for (int k = 0; k < kSlimKP; k++)
      if (j[k] < len) {
#pragma unroll
        for (int h = 0; h < NG; h++) {
          e_s[j[k] * ES + h] = sc[k][h];
          mloc[h] = max_step(mloc[h], sc[k][h]);
        }
      }
  }
  if constexpr (VLATE)
    copy_v_scales();
  else
    cp_async_wait<0>();  // this thread's scale copies; chunk_weights' barriers publish them
  chunk_weights<NG, T, ES>(mloc, e_s, len, red_s, mc_s);
  // the V scales of this thread's own copies (keys tid + T·i) to fp32, transposed, once, rather than by each of a
  // group's 16 threads for every key. After chunk_weights' last barrier no thread reads q_s or sk_s, and the barrier
  // here publishes svf_s
  float* part = a.part + ((row * a.H + h0) * int64_t(maxch) + c) * (D + 2);
  const int64_t head_stride = int64_t(maxch) * (D + 2);
  if constexpr (F == KvKind::Q4H) {  // the values in integers, a warp two groups (q4h_int_values), scales from sv_s
    store_ml<NG, T, ES>(part, head_stride, e_s, mc_s, len, ng);
    if constexpr (VLATE) {  // the V scales, copied while the weights were made
      cp_async_wait<0>();
      __syncthreads();
    }
    q4h_values_block<NG, ES, T>(vbase, stride, true, reinterpret_cast<const uint8_t*>(sv_s), 16, 2, 0, D / 32, len, e_s,
                                ng, part, head_stride, vq_s);
    return;
  }
  float* const svf_s = qk_s;
  for (int j = tid; j < len; j += T) {
    const uint4 r = *reinterpret_cast<const uint4*>(sv_s + 8 * j);
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int gi = 0; gi < 8; gi++) svf_s[gi * kChunk + j] = scale_from<F>(uint16_t(w[gi / 2] >> (16 * (gi % 2))));
  }
  __syncthreads();

  store_ml<NG, T, ES>(part, head_stride, e_s, mc_s, len, ng);

  // ---- weighted values: thread tid owns d0 … d0 + DPT − 1 for all NG heads, keys in order ----
  const int d0 = tid * DPT, g = d0 / 32;
  const uint8_t* const vc = vbase + Fm::code_off(d0);
  float oc[NG][DPT];
#pragma unroll
  for (int h = 0; h < NG; h++)
#pragma unroll
    for (int i = 0; i < DPT; i++) oc[h][i] = 0.0f;
  uint32_t ca[U], cb[U];
  // whole batches in a loop of two (one copy a code buffer), without a test a key; the partial batch after it, once
  const float* const svg = svf_s + g * kChunk;
  const int lenf = len / U * U;  // the keys of whole batches
  auto load_full = [&](uint32_t(&cw)[U], int j0) {
    const uint8_t* p = vc + size_t(j0) * stride;
#pragma unroll
    for (int u = 0; u < U; u++) cw[u] = slim_codes<F, DPT>(p + size_t(u) * stride);
  };
  if (lenf > 0) {
    load_full(ca, 0);
#pragma unroll 1
    for (int j0 = 0;; j0 += 2 * U) {
      load_full(cb, min(j0 + U, lenf - U));  // past the last whole batch: that batch again, not used
      slim_values<F, NG, ES, DPT, U, true>(ca, svg, j0, len, e_s, oc);
      if (j0 + U >= lenf) break;
      load_full(ca, min(j0 + 2 * U, lenf - U));
      slim_values<F, NG, ES, DPT, U, true>(cb, svg, j0 + U, len, e_s, oc);
      if (j0 + 2 * U >= lenf) break;
    }
  }
  if (lenf < len) {
#pragma unroll
    for (int u = 0; u < U; u++) ca[u] = slim_codes<F, DPT>(vc + size_t(min(lenf + u, len - 1)) * stride);
    slim_values<F, NG, ES, DPT, U, false>(ca, svg, lenf, len, e_s, oc);
  }
#pragma unroll
  for (int h = 0; h < NG; h++)
    if (h < ng)
#pragma unroll
      for (int i = 0; i < DPT; i++) part[h * head_stride + 2 + d0 + i] = oc[h][i];
}

}  // namespace

namespace attn {

template <KvKind F, int NG>
void launch_slim_kernel(const ChunkGrid& cg, AttnLaunch& rec) {
  static_assert(F != KvKind::BF16, "slim is written for fp8 and q4h");
  const AttnArgs& a = cg.a;
  if constexpr (F == KvKind::Q4H) {  // Tuning's attn_q4h_form 20, 19, 18, 17, 11 or 8: bulk.cu's, the rows staged by
                                     // bulk copies
    const int form = cg.q4h_form;
    if ((form == 8 || form == 11 || form == 17 || form == 18 || form == 19 || form == 20) &&
        a.row_bytes == size_t(Fmt<F>::row_bytes(kSlimD)) && attn_bulk_built()) {
      if (form == 20)
        launch_bulk_max_key_kernel<NG>(cg, rec);
      else if (form == 19)
        launch_bulk_lc_key_kernel<NG>(cg, rec);
      else if (form == 18)
        launch_bulk_lc_rec_kernel<NG>(cg, rec);
      else if (form == 17)
        launch_bulk_rec_kernel<NG>(cg, rec);
      else if (form == 11)
        launch_bulk_ready_kernel<NG>(cg, rec);
      else
        launch_bulk_kernel<NG>(cg, rec);
      return;
    }
  }
  // The 27B's 4 KV heads (6 query heads each) as a constant, and there fp8's score loop rolled where the grid is more
  // than one wave of blocks (attn_slim_fp8_rolled). The constant-stride forms are compiled for 6 heads a block alone,
  // the only count kvc admits, and fp8's rolled form for them alone.
  const bool kvc = NG == 6 && a.KV == 4 && a.row_bytes == size_t(Fmt<F>::row_bytes(kSlimD));
  const int64_t blocks = int64_t(cg.grid.x) * cg.grid.y * cg.grid.z;
  const bool roll = F == KvKind::FP8 && kvc && attn_slim_fp8_rolled(blocks, sm_count());
  auto go = [&](auto kernel) {
    launch_k(cg.pdl, kernel, cg.grid, dim3(kSlimT), 0, cg.st, a, cg.qblocks, cg.hpb, cg.maxch, cg.scale);
  };
  bool done = false;
  if constexpr (NG == 6) {
    if (kvc) {
      if constexpr (F == KvKind::FP8)
        roll ? go(attn_slim_kernel<F, NG, true, 4>) : go(attn_slim_kernel<F, NG, false, 4>);
      else if (cg.q4h_form == 1)  // Tuning's attn_q4h_form
        go(attn_slim_kernel<F, NG, false, 4, true>);
      else
        go(attn_slim_kernel<F, NG, false, 4>);
      done = true;
    }
  }
  if (!done) go(attn_slim_kernel<F, NG>);
  HKV_CHECK_LAUNCH();
  rec.slim_kernel = true;
  rec.slim_scores = F == KvKind::FP8;  // q4h's scores have one form (q4h_int_scores)
  rec.slim_roll = roll;
  rec.slim_kvc = kvc;
  rec.q4h_form = F == KvKind::Q4H && kvc && cg.q4h_form == 1 ? 1 : 0;
}

template void launch_slim_kernel<KvKind::FP8, 1>(const ChunkGrid&, AttnLaunch&);
template void launch_slim_kernel<KvKind::FP8, 2>(const ChunkGrid&, AttnLaunch&);
template void launch_slim_kernel<KvKind::FP8, 4>(const ChunkGrid&, AttnLaunch&);
template void launch_slim_kernel<KvKind::FP8, 6>(const ChunkGrid&, AttnLaunch&);
template void launch_slim_kernel<KvKind::FP8, 8>(const ChunkGrid&, AttnLaunch&);
template void launch_slim_kernel<KvKind::Q4H, 1>(const ChunkGrid&, AttnLaunch&);
template void launch_slim_kernel<KvKind::Q4H, 2>(const ChunkGrid&, AttnLaunch&);
template void launch_slim_kernel<KvKind::Q4H, 4>(const ChunkGrid&, AttnLaunch&);
template void launch_slim_kernel<KvKind::Q4H, 6>(const ChunkGrid&, AttnLaunch&);
template void launch_slim_kernel<KvKind::Q4H, 8>(const ChunkGrid&, AttnLaunch&);

}  // namespace attn
}  // namespace hkv::cuda
