// The canonical matrix-vector product (docs/ARITHMETIC.md §2): an independent loop written from the
// document gives the same bytes, the order is really the one written (a plain sequential sum differs),
// and the result does not depend on the thread count.
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "reference/scalar.h"
#include "reference/synthetic.h"
#include "reference/weights.h"

using namespace hkv;

namespace {

// Random test matrices built with the synthetic generator (values n·2^-e, exact in every format).
struct TestMatrix {
  Matrix m;
  std::vector<uint16_t> h;   // bf16/f16 storage
  std::vector<float> f;      // f32 storage
  std::vector<uint32_t> q;   // mlx4 words
  std::vector<uint16_t> sb;  // mlx4 scales then biases
};

std::unique_ptr<TestMatrix> make(WType t, int64_t rows, int64_t cols, uint64_t seed) {
  auto tm = std::make_unique<TestMatrix>();
  Matrix& m = tm->m;
  m.type = t;
  m.rows = rows;
  m.cols = cols;
  if (t == WType::MLX4) {
    m.group = 64;
    tm->q.resize(size_t(rows * cols / 8));
    for (size_t i = 0; i < tm->q.size(); i++) tm->q[i] = synth_mlx4_word(seed, 1, i);
    const size_t ng = size_t(rows * cols / 64);
    tm->sb.resize(2 * ng);
    for (size_t g = 0; g < ng; g++) {
      tm->sb[g] = synth_mlx4_scale(seed, 2, g, 7);
      tm->sb[ng + g] = synth_bf16(seed, 3, g, 5);
    }
    m.data = tm->q.data();
    m.scales = tm->sb.data();
    m.biases = tm->sb.data() + ng;
  } else if (t == WType::F32) {
    tm->f.resize(size_t(rows * cols));
    for (size_t i = 0; i < tm->f.size(); i++)
      tm->f[i] = float(synth_int(seed, 4, i)) * 0.0078125f + 0.001f * float(i % 7);
    m.data = tm->f.data();
  } else {
    tm->h.resize(size_t(rows * cols));
    for (size_t i = 0; i < tm->h.size(); i++)
      tm->h[i] = t == WType::BF16 ? synth_bf16(seed, 5, i, 8) : f16_from_f32(f32_from_bf16(synth_bf16(seed, 5, i, 8)));
    m.data = tm->h.data();
  }
  return tm;
}

std::vector<float> make_x(int64_t n, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(n));
  // values with many significant bits, so that the order of additions shows in the result
  for (int64_t i = 0; i < n; i++) x[size_t(i)] = float(synth_int(seed, 9, uint64_t(i))) / 3.0f;
  return x;
}

// The order, written again from ARITHMETIC.md without sharing code: lane l sums its chunks
// l, l+32, l+64, ... in index order; then pairs (l, l+16), then (l, l+8), ... down to lane 0.
float independent_dot(const Matrix& W, int64_t r, const std::vector<float>& x) {
  const int width = W.type == WType::F32 ? 4 : W.type == WType::MLX4 ? 32 : 8;
  const int64_t nchunks = (W.cols + width - 1) / width;
  float lanes[32];
  for (int l = 0; l < 32; l++) {
    float acc = 0.0f;
    for (int64_t c = l; c < nchunks; c += 32) {
      if (W.type == WType::MLX4) {
        // the chunk in block fixed point: e from the largest magnitude, X_j = x_j·2^(21−e) rounded to even
        float xs = 0.0f, m = 0.0f;
        for (int j = 0; j < 32; j++) xs = xs + x[size_t(c * 32 + j)], m = std::max(m, std::fabs(x[size_t(c * 32 + j)]));
        const int e = std::ilogb(m);
        int64_t T = 0;
        for (int j = 0; j < 32; j++) {
          int64_t col = c * 32 + j;
          uint32_t word = static_cast<const uint32_t*>(W.data)[r * W.cols / 8 + col / 8];
          T += int64_t((word >> (4 * (col % 8))) & 15u) * std::llrint(std::ldexp(double(x[size_t(col)]), 21 - e));
        }
        const float qx = float(T) * std::ldexp(1.0f, e - 21);
        int64_t g = r * (W.cols / W.group) + c * 32 / W.group;
        acc = std::fma(f32_from_bf16(W.scales[g]), qx, std::fma(f32_from_bf16(W.biases[g]), xs, acc));
      } else {
        for (int64_t j = c * width; j < std::min(W.cols, c * width + width); j++)
          acc = std::fma(W.at(r, j), x[size_t(j)], acc);
      }
    }
    lanes[l] = acc;
  }
  for (int half = 16; half > 0; half >>= 1)
    for (int l = 0; l < half; l++) lanes[l] += lanes[l + half];
  return lanes[0];
}

}  // namespace

