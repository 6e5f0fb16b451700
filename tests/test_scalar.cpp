// The canonical scalar functions of reference/scalar.h against long double, and the storage conversions
// against independent nearest-value references.
//
// Transcendentals: every function is swept over its whole float domain by walking the ordered bit patterns
// with a fixed prime stride, plus stride-1 sweeps of the regions where errors concentrate (subnormal
// results, the reduction boundaries, the branch points) and a list of edge values. The error of a result
// is |got − ref| / ulp(ref), where ulp(ref) is the spacing of floats at the exact value: 2^(e−23) for a
// normal ref of exponent e and 2^−149 on the subnormal grid, so underflowing results are counted in
// subnormal ULPs. An infinite result of a finite ref is counted as ±2^128 (the next float past FLT_MAX).
// Each function's bound, enforced below with its reason, is the maximum over all 2^32 inputs (measured once
// offline, exhaustively, against the same references) rounded up; that worst input is among the test's edge
// points, so the sampled maximum here reaches it.
//
// No libm on the exact paths: scalar.h's only calls into the standard library are std::fma (fma_rn) and
// std::sqrt (sqrt_rn), both correctly rounded IEEE operations; expl/logl/log1pl/sqrtl here are the test's
// long double references only.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cuda/attention/exp_flat.h"
#include "reference/scalar.h"

namespace {

using hkv::f32_bits;
using hkv::f32_from_bits;

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kMinSub = f32_from_bits(1);             // 2^-149
const float kMaxSub = f32_from_bits(0x007fffffu);   // 2^-126 - 2^-149
const float kMinNorm = f32_from_bits(0x00800000u);  // 2^-126
const float kMax = f32_from_bits(0x7f7fffffu);

// Floats in increasing order as integers: -inf < ... < -0 = +0 < ... < +inf.
int64_t ordinal(float x) {
  uint32_t u = f32_bits(x);
  return (u & 0x80000000u) ? -int64_t(u & 0x7fffffffu) : int64_t(u);
}
std::string hex(uint32_t u) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", u);
  return buf;
}
float from_ordinal(int64_t o) { return o < 0 ? f32_from_bits(uint32_t(-o) | 0x80000000u) : f32_from_bits(uint32_t(o)); }

// Spacing of floats at the exact value r (subnormal grid below 2^-126; 2^104 at and above 2^128).
long double ulp_at(long double r) {
  static_assert(std::numeric_limits<long double>::digits == 64, "x87 80-bit long double expected");
  long double a = fabsl(r);
  if (a < 0x1p-126L) return 0x1p-149L;
  uint16_t se;  // the x87 format's sign and 15-bit exponent (bias 16383) follow the 64-bit significand
  std::memcpy(&se, reinterpret_cast<const char*>(&a) + 8, 2);
  int e = std::min(int(se & 0x7fff) - 16383, 127);
  long double u = 1.0L;
  std::memcpy(reinterpret_cast<char*>(&u) + 8, &(se = uint16_t(e - 23 + 16383)), 2);
  return u;
}

// Error of got against the exact ref, in ULPs of ref. NaN must match NaN, an infinite ref must be met exactly.
double ulp_error(float got, long double ref) {
  if (std::isnan(ref)) return std::isnan(got) ? 0.0 : 1e30;
  if (std::isnan(got)) return 1e30;
  if (std::isinf(ref)) return (std::isinf(got) && std::signbit(got) == std::signbit(ref)) ? 0.0 : 1e30;
  long double g = got;
  const long double overflow = 0x1p128L - 0x1p103L;  // round-to-nearest sends |ref| >= this to inf
  if (std::isinf(got) && fabsl(ref) >= overflow && std::signbit(got) == std::signbit(ref)) return 0.0;
  if (std::isinf(got)) g = std::signbit(got) ? -0x1p128L : 0x1p128L;
  return double(fabsl(g - ref) / ulp_at(ref));
}

