// Canonical scalar functions: one definition, compiled for the host and the device.
//
// The oracle and the engine agree bit for bit only if they perform the same IEEE operations in the same
// order. libm and CUDA's math library do not agree (expf differs on ~30% of inputs), so every
// transcendental the model needs is written here with explicit fma, +, *, / and sqrt — the five
// operations IEEE 754 rounds correctly and both compilers emit as single instructions — plus integer bit
// manipulation. No call into libm happens on any exact path: the only standard-library calls are std::fma
// in fma_rn (an instruction with -mfma, else glibc's correctly rounded software fma) and std::sqrt in
// sqrt_rn (sqrtss), both correctly rounded IEEE operations. docs/ARITHMETIC.md gives the formulas; the ULP
// bounds are enforced by tests/test_scalar.cpp against long double. The maxima quoted below were measured
// over all 2^32 inputs on the host, and a build for the H200 (nvcc --fmad=false) gave the same bits for
// every input of every function here (round_even_small and floor_small: every input but NaN).
//
// Build flags (set in CMakeLists.txt): contraction off, no fast-math, no flush-to-zero.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define HKV_HD __host__ __device__ __forceinline__
#else
#include <cmath>
#define HKV_HD inline
#endif

namespace hkv {

HKV_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);  // an instruction with -mfma, else glibc's correctly rounded software fma
#endif
}

HKV_HD float sqrt_rn(float x) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(x);
#else
  return std::sqrt(x);       // sqrtss: IEEE correctly rounded
#endif
}

HKV_HD uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
HKV_HD float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
HKV_HD bool is_finite(float x) { return (f32_bits(x) & 0x7f800000u) != 0x7f800000u; }
HKV_HD bool is_nan(float x) { return (f32_bits(x) & 0x7fffffffu) > 0x7f800000u; }

// The one NaN the functions below return. IEEE leaves NaN payloads to the hardware (x86 propagates an
// operand's payload and makes sqrt(−1) 0xffc00000, CUDA returns 0x7fffffff), so each function tests for
// NaN inputs and domain errors and returns this NaN instead of letting an instruction make one.
HKV_HD float canonical_nan() { return f32_from_bits(0x7fc00000u); }

// 2^k as a float for -126 <= k <= 127 (normal range only).
HKV_HD float exp2i(int k) { return f32_from_bits(uint32_t(k + 127) << 23); }

// Round to the nearest integer, ties to even, for |x| <= 2^22 (NaN and inf are outside the domain): adding
// and removing 1.5·2^23 leaves the integer part, rounded by the addition itself. Exact and identical on both
// sides.
HKV_HD float round_even_small(float x) {
  const float magic = 12582912.0f;  // 1.5 * 2^23
  return (x + magic) - magic;
}

// q4h's code of y against its group's stored scale s (s != 0; the q4_0 grid): clamp(round_even(clamp(y/s, ±9)) + 8,
// 0, 15), for kv_pack_row's q4_code and the engine's packer.
HKV_HD int q4_0_code(float y, float s) {
  float t = y / s;
  t = t < -9.0f ? -9.0f : (t > 9.0f ? 9.0f : t);
  const int c = int(round_even_small(t)) + 8;
  return c < 0 ? 0 : (c > 15 ? 15 : c);
}
// The squared error of a stored value v (exact in fp32) against y, (double(v) − double(y))² in float64: the term that
// q4h's scale search sums over a group in index order (kv_pack_row's q4_codes, every grid), and q4_0_sq_err its
// term on the q4_0 grid (the engine's packer).
HKV_HD double sq_err(float v, float y) {
  const double e = double(v) - double(y);
  return e * e;
}
HKV_HD double q4_0_sq_err(float y, float s) { return sq_err(s * (float(q4_0_code(y, s)) - 8.0f), y); }

// floor for |x| <= 2^22, without libm.
HKV_HD float floor_small(float x) {
  float r = round_even_small(x);
  return r > x ? r - 1.0f : r;
}

