// The Gated DeltaNet mixer of the fast prefill path (cuda/prefill.h): NOT EXACT (docs/ARITHMETIC.md §10).
// The same function as the exact path's recurrence (cuda/deltanet.cu, reference/model.cpp deltanet_step),
// per value head h with key head h / (nv/nk), state S [dk][dv] carried in and out:
//   S' = exp(g_t)·S;  m = S'ᵀk_t;  δ_t = β_t·(v_t − m);  S = S' + k_t δ_tᵀ;  o_t = Sᵀq_t
// computed chunk by chunk (L = 64 tokens) in the WY form. Within a chunk, G_t = Σ_{s≤t} g_s (fp32 prefix
// sum in order), γ_t = exp(G_t), and with S₀ the state entering the chunk:
//   R_t   = β_t·(v_t − γ_t·S₀ᵀk_t)
//   δ_t   = R_t − Σ_{s<t} A[t][s]·δ_s,          A[t][s] = β_t·exp(G_t − G_s)·(k_t·k_s)   (forward substitution)
//   o_t   = γ_t·S₀ᵀq_t + Σ_{s≤t} exp(G_t − G_s)·(q_t·k_s)·δ_s
//   S_end = γ_L·S₀ + Σ_s exp(G_L − G_s)·k_s δ_sᵀ
// (every exponent is of a difference ≤ 0, so nothing overflows). The columns j of S are independent, so a
// block owns one value head and 32 columns (grid nv × dv/32), keeps its slice of S in shared memory across
// the chunks, and recomputes the chunk's k·k and q·k products (dk-long fma chains). fp32 throughout, expf.
//
// Around it, also in this file:
//   conv: the exact path's per-channel order (acc = fma chain of w[j]·window[j], then fma(w[K−1], x, acc),
//     silu_c), in place over the pass's rows; rows are cut in segments of 64, each segment's K−1-input window
//     (from the previous rows or the conv state) saved first so that segments run in parallel; the conv
//     state leaves as the last K−1 inputs.
//   q and k: l2norm_heads (norms.cu, the exact kernel), q × dk^−½.
//   β = sigmoid_c(b), g = (−exp_c(A_log))·softplus_c(a + dt_bias), as the exact path.
//   gated norm: one warp per (row, head): Σo² by lane chains and a xor butterfly, r = rsqrt_c(Σ/dv + eps),
//     out = bf16(((o·r)·w)·silu_c(z)).
#include <algorithm>
#include <stdexcept>
#include <string>

#include "cuda/check.h"
#include "cuda/device.cuh"
#include "cuda/prefill.h"

namespace hkv::cuda {
namespace {

constexpr int kMaxK = 8, kSeg = 64, kL = 64, kDvs = 32, kThreads = 128;

__device__ __forceinline__ float conv_input(const FastDeltaArgs& a, int64_t p, int64_t ch) {
  // p ≥ 0: row p of the pass; p < 0: the conv state (oldest first, its last entry is p = −1)
  return p >= 0 ? a.qkv[p * a.C + ch] : a.conv_state[ch * (a.K - 1) + (p + a.K - 1)];
}

// bnd[seg][ch][j] = the K−1 inputs before the segment's first row; slot nseg: the new conv state.
__global__ void conv_windows_kernel(FastDeltaArgs a, int64_t nseg) {
  const int64_t ch = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, seg = blockIdx.y;
  if (ch >= a.C) return;
  const int W = a.K - 1;
  const int64_t start = seg < nseg ? seg * kSeg : a.n;
  for (int j = 0; j < W; j++) a.bnd[(seg * a.C + ch) * W + j] = conv_input(a, start - W + j, ch);
}

__global__ void conv_segments_kernel(FastDeltaArgs a, int64_t nseg) {
  const int64_t ch = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, seg = blockIdx.y;
  if (ch >= a.C) return;
  const int K = a.K, W = K - 1;
  float s[kMaxK], wr[kMaxK];
#pragma unroll
  for (int j = 0; j < kMaxK; j++) {
    s[j] = j < W ? a.bnd[(seg * a.C + ch) * W + j] : 0.0f;
    wr[j] = j < K ? a.conv_w[ch * K + j] : 0.0f;
  }
  const int64_t r1 = a.n < (seg + 1) * kSeg ? a.n : (seg + 1) * kSeg;
  for (int64_t r = seg * kSeg; r < r1; r++) a.qkv[r * a.C + ch] = conv_step(s, wr, K, a.qkv[r * a.C + ch]);
  if (seg == 0)
    for (int j = 0; j < W; j++) a.conv_state[ch * W + j] = a.bnd[(nseg * a.C + ch) * W + j];
}

__global__ void gbeta_kernel(FastDeltaArgs a) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.n * a.nv) return;
  const int h = int(i % a.nv);
  a.a[i] = (-hkv::exp_c(a.A_log[h])) * hkv::softplus_c(a.a[i] + a.dt_bias[h]);
  a.b[i] = hkv::sigmoid_c(a.b[i]);
}

