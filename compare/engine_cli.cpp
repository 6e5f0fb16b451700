// The engine's subcommands of `hkv` (wired in compare/cli.cpp): logits and generate on the CUDA engine
// (--backend cuda), and `hkv bench`, decode speed of the 27B shape against its bandwidth floor.
// Built only with the CUDA engine (HKV_HAVE_CUDA).
#if defined(HKV_HAVE_CUDA)

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "compare/cli.h"
#include "compare/draft.h"
#include "compare/gate.h"
#include "cuda/check.h"
#include "cuda/engine.h"
#include "reference/model.h"
#include "reference/synthetic.h"
#include "reference/tokens.h"

namespace hkv {

int cmd_logits_cuda(const Args& a);
int cmd_generate_cuda(const Args& a);
int cmd_bench(const Args& a);

// ---- the engine as a SequenceRunner (compare/gate.h; declared there, defined here with the engine) ----

namespace {
class EngineRunner : public SequenceRunner {
 public:
  EngineRunner(std::shared_ptr<cuda::Engine> eng, const KvFormat& f, int64_t capacity, Prefill prefill)
      : eng_(std::move(eng)), seq_(eng_->new_sequence(f, capacity)), prefill_(prefill) {}
  void feed(const std::vector<int32_t>& tokens, std::vector<float>* logits) override {
    ForwardOptions o;
    o.want_logits = logits != nullptr;
    o.prefill = prefill_;
    std::vector<float> l = eng_->forward(*seq_, tokens, o);
    if (logits) *logits = std::move(l);
  }

 private:
  std::shared_ptr<cuda::Engine> eng_;
  std::unique_ptr<cuda::Sequence> seq_;
  Prefill prefill_;
};
}  // namespace

RunnerFactory engine_runners(const Model& m, Prefill prefill) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
    throw std::runtime_error("the CUDA engine needs a GPU; none is present");
  auto eng = std::make_shared<cuda::Engine>(m);
  return [eng, prefill](const KvFormat& f, int64_t capacity) -> std::unique_ptr<SequenceRunner> {
    return std::make_unique<EngineRunner>(eng, f, capacity, prefill);
  };
}

// hkv logits --backend cuda: as cmd_logits, on the engine (same bytes as the oracle on the exact path).
int cmd_logits_cuda(const Args& a) {
  Model m = load_any_model(a.need("model"));
  std::vector<int32_t> tokens = read_tokens(a.need("tokens"), m.config.vocab_size);
  const std::string out = a.need("out");
  KvFormat f = KvFormat::parse(a.get("kv-cache", "bf16"));
  ForwardOptions o;
  o.prefill = prefill_arg(a, "cuda");
  check_context(a.need("tokens"), int64_t(tokens.size()), m);
  cuda::Engine eng(m);
  auto s = eng.new_sequence(f, int64_t(tokens.size()));
  std::vector<float> logits = eng.forward(*s, tokens, o);
  check_logits_finite(logits, m.config.vocab_size, m.source);
  write_file_atomic(out, logits.data(), logits.size() * sizeof(float));
  std::printf("%s: %zu tokens x %lld vocab, cache %s, backend cuda%s, xxh64 %s\n", out.c_str(), tokens.size(),
              static_cast<long long>(m.config.vocab_size), f.name().c_str(),
              cuda::Engine::uses_fast_prefill(int64_t(tokens.size()), o) ? " (fast prefill: not exact)" : "",
              xxh64_hex(logits.data(), logits.size() * sizeof(float)).c_str());
  return 0;
}

// hkv generate --backend cuda: greedy decode on the engine.
// The engine as a draft target: snapshot() keeps the DeltaNet and conv states and the position.
class EngineDraftTarget : public DraftTarget {
 public:
  EngineDraftTarget(cuda::Engine& e, cuda::Sequence& s) : e_(e), s_(s) {}
  std::vector<float> feed(const std::vector<int32_t>& tokens) override { return e_.forward(s_, tokens); }
  void mark() override { snap_ = e_.snapshot(s_); }
  void rollback() override { e_.rollback(s_, *snap_); }
  int64_t vocab() const override { return e_.config().vocab_size; }

 private:
  cuda::Engine& e_;
  cuda::Sequence& s_;
  std::unique_ptr<cuda::Snapshot> snap_;
};

