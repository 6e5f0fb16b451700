// The engine's subcommands of `hkv` (wired in compare/cli.cpp): logits and generate on the CUDA engine
// (--backend cuda), and `hkv bench`, decode speed of the 27B shape against its bandwidth floor.
// Built only with the CUDA engine (HKV_HAVE_CUDA).
#if defined(HKV_HAVE_CUDA)

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "compare/cli.h"
#include "compare/draft.h"
#include "compare/gate.h"
#include "compare/gpu_bench.h"
#include "compare/peer.h"
#include "compare/timeline.h"
#include "compare/variants.h"
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

void require_gpu(const std::string& what) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) return;
  // Without a driver CUDA says its driver is "insufficient", which reads as "upgrade it": say what is missing.
  std::error_code ec;
  const bool driver = std::filesystem::exists("/proc/driver/nvidia", ec);
  const std::string reason =
      e == cudaSuccess ? "no device found"
      : !driver && (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice)
          ? std::string("no NVIDIA driver is loaded on this machine; CUDA: ") + cudaGetErrorName(e)
          : std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  const size_t at = what.find(" --backend cuda");
  const std::string cpu = at != std::string::npos
                              ? "; the oracle runs it on the CPU: " + what.substr(0, at) + " --backend cpu"
                              : "; " + what + " measures the engine and has no CPU form";
  throw std::runtime_error(what + ": no CUDA device is usable here (" + reason + ")" + cpu);
}

RunnerFactory engine_runners(const Model& m, Prefill prefill) {
  require_gpu("hkv gate --backend cuda");
  auto eng = std::make_shared<cuda::Engine>(m);
  return [eng, prefill](const KvFormat& f, int64_t capacity) -> std::unique_ptr<SequenceRunner> {
    return std::make_unique<EngineRunner>(eng, f, capacity, prefill);
  };
}

// hkv logits --backend cuda: as cmd_logits, on the engine (same bytes as the oracle on the exact path).
int cmd_logits_cuda(const Args& a) {
  Model m = load_model_arg(a.need("model"));
  std::vector<int32_t> tokens = read_tokens(a.need("tokens"), m.config.vocab_size);
  const std::string out = a.need("out");
  KvFormat f = KvFormat::parse(a.get("kv-cache", "bf16"));
  ForwardOptions o;
  o.prefill = prefill_arg(a, "cuda");
  check_context(a.need("tokens"), int64_t(tokens.size()), m);
  require_gpu("hkv logits --backend cuda");
  cuda::Engine eng(m);
  auto s = eng.new_sequence(f, int64_t(tokens.size()));
  std::vector<float> logits = eng.forward(*s, tokens, o);
  check_logits_finite(logits, m.config.vocab_size, m.source);
  write_file_atomic(out, logits.data(), logits.size() * sizeof(float));
  std::printf("%s: %zu tokens x %lld vocab, cache %s, backend cuda%s, xxh64 %s\n", out.c_str(), tokens.size(),
              static_cast<long long>(m.config.vocab_size), f.name().c_str(),
              eng.uses_fast_prefill(int64_t(tokens.size()), o) ? " (fast prefill: not exact)" : "",
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
  Model m = load_model_arg(a.need("model"));
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
  const int batch = int(a.get_int("batch", 1));
  if (batch < 1 || batch > int(prompt.size()))
    throw UsageError("hkv generate: --batch must be between 1 and the prompt's length");
  require_gpu("hkv generate --backend cuda");
  cuda::Engine eng(m);
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
      const std::vector<std::vector<int32_t>> ids = eng.forward_batch_argmax(ptrs, feed, o);  // argmax on the card
      for (int i = 0; i < batch; i++) {
        outs[size_t(i)].push_back(ids[size_t(i)].at(0));
        feed[size_t(i)] = {outs[size_t(i)].back()};
      }
    }
    for (size_t i = 0; i < outs.size(); i++) {
      if (!a.has("ids")) std::printf("--- sequence %zu (the prompt less its last %zu tokens)\n", i, i);
      std::fputs(generated_text(outs[i], m.config.vocab_size, a.has("ids")).c_str(), stdout);
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
    int32_t next = eng.forward_argmax(*s, prompt, o).at(0);  // greedy: the argmax taken on the card
    o.prefill = Prefill::Exact;                              // decode is exact
    for (int i = 0; i < n; i++) {
      out.push_back(next);
      if (i + 1 < n) next = eng.forward_argmax(*s, {next}, o).at(0);
    }
  }
  std::fputs(generated_text(out, m.config.vocab_size, a.has("ids")).c_str(), stdout);
  return 0;
}

