// Attention of each query head over its sequence's cache, read in the cache's format: reference/model.cpp
// attend() (docs/ARITHMETIC.md §6), for decode and prefill alike (each row attends to n_keys[row] slots).
//   q4h: the query is rotated once per group (warp_wht32), held in block fixed point (q4h_record), and the output
//   rotated back once.
//   Keys in fixed chunks of 512. In chunk c, for each key in order:
//     score = (Σ_g fma(s_g, p_g, acc)) · scale, scale = fp32(1/sqrt(head_dim)); p_g over the group's 32 elements:
//     bf16, fp8 the fma chain of u_j·q_j from 0; q4h float(P)·unit_g, P = Σ u_j·X_j exact in integers (dp4a, any
//     order: q4h_group_p); mc = the chunk's maximum;
//     p = exp_c(score − mc); lc = lc + p (keys in order); bf16, fp8 oc[d] = fma(p, s_g·u_d, oc[d]) (keys in order);
//     q4h oc in integers per group (q4h_int_values): E = floor(log2 max|s|), W = round_even(p·s·2^(21−E)),
//     O_d = Σ W·u_d exact (mma.sync s8·u8 on three byte planes of W, any order), oc[d] = float(O_d)·2^(E−21).
//   Chunks merged in order: mn = max(m, mc), a = exp_c(m − mn), b = exp_c(mc − mn), l = fma(l, a, lc·b),
//   o[d] = fma(o[d], a, oc[d]·b); out = o/l; then (engine) out · sigmoid_c(gate).
// The chunks' (mc, lc, oc) do not depend on each other, so each is its own block (split-K over chunks);
// only the merge is sequential, in a second kernel. A maximum does not depend on the order it is taken in
// (±0 ties only reach exp_c of a difference, where they give the same value).
// Decoding a stored element costs as much as the fmas it feeds, so each decoded K or V element serves every
// query head of its KV head (6 in the 27B shape) and each group scale is converted once per group and key
// (q4h's K codes are not decoded to floats at all: prep<Q4H>'s bytes feed dp4a):
//   q4h unit u = c − 8 as as_float(0x4b000000 | c) − (2^23 + 8) (one byte permute and one exact add);
//   bf16 u = the high half-word; fp8 through f32_from_e4m3_hw. The value is s_g·u (one exact product), as
//   attend(). Scales convert by f32_from_f16_hw (one instruction; device.cuh says why it is exact here).
// Launch: attn_chunk_kernel grid (KV heads × ⌈group/8⌉, chunks, rows), NG (2, 4, 6 or 8 ≥ the heads served;
// padding heads get q = 0 and are not stored) query heads a block, each K/V row read once for all of them.
// Scores: a thread takes keys tid and tid + T (then + 2T, …), each key's score one chain in that thread,
// both keys sharing each 16-byte load of q from shared memory. Weighted values: q4h a warp a group (q4h_int_values,
// every shape); bf16 and fp8 thread tid owns DPT consecutive d (one group) for all NG heads and runs their chains over
// the chunk's keys in order (over staged rows the loop unrolled by HKV_ATTN_VU keys, 32 by default, so later keys'
// loads issue early); lc is kept by threads T−1−h. Two shapes, same arithmetic: T = 64, DPT = 8 (one 4-byte word of q4h
// codes a key) when there are at least 4 blocks per multiprocessor; else T = 256, DPT = 1 (more threads for few
// chunks). Bound (arithmetic, not measured): every bf16 or fp8 K and V element feeds one exact fp32 fma per query head,
// 6 at 6:1; at depth 262,144 in the 27B shape that would be 25.8 G fmas a token for the values alone, about 0.77 ms at
// the datasheet fp32 rate (67 TFLOP/s), against 1.2 ms for the 4.83 GB of q4h cache at 4.0 TB/s. So q4h takes neither
// in fp32: its scores take half a dp4a an element and head (16 a group of 32), its values 10 mma.sync m16n8k32 a group
// and 32 keys for up to 8 heads (ARITHMETIC.md §6 step 3). Measured (H200, docs/RESULTS.md §12): q4h attention at
// 262K, the 16 layers of a 27B token with the merge, 4,275 µs for 4.83 GB, 27% of copy bandwidth.
// At head_dim 256 the fp8 scores go through slim_scores instead (the same chains, the piece loop unrolled by two into
// two buffers; a.fast_scores), and fp8 and q4h beyond one chunk block a multiprocessor take attn_slim_kernel (below;
// auto_attn_shape).
// Staged shapes copy the chunk's rows with cp.async; in decode (a.pre, from pre_ok) the rows below n − N, which the
// kernel ahead cannot be writing, are copied before pdl_wait. The staged shapes with one element a thread (narrow,
// narrow-h1, narrow-h2, narrow-v) take each chunk and head block over two blocks where the doubled grid still fits one
// wave (a.dsplit, attn_dsplit: q4h and fp8 to 8K at batch 1): both compute every score, the maximum and the weights;
// block r the value chains of elements [r·D/2, (r+1)·D/2), block 0 also lc. Few chunks leave most multiprocessors
// idle, and the value phase, one chain of a chunk's keys a thread, is half a block's cycles.
// attn_merge_kernel grid (rows, H), head_dim threads: the running maximum over chunks in order (a scan by
// warp 0), the factors a, b of every chunk (all threads), l's chain (one thread) and o[d]'s chain (thread d), its oc
// values loaded 32 chunks at a time into two buffers taken in turn, a whole batch without a test a chunk (64 at a
// time gives the same token time).
#include <cmath>
#include <iterator>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/check.h"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace hkv::cuda {
namespace {

// Diagnostic: the chunk kernel's phases, summed over blocks (attn_phases_begin / attn_phases_end)
bool g_attn_phases = false;  // host: the staged launches (all but slim and wide) take their PH instantiation
__device__ unsigned long long g_attn_cycles[6];  // wait, q, scores, weights, values (cycles), blocks
AttnLaunch g_last_launch;                        // what the last attention() launched (attn_last_launch)

constexpr int kChunk = 512, kMaxG = 8, kMaxD = 256, kEs = 8;  // e_s: [key][kEs] weights of a chunk
constexpr size_t kStageMax = 160 * 1024;                      // staged rows of a chunk (fp8 V at head_dim 256: 139 KB)

template <KvKind F>
struct Fmt {
  static constexpr int epp = F == KvKind::BF16 ? 8 : F == KvKind::FP8 ? 16 : 32;  // elements a 16-byte piece
  static constexpr int ppg = 32 / epp;                                            // pieces a group
  // byte offset of element d's code in a row, and of group g's fp16 scale
  __device__ static int code_off(int d) { return F == KvKind::BF16 ? 2 * d : F == KvKind::FP8 ? d : d / 2; }
  __host__ __device__ static constexpr int scale_off(int D, int g) { return (F == KvKind::FP8 ? D : D / 2) + 2 * g; }
  // a stored row's bytes at head_dim D (fp8 and q4h: the codes, then D/32 fp16 scales)
  __host__ __device__ static constexpr int row_bytes(int D) { return scale_off(D, D / 32); }
};

// 16 bytes at p as little-endian words (p 16-byte aligned when v16). SMEM: p is in shared memory (staged
// rows, always 16-byte aligned).
template <bool SMEM = false>
__device__ __forceinline__ void load16(const uint8_t* p, bool v16, uint32_t* w) {
  if constexpr (SMEM) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
  } else if (v16) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
    w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
  } else {
#pragma unroll
    for (int i = 0; i < 4; i++)
      w[i] = uint32_t(__ldg(p + 4 * i)) | uint32_t(__ldg(p + 4 * i + 1)) << 8 | uint32_t(__ldg(p + 4 * i + 2)) << 16 |
             uint32_t(__ldg(p + 4 * i + 3)) << 24;
  }
}