TEST_CASE("the canonical product equals an independent loop of the written order, byte for byte") {
  for (WType t : {WType::F32, WType::BF16, WType::F16, WType::MLX4})
    for (int64_t cols : {64, 256, 320, 1000, 5120}) {
      if (t == WType::MLX4 && cols % 64) continue;
      if (t != WType::MLX4 && t != WType::F32 && cols % 8) continue;
      CAPTURE(wtype_name(t));
      CAPTURE(cols);
      auto tm = make(t, 37, cols, uint64_t(cols));
      std::vector<float> x = make_x(cols, 3), y(37);
      matvec(tm->m, x.data(), y.data());
      int differs_from_sequential = 0;
      for (int64_t r = 0; r < 37; r++) {
        float want = independent_dot(tm->m, r, x);
        CHECK(std::memcmp(&y[size_t(r)], &want, 4) == 0);
        float seqf = 0.0f;
        for (int64_t j = 0; j < cols; j++) seqf = std::fma(tm->m.at(r, j), x[size_t(j)], seqf);
        differs_from_sequential += std::memcmp(&y[size_t(r)], &seqf, 4) != 0;
      }
      // the order matters: a plain left-to-right sum gives other bytes on most rows of a wide product
      if (cols >= 1000 && t != WType::MLX4) CHECK(differs_from_sequential > 5);
    }
}

TEST_CASE("the MLX4 product's block fixed point: integers in range, half a unit of error, zeros, non-finite") {
  // chunks at every scale, subnormal ones included, with elements far below the chunk's largest
  for (float scale : {1e-41f, 1e-38f, 3e-20f, 1.0f, 7.5e5f, 1e30f}) {
    std::vector<float> x = make_x(64, 17);
    for (float& v : x) v = v * scale;
    x[5] = x[5] * 1e-12f;
    x[40] = 0.0f;
    const XChunks xc = x_chunks(x.data(), 64);
    for (int c = 0; c < 2; c++) {
      CAPTURE(scale);
      const double unit = xc.unit[size_t(c)];
      for (int j = 32 * c; j < 32 * c + 32; j++) {
        CHECK(std::abs(int64_t(xc.X[size_t(j)])) <= (int64_t(1) << 22));
        if (unit > 0) CHECK(std::fabs(double(xc.X[size_t(j)]) * unit - double(x[size_t(j)])) <= 0.5 * unit);
      }
    }
  }
  // the largest integers: every element just under a power of two rounds to 2^22, and with every code 15 the
  // chunk's sum is 15·32·2^22, which still fits an int32; the product is then within 2^-22 of exact
  std::vector<uint32_t> q(4, 0xffffffffu);
  std::vector<uint16_t> sb = {0x3f80, 0x0000};  // scale 1, bias 0
  Matrix W;
  W.type = WType::MLX4, W.rows = 1, W.cols = 32, W.group = 32;
  W.data = q.data(), W.scales = sb.data(), W.biases = sb.data() + 1;
  std::vector<float> x(32, std::nextafter(4.0f, 0.0f));
  CHECK(x_chunks(x.data(), 32).X[0] == (1 << 22));
  float y = 0;
  matvec(W, x.data(), &y);
  CHECK(std::fabs(double(y) - 15.0 * 32 * double(x[0])) <= 15.0 * 32 * 4.0 * 0x1p-22);
  // a chunk of zeros gives 0; one non-finite element makes the chunk's product NaN
  std::fill(x.begin(), x.end(), 0.0f);
  matvec(W, x.data(), &y);
  CHECK(f32_bits(y) == 0u);
  x[7] = INFINITY;
  matvec(W, x.data(), &y);
  CHECK(std::isnan(y));
  CHECK(f32_bits(x_chunks(x.data(), 32).sum[0]) == 0x7fc00000u);  // one NaN for the record (not inf)
  CHECK(f32_bits(x_chunks(x.data(), 32).unit[0]) == 0x7fc00000u);
}

