// q4h's weighted values in integers on the tensor cores (ARITHMETIC.md §6 step 3; reference/model.cpp
// q4h_chunk_values), for the chunk kernels (chunk.cu, slim.cu, bulk.cu):
// One warp computes oc[h][32g … 32g + 31] of a chunk for the block's heads h < ng (NG ≤ 8), group g of the V rows:
//  1. M = the chunk's largest |s_t| of the group, taken on the stored fp16 bits (raw & 0x7fff orders as the
//     magnitudes do); E = floor(log2 M) from the bits (normal: exponent − 15; subnormal: the top bit's place − 24).
//     M inf or NaN (raw ≥ 0x7c00): oc = NaN; M = 0: oc = +0 (the warp's lanes agree, so it leaves as one).
//  2. For each 32 keys k0 … k0 + 31: lane l loads key k0 + l's 16 code bytes of the group (its row clamped to len − 1)
//     and scale, s' = f32(s)·2^(13−E) (exact: 11 bits times a power of two; 0 past len), into the warp's scratch.
//     Lean (the rows in shared memory, 16-byte aligned: bulk.cu's forms 17 to 20): the codes stay where they are and
//     only s' goes to the scratch; ldmatrix below reads the rows themselves, lane l giving key k0 + l's address.
//     B, k = 32 keys × n = 8 columns, u8: ldmatrix.trans of the 32 rows of 16 bytes gives lane (n = lane/4,
//     t = lane%4) in register m the 4 bytes 2n, 2n + 1 of keys 8m + 2t and 8m + 2t + 1; byte 2n holds the codes
//     c = u + 8 of dims 4n (low nibble) and 4n + 1 (high), byte 2n + 1 those of dims 4n + 2 and 4n + 3. Tile τ
//     (dims 4n + τ) is those nibbles, gathered by byte permutes so that its k slots 4t … 4t + 3 are keys {2t, 2t+1,
//     8+2t, 9+2t} and slots 16 + 4t … are keys {16+2t, 17+2t, 24+2t, 25+2t} (a sum over k takes the keys in any order:
//     the sums are exact). Lean (bulk.cu's forms 17 to 20): the tiles are the whole bytes instead, R0 (byte 2n of the
//     four keys), R0 & 0xf0 a byte (16·c of dim 4n + 1), R2 (byte 2n + 1), R2 & 0xf0 (16·c of 4n + 3), two permutes
//     and two masks a register pair instead of ten instructions; step 3 takes the low codes' sums as a difference.
//     W = round_even(max(e, 0)·s') = bits(fma(e', s', 1.5·2^23)) − 0x4b400000 (one rounding, to an integer since
//     |e'·s'| < 2^14; e' = 0 past len, for heads ≥ ng, and for a NaN e), as two signed bytes W = p0 + 2^8·p1: p0 W's
//     low byte, p1 that of (W + 2^7) >> 8 (p0 in [−128, 127], p1 in [−64, 64]). Lean takes both bytes from the fma's
//     bits F = W + 0x4b400000 without the subtraction: F and W agree in their low 16 bits (0x4b400000's are 0), so p0
//     is F's byte 0 and p1 byte 1 of F + 2^7. A, m = 16 rows × the same k, s8: row h head h's p0, row 8 + h its p1.
//     mma.sync m16n8k32 s8·u8 → s32, accumulating over the chunk: the four tiles and a fifth with B = 1 (ΣW).
//  3. Lean: each plane's sums are exact in 32 bits (|p0| ≤ 2^7, a byte ≤ 255, 512 keys: < 2^24); dim 4n + 1's sum is
//     the second tile's / 16 (a multiple of 16: an exact shift), dim 4n's the first tile's minus the second's (the high
//     codes' 16·c taken out), and so for 4n + 3 and 4n + 2. O = D_0 + 2^8·D_1 − 8·ΣW = Σ_t W_t·u_t exactly, in 32 bits
//     (|O| ≤ 512·2^14·8 = 2^26, |8·ΣW| ≤ 2^26); oc = float(O)·2^(E−13) (float() rounds once, to nearest even; the
//     product by a normal power of two is exact).
// Lane (n, t) ends with head n's dims 8t … 8t + 7 of the group.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/device.cuh"

