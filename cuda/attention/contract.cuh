// Attention of each query head over its sequence's cache, read in the cache's format: reference/model.cpp attend()
// (docs/ARITHMETIC.md §6), for decode and prefill alike (each row attends to n_keys[row] slots). This header states
// that contract and holds the device code that keeps it in both chunk kernels (chunk.cu, slim.cu).
//   q4h: the query is rotated once per group (warp_wht32), held in block fixed point (q4h_record), and the output
//   rotated back once (merge.cu).
//   Keys in fixed chunks of 512. In chunk c, for each key in order:
//     score = (Σ_g fma(s_g, p_g, acc)) · scale, scale = fp32(1/sqrt(head_dim)); p_g over the group's 32 elements:
//     bf16, fp8 the fma chain of u_j·q_j from 0; q4h float(P)·unit_g, P = Σ u_j·X_j exact in integers (dp4a, any
//     order: q4h_group_p); mc = the chunk's maximum;
//     p = exp_c(score − mc); lc = lc + p (keys in order); bf16, fp8 oc[d] = fma(p, s_g·u_d, oc[d]) (keys in order);
//     q4h oc in integers per group (q4h_int_values): E = floor(log2 max|s|), W = round_even(p·s·2^(13−E)),
//     O_d = Σ W·u_d exact (mma.sync s8·u8 on two byte planes of W, any order), oc[d] = float(O_d)·2^(E−13).
//   Chunks merged in order (merge.cu): mn = max(m, mc), a = exp_c(m − mn), b = exp_c(mc − mn), l = fma(l, a, lc·b),
//   o[d] = fma(o[d], a, oc[d]·b); out = o/l; then (engine) out · sigmoid_c(gate).
// Decoding a stored element costs as much as the fmas it feeds, so each decoded K or V element serves every
// query head of its KV head (6 in the 27B shape) and each group scale is converted once per group and key
// (q4h's K codes are not decoded to floats at all: prep<Q4H>'s bytes feed dp4a):
//   q4h unit u = c − 8 as as_float(0x4b000000 | c) − (2^23 + 8) (one byte permute and one exact add);
//   bf16 u = the high half-word; fp8 through f32_from_e4m3_hw. The value is s_g·u (one exact product), as
//   attend(). Scales convert by f32_from_f16_hw (one instruction; device.cuh says why it is exact here).
// Bound (arithmetic, not measured): every bf16 or fp8 K and V element feeds one exact fp32 fma per query head, 6 at
// 6:1; at depth 262,144 in the 27B shape that would be 25.8 G fmas a token for the values alone, about 0.77 ms at the
// datasheet fp32 rate (67 TFLOP/s), against 1.2 ms for the 4.83 GB of q4h cache at 4.0 TB/s. So q4h takes neither in
// fp32: its scores take half a dp4a an element and head (16 a group of 32), its values 10 mma.sync m16n8k32 a group
// and 32 keys for up to 8 heads (ARITHMETIC.md §6 step 3; q4h_values.cuh).
// In this file, in order: a stored row's bytes and units (Fmt, load16, scale_from, prep, unit); the query (q4h_record,
// load_q); the scores (q4h's in integers, q4h_int_scores; fp8's at head_dim 256, slim_scores; chunk.cu's key_scores
// takes the other fp32 chains); the chunk's maximum and weights (chunk_weights, weights) and lc (store_ml).
#pragma once

#include <cmath>
#include <type_traits>

#include "cuda/attention/exp_flat.h"
#include "cuda/attention/launch.h"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace hkv::cuda::attn {

constexpr int kEs = 8;  // e_s: [key][kEs] weights of a chunk

// ---- a stored row: its bytes and units ----
// A format's row layout: codes in 16-byte pieces, then (fp8, q4h) one fp16 scale a group of 32.
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

