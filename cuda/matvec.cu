// The weight matrix-vector product for 1..N input rows: Y[n][r] = W[r,:]·X[n,:], in the canonical order of
// reference/weights.cpp (dot_row; docs/ARITHMETIC.md §2):
//   dense (f32: 4 values, bf16/f16: 8 values per 16-byte chunk): lane l of the row's warp takes chunks
//   l, l+32, l+64, …, each element one fma into the lane's accumulator, in index order;
//   MLX4 (32 weights per 16-byte chunk, inside one group): per chunk qx = fma chain of q_j·x_j from 0,
//   then acc = fma(s, qx, fma(b, xsum_chunk, acc)), with xsum the chunk sums of x (chunk_sums32,
//   computed once per input row by chunk_sums_kernel);
//   lanes combined by the xor butterfly, which gives lane_tree32's value in every lane.
// Launch: 256 threads = 8 warps, one output row per warp; each warp keeps NB (1, 2, 4 or 8) input rows'
// accumulators, so the weight row is read once per NB inputs. Every (n, r) is its own chain: the bytes
// do not depend on N, NB or the grid (batch-invariant).
// Nibbles become floats exactly as 2^23 + q − 2^23 (the bits 0x4b000000 | q).
// Measured (H200, 2026-11-29, hkv bench, 27B MLX4 shape, batch 1): a whole decode token reads 14.4 GB of
// weights in 35.8 ms, ≈ 0.40 TB/s against 4.22 TB/s copy bandwidth; this kernel dominates that time. Each
// lane has one 16-byte weight load in flight and computes (c·32)/group with a 64-bit division per chunk:
// the next step is U loads in flight per lane and a shift (branch cuda-matvec-unroll, not yet measured).
#include "cuda/check.h"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace hkv::cuda {

size_t DMat::nbytes() const { return matrix_bytes(type, rows, cols, group); }

namespace {

constexpr int kWarps = 8;

__global__ void chunk_sums_kernel(const float* X, int64_t ldx, int64_t N, int64_t nch, float* xsum) {
  int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= N * nch) return;
  int64_t n = idx / nch, c = idx % nch;
  const float* x = X + n * ldx + c * 32;
  float s = 0.0f;
  for (int j = 0; j < 32; j++) s = s + x[j];
  xsum[idx] = s;
}

template <WType T>
__device__ __forceinline__ float dense_at(const void* row, int64_t j) {
  if constexpr (T == WType::F32)
    return static_cast<const float*>(row)[j];
  else if constexpr (T == WType::BF16)
    return hkv::f32_from_bf16(static_cast<const uint16_t*>(row)[j]);
  else
    return hkv::f32_from_f16(static_cast<const uint16_t*>(row)[j]);
}

template <WType T, int NB>
__global__ void __launch_bounds__(kWarps * 32)
    matvec_dense_kernel(DMat W, const float* X, int64_t ldx, float* Y, int64_t ldy, bool vec) {
  constexpr int width = T == WType::F32 ? 4 : 8;
  constexpr int esize = T == WType::F32 ? 4 : 2;
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (r >= W.rows) return;
  const int64_t n = W.cols, nchunks = (n + width - 1) / width;
  const char* wrow = static_cast<const char*>(W.data) + r * n * esize;
  float acc[NB];
#pragma unroll
  for (int b = 0; b < NB; b++) acc[b] = 0.0f;
  for (int64_t c = lane; c < nchunks; c += 32) {
    float w[width];
    if (vec) {
      uint4 u = __ldg(reinterpret_cast<const uint4*>(wrow) + c);
      if constexpr (T == WType::F32) {
        w[0] = __uint_as_float(u.x), w[1] = __uint_as_float(u.y), w[2] = __uint_as_float(u.z),
        w[3] = __uint_as_float(u.w);
      } else {
        uint32_t v4[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 8; i++) {
          uint16_t h = uint16_t(v4[i / 2] >> (16 * (i % 2)));
          w[i] = T == WType::BF16 ? hkv::f32_from_bf16(h) : hkv::f32_from_f16(h);
        }
      }
#pragma unroll
      for (int b = 0; b < NB; b++) {
        const float4* x4 = reinterpret_cast<const float4*>(X + b * ldx + c * width);
#pragma unroll
        for (int i = 0; i < width / 4; i++) {
          float4 xv = x4[i];
          acc[b] = hkv::fma_rn(w[4 * i + 0], xv.x, acc[b]);
          acc[b] = hkv::fma_rn(w[4 * i + 1], xv.y, acc[b]);
          acc[b] = hkv::fma_rn(w[4 * i + 2], xv.z, acc[b]);
          acc[b] = hkv::fma_rn(w[4 * i + 3], xv.w, acc[b]);
        }
      }
    } else {
      for (int64_t j = c * width; j < c * width + width && j < n; j++) {
        float wj = dense_at<T>(wrow, j);
#pragma unroll
        for (int b = 0; b < NB; b++) acc[b] = hkv::fma_rn(wj, X[b * ldx + j], acc[b]);
      }
    }
  }
#pragma unroll
  for (int b = 0; b < NB; b++) {
    float v = warp_tree_sum(acc[b]);
    if (lane == 0) Y[b * ldy + r] = v;
  }
}