int cmd_generate_cuda(const Args& a) {
  Model m = load_any_model(a.need("model"));
  std::vector<int32_t> prompt;
  if (a.has("tokens"))
    prompt = read_tokens(a.get("tokens"), m.config.vocab_size);
  else
    for (unsigned char ch : a.need("prompt")) prompt.push_back(ch);
  if (prompt.empty()) throw UsageError("hkv generate: the prompt is empty");
  const int n = int(a.get_int("n", 32)), k = int(a.get_int("draft", 0));
  if (n < 1 || k < 0) throw UsageError("hkv generate: --n must be at least 1 and --draft at least 0");
  check_context(a.has("tokens") ? a.get("tokens") : std::string("--prompt"), int64_t(prompt.size()) + n + k, m);
  KvFormat f = KvFormat::parse(a.get("kv-cache", "bf16"));
  const Prefill prefill = prefill_arg(a, "cuda");
  cuda::Engine eng(m);
  const int batch = int(a.get_int("batch", 1));
  if (batch < 1 || batch > int(prompt.size()))
    throw UsageError("hkv generate: --batch must be between 1 and the prompt's length");
  if (batch > 1) {
    // B sequences decoded together, one pass a step: sequence i starts from the prompt less its last i
    // tokens, so that the lengths differ. Each output equals that sequence decoded alone.
    std::vector<std::unique_ptr<cuda::Sequence>> seqs;
    std::vector<cuda::Sequence*> ptrs;
    std::vector<std::vector<int32_t>> feed, outs(static_cast<size_t>(batch));
    for (int i = 0; i < batch; i++) {
      seqs.push_back(eng.new_sequence(f, int64_t(prompt.size()) + n));
      ptrs.push_back(seqs.back().get());
      feed.emplace_back(prompt.begin(), prompt.end() - i);
    }
    ForwardOptions o;
    o.last_only = true;
    for (int step = 0; step < n; step++) {
      o.prefill = step == 0 ? prefill : Prefill::Exact;  // the prompts' path; decode is exact
      std::vector<std::vector<float>> logits = eng.forward_batch(ptrs, feed, o);
      for (int i = 0; i < batch; i++) {
        outs[size_t(i)].push_back(argmax(logits[size_t(i)].data(), m.config.vocab_size));
        feed[size_t(i)] = {outs[size_t(i)].back()};
      }
    }
    for (const auto& out : outs) {
      std::printf("[");
      for (size_t i = 0; i < out.size(); i++) std::printf("%s%d", i ? ", " : "", out[i]);
      std::printf("]\n");
    }
    return 0;
  }
  auto s = eng.new_sequence(f, int64_t(prompt.size()) + n + k);
  std::vector<int32_t> out;
  if (k > 0) {
    if (prefill != Prefill::Exact) throw UsageError("hkv generate: --draft runs the exact path only (no --prefill)");
    EngineDraftTarget target(eng, *s);
    DraftStats st;
    out = generate_drafted(target, prompt, n, k, &st);
    std::fprintf(stderr, "drafted decode: %lld rounds, %lld of %lld drafted tokens accepted\n",
                 static_cast<long long>(st.rounds), static_cast<long long>(st.accepted),
                 static_cast<long long>(st.drafted));
  } else {
    ForwardOptions o;
    o.last_only = true;
    o.prefill = prefill;
    std::vector<float> logits = eng.forward(*s, prompt, o);
    o.prefill = Prefill::Exact;  // decode is exact
    for (int i = 0; i < n; i++) {
      out.push_back(argmax(logits.data(), m.config.vocab_size));
      if (i + 1 < n) logits = eng.forward(*s, {out.back()}, o);
    }
  }
  std::printf("[");
  for (size_t i = 0; i < out.size(); i++) std::printf("%s%d", i ? ", " : "", out[i]);
  std::printf("]\n");
  return 0;
}

namespace {

std::vector<std::string> split_csv(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

size_t used_device_bytes() {
  size_t free_b = 0, total_b = 0;
  HKV_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return total_b - free_b;
}

// Device-to-device copy bandwidth, bytes read plus bytes written, median of `reps` 1 GiB copies.
double copy_bandwidth(cudaStream_t st) {
  const size_t n = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  HKV_CUDA_CHECK(cudaMalloc(&a, n));
  HKV_CUDA_CHECK(cudaMalloc(&b, n));
  HKV_CUDA_CHECK(cudaMemset(a, 1, n));
  cudaEvent_t e0, e1;
  HKV_CUDA_CHECK(cudaEventCreate(&e0));
  HKV_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<double> t;
  for (int i = 0; i < 12; i++) {
    HKV_CUDA_CHECK(cudaEventRecord(e0, st));
    HKV_CUDA_CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, st));
    HKV_CUDA_CHECK(cudaEventRecord(e1, st));
    HKV_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    HKV_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 2) t.push_back(double(ms));
  }
  std::sort(t.begin(), t.end());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * double(n) / (t[t.size() / 2] * 1e-3);
}

}  // namespace

