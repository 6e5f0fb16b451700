// Kernels of the fast prefill path (cuda/prefill.h): NOT EXACT, outside docs/ARITHMETIC.md's contract (§10).
//
// dequant_rows_bf16: one thread per output element; MLX4 element (r, c) = fma(scale, q, bias) in fp32 (the
//   oracle's Matrix::at, so the fp32 value is exact to the reference) then bf16_from_f32 (nearest even).
// rmsnorm_bf16: one block of 256 threads per row; thread i sums x_j² for j = i, i+256, … (fma chain), the
//   block combines the 256 partial sums by a shared-memory halving tree; r = rsqrt_c(ss/n + eps);
//   y_j = bf16((x_j·r)·(1 + w_j)).
// silu_mul_bf16: y = bf16(silu_c(g)·u), elementwise.
// gemm_bf16_xwt: one cublasGemmEx (bf16 A and B, fp32 C, CUBLAS_COMPUTE_32F): cuBLAS's order.
// fast_attention: per KV head: q_prep (rotate, round to bf16), then per key block: kv_decode (stored value
//   s_g·u_j in fp32, rounded to bf16), S = scale·Qb·Kᵀ (cuBLAS), softmax_update (one warp per row: block
//   maximum over the causal keys, m' = max(m, ·), α = expf(m − m'), p = bf16(expf(s − m')) (0 past the
//   causal limit), l = α·l + Σ float(p) (lane sums then a xor butterfly), O row ×= α), O += P·V (cuBLAS,
//   beta 1); finally attn_finish: out = O/l, warp_wht32 back (q4h), × sigmoid_c(gate), bf16.
#include <algorithm>
#include <cmath>
#include <cstdlib>
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

// MLX4 rows r0 … r0 + gridDim.y − 1 (the default since session 5; gpu_prefill checks its bytes): one thread a 32-bit
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

unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

// ---- attention ----------------------------------------------------------------------------------

// Scratch layout for M = max_rows·G query rows and key block B.
struct AttnScratch {
  uint16_t *qb, *kb, *vb, *p;
  float *o, *m, *l, *s;
};
size_t al256(size_t n) { return (n + 255) & ~size_t(255); }
AttnScratch carve(void* base, int64_t M, int D, int B) {
  char* p = static_cast<char*>(base);
  AttnScratch s;
  s.qb = reinterpret_cast<uint16_t*>(p), p += al256(size_t(M) * D * 2);
  s.o = reinterpret_cast<float*>(p), p += al256(size_t(M) * D * 4);
  s.m = reinterpret_cast<float*>(p), p += al256(size_t(M) * 4);
  s.l = reinterpret_cast<float*>(p), p += al256(size_t(M) * 4);
  s.s = reinterpret_cast<float*>(p), p += al256(size_t(M) * B * 4);
  s.p = reinterpret_cast<uint16_t*>(p), p += al256(size_t(M) * B * 2);
  s.kb = reinterpret_cast<uint16_t*>(p), p += al256(size_t(B) * D * 2);
  s.vb = reinterpret_cast<uint16_t*>(p), p += al256(size_t(B) * D * 2);
  return s;
}

// Row r = t·G + g of Qb: query head kvh·G + g of pass row t, rotated (q4h) and rounded; O, m, l reset.
// grid (n·G), block D (a multiple of 32: warp w holds group w of 32 elements).
__global__ void q_prep_kernel(FastAttnArgs a, int kvh, int G, AttnScratch s, bool rotated) {
  const int64_t r = blockIdx.x;
  const int64_t t = r / G;
  const int g = int(r % G), d = threadIdx.x, D = a.D;
  float v = a.q[t * a.ldq + int64_t(kvh * G + g) * D + d];
  if (rotated) v = warp_wht32(v, d & 31);
  s.qb[r * D + d] = hkv::bf16_from_f32(v);
  s.o[r * D + d] = 0.0f;
  if (d == 0) {
    s.m[r] = -INFINITY;
    s.l[r] = 0.0f;
  }
}

