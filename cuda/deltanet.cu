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
// Launch: conv one thread per (channel, sequence); recurrence by default a cluster of 2 blocks per (sequence,
// value head), each block half the columns with 2 threads a column (recurrence_split_kernel); the shapes it does not
// take, one block of dv threads per (sequence, value head) (recurrence_kernel). dk a template parameter (32, 64, 128).
#include <cooperative_groups.h>

#include <cmath>
#include <utility>

#include "cuda/check.h"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace hkv::cuda {
namespace {

constexpr int kMaxK = 8;
constexpr int kFusedK = 4;  // the conv size the fused decode form takes (the 27B model's linear_conv_kernel_dim)

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

// The row's q and k of key head kh (conv_out after the l2norm) into shared memory, by thread t of n.
template <int DK>
__device__ __forceinline__ void stage_qk(const DeltaArgs& a, const float* cv, int kh, int t, int n, float* q_s,
                                         float* k_s) {
  for (int i = t; i < DK; i += n) {
    q_s[i] = cv[int64_t(kh) * DK + i];
    k_s[i] = cv[int64_t(a.nk) * DK + int64_t(kh) * DK + i];
  }
}

// Column j of value head h (dv columns) at `row` out of the gated norm: ((o·r)·w)·silu_c(z), into core; returned.
__device__ __forceinline__ float z_at(const DeltaArgs& a, int64_t row, int h, int j, int dv) {
  return a.z[row * int64_t(a.nv) * dv + int64_t(h) * dv + j];
}
__device__ __forceinline__ float store_gated(const DeltaArgs& a, int64_t row, int h, int j, int dv, float oj, float r,
                                             float w, float z) {
  float out = (oj * r) * w;
  out = out * hkv::silu_c(z);
  a.core[row * int64_t(a.nv) * dv + int64_t(h) * dv + j] = out;
  return out;
}

// Diagnostic (dn_phases_begin): thread 0's clock64 cycles in each phase of the fused split recurrence, summed over
// blocks: the wait (start to pdl_wait's return), conv and norms, the two chains, the gated norm's exchange across the
// cluster, the gated store and records, the state's store; then the blocks counted.
bool g_dn_phases = false;
__device__ unsigned long long g_dn_cycles[7];

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
    stage_qk<DK>(a, cv, kh, j, dv, q_s, k_s);
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
    store_gated(a, row, h, j, dv, oj, r_s, w, z_at(a, row, h, j, dv));
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < DK; i++) S[int64_t(i) * dv + j] = s[i];
}

// Σ_i s_i·v_i for one column of S held by TPC threads (thread p of the column: rows p·DP … p·DP + DP − 1), one chain
// in row order: thread p continues the chain thread p − 1 ended, passed by a shuffle; every thread of the column
// gets the result.
template <int DP, int TPC>
__device__ __forceinline__ float column_chain(const float (&s)[DP], const float* v, int p, int lane) {
  float acc = 0.0f;
#pragma unroll
  for (int q = 0; q < TPC; q++) {
    if (p == q) {
#pragma unroll
      for (int i = 0; i < DP; i++) acc = hkv::fma_rn(s[i], v[i], acc);
    }
    if (TPC > 1) acc = __shfl_sync(kFull, acc, (lane & ~(TPC - 1)) | (q + 1 < TPC ? q : TPC - 1));
  }
  return acc;
}