struct Stat {
  double max_ulp = 0;
  float worst = 0;
  float got = 0;
  long double ref = 0;
  int64_t n = 0;
  void add(double e, float x, float g, long double r) {
    ++n;
    if (e > max_ulp || (e == max_ulp && e > 0 && ordinal(x) < ordinal(worst))) {
      max_ulp = e;
      worst = x;
      got = g;
      ref = r;
    }
  }
  void merge(const Stat& o) {
    n += o.n;
    if (o.max_ulp > max_ulp || (o.max_ulp == max_ulp && o.max_ulp > 0 && ordinal(o.worst) < ordinal(worst))) {
      max_ulp = o.max_ulp;
      worst = o.worst;
      got = o.got;
      ref = o.ref;
    }
  }
};

// Every float of [a, b] whose ordinal is a multiple of stride away from a, plus b itself.
template <class F, class R>
void sweep(Stat& st, float a, float b, int64_t stride, F f, R ref) {
  const int64_t lo = ordinal(a), hi = ordinal(b);
  const int64_t count = (hi - lo) / stride + 1;
#pragma omp parallel
  {
    Stat local;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < count; ++i) {
      float x = from_ordinal(lo + i * stride);
      float g = f(x);
      long double r = ref(x);
      local.add(ulp_error(g, r), x, g, r);
    }
    {
      float g = f(b);
      long double r = ref(b);
      local.add(ulp_error(g, r), b, g, r);
    }
#pragma omp critical
    st.merge(local);
  }
}

template <class F, class R>
void points(Stat& st, std::initializer_list<float> xs, F f, R ref) {
  for (float x : xs) {
    float g = f(x);
    long double r = ref(x);
    double e = ulp_error(g, r);
    INFO("x = " << x << " (" << hex(f32_bits(x)) << ") got " << g << " ref " << double(r));
    CHECK(e < 1e30);
    st.add(e, x, g, r);
  }
}

void report(const char* name, const Stat& st, double bound) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%-10s max %.3f ULP at x = %.9g (0x%08x): got %.9g, ref %.12Lg; %lld points; bound %.2f", name,
                st.max_ulp, double(st.worst), f32_bits(st.worst), double(st.got), st.ref, (long long)st.n, bound);
  MESSAGE(buf);
  CHECK_MESSAGE(st.max_ulp <= bound, buf);
}

const std::initializer_list<float> kEdges = {0.0f, -0.0f, kMinSub, -kMinSub, kMaxSub, -kMaxSub, kMinNorm, -kMinNorm,
                                             kMax, -kMax, kInf,    -kInf,    1.0f,    -1.0f,    0.5f,     -0.5f,
                                             2.0f, -2.0f, 1e-7f,   -1e-7f,   100.0f,  -100.0f,  1e30f,    -1e30f};

// Long double references.
long double ref_exp(float x) { return expl(x); }
long double ref_log(float x) { return x == 0 ? -HUGE_VALL : x < 0 ? NAN : logl(x); }
long double ref_log1p(float x) { return x == -1 ? -HUGE_VALL : x < -1 ? NAN : log1pl(x); }
long double ref_sigmoid(float x) {
  if (std::isnan(x)) return x;
  long double X = x;
  if (X >= 0) return 1.0L / (1.0L + expl(-X));
  long double e = expl(X);
  return e / (1.0L + e);
}
long double ref_silu(float x) {
  if (std::isinf(x)) return x > 0 ? HUGE_VALL : -0.0L;  // the limit of x·e^x at -inf is -0
  return (long double)x * ref_sigmoid(x);
}
long double ref_softplus(float x) {
  long double X = x;
  if (std::isinf(x)) return x > 0 ? HUGE_VALL : 0.0L;
  return X > 0 ? X + log1pl(expl(-X)) : log1pl(expl(X));
}
long double ref_rsqrt(float x) { return x == 0 ? (std::signbit(x) ? -HUGE_VALL : HUGE_VALL) : 1.0L / sqrtl(x); }

const int64_t kStride = 97;    // the dense sweeps: every 97th float
const int64_t kCoarse = 9973;  // outside the interesting range

}  // namespace

