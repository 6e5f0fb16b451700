// The Gated DeltaNet mixer of the fast prefill path (cuda/prefill.h): NOT EXACT (docs/ARITHMETIC.md §10).
// The same function as the exact path's recurrence (cuda/deltanet.cu, reference/model.cpp deltanet_step),
// per value head h with key head h / (nv/nk), state S [dk][dv] carried in and out:
//   S' = exp(g_t)·S;  m = S'ᵀk_t;  δ_t = β_t·(v_t − m);  S = S' + k_t δ_tᵀ;  o_t = Sᵀq_t
// computed chunk by chunk (L = 64 tokens) in the WY form. Within a chunk, G_t = Σ_{s≤t} g_s (fp32 prefix
// sum in order; the padded tokens of a short last chunk add 0 and have β = 0, k = q = 0), γ_t = exp(G_t),
// and with S₀ the state entering the chunk and A[t][s] = β_t·exp(G_t − G_s)·(k_t·k_s) for s < t (else 0):
//   δ_t   = β_t·(v_t − γ_t·S₀ᵀk_t) − Σ_{s<t} A[t][s]·δ_s,   i.e.   δ = U − W·S₀   with
//           U = (I + A)⁻¹·diag(β)·V  [L×dv]   and   W = (I + A)⁻¹·diag(β·γ)·K  [L×dk]   (no state in either)
//   o_t   = γ_t·S₀ᵀq_t + Σ_{s≤t} Bm[t][s]·δ_s,   Bm[t][s] = exp(G_t − G_s)·(q_t·k_s)   (s ≤ t)
//   S_end = γ_L·S₀ + Σ_s exp(G_L − G_s)·k_s δ_sᵀ   (G_L: the chunk's last G)
// (every exponent is of a difference ≤ 0, so nothing overflows). fp32 throughout (fmaf, expf). Two kernels:
//   wy_prep (grid nchunks × nk, 256 threads; no state, all chunks in parallel): a block loads one key head's
//     k and q of the chunk and forms k_t·k_s and q_t·k_s for all 64×64 pairs (4×4 register tiles, dk-long
//     fma chains); then for each of the nv/nk value heads of that key head, in order: G by a serial prefix
//     sum; γ_t and exp(G_L − G_t) to scratch E; Bm to scratch (0 above the diagonal); Aᵀ to shared memory;
//     W and U by forward substitution of (I + A)·X = [β·γ·K | β·V], one column of X a thread, rows in
//     blocks of 16 held in registers: first the earlier rows' part (read back from shared memory, Aᵀ as
//     broadcast float4s, in order of s), then the block's own triangle. W goes to scratch [chunk][h][L][dk];
//     U to o's rows of the chunk (chunk_scan reads it there and overwrites it with the outputs, each entry by
//     the same thread).
//   chunk_scan (grid dv/16 × nv, 128 threads, 3 blocks a multiprocessor; sequential over the chunks): a block
//     owns 16 columns of one head's S, a thread a (dk/32)-row × 4-column tile of it in registers, mirrored in
//     shared memory for the products. Per chunk, stages fed by a 3-slot cp.async pipeline, one barrier each:
//       dk/32 stages: [W; q] (128 rows × 32 of dk) · S₀ (32 × 16), a thread 4 rows × 4 columns (rows r,
//         r + 32, r + 64, r + 96), accumulated over the stages; after the last, δ = U − W·S₀ (0 past the
//         chunk's end) and exp(G_L − G_s)·δ_s to shared memory; q_t·S₀ stays in registers.
//       1 stage: o_t = γ_t·(q_t·S₀) + Σ_{s≤t} Bm[t][s]·δ_s (2 rows × 4 columns a thread), stored.
//       2 stages (s < 32, then s ≥ 32): S = γ_L·S₀ + Σ_s k_s·(exp(G_L − G_s)·δ_s)ᵀ on the register tile; then
//         the tile to shared memory for the next chunk.
//   Scratch: gated_delta_chunked_scratch_floats(n, nv, dk) (W, Bm and E of every chunk and value head).
//
// Around it, also in this file:
//   conv: the exact path's per-channel order (acc = fma chain of w[j]·window[j], then fma(w[K−1], x, acc),
//     silu_c), in place over the pass's rows; rows are cut in segments of 64, each segment's K−1-input window
//     (from the previous rows or the conv state) saved first so that segments run in parallel; the conv
//     state leaves as the last K−1 inputs.
//   q and k: l2norm_heads (norms.cu, the exact kernel), q × dk^−½.
//   β = sigmoid_c(b), g = (−exp_c(A_log))·softplus_c(a + dt_bias), as the exact path.
//   gated norm: one warp per (row, head), 8 a block: Σo² by lane chains and a xor butterfly, r = rsqrt_c(Σ/dv + eps),
//     out = bf16(((o·r)·w)·silu_c(z)).
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/check.h"
#include "cuda/device.cuh"
#include "cuda/prefill.h"

