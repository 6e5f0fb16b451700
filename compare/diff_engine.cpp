// The engine's cases of the differential suite: ops and the whole model, engine against oracle, byte for
// byte. Built only with the CUDA engine; the cases need a GPU at run time.
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "compare/diff.h"
#include "compare/stats.h"
#include "reference/model.h"
#include "reference/scalar.h"
#include "reference/synthetic.h"
#include "reference/tokens.h"

#ifdef HKV_HAVE_CUDA
#include <cuda_runtime.h>

#include "cuda/engine.h"
#include "cuda/kernels.h"
#endif

namespace hkv {

#ifndef HKV_HAVE_CUDA
std::vector<DiffCase> engine_diff_cases() { return {}; }
#else

namespace {

// ---- device buffers --------------------------------------------------------------------------------

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t n) { check(cudaMalloc(&p, n ? n : 1), "cudaMalloc"); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

std::unique_ptr<DevBuf> upload(const void* host, size_t n) {
  auto b = std::make_unique<DevBuf>(n);
  check(cudaMemcpy(b->p, host, n, cudaMemcpyHostToDevice), "upload");
  return b;
}

std::vector<float> download(const DevBuf& b, size_t count) {
  std::vector<float> out(count);
  check(cudaDeviceSynchronize(), "kernel");
  check(cudaMemcpy(out.data(), b.p, count * 4, cudaMemcpyDeviceToHost), "download");
  return out;
}

CaseResult compare(const std::vector<float>& want, const std::vector<float>& got) {
  Trace a, b;
  a.logits = want;
  b.logits = got;
  std::string d = first_divergence(a, b);
  if (d.empty()) return {CaseResult::Ok, ""};
  return {CaseResult::Fail, "oracle vs engine: " + d.substr(7)};  // drop "logits "
}

std::vector<float> values(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) v[size_t(i)] = float(synth_int(seed, 41, uint64_t(i))) / 3.0f;
  return v;
}

// ---- op cases --------------------------------------------------------------------------------------

CaseResult matvec_case(WType t, int64_t rows, int64_t cols, int64_t batch) {
  SyntheticSpec spec = builtin_spec("tiny");
  spec.weights = t == WType::MLX4 ? WType::MLX4 : WType::BF16;
  spec.config.quant_group_size = 64;
  // one synthetic matrix of the requested shape and type
  std::vector<uint16_t> h;
  std::vector<float> f;
  std::vector<uint32_t> q;
  std::vector<uint16_t> sb;
  Matrix W;
  W.type = t;
  W.rows = rows;
  W.cols = cols;
  const uint64_t id = synth_tensor_id("diff.matvec");
  if (t == WType::MLX4) {
    W.group = 64;
    q.resize(size_t(rows * cols / 8));
    for (size_t i = 0; i < q.size(); i++) q[i] = synth_mlx4_word(7, id, i);
    const size_t ng = size_t(rows * cols / 64);
    sb.resize(2 * ng);
    for (size_t g = 0; g < ng; g++) sb[g] = synth_mlx4_scale(7, id, g, 8), sb[ng + g] = synth_bf16(7, id + 1, g, 6);
    W.data = q.data();
    W.scales = sb.data();
    W.biases = sb.data() + ng;
  } else if (t == WType::F32) {
    f.resize(size_t(rows * cols));
    for (size_t i = 0; i < f.size(); i++) f[i] = float(synth_int(7, id, i)) / 1000.0f;
    W.data = f.data();
  } else {
    h.resize(size_t(rows * cols));
    for (size_t i = 0; i < h.size(); i++)
      h[i] = t == WType::BF16 ? synth_bf16(7, id, i, 9) : f16_from_f32(f32_from_bf16(synth_bf16(7, id, i, 9)));
    W.data = h.data();
  }
  std::vector<float> X = values(batch * cols, 3), want(static_cast<size_t>(batch * rows));
  matmul(W, X.data(), batch, want.data());

  auto dw = upload(W.data, t == WType::MLX4 ? q.size() * 4 : W.nbytes());
  std::unique_ptr<DevBuf> dsb = t == WType::MLX4 ? upload(sb.data(), sb.size() * 2) : nullptr;
  cuda::DMat D;
  D.type = t;
  D.rows = rows;
  D.cols = cols;
  D.group = W.group;
  D.data = dw->p;
  if (dsb) D.scales = dsb->as<uint16_t>(), D.biases = dsb->as<uint16_t>() + sb.size() / 2;
  auto dx = upload(X.data(), X.size() * 4);
  DevBuf dy(static_cast<size_t>(batch * rows) * 4),
      dxq(static_cast<size_t>(batch * ((cols + 31) / 32)) * cuda::kXqWords * 4);
  cuda::matvec(D, dx->as<float>(), cols, batch, dy.as<float>(), rows, dxq.as<uint32_t>(), nullptr);
  return compare(want, download(dy, size_t(batch * rows)));
}

CaseResult rmsnorm_case(int64_t n, int64_t rows, bool plain) {
  std::vector<float> x = values(rows * n, 5), w = values(n, 6), want(static_cast<size_t>(rows * n));
  for (float& v : w) v = v / 64.0f;
  for (int64_t r = 0; r < rows; r++)
    (plain ? rmsnorm_plain : rmsnorm_1pw)(x.data() + r * n, w.data(), n, 1e-6f, want.data() + r * n);
  auto dx = upload(x.data(), x.size() * 4), dw = upload(w.data(), w.size() * 4);
  DevBuf out(x.size() * 4);
  cuda::rmsnorm_rows(dx->as<float>(), n, dw->as<float>(), plain, n, 1e-6f, rows, out.as<float>(), n, nullptr);
  return compare(want, download(out, x.size()));
}

CaseResult kv_pack_case(const KvFormat& f, int D, int KV, int64_t N) {
  const size_t rb = kv_row_bytes(f, D);
  std::vector<float> k = values(N * KV * D, 8), v = values(N * KV * D, 9);
  for (int64_t i = 0; i < N * KV * D; i += 37) k[size_t(i)] *= 20.0f;  // outliers
  std::vector<uint8_t> want(static_cast<size_t>(N) * static_cast<size_t>(KV) * rb * 2);
  for (int64_t r = 0; r < N; r++)
    for (int h = 0; h < KV; h++) {
      kv_pack_row(f, k.data() + (r * KV + h) * D, D, want.data() + (size_t(r) * size_t(KV) + size_t(h)) * rb);
      kv_pack_row(f, v.data() + (r * KV + h) * D, D,
                  want.data() + size_t(N) * size_t(KV) * rb + (size_t(r) * size_t(KV) + size_t(h)) * rb);
    }
  auto dk = upload(k.data(), k.size() * 4), dv = upload(v.data(), v.size() * 4);
  DevBuf cache(want.size()), err(4);
  check(cudaMemset(err.p, 0, 4), "memset");
  std::vector<uint8_t*> kd(static_cast<size_t>(N), cache.as<uint8_t>()),
      vd(static_cast<size_t>(N), cache.as<uint8_t>() + want.size() / 2);
  std::vector<int> pos(static_cast<size_t>(N));
  for (int64_t r = 0; r < N; r++) pos[size_t(r)] = int(r);
  auto dkd = upload(kd.data(), kd.size() * sizeof(void*)), dvd = upload(vd.data(), vd.size() * sizeof(void*));
  auto dpos = upload(pos.data(), pos.size() * 4);
  cuda::kv_pack(f.kind, dk->as<float>(), KV * D, dv->as<float>(), KV * D, dkd->as<uint8_t*>(), dvd->as<uint8_t*>(),
                dpos->as<int>(), N, KV, D, err.as<int>(), nullptr);
  std::vector<uint8_t> got(want.size());
  check(cudaDeviceSynchronize(), "kv_pack");
  check(cudaMemcpy(got.data(), cache.p, got.size(), cudaMemcpyDeviceToHost), "download");
  for (size_t i = 0; i < got.size(); i++)
    if (got[i] != want[i])
      return {CaseResult::Fail, "byte " + std::to_string(i) + " (row " + std::to_string(i / rb) + ", offset " +
                                    std::to_string(i % rb) + "): oracle " + std::to_string(want[i]) + ", engine " +
                                    std::to_string(got[i])};
  return {CaseResult::Ok, ""};
}

CaseResult deltanet_case(int nv, int dk, int dv, int steps) {
  std::vector<float> S(static_cast<size_t>(nv) * static_cast<size_t>(dk * dv), 0.0f);
  auto dS = upload(S.data(), S.size() * 4);
  DevBuf dq(static_cast<size_t>(nv * dk) * 4), dkk(static_cast<size_t>(nv * dk) * 4),
      dvv(static_cast<size_t>(nv * dv) * 4), db(static_cast<size_t>(nv) * 4), dg(size_t(nv) * 4),
      dout(size_t(nv * dv) * 4);
  for (int t = 0; t < steps; t++) {
    std::vector<float> q = values(nv * dk, 100 + uint64_t(t)), k = values(nv * dk, 200 + uint64_t(t)),
                       v = values(nv * dv, 300 + uint64_t(t)), beta(static_cast<size_t>(nv)),
                       g(static_cast<size_t>(nv)), o(static_cast<size_t>(nv * dv));
    for (int h = 0; h < nv; h++) {
      l2norm_inplace(k.data() + h * dk, dk);
      l2norm_inplace(q.data() + h * dk, dk);
      beta[size_t(h)] = sigmoid_c(float(h - t) * 0.3f);
      g[size_t(h)] = -0.02f * float((h + t) % 7);
      deltanet_step(S.data() + size_t(h) * size_t(dk * dv), q.data() + h * dk, k.data() + h * dk, v.data() + h * dv,
                    beta[size_t(h)], g[size_t(h)], dk, dv, o.data() + h * dv);
    }
    check(cudaMemcpy(dq.p, q.data(), q.size() * 4, cudaMemcpyHostToDevice), "up");
    check(cudaMemcpy(dkk.p, k.data(), k.size() * 4, cudaMemcpyHostToDevice), "up");
    check(cudaMemcpy(dvv.p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), "up");
    check(cudaMemcpy(db.p, beta.data(), beta.size() * 4, cudaMemcpyHostToDevice), "up");
    check(cudaMemcpy(dg.p, g.data(), g.size() * 4, cudaMemcpyHostToDevice), "up");
    cuda::deltanet_step_heads(dS->as<float>(), dq.as<float>(), dkk.as<float>(), dvv.as<float>(), db.as<float>(),
                              dg.as<float>(), nv, dk, dv, dout.as<float>(), nullptr);
    CaseResult r = compare(o, download(dout, o.size()));
    if (r.status != CaseResult::Ok) {
      r.detail = "step " + std::to_string(t) + ": " + r.detail;
      return r;
    }
  }
  return compare(S, download(*dS, S.size()));
}

// ---- model cases -----------------------------------------------------------------------------------

Trace engine_trace(cuda::Engine& e, const KvFormat& f, const std::vector<int32_t>& tokens, int64_t decode, bool taps) {
  auto s = e.new_sequence(f, int64_t(tokens.size()));
  auto fwd = [&e, &s](const std::vector<int32_t>& t, const ForwardOptions& o) { return e.forward(*s, t, o); };
  return record_trace(fwd, tokens, decode, {}, taps);
}

std::vector<int32_t> tokens_for(const Model& m, int64_t n, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++)
    t[size_t(i)] = int32_t(synth_bits(seed, 11, uint64_t(i)) % uint64_t(m.config.vocab_size));
  return t;
}