TEST_CASE("scalar: exp_c against expl") {
  auto f = [](float x) { return hkv::exp_c(x); };
  Stat st;
  sweep(st, -104.0f, 89.0f, kStride, f, ref_exp);  // every result that is neither 0 nor inf
  sweep(st, -kInf, -104.0f, kCoarse, f, ref_exp);
  sweep(st, 89.0f, kInf, kCoarse, f, ref_exp);
  sweep(st, -104.5f, -87.0f, 1, f, ref_exp);  // subnormal results and the underflow threshold
  sweep(st, 88.0f, 89.0f, 1, f, ref_exp);     // overflow threshold
  sweep(st, 0.3f, 0.4f, 3, f, ref_exp);       // the reduction boundaries at ±ln2/2
  sweep(st, -0.4f, -0.3f, 3, f, ref_exp);
  points(st, kEdges, f, ref_exp);
  points(st, {26.688921f}, f, ref_exp);  // the worst input over all floats: 0.9386 ULP
  points(st,
         {88.72283172607421875f, 88.72283935546875f, 88.7228469848632812f, -103.972076416015625f, -103.972084045410156f,
          -103.97209167480469f, -87.3365478515625f, -87.33654022216797f},
         f, ref_exp);
  CHECK(std::isnan(hkv::exp_c(kNaN)));
  CHECK(hkv::exp_c(-kInf) == 0.0f);
  CHECK(hkv::exp_c(kInf) == kInf);
  CHECK(hkv::exp_c(-0.0f) == 1.0f);
  report("exp_c", st, 0.94);  // one rounding of p·2^k plus ~0.4 ULP from the reduction and the polynomial
}

// exp_c_flat is the engine's exp_c for the attention's weights pass: equal bits, compared as bits. Every float was
// compared once (docs/RESULTS.md §5); here every 1,021st bit pattern, every float within 4,096 steps of each bound
// exp_c and exp_c_flat test or clamp at, and the special values.
TEST_CASE("scalar: exp_c_flat has exp_c's bits") {
  using hkv::f32_bits;
  int64_t n = 0, differ = 0;
  uint32_t first = 0;
  auto same = [&](uint32_t b) {
    float x;
    std::memcpy(&x, &b, 4);
    n++;
    if (f32_bits(hkv::cuda::exp_c_flat(x)) != f32_bits(hkv::exp_c(x)) && differ++ == 0) first = b;
  };
  for (uint64_t b = 0; b < (1ull << 32); b += 1021) same(uint32_t(b));
  for (const float bound : {-103.972084045410f, 88.72283935546875f, -104.0f, 89.0f, 0.0f, -0.0f}) {
    const uint32_t c = f32_bits(bound);
    for (int64_t d = -4096; d <= 4096; d++) same(uint32_t(int64_t(c) + d));
  }
  for (const float x : {kInf, -kInf, kNaN, -kNaN, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                        std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min()})
    same(f32_bits(x));
  same(0x7f800001u), same(0xffc00001u);  // NaNs with other payloads
  INFO("first differing input: " << hex(first));
  CHECK(differ == 0);
  CHECK(n > 4000000);
}

TEST_CASE("scalar: log_c against logl") {
  auto f = [](float x) { return hkv::log_c(x); };
  Stat st;
  sweep(st, 0.0f, kInf, kStride, f, ref_log);
  sweep(st, 0.70f, 1.42f, 1, f, ref_log);         // e = 0, the reduction boundary at sqrt(2), results near 0
  sweep(st, kMinSub, kMinNorm, 101, f, ref_log);  // subnormal inputs
  sweep(st, -kInf, -0.0f, kCoarse, f, ref_log);   // NaN
  points(st, kEdges, f, ref_log);
  points(st, {0.706435263f}, f, ref_log);  // the worst input over all floats: 0.7428 ULP
  CHECK(std::isnan(hkv::log_c(kNaN)));
  CHECK(std::isnan(hkv::log_c(-1.0f)));
  CHECK(std::isnan(hkv::log_c(-kInf)));
  CHECK(hkv::log_c(0.0f) == -kInf);
  CHECK(hkv::log_c(-0.0f) == -kInf);
  CHECK(hkv::log_c(kInf) == kInf);
  CHECK(hkv::log_c(1.0f) == 0.0f);
  report("log_c", st, 0.75);  // the last addition hi + (lo + t) plus ~0.25 ULP in lo
}

