// Canonical scalar functions: one definition, compiled for the host and the device.
//
// The oracle and the engine agree bit for bit only if they perform the same IEEE operations in the same
// order. libm and CUDA's math library do not agree (expf differs on ~30% of inputs), so every
// transcendental the model needs is written here with explicit fma, +, *, / and sqrt — the five
// operations IEEE 754 rounds correctly and both compilers emit as single instructions — plus integer bit
// manipulation. No call into libm happens on any exact path. docs/ARITHMETIC.md gives the formulas; the
// ULP bounds are enforced by tests/test_scalar.cpp against long double.
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
  return std::sqrt(x);  // sqrtss: IEEE correctly rounded
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

// 2^k as a float for -126 <= k <= 127 (normal range only).
HKV_HD float exp2i(int k) { return f32_from_bits(uint32_t(k + 127) << 23); }

// Round to the nearest integer, ties to even, for |x| < 2^22: adding and removing 1.5·2^23 leaves the
// integer part, rounded by the addition itself. Exact and identical on both sides.
HKV_HD float round_even_small(float x) {
  const float magic = 12582912.0f;  // 1.5 * 2^23
  return (x + magic) - magic;
}

// floor for |x| < 2^22, without libm.
HKV_HD float floor_small(float x) {
  float r = round_even_small(x);
  return r > x ? r - 1.0f : r;
}

// exp(x), max error 1 ULP over the whole float range (tests/test_scalar.cpp).
//   k = round(x·log2 e) through one fma with the rounding constant;
//   r = x − k·ln2 in two fma steps (Cody–Waite with ln2 split hi+lo), |r| <= 0.3466;
//   p = e^r by a degree-7 Taylor polynomial in Horner form, each step one fma;
//   result = p · 2^k, as two exact power-of-two multiplications so that subnormal results round once.
HKV_HD float exp_c(float x) {
  if (is_nan(x)) return x;
  if (x > 88.72283935546875f) return f32_from_bits(0x7f800000u);  // overflows
  if (x < -103.972084045410f) return 0.0f;                          // below half the least subnormal
  const float log2e = 1.44269502162933349609375f;
  const float ln2_hi = 0.693145751953125f;          // 12 significant bits: k·ln2_hi is exact
  const float ln2_lo = 1.428606765330187045e-06f;   // ln2 − ln2_hi
  const float magic = 12582912.0f;
  float kf = fma_rn(x, log2e, magic) - magic;
  float r = fma_rn(-kf, ln2_hi, x);
  r = fma_rn(-kf, ln2_lo, r);
  float p = 1.98412698412698412698e-4f;  // 1/7!
  p = fma_rn(p, r, 1.38888888888888888889e-3f);  // 1/6!
  p = fma_rn(p, r, 8.33333333333333333333e-3f);  // 1/5!
  p = fma_rn(p, r, 4.16666666666666666667e-2f);  // 1/4!
  p = fma_rn(p, r, 1.66666666666666666667e-1f);  // 1/3!
  p = fma_rn(p, r, 0.5f);
  p = fma_rn(p, r, 1.0f);
  p = fma_rn(p, r, 1.0f);
  int k = int(kf);
  // Apply 2^k in two steps: both factors are normal powers of two, so only the last product rounds.
  int k1 = k / 2, k2 = k - k1;
  return (p * exp2i(k1)) * exp2i(k2);
}

// Natural logarithm of a positive finite x. log(0) = -inf, log(x<0) = NaN, log(inf) = inf.
//   x = m·2^e with m in [sqrt(1/2), sqrt(2)); s = (m−1)/(m+1);
//   log m = 2s + 2s³/3 + … (atanh series to s^13, Horner in s², each step one fma);
//   log x = e·ln2_hi + (e·ln2_lo + log m).
HKV_HD float log_c(float x) {
  if (is_nan(x) || x < 0.0f) return f32_from_bits(0x7fc00000u);
  if (x == 0.0f) return f32_from_bits(0xff800000u);
  if (!is_finite(x)) return x;
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
  float s = (m - 1.0f) / (m + 1.0f);
  float z = s * s;
  float t = 0.0769230769230769f;     // 1/13
  t = fma_rn(t, z, 0.0909090909090909f);  // 1/11
  t = fma_rn(t, z, 0.1111111111111111f);  // 1/9
  t = fma_rn(t, z, 0.1428571428571429f);  // 1/7
  t = fma_rn(t, z, 0.2f);
  t = fma_rn(t, z, 0.3333333333333333f);
  // log m = 2s + 2s·z·t  (2s is exact)
  float two_s = 2.0f * s;
  float logm = fma_rn(two_s * z, t, two_s);
  float ef = float(e);
  const float ln2_hi = 0.693145751953125f;
  const float ln2_lo = 1.428606765330187045e-06f;
  return fma_rn(ef, ln2_hi, fma_rn(ef, ln2_lo, logm));
}

// log(1 + x) for x > -1, accurate for small x: u = 1 + x (rounded); when u == 1 the answer is x, else
// log(u)·x/(u−1) corrects the rounding of u (Goldberg's method).
HKV_HD float log1p_c(float x) {
  float u = 1.0f + x;
  if (u == 1.0f) return x;
  if (!is_finite(u)) return log_c(u);
  return log_c(u) * (x / (u - 1.0f));
}

// sigmoid(x) = 1 / (1 + exp(−x)).
HKV_HD float sigmoid_c(float x) { return 1.0f / (1.0f + exp_c(-x)); }

// silu(x) = x / (1 + exp(−x)); one division instead of x·sigmoid(x)'s two roundings.
HKV_HD float silu_c(float x) { return x / (1.0f + exp_c(-x)); }

// softplus(x) = log(1 + e^x), as torch.nn.functional.softplus (beta 1, threshold 20): x above 20.
HKV_HD float softplus_c(float x) { return x > 20.0f ? x : log1p_c(exp_c(x)); }

// 1/sqrt(x): a correctly rounded sqrt then a correctly rounded division (two roundings).
HKV_HD float rsqrt_c(float x) { return 1.0f / sqrt_rn(x); }

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
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {                                  // below 2^-14: subnormal half or zero
    // value = a as float; half subnormal unit is 2^-24. Round a/2^-24 to nearest even integer.
    if (a < 0x33000000u) return uint16_t(sign);           // < 2^-25: rounds to zero (2^-25 ties to 0)
    uint32_t mant = (a & 0x007fffffu) | 0x00800000u;
    int exp = int(a >> 23);            // biased, 102..112
    int shift = 126 - exp;             // value = mant·2^(exp−150); in units of 2^-24: mant >> shift
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
  uint32_t e = (c >> 3) & 0xfu, m = c & 7u;
  float v;
  if (e == 0) v = float(m) * 0.001953125f;  // m · 2^-9
  else v = f32_from_bits(((e + 120u) << 23) | (m << 20));
  return (c & 0x80) ? -v : v;
}

}  // namespace hkv