struct CoreArgs {
  int nk, nv, dv;
  int64_t n, C;
  const float *qkv, *g, *beta;
  float *S, *o;
};

template <int DK>
constexpr int core_smem_floats() {
  return 2 * kL * (DK + 1) + DK * (kDvs + 1) + 2 * kL * (kL + 1) + 3 * kL * (kDvs + 1) + 4 * kL;
}

template <int DK>
__global__ void __launch_bounds__(kThreads) chunked_core_kernel(CoreArgs a) {
  extern __shared__ float sm[];
  constexpr int KP = DK + 1, SP = kDvs + 1, LP = kL + 1;
  float* Ks = sm;              // [L][KP]   k_t of the chunk (0 past its end)
  float* Qs = Ks + kL * KP;    // [L][KP]   q_t
  float* Ss = Qs + kL * KP;    // [DK][SP]  this block's columns of S
  float* Am = Ss + DK * SP;    // [L][LP]   A[t][s], s < t
  float* Bm = Am + kL * LP;    // [L][LP]   exp(G_t − G_s)·(q_t·k_s), s ≤ t
  float* Vs = Bm + kL * LP;    // [L][SP]   v_t, then R_t, then δ_t
  float* KSs = Vs + kL * SP;   // [L][SP]   S₀ᵀk_t
  float* QSs = KSs + kL * SP;  // [L][SP]   S₀ᵀq_t
  float* Gs = QSs + kL * SP;   // [L]       G_t
  float* Bs = Gs + kL;         // [L]       β_t
  float* Eg = Bs + kL;         // [L]       exp(G_t)
  float* El = Eg + kL;         // [L]       exp(G_last − G_t)
  const int h = blockIdx.x, j0 = blockIdx.y * kDvs, tid = threadIdx.x;
  const int kh = h / (a.nv / a.nk), dv = a.dv;
  float* S = a.S + int64_t(h) * DK * dv + j0;
  for (int i = tid; i < DK * kDvs; i += kThreads) Ss[(i / kDvs) * SP + i % kDvs] = S[int64_t(i / kDvs) * dv + i % kDvs];
  const int64_t qoff = int64_t(kh) * DK, koff = int64_t(a.nk) * DK + int64_t(kh) * DK,
                voff = 2 * int64_t(a.nk) * DK + int64_t(h) * dv + j0;
  for (int64_t t0 = 0; t0 < a.n; t0 += kL) {
    const int Lc = a.n - t0 < kL ? int(a.n - t0) : kL;
    __syncthreads();  // the previous chunk is done with every buffer
    for (int i = tid; i < kL * DK; i += kThreads) {
      const int t = i / DK, c = i % DK;
      const float* row = a.qkv + (t0 + t) * a.C;
      Ks[t * KP + c] = t < Lc ? row[koff + c] : 0.0f;
      Qs[t * KP + c] = t < Lc ? row[qoff + c] : 0.0f;
    }
    for (int i = tid; i < kL * kDvs; i += kThreads) {
      const int t = i / kDvs, j = i % kDvs;
      Vs[t * SP + j] = t < Lc ? a.qkv[(t0 + t) * a.C + voff + j] : 0.0f;
    }
    if (tid < kL) {
      Gs[tid] = tid < Lc ? a.g[(t0 + tid) * a.nv + h] : 0.0f;
      Bs[tid] = tid < Lc ? a.beta[(t0 + tid) * a.nv + h] : 0.0f;
    }
    __syncthreads();
    if (tid == 0) {  // prefix sum in order; padded tokens add 0, so G stays at the last real token's
      float acc = 0.0f;
      for (int t = 0; t < kL; t++) Gs[t] = acc = acc + Gs[t];
    }
    __syncthreads();
    if (tid < kL) {
      Eg[tid] = expf(Gs[tid]);
      El[tid] = expf(Gs[kL - 1] - Gs[tid]);
    }
    // S₀ᵀk_t and S₀ᵀq_t: lane = column j, warps over t
    {
      const int j = tid & 31;
      for (int t = tid >> 5; t < kL; t += kThreads / 32) {
        float ks = 0.0f, qs = 0.0f;
        for (int i = 0; i < DK; i++) {
          const float sv = Ss[i * SP + j];
          ks = fmaf(Ks[t * KP + i], sv, ks);
          qs = fmaf(Qs[t * KP + i], sv, qs);
        }
        KSs[t * SP + j] = ks;
        QSs[t * SP + j] = qs;
      }
    }
    __syncthreads();
    // A and B over the lower triangle (s ≤ t): index → (t, s)
    for (int idx = tid; idx < kL * (kL + 1) / 2; idx += kThreads) {
      int t = int((sqrtf(8.0f * float(idx) + 1.0f) - 1.0f) * 0.5f);
      while (t * (t + 1) / 2 > idx) t--;
      while ((t + 1) * (t + 2) / 2 <= idx) t++;
      const int s = idx - t * (t + 1) / 2;
      float kk = 0.0f, qk = 0.0f;
      for (int i = 0; i < DK; i++) {
        const float ks = Ks[s * KP + i];
        kk = fmaf(Ks[t * KP + i], ks, kk);
        qk = fmaf(Qs[t * KP + i], ks, qk);
      }
      const float dec = expf(Gs[t] - Gs[s]);
      Am[t * LP + s] = s < t ? Bs[t] * dec * kk : 0.0f;
      Bm[t * LP + s] = dec * qk;
    }
    // R_t = β_t·(v_t − γ_t·S₀ᵀk_t)
    for (int i = tid; i < kL * kDvs; i += kThreads) {
      const int t = i / kDvs, j = i % kDvs;
      Vs[t * SP + j] = Bs[t] * (Vs[t * SP + j] - Eg[t] * KSs[t * SP + j]);
    }
    __syncthreads();
    // δ by forward substitution, one column a lane (warp 0)
    if (tid < 32) {
      const int j = tid;
      for (int t = 1; t < Lc; t++) {
        float acc = Vs[t * SP + j];
        for (int s = 0; s < t; s++) acc = fmaf(-Am[t * LP + s], Vs[s * SP + j], acc);
        Vs[t * SP + j] = acc;
      }
    }
    __syncthreads();
    // outputs o_t (t < Lc)
    for (int i = tid; i < Lc * kDvs; i += kThreads) {
      const int t = i / kDvs, j = i % kDvs;
      float acc = Eg[t] * QSs[t * SP + j];
      for (int s = 0; s <= t; s++) acc = fmaf(Bm[t * LP + s], Vs[s * SP + j], acc);
      a.o[(t0 + t) * int64_t(a.nv) * dv + int64_t(h) * dv + j0 + j] = acc;
    }
    // state: S = γ_L·S₀ + Σ_s exp(G_L − G_s)·k_s δ_sᵀ
    const float gl = Eg[kL - 1];
    for (int i = tid; i < DK * kDvs; i += kThreads) {
      const int r = i / kDvs, j = i % kDvs;
      float acc = gl * Ss[r * SP + j];
      for (int s = 0; s < Lc; s++) acc = fmaf(El[s] * Ks[s * KP + r], Vs[s * SP + j], acc);
      Ss[r * SP + j] = acc;
    }
  }
  __syncthreads();
  for (int i = tid; i < DK * kDvs; i += kThreads) S[int64_t(i / kDvs) * dv + i % kDvs] = Ss[(i / kDvs) * SP + i % kDvs];
}