// Models are built once and shared by their cases.
std::shared_ptr<Model> cached_model(const std::string& source) {
  static std::map<std::string, std::shared_ptr<Model> > cache;
  auto& slot = cache[source];
  if (!slot)
    slot = std::make_shared<Model>(source == "synthetic:27b-heads" ? [] {
    SyntheticSpec s = builtin_spec("27b");  // the 27B head layout with a small hidden size and 4 layers
    s.config.hidden_size = 512;
    s.config.intermediate_size = 1024;
    s.config.vocab_size = 1000;
    s.config.num_hidden_layers = 4;
    s.config.layer_types = {LayerKind::Linear, LayerKind::Full, LayerKind::Linear, LayerKind::Full};
    return build_synthetic(s);
  }()
                                                                                         : load_any_model(source));
  return slot;
}

std::shared_ptr<cuda::Engine> cached_engine(const std::string& source) {
  static std::map<std::string, std::shared_ptr<cuda::Engine> > cache;
  auto& slot = cache[source];
  if (!slot) slot = std::make_shared<cuda::Engine>(*cached_model(source));
  return slot;
}

CaseResult model_case(const std::string& source, const KvFormat& f, int64_t ctx, int64_t decode, bool taps) {
  auto m = cached_model(source);
  auto toks = tokens_for(*m, ctx, uint64_t(ctx));
  Trace a = oracle_trace(*m, f, toks, decode, -1, taps);
  Trace b = engine_trace(*cached_engine(source), f, toks, decode, taps);
  std::string d = first_divergence(a, b);
  if (d.empty()) return {CaseResult::Ok, std::to_string(a.taps.size()) + " taps and the logits equal"};
  return {CaseResult::Fail, "first divergence at " + d};
}

