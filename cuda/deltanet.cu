// The Gated DeltaNet mixer after its projections, mirroring reference/model.cpp linear_attention():
//   conv: per channel, acc = fma chain of w[j]·state[j] (j < K−1, oldest first) from 0, then
//         fma(w[K−1], x, acc); silu_c; the window shifts by one (tokens of a sequence in order);
//   q, k: l2norm per key head (norms.cu), q then × fp32(dk^−1/2);
//   per value head: β = sigmoid_c(b), g = −exp_c(A_log)·softplus_c(a + dt_bias), then deltanet_step():
//         per column j: S[i][j] ×= exp_c(g), m = fma chain of S[i][j]·k[i] over i; δ = β·(v[j] − m);
//         S[i][j] = fma(k[i], δ, S[i][j]), o = fma chain of S[i][j]·q[i] over i;
//         then rmsnorm_plain(o, w) and × silu_c(z).
// The columns of S are independent, so thread j owns column j (in registers) for all of a sequence's
// tokens of the step; only the chains over i are sequential, exactly as in the oracle.
// Launch: conv one thread per (channel, sequence); recurrence one block of dv threads per (sequence,
// value head), dk a template parameter (32, 64, 128).
#include <cmath>

#include "cuda/check.h"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace hkv::cuda {
namespace {

constexpr int kMaxK = 8;

__global__ void conv_kernel(DeltaArgs a) {
  pdl_wait();  // launch_k (device.cuh): nothing is read or written before the kernel ahead has completed
  const int64_t ch = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int b = blockIdx.y;
  if (ch >= a.C) return;
  const int K = a.K;
  float* st = a.conv_state[b] + ch * (K - 1);
  const float* w = a.conv_w + ch * K;
  float s[kMaxK], wr[kMaxK];
#pragma unroll
  for (int j = 0; j < kMaxK; j++) {
    s[j] = j < K - 1 ? st[j] : 0.0f;
    wr[j] = j < K ? w[j] : 0.0f;
  }
  const int first = a.seq_first[b], rows = a.seq_rows[b];
  for (int t = 0; t < rows; t++) {
    const int64_t row = first + t;
    a.conv_out[row * a.C + ch] = conv_step(s, wr, K, a.qkv[row * a.C + ch]);
  }
#pragma unroll
  for (int j = 0; j < kMaxK - 1; j++)
    if (j < K - 1) st[j] = s[j];
}

// deltanet_step for column j of S (s[i] = S[i][j]); returns o[j].
template <int DK>
__device__ __forceinline__ float delta_column(float (&s)[DK], const float* q_s, const float* k_s, float vj, float beta,
                                              float decay) {
  float mj = 0.0f;
#pragma unroll
  for (int i = 0; i < DK; i++) {
    s[i] = s[i] * decay;
    mj = hkv::fma_rn(s[i], k_s[i], mj);
  }
  const float delta = beta * (vj - mj);
  float oj = 0.0f;
#pragma unroll
  for (int i = 0; i < DK; i++) {
    s[i] = hkv::fma_rn(k_s[i], delta, s[i]);
    oj = hkv::fma_rn(s[i], q_s[i], oj);
  }
  return oj;
}

template <int DK>
__global__ void recurrence_kernel(DeltaArgs a) {
  pdl_wait();  // launch_k (device.cuh): nothing is read or written before the kernel ahead has completed
  __shared__ float q_s[DK], k_s[DK], o_s[1024];
  __shared__ float r_s;
  const int b = blockIdx.x, h = blockIdx.y, j = threadIdx.x, dv = a.dv;
  const int kh = h / (a.nv / a.nk);
  float* S = a.S[b] + int64_t(h) * DK * dv;
  float s[DK];
#pragma unroll
  for (int i = 0; i < DK; i++) s[i] = S[int64_t(i) * dv + j];
  const float A = hkv::exp_c(a.A_log[h]), dt = a.dt_bias[h], w = a.norm_w[j];
  const int first = a.seq_first[b], rows = a.seq_rows[b];
  for (int t = 0; t < rows; t++) {
    const int64_t row = first + t;
    const float* cv = a.conv_out + row * a.C;
    for (int i = j; i < DK; i += dv) {
      q_s[i] = cv[int64_t(kh) * DK + i];
      k_s[i] = cv[int64_t(a.nk) * DK + int64_t(kh) * DK + i];
    }
    __syncthreads();
    const float beta = hkv::sigmoid_c(a.b[row * a.nv + h]);
    const float g = -A * hkv::softplus_c(a.a[row * a.nv + h] + dt);
    const float vj = cv[2 * int64_t(a.nk) * DK + int64_t(h) * dv + j];
    const float oj = delta_column<DK>(s, q_s, k_s, vj, beta, hkv::exp_c(g));
    o_s[j] = oj;
    __syncthreads();
    if (j < 32) {
      const float ss = warp_sum_squares(o_s, dv, j);
      if (j == 0) r_s = hkv::rsqrt_c(ss / float(dv) + a.eps);
    }
    __syncthreads();
    float out = (oj * r_s) * w;
    out = out * hkv::silu_c(a.z[row * int64_t(a.nv) * dv + int64_t(h) * dv + j]);
    a.core[row * int64_t(a.nv) * dv + int64_t(h) * dv + j] = out;
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < DK; i++) S[int64_t(i) * dv + j] = s[i];
}

template <int DK>
__global__ void step_heads_kernel(float* S, const float* q, const float* k, const float* v, const float* beta,
                                  const float* g, int dv, float* o) {
  __shared__ float q_s[DK], k_s[DK];
  const int h = blockIdx.x, j = threadIdx.x;
  for (int i = j; i < DK; i += dv) {
    q_s[i] = q[h * DK + i];
    k_s[i] = k[h * DK + i];
  }
  __syncthreads();
  float* Sh = S + int64_t(h) * DK * dv;
  float s[DK];
#pragma unroll
  for (int i = 0; i < DK; i++) s[i] = Sh[int64_t(i) * dv + j];
  o[h * dv + j] = delta_column<DK>(s, q_s, k_s, v[h * dv + j], beta[h], hkv::exp_c(g[h]));
#pragma unroll
  for (int i = 0; i < DK; i++) Sh[int64_t(i) * dv + j] = s[i];
}

}  // namespace