// The group scale s_g as attend() reads it (bf16: 1).
template <KvKind F>
__device__ __forceinline__ float scale_from(uint16_t raw) {
  if constexpr (F == KvKind::BF16)
    return 1.0f;
  else
    return f32_from_f16_hw(raw);
}

// Piece words prepared for decoding: q4h keeps the low and the high nibbles of each byte apart.
template <KvKind F>
__device__ __forceinline__ void prep(const uint32_t* w, uint32_t* x) {
  if constexpr (F == KvKind::Q4H) {
#pragma unroll
    for (int k = 0; k < 4; k++) x[2 * k] = w[k] & 0x0f0f0f0fu, x[2 * k + 1] = (w[k] >> 4) & 0x0f0f0f0fu;
  } else {
#pragma unroll
    for (int k = 0; k < 4; k++) x[k] = w[k];
  }
}

// Unit i of a prepared piece, exactly as kv_read_row: q4h float(c − 8), bf16 the value, fp8 the e4m3 value.
template <KvKind F>
__device__ __forceinline__ float unit(const uint32_t* x, int i) {
  if constexpr (F == KvKind::Q4H) {
    // element i: byte i/2 of word i/8, low nibble for even i. as_float(0x4b0000cc) = 2^23 + c exactly, and
    // (2^23 + c) − (2^23 + 8) = c − 8 exactly (+0 for c = 8, as float(0)).
    const uint32_t src = x[2 * (i / 8) + (i % 2)];
    return __int_as_float(int(__byte_perm(src, 0x4b000000u, 0x7540u | unsigned((i % 8) / 2)))) - 8388616.0f;
  } else if constexpr (F == KvKind::BF16) {
    const uint32_t w = x[i / 2];
    return __uint_as_float((i % 2) ? (w & 0xffff0000u) : (w << 16));
  } else {
    return f32_from_e4m3_hw(uint8_t(x[i / 4] >> (8 * (i % 4))));
  }
}

// q4h scores in integers (ARITHMETIC.md §6). load_q leaves, in place of each (head, group) of the rotated query in
// q_s, its record: the 32 values in block fixed point, X_j = round_even(q_j · 2^(13−e)) (xq_int with top 13, |X_j| <=
// 2^14), split as X_j = 256·hi_j + lo_j with lo_j, hi_j signed bytes; words 0–7 lo, 8–15 hi, each word the four
// elements of one register of prep<Q4H> (word 2t: elements 8t, 8t+2, 8t+4, 8t+6; word 2t+1: 8t+1, …, 8t+7); word 16
// the unit 2^(e−13) (0 for a group of zeros, NaN for one with an inf or NaN, whose X are 0), word 17 −8·Σ_j X_j.
// The record of one (head, group) from the rotated value v of element `lane` (every lane of the warp), into rec: the
// fixed point by xq_lane<13> (the MLX4 records' xq_lane<21>), the byte planes in xq_chunk's element order.
__device__ __forceinline__ void q4h_record(float v, int lane, uint32_t* rec) {
  uint32_t unit;
  bool bad;
  const int X = xq_lane<13>(v, unit, bad);
  const int sum = __reduce_add_sync(kFull, X);  // exact: |Σ X| <= 2^19
  const int lo = int(int8_t(X & 0xff)), hi = (X - lo) >> 8;
  __syncwarp();  // every lane has read its value before the record overwrites the group's floats
  uint8_t* const b = xq_plane_byte(rec, lane);
  b[0] = uint8_t(lo), b[32] = uint8_t(hi);
  if (lane == 0) rec[16] = unit, rec[17] = uint32_t(-8 * sum);
}

// p_g = float(P) · unit for one key and head: P = Σ_j (c_j − 8)·X_j = 256·Σ c·hi + Σ c·lo − 8·Σ X, exact in int32
// (|P| <= 2^22, so float(P) is exact, and so is its product by a power of two); x: the group's prep<Q4H> words (codes
// 0..15 a byte), r: the record's 16 plane words, nx: −8·Σ X, unit_g: the unit.
__device__ __forceinline__ float q4h_group_p(const uint32_t (&x)[8], const uint32_t (&r)[16], int nx, float unit_g) {
  int lo = nx, hi = 0;
#pragma unroll
  for (int i = 0; i < 8; i++) lo = __dp4a(int(x[i]), int(r[i]), lo), hi = __dp4a(int(x[i]), int(r[8 + i]), hi);
  return __int2float_rn(hi * 256 + lo) * unit_g;
}

// The scaled scores of KP keys (rows kr[k], 16-byte aligned when v16, in shared memory when KS) for NG heads over
// q4h records in q_s: per key and head acc = fma(s_g, p_g, acc) over the groups in order; the group scales from skr[k]
// (SKS: the K rows' scales staged) or from the rows. Each head's record is loaded once a group for the KP keys.
template <int NG, int KP, bool KS, bool SKS>
__device__ __forceinline__ void q4h_int_scores(const uint8_t* const (&kr)[KP], const float* q_s, int D, bool v16,
                                               float scale, float (&score)[KP][NG],
                                               const uint16_t* const* skr = nullptr) {
  using Fm = Fmt<KvKind::Q4H>;
  static_assert(Fm::epp == 32 && Fm::ppg == 1, "a q4h piece (16 code bytes) is one group");
  float acc[KP][NG];
#pragma unroll
  for (int k = 0; k < KP; k++)
#pragma unroll
    for (int h = 0; h < NG; h++) acc[k][h] = 0.0f;
  uint32_t cur[KP][4], nxt[KP][4];
#pragma unroll
  for (int k = 0; k < KP; k++) load16<KS>(kr[k], v16, cur[k]);
  const int ngroups = D / 32;
#pragma unroll 1
  for (int g = 0; g < ngroups; g++) {
    if (g + 1 < ngroups) {
#pragma unroll
      for (int k = 0; k < KP; k++) load16<KS>(kr[k] + Fm::code_off(Fm::epp * (g + 1)), v16, nxt[k]);
    }
    uint32_t x[KP][8];
    float sg[KP];
#pragma unroll
    for (int k = 0; k < KP; k++) {
      prep<KvKind::Q4H>(cur[k], x[k]);
      uint16_t raw;
      if constexpr (SKS)
        raw = skr[k][g];
      else
        raw = load_u16<KS>(kr[k] + Fm::scale_off(D, g));
      sg[k] = scale_from<KvKind::Q4H>(raw);
    }
#pragma unroll
    for (int h = 0; h < NG; h++) {
      const uint32_t* rec = reinterpret_cast<const uint32_t*>(q_s + h * D + 32 * g);
      uint32_t r[16];
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const uint4 v = reinterpret_cast<const uint4*>(rec)[i];
        r[4 * i] = v.x, r[4 * i + 1] = v.y, r[4 * i + 2] = v.z, r[4 * i + 3] = v.w;
      }
      const uint2 un = *reinterpret_cast<const uint2*>(rec + 16);
      const float unit_g = __uint_as_float(un.x);
#pragma unroll
      for (int k = 0; k < KP; k++) acc[k][h] = hkv::fma_rn(sg[k], q4h_group_p(x[k], r, int(un.y), unit_g), acc[k][h]);
    }
#pragma unroll
    for (int k = 0; k < KP; k++)
#pragma unroll
      for (int i = 0; i < 4; i++) cur[k][i] = nxt[k][i];
  }