// K and V rows [k0, k0 + nb) of KV head kvh as bf16 [nb][D]; grid (nb, 2), block D.
template <KvKind F>
__global__ void kv_decode_kernel(FastAttnArgs a, int kvh, int64_t k0, AttnScratch s) {
  const int64_t j = blockIdx.x;
  const int d = threadIdx.x;
  const bool is_v = blockIdx.y == 1;
  const uint8_t* row = (is_v ? a.v_cache : a.k_cache) + (size_t(k0 + j) * a.KV + kvh) * a.row_bytes;
  (is_v ? s.vb : s.kb)[j * a.D + d] = hkv::bf16_from_f32(value_at<F>(row, a.D, d));
}

// One warp per row r in [r_lo, M): the online-softmax step of key block [k0, k0 + nb).
__global__ void softmax_update_kernel(AttnScratch s, int64_t r_lo, int64_t M, int G, int64_t p0, int64_t k0, int nb,
                                      int D) {
  const int64_t r = r_lo + (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (r >= M) return;
  const int64_t t = r / G;
  const int64_t vis = p0 + t + 1 - k0;
  const int limit = vis < nb ? int(vis) : nb;  // keys k0 … p0+t are visible
  const float* srow = s.s + r * nb;
  uint16_t* prow = s.p + r * nb;
  float bmax = -INFINITY;
  for (int j = lane; j < limit; j += 32) bmax = fmaxf(bmax, srow[j]);
  for (int off = 16; off >= 1; off /= 2) bmax = fmaxf(bmax, __shfl_xor_sync(kFull, bmax, off));
  const float m_old = s.m[r];
  const float m_new = fmaxf(m_old, bmax);
  float sum = 0.0f;
  for (int j = lane; j < nb; j += 32) {
    uint16_t p = 0;
    if (j < limit) {
      p = hkv::bf16_from_f32(expf(srow[j] - m_new));
      sum += hkv::f32_from_bf16(p);
    }
    prow[j] = p;
  }
  for (int off = 16; off >= 1; off /= 2) sum += __shfl_xor_sync(kFull, sum, off);
  const float alpha = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
  if (alpha != 1.0f)
    for (int d = lane; d < D; d += 32) s.o[r * D + d] *= alpha;
  if (lane == 0) {
    s.m[r] = m_new;
    s.l[r] = s.l[r] * alpha + sum;
  }
}

__global__ void attn_finish_kernel(FastAttnArgs a, int kvh, int G, AttnScratch s, bool rotated) {
  const int64_t r = blockIdx.x;
  const int64_t t = r / G;
  const int g = int(r % G), d = threadIdx.x, D = a.D, h = kvh * G + g;
  float v = s.o[r * D + d] / s.l[r];
  if (rotated) v = warp_wht32(v, d & 31);
  if (a.gate) v = v * hkv::sigmoid_c(a.gate[t * a.ldg + int64_t(h) * a.gate_stride + d]);
  a.out[t * a.ldo + int64_t(h) * D + d] = hkv::bf16_from_f32(v);
}

}  // namespace

// MLX4 rows by dequant_mlx4_kernel (a code word a thread) unless HKV_DEQUANT_WORDS=0 or
// set_dequant_mlx4_words(false) (then the element kernel; gpu_prefill checks both give the same bytes).
namespace {
int g_dequant_words = -1;
bool dequant_mlx4_words() {
  if (g_dequant_words < 0) {
    const char* e = std::getenv("HKV_DEQUANT_WORDS");
    g_dequant_words = !(e && std::string(e) == "0");
  }
  return g_dequant_words == 1;
}
}  // namespace
void set_dequant_mlx4_words(bool on) { g_dequant_words = on ? 1 : 0; }

