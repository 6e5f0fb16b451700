// q4h's scores on the tensor cores (ARITHMETIC.md §6 step 2, the same integers and the same float chain as
// contract.cuh's q4h_int_scores), for a warp's 32 staged K rows:
//   For each group g in order, mma.sync m16n8k32 s8·u8 → s32 with A = the query's records (q4h_record) of group g,
//   row h head h's low plane and row 8 + h its high plane (heads h < NG, rows past NG zero), and B = 8 keys' codes
//   (u8, 0..15), keys as columns; the k order is the records' (the prep<Q4H> words: word i of the codes against word
//   i of each plane), so lane (n = lane/4, t = lane%4) gives a0 = plane word t, a2 = word 4 + t and
//   b0 = key n's code word t, b1 = its word 4 + t (lanes of rows n ≥ NG load head 0's records: a row of A reaches
//   only the same row of the sums, which those lanes never store). Paired (bulk.cu's forms 17, 18 and 19): b0 = key n's
//   prep word 2t and b1 its word 2t + 1, the low and the high nibbles of one code word, t (one load, constant
//   shifts), a0, a1 = both planes' word 2t and a2, a3 their word 2t + 1: with the records' planes in pairs
//   (q4h_record<true>) words 4t … 4t + 3, one 16-byte load (mma_frag.h's paired order). Lane (n, t) then holds, for
//   head n and the tile's keys 2t and 2t + 1, both planes' sums c2 and c3, and the low plane's c0 and c1 started from
//   −8·ΣX, so P = 256·c2 + c0 is the integer q4h_group_p forms with dp4a, and the lane finishes the key's chain as
//   q4h_int_group does: acc = fma(s_g, float(P)·unit_g, acc). After the last group, score = acc · scale for the keys
//   below `valid`, into e_s, and head n's largest of them into its running maximum (a maximum, so in any order).
// Four tiles of 8 keys a warp; every lane of the warp calls it (the count of valid keys is the warp's). Every fragment
// index is mma_frag.h's, which the CPU tests check against the direct sums.
#pragma once

#include <cstdint>

#include "cuda/attention/contract.cuh"
#include "cuda/attention/mma_frag.h"
#include "cuda/attention/q4h_values.cuh"

namespace hkv::cuda::attn {

// rows: key 0 of the warp's 32 (row bytes RB, in shared memory, 16-byte aligned; all 32 rows readable, those past
// `valid` never stored); q_s: the block's records [NG][D]; e_s: key kofs + j's scores at (kofs + j)·ES + h.
template <int NG, int ES, bool Paired = false>
__device__ __forceinline__ void q4h_mma_scores(const uint8_t* rows, int RB, int D, int valid, const float* q_s,
                                               float scale, float* e_s, int kofs, float (&mloc)[NG]) {
  static_assert(NG <= 8, "a head a row of A's 8");
  using Fm = Fmt<KvKind::Q4H>;
  const int lane = threadIdx.x & 31, n = frag::score_head(lane);
  const bool hv = n < NG;
  const uint32_t* const rec0 = reinterpret_cast<const uint32_t*>(q_s + (hv ? n : 0) * D);
  float acc[4][2];
#pragma unroll
  for (int tau = 0; tau < 4; tau++) acc[tau][0] = acc[tau][1] = 0.0f;
  const int ngroups = D / 32;
#pragma unroll 1
  for (int g = 0; g < ngroups; g++) {
    const uint32_t* const rec = rec0 + 32 * g;
    const uint4 av = Paired ? *reinterpret_cast<const uint4*>(rec + frag::paired_a_pairs(lane))  // the planes in pairs
                            : make_uint4(rec[frag::score_a_word(lane, 0)], rec[frag::score_a_word(lane, 1)],
                                         rec[frag::score_a_word(lane, 2)], rec[frag::score_a_word(lane, 3)]);
    const uint32_t a[4] = {av.x, av.y, av.z, av.w};
    const float unit_g = __uint_as_float(rec[16]);
    const int nx = int(rec[17]);
#pragma unroll
    for (int tau = 0; tau < 4; tau++) {
      const uint8_t* kb = rows + size_t(8 * tau + frag::b_col(lane)) * RB + 16 * g;  // B: a key's codes of group g
      uint32_t b0, b1;
      if constexpr (Paired) {
        b0 = frag::score_b_bits(kb, frag::paired_b_word(lane, 0));
        b1 = frag::score_b_bits(kb, frag::paired_b_word(lane, 1));
      } else {
        b0 = frag::score_b_bits(kb, frag::score_b_word(lane, 0));
        b1 = frag::score_b_bits(kb, frag::score_b_word(lane, 1));
      }
      int d[4] = {nx, nx, 0, 0};
      imma_s8u8(d, a, b0, b1);
#pragma unroll
      for (int i = 0; i < 2; i++) {  // key 8τ + score_key(lane, i) of head n
        const uint8_t* kr = rows + size_t(8 * tau + frag::score_key(lane, i)) * RB;
        const float sg = scale_from<KvKind::Q4H>(*reinterpret_cast<const uint16_t*>(kr + Fm::scale_off(D, g)));
        const float p = __int2float_rn(d[2 + i] * 256 + d[i]) * unit_g;
        acc[tau][i] = hkv::fma_rn(sg, p, acc[tau][i]);
      }
    }
  }
  float m = -INFINITY;
#pragma unroll
  for (int tau = 0; tau < 4; tau++)
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int j = 8 * tau + frag::score_key(lane, i);
      if (hv && j < valid) {
        const float sc = acc[tau][i] * scale;
        e_s[(kofs + j) * ES + n] = sc;
        m = max_step(m, sc);
      }
    }
#pragma unroll
  for (int h = 0; h < NG; h++)
    if (h == n) mloc[h] = max_step(mloc[h], m);
}

}  // namespace hkv::cuda::attn