#pragma unroll
  for (int k = 0; k < KP; k++)
#pragma unroll
    for (int h = 0; h < NG; h++) score[k][h] = acc[k][h] * scale;
}

// The NG weights of one key, from its row of ES floats in e_s: 16-byte shared-memory loads where ES is a multiple of
// 4 (kEs), else 8-byte ones (slim's rows of NG rounded up to even); entries past NG are never read.
template <int NG, int ES = kEs>
__device__ __forceinline__ void weights(const float* es, float* e) {
  static_assert(ES % 2 == 0 && ES >= NG, "a key's row holds its NG weights, 8-byte aligned");
#pragma unroll
  for (int h = 0; h < NG; h += ES % 4 == 0 ? 4 : 2) {
    if constexpr (ES % 4 == 0) {
      const float4 v = *reinterpret_cast<const float4*>(es + h);
      e[h] = v.x;
      if (h + 1 < NG) e[h + 1] = v.y;
      if (h + 2 < NG) e[h + 2] = v.z;
      if (h + 3 < NG) e[h + 3] = v.w;
    } else {
      const float2 v = *reinterpret_cast<const float2*>(es + h);
      e[h] = v.x;
      if (h + 1 < NG) e[h + 1] = v.y;
    }
  }
}

// The query heads h0 … h0 + ng − 1 of a row into q_s [NG][D] (padding heads 0); for q4h rotated and then each group
// of 32 held as its record (q4h_record).
template <KvKind F, int NG, int T>
__device__ __forceinline__ void load_q(const AttnArgs& a, int64_t row, int h0, int ng, float* q_s) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, D = a.D;
  for (int i = tid; i < NG * D; i += T) q_s[i] = i < ng * D ? a.q[row * a.ldq + int64_t(h0) * D + i] : 0.0f;
  __syncthreads();
  if constexpr (F == KvKind::Q4H) {  // rotated, then held as records (q4h_record)
    for (int gi = warp; gi < NG * D / 32; gi += T / 32)
      q4h_record(warp_wht32(q_s[gi * 32 + lane], lane), lane, reinterpret_cast<uint32_t*>(q_s + gi * 32));
    __syncthreads();
  }
}

// The score loops' chains of KP keys and NG heads (acc over a key's groups, p within a group), all from 0; and at the
// end each key's score, acc · scale.
template <int KP, int NG>
__device__ __forceinline__ void zero_chains(float (&acc)[KP][NG], float (&p)[KP][NG]) {
#pragma unroll
  for (int k = 0; k < KP; k++)
#pragma unroll
    for (int h = 0; h < NG; h++) acc[k][h] = 0.0f, p[k][h] = 0.0f;
}
template <int KP, int NG>
__device__ __forceinline__ void scaled_scores(const float (&acc)[KP][NG], float scale, float (&score)[KP][NG]) {
#pragma unroll
  for (int k = 0; k < KP; k++)
#pragma unroll
    for (int h = 0; h < NG; h++) score[k][h] = acc[k][h] * scale;
}

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

// From the scores in e_s [key][ES] and each thread's running maxima mloc: the chunk's maximum per head
// (mc_s; a maximum does not depend on the order it is taken in), then e_s[j][h] = exp_c(score − mc).
template <int NG, int T, int ES = kEs>
__device__ __forceinline__ void chunk_weights(const float (&mloc)[NG], float* e_s, int len, float (*red_s)[NG],
                                              float* mc_s) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
#pragma unroll
  for (int h = 0; h < NG; h++) {
    const float m = warp_max(mloc[h]);
    if (lane == 0) red_s[warp][h] = m;
  }
  __syncthreads();
  if (tid < NG) {
    float m = -INFINITY;
    for (int wi = 0; wi < T / 32; wi++) m = max_step(m, red_s[wi][tid]);
    mc_s[tid] = m;
  }
  __syncthreads();
  for (int i = tid; i < NG * len; i += T) {
    const int j = i / NG, h = i % NG;
    e_s[j * ES + h] = hkv::exp_c(e_s[j * ES + h] - mc_s[h]);
  }
  __syncthreads();
}