size_t used_device_bytes() {
  size_t free_b = 0, total_b = 0;
  HKV_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return total_b - free_b;
}

double copy_bandwidth(cudaStream_t st) {
  const size_t n = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  HKV_CUDA_CHECK(cudaMalloc(&a, n));
  HKV_CUDA_CHECK(cudaMalloc(&b, n));
  HKV_CUDA_CHECK(cudaMemset(a, 1, n));
  const Timing t = time_ms(st, 2, 10, [&] { HKV_CUDA_CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, st)); });
  cudaFree(a);
  cudaFree(b);
  return 2.0 * double(n) / (t.median * 1e-3);
}

VariantsOption variants_option(const Args& a, const std::string& cmd) {
  VariantsOption v;
  if (!a.has("variants")) return v;
  try {
    v.list = parse_variants(a.get("variants"));
  } catch (const std::invalid_argument& e) {
    throw UsageError(cmd + ": " + e.what());
  }
  const std::string unknown = unknown_variable(v.list, cuda::tuning_names(), "HKV_");
  if (!unknown.empty())
    throw UsageError(cmd + ": --variants: " + unknown +
                     " is not a switch the engine reads (docs/TUNING.md lists them)");
  v.rounds = int(a.get_int("rounds", 4));
  if (v.rounds < 1) throw UsageError(cmd + ": --rounds must be at least 1");
  EnvVariants env(v.list);  // each variant's switches read once here, so that a refused value stops the run up front
  for (size_t i = 0; i < v.list.size(); i++) {
    env.apply(i);
    try {
      v.tunings.push_back(cuda::tuning_from_env());
    } catch (const std::runtime_error& e) {
      throw UsageError(cmd + ": --variants: entry '" + v.list[i].text + "': " + e.what());
    }
  }
  return v;
}

std::unique_ptr<cuda::Engine> make_engine(const std::string& model, const cuda::Tuning& tu) {
  if (model.rfind("builtin:", 0) == 0) return std::make_unique<cuda::Engine>(builtin_spec(model.substr(8)), tu);
  return std::make_unique<cuda::Engine>(load_model_arg(model), tu);
}

namespace {

// Peak device memory: the device's used memory (cudaMemGetInfo total − free), sampled after each phase (engine
// built, cache allocated and filled, tokens decoded), less the used memory measured before the engine (the
// CUDA context). Buffers of the copy-bandwidth measurement are freed before the baseline is taken.
struct MemPeak {
  size_t base = 0, peak = 0;
  void sample() { peak = std::max(peak, used_device_bytes()); }
  double gib() const { return double(peak > base ? peak - base : 0) / double(1ull << 30); }
};

std::string iso_date_utc() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// The switches as hkv bench's JSON records them: {"HKV_PDL": "1", …}, the environment that gives them back.
nlohmann::json tuning_json(const cuda::Tuning& t) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, value] : cuda::tuning_values(t)) j[name] = value;
  return j;
}

std::string command_line(const Args& a) {
  std::string s = "hkv " + a.command;
  for (const auto& [k, v] : a.opts) s += " --" + k + (v.empty() ? "" : " " + v);
  return s;
}

// hkv bench --attention: the decode attention kernels alone (chunks and merge), one token (batch 1, every
// query head) over every full-attention layer's K and V caches filled to the depth, timed with events.
// --attn-shape's list (default auto); a name that is not a shape is a UsageError.
std::vector<cuda::AttnShape> attn_shapes(const Args& a) {
  std::vector<cuda::AttnShape> shapes;
  for (const std::string& sh : split_list(a.get("attn-shape", "auto"))) {
    try {
      shapes.push_back(cuda::parse_attn_shape(sh));
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("hkv bench: --attn-shape: ") + e.what());
    }
  }
  return shapes;
}

