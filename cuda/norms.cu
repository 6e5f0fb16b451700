// Norms, RoPE, the embedding look-up and the element-wise steps, mirroring reference/model.cpp:
//   rmsnorm_1pw / rmsnorm_plain: r = rsqrt_c(sum_squares(x) / float(n) + eps) (sum_squares: 32 lanes of
//     4-float chunks, fma chains, lane tree; warp 0 of the block), then out = (x·r)·(1 + w) or (x·r)·w;
//   l2norm_inplace: r = rsqrt_c(sum_squares(x) + 1e-6), x·r (then × dk^-1/2 for DeltaNet queries);
//   rope_apply (rotate_half): x[i] = fma(a, cos, −(b·sin)), x[i+h] = fma(b, cos, a·sin), host tables;
//   embedding rows (Matrix::row: MLX4 as fma(scale, q, bias)); silu_c(g)·u; h + y.
// Launch: norms one block per row (1024 threads; the row read once into shared memory, the reduction in one
// warp), attn_prep one warp per (token, head), element-wise one thread per element.
#include "cuda/check.h"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace hkv::cuda {
namespace {

// Decode fusion of three of the oracle's steps, each unchanged: h = h + y (when y), out = rmsnorm_1pw(h; w),
// and (when xq) the MLX4 products' records of out's chunks (xq_chunk, device.cuh). One block a row, thread t
// owning elements t, t + blockDim, …, so warp w holds chunks w, w + 32, … of the row, lane j element j:
//   1. every thread loads its h, y and w elements (all in flight together, in rounds of 8), writes h + y
//      back to h (when y) and into shared memory;
//   2. warp 0 takes the sum of squares from shared memory in sum_squares' order (lane l: 4-element chunks
//      l, l + 32, … as float4, an fma chain; then the lane tree) and r = rsqrt_c(ss / n + eps);
//   3. every thread computes its elements of out from its registers and stores them (and into shared
//      memory); each warp then makes the records of the chunks it holds (no barrier but the warp's own).
// Rows h[r·ldh …], y[r·ldh …], out[r·ldo …]; h is written only when y is given; out must not alias h.
// plain: out = rmsnorm_plain(h; w) instead. rmsnorm_rows is this kernel with no y and no records.
__global__ void __launch_bounds__(1024)
    add_rmsnorm_kernel(float* __restrict__ H, const float* __restrict__ Y, int64_t ldh, const float* __restrict__ w,
                       bool plain, int n, float eps, float* __restrict__ Out, int64_t ldo, uint32_t* __restrict__ xq) {
  pdl_wait();  // launch_k (device.cuh): nothing is read or written before the kernel ahead has completed
  extern __shared__ float4 hs4[];  // n floats, 16-byte aligned
  float* hs = reinterpret_cast<float*>(hs4);
  __shared__ float r_s;
  pdl_trigger();  // the matvec that reads out and xq may launch (it waits for this grid before reading)
  float* __restrict__ h = H + int64_t(blockIdx.x) * ldh;
  float* __restrict__ out = Out + int64_t(blockIdx.x) * ldo;
  const float* __restrict__ y = Y ? Y + int64_t(blockIdx.x) * ldh : nullptr;
  const int step = int(blockDim.x);
  const bool one_round = n <= 8 * step;  // then the h and w values stay in registers through step 3
  float hv[8], wv[8];
  for (int i0 = threadIdx.x; i0 < n; i0 += 8 * step) {
    float yv[8];
#pragma unroll
    for (int k = 0; k < 8; k++) {
      const int i = i0 + k * step;
      hv[k] = i < n ? h[i] : 0.0f;
      yv[k] = (y && i < n) ? y[i] : 0.0f;
      wv[k] = (w && one_round && i < n) ? w[i] : 0.0f;  // else step 3 loads w round by round
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
      const int i = i0 + k * step;
      if (i >= n) break;
      if (y) {
        hv[k] = hv[k] + yv[k];
        h[i] = hv[k];
      }
      hs[i] = hv[k];
    }
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    const float acc = warp_sum_squares_smem(hs, n, int(threadIdx.x));
    if (threadIdx.x == 0) r_s = hkv::rsqrt_c(acc / float(n) + eps);
  }
  __syncthreads();
  const float r = r_s;
  for (int i0 = threadIdx.x; i0 < n; i0 += 8 * step) {
    if (!one_round) {
#pragma unroll
      for (int k = 0; k < 8; k++) {
        const int i = i0 + k * step;
        hv[k] = i < n ? hs[i] : 0.0f;
        wv[k] = (w && i < n) ? w[i] : 0.0f;
      }
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
      const int i = i0 + k * step;
      if (i >= n) break;
      const float v = plain ? (hv[k] * r) * wv[k] : (hv[k] * r) * (w ? 1.0f + wv[k] : 1.0f);
      out[i] = v;
      if (xq) hs[i] = v;  // for the records below
    }
  }
  if (!xq) return;
  __syncwarp();  // warp w wrote the chunks it makes records of (n is a multiple of 32 when xq is asked for)
  const int lane = threadIdx.x & 31;
  for (int c = threadIdx.x >> 5; c < n / 32; c += step >> 5)
    xq_chunk(hs[32 * c + lane], hs4 + 8 * c, xq + (int64_t(blockIdx.x) * (n / 32) + c) * kXqWords);
}

// a = silu_c(a)·b, one thread an element; then each warp makes the MLX4 products' record of its chunk
// (xq_chunk). n is a multiple of 32, so a warp is wholly inside or wholly outside.
__global__ void silu_mul_xq_kernel(float* a, const float* b, int64_t n, uint32_t* xq) {
  pdl_wait();  // launch_k (device.cuh): nothing is read or written before the kernel ahead has completed
  __shared__ float4 vs4[8][8];  // each warp's chunk
  pdl_trigger();                // as in add_rmsnorm_kernel: down_proj's matvec may launch
  const int64_t i = int64_t(blockIdx.x) * 256 + threadIdx.x;
  if (i >= n) return;
  const float v = hkv::silu_c(a[i]) * b[i];
  a[i] = v;
  float4* c4 = vs4[threadIdx.x >> 5];
  reinterpret_cast<float*>(c4)[threadIdx.x & 31] = v;
  __syncwarp();
  xq_chunk(v, c4, xq + (i >> 5) * kXqWords);
}

__global__ void l2norm_heads_kernel(float* X, int64_t ld, int dim, int nscaled, float scale) {
  pdl_wait();  // launch_k (device.cuh): nothing is read or written before the kernel ahead has completed
  const int lane = threadIdx.x, h = blockIdx.y;
  float* x = X + int64_t(blockIdx.x) * ld + int64_t(h) * dim;
  const float r = hkv::rsqrt_c(warp_sum_squares(x, dim, lane) + 1e-6f);
  for (int i = lane; i < dim; i += 32) {
    float v = x[i] * r;
    if (h < nscaled) v = v * scale;
    x[i] = v;
  }
}

__global__ void attn_prep_kernel(const float* qg, float* q, float* k, const float* q_norm, const float* k_norm,
                                 const float* rope, int H, int KV, int D, int rd, float eps) {
  pdl_wait();  // launch_k (device.cuh): nothing is read or written before the kernel ahead has completed
  __shared__ float buf[1024];
  const int lane = threadIdx.x, hh = blockIdx.y;
  const int64_t row = blockIdx.x;
  const float* src;
  float* dst;
  const float* w;
  if (hh < H) {
    src = qg + row * int64_t(H) * 2 * D + int64_t(hh) * 2 * D;
    dst = q + row * int64_t(H) * D + int64_t(hh) * D;
    w = q_norm;
  } else {
    src = k + row * int64_t(KV) * D + int64_t(hh - H) * D;
    dst = const_cast<float*>(src);
    w = k_norm;
  }
  norm_rope_head(src, dst, w, rope + row * rd, D, rd, eps, buf, lane);
}

// h[row] = row tokens[row] of E, each element as dmat_at converts it. A bf16 row of 16-byte pieces (the 27B shape:
// 640) is read a piece a thread, every piece's load issued before any is stored: the table may live in pinned
// host memory (Engine::embedding_to_host), where the loop below, one element a thread at a time, waits one bus
// round trip an iteration (20 round trips a token).
constexpr int kEmbedPieces = 4;  // 16-byte pieces a thread at most (256 threads: rows to 8192 bf16 values)
__global__ void embed_kernel(DMat E, const int32_t* tokens, float* h) {
  pdl_wait();  // launch_k (device.cuh): nothing is read or written before the kernel ahead has completed
  const int64_t row = blockIdx.x, t = tokens[row], n = E.cols;
  float* out = h + row * n;
  const uint16_t* src = static_cast<const uint16_t*>(E.data) + t * n;
  if (E.type == WType::BF16 && n % 8 == 0 && n / 8 <= int64_t(kEmbedPieces) * blockDim.x &&
      (reinterpret_cast<uintptr_t>(src) & 15) == 0) {
    uint4 piece[kEmbedPieces];
#pragma unroll
    for (int k = 0; k < kEmbedPieces; k++) {
      const int64_t p = threadIdx.x + int64_t(k) * blockDim.x;
      if (p < n / 8) piece[k] = reinterpret_cast<const uint4*>(src)[p];
    }
#pragma unroll
    for (int k = 0; k < kEmbedPieces; k++) {
      const int64_t p = threadIdx.x + int64_t(k) * blockDim.x;
      if (p >= n / 8) break;
      const uint32_t w[4] = {piece[k].x, piece[k].y, piece[k].z, piece[k].w};
#pragma unroll
      for (int e = 0; e < 8; e++)
        out[8 * p + e] = hkv::f32_from_bf16(uint16_t(e % 2 ? w[e / 2] >> 16 : w[e / 2] & 0xffffu));
    }
    return;
  }
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) out[c] = dmat_at(E, t, c);
}