// recurrence_kernel with each (sequence, value head) split over the CL blocks of a cluster, and each column of S
// over TPC threads (adjacent lanes). Block r owns columns r·dv/CL … (r+1)·dv/CL − 1, so that a head's state is read
// and written by CL multiprocessors instead of one; thread p of a column holds rows p·DK/TPC … of it in registers
// (DK/TPC of them: recurrence_kernel<128> holds 128 and spills). The column's two chains over i (m, then o) run in
// order across its threads: thread p continues the chain thread p − 1 ended, passed by a shuffle. Every block loads
// q and k itself. The gated norm's sum of squares is warp_sum_squares over the head's dv outputs (dv ≤ 128: lane l
// takes elements 4l … 4l+3, a chain of 4 fmas from 0, the lanes past dv/4 nothing, then the lane tree): each block
// makes the chains of the lanes whose elements it owns, and warp 0 of every block takes the 32 lane values from
// their owners' shared memory (distributed shared memory) and runs the tree. The same operations in the same order
// as recurrence_kernel. Needs dv ≤ 128 and dv/CL·TPC a multiple of 32, dv/CL a multiple of 4. recurrence_kernel
// stays, plain, for the shapes this one does not take (dk 32, dv > 128) and as the kernel gpu_ops checks it against.
//
// FUSED (rounds of at most 8 rows under HKV_DN_FUSED, the default; deltanet_fused_form): the conv and the q/k l2norm in
// the same launch. The cluster then holds every block of a key head's value heads (G = nv/nk·CL ≤ 8 blocks; a head's
// blocks are G's ranks hb … hb + CL − 1): thread t of a block takes conv_kernel's step for channel t of the key head's
// q and of its k (dv/CL·TPC = dk threads), and each thread of column j the step for v channel j; then l2norm_heads'
// operations (warp 0: r = rsqrt_c(warp_sum_squares(q) + 1e-6), q·r then × q_scale; warp 1 likewise for k, unscaled).
// Every block of the key head computes its q and k (the same bytes); the first block of the key head's cluster writes
// them to conv_out and their conv state, each column's thread p = 0 its v. The q and k conv state is written after a
// cluster sync of the last row, so no block of the cluster reads it after it changes.
//
// MODE (the 27B decode form's instantiations, 2 and 3; the others take 0): bit 0, thread 0 counts its cycles a phase
// (dn_phases_begin, a diagnostic); bit 1, the state stored as soon as the last row has updated it, before its o chain
// (the stores fill the chain's latency), instead of after everything; the v window after the last row's conv; the q and
// k windows, which every block of the key head reads at its start, after the last row's first cluster sync, when every
// block has read them (the same values).
template <int DK, int CL, int TPC, bool FUSED = false, int MODE = 0>
__global__ void recurrence_split_kernel(DeltaArgs a) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900  // clusters are sm_90's; older cards run recurrence_kernel
  constexpr bool PH = (MODE & 1) != 0, SEARLY = (MODE & 2) != 0;
  static_assert(!SEARLY || FUSED, "the early stores are the fused form's");
  constexpr int DVF =
      DK * CL / TPC;  // the fused form's dv (fused_shape_ok: dv/CL·TPC = dk): S's row stride under SEARLY
  long long ph[2] = {};
  if constexpr (PH) ph[0] = clock64();
  namespace cg = cooperative_groups;
  constexpr int DP = DK / TPC;  // rows of the column a thread holds
  const cg::cluster_group cluster = cg::this_cluster();
  // launch_k (device.cuh): nothing is read or written before the kernel ahead has completed; with a.early
  // (Tuning's dn_early) the state S, the conv state and the read-only parameters are read first (no kernel that may
  // still run writes them: only this kernel writes S and the conv state, and the kernels ahead in the chain are the
  // in-projections and the MLP), so that their round trips overlap the kernel ahead's end.
  if (!a.early) pdl_wait();
  __shared__ float q_s[DK], k_s[DK], o_s[128], part_s[32];
  __shared__ __align__(16) float g_s[128];  // xq_out: the block's gated outputs, column c at c
  __shared__ float r_s, rq_s, rk_s;
  const int crank = int(cluster.block_rank()), rank = crank % CL, hb = crank - rank;  // hb: the head's first rank
  const int dv = a.dv, dvb = dv / CL;
  const int b = blockIdx.x, h = blockIdx.y / CL, t_ = threadIdx.x, c = t_ / TPC, p = t_ % TPC;
  const int j = rank * dvb + c, lane = t_ & 31;
  const int kh = h / (a.nv / a.nk);
  float* S = a.S[b] + int64_t(h) * DK * dv + int64_t(p) * DP * dv;
  float s[DP];
