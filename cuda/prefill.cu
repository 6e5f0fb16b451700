// Kernels of the fast prefill path (cuda/prefill.h): NOT EXACT, outside docs/ARITHMETIC.md's contract (§10).
//
// dequant_rows_bf16: one thread per output element; MLX4 element (r, c) = fma(scale, q, bias) in fp32 (the
//   oracle's Matrix::at, so the fp32 value is exact to the reference) then bf16_from_f32 (nearest even).
// rmsnorm_bf16: one block of 256 threads per row; thread i sums x_j² for j = i, i+256, … (fma chain), the
//   block combines the 256 partial sums by a shared-memory halving tree; r = rsqrt_c(ss/n + eps);
//   y_j = bf16((x_j·r)·(1 + w_j)).
// silu_mul_bf16: y = bf16(silu_c(g)·u), elementwise; four consecutive columns a thread (float4 loads, one 8-byte
//   store) when the widths and addresses allow it, else one.
// gemm_bf16_xwt: one cublasGemmEx (bf16 A and B, fp32 C, CUBLAS_COMPUTE_32F): cuBLAS's order.
// The attention is in prefill_attention.cu.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "cuda/alloc.h"
#include "cuda/check.h"
#include "cuda/device.cuh"
#include "cuda/prefill.h"

namespace hkv::cuda {
namespace {

__global__ void dequant_kernel(DMat W, int64_t r0, int64_t n, uint16_t* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, cols = W.cols;
  if (i >= n * cols) return;
  const int64_t r = r0 + i / cols, c = i % cols;
  if (W.type == WType::BF16)  // as stored (the round trip through binary32 would be the identity)
    out[i] = static_cast<const uint16_t*>(W.data)[r * cols + c];
  else
    out[i] = hkv::bf16_from_f32(dmat_at(W, r, c));
}

// MLX4 rows r0 … r0 + gridDim.y − 1 (the default; gpu_prefill checks its bytes): one thread a 32-bit
// code word, its 8 elements (one group: the group is a multiple of 8) each fma(scale, q, bias) in fp32 as
// dmat_at, then bf16_from_f32, stored as one 16-byte write. No 64-bit division an element (dequant_kernel has
// three), and one scale and bias load for 8 elements.
__global__ void dequant_mlx4_kernel(DMat W, int64_t r0, uint16_t* out) {
  const int64_t r = blockIdx.y, cols = W.cols;
  const int wpr = int(cols / 8), w = int(blockIdx.x) * blockDim.x + threadIdx.x;
  if (w >= wpr) return;
  const int group = int(W.group), gpr = int(cols) / group;  // 32-bit divisions, one a word
  const int64_t row = r0 + r, gi = row * gpr + (w * 8) / group;
  const uint32_t word = static_cast<const uint32_t*>(W.data)[row * wpr + w];
  const float sc = hkv::f32_from_bf16(W.scales[gi]), bi = hkv::f32_from_bf16(W.biases[gi]);
  uint32_t o[4];
#pragma unroll
  for (int k = 0; k < 4; k++) {
    const uint32_t lo = hkv::bf16_from_f32(hkv::fma_rn(sc, float((word >> (8 * k)) & 0xfu), bi));
    const uint32_t hi = hkv::bf16_from_f32(hkv::fma_rn(sc, float((word >> (8 * k + 4)) & 0xfu), bi));
    o[k] = lo | hi << 16;
  }
  reinterpret_cast<uint4*>(out + r * cols)[w] = make_uint4(o[0], o[1], o[2], o[3]);
}

__global__ void f32_to_bf16_kernel(const float* x, int64_t ldx, int64_t rows, int64_t cols, uint16_t* out,
                                   int64_t ldo) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  out[r * ldo + c] = hkv::bf16_from_f32(x[r * ldx + c]);
}

constexpr int kNormThreads = 256;

__global__ void rmsnorm_bf16_kernel(const float* h, int64_t n, const float* w, float eps, uint16_t* out) {
  __shared__ float red[kNormThreads];
  __shared__ float r_s;
  const int64_t row = blockIdx.x;
  const float* x = h + row * n;
  float acc = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += kNormThreads) acc = hkv::fma_rn(x[j], x[j], acc);
  red[threadIdx.x] = acc;
  __syncthreads();
  for (int off = kNormThreads / 2; off > 0; off /= 2) {
    if (int(threadIdx.x) < off) red[threadIdx.x] = red[threadIdx.x] + red[threadIdx.x + off];
    __syncthreads();
  }
  if (threadIdx.x == 0) r_s = hkv::rsqrt_c(red[0] / float(n) + eps);
  __syncthreads();
  const float r = r_s;
  for (int64_t j = threadIdx.x; j < n; j += kNormThreads) {
    const float y = w ? (x[j] * r) * (1.0f + w[j]) : x[j] * r;
    out[row * n + j] = hkv::bf16_from_f32(y);
  }
}

__global__ void silu_mul_bf16_kernel(const float* g, const float* u, int64_t ld, int64_t rows, int64_t cols,
                                     uint16_t* out, int64_t ldo) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  out[r * ldo + c] = hkv::bf16_from_f32(hkv::silu_c(g[r * ld + c]) * u[r * ld + c]);
}