__device__ __forceinline__ float nibble(uint32_t word, int k) {
  return __uint_as_float(0x4b000000u | ((word >> (4 * k)) & 0xfu)) - 8388608.0f;
}

template <int NB>
__global__ void __launch_bounds__(kWarps * 32)
    matvec_mlx4_kernel(DMat W, const float* X, int64_t ldx, const float* xsum, float* Y, int64_t ldy) {
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (r >= W.rows) return;
  const int64_t nch = W.cols / 32, gpr = W.cols / W.group;
  const uint4* q = reinterpret_cast<const uint4*>(static_cast<const uint32_t*>(W.data) + r * (W.cols / 8));
  float acc[NB];
#pragma unroll
  for (int b = 0; b < NB; b++) acc[b] = 0.0f;
  for (int64_t c = lane; c < nch; c += 32) {
    const uint4 u = __ldg(q + c);
    const int64_t g = r * gpr + (c * 32) / W.group;
    const float s = hkv::f32_from_bf16(__ldg(W.scales + g)), bias = hkv::f32_from_bf16(__ldg(W.biases + g));
    const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int b = 0; b < NB; b++) {
      const float4* x4 = reinterpret_cast<const float4*>(X + b * ldx + c * 32);
      float qx = 0.0f;
#pragma unroll
      for (int wi = 0; wi < 4; wi++) {
        float4 xa = x4[2 * wi], xb = x4[2 * wi + 1];
        qx = hkv::fma_rn(nibble(words[wi], 0), xa.x, qx);
        qx = hkv::fma_rn(nibble(words[wi], 1), xa.y, qx);
        qx = hkv::fma_rn(nibble(words[wi], 2), xa.z, qx);
        qx = hkv::fma_rn(nibble(words[wi], 3), xa.w, qx);
        qx = hkv::fma_rn(nibble(words[wi], 4), xb.x, qx);
        qx = hkv::fma_rn(nibble(words[wi], 5), xb.y, qx);
        qx = hkv::fma_rn(nibble(words[wi], 6), xb.z, qx);
        qx = hkv::fma_rn(nibble(words[wi], 7), xb.w, qx);
      }
      acc[b] = hkv::fma_rn(s, qx, hkv::fma_rn(bias, xsum[b * nch + c], acc[b]));
    }
  }
#pragma unroll
  for (int b = 0; b < NB; b++) {
    float v = warp_tree_sum(acc[b]);
    if (lane == 0) Y[b * ldy + r] = v;
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <int NB>
void launch(const DMat& W, const float* X, int64_t ldx, float* Y, int64_t ldy, const float* xsum, bool vec,
            cudaStream_t st) {
  dim3 grid(unsigned((W.rows + kWarps - 1) / kWarps)), block(kWarps * 32);
  switch (W.type) {
    case WType::F32:
      matvec_dense_kernel<WType::F32, NB><<<grid, block, 0, st>>>(W, X, ldx, Y, ldy, vec);
      break;
    case WType::BF16:
      matvec_dense_kernel<WType::BF16, NB><<<grid, block, 0, st>>>(W, X, ldx, Y, ldy, vec);
      break;
    case WType::F16:
      matvec_dense_kernel<WType::F16, NB><<<grid, block, 0, st>>>(W, X, ldx, Y, ldy, vec);
      break;
    case WType::MLX4:
      matvec_mlx4_kernel<NB><<<grid, block, 0, st>>>(W, X, ldx, xsum, Y, ldy);
      break;
  }
  HKV_CHECK_LAUNCH();
}

}  // namespace

void matvec(const DMat& W, const float* X, int64_t ldx, int64_t N, float* Y, int64_t ldy, float* xsum,
            cudaStream_t st) {
  if (N <= 0 || W.rows == 0) return;
  const int width = W.type == WType::F32 ? 4 : 8;
  const int64_t nch = W.cols / 32;
  if (W.type == WType::MLX4) {
    if (W.cols % 32 != 0 || W.group % 32 != 0 || ldx % 4 != 0 || !aligned16(X) || !aligned16(W.data))
      throw std::runtime_error("matvec: MLX4 needs cols and group multiples of 32 and 16-byte aligned rows");
    const int64_t total = N * nch;
    chunk_sums_kernel<<<unsigned((total + 255) / 256), 256, 0, st>>>(X, ldx, N, nch, xsum);
    HKV_CHECK_LAUNCH();
  }
  const bool vec = W.cols % width == 0 && ldx % 4 == 0 && aligned16(X) && aligned16(W.data);
  for (int64_t n0 = 0; n0 < N;) {
    const int64_t left = N - n0;
    const float* x = X + n0 * ldx;
    float* y = Y + n0 * ldy;
    const float* xs = W.type == WType::MLX4 ? xsum + n0 * nch : nullptr;
    if (left >= 8)
      launch<8>(W, x, ldx, y, ldy, xs, vec, st), n0 += 8;
    else if (left >= 4)
      launch<4>(W, x, ldx, y, ldy, xs, vec, st), n0 += 4;
    else if (left >= 2)
      launch<2>(W, x, ldx, y, ldy, xs, vec, st), n0 += 2;
    else
      launch<1>(W, x, ldx, y, ldy, xs, vec, st), n0 += 1;
  }
}

}  // namespace hkv::cuda