// lc = Σ e_t, keys in order (one thread a head: threads T−1−h, past the value threads when there are such),
// stored with mc as the chunk's first two partials.
template <int NG, int T, int ES = kEs>
__device__ __forceinline__ void store_ml(float* part, int64_t head_stride, const float* e_s, const float* mc_s, int len,
                                         int ng) {
  const int tid = threadIdx.x;
  if (T - 1 - tid < ng) {
    const int h = T - 1 - tid;
    float lc = 0.0f;
    for (int j = 0; j < len; j++) lc = lc + e_s[j * ES + h];
    part[h * head_stride] = mc_s[h];
    part[h * head_stride + 1] = lc;
  }
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
  if constexpr (F == KvKind::BF16) {  // compiled, never launched: bf16 takes the narrow shape
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

// value_loop for two elements a thread, d and d + 1 (the narrow-v2 shape): both share the
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

// f(std::integral_constant<int, I>{}) for I = 0 … N − 1, in order.
template <int N, int I = 0, class Fn>
__device__ __forceinline__ void static_for(Fn&& f) {
  if constexpr (I < N) {
    f(std::integral_constant<int, I>{});
    static_for<N, I + 1>(f);
  }
}

// Unit I of an fp8 piece (its 4 words): the e4m3 value.
template <KvKind F, int I>
__device__ __forceinline__ float slim_unit(const uint32_t (&w)[4]) {
  static_assert(F == KvKind::FP8, "slim's fp32 scores take fp8");
  return f32_from_e4m3_hw(uint8_t(w[I / 4] >> (8 * (I % 4))));
}

// One piece (Fm::epp elements from e0) of KP keys' scores for NG heads: p[k][h] = fma(u_j, q_j, p[k][h]) in element
// order; at a group's end (GEND) acc = fma(s_g, p_g, acc) and p restarts from 0.
template <KvKind F, int NG, int KP, int D, bool GEND>
__device__ __forceinline__ void slim_piece(const uint32_t (&w)[KP][4], const uint16_t (&sraw)[KP], const float* q_s,
                                           int e0, float (&p)[KP][NG], float (&acc)[KP][NG]) {
  using Fm = Fmt<F>;
  static_for<Fm::epp / 4>([&](auto i4c) {
    constexpr int i4 = 4 * decltype(i4c)::value;
    float4 qv[NG];
#pragma unroll
    for (int h = 0; h < NG; h++) qv[h] = *reinterpret_cast<const float4*>(&q_s[h * D + e0 + i4]);
    static_for<4>([&](auto iic) {
      constexpr int ii = decltype(iic)::value;
#pragma unroll
      for (int k = 0; k < KP; k++) {
        const float u = slim_unit<F, i4 + ii>(w[k]);
#pragma unroll
        for (int h = 0; h < NG; h++) {
          const float qq = ii == 0 ? qv[h].x : ii == 1 ? qv[h].y : ii == 2 ? qv[h].z : qv[h].w;
          p[k][h] = hkv::fma_rn(u, qq, p[k][h]);
        }
      }
    });
  });
  if constexpr (GEND) {
#pragma unroll
    for (int k = 0; k < KP; k++) {
      const float s = scale_from<F>(sraw[k]);
#pragma unroll
      for (int h = 0; h < NG; h++) acc[k][h] = hkv::fma_rn(s, p[k][h], acc[k][h]), p[k][h] = 0.0f;
    }
  }
}

// The scaled scores of KP keys (rows kr[k], 16-byte aligned, in shared memory when KS) for NG heads, as key_scores:
// the same chains in the same order, the piece loop unrolled by two into two buffers (nothing copied between pieces).
// SKS (attn_slim_kernel): the group scales from skr[k], key k's 8 scales staged in shared memory, instead of from the
// row.
template <KvKind F, int NG, int KP, int D, bool KS = false, bool SKS = false>
__device__ __forceinline__ void slim_scores(const uint8_t* const (&kr)[KP], const float* q_s, float scale,
                                            float (&score)[KP][NG], const uint16_t* const* skr = nullptr) {
  static_assert(F == KvKind::FP8, "slim_scores: fp8 (q4h: q4h_int_scores)");
  using Fm = Fmt<F>;
  constexpr int npiece = D / Fm::epp;
  static_assert(npiece % 2 == 0 && (Fm::ppg == 1 || Fm::ppg == 2), "pieces go in pairs; a pair ends a group");
  float acc[KP][NG], p[KP][NG];
  zero_chains(acc, p);
  uint32_t wa[KP][4], wb[KP][4];
  uint16_t sa[KP], sb[KP];
  // piece P of every key into (w, s): its 16 code bytes and, if P starts a group, the group's scale
  auto load = [&](uint32_t(&w)[KP][4], uint16_t(&s)[KP], int P) {
#pragma unroll
    for (int k = 0; k < KP; k++) {
      load16<KS>(kr[k] + Fm::code_off(P * Fm::epp), true, w[k]);
      if (P % Fm::ppg == 0) {
        if constexpr (SKS)
          s[k] = skr[k][P / Fm::ppg];
        else
          s[k] = load_u16<KS>(kr[k] + Fm::scale_off(D, P / Fm::ppg));
      }
    }
  };
  load(wa, sa, 0);
#pragma unroll 1
  for (int pc = 0; pc < npiece; pc += 2) {  // pieces pc (in wa) and pc + 1 (in wb)
    load(wb, sb, pc + 1);                   // q4h: and its group's scale; fp8: an odd piece, no scale
    slim_piece<F, NG, KP, D, Fm::ppg == 1>(wa, sa, q_s, pc * Fm::epp, p, acc);
    if constexpr (Fm::ppg == 2)  // fp8: the pair's group scale, kept for the end of piece pc + 1
#pragma unroll
      for (int k = 0; k < KP; k++) sb[k] = sa[k];
    if (pc + 2 < npiece) load(wa, sa, pc + 2);
    slim_piece<F, NG, KP, D, true>(wb, sb, q_s, (pc + 1) * Fm::epp, p, acc);
  }
  scaled_scores(acc, scale, score);
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

// ---- q4h values in integers on the tensor cores (ARITHMETIC.md §6 step 3; reference/model.cpp q4h_chunk_values) ----
// One warp computes oc[h][32g … 32g + 31] of a chunk for the block's heads h < ng (NG ≤ 8), group g of the V rows:
//  1. M = the chunk's largest |s_t| of the group, taken on the stored fp16 bits (raw & 0x7fff orders as the
//     magnitudes do); E = floor(log2 M) from the bits (normal: exponent − 15; subnormal: the top bit's place − 24).
//     M inf or NaN (raw ≥ 0x7c00): oc = NaN; M = 0: oc = +0 (the warp's lanes agree, so it leaves as one).
//  2. For each 32 keys k0 … k0 + 31: lane l loads key k0 + l's 16 code bytes of the group (its row clamped to len − 1)
//     and scale, s' = f32(s)·2^(21−E) (exact: 11 bits times a power of two; 0 past len), into the warp's scratch.
//     B, k = 32 keys × n = 8 dims, u8 codes c = u + 8: ldmatrix.trans of the scratch's 32 rows of 16 bytes gives lane
//     (n = lane/4, t = lane%4) in register m the 4 bytes 2n, 2n + 1 of keys 8m + 2t and 8m + 2t + 1, dims 4n … 4n + 3
//     as nibbles; tile τ (dims 4n + τ) is those nibbles, gathered by byte permutes so that its k slots 4t … 4t + 3 are
//     keys {2t, 2t+1, 8+2t, 9+2t} and slots 16 + 4t … are keys {16+2t, 17+2t, 24+2t, 25+2t} (a sum over k takes the
//     keys in any order: the sums are exact).
//     W = round_even(max(e, 0)·s') = bits(fma(e', s', 1.5·2^23)) − 0x4b400000 (one rounding, to an integer since
//     |e'·s'| < 2^22; e' = 0 past len, for heads ≥ ng, and for a NaN e), as three signed bytes W = p0 + 2^8·p1 +
//     2^16·p2: p0 W's low byte, p1 that of (W + 2^7) >> 8, p2 that of (W + 2^7 + 2^15) >> 16 (p0, p1 in [−128, 127], p2
//     in [−64, 64]). A1, m = 16 rows × the same k, s8: row h head h's p0, row 8 + h its p1; A2: row h its p2, rows 8 …
//     15 zero. mma.sync m16n8k32 s8·u8 → s32, accumulating over the chunk: the four tiles and a fifth with B = 1 (ΣW),
//     each with A1 and with A2.
//  3. O = Σ_i 2^(8i)·D_i − 8·ΣW = Σ_t W_t·u_t exactly, in 64 bits (|O| ≤ 512·2^22·8 = 2^34);
//     oc = float(O)·2^(E−21) (float() rounds once, to nearest even; the product by a normal power of two is exact).
// Lane (n, t) ends with head n's dims 8t … 8t + 7 of the group.
struct Q4hScratch {  // a warp's: the codes of 32 keys of one group, and their scales s'
  uint4 codes[32];
  float sp[32];
};

__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(uint32_t(__cvta_generic_to_shared(p)))
               : "memory");
}
// d += a·b: m16n8k32, a 16×32 s8 (4 registers), b 32×8 u8 (2), d 16×8 s32 (4)
__device__ __forceinline__ void imma_s8u8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// W of key kk of the 32 (step 2), as an int
template <int NG, int ES>
__device__ __forceinline__ int q4h_w(const float* e_s, const float* sp, int k0, int kk, int len, int n, bool hv) {
  const float e = hv && k0 + kk < len ? fmaxf(e_s[(k0 + kk) * ES + n], 0.0f) : 0.0f;
  return int(__float_as_uint(__fmaf_rn(e, sp[kk], 12582912.0f))) - 0x4b400000;
}
// byte B of each of four words, as one word (word i's in byte i)
template <int B>
__device__ __forceinline__ uint32_t q4h_bytes(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
  constexpr uint32_t s = B | (4 + B) << 4;
  return __byte_perm(__byte_perm(w0, w1, s), __byte_perm(w2, w3, s), 0x5410);
}

// The group g's oc of a chunk (the comment above). vrows: key 0's row (its codes at 16·g), vstride bytes a key, v16:
// rows 16-byte aligned; srows: key 0's group-g scale (fp16), sstride bytes a key. Every lane of the warp calls it.
template <int NG, int ES>
__device__ __forceinline__ void q4h_int_values(const uint8_t* vrows, size_t vstride, bool v16, const uint8_t* srows,
                                               size_t sstride, int g, int len, const float* e_s, int ng, float* part,
                                               int64_t head_stride, Q4hScratch* scr) {
  static_assert(NG <= 8, "a head a row of A's 8");
  const int lane = threadIdx.x & 31, n = lane >> 2, t = lane & 3;
  const bool hv = n < ng;
  uint32_t mb = 0;  // 1. the largest |s| as fp16 bits
  for (int j = lane; j < len; j += 32)
    mb = max(mb, uint32_t(*reinterpret_cast<const uint16_t*>(srows + size_t(j) * sstride)) & 0x7fffu);
  mb = __reduce_max_sync(0xffffffffu, mb);
  float out[8];
  if (mb == 0 || mb >= 0x7c00u) {
#pragma unroll
    for (int i = 0; i < 8; i++) out[i] = mb == 0 ? 0.0f : __uint_as_float(0x7fc00000u);
  } else {
    const int E = (mb >> 10) ? int(mb >> 10) - 15 : (31 - __clz(int(mb))) - 24;
    const float up = __uint_as_float(uint32_t(127 + 21 - E) << 23);  // 2^(21−E)
    int acc1[5][4], acc2[5][4];
#pragma unroll
    for (int i = 0; i < 5; i++)
#pragma unroll
      for (int j = 0; j < 4; j++) acc1[i][j] = acc2[i][j] = 0;
    // lane's key k0 + lane: its 16 code bytes and raw scale, loaded two blocks of 32 keys ahead (rows past len clamp to
    // len − 1, so every load is of a stored row; the scale is zeroed below)
    auto load = [&](int k0, uint4& cw, uint16_t& sb) {
      const int kc = min(k0 + lane, len - 1);
      const uint8_t* rp = vrows + size_t(kc) * vstride + 16 * g;
      if (v16) {
        cw = *reinterpret_cast<const uint4*>(rp);
      } else {  // rows 2-byte aligned (even row bytes)
        const uint16_t* hp = reinterpret_cast<const uint16_t*>(rp);
        cw.x = uint32_t(hp[0]) | uint32_t(hp[1]) << 16, cw.y = uint32_t(hp[2]) | uint32_t(hp[3]) << 16;
        cw.z = uint32_t(hp[4]) | uint32_t(hp[5]) << 16, cw.w = uint32_t(hp[6]) | uint32_t(hp[7]) << 16;
      }
      sb = *reinterpret_cast<const uint16_t*>(srows + size_t(kc) * sstride);
    };
    uint4 c0, c1;
    uint16_t s0, s1;
    load(0, c0, s0);
    load(32, c1, s1);
    for (int k0 = 0; k0 < len; k0 += 32) {  // 2.
      const uint4 cw = c0;
      const float sp = k0 + lane < len ? f32_from_f16_hw(s0) * up : 0.0f;
      c0 = c1, s0 = s1;
      if (k0 + 64 < len) load(k0 + 64, c1, s1);
      __syncwarp();  // the last block's reads of the scratch are done
      scr->codes[lane] = cw;
      scr->sp[lane] = sp;
      __syncwarp();
      uint32_t rm[4];
      ldsm_x4_trans(rm, &scr->codes[lane]);
      uint32_t b[4][2];  // tile τ: b[τ][0] keys {2t, 2t+1, 8+2t, 9+2t}, b[τ][1] keys {16+2t, …}
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const uint32_t l0 = rm[2 * h] & 0x0f0f0f0fu, l1 = rm[2 * h + 1] & 0x0f0f0f0fu;
        const uint32_t h0 = (rm[2 * h] >> 4) & 0x0f0f0f0fu, h1 = (rm[2 * h + 1] >> 4) & 0x0f0f0f0fu;
        b[0][h] = __byte_perm(l0, l1, 0x6420), b[2][h] = __byte_perm(l0, l1, 0x7531);
        b[1][h] = __byte_perm(h0, h1, 0x6420), b[3][h] = __byte_perm(h0, h1, 0x7531);
      }
      uint32_t A1[4], A2[4];
      {
        const int ks[2][4] = {{2 * t, 2 * t + 1, 8 + 2 * t, 9 + 2 * t},
                              {16 + 2 * t, 17 + 2 * t, 24 + 2 * t, 25 + 2 * t}};
#pragma unroll
        for (int h = 0; h < 2; h++) {
          uint32_t w[4], w1[4], w2[4];
#pragma unroll
          for (int i = 0; i < 4; i++) {
            const int W = q4h_w<NG, ES>(e_s, scr->sp, k0, ks[h][i], len, n, hv);
            w[i] = uint32_t(W), w1[i] = uint32_t(W + 128), w2[i] = uint32_t(W + 32896);
          }
          A1[2 * h] = q4h_bytes<0>(w[0], w[1], w[2], w[3]);
          A1[2 * h + 1] = q4h_bytes<1>(w1[0], w1[1], w1[2], w1[3]);
          A2[2 * h] = q4h_bytes<2>(w2[0], w2[1], w2[2], w2[3]);
          A2[2 * h + 1] = 0u;
        }
      }
#pragma unroll
      for (int tau = 0; tau < 4; tau++) {
        imma_s8u8(acc1[tau], A1, b[tau][0], b[tau][1]);
        imma_s8u8(acc2[tau], A2, b[tau][0], b[tau][1]);
      }
      imma_s8u8(acc1[4], A1, 0x01010101u, 0x01010101u);
      imma_s8u8(acc2[4], A2, 0x01010101u, 0x01010101u);
    }
    // 3. row n of A1 holds p0's sums, row n + 8 p1's (c2, c3), row n of A2 p2's
    auto whole = [&](int i, int j) {
      return int64_t(acc2[i][j]) * 65536 + int64_t(acc1[i][j + 2]) * 256 + int64_t(acc1[i][j]);
    };
    const int64_t sw = whole(4, 0);                                    // ΣW of head n
    const float unit = __uint_as_float(uint32_t(127 + E - 21) << 23);  // 2^(E−21)
#pragma unroll
    for (int tau = 0; tau < 4; tau++) {
      out[tau] = __ll2float_rn(whole(tau, 0) - 8 * sw) * unit;      // dim 8t + τ
      out[4 + tau] = __ll2float_rn(whole(tau, 1) - 8 * sw) * unit;  // dim 8t + 4 + τ
    }
  }
  if (hv) {
    float* o = part + n * head_stride + 2 + 32 * g + 8 * t;
#pragma unroll
    for (int i = 0; i < 8; i++) o[i] = out[i];
  }
}