// e^x = p·2^k for |x| <= 120, with p in [0.70, 1.42] (an internal step of exp_c, sigmoid_c and silu_c).
//   k = round(x·log2 e) through one fma with the rounding constant;
//   r = x − k·ln2 in two fma steps (Cody–Waite with ln2 split hi+lo; k·ln2_hi is exact for |k| < 2^9),
//   |r| <= 0.3466;
//   p = e^r by a degree-7 Taylor polynomial in Horner form, each step one fma.
HKV_HD float exp_reduce(float x, int& k) {
  const float log2e = 1.44269502162933349609375f;
  const float ln2_hi = 0.693145751953125f;         // 15 significant bits
  const float ln2_lo = 1.428606765330187045e-06f;  // ln2 − ln2_hi
  const float magic = 12582912.0f;
  float kf = fma_rn(x, log2e, magic) - magic;
  float r = fma_rn(-kf, ln2_hi, x);
  r = fma_rn(-kf, ln2_lo, r);
  float p = 1.98412698412698412698e-4f;          // 1/7!
  p = fma_rn(p, r, 1.38888888888888888889e-3f);  // 1/6!
  p = fma_rn(p, r, 8.33333333333333333333e-3f);  // 1/5!
  p = fma_rn(p, r, 4.16666666666666666667e-2f);  // 1/4!
  p = fma_rn(p, r, 1.66666666666666666667e-1f);  // 1/3!
  p = fma_rn(p, r, 0.5f);
  p = fma_rn(p, r, 1.0f);
  p = fma_rn(p, r, 1.0f);
  k = int(kf);
  return p;
}

// p·2^k for -252 <= k <= 254, in two power-of-two multiplications (k1 = k/2 truncated, k2 = k − k1, both
// normal powers of two). The callers have k >= -174 and 2^-4 <= |p| < 2^8, so p·2^k1 (k1 >= -87) is normal,
// hence exact, and the second product is the only rounding, on the subnormal grid for results below 2^-126.
HKV_HD float scale2(float p, int k) {
  int k1 = k / 2, k2 = k - k1;
  return (p * exp2i(k1)) * exp2i(k2);
}

// exp(x), max error 0.939 ULP over all floats (x = 26.688921): p·2^k from exp_reduce, scaled by scale2
// (one rounding, on the subnormal grid for results below 2^-126). NaN -> the canonical NaN.
HKV_HD float exp_c(float x) {
  if (is_nan(x)) return canonical_nan();
  if (x > 88.72283935546875f) return f32_from_bits(0x7f800000u);  // overflows
  if (x < -103.972084045410f) return 0.0f;                        // below half the least subnormal
  int k;
  float p = exp_reduce(x, k);
  return scale2(p, k);
}

// log(m·2^e) + c for a positive finite x = m·2^e and a small correction c (|c| <= 2^-23): the shared core
// of log_c and log1p_c, after fdlibm's e_logf.c.
//   x = m·2^e with m in [sqrt(1/2), sqrt(2)) (subnormals scaled by 2^23 first); f = m − 1 (exact);
//   s = f/(2+f), z = s²; R = z·(Lg1 + z·(Lg2 + z·(Lg3 + z·Lg4))), Horner, each step one fma;
//   log(1+f) = f − f²/2 + s·(f²/2 + R);
//   lo = fma(s, f²/2 + R, fma(e, ln2_lo, c)), then lo = fma(−f/2, f, lo);
//   hi = e·ln2_hi + f with its rounding error t recovered exactly (Fast2Sum; e·ln2_hi is exact);
//   result = hi + (lo + t).
HKV_HD float log_core(float x, float c) {
  int e = 0;
  if (x < 1.17549435e-38f) {  // subnormal: scale into the normal range first
    x = x * 8388608.0f;       // 2^23, exact
    e = -23;
  }
  uint32_t u = f32_bits(x);
  e += int((u >> 23) & 0xff) - 127;
  float m = f32_from_bits((u & 0x007fffffu) | 0x3f800000u);  // [1, 2)
  if (m > 1.41421353816986083984f) {
    m = m * 0.5f;
    e += 1;
  }
  const float Lg1 = 0xaaaaaa.0p-24f, Lg2 = 0xccce13.0p-25f, Lg3 = 0x91e9ee.0p-25f, Lg4 = 0xf89e26.0p-26f;
  const float ln2_hi = 0.693145751953125f;         // 15 significant bits: e·ln2_hi is exact
  const float ln2_lo = 1.428606765330187045e-06f;  // ln2 − ln2_hi
  float f = m - 1.0f;
  float s = f / (2.0f + f);
  float z = s * s;
  float R = fma_rn(fma_rn(fma_rn(Lg4, z, Lg3), z, Lg2), z, Lg1) * z;
  float hf = 0.5f * f;  // exact
  float hfsq = hf * f;
  float ef = float(e);
  float lo = fma_rn(s, hfsq + R, fma_rn(ef, ln2_lo, c));
  lo = fma_rn(-hf, f, lo);
  float a = ef * ln2_hi;
  float hi = a + f;
  float t = f - (hi - a);  // |a| >= |f| or a == 0: exact
  return hi + (lo + t);
}