__global__ void silu_mul_kernel(float* a, const float* b, int64_t n) {
  pdl_wait();  // launch_k (device.cuh): nothing is read or written before the kernel ahead has completed
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) a[i] = hkv::silu_c(a[i]) * b[i];
}

__global__ void add_kernel(float* a, const float* b, int64_t n) {
  pdl_wait();  // launch_k (device.cuh): nothing is read or written before the kernel ahead has completed
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) a[i] = a[i] + b[i];
}

}  // namespace

namespace {
void launch_add_rmsnorm(float* h, const float* y, int64_t ldh, const float* w, bool plain, int64_t n, float eps,
                        int64_t rows, float* out, int64_t ldo, uint32_t* xq, cudaStream_t st, const Tuning& tu) {
  if (rows <= 0) return;
  if (xq && n % 32 != 0) throw std::runtime_error("add_rmsnorm_rows: MLX4 records need n a multiple of 32");
  const size_t smem = size_t(n + 4) * 4;
  if (smem > 48 * 1024) throw std::runtime_error("rmsnorm: rows above 12,284 floats");
  launch_k(tu.pdl_all, add_rmsnorm_kernel, dim3(unsigned(rows)), dim3(1024), smem, st, h, y, ldh, w, plain, int(n), eps,
           out, ldo, xq);
}
}  // namespace