TEST_CASE("scalar: log1p_c against log1pl") {
  auto f = [](float x) { return hkv::log1p_c(x); };
  Stat st;
  sweep(st, -1.0f, 1e6f, kStride, f, ref_log1p);
  sweep(st, 1e6f, kInf, kCoarse, f, ref_log1p);
  sweep(st, -kInf, -1.0f, kCoarse, f, ref_log1p);  // NaN below -1
  sweep(st, 0x1p-12f, 0.5f, 31, f, ref_log1p);     // where u = 1 + x rounds and d/u matters most
  sweep(st, -0.3f, -0x1p-12f, 31, f, ref_log1p);
  sweep(st, -1.0f, -0.99f, 1, f, ref_log1p);  // close to the pole
  points(st, kEdges, f, ref_log1p);
  points(st, {0.413529485f}, f, ref_log1p);  // the worst input over all floats: 0.7550 ULP
  points(st,
         {-1.0f, -1.0f + 0x1p-24f, -1.0f + 0x1p-23f, 5.9604645e-8f, -5.9604645e-8f, 1.1920929e-7f, -2.9802322e-8f,
          16777216.0f},
         f, ref_log1p);
  CHECK(std::isnan(hkv::log1p_c(kNaN)));
  CHECK(std::isnan(hkv::log1p_c(-2.0f)));
  CHECK(hkv::log1p_c(-1.0f) == -kInf);
  CHECK(hkv::log1p_c(kInf) == kInf);
  CHECK(f32_bits(hkv::log1p_c(-0.0f)) == f32_bits(-0.0f));
  report("log1p_c", st, 0.76);  // log_core on u = 1 + x with the exact correction d/u: as log_c
}

TEST_CASE("scalar: sigmoid_c against long double") {
  auto f = [](float x) { return hkv::sigmoid_c(x); };
  Stat st;
  sweep(st, -105.0f, 105.0f, kStride, f, ref_sigmoid);
  sweep(st, -kInf, -105.0f, kCoarse, f, ref_sigmoid);
  sweep(st, 105.0f, kInf, kCoarse, f, ref_sigmoid);
  sweep(st, -105.0f, -86.0f, 1, f, ref_sigmoid);  // subnormal and smallest normal results
  sweep(st, -1.0f, -0.01f, 13, f, ref_sigmoid);
  sweep(st, 0.01f, 1.0f, 13, f, ref_sigmoid);
  points(st, kEdges, f, ref_sigmoid);
  points(st, {-4.8464551f}, f, ref_sigmoid);  // the worst input over all floats: 1.4797 ULP
  points(st, {-88.7f, -88.8f, -100.0f, -103.9f, -104.0f, 16.0f, 17.0f, 88.0f, 89.0f, 1e4f}, f, ref_sigmoid);
  CHECK(std::isnan(hkv::sigmoid_c(kNaN)));
  CHECK(hkv::sigmoid_c(kInf) == 1.0f);
  CHECK(hkv::sigmoid_c(-kInf) == 0.0f);
  CHECK(hkv::sigmoid_c(0.0f) == 0.5f);
  report("sigmoid_c", st, 1.5);  // the error of e = exp(-|x|) times 1/(1 + e) <= 1, then the corrected division
}