int bench_attention(const Args& a, const Config& c, const std::vector<int64_t>& depths,
                    const std::vector<std::string>& formats, double bw, const cuda::Tuning& tu, nlohmann::json& out) {
  const int reps = int(a.get_int("reps", 20));
  const std::vector<cuda::AttnShape> shapes = attn_shapes(a);
  int l2 = 0;
  HKV_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  const int H = c.num_attention_heads, KV = c.num_key_value_heads, D = c.head_dim, L = c.n_full_layers();
  cudaStream_t st;
  HKV_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  std::printf(
      "\nattention alone: %d full-attention layers, %d query heads over %d KV heads, head_dim %d, batch 1, "
      "median of %d runs (L2 %.0f MB: rows marked * fit in twice the L2)\n",
      L, H, KV, D, reps, double(l2) / 1e6);
  std::printf(
      "| cache | depth | shape | cache MB read | us/token | GB/s | %% of copy bw |\n|---|---|---|---|---|---|---|\n");
  out["attention"] = nlohmann::json::array();
  for (const std::string& fs : formats)
    for (int64_t depth : depths) {
      const KvFormat f = KvFormat::parse(fs);
      const size_t rb = kv_row_bytes(f, D), layer = cuda::kv_cache_bytes(depth, KV, rb, cuda::kv_block(f.kind));
      uint8_t* cache = nullptr;
      HKV_CUDA_CHECK(cudaMalloc(&cache, 2 * size_t(L) * layer));
      for (int i = 0; i < 2 * L; i++)
        cuda::kv_fill_random(f.kind, cache + size_t(i) * layer, depth, KV, D, 777 + i, st);
      std::vector<float> hq = std::vector<float>(size_t(H) * D);
      for (size_t i = 0; i < hq.size(); i++) hq[i] = float(int(i * 2654435761u % 2001) - 1000) / 1000.0f;
      float *q = nullptr, *o = nullptr, *part = nullptr;
      int* nk = nullptr;
      const uint8_t** ptrs = nullptr;
      HKV_CUDA_CHECK(cudaMalloc(&q, hq.size() * 4));
      HKV_CUDA_CHECK(cudaMalloc(&o, hq.size() * 4));
      HKV_CUDA_CHECK(cudaMalloc(&part, cuda::attn_part_floats(1, H, D, int(depth)) * 4));
      HKV_CUDA_CHECK(cudaMalloc(&nk, sizeof(int)));
      HKV_CUDA_CHECK(cudaMalloc(&ptrs, 2 * size_t(L) * sizeof(void*)));
      std::vector<const uint8_t*> hp;
      for (int i = 0; i < 2 * L; i++) hp.push_back(cache + size_t(i) * layer);
      const int nki = int(depth);
      HKV_CUDA_CHECK(cudaMemcpy(q, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice));
      HKV_CUDA_CHECK(cudaMemcpy(nk, &nki, sizeof(int), cudaMemcpyHostToDevice));
      HKV_CUDA_CHECK(cudaMemcpy(ptrs, hp.data(), hp.size() * sizeof(void*), cudaMemcpyHostToDevice));
      for (cuda::AttnShape shape : shapes) {
        auto token = [&] {
          for (int i = 0; i < L; i++) {
            cuda::AttnArgs g;
            g.kind = f.kind, g.D = D, g.H = H, g.KV = KV, g.row_bytes = rb;
            g.q = q, g.ldq = int64_t(H) * D, g.n_keys = nk;
            g.k_rows = ptrs + 2 * i, g.v_rows = ptrs + 2 * i + 1;
            g.out = o, g.ldo = int64_t(H) * D, g.N = 1, g.max_keys = nki, g.part = part, g.shape = shape;
            cuda::attention(g, st, tu);
          }
        };
        const Timing t = time_ms(st, 1, reps, token);
        if (a.has("phases")) {  // --phases: one more token with the chunk kernel's phases counted
          cuda::attn_phases_begin();
          token();
          const cuda::AttnPhases p = cuda::attn_phases_end();
          const double all = p.wait_cycles + p.q_cycles + p.score_cycles + p.weight_cycles + p.value_cycles;
          if (p.blocks == 0) {
            std::printf(
                "  phases: none counted (the staged shapes of fp8 and q4h count them, all but slim and unstaged-x8, "
                "and "
                "bf16's with HKV_ATTN_BF16_HALVES=1)\n");
          } else {
            std::printf("  phases (%s, %s, depth %lld; %.0f blocks, cycles a block):", f.name().c_str(),
                        cuda::attn_shape_name(shape), (long long)depth, p.blocks);
            const std::pair<const char*, double> ph[] = {{"wait", p.wait_cycles},
                                                         {"q", p.q_cycles},
                                                         {"scores", p.score_cycles},
                                                         {"weights", p.weight_cycles},
                                                         {"values", p.value_cycles}};
            for (const auto& [name, cyc] : ph) std::printf(" %s %.0f (%.0f%%)", name, cyc, 100.0 * cyc / all);
            std::printf("\n");
          }
        }
        const double med = t.median, bytes = 2.0 * double(L) * double(depth) * KV * double(rb),
                     gbs = bytes / (med * 1e-3) / 1e9;
        const bool in_l2 = bytes < 2.0 * double(l2);
        std::printf("| %s | %lld | %s | %.1f%s | %.1f | %.0f | %.0f%% |\n", f.name().c_str(), (long long)depth,
                    cuda::attn_shape_name(shape), bytes / 1e6, in_l2 ? " *" : "", med * 1e3, gbs,
                    100.0 * gbs * 1e9 / bw);
        std::fflush(stdout);
        out["attention"].push_back({{"cache", f.name()},
                                    {"depth", depth},
                                    {"shape", cuda::attn_shape_name(shape)},
                                    {"cache_bytes", bytes},
                                    {"ms", med},
                                    {"ms_min", t.min},
                                    {"ms_max", t.max},
                                    {"gb_per_s", gbs},
                                    {"pct_copy_bw", 100.0 * gbs * 1e9 / bw},
                                    {"fits_in_2x_l2", in_l2}});
      }
      cudaFree(cache), cudaFree(q), cudaFree(o), cudaFree(part), cudaFree(nk), cudaFree(ptrs);
    }
  cudaStreamDestroy(st);
  return 0;
}