// Natural logarithm: log_core(x, 0), max error 0.743 ULP over all floats. log(±0) = −inf, log(inf) = inf,
// log(x < 0) and log(NaN) the canonical NaN.
HKV_HD float log_c(float x) {
  if (is_nan(x) || x < 0.0f) return canonical_nan();
  if (x == 0.0f) return f32_from_bits(0xff800000u);
  if (!is_finite(x)) return x;
  return log_core(x, 0.0f);
}

// log(1 + x), max error 0.755 ULP over all floats: u = 1 + x rounded, its rounding error d = (1 + x) − u
// recovered exactly by TwoSum, and log(1 + x) = log(u) + log(1 + d/u) = log_core(u, d/u) (the dropped
// (d/u)²/2 is below 2^-49). When u == 1 (|x| <= 2^-24) the answer is x, which keeps −0. log1p(−1) = −inf,
// x < −1 and NaN give the canonical NaN.
HKV_HD float log1p_c(float x) {
  if (is_nan(x) || x < -1.0f) return canonical_nan();
  if (x == -1.0f) return f32_from_bits(0xff800000u);
  if (!is_finite(x)) return x;
  float u = 1.0f + x;
  if (u == 1.0f) return x;
  float b = u - 1.0f;
  float d = (1.0f - (u - b)) + (x - b);  // TwoSum: exact, u + d == 1 + x
  return log_core(u, d / u);
}

// (n + nl) / (1 + e) for 0 <= e <= 1 with the rounding of 1 + e undone: d = 1 + e and its error dl
// (Fast2Sum, exact), q = n/d, the residual ρ = fma(−q, d, n) + nl (fma(−q, d, n) is exact), then
// ρ = fma(−q, dl, ρ) and the result q + ρ/d. Used by sigmoid_c and silu_c.
HKV_HD float div_one_plus(float n, float nl, float e) {
  float d = 1.0f + e;
  float dl = (1.0f - d) + e;
  float q = n / d;
  float rho = fma_rn(-q, d, n) + nl;
  rho = fma_rn(-q, dl, rho);
  return q + rho / d;
}

// sigmoid(x), max error 1.48 ULP over all floats: 1 / (1 + e^−x) for x >= 0 and e^x / (1 + e^x) for x < 0,
// one formula with e = exp(−|x|): div_one_plus(x >= 0 ? 1 : e, 0, e). The x < 0 form keeps the tiny and
// subnormal results below x = −88.7 (where e^−x overflows). NaN -> the canonical NaN.
HKV_HD float sigmoid_c(float x) {
  if (is_nan(x)) return canonical_nan();
  float e = exp_c(f32_from_bits(f32_bits(x) | 0x80000000u));  // exp(−|x|)
  return div_one_plus(x >= 0.0f ? 1.0f : e, 0.0f, e);
}

// silu(x) = x·sigmoid(x), max error 1.62 ULP over all floats.
//   x >= 0: div_one_plus(x, 0, e^−x); +inf returns +inf, NaN the canonical NaN;
//   x < 0: e^x = p·2^k (exp_reduce), n + nl = x·p exactly (fma), silu = div_one_plus(n, nl, e^x)·2^k with
//   e^x = scale2(p, k), so a subnormal e^x costs no bits (results stay normal down to x ≈ −91.9);
//   x < −120: −0 (|x·e^x| < 2^−150), which is also the limit at −inf.
HKV_HD float silu_c(float x) {
  if (is_nan(x)) return canonical_nan();
  if (x >= 0.0f) return is_finite(x) ? div_one_plus(x, 0.0f, exp_c(-x)) : x;
  if (x < -120.0f) return -0.0f;
  int k;
  float p = exp_reduce(x, k);
  float n = x * p;
  return scale2(div_one_plus(n, fma_rn(x, p, -n), scale2(p, k)), k);
}

// softplus(x) = log1p_c(exp_c(x)), max error 1.55 ULP over all floats, as torch.nn.functional.softplus
// (beta 1, threshold 20): x above 20 returns x.
HKV_HD float softplus_c(float x) { return x > 20.0f ? x : log1p_c(exp_c(x)); }

// 1/sqrt(x): a correctly rounded sqrt then a correctly rounded division (two roundings), max error 1.49 ULP
// over all floats. x < 0 and NaN give the canonical NaN; rsqrt(±0) = ±inf.
HKV_HD float rsqrt_c(float x) { return is_nan(x) || x < 0.0f ? canonical_nan() : 1.0f / sqrt_rn(x); }

// ---- storage conversions (bit-exact, round to nearest even) ---------------------------------------