void dequant_rows_bf16(const DMat& W, int64_t r0, int64_t n, uint16_t* out, cudaStream_t st) {
  if (n <= 0) return;
  if (r0 < 0 || r0 + n > W.rows) throw std::runtime_error("dequant_rows_bf16: rows out of range");
  if (W.type == WType::MLX4 && (W.group <= 0 || W.cols % W.group != 0 || W.cols % 8 != 0))
    throw std::runtime_error("dequant_rows_bf16: MLX4 columns must be a multiple of the group and of 8");
  if (W.type == WType::MLX4 && dequant_mlx4_words() && (reinterpret_cast<uintptr_t>(out) & 15) == 0) {
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

int fast_attn_key_block(int64_t max_rows, int G, int D, size_t budget) {
  const size_t M = size_t(max_rows) * size_t(G);
  const size_t fixed = M * size_t(D) * 6 + M * 8;
  size_t b = budget > fixed ? (budget - fixed) / (M * 6 + size_t(D) * 4) : 0;
  b = b / 64 * 64;
  return int(std::clamp<size_t>(b, 64, 4096));
}

size_t fast_attn_scratch_bytes(int64_t max_rows, int G, int D, int key_block) {
  const int64_t M = max_rows * G;
  const int64_t B = key_block;
  return al256(size_t(M) * D * 2) + al256(size_t(M) * D * 4) + 2 * al256(size_t(M) * 4) + al256(size_t(M * B) * 4) +
         al256(size_t(M * B) * 2) + 2 * al256(size_t(B) * D * 2);
}

void fast_attention(cublasHandle_t h, const FastAttnArgs& a, cudaStream_t st) {
  if (a.n <= 0) return;
  if (a.D % 32 != 0 || a.D > 1024) throw std::runtime_error("fast attention: head_dim must be a multiple of 32");
  if (a.H % a.KV != 0) throw std::runtime_error("fast attention: heads must be a multiple of kv heads");
  if (a.n > a.max_rows || a.key_block < 1) throw std::runtime_error("fast attention: scratch too small for the pass");
  if (a.kind == KvKind::F32) throw std::invalid_argument("fast attention: the f32 cache is an oracle-only ablation");
  const int G = a.H / a.KV, D = a.D, B = a.key_block;
  const int64_t M = a.n * G, n_end = a.p0 + a.n;
  const bool rotated = a.kind == KvKind::Q4H;
  const float scale = float(1.0 / std::sqrt(double(D)));
  const float one = 1.0f, zero = 0.0f;
  AttnScratch s = carve(a.scratch, a.max_rows * G, D, B);
  for (int kvh = 0; kvh < a.KV; kvh++) {
    q_prep_kernel<<<unsigned(M), unsigned(D), 0, st>>>(a, kvh, G, s, rotated);
    HKV_CHECK_LAUNCH();
    for (int64_t k0 = 0; k0 < n_end; k0 += B) {
      const int nb = int(std::min<int64_t>(B, n_end - k0));
      const int64_t t_min = std::max<int64_t>(0, k0 - a.p0);  // rows before it see none of this block
      const int64_t r_lo = t_min * G, rows = M - r_lo;
      switch (a.kind) {
        case KvKind::BF16:
          kv_decode_kernel<KvKind::BF16><<<dim3(unsigned(nb), 2), unsigned(D), 0, st>>>(a, kvh, k0, s);
          break;
        case KvKind::FP8:
          kv_decode_kernel<KvKind::FP8><<<dim3(unsigned(nb), 2), unsigned(D), 0, st>>>(a, kvh, k0, s);
          break;
        default:
          kv_decode_kernel<KvKind::Q4H><<<dim3(unsigned(nb), 2), unsigned(D), 0, st>>>(a, kvh, k0, s);
          break;
      }
      HKV_CHECK_LAUNCH();
      // Row-major S[rows][nb] = scale · Qb[rows][D] · K[nb][D]ᵀ: column-major Sᵀ[nb][rows] = K · Qbᵀ with
      // the row-major K buffer read transposed (column-major D × nb, ld D).
      HKV_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, nb, int(rows), D, &scale, s.kb, CUDA_R_16BF, D,
                                    s.qb + r_lo * D, CUDA_R_16BF, D, &zero, s.s + r_lo * nb, CUDA_R_32F, nb,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      softmax_update_kernel<<<blocks_for(rows * 32, 256), 256, 0, st>>>(s, r_lo, M, G, a.p0, k0, nb, D);
      HKV_CHECK_LAUNCH();
      // Row-major O[rows][D] += P[rows][nb] · V[nb][D]: column-major Oᵀ[D][rows] += Vᵀ[D][nb] · Pᵀ[nb][rows].
      HKV_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, D, int(rows), nb, &one, s.vb, CUDA_R_16BF, D,
                                    s.p + r_lo * nb, CUDA_R_16BF, nb, &one, s.o + r_lo * D, CUDA_R_32F, D,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    attn_finish_kernel<<<unsigned(M), unsigned(D), 0, st>>>(a, kvh, G, s, rotated);
    HKV_CHECK_LAUNCH();
  }
}

FastPrefillState::~FastPrefillState() {
  if (blas) cublasDestroy(blas);
  device_free(mem);
}

}  // namespace hkv::cuda