namespace hkv::cuda::attn {

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

// What e_s holds for the value loop, up to the end of the chunk's last block of 32 keys (weights_to_block):
// None: e below len and ng, anything past them; Made: e' = max(e, 0) there, 0 past them (bulk.cu's forms 11, 17, 20);
// Zeroed: e there, 0 past them (bulk.cu's forms 18 and 19).
enum class Ready { None, Made, Zeroed };

// W of key kk of the 32 (step 2) as the fma's bits F = W + 0x4b400000, whose low 16 bits are W's: with Made or Zeroed
// only a head past e_s's ES columns needs a test, and with Made the max is already taken.
template <int NG, int ES, Ready R>
__device__ __forceinline__ uint32_t q4h_w(const float* e_s, const float* sp, int k0, int kk, int len, int n, bool hv) {
  float e;
  if constexpr (R == Ready::Made)
    e = ES >= 8 || n < ES ? e_s[(k0 + kk) * ES + n] : 0.0f;
  else if constexpr (R == Ready::Zeroed)
    e = ES >= 8 || n < ES ? fmaxf(e_s[(k0 + kk) * ES + n], 0.0f) : 0.0f;
  else
    e = hv && k0 + kk < len ? fmaxf(e_s[(k0 + kk) * ES + n], 0.0f) : 0.0f;
  return __float_as_uint(__fmaf_rn(e, sp[kk], 12582912.0f));
}
// byte B of each of four words, as one word (word i's in byte i)
template <int B>
__device__ __forceinline__ uint32_t q4h_bytes(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
  constexpr uint32_t s = B | (4 + B) << 4;
  return __byte_perm(__byte_perm(w0, w1, s), __byte_perm(w2, w3, s), 0x5410);
}

// The group g's oc of a chunk (the file's head comment). vrows: key 0's row (its codes at 16·g), vstride bytes a key,
// v16: rows 16-byte aligned; srows: key 0's group-g scale (fp16), sstride bytes a key; R: what e_s holds (Ready).
// Every lane of the warp calls it.
template <int NG, int ES, Ready R = Ready::None, bool Lean = false>
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
    const float up = __uint_as_float(uint32_t(127 + 13 - E) << 23);  // 2^(13−E)
    int acc[5][4];
#pragma unroll
    for (int i = 0; i < 5; i++)
#pragma unroll
      for (int j = 0; j < 4; j++) acc[i][j] = 0;
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
    if constexpr (!Lean) {
      load(0, c0, s0);
      load(32, c1, s1);
    }
    for (int k0 = 0; k0 < len; k0 += 32) {  // 2.
      uint32_t rm[4];
      if constexpr (Lean) {  // the rows in shared memory: ldmatrix reads key k0 + lane's codes where they are
        const int kc = min(k0 + lane, len - 1);
        const uint16_t sb = *reinterpret_cast<const uint16_t*>(srows + size_t(kc) * sstride);
        const float sp = k0 + lane < len ? f32_from_f16_hw(sb) * up : 0.0f;
        __syncwarp();  // the last block's reads of the scratch are done
        scr->sp[lane] = sp;
        __syncwarp();
        ldsm_x4_trans(rm, vrows + size_t(kc) * vstride + 16 * g);
      } else {
        const uint4 cw = c0;
        const float sp = k0 + lane < len ? f32_from_f16_hw(s0) * up : 0.0f;
        c0 = c1, s0 = s1;
        if (k0 + 64 < len) load(k0 + 64, c1, s1);
        __syncwarp();  // the last block's reads of the scratch are done
        scr->codes[lane] = cw;
        scr->sp[lane] = sp;
        __syncwarp();
        ldsm_x4_trans(rm, &scr->codes[lane]);
      }
      uint32_t b[4][2];  // tile τ: b[τ][0] keys {2t, 2t+1, 8+2t, 9+2t}, b[τ][1] keys {16+2t, …}
#pragma unroll
      for (int h = 0; h < 2; h++) {
        if constexpr (Lean) {
          const uint32_t r0 = __byte_perm(rm[2 * h], rm[2 * h + 1], 0x6420);  // byte 2n: dims 4n, 4n + 1
          const uint32_t r2 = __byte_perm(rm[2 * h], rm[2 * h + 1], 0x7531);  // byte 2n + 1: dims 4n + 2, 4n + 3
          b[0][h] = r0, b[1][h] = r0 & 0xf0f0f0f0u, b[2][h] = r2, b[3][h] = r2 & 0xf0f0f0f0u;
        } else {
          const uint32_t l0 = rm[2 * h] & 0x0f0f0f0fu, l1 = rm[2 * h + 1] & 0x0f0f0f0fu;
          const uint32_t h0 = (rm[2 * h] >> 4) & 0x0f0f0f0fu, h1 = (rm[2 * h + 1] >> 4) & 0x0f0f0f0fu;
          b[0][h] = __byte_perm(l0, l1, 0x6420), b[2][h] = __byte_perm(l0, l1, 0x7531);
          b[1][h] = __byte_perm(h0, h1, 0x6420), b[3][h] = __byte_perm(h0, h1, 0x7531);
        }
      }
      uint32_t A[4];
      {
        const int ks[2][4] = {{2 * t, 2 * t + 1, 8 + 2 * t, 9 + 2 * t},
                              {16 + 2 * t, 17 + 2 * t, 24 + 2 * t, 25 + 2 * t}};
#pragma unroll
        for (int h = 0; h < 2; h++) {
          uint32_t w[4], w1[4];
#pragma unroll
          for (int i = 0; i < 4; i++) {
            const uint32_t F = q4h_w<NG, ES, R>(e_s, scr->sp, k0, ks[h][i], len, n, hv);
            if constexpr (Lean) {
              w[i] = F, w1[i] = F + 128u;
            } else {
              const int W = int(F) - 0x4b400000;
              w[i] = uint32_t(W), w1[i] = uint32_t(W + 128);
            }
          }
          A[2 * h] = q4h_bytes<0>(w[0], w[1], w[2], w[3]);
          A[2 * h + 1] = q4h_bytes<1>(w1[0], w1[1], w1[2], w1[3]);
        }
      }
#pragma unroll
      for (int tau = 0; tau < 4; tau++) imma_s8u8(acc[tau], A, b[tau][0], b[tau][1]);
      imma_s8u8(acc[4], A, 0x01010101u, 0x01010101u);
    }
    // 3. row n of A holds p0's sums (c0, c1), row n + 8 p1's (c2, c3); Lean: each dim's sums from the whole bytes'
    if constexpr (Lean) {
#pragma unroll
      for (int tau = 0; tau < 4; tau += 2)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[tau][j] -= acc[tau + 1][j], acc[tau + 1][j] >>= 4;
    }
    auto whole = [&](int i, int j) { return acc[i][j + 2] * 256 + acc[i][j]; };
    const int sw = whole(4, 0);                                        // ΣW of head n
    const float unit = __uint_as_float(uint32_t(127 + E - 13) << 23);  // 2^(E−13)
#pragma unroll
    for (int tau = 0; tau < 4; tau++) {
      out[tau] = __int2float_rn(whole(tau, 0) - 8 * sw) * unit;      // dim 8t + τ
      out[4 + tau] = __int2float_rn(whole(tau, 1) - 8 * sw) * unit;  // dim 8t + 4 + τ
    }
  }
  if (hv) {
    float* o = part + n * head_stride + 2 + 32 * g + 8 * t;
#pragma unroll
    for (int i = 0; i < 8; i++) o[i] = out[i];
  }
}

// The block's warps over groups [gb, ge) of the chunk, a group a warp at a time (scr: a Q4hScratch a warp).
template <int NG, int ES, int T, Ready R = Ready::None, bool Lean = false>
__device__ __forceinline__ void q4h_values_block(const uint8_t* vrows, size_t vstride, bool v16, const uint8_t* srows,
                                                 size_t sstride, size_t sgstride, int gb, int ge, int len,
                                                 const float* e_s, int ng, float* part, int64_t head_stride,
                                                 Q4hScratch* scr) {
  const int warp = threadIdx.x >> 5;
  for (int g = gb + warp; g < ge; g += T / 32)
    q4h_int_values<NG, ES, R, Lean>(vrows, vstride, v16, srows + size_t(g) * sgstride, sstride, g, len, e_s, ng, part,
                                    head_stride, scr + warp);
}

}  // namespace hkv::cuda::attn