// fp32 -> bf16, round to nearest even; NaN stays a quiet NaN.
HKV_HD uint16_t bf16_from_f32(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
HKV_HD float f32_from_bf16(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }

// fp32 -> IEEE binary16, round to nearest even, overflow to inf, subnormals kept.
HKV_HD uint16_t f16_from_f32(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {                                  // below 2^-14: subnormal half or zero
    // value = a as float; half subnormal unit is 2^-24. Round a/2^-24 to nearest even integer.
    if (a < 0x33000000u) return uint16_t(sign);  // < 2^-25: rounds to zero (2^-25 ties to 0)
    uint32_t mant = (a & 0x007fffffu) | 0x00800000u;
    int exp = int(a >> 23);  // biased, 102..112
    int shift = 126 - exp;   // value = mant·2^(exp−150); in units of 2^-24: mant >> shift
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q += 1;
    return uint16_t(sign | q);
  }
  // normal: rebias exponent (127 -> 15) and round the 23-bit mantissa to 10 bits.
  uint32_t r = a - 0x38000000u;  // exponent - 112
  r += 0xfffu + ((r >> 13) & 1u);
  return uint16_t(sign | (r >> 13));
}
HKV_HD float f32_from_f16(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return f32_from_bits(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    // subnormal: m · 2^-24, exact in fp32
    float v = float(m) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((e + 112) << 23) | (m << 13));
}

// fp32 -> fp8 e4m3 (OCP "fn": bias 7, no inf, 0x7f/0xff NaN, max 448), round to nearest even,
// saturating to ±448. The caller guarantees a finite input.
HKV_HD uint8_t e4m3_from_f32(float f) {
  uint32_t u = f32_bits(f);
  uint8_t sign = uint8_t((u >> 24) & 0x80u);
  float a = f32_from_bits(u & 0x7fffffffu);
  if (a >= 448.0f) return uint8_t(sign | 0x7e);  // saturate: 448 is the largest finite e4m3
  if (a < 0.015625f) {                           // below 2^-6: subnormal, unit 2^-9
    float q = round_even_small(a * 512.0f);      // exact scaling, then ties-to-even
    return uint8_t(sign | uint8_t(int(q)));      // q == 8 is the least normal, encoded as 0x08 too
  }
  uint32_t b = f32_bits(a);
  uint32_t r = b - ((127u - 7u) << 23);  // rebias
  r += 0x7ffffu + ((r >> 20) & 1u);      // round 23 -> 3 mantissa bits
  uint32_t code = r >> 20;
  if (code > 0x7e) code = 0x7e;
  return uint8_t(sign | code);
}
HKV_HD float f32_from_e4m3(uint8_t c) {
  if ((c & 0x7fu) == 0x7fu) return canonical_nan();  // S.1111.111
  uint32_t e = (c >> 3) & 0xfu, m = c & 7u;
  float v;
  if (e == 0)
    v = float(m) * 0.001953125f;  // m · 2^-9
  else
    v = f32_from_bits(((e + 120u) << 23) | (m << 20));
  return (c & 0x80) ? -v : v;
}

// The block fixed point of the MLX4 products (ARITHMETIC.md §2, top = 21) and of the q4h scores (§6, top = 13).
// A 32-element chunk of x with largest magnitude m (bits mb: sign cleared, 0 < mb < 0x7f800000) has exponent
// e = floor(log2 m), subnormals included; each element becomes the integer X = round_even(x · 2^(top−e)),
// |X| <= 2^(top+1), and the chunk's unit is 2^(e−top).
HKV_HD int xq_exponent(uint32_t mb) {
  if (mb >= 0x00800000u) return int(mb >> 23) - 127;
  int e = -150;  // subnormal: m = mb · 2^-149
  for (; mb; mb >>= 1) e++;
  return e;
}
// x · 2^(top−e) is exact (a power-of-two scaling into [−2^(top+1), 2^(top+1)], done in at most two steps of
// representable powers) unless it is below 2^-126, where it rounds, to a value that then rounds to 0.
HKV_HD int32_t xq_int(float x, int e, int top = 21) {
  int k = top - e;  // top = 21: -106 .. 170; top = 13: -114 .. 162
  if (k > 127) x = x * exp2i(127), k -= 127;
  return int32_t(round_even_small(x * exp2i(k)));
}
// 2^(e−top): subnormal below 2^-126, and 0 below 2^-149.
HKV_HD float xq_unit(int e, int top = 21) {
  const int k = e - top;
  if (k >= -126) return exp2i(k);
  return k >= -149 ? f32_from_bits(1u << (k + 149)) : 0.0f;
}

}  // namespace hkv