// ---- the query ----
// q4h scores in integers (ARITHMETIC.md §6). load_q leaves, in place of each (head, group) of the rotated query in
// q_s, its record: the 32 values in block fixed point, X_j = round_even(q_j · 2^(13−e)) (xq_int with top 13, |X_j| <=
// 2^14), split as X_j = 256·hi_j + lo_j with lo_j, hi_j signed bytes; words 0–7 lo, 8–15 hi, each word the four
// elements of one register of prep<Q4H> (word 2t: elements 8t, 8t+2, 8t+4, 8t+6; word 2t+1: 8t+1, …, 8t+7); word 16
// the unit 2^(e−13) (0 for a group of zeros, NaN for one with an inf or NaN, whose X are 0), word 17 −8·Σ_j X_j.
// With Pairs the two planes' words alternate instead (words 2i and 2i + 1: lo and hi word i), so that the scores on
// the tensor cores (q4h_mma_scores.cuh) take a lane's four words of A with one 16-byte load.
// The record of one (head, group) from the rotated value v of element `lane` (every lane of the warp), into rec: the
// fixed point by xq_lane<13> (the MLX4 records' xq_lane<21>), the byte planes in xq_chunk's element order.
template <bool Pairs = false>
__device__ __forceinline__ void q4h_record(float v, int lane, uint32_t* rec) {
  uint32_t unit;
  bool bad;
  const int X = xq_lane<13>(v, unit, bad);
  const int sum = __reduce_add_sync(kFull, X);  // exact: |Σ X| <= 2^19
  const int lo = int(int8_t(X & 0xff)), hi = (X - lo) >> 8;
  __syncwarp();           // every lane has read its value before the record overwrites the group's floats
  if constexpr (Pairs) {  // xq_plane_byte's word and byte, the words 8 bytes apart (the hi plane's between them)
    uint8_t* const b = reinterpret_cast<uint8_t*>(rec) + 8 * (2 * (lane >> 3) + (lane & 1)) + ((lane & 7) >> 1);
    b[0] = uint8_t(lo), b[4] = uint8_t(hi);
  } else {
    uint8_t* const b = xq_plane_byte(rec, lane);
    b[0] = uint8_t(lo), b[32] = uint8_t(hi);
  }
  if (lane == 0) rec[16] = unit, rec[17] = uint32_t(-8 * sum);
}