#pragma unroll
  for (int i = 0; i < DP; i++) s[i] = S[int64_t(i) * dv + j];
  const float A = hkv::exp_c(a.A_log[h]), dt = a.dt_bias[h], w = a.norm_w[j];
  const int first = a.seq_first[b], rows = a.seq_rows[b];
  // FUSED: this thread's conv channels (q and k channel t_ of key head kh, v channel j), windows and weights
  const int64_t chq = int64_t(kh) * DK + t_, chk = int64_t(a.nk) * DK + chq;
  const int64_t chv = 2 * int64_t(a.nk) * DK + int64_t(h) * dv + j;
  const bool qk_owner = FUSED && crank == 0;  // the key head's first block writes its q and k
  constexpr int K = kFusedK;                  // the conv's size a compile-time constant: the windows stay in registers
  float cq[K], ck[K], cvw[K], wq[K], wk[K], wv[K];
  if constexpr (FUSED) {
    const float* st = a.conv_state[b];
#pragma unroll
    for (int e = 0; e < K; e++) {
      cq[e] = e < K - 1 ? st[chq * (K - 1) + e] : 0.0f;
      ck[e] = e < K - 1 ? st[chk * (K - 1) + e] : 0.0f;
      cvw[e] = e < K - 1 ? st[chv * (K - 1) + e] : 0.0f;
      wq[e] = a.conv_w[chq * K + e];
      wk[e] = a.conv_w[chk * K + e];
      wv[e] = a.conv_w[chv * K + e];
    }
  }
  if (a.early) pdl_wait();       // from here on: qkv, z, b, a (the in-projections' outputs)
  if (a.trigger) pdl_trigger();  // out_trigger: the out product may launch (it waits for this grid before reading)
  long long pc[6] = {};          // PH: this block's cycles a phase (thread 0)
  if constexpr (PH) ph[1] = clock64(), pc[0] = ph[1] - ph[0];
  for (int t = 0; t < rows; t++) {
    const int64_t row = first + t;
    const float* cv = a.conv_out + row * a.C;
    // a.preload (Tuning's dn_preload): the row's b, a and (the column's storing thread) z, outputs of the
    // in-projections like qkv, are loaded with it here, so that their round trip overlaps the conv and the norms
    // instead of following them; the operations on them are the same, in the same places
    float b_in = 0.0f, a_in = 0.0f, z_in = 0.0f;
    if (a.preload) {
      b_in = a.b[row * a.nv + h], a_in = a.a[row * a.nv + h];
      if (p == 0) z_in = z_at(a, row, h, j, dv);
    }
    float vj;
    if constexpr (FUSED) {
      const float* x = a.qkv + row * a.C;
      const float qc = conv_step(cq, wq, K, x[chq]), kc = conv_step(ck, wk, K, x[chk]);
      vj = conv_step(cvw, wv, K, x[chv]);
      if constexpr (SEARLY) {  // the v window is final after the last row's step, and only this block reads it
        if (t == rows - 1 && p == 0) {
          float* st = a.conv_state[b];
#pragma unroll
          for (int e = 0; e < K - 1; e++) st[chv * (K - 1) + e] = cvw[e];
        }
      }
      q_s[t_] = qc;
      k_s[t_] = kc;
      __syncthreads();
      if (t_ < 32) {  // warp 0 the q head's norm, warp 1 the k head's
        const float r = hkv::rsqrt_c(warp_sum_squares(q_s, DK, lane) + 1e-6f);
        if (lane == 0) rq_s = r;
      } else if (t_ < 64) {
        const float r = hkv::rsqrt_c(warp_sum_squares(k_s, DK, lane) + 1e-6f);
        if (lane == 0) rk_s = r;
      }
      __syncthreads();
      const float qn = (qc * rq_s) * a.q_scale, kn = kc * rk_s;
      q_s[t_] = qn;  // (each thread rewrites only its own element, read above by warps 0 and 1 before the sync)
      k_s[t_] = kn;
      float* out = a.conv_out + row * a.C;
      if (qk_owner) out[chq] = qn, out[chk] = kn;
      if (p == 0) out[chv] = vj;
    } else {
      stage_qk<DK>(a, cv, kh, t_, dvb * TPC, q_s, k_s);
      vj = cv[2 * int64_t(a.nk) * DK + int64_t(h) * dv + j];
    }
    __syncthreads();
    if constexpr (PH) {
      const long long k = clock64();
      pc[1] += k - ph[1], ph[1] = k;
    }
    if (!a.preload) b_in = a.b[row * a.nv + h], a_in = a.a[row * a.nv + h];
    const float beta = hkv::sigmoid_c(b_in);
    const float decay = hkv::exp_c(-A * hkv::softplus_c(a_in + dt));
    const float* kp = k_s + p * DP;
    const float* qp = q_s + p * DP;
#pragma unroll
    for (int i = 0; i < DP; i++) s[i] = s[i] * decay;
    const float mj = column_chain<DP, TPC>(s, kp, p, lane);  // m = Σ_i s_i·k_i
    const float delta = beta * (vj - mj);
#pragma unroll
    for (int i = 0; i < DP; i++) s[i] = hkv::fma_rn(kp[i], delta, s[i]);
    if constexpr (SEARLY) {  // the state is final after the last row's update (a compile-time stride: no 64-bit
      if (t == rows - 1) {   // address a store, which had cost registers and spills)
        float* Sj = S + j;
#pragma unroll
        for (int i = 0; i < DP; i++) Sj[i * DVF] = s[i];
      }
    }
    const float oj = column_chain<DP, TPC>(s, qp, p, lane);  // o = Σ_i s_i·q_i
    if (p == 0) o_s[c] = oj;
    __syncthreads();
    if constexpr (PH) {
      const long long k = clock64();
      pc[2] += k - ph[1], ph[1] = k;
    }
    if (t_ < dvb / 4) {  // lane rank·dvb/4 + t_'s chain over its 4 elements, all in this block
      float acc = 0.0f;
#pragma unroll
      for (int e = 0; e < 4; e++) acc = hkv::fma_rn(o_s[4 * t_ + e], o_s[4 * t_ + e], acc);
      part_s[t_] = acc;
    }
    cluster.sync();                   // every block's lane values are written
    if constexpr (SEARLY && FUSED) {  // the q and k windows: every block of the key head has read them by now
      if (t == rows - 1 && qk_owner) {
        float* st = a.conv_state[b];
#pragma unroll
        for (int e = 0; e < K - 1; e++) st[chq * (K - 1) + e] = cq[e], st[chk * (K - 1) + e] = ck[e];
      }
    }
    if (t_ < 32) {
      float v = 0.0f;  // lanes past dv/4 have no elements (warp_sum_squares)
      if (4 * t_ < dv) v = *cluster.map_shared_rank(&part_s[t_ % (dvb / 4)], unsigned(hb + t_ / (dvb / 4)));
      v = warp_tree_sum(v);
      if (t_ == 0) r_s = hkv::rsqrt_c(v / float(dv) + a.eps);
    }
    cluster.sync();  // every block has read the others' lane values before they are written again; r_s is set
    if constexpr (PH) {
      const long long k = clock64();
      pc[3] += k - ph[1], ph[1] = k;
    }
    if (p == 0) g_s[c] = store_gated(a, row, h, j, dv, oj, r_s, w, a.preload ? z_in : z_at(a, row, h, j, dv));
    if (a.xq_out) {  // the records of the block's dvb columns (dvb/32 chunks), warp w chunk w (xq_chunk)
      __syncthreads();
      if (t_ < dvb) {
        const int64_t chunk = (int64_t(h) * dv + rank * dvb) / 32 + (t_ >> 5);
        xq_chunk(g_s[t_], reinterpret_cast<const float4*>(g_s + (t_ & ~31)),
                 a.xq_out + (row * (int64_t(a.nv) * dv / 32) + chunk) * kXqWords);
      }
      __syncthreads();  // g_s is written again by the next row
    }
    if constexpr (PH) {
      const long long k = clock64();
      pc[4] += k - ph[1], ph[1] = k;
    }
  }
  if constexpr (!SEARLY) {
#pragma unroll
    for (int i = 0; i < DP; i++) S[int64_t(i) * dv + j] = s[i];
  }
  if constexpr (FUSED && !SEARLY) {
    float* st = a.conv_state[b];
#pragma unroll
    for (int e = 0; e < K - 1; e++) {
      if (qk_owner) st[chq * (K - 1) + e] = cq[e], st[chk * (K - 1) + e] = ck[e];
      if (p == 0) st[chv * (K - 1) + e] = cvw[e];
    }
  }
  if constexpr (PH) {
    pc[5] = clock64() - ph[1];
    if (threadIdx.x == 0) {
      for (int i = 0; i < 6; i++) atomicAdd(&g_dn_cycles[i], (unsigned long long)pc[i]);
      atomicAdd(&g_dn_cycles[6], 1ull);
    }
  }
