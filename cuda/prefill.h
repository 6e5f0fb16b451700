// The engine's fast prefill path: long prompts through tensor-core matrix products, a
// tensor-core attention over decoded cache rows and the chunked (WY) form of the gated delta rule.
//
// NOT EXACT. Everything here computes the model's function with other rounding than the oracle
// (bf16 operands, fp32 accumulation in cuBLAS's or the tensor cores' order, another summation order in the
// DeltaNet): it is outside the arithmetic contract (docs/ARITHMETIC.md §10) and is compared with the oracle by
// KL divergence (hkv diff --long, tests/gpu_prefill.cpp), never byte for byte. What it leaves behind is in the
// exact path's formats, so exact decode continues from it: the cache rows are packed by the exact kv_pack from the
// fast path's K and V, the conv and S states are the recurrence's (with the fast path's rounding), pos
// advances by the prompt's length.
//
// bf16 values are stored as uint16_t (cuBLAS reads them as CUDA_R_16BF), rounded to nearest even by
// hkv::bf16_from_f32.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels.h"

namespace hkv::cuda {

// ---- prefill.cu: weights and activations --------------------------------------------------------

// Rows [r0, r0 + n) of W as bf16 [n][W.cols]: MLX4 w = fma(scale, q, bias) in fp32 (exactly the oracle's
// Matrix::at) then rounded to bf16; f32 and f16 converted and rounded; bf16 copied. MLX4 rows into a 16-byte aligned
// out go a code word (8 elements) a thread, with no 64-bit division an element; the same bytes as the element kernel
// that takes the rest (gpu_prefill).
void dequant_rows_bf16(const DMat& W, int64_t r0, int64_t n, uint16_t* out, cudaStream_t st);
// out[r][c] = bf16(x[r][c]) for r < rows, c < cols.
void f32_to_bf16(const float* x, int64_t ldx, int64_t rows, int64_t cols, uint16_t* out, int64_t ldo, cudaStream_t st);
// out[r] = bf16(rmsnorm_1pw(h[r], w)) over n = ld elements a row (block sum of squares, any order).
void rmsnorm_bf16(const float* h, int64_t rows, int64_t n, const float* w, float eps, uint16_t* out, cudaStream_t st);
// out[r][c] = bf16(silu_c(g[r][c]) · u[r][c]); g and u [rows][ld_gu].
void silu_mul_bf16(const float* g, const float* u, int64_t ld_gu, int64_t rows, int64_t cols, uint16_t* out,
                   int64_t ldo, cudaStream_t st);

// Y[N][m] (row-major, ldy) = alpha · X[N][k] · W[m][k]ᵀ + beta · Y, bf16 operands (row-major, ldx, ldw),
// fp32 accumulation and output: cublasGemmEx with CUBLAS_COMPUTE_32F on the handle's stream.
void gemm_bf16_xwt(cublasHandle_t h, const uint16_t* W, int64_t m, int64_t k, int64_t ldw, const uint16_t* X,
                   int64_t ldx, int64_t N, float* Y, int64_t ldy, float alpha, float beta);

// ---- prefill_attention.cu: attention over decoded cache rows --------------------------------------
// For rows t < n of a pass at positions p0 + t (their K/V already packed into the cache), every query head
// h attends to cache slots [0, p0 + t] of KV head h / (H/KV), read back from the cache's format: per KV head
// the rows are decoded to bf16 (the stored value s_g·u_j, rounded once) into the scratch, then one fused
// kernel (tensor cores, online softmax in fp32, P and Q in bf16; q4h: queries rotated first, output rotated
// back) computes out = softmax(q·Kᵀ/√D)·V × sigmoid_c(gate), rounded to bf16. See prefill_attention.cu.
struct FastAttnArgs {
  KvKind kind = KvKind::BF16;
  int D = 0, H = 0, KV = 0;
  size_t row_bytes = 0;
  const float* q = nullptr;  // [n][ldq], head h at h·D, normed and roped (not rotated)
  int64_t ldq = 0;
  const float* gate = nullptr;  // [n][ldg], head h at h·gate_stride (null: no gate)
  int64_t ldg = 0, gate_stride = 0;
  const uint8_t* k_cache = nullptr;  // kv_row_offset's layout (cuda/kernels.h)
  const uint8_t* v_cache = nullptr;
  int64_t p0 = 0, n = 0;
  uint16_t* out = nullptr;  // [n][ldo] bf16, head h at h·D
  int64_t ldo = 0;
  int64_t max_keys = 0;     // the keys the scratch was sized for (at least p0 + n)
  void* scratch = nullptr;  // fast_attn_scratch_bytes(max_keys, D)
};
// The head dimensions the fused kernel is built for (64, 128, 256); others take the exact path.
bool fast_attn_head_dim_ok(int D);
// K and V of one KV head decoded to bf16, for max_keys keys, and the split ranges' partial results.
size_t fast_attn_scratch_bytes(int64_t max_keys, int D);
// cfg (Tuning's flash, HKV_FLASH_CFG), the attention's form: F8x2 (mma.sync, 8 warps, 2 key-tile stages), F4x1 (4
// warps and 64 query rows with one stage, two blocks a multiprocessor), Wg (the products on wgmma), Wg2 (wg's
// arithmetic with bulk copies and the softmax overlapped with P·V); Auto: Wg2 where the build has wgmma (sm_90a), else
// F8x2. Wg and Wg2 elsewhere are refused (std::runtime_error). splits (tests): cut every tile's keys in that many
// ranges (clamped to the partials' room); 0 chooses per launch.
void fast_attention(const FastAttnArgs& a, cudaStream_t st, FlashCfg cfg = FlashCfg::Auto, int splits = 0);
// The name of the form a launch under cfg takes on this build and card ("8x2", "4x1", "wg" or "wg2").
const char* fast_attn_form(FlashCfg cfg);
// Whether this build's device code has the wgmma kernels (an sm_90a build on an sm_90 card).
bool fast_attn_wgmma_built();

// ---- deltanet_chunked.cu: the Gated DeltaNet in chunked form ----------------------------------------
struct FastDeltaArgs {
  int nk = 0, nv = 0, dk = 0, dv = 0, K = 4;
  int64_t C = 0;  // conv channels = 2·nk·dk + nv·dv
  float eps = 1e-6f, q_scale = 1.0f;
  float* conv_state = nullptr;  // [C][K−1], read and updated
  float* S = nullptr;           // [nv][dk][dv], read and updated
  const float* conv_w = nullptr;
  const float* A_log = nullptr;
  const float* dt_bias = nullptr;
  const float* norm_w = nullptr;
  float* qkv = nullptr;      // [n][C] projections; conv, SiLU and the q/k l2norm are applied in place
  const float* z = nullptr;  // [n][nv·dv]
  float* b = nullptr;        // [n][nv]: replaced by β
  float* a = nullptr;        // [n][nv]: replaced by g
  float* o = nullptr;        // [n][nv·dv] scratch: the recurrence's output before its norm
  float* bnd = nullptr;      // scratch: fast_delta_bnd_floats(n, C, K, nv, dk) (conv windows, then the core's)
  uint16_t* out = nullptr;   // [n][ldo] bf16: the gated, normed output (input of out_proj)
  int64_t ldo = 0;
  int64_t n = 0;
};
size_t fast_delta_bnd_floats(int64_t n, int64_t C, int K, int nv, int dk);
// conv (the exact path's per-channel order, rows split in segments of 64 with their windows saved first),
// l2norm of q and k, β and g, the chunked recurrence, the gated norm; see deltanet_chunked.cu.
void fast_deltanet(const FastDeltaArgs& a, cudaStream_t st);
// The chunked gated delta rule alone (tests): for rows t < n, value head h (key head h / (nv/nk)):
// q_t = qkv[t][kh·dk …], k_t = qkv[t][nk·dk + kh·dk …], v_t = qkv[t][2·nk·dk + h·dv …] (row stride C),
// g and beta [n][nv]; S [nv][dk][dv] updated; o [n][nv·dv]. The same function as n deltanet_step calls.
// scratch: gated_delta_chunked_scratch_floats(n, nv, dk) floats; qkv, S, o and scratch 16-byte aligned, C a
// multiple of 4, dv a multiple of 16, dk 32, 64 or 128.
size_t gated_delta_chunked_scratch_floats(int64_t n, int nv, int dk);
void gated_delta_chunked(int nk, int nv, int dk, int dv, int64_t n, const float* qkv, int64_t C, const float* g,
                         const float* beta, float* S, float* o, float* scratch, cudaStream_t st);

// ---- the engine's fast-prefill state (owned by Engine, see cuda/prefill_engine.cpp) ----------------
struct FastPrefillState {
  cublasHandle_t blas = nullptr;
  void* mem = nullptr;
  size_t bytes = 0;
  int64_t rows = 0;     // rows a pass, the scratch's sizing
  size_t wt_elems = 0;  // the bf16 weight tile's elements
  uint16_t* wt = nullptr;
  void* kv = nullptr;   // the attention's decoded K and V of one KV head (fast_attn_scratch_bytes)
  int64_t kv_keys = 0;  // the keys it holds
  ~FastPrefillState();
};

}  // namespace hkv::cuda
