// Weight matrices as stored (f32, bf16, f16 or MLX 4-bit affine) and the canonical matrix-vector product.
//
// The product's order is docs/ARITHMETIC.md §2: 32 lanes over 16-byte chunks, each lane an fma chain in
// index order, lanes combined by a fixed halving tree. A row's result depends on that row and x alone,
// so any batching of rows or of x vectors gives the same bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hkv {

enum class WType { F32, BF16, F16, MLX4 };
const char* wtype_name(WType t);

// Bytes of a [rows, cols] matrix stored as `type` (MLX4: the packed words plus bf16 scales and biases).
size_t matrix_bytes(WType type, int64_t rows, int64_t cols, int group);

// Memory the machine can still give, from /proc/meminfo's MemAvailable (0 when unknown): what a cache or a
// synthetic model is checked against before it is allocated.
uint64_t available_memory_bytes();

// A [rows, cols] matrix, row-major. For MLX4: q holds rows × cols/8 uint32 (element j of a word in bits
// [4j, 4j+4)), scales and biases rows × cols/group bf16, and w = scale·q + bias.
struct Matrix {
  WType type = WType::F32;
  int64_t rows = 0, cols = 0;
  const void* data = nullptr;        // f32 / bf16 / f16 values, or MLX4 packed words
  const uint16_t* scales = nullptr;  // MLX4 only (bf16)
  const uint16_t* biases = nullptr;  // MLX4 only (bf16)
  int group = 0;                     // MLX4 only: 32, 64 or 128
  std::shared_ptr<const void> keep;  // owner of the bytes (a mapping or a vector)

  size_t nbytes() const;
  // Element (r, c) as fp32, for tests and for embedding look-ups.
  float at(int64_t r, int64_t c) const;
  // Row r as fp32 into out[cols] (for MLX4: scale·q + bias, one fma per element).
  void row(int64_t r, float* out) const;
};

// What an MLX4 product reads of x (ARITHMETIC.md §2), for chunk c = elements [32c, 32c + 32):
//   sum[c]  = ((x[32c] + x[32c+1]) + …) + x[32c+31], in index order;
//   e       = floor(log2 max_j |x_j|);  X[j] = round_even(x_j · 2^(21−e)), an integer with |X[j]| <= 2^22;
//   unit[c] = 2^(e−21), so x_j ≈ X[j]·unit[c] to half a unit.
// A chunk of zeros has X = 0 and unit 0; a chunk holding an inf or NaN has X = 0 and sum and unit the NaN
// 0x7fc00000. Computed once per x and shared by all rows. top = 13 gives the q4h scores' form of a query
// (ARITHMETIC.md §6): X[j] = round_even(x_j · 2^(13−e)), |X[j]| <= 2^14, unit 2^(e−13).
struct XChunks {
  std::vector<int32_t> X;
  std::vector<float> unit, sum;
};
XChunks x_chunks(const float* x, int64_t n, int top = 21);

// y[r] = W[r,:] · x for one row, in the canonical order. xc is x_chunks(x) (MLX4 only).
float dot_row(const Matrix& W, int64_t r, const float* x, const XChunks* xc);

// y = W x for all rows (OpenMP over rows: the bytes do not depend on the thread count).
void matvec(const Matrix& W, const float* x, float* y);

// Y[t] = W X[t] for T vectors X [T][cols] -> Y [T][rows]. Each (row, t) is dot_row, so the bytes equal T
// separate matvecs; the loop order only lets a weight row be reused from the cache.
void matmul(const Matrix& W, const float* X, int64_t T, float* Y);

// The canonical sum of squares over 32 lanes of 4-float chunks (RMSNorm, l2norm).
float sum_squares(const float* x, int64_t n);

// Float64 accumulation, for the gate's noise floor: while on, every dot product, sum of squares, attention
// sum and DeltaNet read-out accumulates in double and rounds once at the end. Outside the arithmetic
// contract on purpose: comparing it with the contract's fp32 order shows the rounding noise of fp32 alone.
void set_wide_accumulation(bool on);
bool wide_accumulation();

// Combine 32 lane partials by the fixed halving tree: for off = 16, 8, 4, 2, 1: a[l] = a[l] + a[l+off].
float lane_tree32(float* a);

}  // namespace hkv