#endif
}

// The split recurrence's launch: grid (sequences, value heads · CL), clusters of CL blocks along y, dv/CL·TPC
// threads a block, as a programmatic dependent launch where launch_k would make one (pdl).
template <int DK, int CL, int TPC, bool FUSED = false>
void launch_split(const DeltaArgs& a, cudaStream_t st, bool pdl) {
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1, attr[0].val.clusterDim.z = 1;
  attr[0].val.clusterDim.y = unsigned(FUSED ? a.nv / a.nk * CL : CL);
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(a.B), unsigned(a.nv * CL)), cfg.blockDim = dim3(unsigned(a.dv / CL * TPC));
  cfg.stream = st, cfg.attrs = attr, cfg.numAttrs = pdl ? 2 : 1;
  if constexpr (DK == 128 && CL == 2 && TPC == 2 && FUSED) {  // the 27B decode form: its MODE instantiations
    const decltype(&recurrence_split_kernel<DK, CL, TPC, FUSED, 2>) k[2] = {
        recurrence_split_kernel<DK, CL, TPC, FUSED, 2>, recurrence_split_kernel<DK, CL, TPC, FUSED, 3>};
    HKV_CUDA_CHECK(cudaLaunchKernelEx(&cfg, k[fused_recurrence_mode() & 1], a));
  } else {
    HKV_CUDA_CHECK(cudaLaunchKernelEx(&cfg, recurrence_split_kernel<DK, CL, TPC, FUSED>, a));
  }
}