template <int DK>
void launch_core(const CoreArgs& c, cudaStream_t st) {
  const size_t smem = size_t(core_smem_floats<DK>()) * 4;
  HKV_CUDA_CHECK(cudaFuncSetAttribute(chunked_core_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  chunked_core_kernel<DK><<<dim3(unsigned(c.nv), unsigned(c.dv / kDvs)), kThreads, smem, st>>>(c);
  HKV_CHECK_LAUNCH();
}

__global__ void gated_norm_bf16_kernel(FastDeltaArgs a) {
  const int64_t row = blockIdx.x;
  const int h = blockIdx.y, lane = threadIdx.x, dv = a.dv;
  const int64_t base = row * int64_t(a.nv) * dv + int64_t(h) * dv;
  const float* o = a.o + base;
  float acc = 0.0f;
  for (int j = lane; j < dv; j += 32) acc = hkv::fma_rn(o[j], o[j], acc);
  acc = warp_tree_sum(acc);
  const float r = hkv::rsqrt_c(acc / float(dv) + a.eps);
  for (int j = lane; j < dv; j += 32) {
    const float y = ((o[j] * r) * a.norm_w[j]) * hkv::silu_c(a.z[base + j]);
    a.out[row * a.ldo + int64_t(h) * dv + j] = hkv::bf16_from_f32(y);
  }
}

}  // namespace

size_t fast_delta_bnd_floats(int64_t n, int64_t C, int K) {
  const int64_t nseg = (n + kSeg - 1) / kSeg;
  return size_t((nseg + 1) * C * std::max(K - 1, 1));
}

void gated_delta_chunked(int nk, int nv, int dk, int dv, int64_t n, const float* qkv, int64_t C, const float* g,
                         const float* beta, float* S, float* o, cudaStream_t st) {
  if (n <= 0) return;
  if (dv % kDvs != 0) throw std::runtime_error("chunked deltanet: value head dim must be a multiple of 32");
  if (nk <= 0 || nv % nk != 0)
    throw std::runtime_error("chunked deltanet: value heads must be a multiple of key heads");
  CoreArgs c{nk, nv, dv, n, C, qkv, g, beta, S, o};
  switch (dk) {
    case 32:
      launch_core<32>(c, st);
      break;
    case 64:
      launch_core<64>(c, st);
      break;
    case 128:
      launch_core<128>(c, st);
      break;
    default:
      throw std::runtime_error("chunked deltanet: key head dim " + std::to_string(dk) + " (32, 64 or 128 supported)");
  }
}

void fast_deltanet(const FastDeltaArgs& a, cudaStream_t st) {
  if (a.n <= 0) return;
  if (a.K < 1 || a.K > kMaxK) throw std::runtime_error("fast deltanet: conv kernel size must be 1..8");
  const int64_t nseg = (a.n + kSeg - 1) / kSeg;
  const unsigned cb = unsigned((a.C + 255) / 256);
  if (a.K > 1) {
    conv_windows_kernel<<<dim3(cb, unsigned(nseg + 1)), 256, 0, st>>>(a, nseg);
    HKV_CHECK_LAUNCH();
  }
  conv_segments_kernel<<<dim3(cb, unsigned(nseg)), 256, 0, st>>>(a, nseg);
  HKV_CHECK_LAUNCH();
  l2norm_heads(a.qkv, a.C, a.n, 2 * a.nk, a.dk, a.nk, a.q_scale, st);
  gbeta_kernel<<<unsigned((a.n * a.nv + 255) / 256), 256, 0, st>>>(a);
  HKV_CHECK_LAUNCH();
  gated_delta_chunked(a.nk, a.nv, a.dk, a.dv, a.n, a.qkv, a.C, a.a, a.b, a.S, a.o, st);
  gated_norm_bf16_kernel<<<dim3(unsigned(a.n), unsigned(a.nv)), 32, 0, st>>>(a);
  HKV_CHECK_LAUNCH();
}

}  // namespace hkv::cuda