void deltanet(const DeltaArgs& a, cudaStream_t st) {
  if (a.N <= 0 || a.B <= 0) return;
  if (a.K < 1 || a.K > kMaxK) throw std::runtime_error("deltanet: conv kernel size must be 1..8");
  if (a.dv % 32 != 0 || a.dv > 1024) throw std::runtime_error("deltanet: value head dim must be a multiple of 32");
  launch_k(conv_kernel, dim3(unsigned((a.C + 255) / 256), unsigned(a.B)), dim3(256), 0, st, a);
  l2norm_heads(a.conv_out, a.C, a.N, 2 * a.nk, a.dk, a.nk, a.q_scale, st);
  dim3 grid(unsigned(a.B), unsigned(a.nv));
  switch (a.dk) {
    case 32:
      launch_k(recurrence_kernel<32>, grid, dim3(unsigned(a.dv)), 0, st, a);
      break;
    case 64:
      launch_k(recurrence_kernel<64>, grid, dim3(unsigned(a.dv)), 0, st, a);
      break;
    case 128:
      launch_k(recurrence_kernel<128>, grid, dim3(unsigned(a.dv)), 0, st, a);
      break;
    default:
      throw std::runtime_error("deltanet: key head dim " + std::to_string(a.dk) + " (32, 64 or 128 supported)");
  }
  HKV_CHECK_LAUNCH();
}

void deltanet_step_heads(float* S, const float* q, const float* k, const float* v, const float* beta, const float* g,
                         int nv, int dk, int dv, float* o, cudaStream_t st) {
  switch (dk) {
    case 32:
      step_heads_kernel<32><<<unsigned(nv), unsigned(dv), 0, st>>>(S, q, k, v, beta, g, dv, o);
      break;
    case 64:
      step_heads_kernel<64><<<unsigned(nv), unsigned(dv), 0, st>>>(S, q, k, v, beta, g, dv, o);
      break;
    case 128:
      step_heads_kernel<128><<<unsigned(nv), unsigned(dv), 0, st>>>(S, q, k, v, beta, g, dv, o);
      break;
    default:
      throw std::runtime_error("deltanet_step_heads: dk must be 32, 64 or 128");
  }
  HKV_CHECK_LAUNCH();
}

}  // namespace hkv::cuda