namespace hkv::cuda {
namespace {

constexpr int kMaxK = 8, kSeg = 64, kL = 64;

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

// ---- the chunked core (wy_prep, chunk_scan) ----------------------------------------------------------
constexpr int kT1 = 256;             // wy_prep threads
constexpr int kT2 = 128;             // chunk_scan threads
constexpr int kJ = 16;               // columns of S a chunk_scan block owns
constexpr int kAS = 36;              // row stride of a [W; q] slot (32 floats and 4 of padding)
constexpr int kBS = kL + 4;          // row stride of the Bm slot
constexpr int kSlot = 2 * kL * kAS;  // floats a pipeline slot (the largest stage: 128 rows of 36)
constexpr int kNS = 3;               // pipeline slots
static_assert(kL == 64, "the stage shapes assume 64-token chunks");

struct CoreArgs {
  int nk, nv, dv, nchunks;
  int64_t n, C;
  const float *qkv, *g, *beta;
  float *S, *o;
  float *W, *Bm, *E;  // scratch: [nchunks][nv][kL][dk], [nchunks][nv][kL][kL], [nchunks][nv][2·kL]
};

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void st4(float* p, const float (&v)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ float comp(const float4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
// acc[j] += a·b[j]
__device__ __forceinline__ void fma4(float (&acc)[4], float a, const float4& b) {
  acc[0] = fmaf(a, b.x, acc[0]);
  acc[1] = fmaf(a, b.y, acc[1]);
  acc[2] = fmaf(a, b.z, acc[2]);
  acc[3] = fmaf(a, b.w, acc[3]);
}
// acc + a·b over 4 components, in order
__device__ __forceinline__ float dot4(const float4& a, const float4& b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}

// wy_prep's shared memory: a region for k and q (then X), k·k, q·k, Aᵀ, G, β, γ.
size_t prep_smem_bytes(int dk, int dv) {
  const int region = std::max(2 * kL * (dk + 4), kL * (dk + dv));
  return size_t(region + 2 * kL * (kL + 1) + kL * kL + 3 * kL) * 4;
}

template <int DK>
__global__ void __launch_bounds__(kT1) wy_prep_kernel(CoreArgs a) {
  extern __shared__ float4 sm4[];
  float* sm = reinterpret_cast<float*>(sm4);
  constexpr int KP = DK + 4, LP = kL + 1;
  const int dv = a.dv, ncol = DK + dv;
  const int region = 2 * kL * KP > kL * ncol ? 2 * kL * KP : kL * ncol;
  float* Ks = sm;            // [kL][KP]  k_t (0 past the chunk's end)
  float* Qs = sm + kL * KP;  // [kL][KP]  q_t
  float* X = sm;             // [kL][ncol] the solved columns of W | U (over Ks, Qs once the products are done)
  float* KK = sm + region;   // [kL][LP]  k_t·k_s
  float* QK = KK + kL * LP;  // [kL][LP]  q_t·k_s
  float* At = QK + kL * LP;  // [kL][kL]  Aᵀ: At[s][t] = A[t][s]
  float* Gs = At + kL * kL;  // [kL]      G_t
  float* Bs = Gs + kL;       // [kL]      β_t
  float* Eg = Bs + kL;       // [kL]      γ_t
  const int c = blockIdx.x, kh = blockIdx.y, tid = threadIdx.x, ratio = a.nv / a.nk;
  const int64_t t0 = int64_t(c) * kL;
  const int Lc = a.n - t0 < kL ? int(a.n - t0) : kL;
  const int64_t qoff = int64_t(kh) * DK, koff = int64_t(a.nk) * DK + qoff;
  for (int e = tid; e < kL * (DK / 4); e += kT1) {
    const int t = e / (DK / 4), p = 4 * (e % (DK / 4));
    float4 kv = make_float4(0.0f, 0.0f, 0.0f, 0.0f), qv = kv;
    if (t < Lc) {
      const float* row = a.qkv + (t0 + t) * a.C;
      qv = ld4(row + qoff + p);
      kv = ld4(row + koff + p);
    }
    *reinterpret_cast<float4*>(Ks + t * KP + p) = kv;
    *reinterpret_cast<float4*>(Qs + t * KP + p) = qv;
  }
  __syncthreads();
  {  // k·k and q·k: the thread's rows t = tg + 16·m, columns s = sg + 16·m'
    const int tg = tid & 15, sg = tid >> 4;
    float kk[4][4], qk[4][4];
#pragma unroll
    for (int m = 0; m < 4; m++)
#pragma unroll
      for (int m2 = 0; m2 < 4; m2++) kk[m][m2] = qk[m][m2] = 0.0f;
#pragma unroll 2
    for (int i = 0; i < DK; i += 4) {
      float4 kt[4], qt[4], ks[4];
#pragma unroll
      for (int m = 0; m < 4; m++) {
        kt[m] = ld4(Ks + (tg + 16 * m) * KP + i);
        qt[m] = ld4(Qs + (tg + 16 * m) * KP + i);
        ks[m] = ld4(Ks + (sg + 16 * m) * KP + i);
      }
#pragma unroll
      for (int m = 0; m < 4; m++)
#pragma unroll
        for (int m2 = 0; m2 < 4; m2++) {
          kk[m][m2] = dot4(kt[m], ks[m2], kk[m][m2]);
          qk[m][m2] = dot4(qt[m], ks[m2], qk[m][m2]);
        }
    }
#pragma unroll
    for (int m = 0; m < 4; m++)
#pragma unroll
      for (int m2 = 0; m2 < 4; m2++) {
        KK[(tg + 16 * m) * LP + sg + 16 * m2] = kk[m][m2];
        QK[(tg + 16 * m) * LP + sg + 16 * m2] = qk[m][m2];
      }
  }
  __syncthreads();  // Ks and Qs are dead from here: X takes their place
  // g and β of the next head, and the first 16 rows of the thread's first column of [K | V], are loaded a step
  // ahead (registers) so that their latency passes under the work before them
  float gn = 0.0f, bn = 0.0f;
  if (tid < Lc) gn = a.g[(t0 + tid) * a.nv + kh * ratio], bn = a.beta[(t0 + tid) * a.nv + kh * ratio];
  const int64_t voff = 2 * int64_t(a.nk) * DK;
  auto column = [&](int h, int col) {  // column col of [K | V] (value head h) at the chunk's row 0
    return a.qkv + t0 * a.C + (col < DK ? koff + col : voff + int64_t(h) * dv + (col - DK));
  };
  auto load16 = [&](const float* src, int b, float(&raw)[16]) {
#pragma unroll
    for (int u = 0; u < 16; u++) raw[u] = b + u < Lc ? src[(b + u) * a.C] : 0.0f;
  };
  for (int h = kh * ratio; h < (kh + 1) * ratio; h++) {
    const int64_t ch = int64_t(c) * a.nv + h;
    float raw[16];
    if (tid < ncol) load16(column(h, tid), 0, raw);
    if (tid < kL) {
      Gs[tid] = gn, Bs[tid] = bn;
      if (h + 1 < (kh + 1) * ratio && tid < Lc)
        gn = a.g[(t0 + tid) * a.nv + h + 1], bn = a.beta[(t0 + tid) * a.nv + h + 1];
    }
    __syncthreads();
    if (tid == 0) {  // prefix sum in order; padded tokens add 0, so G stays at the last real token's
      float acc = 0.0f;
      for (int t = 0; t < kL; t++) Gs[t] = acc = acc + Gs[t];
    }
    __syncthreads();
    if (tid < kL) {
      const float ga = expf(Gs[tid]);
      Eg[tid] = ga;
      a.E[ch * 2 * kL + tid] = ga;
      a.E[ch * 2 * kL + kL + tid] = expf(Gs[kL - 1] - Gs[tid]);
    }
    float* Bg = a.Bm + ch * kL * kL;
    for (int idx = tid; idx < kL * kL; idx += kT1) {
      const int r = idx / kL, col = idx % kL;
      // Aᵀ[r][col] = A[col][r] = β_col·exp(G_col − G_r)·(k_col·k_r) for r < col; Bm[r][col] for col ≤ r
      At[idx] = r < col ? Bs[col] * expf(Gs[col] - Gs[r]) * KK[r * LP + col] : 0.0f;
      Bg[idx] = col <= r ? expf(Gs[r] - Gs[col]) * QK[r * LP + col] : 0.0f;
    }
    __syncthreads();
    // (I + A)·X = [β·γ·K | β·V], one column a thread; X's first DK columns are W, the rest U
    float* Wg = a.W + ch * kL * DK;
    for (int col = tid; col < ncol; col += kT1) {
      const bool isk = col < DK;
      const float* src = column(h, col);
      float* ug = isk ? a.o : a.o + t0 * int64_t(a.nv) * dv + int64_t(h) * dv + (col - DK);
      if (col != tid) load16(src, 0, raw);
      for (int b = 0; b < kL; b += 16) {
        float x[16];
#pragma unroll
        for (int u = 0; u < 16; u++) x[u] = raw[u] * (isk ? Bs[b + u] * Eg[b + u] : Bs[b + u]);
        if (b + 16 < kL) load16(src, b + 16, raw);  // the next block's rows
        for (int s = 0; s < b; s++) {               // the earlier rows' part, in order of s
          const float xs = X[s * ncol + col];
          const float* ar = At + s * kL + b;
#pragma unroll
          for (int u = 0; u < 16; u += 4) {
            const float4 av = ld4(ar + u);
            x[u] = fmaf(-av.x, xs, x[u]);
            x[u + 1] = fmaf(-av.y, xs, x[u + 1]);
            x[u + 2] = fmaf(-av.z, xs, x[u + 2]);
            x[u + 3] = fmaf(-av.w, xs, x[u + 3]);
          }
        }
#pragma unroll
        for (int v = 0; v < 15; v++)  // x[v] is final: take it out of the later rows of the block
#pragma unroll
          for (int u = v + 1; u < 16; u++) x[u] = fmaf(-At[(b + v) * kL + b + u], x[v], x[u]);
#pragma unroll
        for (int u = 0; u < 16; u++) {
          const int t = b + u;
          X[t * ncol + col] = x[u];
          if (isk)
            Wg[t * DK + col] = x[u];
          else if (t < Lc)
            ug[t * int64_t(a.nv) * dv] = x[u];
        }
      }
    }
    __syncthreads();  // Gs, Bs, At and X are reused by the next head
  }
}

template <int DK>
struct Scan {
  static constexpr int NA = DK / 32;   // [W; q]·S₀ stages
  static constexpr int NST = NA + 3;   // + the o stage + two S stages
  static constexpr int RPT = DK / 32;  // rows of S a thread
  static constexpr int KS = DK + 4;    // row stride of a k slot (32 rows)
  static constexpr int smem_floats = kNS * kSlot + DK * kJ + 2 * kL * kJ + 2 * 2 * kL;
  static_assert(32 * KS <= kSlot && kL * kBS <= kSlot, "a stage's tile fits a slot");
};

// The copies of pipeline stage q (chunk q / NST, stage q % NST) into slot q % kNS; none past the last chunk.
template <int DK>
__device__ __forceinline__ void scan_load(const CoreArgs& a, float* slots, float* Es2, int q, int h, int kh, int tid) {
  using P = Scan<DK>;
  const int c = q / P::NST, k = q % P::NST;
  if (c >= a.nchunks) return;
  const int64_t t0 = int64_t(c) * kL, ch = int64_t(c) * a.nv + h;
  float* slot = slots + (q % kNS) * kSlot;
  if (k < P::NA) {  // rows 0..63: W[t][32k …], rows 64..127: q_t[32k …]
    const float* Wc = a.W + ch * kL * DK + 32 * k;
    const float* Qc = a.qkv + t0 * a.C + int64_t(kh) * DK + 32 * k;
    for (int e = tid; e < 2 * kL * 8; e += kT2) {
      const int row = e >> 3, p = 4 * (e & 7);
      if (row < kL) {
        cp_async16(slot + row * kAS + p, Wc + row * DK + p);
      } else {
        const int t = row - kL;
        const bool ok = t0 + t < a.n;
        cp_async16_zfill(slot + row * kAS + p, ok ? Qc + t * a.C + p : a.qkv, ok);
      }
    }
    if (k == 0 && tid < 2 * kL / 4) cp_async16(Es2 + (c & 1) * 2 * kL + 4 * tid, a.E + ch * 2 * kL + 4 * tid);
  } else if (k == P::NA) {  // Bm
    const float* Bc = a.Bm + ch * kL * kL;
    for (int e = tid; e < kL * (kL / 4); e += kT2) {
      const int row = e / (kL / 4), p = 4 * (e % (kL / 4));
      cp_async16(slot + row * kBS + p, Bc + row * kL + p);
    }
  } else {  // k_s for s in [s0, s0 + 32)
    const int s0 = 32 * (k - P::NA - 1);
    const float* Kc = a.qkv + t0 * a.C + int64_t(a.nk) * DK + int64_t(kh) * DK;
    for (int e = tid; e < 32 * (DK / 4); e += kT2) {
      const int row = e / (DK / 4), p = 4 * (e % (DK / 4)), t = s0 + row;
      const bool ok = t0 + t < a.n;
      cp_async16_zfill(slot + row * P::KS + p, ok ? Kc + t * a.C + p : a.qkv, ok);
    }
  }
}

template <int DK>
__global__ void __launch_bounds__(kT2, 3) chunk_scan_kernel(CoreArgs a) {
  using P = Scan<DK>;
  extern __shared__ float4 sm4[];
  float* slots = reinterpret_cast<float*>(sm4);  // [kNS][kSlot]
  float* Ss = slots + kNS * kSlot;               // [DK][kJ]    S₀'s block columns
  float* Ds = Ss + DK * kJ;                      // [kL][kJ]    δ_s
  float* Dp = Ds + kL * kJ;                      // [kL][kJ]    exp(G_L − G_s)·δ_s
  float* Es2 = Dp + kL * kJ;                     // [2][2·kL]   γ_t, exp(G_L − G_t), by chunk parity
  const int tid = threadIdx.x, lane = tid & 31;
  const int rg = (tid >> 5) * 8 + (lane & 7), jc = 4 * (lane >> 3);  // row group 0..31, column 0, 4, 8, 12
  const int j0 = blockIdx.x * kJ, h = blockIdx.y, kh = h / (a.nv / a.nk), dv = a.dv;
  const int64_t ostride = int64_t(a.nv) * dv;
  float* og = a.o + int64_t(h) * dv + j0 + jc;
  float* Sg = a.S + int64_t(h) * DK * dv + j0 + jc;
  float sr[P::RPT][4];  // S rows P::RPT·rg + rr, columns j0 + jc …
#pragma unroll
  for (int rr = 0; rr < P::RPT; rr++) {
    const int r = P::RPT * rg + rr;
    const float4 v = ld4(Sg + int64_t(r) * dv);
    sr[rr][0] = v.x, sr[rr][1] = v.y, sr[rr][2] = v.z, sr[rr][3] = v.w;
    st4(Ss + r * kJ + jc, sr[rr]);
  }
  const int total = a.nchunks * P::NST;
#pragma unroll
  for (int q = 0; q < kNS - 1; q++) {
    scan_load<DK>(a, slots, Es2, q, h, kh, tid);
    cp_async_commit();
  }
  float acc[4][4], u[2][4], pq[2][4];
#pragma unroll 1
  for (int q = 0; q < total; q++) {
    cp_async_wait<kNS - 2>();
    __syncthreads();  // stage q's copies are visible; every thread is done with stage q − 1 (its slot is free)
    scan_load<DK>(a, slots, Es2, q + kNS - 1, h, kh, tid);
    cp_async_commit();
    const float* slot = slots + (q % kNS) * kSlot;
    const int c = q / P::NST, k = q % P::NST;
    const int64_t t0 = int64_t(c) * kL;
    const int Lc = a.n - t0 < kL ? int(a.n - t0) : kL;
    const float* Es = Es2 + (c & 1) * 2 * kL;
    if (k < P::NA) {  // [W; q]·S₀ over dk rows 32k …
      if (k == 0) {
#pragma unroll
        for (int m = 0; m < 4; m++)
#pragma unroll
          for (int jj = 0; jj < 4; jj++) acc[m][jj] = 0.0f;
#pragma unroll
        for (int m = 0; m < 2; m++) {  // U (in o's rows) for the thread's δ entries
          const int t = rg + 32 * m;
          const float4 v = t < Lc ? ld4(og + (t0 + t) * ostride) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          u[m][0] = v.x, u[m][1] = v.y, u[m][2] = v.z, u[m][3] = v.w;
        }
      }
      const float* Sk = Ss + 32 * k * kJ + jc;
#pragma unroll 4
      for (int i = 0; i < 32; i += 4) {
        float4 x[4];
#pragma unroll
        for (int m = 0; m < 4; m++) x[m] = ld4(slot + (rg + 32 * m) * kAS + i);
#pragma unroll
        for (int ii = 0; ii < 4; ii++) {
          const float4 sv = ld4(Sk + (i + ii) * kJ);
#pragma unroll
          for (int m = 0; m < 4; m++) fma4(acc[m], comp(x[m], ii), sv);
        }
      }
      if (k == P::NA - 1) {
#pragma unroll
        for (int m = 0; m < 2; m++) {
          const int t = rg + 32 * m;
          float d[4], dp[4];
#pragma unroll
          for (int jj = 0; jj < 4; jj++) {
            d[jj] = t < Lc ? u[m][jj] - acc[m][jj] : 0.0f;
            dp[jj] = Es[kL + t] * d[jj];
            pq[m][jj] = acc[2 + m][jj];
          }
          st4(Ds + t * kJ + jc, d);
          st4(Dp + t * kJ + jc, dp);
        }
      }
    } else if (k == P::NA) {  // o_t = γ_t·(q_t·S₀) + Σ_{s≤t} Bm[t][s]·δ_s; rows rg, rg + 32
      float ov[2][4];
#pragma unroll
      for (int m = 0; m < 2; m++)
#pragma unroll
        for (int jj = 0; jj < 4; jj++) ov[m][jj] = Es[rg + 32 * m] * pq[m][jj];
      const float* b0 = slot + rg * kBS;
      const float* b1 = slot + (rg + 32) * kBS;
#pragma unroll
      for (int s = 0; s < 32; s += 4) {  // row rg has Bm = 0 past s = rg < 32
        const float4 x0 = ld4(b0 + s), x1 = ld4(b1 + s);
#pragma unroll
        for (int ii = 0; ii < 4; ii++) {
          const float4 dv4 = ld4(Ds + (s + ii) * kJ + jc);
          fma4(ov[0], comp(x0, ii), dv4);
          fma4(ov[1], comp(x1, ii), dv4);
        }
      }
#pragma unroll
      for (int s = 32; s < kL; s += 4) {
        const float4 x1 = ld4(b1 + s);
#pragma unroll
        for (int ii = 0; ii < 4; ii++) fma4(ov[1], comp(x1, ii), ld4(Ds + (s + ii) * kJ + jc));
      }
#pragma unroll
      for (int m = 0; m < 2; m++) {
        const int t = rg + 32 * m;
        if (t < Lc) st4(og + (t0 + t) * ostride, ov[m]);
      }
    } else {  // S = γ_L·S₀ + Σ_s k_s·(exp(G_L − G_s)·δ_s)ᵀ over s in [32e, 32e + 32)
      const int e = k - P::NA - 1;
      if (e == 0) {
        const float gl = Es[kL - 1];
#pragma unroll
        for (int rr = 0; rr < P::RPT; rr++)
#pragma unroll
          for (int jj = 0; jj < 4; jj++) sr[rr][jj] = gl * sr[rr][jj];
      }
      const float* dpe = Dp + 32 * e * kJ + jc;
#pragma unroll 8
      for (int s = 0; s < 32; s++) {
        const float4 dp = ld4(dpe + s * kJ);
        const float* kr = slot + s * P::KS + P::RPT * rg;
        float kv[P::RPT];
        if constexpr (P::RPT == 4) {
          const float4 k4 = ld4(kr);
          kv[0] = k4.x, kv[1] = k4.y, kv[2] = k4.z, kv[3] = k4.w;
        } else if constexpr (P::RPT == 2) {
          const float2 k2 = *reinterpret_cast<const float2*>(kr);
          kv[0] = k2.x, kv[1] = k2.y;
        } else {
          kv[0] = kr[0];
        }
#pragma unroll
        for (int rr = 0; rr < P::RPT; rr++) fma4(sr[rr], kv[rr], dp);
      }
      if (e == 1)
#pragma unroll
        for (int rr = 0; rr < P::RPT; rr++) st4(Ss + (P::RPT * rg + rr) * kJ + jc, sr[rr]);
    }
  }
  cp_async_wait<0>();
#pragma unroll
  for (int rr = 0; rr < P::RPT; rr++) {
    const int r = P::RPT * rg + rr;
    *reinterpret_cast<float4*>(Sg + int64_t(r) * dv) = make_float4(sr[rr][0], sr[rr][1], sr[rr][2], sr[rr][3]);
  }
}

template <int DK>
void launch_core(const CoreArgs& c, cudaStream_t st) {
  const size_t smem1 = prep_smem_bytes(DK, c.dv), smem2 = size_t(Scan<DK>::smem_floats) * 4;
  HKV_CUDA_CHECK(cudaFuncSetAttribute(wy_prep_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem1)));
  HKV_CUDA_CHECK(cudaFuncSetAttribute(chunk_scan_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem2)));
  HKV_CUDA_CHECK(cudaFuncSetAttribute(chunk_scan_kernel<DK>, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  wy_prep_kernel<DK><<<dim3(unsigned(c.nchunks), unsigned(c.nk)), kT1, smem1, st>>>(c);
  HKV_CHECK_LAUNCH();
  chunk_scan_kernel<DK><<<dim3(unsigned(c.dv / kJ), unsigned(c.nv)), kT2, smem2, st>>>(c);
  HKV_CHECK_LAUNCH();
}
// ---- end of the chunked core -------------------------------------------------------------------------

// One warp a (row, head), kGnWarps heads a block (blocks of one warp ran at most 32 warps a multiprocessor).
constexpr int kGnWarps = 8;
__global__ void gated_norm_bf16_kernel(FastDeltaArgs a) {
  const int64_t row = blockIdx.x;
  const int h = int(blockIdx.y) * kGnWarps + int(threadIdx.x) / 32, lane = threadIdx.x & 31, dv = a.dv;
  if (h >= a.nv) return;
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

size_t gated_delta_chunked_scratch_floats(int64_t n, int nv, int dk) {
  const int64_t nchunks = (n + kL - 1) / kL;
  return size_t(nchunks * nv * kL * (dk + kL + 2));
}

size_t fast_delta_bnd_floats(int64_t n, int64_t C, int K, int nv, int dk) {
  const int64_t nseg = (n + kSeg - 1) / kSeg;
  const size_t conv = size_t((nseg + 1) * C * std::max(K - 1, 1));
  return std::max(conv, gated_delta_chunked_scratch_floats(n, nv, dk));
}

void gated_delta_chunked(int nk, int nv, int dk, int dv, int64_t n, const float* qkv, int64_t C, const float* g,
                         const float* beta, float* S, float* o, float* scratch, cudaStream_t st) {
  if (n <= 0) return;
  if (dv % kJ != 0) throw std::runtime_error("chunked deltanet: value head dim must be a multiple of 16");
  if (nk <= 0 || nv % nk != 0)
    throw std::runtime_error("chunked deltanet: value heads must be a multiple of key heads");
  auto al16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (C % 4 != 0 || !al16(qkv) || !al16(S) || !al16(o) || !al16(scratch))
    throw std::runtime_error("chunked deltanet: qkv, S, o and the scratch must be 16-byte aligned, C a multiple of 4");
  CoreArgs c{};
  c.nk = nk, c.nv = nv, c.dv = dv, c.nchunks = int((n + kL - 1) / kL);
  c.n = n, c.C = C, c.qkv = qkv, c.g = g, c.beta = beta, c.S = S, c.o = o;
  c.W = scratch;
  c.Bm = c.W + size_t(c.nchunks) * nv * kL * dk;
  c.E = c.Bm + size_t(c.nchunks) * nv * kL * kL;
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
  // the conv windows in bnd are spent (conv_segments ran): the core takes bnd as its scratch
  gated_delta_chunked(a.nk, a.nv, a.dk, a.dv, a.n, a.qkv, a.C, a.a, a.b, a.S, a.o, a.bnd, st);
  gated_norm_bf16_kernel<<<dim3(unsigned(a.n), unsigned((a.nv + kGnWarps - 1) / kGnWarps)), 32 * kGnWarps, 0, st>>>(a);
  HKV_CHECK_LAUNCH();
}

}  // namespace hkv::cuda