// hkv bench --phases: the fused DeltaNet recurrence's phases in one decode token (cuda::dn_phases_begin), cycles a
// block and µs at the card's SM clock.
void print_dn_phases(const cuda::DnPhases& p, const std::string& fmt, int64_t depth) {
  if (p.blocks == 0) {
    std::printf("  recurrence phases: none counted (only the 27B decode form counts them)\n");
    return;
  }
  int dev = 0, khz = 0;
  HKV_CUDA_CHECK(cudaGetDevice(&dev));
  HKV_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
  const char* names[6] = {"wait", "conv and norms", "chains", "norm exchange", "store and records", "state store"};
  std::printf("  recurrence phases (%s, depth %lld; %.0f blocks; thread 0's cycles a block, µs at %.2f GHz):",
              fmt.c_str(), (long long)depth, p.blocks, khz / 1e6);
  for (int i = 0; i < 6; i++)
    std::printf("%s %s %.0f (%.2f)", i ? "," : "", names[i], p.cycles[i], p.cycles[i] / khz * 1e3);
  std::printf("\n");
}

// A row's timeline: where a token's time goes, the kernels by their time a token.
void print_timeline(const TokenTimeline& t, const std::string& fmt, int64_t depth) {
  std::printf(
      "  timeline %s depth %lld (%d tokens traced): a token's kernels span %.3f ms, some kernel running %.3f ms "
      "(idle %.3f ms); their durations sum to %.3f ms\n",
      fmt.c_str(), (long long)depth, t.tokens, t.span_ms, t.busy_ms, t.span_ms - t.busy_ms, t.sum_ms);
  std::printf("  | kernel | launches a token | µs a token | µs a launch | gap before it, µs a launch |\n");
  std::printf("  |---|---|---|---|---|\n");
  for (const TimelineRow& r : t.rows)
    std::printf("  | %s | %.0f | %.1f | %.2f | %.2f |\n", r.kernel.c_str(), r.launches, r.busy_us, r.mean_us, r.gap_us);
}

nlohmann::json timeline_json(const TokenTimeline& t) {
  nlohmann::json j = {{"tokens", t.tokens}, {"span_ms", t.span_ms}, {"busy_ms", t.busy_ms}, {"sum_ms", t.sum_ms}};
  j["kernels"] = nlohmann::json::array();
  for (const TimelineRow& r : t.rows)
    j["kernels"].push_back({{"kernel", r.kernel},
                            {"launches_per_token", r.launches},
                            {"us_per_token", r.busy_us},
                            {"us_per_launch", r.mean_us},
                            {"gap_before_us", r.gap_us}});
  return j;
}

}  // namespace

