#include "reference/weights.h"

#include <algorithm>
#include <fstream>
#include <stdexcept>
#include <string>

#include "reference/scalar.h"

namespace hkv {

const char* wtype_name(WType t) {
  switch (t) {
    case WType::F32:
      return "f32";
    case WType::BF16:
      return "bf16";
    case WType::F16:
      return "f16";
    case WType::MLX4:
      return "mlx4";
  }
  return "?";
}

size_t Matrix::nbytes() const { return matrix_bytes(type, rows, cols, group); }

size_t matrix_bytes(WType type, int64_t rows, int64_t cols, int group) {
  switch (type) {
    case WType::F32:
      return size_t(rows * cols) * 4;
    case WType::BF16:
    case WType::F16:
      return size_t(rows * cols) * 2;
    case WType::MLX4:
      return size_t(rows * cols) / 2 + size_t(rows * (cols / group)) * 4;
  }
  return 0;
}

// MLX4 element (r, c): nibble c%8 of word c/8, then scale·q + bias as one fma.
static float mlx4_at(const Matrix& W, int64_t r, int64_t c) {
  const uint32_t* q = static_cast<const uint32_t*>(W.data) + r * (W.cols / 8);
  uint32_t nib = (q[c / 8] >> (4 * (c % 8))) & 0xfu;
  int64_t g = r * (W.cols / W.group) + c / W.group;
  return fma_rn(f32_from_bf16(W.scales[g]), float(nib), f32_from_bf16(W.biases[g]));
}

float Matrix::at(int64_t r, int64_t c) const {
  switch (type) {
    case WType::F32:
      return static_cast<const float*>(data)[r * cols + c];
    case WType::BF16:
      return f32_from_bf16(static_cast<const uint16_t*>(data)[r * cols + c]);
    case WType::F16:
      return f32_from_f16(static_cast<const uint16_t*>(data)[r * cols + c]);
    case WType::MLX4:
      return mlx4_at(*this, r, c);
  }
  return 0.0f;
}

void Matrix::row(int64_t r, float* out) const {
  switch (type) {
    case WType::BF16: {
      const uint16_t* p = static_cast<const uint16_t*>(data) + r * cols;
      for (int64_t c = 0; c < cols; c++) out[c] = f32_from_bf16(p[c]);
      return;
    }
    case WType::F32:
      for (int64_t c = 0; c < cols; c++) out[c] = static_cast<const float*>(data)[r * cols + c];
      return;
    default:
      for (int64_t c = 0; c < cols; c++) out[c] = at(r, c);
  }
}

static bool g_wide = false;
void set_wide_accumulation(bool on) { g_wide = on; }
bool wide_accumulation() { return g_wide; }

// The noise-floor form: a float64 sum in index order, rounded once.
static float dot_wide(const Matrix& W, int64_t r, const float* x) {
  thread_local std::vector<float> w;
  w.resize(size_t(W.cols));
  W.row(r, w.data());
  double acc = 0.0;
  for (int64_t j = 0; j < W.cols; j++) acc += double(w[size_t(j)]) * double(x[j]);
  return float(acc);
}

uint64_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (f >> key) {
    if (key == "MemAvailable:" && f >> kib) return kib * 1024;
    f.ignore(1 << 10, '\n');
  }
  return 0;
}

float lane_tree32(float* a) {
  for (int off = 16; off >= 1; off /= 2)
    for (int l = 0; l < off; l++) a[l] = a[l] + a[l + off];
  return a[0];
}

XChunks x_chunks(const float* x, int64_t n, int top) {
  XChunks xc;
  xc.X.assign(size_t(n), 0);
  for (int64_t c = 0; c * 32 < n; c++) {
    const int64_t j0 = 32 * c, j1 = std::min(n, j0 + 32);
    float s = 0.0f;
    uint32_t mb = 0;  // the largest magnitude's bits (finite magnitudes order as their bits)
    for (int64_t j = j0; j < j1; j++) s = s + x[j], mb = std::max(mb, f32_bits(x[j]) & 0x7fffffffu);
    if (mb >= 0x7f800000u) {  // an inf or NaN: one NaN for the sum and the unit (NaN payloads differ by chip)
      xc.sum.push_back(canonical_nan());
      xc.unit.push_back(canonical_nan());
      continue;
    }
    xc.sum.push_back(s);
    if (mb == 0) {
      xc.unit.push_back(0.0f);
    } else {
      const int e = xq_exponent(mb);
      for (int64_t j = j0; j < j1; j++) xc.X[size_t(j)] = xq_int(x[j], e, top);
      xc.unit.push_back(xq_unit(e, top));
    }
  }
  return xc;
}