// The split recurrence with (CL, TPC) = (cl, tpc) for dk = DK (recurrence_form or fused_form has chosen them).
template <int DK, bool FUSED>
void launch_split_any(const DeltaArgs& a, int cl, int tpc, cudaStream_t st, bool pdl) {
  if (cl == 1 && tpc == 2)
    launch_split<DK, 1, 2, FUSED>(a, st, pdl);
  else if (cl == 2 && tpc == 1)
    launch_split<DK, 2, 1, FUSED>(a, st, pdl);
  else if (cl == 2 && tpc == 2)
    launch_split<DK, 2, 2, FUSED>(a, st, pdl);
  else if (cl == 4 && tpc == 1)
    launch_split<DK, 4, 1, FUSED>(a, st, pdl);
  else if (FUSED && cl == 1 && tpc == 1)
    launch_split<DK, 1, 1, FUSED>(a, st, pdl);
  else
    launch_split<DK, 4, 2, FUSED>(a, st, pdl);
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

int fused_recurrence_mode() { return (g_dn_phases ? 1 : 0) | 2; }

void dn_phases_begin() {
  phase_sums_zero(g_dn_cycles);
  g_dn_phases = true;
}
DnPhases dn_phases_end() {
  const std::array<double, 7> m = phase_sums_mean(g_dn_cycles);
  g_dn_phases = false;
  DnPhases p;
  p.blocks = m[6];
  for (int i = 0; i < 6; i++) p.cycles[i] = m[i];
  return p;
}

bool clusters_supported() {
  static const bool ok = [] {
    int dev = 0, v = 0;
    HKV_CUDA_CHECK(cudaGetDevice(&dev));
    HKV_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrClusterLaunch, dev));
    return v != 0;
  }();
  return ok;
}

