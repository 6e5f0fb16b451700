// The engine's fast prefill path for long prompts (kernels in cuda/prefill.h): NOT EXACT (docs/ARITHMETIC.md §10).
//
// A prompt goes through the layers in passes of at most kFastMaxRows rows (fewer when the scratch would not
// fit; refused with the numbers below kFastMinRows). A pass:
//   embeddings (the exact embed_rows); per layer: input RMSNorm → bf16; the mixer; the residual added by the
//   output projection's GEMM (beta = 1 into the fp32 residual); post RMSNorm → bf16; the MLP (gate and up
//   GEMMs in column slices, silu·up → bf16, down GEMM adding into the residual).
//   Every weight product is cuBLAS (bf16 × bf16, fp32 accumulate): bf16 weights directly, others (MLX 4-bit,
//   f16, f32) converted to bf16 row tiles of at most kWeightTileElems elements just before their GEMM.
//   Full attention: q, k, v GEMMs; the exact attn_prep (q_norm, k_norm, RoPE) and kv_pack (the cache's bytes
//   are those of the format, from the fast path's K and V); fast_attention over the cache rows 0 … p0+t
//   (its decoded K and V of one KV head are taken for the prompt's last key before the rows a pass are chosen).
//   DeltaNet: qkv, z, b, a GEMMs; fast_deltanet (conv and S states carried in the sequence).
//   Logits of the wanted rows: the exact final RMSNorm and lm_head kernels on the fast path's hidden state.
// The sequence ends at pos + T with its cache, conv and S states in the exact path's formats.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "cuda/alloc.h"
#include "cuda/check.h"
#include "cuda/engine.h"
#include "cuda/prefill.h"