void rmsnorm_rows(const float* x, int64_t ldx, const float* w, bool plain, int64_t n, float eps, int64_t rows,
                  float* out, int64_t ldo, cudaStream_t st, const Tuning& tu) {
  // no y: the kernel only reads the rows
  launch_add_rmsnorm(const_cast<float*>(x), nullptr, ldx, w, plain, n, eps, rows, out, ldo, nullptr, st, tu);
}

void add_rmsnorm_rows(float* h, const float* y, const float* w, int64_t n, float eps, int64_t rows, float* out,
                      uint32_t* xq, cudaStream_t st, const Tuning& tu) {
  launch_add_rmsnorm(h, y, n, w, false, n, eps, rows, out, n, xq, st, tu);
}

void silu_mul_xq(float* a, const float* b, int64_t n, uint32_t* xq, cudaStream_t st, const Tuning& tu) {
  if (n <= 0) return;
  if (n % 32 != 0) throw std::runtime_error("silu_mul_xq: n must be a multiple of 32");
  launch_k(tu.pdl_all, silu_mul_xq_kernel, dim3(unsigned((n + 255) / 256)), dim3(256), 0, st, a, b, n, xq);
}

void l2norm_heads(float* x, int64_t ld, int64_t N, int nheads, int dim, int nscaled, float scale, cudaStream_t st,
                  const Tuning& tu) {
  if (N <= 0) return;
  launch_k(tu.pdl_all, l2norm_heads_kernel, dim3(unsigned(N), unsigned(nheads)), dim3(32), 0, st, x, ld, dim, nscaled,
           scale);
}

void attn_prep(const float* qg, float* q, float* k, const float* q_norm, const float* k_norm, const float* rope,
               int64_t N, int H, int KV, int D, int rd, float eps, cudaStream_t st, const Tuning& tu) {
  if (N <= 0) return;
  if (D > 1024) throw std::runtime_error("attn_prep: head_dim above 1024");
  launch_k(tu.pdl_all, attn_prep_kernel, dim3(unsigned(N), unsigned(H + KV)), dim3(32), 0, st, qg, q, k, q_norm, k_norm,
           rope, H, KV, D, rd, eps);
}

void embed_rows(const DMat& E, const int32_t* tokens, int64_t N, float* h, cudaStream_t st, const Tuning& tu) {
  if (N <= 0) return;
  launch_k(tu.pdl_all, embed_kernel, dim3(unsigned(N)), dim3(256), 0, st, E, tokens, h);
}

void silu_mul(float* a, const float* b, int64_t n, cudaStream_t st, const Tuning& tu) {
  if (n <= 0) return;
  launch_k(tu.pdl_all, silu_mul_kernel, dim3(unsigned((n + 255) / 256)), dim3(256), 0, st, a, b, n);
}

void add_inplace(float* a, const float* b, int64_t n, cudaStream_t st, const Tuning& tu) {
  if (n <= 0) return;
  launch_k(tu.pdl_all, add_kernel, dim3(unsigned((n + 255) / 256)), dim3(256), 0, st, a, b, n);
}

}  // namespace hkv::cuda