std::pair<int, int> recurrence_form(const DeltaArgs& a, const Tuning& tu) {
  const int cl = tu.dn_split, tpc = tu.dn_tpc;
  const bool split = (cl > 1 || tpc > 1) && (a.dk == 64 || a.dk == 128) && a.dv <= 128 && a.dv % (4 * cl) == 0 &&
                     (a.dv / cl * tpc) % 32 == 0 && clusters_supported();
  return split ? std::make_pair(cl, tpc) : std::make_pair(1, 1);
}

// Whether the fused decode form takes a with tu's (blocks, threads a column): a conv of size 4, a thread a q/k channel
// (dv/blocks·threads = dk), a key head's blocks in one cluster of at most 8, and clusters.
static bool fused_shape_ok(const DeltaArgs& a, const Tuning& tu) {
  const int cl = tu.dn_split, tpc = tu.dn_tpc;
  return (a.dk == 64 || a.dk == 128) && a.K == kFusedK && a.dv <= 128 && a.dv % (4 * cl) == 0 &&
         a.dv / cl * tpc == a.dk && a.nv % a.nk == 0 && a.nv / a.nk * cl <= 8 && clusters_supported();
}

bool deltanet_fused_form(const DeltaArgs& a, const Tuning& tu) {
  return tu.dn_fused && a.N <= 8 && fused_shape_ok(a, tu);
}

bool deltanet(const DeltaArgs& a_in, cudaStream_t st, const Tuning& tu) {
  if (a_in.N <= 0 || a_in.B <= 0) return false;
  DeltaArgs a = a_in;
  a.early = tu.dn_early;
  a.preload = tu.dn_preload;
  a.trigger = tu.out_trigger;
  a.xq_out = nullptr;  // records only where the split recurrence runs with whole chunks a block (below)
  auto records = [&](int cl) {
    if (a_in.xq_out && (a.dv / cl) % 32 == 0 && a.dv / cl <= 128) a.xq_out = a_in.xq_out;
    return a.xq_out != nullptr;
  };
  if (a.K < 1 || a.K > kMaxK) throw std::runtime_error("deltanet: conv kernel size must be 1..8");
  if (a.dv % 32 != 0 || a.dv > 1024) throw std::runtime_error("deltanet: value head dim must be a multiple of 32");
  if (deltanet_fused_form(a, tu)) {  // conv, l2norm and recurrence in one launch
    const int cl = tu.dn_split, tpc = tu.dn_tpc;
    const bool rec = records(cl);
    a.dk == 128 ? launch_split_any<128, true>(a, cl, tpc, st, tu.pdl_all)
                : launch_split_any<64, true>(a, cl, tpc, st, tu.pdl_all);
    HKV_CHECK_LAUNCH();
    return rec;
  }
  launch_k(tu.pdl_all, conv_kernel, dim3(unsigned((a.C + 255) / 256), unsigned(a.B)), dim3(256), 0, st, a);
  l2norm_heads(a.conv_out, a.C, a.N, 2 * a.nk, a.dk, a.nk, a.q_scale, st, tu);
  const auto [cl, tpc] = recurrence_form(a, tu);
  if (cl > 1 || tpc > 1) {
    const bool rec = records(cl);
    a.dk == 128 ? launch_split_any<128, false>(a, cl, tpc, st, tu.pdl_all)
                : launch_split_any<64, false>(a, cl, tpc, st, tu.pdl_all);
    HKV_CHECK_LAUNCH();
    return rec;
  }
  dim3 grid(unsigned(a.B), unsigned(a.nv));
  switch (a.dk) {
    case 32:
      launch_k(tu.pdl_all, recurrence_kernel<32>, grid, dim3(unsigned(a.dv)), 0, st, a);
      break;
    case 64:
      launch_k(tu.pdl_all, recurrence_kernel<64>, grid, dim3(unsigned(a.dv)), 0, st, a);
      break;
    case 128:
      launch_k(tu.pdl_all, recurrence_kernel<128>, grid, dim3(unsigned(a.dv)), 0, st, a);
      break;
    default:
      throw std::runtime_error("deltanet: key head dim " + std::to_string(a.dk) + " (32, 64 or 128 supported)");
  }
  HKV_CHECK_LAUNCH();
  return false;
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