namespace hkv::cuda {

namespace {
constexpr int64_t kFastMaxRows = 4096;                 // rows a pass at most
constexpr int64_t kFastMinRows = 256;                  // halved down to this before refusing
constexpr size_t kWeightTileElems = size_t(64) << 20;  // bf16 weight tile: 128 MB
constexpr int64_t kLogitRows = 64;                     // rows a logits batch (the exact path's scratch)
constexpr size_t kPlanReserve = size_t(256) << 20;     // as Engine::check_fits keeps free

struct Widths {
  int64_t E, XM, F1, F2, mlp_w;
};
Widths widths(const Config& c) {
  const int64_t E = c.hidden_size, I = c.intermediate_size, H = c.num_attention_heads, KV = c.num_key_value_heads,
                D = c.head_dim, C = c.conv_dim(), nv = c.linear_num_value_heads,
                nvdv = int64_t(c.linear_num_value_heads) * c.linear_value_head_dim;
  const int64_t f1 = std::max(2 * H * D, C), f2 = std::max(2 * KV * D + H * D, 2 * nvdv + 2 * nv);
  const int64_t nsplit = (I + std::max(f1, f2) - 1) / std::max(f1, f2);
  const int64_t mlp_w = (I + nsplit - 1) / nsplit;
  return {E, std::max({I, H * D, nvdv}), std::max(f1, mlp_w), std::max(f2, mlp_w), mlp_w};
}

// The pass scratch, carved from one allocation (base null: sizes only).
struct FastBufs {
  float* h = nullptr;
  uint16_t *xa = nullptr, *xm = nullptr, *wt = nullptr;
  float *f1 = nullptr, *f2 = nullptr, *bnd = nullptr, *rope = nullptr;
  int *tok = nullptr, *pos = nullptr;
  uint8_t** kp = nullptr;  // [n_full][P]
  uint8_t** vp = nullptr;
  size_t bytes = 0, act_bytes = 0, wt_bytes = 0;
};
FastBufs carve(const Config& c, int64_t P, size_t wtile, void* base) {
  const Widths w = widths(c);
  const int n_full = c.n_full_layers(), rd = std::max(1, c.rotary_dim());
  FastBufs b;
  char* p = static_cast<char*>(base);
  size_t off = 0;
  auto take = [&](size_t n) {
    void* r = p ? p + off : nullptr;
    off += align256(n);
    return r;
  };
  b.h = static_cast<float*>(take(size_t(P * w.E) * 4));
  b.xa = static_cast<uint16_t*>(take(size_t(P * w.E) * 2));
  b.xm = static_cast<uint16_t*>(take(size_t(P * w.XM) * 2));
  b.f1 = static_cast<float*>(take(size_t(P * w.F1) * 4));
  b.f2 = static_cast<float*>(take(size_t(P * w.F2) * 4));
  b.act_bytes = off;
  b.wt = static_cast<uint16_t*>(take(wtile * 2));
  b.wt_bytes = off - b.act_bytes;
  if (c.n_linear_layers() > 0) {
    const size_t nbnd = fast_delta_bnd_floats(P, c.conv_dim(), c.linear_conv_kernel_dim, c.linear_num_value_heads,
                                              c.linear_key_head_dim);
    b.bnd = static_cast<float*>(take(nbnd * 4));
  }
  b.tok = static_cast<int*>(take(size_t(P) * 4));
  b.pos = static_cast<int*>(take(size_t(P) * 4));
  b.rope = static_cast<float*>(take(size_t(P * rd) * 4));
  b.kp = static_cast<uint8_t**>(take(size_t(std::max(n_full, 1)) * size_t(P) * sizeof(void*)));
  b.vp = static_cast<uint8_t**>(take(size_t(std::max(n_full, 1)) * size_t(P) * sizeof(void*)));
  b.bytes = off;
  return b;
}

std::string mb(size_t b) { return std::to_string((b + (1 << 19)) >> 20) + " MiB"; }
}  // namespace

bool Engine::uses_fast_prefill(int64_t T, const ForwardOptions& opt) const {
  switch (opt.prefill) {
    case Prefill::Exact:
      return false;
    case Prefill::Fast:
      return T > 0;
    case Prefill::Auto:  // (a head_dim the fused attention is not built for: exact; --prefill fast says so)
      return !opt.tap && T >= kAutoFastPrefillTokens && (n_full_ == 0 || fast_attn_head_dim_ok(c_.head_dim));
  }
  return false;
}

size_t Engine::fast_weight_tile_elems() const {
  size_t most = 0, widest = 0;
  for (const Layer& L : layers_)
    for (const DMat* m : {&L.q, &L.k, &L.v, &L.o, &L.qkv, &L.z, &L.b, &L.a, &L.out, &L.gate, &L.up, &L.down})
      if (m->data && m->type != WType::BF16) {
        most = std::max(most, size_t(m->rows * m->cols));
        widest = std::max(widest, size_t(m->cols));
      }
  return std::max(std::min(most, fast_tile_cap_ ? fast_tile_cap_ : kWeightTileElems), widest);
}

size_t Engine::fast_prefill_bytes(int64_t rows) const {
  return carve(c_, rows, fast_weight_tile_elems(), nullptr).bytes;
}

int64_t Engine::fast_prefill_rows(int64_t T) const {
  int64_t P = std::min(kFastMaxRows, std::max<int64_t>(T, 1));
  if (fast_ && fast_->rows >= P) return P;
  size_t free_b = 0, total_b = 0;
  HKV_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const size_t held = fast_ ? fast_->bytes : 0;  // freed before a larger scratch is taken
  while (P > kFastMinRows && fast_prefill_bytes(P) + kPlanReserve > free_b + held) P = std::max(kFastMinRows, P / 2);
  return P;
}

void Engine::fast_gemm(const DMat& W, int64_t r0, int64_t r1, const uint16_t* X, int64_t ldx, int64_t n, float* Y,
                       int64_t ldy, float beta) {
  const int64_t cols = W.cols;
  if (W.type == WType::BF16) {
    gemm_bf16_xwt(fast_->blas, static_cast<const uint16_t*>(W.data) + r0 * cols, r1 - r0, cols, cols, X, ldx, n, Y, ldy,
                  1.0f, beta);
    return;
  }
  // Rows a tile: as many as the tile holds, spread evenly over the tiles and rounded up to a multiple of 128
  // (within the tile), so that every tile's output offset is 16-byte aligned: an unaligned offset (3855 rows
  // of the 27B down projection) sends cuBLAS to an sm75 align-1 kernel 12x slower (H200, RESULTS §13).
  const int64_t fit = std::max<int64_t>(1, int64_t(fast_->wt_elems) / cols), total = r1 - r0;
  const int64_t tiles = (total + fit - 1) / fit;
  int64_t rt = (total + tiles - 1) / tiles;
  if (fit >= 128) rt = std::min(fit / 128 * 128, (rt + 127) / 128 * 128);
  for (int64_t r = r0; r < r1; r += rt) {
    const int64_t cnt = std::min(rt, r1 - r);
    dequant_rows_bf16(W, r, cnt, fast_->wt, stream_);
    gemm_bf16_xwt(fast_->blas, fast_->wt, cnt, cols, cols, X, ldx, n, Y + (r - r0), ldy, 1.0f, beta);
  }
}

std::vector<float> Engine::forward_fast(Sequence& s, const std::vector<int32_t>& tokens, const ForwardOptions& opt) {
  if (opt.tap) throw std::invalid_argument("engine: the fast prefill path reports no taps (use the exact path)");
  const Config& c = c_;
  const int64_t T = int64_t(tokens.size()), E = c.hidden_size, V = c.vocab_size;
  const int H = c.num_attention_heads, KV = c.num_key_value_heads, D = c.head_dim, rd = c.rotary_dim();
  const int nk = c.linear_num_key_heads, nv = c.linear_num_value_heads, dk = c.linear_key_head_dim,
            dv = c.linear_value_head_dim;
  const int64_t C = c.conv_dim(), HD = int64_t(H) * D, KVD = int64_t(KV) * D, nvdv = int64_t(nv) * dv;
  const float eps = float(c.rms_norm_eps);
  cudaStream_t st = stream_;
  if (T == 0) return {};
  if (s.format_.kind == KvKind::F32) throw std::invalid_argument("engine: the f32 cache is an oracle-only ablation");

  if (n_full_ > 0 && !fast_attn_head_dim_ok(D))
    throw std::runtime_error("engine: the fast prefill path's attention is built for head_dim 64, 128 and 256, not " +
                             std::to_string(D) + " (use --prefill exact)");
  ensure_scratch(std::max(kLogitRows, scratch_rows_), 1);  // the exact final norm and lm_head's buffers
  if (!fast_) {  // (before the rows a pass are chosen: the handle takes device memory)
    fast_ = std::make_shared<FastPrefillState>();
    HKV_CUBLAS_CHECK(cublasCreate(&fast_->blas));
    HKV_CUBLAS_CHECK(cublasSetStream(fast_->blas, st));
  }
  // The attention's decoded K and V of one KV head, as many keys as this prompt ends with: taken first, and the
  // rows a pass chosen in what is left.
  const int64_t keys = s.pos_ + T;
  if (n_full_ > 0 && fast_->kv_keys < keys) {
    if (fast_->kv) {
      HKV_CUDA_CHECK(cudaStreamSynchronize(st));
      device_free(fast_->kv);
      fast_->kv = nullptr, fast_->kv_keys = 0;
    }
    const size_t kv_need = fast_attn_scratch_bytes(keys, D);
    check_fits(kv_need,
               "the fast prefill attention's decoded K and V of one KV head for " + std::to_string(keys) + " keys");
    fast_->kv =
        device_alloc(kv_need, "the fast prefill attention's decoded K and V (" + std::to_string(keys) + " keys)");
    fast_->kv_keys = keys;
  }
  const int64_t P = fast_prefill_rows(T);
  if (fast_->rows < P) {
    if (fast_->mem) {
      HKV_CUDA_CHECK(cudaStreamSynchronize(st));
      device_free(fast_->mem);
      fast_->mem = nullptr, fast_->bytes = 0, fast_->rows = 0;
    }
    const size_t wtile = fast_weight_tile_elems();
    const FastBufs plan = carve(c, P, wtile, nullptr);
    check_fits(plan.bytes, "the fast prefill path's scratch for " + std::to_string(P) + " rows a pass (activations " +
                               mb(plan.act_bytes) + ", bf16 weight tile " + mb(plan.wt_bytes) + ", the rest " +
                               mb(plan.bytes - plan.act_bytes - plan.wt_bytes) + "; at least " +
                               std::to_string(kFastMinRows) + " rows a pass)");
    fast_->mem = device_alloc(plan.bytes, "the fast prefill path's scratch for " + std::to_string(P) + " rows");
    // Poisoned with NaN (all-ones bytes: NaN in f32 and in bf16): an element read before it is written turns
    // the logits NaN, which gpu_prefill and `hkv diff --op fast_prefill` refuse. (compute-sanitizer initcheck
    // reported reads of buffers that cuBLAS writes; with the poison in place the tests decide.)
    HKV_CUDA_CHECK(cudaMemsetAsync(fast_->mem, 0xff, plan.bytes, st));
    fast_->bytes = plan.bytes;
    fast_->rows = P;
    fast_->wt_elems = wtile;
  }
  const FastBufs b = carve(c, fast_->rows, fast_->wt_elems, fast_->mem);
  fast_->wt = b.wt;
  const Widths w = widths(c);

  std::vector<float> logits;
  const bool want_all = opt.want_logits && !opt.last_only;
  if (want_all) logits.reserve(size_t(T * V));
  std::vector<int> hint(size_t(2 * P));
  std::vector<float> hrope(size_t(P * std::max(rd, 1)));
  std::vector<uint8_t*> hptr(size_t(std::max(n_full_, 1) * P));
  for (int64_t t0 = 0; t0 < T; t0 += P) {
    const int64_t n = std::min(P, T - t0), p0 = s.pos_;
    // per-pass metadata: tokens, positions, RoPE rows, cache destinations
    for (int64_t i = 0; i < n; i++) {
      hint[size_t(i)] = tokens[size_t(t0 + i)];
      hint[size_t(P + i)] = int(p0 + i);
      if (rd > 0) rope_row(c, p0 + i, hrope.data() + i * rd, hrope.data() + i * rd + rd / 2);
    }
    HKV_CUDA_CHECK(cudaMemcpyAsync(b.tok, hint.data(), size_t(n) * 4, cudaMemcpyHostToDevice, st));
    HKV_CUDA_CHECK(cudaMemcpyAsync(b.pos, hint.data() + P, size_t(n) * 4, cudaMemcpyHostToDevice, st));
    if (rd > 0) HKV_CUDA_CHECK(cudaMemcpyAsync(b.rope, hrope.data(), size_t(n * rd) * 4, cudaMemcpyHostToDevice, st));
    if (n_full_ > 0) {
      for (int f = 0; f < n_full_; f++)
        for (int64_t i = 0; i < P; i++) hptr[size_t(f * P + i)] = s.k_[size_t(f)];
      HKV_CUDA_CHECK(cudaMemcpyAsync(b.kp, hptr.data(), hptr.size() * sizeof(void*), cudaMemcpyHostToDevice, st));
      for (int f = 0; f < n_full_; f++)
        for (int64_t i = 0; i < P; i++) hptr[size_t(f * P + i)] = s.v_[size_t(f)];
      HKV_CUDA_CHECK(cudaMemcpyAsync(b.vp, hptr.data(), hptr.size() * sizeof(void*), cudaMemcpyHostToDevice, st));
    }

    embed_rows(embed_, b.tok, n, b.h, st, tuning_);
    int fi = 0, li = 0;
    for (int l = 0; l < c.num_hidden_layers; l++) {
      const Layer& L = layers_[size_t(l)];
      rmsnorm_bf16(b.h, n, E, L.input_norm, eps, b.xa, st);
      if (L.kind == LayerKind::Full) {
        float *kbuf = b.f2, *vbuf = b.f2 + P * KVD, *qbuf = b.f2 + 2 * P * KVD;
        fast_gemm(L.q, 0, 2 * HD, b.xa, E, n, b.f1, 2 * HD, 0.0f);
        fast_gemm(L.k, 0, KVD, b.xa, E, n, kbuf, KVD, 0.0f);
        fast_gemm(L.v, 0, KVD, b.xa, E, n, vbuf, KVD, 0.0f);
        attn_prep(b.f1, qbuf, kbuf, L.q_norm, L.k_norm, b.rope, n, H, KV, D, rd, eps, st, tuning_);
        kv_pack(s.format_, kbuf, KVD, vbuf, KVD, b.kp + int64_t(fi) * P, b.vp + int64_t(fi) * P, b.pos, n, KV, D, err_,
                st, tuning_);
        FastAttnArgs a;
        a.kind = s.format_.kind;
        a.D = D, a.H = H, a.KV = KV;
        a.row_bytes = s.row_bytes_;
        a.q = qbuf, a.ldq = HD;
        a.gate = b.f1 + D, a.ldg = 2 * HD, a.gate_stride = 2 * D;
        a.k_cache = s.k_[size_t(fi)], a.v_cache = s.v_[size_t(fi)];
        a.p0 = p0, a.n = n;
        a.out = b.xm, a.ldo = HD;
        a.max_keys = fast_->kv_keys, a.scratch = fast_->kv;
        fast_attention(a, st, tuning_.flash);
        fast_gemm(L.o, 0, E, b.xm, HD, n, b.h, E, 1.0f);
        fi++;
      } else {
        float *z = b.f2, *o = b.f2 + P * nvdv, *bb = b.f2 + 2 * P * nvdv, *aa = bb + P * nv;
        fast_gemm(L.qkv, 0, C, b.xa, E, n, b.f1, C, 0.0f);
        fast_gemm(L.z, 0, nvdv, b.xa, E, n, z, nvdv, 0.0f);
        fast_gemm(L.b, 0, nv, b.xa, E, n, bb, nv, 0.0f);
        fast_gemm(L.a, 0, nv, b.xa, E, n, aa, nv, 0.0f);
        FastDeltaArgs d;
        d.nk = nk, d.nv = nv, d.dk = dk, d.dv = dv, d.K = c.linear_conv_kernel_dim, d.C = C;
        d.eps = eps, d.q_scale = float(1.0 / std::sqrt(double(dk)));
        d.conv_state = s.conv_[size_t(li)], d.S = s.S_[size_t(li)];
        d.conv_w = L.conv, d.A_log = L.A_log, d.dt_bias = L.dt_bias, d.norm_w = L.norm;
        d.qkv = b.f1, d.z = z, d.b = bb, d.a = aa, d.o = o, d.bnd = b.bnd;
        d.out = b.xm, d.ldo = nvdv, d.n = n;
        fast_deltanet(d, st);
        fast_gemm(L.out, 0, E, b.xm, nvdv, n, b.h, E, 1.0f);
        li++;
      }
      rmsnorm_bf16(b.h, n, E, L.post_norm, eps, b.xa, st);
      const int64_t I = c.intermediate_size;
      for (int64_t a0 = 0; a0 < I; a0 += w.mlp_w) {
        const int64_t a1 = std::min(I, a0 + w.mlp_w), cw = a1 - a0;
        fast_gemm(L.gate, a0, a1, b.xa, E, n, b.f1, cw, 0.0f);
        fast_gemm(L.up, a0, a1, b.xa, E, n, b.f2, cw, 0.0f);
        silu_mul_bf16(b.f1, b.f2, cw, n, cw, b.xm + a0, I, st);
      }
      fast_gemm(L.down, 0, E, b.xm, I, n, b.h, E, 1.0f);
    }

    // logits of the wanted rows of this pass: the exact final norm and lm_head, kLogitRows rows at a time
    int64_t lo = n, hi = n;
    if (want_all)
      lo = 0;
    else if (opt.want_logits && t0 + n == T)
      lo = n - 1;
    for (int64_t r = lo; r < hi; r += scratch_rows_) {
      const int64_t R = std::min(scratch_rows_, hi - r);
      rmsnorm_rows(b.h + r * E, E, final_norm_, false, E, eps, R, x_, E, st, tuning_);
      matvec(lm_head_, x_, E, R, logits_, V, reinterpret_cast<uint32_t*>(xq_), st, tuning_);
      const size_t at = logits.size();
      logits.resize(at + size_t(R * V));
      HKV_CUDA_CHECK(cudaMemcpyAsync(logits.data() + at, logits_, size_t(R * V) * 4, cudaMemcpyDeviceToHost, st));
      HKV_CUDA_CHECK(cudaStreamSynchronize(st));
    }
    check_pack_error(st);
    s.pos_ += n;
  }
  return logits;
}

}  // namespace hkv::cuda