// ---- the fast prefill path: not exact, compared by KL ----------------------------------------
// Bars, and why: the fast path must cost at most a tenth of the fidelity gate's q4h bar (mean KL 0.01,
// worst 0.1; design.md), so that a gate run on a fast-prefilled cache still measures the cache format, not
// the prefill: mean KL <= 1e-3, worst <= 1e-2. Top-1 agreement >= 0.97: bf16 operands move logits by about
// 2^-9 of their scale, which flips the top token only at near-ties; a few in a hundred rows of a random
// synthetic model are that close. A flip counts against the bar only when the oracle's logits of the two
// tokens are more than kFastTie apart: the fast path moves a logit by up to a few hundredths (a worst KL of
// 1e-3 is a logit shift of about sqrt(2e-3) = 0.045), so a gap under 0.05 is a tie that rounding may break
// either way. The raw agreement and the largest flipped gap are printed beside it. (H200, 2026-11-30: the
// raw agreement of hf/causal_f32_sharded_hd256 in q4h was 0.9653, 9 flips in 259 rows, at KL mean 5.9e-5.)
constexpr double kFastKlMean = 1e-3, kFastKlMax = 1e-2, kFastTop1 = 0.97, kFastTie = 0.05;

CaseResult fast_prefill_case(const std::string& source, const KvFormat& f, int64_t ctx, int64_t decode) {
  auto m = cached_model(source);
  auto toks = tokens_for(*m, ctx, uint64_t(ctx) + 17);
  Trace a = oracle_trace(*m, f, toks, decode, -1, false);
  auto e = cached_engine(source);
  auto s = e->new_sequence(f, int64_t(toks.size()));
  auto fwd = [&e, &s](const std::vector<int32_t>& t, const ForwardOptions& o) {
    ForwardOptions o2 = o;
    o2.prefill = t.size() > 1 ? Prefill::Fast : Prefill::Exact;  // the prompt fast, decode exact
    return e->forward(*s, t, o2);
  };
  Trace b = record_trace(fwd, toks, decode, {}, false);
  const int64_t V = m->config.vocab_size, rows = int64_t(a.logits.size()) / V;
  if (int64_t(b.logits.size()) != rows * V) return {CaseResult::Fail, "the engine returned another number of rows"};
  const int64_t first = std::max<int64_t>(0, rows - decode - 256);  // the last 256 prompt rows and the decode rows
  double sum = 0, worst = 0, widest_flip = 0;
  int64_t agree = 0, agree_or_tie = 0, worst_row = 0;
  for (int64_t r = first; r < rows; r++) {
    const float* la = a.logits.data() + r * V;
    const double kl = kl_divergence(la, b.logits.data() + r * V, V);
    if (!std::isfinite(kl)) return {CaseResult::Fail, "row " + std::to_string(r) + ": KL is not finite"};
    sum += kl;
    if (kl > worst) worst = kl, worst_row = r;
    const int32_t ta = argmax(la, V), tb = argmax(b.logits.data() + r * V, V);
    const double gap = double(la[ta]) - double(la[tb]);  // the oracle's preference for its own top token
    agree += ta == tb;
    agree_or_tie += ta == tb || gap < kFastTie;
    if (ta != tb) widest_flip = std::max(widest_flip, gap);
  }
  const double n = double(rows - first), mean = sum / n, top1 = double(agree_or_tie) / n;
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "%lld rows: KL mean %.3g (bar %.0e), worst %.3g at row %lld (bar %.0e), top-1 %.4f outside ties "
                "under %.2f (bar %.2f; raw %.4f, widest flip %.3g)",
                (long long)(rows - first), mean, kFastKlMean, worst, (long long)worst_row, kFastKlMax, top1, kFastTie,
                kFastTop1, double(agree) / n, widest_flip);
  const bool ok = mean <= kFastKlMean && worst <= kFastKlMax && top1 >= kFastTop1;
  return {ok ? CaseResult::Ok : CaseResult::Fail, buf};
}

}  // namespace