TEST_CASE("the q4h scores' block fixed point (top 13): integers within 2^14, half a unit of error, zeros, non-finite") {
  // ARITHMETIC.md §6: the rotated query per group of 32, X = round_even(q · 2^(13−e)), unit 2^(e−13)
  for (float scale : {1e-41f, 1e-38f, 3e-20f, 1.0f, 7.5e5f, 1e30f}) {
    std::vector<float> x = make_x(64, 23);
    for (float& v : x) v = v * scale;
    x[9] = x[9] * 1e-9f;
    const XChunks xc = x_chunks(x.data(), 64, 13);
    for (int c = 0; c < 2; c++) {
      CAPTURE(scale);
      const double unit = xc.unit[size_t(c)];
      if (scale >= 1e-38f) CHECK(unit > 0);
      for (int j = 32 * c; j < 32 * c + 32; j++) {
        CHECK(std::abs(xc.X[size_t(j)]) <= (1 << 14));
        if (unit > 0) CHECK(std::fabs(double(xc.X[size_t(j)]) * unit - double(x[size_t(j)])) <= 0.5 * unit);
      }
    }
  }
  // just under a power of two rounds to 2^14; a group of zeros has unit 0; one non-finite element, the NaN unit
  std::vector<float> x(32, std::nextafter(4.0f, 0.0f));
  CHECK(x_chunks(x.data(), 32, 13).X[0] == (1 << 14));
  CHECK(x_chunks(x.data(), 32, 13).unit[0] == 0x1p-12f);
  std::fill(x.begin(), x.end(), 0.0f);
  CHECK(f32_bits(x_chunks(x.data(), 32, 13).unit[0]) == 0u);
  x[3] = NAN;
  CHECK(f32_bits(x_chunks(x.data(), 32, 13).unit[0]) == 0x7fc00000u);
  CHECK(x_chunks(x.data(), 32, 13).X[3] == 0);
}

TEST_CASE("the MLX4 product is within 2^-20 of the exact product of its weights") {
  // against a float64 sum of the dequantized weights: the block fixed point costs at most half a unit
  // (2^-22 of the chunk's largest |x|) an element; a wrong byte, piece or unit is off by far more
  auto tm = make(WType::MLX4, 37, 5120, 9);
  std::vector<float> x = make_x(5120, 4), y(37), w(5120);
  for (float& v : x) v = v * 0.001f;
  matvec(tm->m, x.data(), y.data());
  for (int64_t r = 0; r < 37; r++) {
    tm->m.row(r, w.data());
    double exact = 0, mag = 0;
    for (int64_t j = 0; j < 5120; j++)
      exact += double(w[size_t(j)]) * x[size_t(j)], mag += std::fabs(double(w[size_t(j)]) * x[size_t(j)]);
    CAPTURE(r);
    CHECK(std::fabs(double(y[size_t(r)]) - exact) <= mag * 0x1p-20);
  }
}

TEST_CASE("matvec and matmul bytes do not depend on the thread count or on batching") {
  for (WType t : {WType::BF16, WType::MLX4}) {
    auto tm = make(t, 301, 512, 11);
    std::vector<float> X = make_x(3 * 512, 5);
    std::vector<float> y1(3 * 301), y2(3 * 301), y3(301);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    matmul(tm->m, X.data(), 3, y1.data());
    omp_set_num_threads(2);
    matmul(tm->m, X.data(), 3, y2.data());
    omp_set_num_threads(saved);
    CHECK(std::memcmp(y1.data(), y2.data(), y1.size() * 4) == 0);
    matvec(tm->m, X.data() + 512, y3.data());  // the second vector alone
    CHECK(std::memcmp(y3.data(), y1.data() + 301, 301 * 4) == 0);
  }
}

TEST_CASE("sum_squares follows the 4-wide lane order") {
  std::vector<float> x = make_x(1000, 8);
  float lanes[32] = {};
  for (int64_t c = 0; c * 4 < 1000; c++)
    for (int64_t j = c * 4; j < c * 4 + 4; j++) lanes[c % 32] = std::fma(x[size_t(j)], x[size_t(j)], lanes[c % 32]);
  float want = lane_tree32(lanes), got = sum_squares(x.data(), 1000);
  CHECK(std::memcmp(&want, &got, 4) == 0);
}