// Forms 17, 18 and 19's query records, made once a row and head (bulk.cu's attn_q4h_records_kernel): [N][H][D] words,
// head h's group g at (row·H + h)·D + 32·g, in a.part after the chunks' partials (attn_part_floats counts both).
__host__ __device__ inline float* q4h_records(const AttnArgs& a) {
  return a.part + a.N * a.H * int64_t((a.max_keys + kChunk - 1) / kChunk) * (a.D + 2);
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

// ---- scores ----
// p_g = float(P) · unit for one key and head: P = Σ_j (c_j − 8)·X_j = 256·Σ c·hi + Σ c·lo − 8·Σ X, exact in int32
// (|P| <= 2^22, so float(P) is exact, and so is its product by a power of two); x: the group's prep<Q4H> words (codes
// 0..15 a byte), r: the record's 16 plane words, nx: −8·Σ X, unit_g: the unit.
__device__ __forceinline__ float q4h_group_p(const uint32_t (&x)[8], const uint32_t (&r)[16], int nx, float unit_g) {
  int lo = nx, hi = 0;
#pragma unroll
  for (int i = 0; i < 8; i++) lo = __dp4a(int(x[i]), int(r[i]), lo), hi = __dp4a(int(x[i]), int(r[8 + i]), hi);
  return __int2float_rn(hi * 256 + lo) * unit_g;
}

// One group g of KP keys for NG heads: acc[k][h] = fma(s_g, p_g, acc[k][h]) (q4h_group_p), from the keys' 16 code
// bytes of the group as words (w[k]) and their scales (sg[k]). Each head's record is loaded once for the KP keys.
template <int NG, int KP>
__device__ __forceinline__ void q4h_int_group(const uint32_t (&w)[KP][4], const float (&sg)[KP], const float* q_s,
                                              int D, int g, float (&acc)[KP][NG]) {
  uint32_t x[KP][8];
#pragma unroll
  for (int k = 0; k < KP; k++) prep<KvKind::Q4H>(w[k], x[k]);
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
}

// The scaled scores of KP keys (rows kr[k], 16-byte aligned when v16, in shared memory when KS) for NG heads over
// q4h records in q_s: per key and head acc = fma(s_g, p_g, acc) over the groups in order (q4h_int_group); the group
// scales from skr[k] (SKS: the K rows' scales staged) or from the rows. A group's codes are loaded one group ahead.
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
    float sg[KP];
#pragma unroll
    for (int k = 0; k < KP; k++) {
      uint16_t raw;
      if constexpr (SKS)
        raw = skr[k][g];
      else
        raw = load_u16<KS>(kr[k] + Fm::scale_off(D, g));
      sg[k] = scale_from<KvKind::Q4H>(raw);
    }
    q4h_int_group<NG, KP>(cur, sg, q_s, D, g, acc);
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

// ---- the chunk's maximum, its weights and lc ----
// Every entry of e_s [key][ES] up to the end of the chunk's last block of 32 keys: f(e, h) for a key below len and a
// head below ng, 0 past them, so that a value loop reads them without a test (q4h_w's Ready::Made and Ready::Zeroed).
template <int T, int ES, class F>
__device__ __forceinline__ void weights_to_block(float* e_s, int len, int ng, F f) {
  const int lenr = (len + 31) & ~31;
  for (int i = threadIdx.x; i < lenr * ES; i += T) {
    const int j = i / ES, h = i % ES;
    e_s[i] = j < len && h < ng ? f(e_s[i], h) : 0.0f;
  }
}

// weights_to_block's result for f(s, h) = exp_c(s − mc[h]), a key a thread: thread t takes keys t, t + T, … below the
// end of the chunk's last block of 32, reads the key's ES entries with vector loads, makes the weight of each head
// below ng (for a key below len) with exp_c_flat, mc held in registers, and writes the row back whole with vector
// stores, 0 in every other entry. A key's NG exponentials are independent chains with no branch between them.
// Max (form 20): each weight written as max(e, 0), the value loops' e' (q4h_w's Ready::Made), and a NaN weight of head
// h also written to nan_s[h] (zeroed before), so that lc = Σ e' + nan_s[h] is Σ e's NaN where one e is NaN and, with
// none, Σ e to the bit (every e' = e ≥ +0 then, and x + (+0) = x for x ≥ +0).
template <int NG, int T, int ES, bool Max = false>
__device__ __forceinline__ void weights_by_key(float* e_s, int len, int ng, const float* mc_s, float* nan_s = nullptr) {
  static_assert(ES % 2 == 0 && ES >= NG, "a key's row holds its NG weights, 8-byte aligned");
  float mc[NG];
#pragma unroll
  for (int h = 0; h < NG; h++) mc[h] = mc_s[h];
  const int lenr = (len + 31) & ~31;
  for (int j = threadIdx.x; j < lenr; j += T) {
    float v[ES];
    float* const row = e_s + j * ES;
    constexpr int W = ES % 4 == 0 ? 4 : 2;  // floats a vector load or store
#pragma unroll
    for (int h = 0; h < ES; h += W) {
      if constexpr (W == 4) {
        const float4 w = *reinterpret_cast<const float4*>(row + h);
        v[h] = w.x, v[h + 1] = w.y, v[h + 2] = w.z, v[h + 3] = w.w;
      } else {
        const float2 w = *reinterpret_cast<const float2*>(row + h);
        v[h] = w.x, v[h + 1] = w.y;
      }
    }
    const bool key = j < len;
    float e[NG], z = 0.0f;  // z: NaN where one of the key's weights is (e·0 is +0 or −0 for a finite e)
#pragma unroll
    for (int h = 0; h < NG; h++) {  // every head's chain, then the select (an entry past len or ng: any float, no trap)
      e[h] = exp_c_flat(v[h] - mc[h]);
      if constexpr (Max) {
        if (h < ng) z = __fmaf_rn(e[h], 0.0f, z);
        v[h] = key && h < ng ? fmaxf(e[h], 0.0f) : 0.0f;
      } else {
        v[h] = key && h < ng ? e[h] : 0.0f;
      }
    }
    if constexpr (Max) {
      if (key && z != z) {  // rare: which heads' (any NaN of a head's: lc's is NaN either way)
#pragma unroll
        for (int h = 0; h < NG; h++)
          if (h < ng && e[h] != e[h]) nan_s[h] = e[h];
      }
    }
#pragma unroll
    for (int h = NG; h < ES; h++) v[h] = 0.0f;
#pragma unroll
    for (int h = 0; h < ES; h += W) {
      if constexpr (W == 4)
        *reinterpret_cast<float4*>(row + h) = make_float4(v[h], v[h + 1], v[h + 2], v[h + 3]);
      else
        *reinterpret_cast<float2*>(row + h) = make_float2(v[h], v[h + 1]);
    }
  }
}

// From the scores in e_s [key][ES] and each thread's running maxima mloc: the chunk's maximum per head
// (mc_s; a maximum does not depend on the order it is taken in), then e_s[j][h] = exp_c(score − mc). Zero (bulk.cu's
// forms 18 and 19): also 0 into e_s past the keys (to the end of the last block of 32) and past the block's ng heads
// (to ES); ByKey (forms 19 and 20): that pass a key a thread (weights_by_key), else an entry a thread
// (weights_to_block); Max (form 20): weights_by_key's Max, nan_s [NG] zeroed here first.
template <int NG, int T, int ES = kEs, bool Zero = false, bool ByKey = false, bool Max = false>
__device__ __forceinline__ void chunk_weights(const float (&mloc)[NG], float* e_s, int len, float (*red_s)[NG],
                                              float* mc_s, int ng = NG, float* nan_s = nullptr) {
  static_assert(Zero || !ByKey, "the pass a key a thread writes the zeros");
  static_assert(ByKey || !Max, "the weights' max is the pass a key a thread's");
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
    if constexpr (Max) nan_s[tid] = 0.0f;
  }
  __syncthreads();
  if constexpr (ByKey) {
    weights_by_key<NG, T, ES, Max>(e_s, len, ng, mc_s, nan_s);
  } else if constexpr (Zero) {
    weights_to_block<T, ES>(e_s, len, ng, [&](float s, int h) { return hkv::exp_c(s - mc_s[h]); });
  } else {
    for (int i = tid; i < NG * len; i += T) {
      const int j = i / NG, h = i % NG;
      e_s[j * ES + h] = hkv::exp_c(e_s[j * ES + h] - mc_s[h]);
    }
  }
  __syncthreads();
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

// lc = Σ e_t, keys in order (one thread a head: threads T−1−h, past the value threads when there are such),
// stored with mc as the chunk's first two partials. nan_s (form 20, e_s holding max(e, 0)): lc = Σ e'_t + nan_s[h]
// (weights_by_key's Max).
template <int NG, int T, int ES = kEs>
__device__ __forceinline__ void store_ml(float* part, int64_t head_stride, const float* e_s, const float* mc_s, int len,
                                         int ng, const float* nan_s = nullptr) {
  const int tid = threadIdx.x;
  if (T - 1 - tid < ng) {
    const int h = T - 1 - tid;
    float lc = 0.0f;
    for (int j = 0; j < len; j++) lc = lc + e_s[j * ES + h];
    if (nan_s) lc = lc + nan_s[h];
    part[h * head_stride] = mc_s[h];
    part[h * head_stride + 1] = lc;
  }
}

}  // namespace hkv::cuda::attn