// Columns [4c, 4c + 4) of row blockIdx.y (cols, ld and ldo multiples of 4; g, u 16-byte and out 8-byte aligned).
__global__ void silu_mul_bf16_x4_kernel(const float* g, const float* u, int64_t ld, int64_t cols, uint16_t* out,
                                        int64_t ldo) {
  const int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4, r = blockIdx.y;
  if (c >= cols) return;
  const float4 gv = *reinterpret_cast<const float4*>(g + r * ld + c);
  const float4 uv = *reinterpret_cast<const float4*>(u + r * ld + c);
  const uint32_t lo = uint32_t(hkv::bf16_from_f32(hkv::silu_c(gv.x) * uv.x)) |
                      uint32_t(hkv::bf16_from_f32(hkv::silu_c(gv.y) * uv.y)) << 16;
  const uint32_t hi = uint32_t(hkv::bf16_from_f32(hkv::silu_c(gv.z) * uv.z)) |
                      uint32_t(hkv::bf16_from_f32(hkv::silu_c(gv.w) * uv.w)) << 16;
  *reinterpret_cast<uint2*>(out + r * ldo + c) = make_uint2(lo, hi);
}

}  // namespace

// MLX4 rows into a 16-byte aligned out by dequant_mlx4_kernel (a code word a thread, 32-bit divisions), other types
// and outputs by the element kernel (three 64-bit divisions an element); gpu_prefill checks both give the same bytes.
void dequant_rows_bf16(const DMat& W, int64_t r0, int64_t n, uint16_t* out, cudaStream_t st) {
  if (n <= 0) return;
  if (r0 < 0 || r0 + n > W.rows) throw std::runtime_error("dequant_rows_bf16: rows out of range");
  if (W.type == WType::MLX4 && (W.group <= 0 || W.cols % W.group != 0 || W.cols % 8 != 0))
    throw std::runtime_error("dequant_rows_bf16: MLX4 columns must be a multiple of the group and of 8");
  if (W.type == WType::MLX4 && (reinterpret_cast<uintptr_t>(out) & 15) == 0) {
    dequant_mlx4_kernel<<<dim3(blocks_for(W.cols / 8, 256), unsigned(n)), 256, 0, st>>>(W, r0, out);
  } else {
    dequant_kernel<<<blocks_for(n * W.cols, 256), 256, 0, st>>>(W, r0, n, out);
  }
  HKV_CHECK_LAUNCH();
}

void f32_to_bf16(const float* x, int64_t ldx, int64_t rows, int64_t cols, uint16_t* out, int64_t ldo, cudaStream_t st) {
  if (rows * cols <= 0) return;
  f32_to_bf16_kernel<<<blocks_for(rows * cols, 256), 256, 0, st>>>(x, ldx, rows, cols, out, ldo);
  HKV_CHECK_LAUNCH();
}

void rmsnorm_bf16(const float* h, int64_t rows, int64_t n, const float* w, float eps, uint16_t* out, cudaStream_t st) {
  if (rows <= 0) return;
  rmsnorm_bf16_kernel<<<unsigned(rows), kNormThreads, 0, st>>>(h, n, w, eps, out);
  HKV_CHECK_LAUNCH();
}

void silu_mul_bf16(const float* g, const float* u, int64_t ld_gu, int64_t rows, int64_t cols, uint16_t* out,
                   int64_t ldo, cudaStream_t st) {
  if (rows * cols <= 0) return;
  const bool x4 = cols % 4 == 0 && ld_gu % 4 == 0 && ldo % 4 == 0 && rows < 65536 &&
                  (reinterpret_cast<uintptr_t>(g) & 15) == 0 && (reinterpret_cast<uintptr_t>(u) & 15) == 0 &&
                  (reinterpret_cast<uintptr_t>(out) & 7) == 0;
  if (x4)
    silu_mul_bf16_x4_kernel<<<dim3(blocks_for(cols / 4, 256), unsigned(rows)), 256, 0, st>>>(g, u, ld_gu, cols, out,
                                                                                             ldo);
  else
    silu_mul_bf16_kernel<<<blocks_for(rows * cols, 256), 256, 0, st>>>(g, u, ld_gu, rows, cols, out, ldo);
  HKV_CHECK_LAUNCH();
}

void gemm_bf16_xwt(cublasHandle_t h, const uint16_t* W, int64_t m, int64_t k, int64_t ldw, const uint16_t* X,
                   int64_t ldx, int64_t N, float* Y, int64_t ldy, float alpha, float beta) {
  if (m <= 0 || N <= 0) return;
  // Row-major Y[N][m] = X[N][k]·Wᵀ is column-major Yᵀ[m][N] = W[m][k] · Xᵀ[k][N]: the row-major W buffer is
  // the column-major Wᵀ (k × m, ld ldw), so op(A) = T; the row-major X buffer is column-major Xᵀ (ld ldx).
  HKV_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(m), int(N), int(k), &alpha, W, CUDA_R_16BF, int(ldw),
                                X, CUDA_R_16BF, int(ldx), &beta, Y, CUDA_R_32F, int(ldy), CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
}

FastPrefillState::~FastPrefillState() {
  if (blas) cublasDestroy(blas);
  device_free(mem);
  device_free(kv);
}

}  // namespace hkv::cuda