TEST_CASE("scalar: silu_c against long double") {
  auto f = [](float x) { return hkv::silu_c(x); };
  Stat st;
  sweep(st, -115.0f, 40.0f, kStride, f, ref_silu);
  sweep(st, -kInf, -115.0f, kCoarse, f, ref_silu);
  sweep(st, 40.0f, kInf, kCoarse, f, ref_silu);
  sweep(st, -115.0f, -85.0f, 1, f, ref_silu);  // subnormal results
  sweep(st, -1.0f, -0.01f, 13, f, ref_silu);
  sweep(st, 0.01f, 1.0f, 13, f, ref_silu);
  points(st, kEdges, f, ref_silu);
  points(st, {-48.2610855f}, f, ref_silu);  // the worst input over all floats: 1.6205 ULP
  points(st, {-20.0f, -88.7f, -88.8f, -100.0f, -104.0f, -110.0f, 16.0f, 17.0f, 88.0f, 89.0f, 1e4f}, f, ref_silu);
  CHECK(std::isnan(hkv::silu_c(kNaN)));
  CHECK(hkv::silu_c(kInf) == kInf);
  CHECK(hkv::silu_c(-kInf) == 0.0f);
  report("silu_c", st, 1.63);  // as sigmoid, plus the error of p (before scaling) in x·p
}

TEST_CASE("scalar: softplus_c against long double") {
  auto f = [](float x) { return hkv::softplus_c(x); };
  Stat st;
  sweep(st, -105.0f, 40.0f, kStride, f, ref_softplus);
  sweep(st, -kInf, -105.0f, kCoarse, f, ref_softplus);
  sweep(st, 40.0f, kInf, kCoarse, f, ref_softplus);
  sweep(st, 19.0f, 21.0f, 1, f, ref_softplus);     // the threshold at 20
  sweep(st, -105.0f, -86.0f, 1, f, ref_softplus);  // subnormal results
  points(st, kEdges, f, ref_softplus);
  points(st, {-1.27307248f}, f, ref_softplus);  // the worst input over all floats: 1.5531 ULP
  points(st, {19.999998f, 20.0f, 20.000002f, -20.0f, -88.0f, -100.0f, -103.9f, -104.0f}, f, ref_softplus);
  CHECK(std::isnan(hkv::softplus_c(kNaN)));
  CHECK(hkv::softplus_c(kInf) == kInf);
  CHECK(hkv::softplus_c(-kInf) == 0.0f);
  report("softplus_c", st, 1.56);  // the error of e = exp(x) times e/((1 + e)·log1p(e)) <= 1, plus log1p
}

TEST_CASE("scalar: rsqrt_c against 1/sqrtl") {
  auto f = [](float x) { return hkv::rsqrt_c(x); };
  Stat st;
  sweep(st, 0.0f, kInf, kStride, f, ref_rsqrt);
  sweep(st, 1.0f, 4.0f, 1, f, ref_rsqrt);  // one full period of the mantissa pattern, exhaustively
  sweep(st, -kInf, -kMinSub, kCoarse, f, ref_rsqrt);
  points(st, kEdges, f, ref_rsqrt);
  points(st, {3.10054965e-33f}, f, ref_rsqrt);  // the worst input over all floats: 1.4903 ULP
  CHECK(std::isnan(hkv::rsqrt_c(kNaN)));
  CHECK(std::isnan(hkv::rsqrt_c(-1.0f)));
  CHECK(hkv::rsqrt_c(0.0f) == kInf);
  CHECK(hkv::rsqrt_c(-0.0f) == -kInf);
  CHECK(hkv::rsqrt_c(kInf) == 0.0f);
  // Two correctly rounded operations: sqrt's 0.5 ULP is relative to its own binade and can be up to 1 ULP
  // of the reciprocal's, plus the division's 0.5.
  report("rsqrt_c", st, 1.5);
}