// hkv bench [--model builtin:27b-mlx4] [--depths 1024,32768] [--kv-cache bf16,q4h] [--tokens 16]
//           [--json FILE] [--attention | --attention-only] [--attn-shape auto,kv-staged,unstaged-x8] [--embed
//           host|device]
//           [--variants "default;VAR=VALUE[,VAR=VALUE]" [--rounds 4]] [--timeline] [--greedy device|host]
// Decode tokens/s at batch 1 over a cache at each depth (rows written directly, no prefill; the timed tokens
// sit at positions depth − tokens … depth − 1, so the cache holds `depth` positions), peak device memory, and
// the floor: bytes a token must read (weights once, the cache to its depth, DeltaNet states read and written)
// over the copy bandwidth measured in the same run. --attention adds the attention kernels alone.
int cmd_bench(const Args& a) {
  const std::string model = a.get("model", "builtin:27b-mlx4");
  const std::vector<long long> depths_ll = a.get_int_list("depths", "1024,32768");
  const std::vector<int64_t> depths(depths_ll.begin(), depths_ll.end());
  const std::vector<std::string> formats = split_list(a.get("kv-cache", "bf16,q4h"));
  const int ntok = int(a.get_int("tokens", 16)), warm = 3;
  const bool graphs = a.get("graphs", "on") != "off";
  const bool attn_only = a.has("attention-only"), attn = attn_only || a.has("attention");
  const bool embed_host = a.get("embed", "host") != "device";
  // --timeline: after each row's timed tokens, kTraced more under CUPTI (the first, whose graphs are captured anew
  // under the trace, left out), each kernel's start and end as the card stamped them (compare/timeline.h)
  const bool timeline = a.has("timeline");
  // --greedy device (the default): each token's argmax taken on the card, 4 bytes back (Engine::forward_argmax);
  // host: its logits (1 MB at the 27B vocabulary) copied back and the argmax taken here (what the argmax on the card
  // saves)
  const std::string greedy = a.get("greedy", "device");
  if (greedy != "device" && greedy != "host") throw UsageError("hkv bench: --greedy is device or host");
  constexpr int kTraced = 5;
  if (ntok < 1) throw UsageError("hkv bench: --tokens must be at least 1");
  if (formats.empty()) throw UsageError("hkv bench: --kv-cache names no format");
  for (const std::string& fs : formats) KvFormat::parse(fs);  // refused here, before the engine is built
  // --variants: each (cache, depth) times its tokens in rounds, every variant's block of warm + ntok tokens in
  // each round, the switches read again at each change (cuda::tuning_from_env, handed to the engine, whose decode
  // graphs are then captured anew), so that the variants share the process, the card's state and the cache.
  if (a.has("variants") && attn_only)
    throw UsageError("hkv bench: --variants times decode tokens, not --attention-only");
  if (timeline && (attn_only || a.has("variants")))
    throw UsageError("hkv bench: --timeline traces the decode tokens of each row, without --variants");
  if (a.has("phases") && a.has("variants"))
    throw UsageError("hkv bench: --phases counts one more token a row under the defaults, without --variants");
  if (timeline && !KernelTrace::available())
    throw UsageError("hkv bench: --timeline needs CUPTI, which this hkv was built without");
  const VariantsOption vo = variants_option(a, "hkv bench");
  const std::vector<EnvVariant>& variants = vo.list;
  const int nvar = variants.empty() ? 1 : int(variants.size()), rounds = vo.rounds;
  // decode steps a row: the timed ones, then the traced (--timeline) and the counted one (--phases)
  const bool dn_phases = a.has("phases") && !attn_only;
  const int64_t span = int64_t(rounds) * nvar * (warm + ntok) + (timeline ? kTraced : 0) + (dn_phases ? 1 : 0);
  for (int64_t d : depths)
    if (d < span + 1)
      throw UsageError("hkv bench: each depth must exceed the tokens decoded at it, " + std::to_string(span) +
                       (variants.empty() ? " (--tokens + 3)" : " (--rounds x variants x (--tokens + 3))"));
  if (attn) {  // refused here, not after the decode bench has run
    if (a.get_int("reps", 20) < 1) throw UsageError("hkv bench: --reps must be at least 1");
    attn_shapes(a);
  }
  // --peer: read and checked before anything runs; its figures go beside hkv's in the table and the JSON
  std::optional<PeerFigures> peer;
  if (a.has("peer")) {
    if (attn_only || a.has("variants"))
      throw UsageError(
          "hkv bench: --peer puts a peer's decode figures beside hkv's, without --attention-only or "
          "--variants");
    peer = load_peer(a.get("peer"));
  }
  require_gpu("hkv bench");
  const cuda::Tuning tuning = cuda::tuning_from_env();  // the switches as found (each variant's: vo.tunings)

  cudaDeviceProp prop;
  HKV_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0;
  HKV_CUDA_CHECK(cudaDriverGetVersion(&driver));
  HKV_CUDA_CHECK(cudaFree(nullptr));  // the context
  cudaStream_t bst;
  HKV_CUDA_CHECK(cudaStreamCreateWithFlags(&bst, cudaStreamNonBlocking));
  const double bw = copy_bandwidth(bst);
  HKV_CUDA_CHECK(cudaStreamDestroy(bst));
  MemPeak mem;
  mem.base = mem.peak = used_device_bytes();

  nlohmann::json js;
  js["schema"] = "hkv-bench-1";
  js["card"] = prop.name;
  js["driver"] = driver;
  js["date"] = iso_date_utc();
  js["command"] = command_line(a);
  js["model"] = model;
  js["copy_bandwidth_bytes_per_s"] = bw;
  js["memory_measure"] =
      "device used memory (cudaMemGetInfo total - free), high-water of samples after engine build, cache fill and "
      "decode, minus the used memory before the engine";
  std::printf("hkv bench on %s (driver %d), %s\n", prop.name, driver, js["date"].get<std::string>().c_str());
  std::printf("copy bandwidth (device-to-device, read+write): %.3f TB/s\n", bw / 1e12);
  js["tuning"] = tuning_json(tuning);
  std::printf("switches: %s\n", cuda::tuning_text(tuning).c_str());
  if (peer) {
    const bool same_card = peer->card == prop.name;
    std::printf("peer: %s%s on %s (%s), its cache f16 beside bf16, q8_0 beside fp8, q4_0 beside q4h%s\n",
                peer->peer.c_str(), peer->commit.empty() ? "" : (" " + peer->commit).c_str(), peer->card.c_str(),
                peer->path.c_str(),
                same_card ? "" : "; ANOTHER CARD than this run's: its figures are not comparable with these");
    js["peer"] = {{"peer", peer->peer},   {"commit", peer->commit}, {"card", peer->card},
                  {"model", peer->model}, {"file", peer->path},     {"same_card", same_card}};
  }

  if (attn_only) {
    const Config cfg =
        model.rfind("builtin:", 0) == 0 ? builtin_spec(model.substr(8)).config : load_model_arg(model).config;
    bench_attention(a, cfg, depths, formats, bw, tuning, js);
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<cuda::Engine> eng = make_engine(model, tuning);
    const double gen_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    mem.sample();
    const size_t moved = embed_host ? eng->embedding_to_host() : 0;
    eng->set_graphs(graphs);
    const Config& c = eng->config();
    std::printf(
        "%s: weights %.2f GB on the device (built in %.1f s)%s, %.2f GB read per token\n", model.c_str(),
        double(eng->weight_bytes()) / 1e9, gen_s,
        moved ? (", embedding table (" + std::to_string(moved / 1000000) + " MB) in pinned host memory").c_str() : "",
        double(eng->weight_bytes_per_token()) / 1e9);
    js["weights_device_bytes"] = eng->weight_bytes();
    js["weights_read_per_token_bytes"] = eng->weight_bytes_per_token();
    js["embedding_in_host_memory_bytes"] = moved;
    js["tokens_timed"] = ntok;
    js["warmup_tokens"] = warm;
    js["graphs"] = graphs;
    js["greedy"] = greedy;
    js["decode"] = nlohmann::json::array();

    struct Row {
      std::string variant, fmt;
      long long depth;
      double ms, floor_ms, gb, peak_gib, round_lo, round_hi;
    };
    std::vector<Row> rows;
    std::map<std::string, nlohmann::json> timelines;  // by "cache/depth"
    // at each change: the switches read again and handed to the engine (which drops its captured decode graphs)
    EnvVariants env(variants, [&] { eng->set_tuning(cuda::tuning_from_env()); });
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    if (!variants.empty()) {
      js["variants"] = nlohmann::json::array();
      js["variant_tuning"] = nlohmann::json::array();
      for (size_t v = 0; v < variants.size(); v++) {
        js["variants"].push_back(variants[v].text);
        js["variant_tuning"].push_back(tuning_json(vo.tunings[v]));
        std::printf("variant %s: %s\n", variants[v].text.c_str(), cuda::tuning_text(vo.tunings[v]).c_str());
      }
      js["rounds"] = rounds;
      std::printf("variants interleaved: %d rounds, each with every variant's %d warm-up and %d timed tokens\n", rounds,
                  warm, ntok);
    }
    // one decode token of s and its greedy successor, as --greedy says
    auto step = [&](cuda::Sequence& s, int32_t t) {
      ForwardOptions o;
      o.last_only = true;
      if (greedy == "device") return eng->forward_argmax(s, {t}, o).at(0);
      const std::vector<float> lg = eng->forward(s, {t}, o);
      return argmax(lg.data(), c.vocab_size);
    };
    {  // the process's first tokens ran slow (H200, 2026-11-30: q4h 1K 8.17 ms as the first row, 7.47 in the
       // run before): 16 untimed tokens over a short cache of the first format before any row
      auto s = eng->new_sequence(KvFormat::parse(formats.at(0)), 64);
      eng->fill_random_cache(*s, 32, 12345);
      for (int i = 0; i < 16; i++) step(*s, 1);
    }
    for (const std::string& fs : formats)
      for (int64_t depth : depths) {
        const KvFormat f = KvFormat::parse(fs);
        MemPeak rm = mem;
        rm.peak = rm.base;
        const int64_t start = depth - span;
        std::vector<std::vector<double>> times(static_cast<size_t>(nvar)), round_ms(static_cast<size_t>(nvar));
        size_t row_bytes = 0;
        {
          auto s = eng->new_sequence(f, depth);
          row_bytes = s->row_bytes();
          eng->fill_random_cache(*s, start, 12345);
          rm.sample();
          int32_t tok = 1;
          for (int r = 0; r < rounds; r++)
            for (int v = 0; v < nvar; v++) {
              if (!variants.empty()) env.apply(size_t(v));
              std::vector<double> block;
              for (int i = 0; i < warm + ntok; i++) {
                const auto ts = std::chrono::steady_clock::now();
                tok = step(*s, tok);
                const double ms =
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - ts).count();
                if (i >= warm) block.push_back(ms);
              }
              times[size_t(v)].insert(times[size_t(v)].end(), block.begin(), block.end());
              round_ms[size_t(v)].push_back(median(block));
            }
          rm.sample();
          if (dn_phases) {       // one more token with the DeltaNet recurrence's phases counted
            eng->drop_graphs();  // captured anew with the counting instantiation, then dropped again
            cuda::dn_phases_begin();
            tok = step(*s, tok);
            const cuda::DnPhases p = cuda::dn_phases_end();
            eng->drop_graphs();
            print_dn_phases(p, f.name(), depth);
          }
          if (timeline) {
            KernelTrace trace;
            eng->drop_graphs();  // captured anew while the trace runs
            trace.begin();
            for (int i = 0; i < kTraced; i++) tok = step(*s, tok);
            // tokens start with the embedding; the first, whose graphs were captured, is left out
            const TokenTimeline tl = summarize_tokens(trace.end(), "embed_kernel", 1);
            print_timeline(tl, f.name(), depth);
            timelines[f.name() + "/" + std::to_string(depth)] = timeline_json(tl);
          }
        }
        if (!variants.empty()) env.restore();  // the environment and switches as found
        mem.peak = std::max(mem.peak, rm.peak);
        for (int v = 0; v < nvar; v++) {
          std::vector<double>& tv = times[size_t(v)];
          std::sort(tv.begin(), tv.end());
          const double med = tv[tv.size() / 2];
          const auto [rlo, rhi] = std::minmax_element(round_ms[size_t(v)].begin(), round_ms[size_t(v)].end());
          // keys the timed tokens attend to, on average
          const double mid_depth = double(depth) - (variants.empty() ? ntok : span) / 2.0;
          const double cache = 2.0 * c.n_full_layers() * c.num_key_value_heads * mid_depth * double(row_bytes);
          const double states = 2.0 * double(c.n_linear_layers()) *
                                (double(c.conv_dim()) * (c.linear_conv_kernel_dim - 1) +
                                 double(c.linear_num_value_heads) * c.linear_key_head_dim * c.linear_value_head_dim) *
                                4.0;
          const double bytes = double(eng->weight_bytes_per_token()) + cache + states;
          const std::string vname = variants.empty() ? "" : variants[size_t(v)].text;
          rows.push_back({vname, f.name(), (long long)depth, med, bytes / bw * 1e3, bytes / 1e9, rm.gib(), *rlo, *rhi});
          nlohmann::json row = {{"cache", f.name()},
                                {"depth", depth},
                                {"ms_per_token", med},
                                {"ms_min", tv.front()},
                                {"ms_max", tv.back()},
                                {"tokens_per_s", 1e3 / med},
                                {"bytes_per_token", bytes},
                                {"cache_bytes_per_token", cache},
                                {"state_bytes_per_token", states},
                                {"floor_ms", bytes / bw * 1e3},
                                {"pct_of_floor", 100.0 * (bytes / bw * 1e3) / med},
                                {"peak_device_gib", rm.gib()}};
          if (!variants.empty()) {
            row["variant"] = vname;
            row["round_medians_ms"] = round_ms[size_t(v)];
          }
          if (timeline) row["timeline"] = timelines[f.name() + "/" + std::to_string(depth)];
          if (peer)
            if (auto pr = peer->beside(f.name(), depth)) {
              row["peer_kv"] = pr->kv;
              row["peer_tokens_per_s"] = pr->tokens_per_s;
              row["peer_pct_of_floor"] = 100.0 * (bytes / bw * 1e3) / (1e3 / pr->tokens_per_s);
            }
          js["decode"].push_back(row);
          std::printf("  %s%s%s depth %lld: median %.3f ms/token (min %.3f, max %.3f over %zu tokens), peak %.2f GiB\n",
                      vname.c_str(), vname.empty() ? "" : ": ", f.name().c_str(), (long long)depth, med, tv.front(),
                      tv.back(), tv.size(), rm.gib());
        }
        std::fflush(stdout);
      }
    std::printf(
        "\npeak device memory: %.2f GiB over the run (device used memory less %.2f GiB used before the "
        "engine; %.2f GiB on the card)\n",
        mem.gib(), double(mem.base) / double(1ull << 30), double(prop.totalGlobalMem) / double(1ull << 30));
    if (variants.empty()) {
      // with --peer, the peer's tokens/s and its share of the same floor (its weights and cache rows take the same
      // bytes: 4.5 bits a weight, and the cache types that stand beside each format, compare/peer.h)
      std::printf("| cache | depth | tokens/s | ms/token | GB read/token | floor ms | %% of floor | peak GiB |%s\n",
                  peer ? (" " + peer->peer + " tokens/s | " + peer->peer + " % of floor |").c_str() : "");
      std::printf("|---|---|---|---|---|---|---|---|%s\n", peer ? "---|---|" : "");
      for (const Row& r : rows) {
        std::printf("| %s | %lld | %.1f | %.3f | %.2f | %.3f | %.0f%% | %.2f |", r.fmt.c_str(), r.depth, 1e3 / r.ms,
                    r.ms, r.gb, r.floor_ms, 100.0 * r.floor_ms / r.ms, r.peak_gib);
        if (peer) {
          if (auto pr = peer->beside(r.fmt, r.depth))
            std::printf(" %.1f (%s) | %.0f%% |", pr->tokens_per_s, pr->kv.c_str(), r.floor_ms * pr->tokens_per_s / 10);
          else
            std::printf(" — | — |");
        }
        std::printf("\n");
      }
    } else {  // against the first variant of the same cache and depth; the rounds' medians show the spread
      std::printf("| variant | cache | depth | ms/token | vs first | round medians ms | floor ms | %% of floor |\n");
      std::printf("|---|---|---|---|---|---|---|---|\n");
      for (size_t i = 0; i < rows.size(); i++) {
        const Row& r = rows[i];
        const Row& first = rows[i - i % size_t(nvar)];
        std::printf("| %s | %s | %lld | %.3f | %+.2f%% | %.3f–%.3f | %.3f | %.0f%% |\n", r.variant.c_str(),
                    r.fmt.c_str(), r.depth, r.ms, 100.0 * (r.ms / first.ms - 1.0), r.round_lo, r.round_hi, r.floor_ms,
                    100.0 * r.floor_ms / r.ms);
      }
    }
    js["peak_device_gib"] = mem.gib();
    if (attn) {
      const Config cfg = c;
      eng.reset();  // the attention microbenchmark allocates its own caches
      bench_attention(a, cfg, depths, formats, bw, tuning, js);
    }
  }
  if (a.has("json")) {
    const std::string text = js.dump(2) + "\n";
    write_file_atomic(a.get("json"), text.data(), text.size());
    std::printf("wrote %s\n", a.get("json").c_str());
  }
  return 0;
}

}  // namespace hkv

#endif  // HKV_HAVE_CUDA