std::vector<DiffCase> engine_diff_cases() {
  int n = 0;
  const bool gpu = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  std::vector<DiffCase> cases;
  auto add = [&](const std::string& op, const std::string& params, bool long_ctx, std::function<CaseResult()> fn) {
    if (!gpu) fn = [] { return CaseResult{CaseResult::Skip, "no GPU"}; };
    cases.push_back({op, params, long_ctx, fn});
  };
  for (WType t : {WType::F32, WType::BF16, WType::F16, WType::MLX4})
    for (auto [rows, cols] :
         std::vector<std::pair<int64_t, int64_t> >{{37, 320}, {1000, 128}, {5120, 1024}, {256, 5120}})
      for (int64_t batch : {1, 4}) {
        if (t == WType::MLX4 && cols % 64) continue;
        add("matvec",
            std::string("type=") + wtype_name(t) + ",rows=" + std::to_string(rows) + ",cols=" + std::to_string(cols) +
                ",batch=" + std::to_string(batch),
            false, [=] { return matvec_case(t, rows, cols, batch); });
      }
  for (int64_t width : {128, 256, 5120})
    for (bool plain : {false, true})
      add("rmsnorm", "n=" + std::to_string(width) + ",rows=3," + (plain ? "plain" : "1+w"), false,
          [=] { return rmsnorm_case(width, 3, plain); });
  for (const char* fmt : {"bf16", "fp8", "q4h"})
    for (int D : {128, 256})
      add("kv_pack", std::string("cache=") + fmt + ",head_dim=" + std::to_string(D) + ",kv=4,rows=33", false,
          [=] { return kv_pack_case(KvFormat::parse(fmt), D, 4, 33); });
  for (auto [nv, dk, dv] : std::vector<std::tuple<int, int, int> >{{4, 32, 32}, {48, 128, 128}, {3, 64, 48}})
    add("deltanet", "nv=" + std::to_string(nv) + ",dk=" + std::to_string(dk) + ",dv=" + std::to_string(dv) + ",steps=5",
        false, [=] { return deltanet_case(nv, dk, dv, 5); });

  std::vector<std::string> models = {"builtin:tiny", "builtin:tiny-mlx4", "synthetic:27b-heads"};
  const std::string hf = std::string(HKV_SOURCE_DIR) + "/fixtures/hf/";
  if (std::filesystem::exists(hf + "manifest.json")) {
    auto man = nlohmann::json::parse(read_file(hf + "manifest.json"));
    for (auto& fx : man["fixtures"]) models.push_back(hf + fx["name"].get<std::string>());
  }
  for (const std::string& src : models)
    for (const char* fmt : {"bf16", "fp8", "q4h"})
      for (int64_t ctx : {37, 600, 1100}) {
        const std::string label = src.rfind(hf, 0) == 0 ? "hf/" + src.substr(hf.size()) : src;
        add("model", "model=" + label + ",cache=" + fmt + ",ctx=" + std::to_string(ctx) + ",decode=3", false,
            [=] { return model_case(src, KvFormat::parse(fmt), ctx, 3, true); });
      }
  for (const char* fmt : {"bf16", "q4h"})
    add("model", std::string("model=builtin:tiny,cache=") + fmt + ",ctx=4096,decode=2", false,
        [=] { return model_case("builtin:tiny", KvFormat::parse(fmt), 4096, 2, false); });
  // Long contexts on the exact path, which must agree exactly; as deep as the oracle reaches on a runner's CPU in
  // minutes (the 32K case: 74 s on the lent H200 machine's 16 cores, docs/RESULTS.md §10).
  for (int64_t ctx : {8192, 32768})
    add("model", "model=builtin:tiny,cache=q4h,ctx=" + std::to_string(ctx) + ",decode=2,long", true,
        [=] { return model_case("builtin:tiny", KvFormat::q4h(), ctx, 2, false); });
  // The fast prefill path against the oracle's exact prefill, by KL (bars at fast_prefill_case), with exact
  // decode after it. Short contexts in the default table; one pass and two passes (8192 > 4096 rows a pass)
  // and deeper with --long.
  for (const std::string src : {"builtin:tiny", "builtin:tiny-mlx4", "synthetic:27b-heads"})
    for (const char* fmt : {"bf16", "fp8", "q4h"})
      add("fast_prefill", "model=" + src + ",cache=" + fmt + ",ctx=1100,decode=3", false,
          [=] { return fast_prefill_case(src, KvFormat::parse(fmt), 1100, 3); });
  for (const std::string& src : models)
    if (src.rfind(hf, 0) == 0)
      add("fast_prefill", "model=hf/" + src.substr(hf.size()) + ",cache=q4h,decode=3", false, [=] {
        auto m = cached_model(src);
        return fast_prefill_case(src, KvFormat::q4h(), std::min<int64_t>(300, m->config.max_position_embeddings), 3);
      });
  for (int64_t ctx : {8192, 32768})
    for (const char* fmt : {"bf16", "q4h"})
      add("fast_prefill",
          std::string("model=builtin:tiny,cache=") + fmt + ",ctx=" + std::to_string(ctx) + ",decode=2,long", true,
          [=] { return fast_prefill_case("builtin:tiny", KvFormat::parse(fmt), ctx, 2); });
  add("fast_prefill", "model=synthetic:27b-heads,cache=q4h,ctx=8192,decode=2,long", true,
      [=] { return fast_prefill_case("synthetic:27b-heads", KvFormat::q4h(), 8192, 2); });
  // A case that must fail: the engine's cache with one flipped byte.
  add("model", "corrupted-engine-cache-must-differ,cache=q4h", false, [] {
    auto m = cached_model("builtin:tiny");
    auto e = cached_engine("builtin:tiny");
    auto toks = tokens_for(*m, 40, 5);
    Trace a = oracle_trace(*m, KvFormat::q4h(), toks, 4);
    auto s = e->new_sequence(KvFormat::q4h(), 40);
    Trace b;
    b.logits = e->forward(*s, std::vector<int32_t>(toks.begin(), toks.end() - 4));
    SequenceState st = e->download(*s);
    st.k_cache[0][3] ^= 0x10;
    s = e->upload(st);
    for (size_t i = toks.size() - 4; i < toks.size(); i++) {
      auto l = e->forward(*s, {toks[i]});
      b.logits.insert(b.logits.end(), l.begin(), l.end());
    }
    a.taps.clear();
    std::string d = first_divergence(a, b);
    if (d.empty()) return CaseResult{CaseResult::Fail, "a flipped cache byte went unnoticed"};
    return CaseResult{CaseResult::Ok, "detected: " + d};
  });
  return cases;
}

#endif

}  // namespace hkv