// hkv bench [--model builtin:27b-mlx4] [--depths 1024,32768] [--kv-cache bf16,q4h] [--tokens 16]
// Decode tokens/s at batch 1 over a cache at each depth (rows written directly, no prefill), peak device
// memory, and the floor: bytes a token must read (weights once, the cache to its depth, DeltaNet states
// read and written) over the copy bandwidth measured in the same run.
int cmd_bench(const Args& a) {
  const std::string model = a.get("model", "builtin:27b-mlx4");
  const std::vector<std::string> depths = split_csv(a.get("depths", "1024,32768"));
  const std::vector<std::string> formats = split_csv(a.get("kv-cache", "bf16,q4h"));
  const int ntok = int(a.get_int("tokens", 16)), warm = 3;
  const bool graphs = a.get("graphs", "on") != "off";

  cudaDeviceProp prop;
  HKV_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0;
  HKV_CUDA_CHECK(cudaDriverGetVersion(&driver));
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<cuda::Engine> eng;
  if (model.rfind("builtin:", 0) == 0)
    eng = std::make_unique<cuda::Engine>(builtin_spec(model.substr(8)));
  else
    eng = std::make_unique<cuda::Engine>(load_any_model(model));
  const double gen_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  eng->set_graphs(graphs);
  const Config& c = eng->config();
  const double bw = copy_bandwidth(eng->stream());
  std::printf("hkv bench: %s on %s (driver %d), weights %.2f GB (generated in %.1f s), %.2f GB read per token\n",
              model.c_str(), prop.name, driver, double(eng->weight_bytes()) / 1e9, gen_s,
              double(eng->weight_bytes_per_token()) / 1e9);
  std::printf("copy bandwidth (device-to-device, read+write): %.3f TB/s\n", bw / 1e12);
  size_t peak = used_device_bytes();

  struct Row {
    std::string fmt;
    long long depth;
    double ms, floor_ms, gb;
  };
  std::vector<Row> rows;
  for (const std::string& fs : formats)
    for (const std::string& ds : depths) {
      const KvFormat f = KvFormat::parse(fs);
      const int64_t depth = std::stoll(ds);
      auto s = eng->new_sequence(f, depth + warm + ntok + 1);
      eng->fill_random_cache(*s, depth, 12345);
      peak = std::max(peak, used_device_bytes());
      ForwardOptions o;
      o.last_only = true;
      int32_t tok = 1;
      std::vector<double> times;
      for (int i = 0; i < warm + ntok; i++) {
        const auto ts = std::chrono::steady_clock::now();
        std::vector<float> lg = eng->forward(*s, {tok}, o);  // includes the logits' copy to the host
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - ts).count();
        tok = argmax(lg.data(), c.vocab_size);
        if (i >= warm) times.push_back(ms);
      }
      peak = std::max(peak, used_device_bytes());
      std::sort(times.begin(), times.end());
      const double med = times[times.size() / 2];
      const double mid_depth = double(depth) + warm + ntok / 2.0;
      const double cache = 2.0 * c.n_full_layers() * c.num_key_value_heads * mid_depth * double(s->row_bytes());
      const double states = 2.0 * double(c.n_linear_layers()) *
                            (double(c.conv_dim()) * (c.linear_conv_kernel_dim - 1) +
                             double(c.linear_num_value_heads) * c.linear_key_head_dim * c.linear_value_head_dim) *
                            4.0;
      const double bytes = double(eng->weight_bytes_per_token()) + cache + states;
      rows.push_back({f.name(), (long long)depth, med, bytes / bw * 1e3, bytes / 1e9});
      std::printf("  %s depth %lld: median %.3f ms/token (min %.3f, max %.3f over %d tokens)\n", f.name().c_str(),
                  (long long)depth, med, times.front(), times.back(), ntok);
      std::fflush(stdout);
    }
  std::printf("\npeak device memory: %.2f GB (of %.2f GB)\n", double(peak) / 1e9, double(prop.totalGlobalMem) / 1e9);
  std::printf("| cache | depth | ms/token | tokens/s | GB read/token | floor ms | floor tokens/s | %% of floor |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %lld | %.3f | %.1f | %.2f | %.3f | %.1f | %.0f%% |\n", r.fmt.c_str(), r.depth, r.ms, 1e3 / r.ms,
                r.gb, r.floor_ms, 1e3 / r.floor_ms, 100.0 * r.floor_ms / r.ms);
  return 0;
}

}  // namespace hkv

#endif  // HKV_HAVE_CUDA