TEST_CASE("scalar: NaN results are the canonical NaN on every path") {
  // Hardware NaN payloads differ between x86 and CUDA, so the functions return 0x7fc00000 themselves.
  const uint32_t canonical = 0x7fc00000u;
  for (uint32_t nb : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7fa5a5a5u}) {
    const float nan = f32_from_bits(nb);
    INFO("input " << hex(nb));
    CHECK(f32_bits(hkv::exp_c(nan)) == canonical);
    CHECK(f32_bits(hkv::log_c(nan)) == canonical);
    CHECK(f32_bits(hkv::log1p_c(nan)) == canonical);
    CHECK(f32_bits(hkv::sigmoid_c(nan)) == canonical);
    CHECK(f32_bits(hkv::silu_c(nan)) == canonical);
    CHECK(f32_bits(hkv::softplus_c(nan)) == canonical);
    CHECK(f32_bits(hkv::rsqrt_c(nan)) == canonical);
  }
  for (float x : {-kMinSub, -1.0f, -kMax, -kInf}) {
    CHECK(f32_bits(hkv::log_c(x)) == canonical);
    CHECK(f32_bits(hkv::rsqrt_c(x)) == canonical);
  }
  for (float x : {-1.0000001f, -2.0f, -kInf}) CHECK(f32_bits(hkv::log1p_c(x)) == canonical);
  CHECK(f32_bits(hkv::f32_from_e4m3(0x7f)) == canonical);
  CHECK(f32_bits(hkv::f32_from_e4m3(0xff)) == canonical);
}

// ---- storage conversions ---------------------------------------------------------------------------