// Dense formats: chunk = 16 bytes = `width` elements; lane l owns chunks l, l+32, l+64, …
template <int width, typename Load>
static float dot_dense(int64_t n, const float* x, Load w) {
  float lane[32] = {};
  for (int64_t chunk = 0; chunk * width < n; chunk++) {
    float acc = lane[chunk % 32];
    for (int64_t j = chunk * width; j < chunk * width + width && j < n; j++) acc = fma_rn(w(j), x[j], acc);
    lane[chunk % 32] = acc;
  }
  return lane_tree32(lane);
}

// MLX4: chunk = 16 bytes = 4 words = 32 weights, inside one quantization group. Per chunk:
//   T = Σ q_j·X_j, an exact integer (|T| <= 15·32·2^22 < 2^31, so the order of the sum does not matter);
//   qx = float(T)·unit;  acc = fma(s, qx, fma(b, sum, acc)).
static float dot_mlx4(const Matrix& W, int64_t r, const XChunks& xc) {
  const uint32_t* q = static_cast<const uint32_t*>(W.data) + r * (W.cols / 8);
  const int64_t groups_per_row = W.cols / W.group;
  float lane[32] = {};
  for (int64_t chunk = 0; chunk * 32 < W.cols; chunk++) {
    int32_t T = 0;
    for (int64_t col = chunk * 32; col < chunk * 32 + 32; col++)
      T += int32_t((q[col / 8] >> (4 * (col % 8))) & 0xfu) * xc.X[size_t(col)];
    const float qx = float(T) * xc.unit[size_t(chunk)];
    const int64_t g = r * groups_per_row + (chunk * 32) / W.group;
    const float s = f32_from_bf16(W.scales[g]), b = f32_from_bf16(W.biases[g]);
    float& acc = lane[chunk % 32];
    acc = fma_rn(s, qx, fma_rn(b, xc.sum[size_t(chunk)], acc));
  }
  return lane_tree32(lane);
}

float dot_row(const Matrix& W, int64_t r, const float* x, const XChunks* xc) {
  if (g_wide) return dot_wide(W, r, x);
  const int64_t n = W.cols;
  switch (W.type) {
    case WType::F32: {
      const float* w = static_cast<const float*>(W.data) + r * n;
      return dot_dense<4>(n, x, [w](int64_t j) { return w[j]; });
    }
    case WType::BF16: {
      const uint16_t* w = static_cast<const uint16_t*>(W.data) + r * n;
      return dot_dense<8>(n, x, [w](int64_t j) { return f32_from_bf16(w[j]); });
    }
    case WType::F16: {
      const uint16_t* w = static_cast<const uint16_t*>(W.data) + r * n;
      return dot_dense<8>(n, x, [w](int64_t j) { return f32_from_f16(w[j]); });
    }
    case WType::MLX4:
      return dot_mlx4(W, r, *xc);
  }
  return 0.0f;
}

void matvec(const Matrix& W, const float* x, float* y) { matmul(W, x, 1, y); }

void matmul(const Matrix& W, const float* X, int64_t T, float* Y) {
  std::vector<XChunks> xc;
  if (W.type == WType::MLX4) {
    if (W.cols % 32 != 0) throw std::runtime_error("MLX4 matrix with cols not a multiple of 32");
    for (int64_t t = 0; t < T; t++) xc.push_back(x_chunks(X + t * W.cols, W.cols));
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < W.rows; r++)
    for (int64_t t = 0; t < T; t++)
      Y[t * W.rows + r] = dot_row(W, r, X + t * W.cols, xc.empty() ? nullptr : &xc[size_t(t)]);
}

float sum_squares(const float* x, int64_t n) {
  if (g_wide) {
    double acc = 0.0;
    for (int64_t j = 0; j < n; j++) acc += double(x[j]) * double(x[j]);
    return float(acc);
  }
  return dot_dense<4>(n, x, [x](int64_t j) { return x[j]; });
}

}  // namespace hkv