// The block's warps over groups [gb, ge) of the chunk, a group a warp at a time (scr: a Q4hScratch a warp).
template <int NG, int ES, int T>
__device__ __forceinline__ void q4h_values_block(const uint8_t* vrows, size_t vstride, bool v16, const uint8_t* srows,
                                                 size_t sstride, size_t sgstride, int gb, int ge, int len,
                                                 const float* e_s, int ng, float* part, int64_t head_stride,
                                                 Q4hScratch* scr) {
  const int warp = threadIdx.x >> 5;
  for (int g = gb + warp; g < ge; g += T / 32)
    q4h_int_values<NG, ES>(vrows, vstride, v16, srows + size_t(g) * sgstride, sstride, g, len, e_s, ng, part,
                           head_stride, scr + warp);
}

// STAGE (narrow shape, fp8 and q4h, rows a multiple of 16 bytes): 1, the chunk's V
// rows are copied into shared memory with cp.async when the block starts, so their loads run during the
// score phase and the value chains read shared memory; 2, the K rows too (a first cp.async group, waited
// for before the scores). The operations and their order are unchanged.
// PH (a diagnostic; the staged shapes, fp8 and q4h: all but slim and wide): thread 0 counts its cycles in each
// phase (attn_phases_begin): the wait (the block's start, the early copies, pdl_wait), q, the scores, the weights (the
// chunk's maximum, exp_c, and lc by threads T−1−h), the values (until every thread of the block has ended).
template <KvKind F, int NG, int T, int DPT, int STAGE = 0, int VP = 1, bool PH = false>
// (__launch_bounds__(T) alone: a min-blocks hint of 1 lets ptxas give the narrow-v2 shape 160 registers instead of
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
  const size_t stride = size_t(a.KV) * a.row_bytes;
  const uint8_t* kbase = a.k_rows[row] + size_t(kvh) * a.row_bytes + size_t(c0) * stride;
  const uint8_t* vbase = a.v_rows[row] + size_t(kvh) * a.row_bytes + size_t(c0) * stride;
  constexpr bool KS = STAGE == 2;
  uint8_t* const vstage = stage_s + (KS ? size_t(kChunk) * a.row_bytes : 0);
  // a.pre (the caller's pre_ok): the rows no kernel that may still run writes are copied before pdl_wait, so that their
  // copies overlap the kernel ahead (attn_prep_pack, which lets this launch start once its blocks have passed their
  // own pdl_wait: every kernel before it has completed). That launch writes the rows of this step's positions, which
  // are among each row's last N keys (N rows in the batch); n_keys and the row pointers are written by the host before
  // the step's first kernel. So keys below n − N are copied first, the rest after pdl_wait.
  int early = 0;  // rows 0 … early − 1 of the chunk copied before pdl_wait
  if constexpr (STAGE > 0)
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

  if constexpr (STAGE > 0) {  // the groups in order: [K, V before pdl_wait,] K, V
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
  for (int jb = 0; jb < len; jb += 2 * T) {
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
  } else if constexpr (DPT == 1) {
    if constexpr (STAGE > 0) {  // the V rows are in
      cp_async_wait<0>();
      __syncthreads();
    }
    if constexpr (VP == 2) {  // narrow-v2: elements 2·tid and 2·tid + 1, staged V rows
      static_assert(STAGE > 0, "narrow-v2 reads staged V rows");
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
          // the keys in order. fp8 and q4h keep one key at a time (and, in the narrow shape, their rows staged
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

// ---- slim: every thread busy in both phases, V read from global memory (fp8 and q4h at head_dim 256) ----
// The operations and their order are attn_chunk_kernel's (attend(), the head comment); what changes is who runs them
// and how they are fed. In narrow-v2 half the block waits in the value phase (128 of 256 threads own two elements
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
constexpr int kSlimT = 128, kSlimD = 256;  // threads a block; the head_dim it is written for
constexpr int kSlimKP = kChunk / kSlimT;   // keys a thread in the scores, one pass
constexpr int kSlimB = 4;                  // blocks a multiprocessor (__launch_bounds__: at most 128 registers)
constexpr int kSlimU = 16;                 // keys a value batch (the next batch's loads issued before this one's fmas)

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
// 384 of them the fmas; fp8 757). KVC: the KV heads as a constant (4, the 27B's; other layouts take KVC = 0), so that
// a row's stride is one and a batch's loads take immediate offsets.
template <KvKind F, int NG, bool ROLL = false, int KVC = 0>
__global__ void __launch_bounds__(kSlimT, kSlimB)
    attn_slim_kernel(AttnArgs a, int qblocks, int hpb, int maxch, float scale) {
  constexpr int T = kSlimT, D = kSlimD, U = kSlimU, DPT = D / T;
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
  // KVC: the KV heads as a constant (the caller has checked a.KV == KVC), so that a row's stride is one too and the
  // value loop's loads of a batch take immediate offsets from one address
  const size_t stride = KVC ? size_t(KVC) * Fm::row_bytes(D) : size_t(a.KV) * a.row_bytes;
  const uint8_t* kbase = a.k_rows[row] + size_t(kvh) * a.row_bytes + size_t(c0) * stride;
  const uint8_t* vbase = a.v_rows[row] + size_t(kvh) * a.row_bytes + size_t(c0) * stride;
  pdl_wait();  // nothing is read before the kernel ahead has completed (launch_k)
  const int n = a.n_keys[row];
  if (c0 >= n) return;
  const int len = min(kChunk, n - c0);
  // the K scales of this thread's keys (tid + T·k), a first group, waited for before the scores
  for (int j = tid; j < len; j += T) cp_async16(sk_s + 8 * j, kbase + size_t(j) * stride + Fm::scale_off(D, 0));
  cp_async_commit();
  if (tid < 8) sk_s[kChunk * 8 + tid] = 0;  // the row keys past len read (published by load_q's barrier)
  for (int j = tid; j < len; j += T)        // the V scales (16 bytes a row), waited for before the weights
    cp_async16(sv_s + 8 * j, vbase + size_t(j) * stride + Fm::scale_off(D, 0));
  cp_async_commit();
  load_q<F, NG, T>(a, row, h0, ng, q_s);
  cp_async_wait<1>();  // this thread's K-scale copies (the V group may still be in flight)

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
  cp_async_wait<0>();  // this thread's scale copies; chunk_weights' barriers publish them
  chunk_weights<NG, T, ES>(mloc, e_s, len, red_s, mc_s);
  // the V scales of this thread's own copies (keys tid + T·i) to fp32, transposed, once, rather than by each of a
  // group's 16 threads for every key. After chunk_weights' last barrier no thread reads q_s or sk_s, and the barrier
  // here publishes svf_s
  float* part = a.part + ((row * a.H + h0) * int64_t(maxch) + c) * (D + 2);
  const int64_t head_stride = int64_t(maxch) * (D + 2);
  if constexpr (F == KvKind::Q4H) {  // the values in integers, a warp two groups (q4h_int_values), scales from sv_s
    store_ml<NG, T, ES>(part, head_stride, e_s, mc_s, len, ng);
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

// A chunk kernel with staged rows (256 threads), its dynamic shared memory allowed up to kStageMax on the
// first launch (the static is per instantiation of this template: one per kernel), then launch_k.
template <auto Kernel, class... A>
void launch_staged(bool pdl, dim3 grid, size_t smem, cudaStream_t st, A... args) {
  static bool ready = false;
  if (!ready) HKV_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kStageMax));
  ready = true;
  launch_k(pdl, Kernel, grid, dim3(256), smem, st, args...);
}

// The staged shapes with one element a thread in the values (narrow, narrow-h1, narrow-h2, narrow-v): a with
// attn_dsplit's blocks a chunk and head block; recorded for attn_last_launch.
AttnArgs with_dsplit(const AttnArgs& a, dim3 grid) {
  AttnArgs b = a;
  b.dsplit = attn_dsplit(a.D, int64_t(grid.x) * grid.y * grid.z, sm_count());
  g_last_launch.dsplit = b.dsplit;
  return b;
}

template <KvKind F, int NG>
void launch_chunks(const AttnArgs& a, dim3 grid, int qblocks, int hpb, int maxch, AttnShape shape, cudaStream_t st,
                   bool pdl) {
  const float scale = float(1.0 / std::sqrt(double(a.D)));  // as attend(): fp32(1/sqrt(head_dim))
  if (shape == AttnShape::Slim) {
    if constexpr (F != KvKind::BF16) {
      if (a.D == kSlimD && a.row_bytes % 16 == 0) {
        // The 27B's 4 KV heads (6 query heads each) as a constant, and there fp8's score loop rolled where the grid is
        // more than one wave of blocks (attn_slim_fp8_rolled). The constant-stride forms are compiled for 6 heads a
        // block alone, the only count kvc admits, and fp8's rolled form for them alone.
        const bool kvc = NG == 6 && a.KV == 4 && a.row_bytes == size_t(Fmt<F>::row_bytes(kSlimD));
        const int64_t blocks = int64_t(grid.x) * grid.y * grid.z;
        const bool roll = F == KvKind::FP8 && kvc && attn_slim_fp8_rolled(blocks, sm_count());
        auto go = [&](auto kernel) { launch_k(pdl, kernel, grid, dim3(kSlimT), 0, st, a, qblocks, hpb, maxch, scale); };
        bool done = false;
        if constexpr (NG == 6) {
          if (kvc) {
            if constexpr (F == KvKind::FP8)
              roll ? go(attn_slim_kernel<F, NG, true, 4>) : go(attn_slim_kernel<F, NG, false, 4>);
            else
              go(attn_slim_kernel<F, NG, false, 4>);
            done = true;
          }
        }
        if (!done) go(attn_slim_kernel<F, NG>);
        HKV_CHECK_LAUNCH();
        g_last_launch.slim_kernel = true;
        g_last_launch.slim_scores = F == KvKind::FP8;  // q4h's scores have one form (q4h_int_scores)
        g_last_launch.slim_roll = roll;
        g_last_launch.slim_kvc = kvc;
        return;
      }
    }
    shape = AttnShape::NarrowV2;  // slim is written for fp8 and q4h at head_dim 256; the others take narrow-v2's path
  }
  if (shape == AttnShape::Wide) {
    launch_k(pdl, attn_chunk_kernel<F, NG, 64, 8>, grid, dim3(64), 0, st, a, qblocks, hpb, maxch, scale);
  } else if (shape != AttnShape::NarrowV && shape != AttnShape::NarrowV2 && F != KvKind::BF16 &&
             a.row_bytes % 16 == 0 && 2 * kChunk * a.row_bytes <= kStageMax) {
    // K and V staged (q4h at head_dim 256: 144 KB); each chunk's values over b.dsplit blocks (attn_dsplit)
    const AttnArgs b = with_dsplit(a, grid);
    const dim3 g(grid.x * unsigned(b.dsplit), grid.y, grid.z);
    if (g_attn_phases)
      launch_staged<attn_chunk_kernel<F, NG, 256, 1, 2, 1, true>>(pdl, g, 2 * kChunk * a.row_bytes, st, b, qblocks, hpb,
                                                                  maxch, scale);
    else
      launch_staged<attn_chunk_kernel<F, NG, 256, 1, 2>>(pdl, g, 2 * kChunk * a.row_bytes, st, b, qblocks, hpb, maxch,
                                                         scale);
  } else if (shape == AttnShape::NarrowV2 && F != KvKind::BF16 && a.row_bytes % 16 == 0 &&
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
    const AttnArgs b = with_dsplit(a, grid);
    const dim3 g(grid.x * unsigned(b.dsplit), grid.y, grid.z);
    if (g_attn_phases)
      launch_staged<attn_chunk_kernel<F, NG, 256, 1, 1, 1, true>>(pdl, g, kChunk * a.row_bytes, st, b, qblocks, hpb,
                                                                  maxch, scale);
    else
      launch_staged<attn_chunk_kernel<F, NG, 256, 1, 1>>(pdl, g, kChunk * a.row_bytes, st, b, qblocks, hpb, maxch,
                                                         scale);
  } else {
    launch_k(pdl, attn_chunk_kernel<F, NG, 256, 1>, grid, dim3(256), 0, st, a, qblocks, hpb, maxch, scale);
  }
  HKV_CHECK_LAUNCH();
}

template <KvKind F>
void launch_chunks(const AttnArgs& a, dim3 grid, int qblocks, int hpb, int maxch, AttnShape shape, cudaStream_t st,
                   bool pdl) {
  if (hpb <= 1)
    launch_chunks<F, 1>(a, grid, qblocks, hpb, maxch, shape, st, pdl);
  else if (hpb <= 2)
    launch_chunks<F, 2>(a, grid, qblocks, hpb, maxch, shape, st, pdl);
  else if (hpb <= 4)
    launch_chunks<F, 4>(a, grid, qblocks, hpb, maxch, shape, st, pdl);
  else if (hpb <= 6)
    launch_chunks<F, 6>(a, grid, qblocks, hpb, maxch, shape, st, pdl);
  else
    launch_chunks<F, 8>(a, grid, qblocks, hpb, maxch, shape, st, pdl);
}

}  // namespace

size_t attn_part_floats(int64_t N, int H, int D, int max_keys) {
  const int64_t maxch = (max_keys + kChunk - 1) / kChunk;
  return size_t(N * H * maxch * (D + 2));
}

namespace {
constexpr const char* kShapeNames[] = {"auto",      "narrow",    "wide",      "narrow-v",
                                       "narrow-h2", "narrow-v2", "narrow-h1", "slim"};  // AttnShape's order
}

const char* attn_shape_name(AttnShape s) { return kShapeNames[int(s)]; }

AttnShape parse_attn_shape(const std::string& name) {
  std::string all;
  for (int i = 0; i < int(std::size(kShapeNames)); i++) {
    if (name == kShapeNames[i]) return AttnShape(i);
    all += std::string(i ? ", " : "") + kShapeNames[i];
  }
  throw std::invalid_argument("attention shape '" + name + "': the shapes are " + all);
}

// Auto, by the number of chunk blocks with all of a KV head's query heads in a block (b = KV · chunks · rows) against
// the multiprocessors (P). q4h and fp8: NarrowH1 while its blocks (b · qpk) fit one wave, NarrowH2 while its blocks
// (b · ⌈qpk/2⌉) fit one wave, then Narrow while b < P, then NarrowV2 (V alone staged, two blocks a multiprocessor, two
// elements a thread in the values) or Slim; bf16: Narrow while b < 4P, then Wide. Each is the fastest shape, or within
// 1% of it (2% for bf16), at the depths it takes (hkv bench --attention-only, 27B shape, batch 1, depths 1K–262K).
// Slim for b > P (from = 10, in tenths of P, HKV_ATTN_SLIM_FROM: 12, 15, 20 and 30 for measuring): past b = 2P
// NarrowV2's grid is two waves; at b = P one slim block of 4 warps a multiprocessor is slower. q4h keeps NarrowV2 for
// 1.85P ≤ b ≤ 2P, where Slim's blocks reach a third on some multiprocessors while NarrowV2's still fit one wave.
// slim (HKV_ATTN_SLIM): 0 NarrowV2 instead of Slim, 2 Slim for fp8 alone. docs/PERFORMANCE.md has the measurements.
AttnShape auto_attn_shape(KvKind kind, int64_t b, int qpk, int64_t P, int slim, int from) {
  if (kind == KvKind::BF16) return b >= 4 * P ? AttnShape::Wide : AttnShape::Narrow;
  if (b * qpk <= P) return AttnShape::NarrowH1;
  if (b * ((qpk + 1) / 2) <= P) return AttnShape::NarrowH2;
  if (b < P) return AttnShape::Narrow;
  if (!(slim == 1 || (slim == 2 && kind == KvKind::FP8))) return AttnShape::NarrowV2;
  if (10 * b <= from * P) return AttnShape::NarrowV2;
  if (kind == KvKind::Q4H && 20 * b >= 37 * P && b <= 2 * P) return AttnShape::NarrowV2;
  return AttnShape::Slim;
}

bool attn_slim_fp8_rolled(int64_t blocks, int64_t P) { return blocks > int64_t(kSlimB) * P; }

int attn_dsplit(int D, int64_t blocks, int64_t P) { return D % 64 == 0 && 2 * blocks <= P ? 2 : 1; }

void attention(const AttnArgs& a_in, cudaStream_t st, const Tuning& tu) {
  AttnArgs a = a_in;
  a.vu = tu.attn_value_unroll;
  a.pre = a_in.pre_ok;
  // the one place fast scores are decided: fp8 where slim_scores applies
  a.fast_scores = a.kind == KvKind::FP8 && a.D == kSlimD && a.row_bytes % 16 == 0;
  g_last_launch = AttnLaunch{};  // every field its default (a positional list sets fields by their order)
  g_last_launch.slim_scores = a.fast_scores;
  a.dsplit = 1;  // (launch_chunks sets it for the staged one-element kernels: with_dsplit)
  a.trigger = tu.out_trigger;
  if (a.N <= 0 || a.max_keys <= 0) return;
  if (a.D % 32 != 0 || a.D > kMaxD)
    throw std::runtime_error("attention: head_dim must be a multiple of 32, at most 256");
  if (a.H % a.KV != 0) throw std::runtime_error("attention: heads must be a multiple of kv heads");
  const int maxch = (a.max_keys + kChunk - 1) / kChunk;
  const int qpk = a.H / a.KV;
  AttnShape shape = a.shape;
  if (shape == AttnShape::Auto)
    shape = auto_attn_shape(a.kind, int64_t(a.KV) * maxch * a.N, qpk, sm_count(), tu.attn_slim, tu.attn_slim_from);
  g_last_launch.shape = shape;
  // NarrowH2 and NarrowH1: two query heads a block, or one, so a chunk spreads over more multiprocessors
  const int hpb = std::min(qpk, shape == AttnShape::NarrowH1   ? 1
                                : shape == AttnShape::NarrowH2 ? 2
                                                               : kMaxG),
            qblocks = (qpk + hpb - 1) / hpb;
  dim3 grid(unsigned(a.KV * qblocks), unsigned(maxch), unsigned(a.N));
  switch (a.kind) {
    case KvKind::BF16:
      launch_chunks<KvKind::BF16>(a, grid, qblocks, hpb, maxch, shape, st, tu.pdl_all);
      break;
    case KvKind::FP8:
      launch_chunks<KvKind::FP8>(a, grid, qblocks, hpb, maxch, shape, st, tu.pdl_all);
      break;
    case KvKind::Q4H:
      launch_chunks<KvKind::Q4H>(a, grid, qblocks, hpb, maxch, shape, st, tu.pdl_all);
      break;
    case KvKind::F32:  // an oracle-only ablation: Engine::new_sequence refuses it before anything runs
      throw std::invalid_argument("engine attention: the f32 cache is an oracle-only ablation");
  }
  launch_k(tu.pdl_all, a.D == 256 ? attn_merge_kernel<256> : attn_merge_kernel<0>, dim3(unsigned(a.N), unsigned(a.H)),
           dim3(unsigned(a.D)), 0, st, a, maxch, a.kind == KvKind::Q4H, tu.merge_fast);
}

AttnLaunch attn_last_launch() { return g_last_launch; }

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