namespace {

// Round-to-nearest-even by search: values[c] is the value of the non-negative code c, increasing in c; the
// last entry is the code that everything at or beyond it maps to (inf, counted as the next binade's first
// value so that IEEE overflow rounding falls out, or e4m3's saturating 448). Ties go to the even code,
// which for these formats is the even mantissa.
struct NearestTable {
  std::vector<double> values;
  uint32_t encode(float x) const {  // |x|, finite or inf
    double a = std::fabs(double(x));
    if (a >= values.back()) return uint32_t(values.size() - 1);
    size_t c = size_t(std::upper_bound(values.begin(), values.end(), a) - values.begin()) - 1;
    double below = a - values[c], above = values[c + 1] - a;  // exact in double
    if (below < above) return uint32_t(c);
    if (above < below) return uint32_t(c + 1);
    return (c & 1) ? uint32_t(c + 1) : uint32_t(c);
  }
};

// Independent decoders: sign, biased exponent and mantissa fields to a value with ldexp.
double decode_ieee(uint32_t code, int mant_bits, int exp_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const uint32_t m = code & ((1u << mant_bits) - 1), e = (code >> mant_bits) & ((1u << exp_bits) - 1);
  double v = e == 0 ? std::ldexp(double(m), 1 - bias - mant_bits)
                    : std::ldexp(double(m + (1u << mant_bits)), int(e) - bias - mant_bits);
  return (code >> (mant_bits + exp_bits)) & 1 ? -v : v;
}

// Every float with ordinal a multiple of stride, then the codes' values, midpoints and their neighbours.
template <class Enc>
void check_encoder(const char* name, const NearestTable& t, Enc enc, uint32_t sign_bit, int64_t stride) {
  int64_t bad = 0;
  float first_bad = 0;
  auto check = [&](float x, int64_t& nbad, float& fbad) {
    uint32_t want = t.encode(x) | (std::signbit(x) ? sign_bit : 0u);
    if (enc(x) != want && nbad++ == 0) fbad = x;
  };
  const int64_t lo = ordinal(-kInf), count = (ordinal(kInf) - lo) / stride + 1;
#pragma omp parallel
  {
    int64_t nbad = 0;
    float fbad = 0;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < count; ++i) check(from_ordinal(lo + i * stride), nbad, fbad);
#pragma omp critical
    {
      if (nbad && !bad) first_bad = fbad;
      bad += nbad;
    }
  }
  for (size_t c = 0; c + 1 < t.values.size(); ++c) {
    const float v = float(t.values[c]), mid = float((t.values[c] + t.values[c + 1]) / 2);  // both exact
    REQUIRE(double(mid) == (t.values[c] + t.values[c + 1]) / 2);
    for (float y : {v, mid}) {
      for (float z : {y, std::nextafter(y, 0.0f), std::nextafter(y, kInf), -y, -std::nextafter(y, kInf)}) {
        check(z, bad, first_bad);
      }
    }
  }
  INFO(std::string(name) << ": first mismatch at x = " << first_bad << " (" << hex(f32_bits(first_bad)) << ")");
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("scalar: f16 decode and encode are exact") {
  for (uint32_t c = 0; c < 65536; ++c) {
    float got = hkv::f32_from_f16(uint16_t(c));
    INFO("code " << hex(c));
    if ((c & 0x7c00u) == 0x7c00u && (c & 0x3ffu)) {
      CHECK(std::isnan(got));
      CHECK(std::signbit(got) == bool(c & 0x8000u));
      CHECK(((f32_bits(got) >> 13) & 0x3ffu) == (c & 0x3ffu));  // payload kept
    } else if ((c & 0x7fffu) == 0x7c00u) {
      CHECK(got == ((c & 0x8000u) ? -kInf : kInf));
    } else {
      double want = decode_ieee(c, 10, 5);
      CHECK(double(got) == want);
      CHECK(std::signbit(got) == bool(c & 0x8000u));
    }
  }
  NearestTable t;
  for (uint32_t c = 0; c < 0x7c00u; ++c) t.values.push_back(decode_ieee(c, 10, 5));
  t.values.push_back(65536.0);  // inf: where the next binade would begin, so ties at 65520 go to inf
  check_encoder(
      "f16", t, [](float x) { return uint32_t(hkv::f16_from_f32(x)); }, 0x8000u, 257);
  CHECK(hkv::f16_from_f32(65504.0f) == 0x7bffu);
  CHECK(hkv::f16_from_f32(65519.996f) == 0x7bffu);
  CHECK(hkv::f16_from_f32(65520.0f) == 0x7c00u);
  CHECK(hkv::f16_from_f32(-65520.0f) == 0xfc00u);
  CHECK(hkv::f16_from_f32(kInf) == 0x7c00u);
  CHECK(hkv::f16_from_f32(0x1p-25f) == 0x0000u);    // half the least subnormal: tie to even zero
  CHECK(hkv::f16_from_f32(0x1.8p-24f) == 0x0002u);  // 1.5 subnormal units: tie to even 2
  CHECK(hkv::f16_from_f32(-0.0f) == 0x8000u);
  for (float nan : {kNaN, -kNaN, f32_from_bits(0x7f800001u), f32_from_bits(0xffbfffffu)}) {
    uint16_t h = hkv::f16_from_f32(nan);
    CHECK((h & 0x7c00u) == 0x7c00u);
    CHECK((h & 0x3ffu) != 0);
    CHECK(bool(h & 0x8000u) == std::signbit(nan));
  }
}

TEST_CASE("scalar: bf16 decode and encode are exact") {
  for (uint32_t c = 0; c < 65536; ++c) {
    float got = hkv::f32_from_bf16(uint16_t(c));
    INFO("code " << hex(c));
    if ((c & 0x7f80u) == 0x7f80u) {
      CHECK(f32_bits(got) == c << 16);  // inf and NaN keep their bits
    } else {
      CHECK(double(got) == decode_ieee(c, 7, 8));
      CHECK(std::signbit(got) == bool(c & 0x8000u));
    }
  }
  NearestTable t;
  for (uint32_t c = 0; c < 0x7f80u; ++c) t.values.push_back(decode_ieee(c, 7, 8));
  t.values.push_back(0x1p128);  // inf
  check_encoder(
      "bf16", t, [](float x) { return uint32_t(hkv::bf16_from_f32(x)); }, 0x8000u, 257);
  CHECK(hkv::bf16_from_f32(kMax) == 0x7f80u);  // FLT_MAX is above the last midpoint: inf
  CHECK(hkv::bf16_from_f32(-kInf) == 0xff80u);
  for (float nan : {kNaN, -kNaN, f32_from_bits(0x7f800001u), f32_from_bits(0xff800001u)}) {
    uint16_t h = hkv::bf16_from_f32(nan);
    CHECK((h & 0x7f80u) == 0x7f80u);
    CHECK((h & 0x7fu) != 0);
    CHECK(bool(h & 0x8000u) == std::signbit(nan));
  }
}

TEST_CASE("scalar: e4m3 decode and encode are exact") {
  for (uint32_t c = 0; c < 256; ++c) {
    float got = hkv::f32_from_e4m3(uint8_t(c));
    INFO("code " << hex(c));
    if ((c & 0x7fu) == 0x7fu) {
      CHECK(std::isnan(got));  // OCP e4m3fn: S.1111.111 is NaN, there is no inf
    } else {
      CHECK(double(got) == decode_ieee(c, 3, 4));
      CHECK(std::signbit(got) == bool(c & 0x80u));
    }
  }
  CHECK(hkv::f32_from_e4m3(0x7e) == 448.0f);
  CHECK(hkv::f32_from_e4m3(0x01) == 0x1p-9f);
  NearestTable t;
  for (uint32_t c = 0; c <= 0x7eu; ++c) t.values.push_back(decode_ieee(c, 3, 4));  // saturates at 448
  check_encoder(
      "e4m3", t, [](float x) { return uint32_t(hkv::e4m3_from_f32(x)); }, 0x80u, 257);
  CHECK(hkv::e4m3_from_f32(448.0f) == 0x7eu);
  CHECK(hkv::e4m3_from_f32(464.0f) == 0x7eu);
  CHECK(hkv::e4m3_from_f32(1e30f) == 0x7eu);
  CHECK(hkv::e4m3_from_f32(-1e30f) == 0xfeu);
  CHECK(hkv::e4m3_from_f32(kInf) == 0x7eu);
  CHECK(hkv::e4m3_from_f32(-kInf) == 0xfeu);
  CHECK(hkv::e4m3_from_f32(0x1p-10f) == 0x00u);   // half the least subnormal: tie to even zero
  CHECK(hkv::e4m3_from_f32(0x1.8p-9f) == 0x02u);  // 1.5 units: tie to even 2
  CHECK(hkv::e4m3_from_f32(0x1.fp-7f) == 0x08u);  // 7.75 units rounds up to the least normal, 2^-6
  CHECK(hkv::e4m3_from_f32(-0.0f) == 0x80u);
}

TEST_CASE("scalar: round_even_small and floor_small") {
  // Every float of [-2^22, 2^22] with ordinal a multiple of 97, and every half-integer in [-2^12, 2^12]
  // with its neighbours, against nearbyint (ties to even in the default rounding mode) and floor.
  const int64_t lo = ordinal(-0x1p22f), count = (ordinal(0x1p22f) - lo) / kStride + 1;
  int64_t bad_round = 0, bad_floor = 0;
#pragma omp parallel for reduction(+ : bad_round, bad_floor)
  for (int64_t i = 0; i < count; ++i) {
    float x = from_ordinal(lo + i * kStride);
    bad_round += hkv::round_even_small(x) != std::nearbyint(x);
    bad_floor += hkv::floor_small(x) != std::floor(x);
  }
  for (int i = -8192; i <= 8192; ++i) {
    float h = float(i) * 0.5f;
    for (float x : {h, std::nextafter(h, -kInf), std::nextafter(h, kInf), 0x1p22f, -0x1p22f,
                    std::nextafter(0x1p22f, 0.0f), std::nextafter(-0x1p22f, 0.0f)}) {
      bad_round += hkv::round_even_small(x) != std::nearbyint(x);
      bad_floor += hkv::floor_small(x) != std::floor(x);
    }
  }
  CHECK(bad_round == 0);
  CHECK(bad_floor == 0);
  CHECK(hkv::round_even_small(2.5f) == 2.0f);
  CHECK(hkv::round_even_small(-2.5f) == -2.0f);
  CHECK(hkv::round_even_small(3.5f) == 4.0f);
  CHECK(hkv::floor_small(-0.5f) == -1.0f);
  CHECK(hkv::floor_small(-3.0f) == -3.0f);
}
