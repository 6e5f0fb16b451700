#include "compare/cli.h"

#include <omp.h>
#include <unistd.h>

#ifdef HKV_HAVE_CUDA
#include <cuda_runtime.h>

#include "cuda/device_select.h"
#endif

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <set>
#include <stdexcept>

#include "compare/diff.h"
#include "compare/draft.h"
#include "compare/fixture.h"
#include "compare/format_study.h"
#include "compare/gate.h"
#include "compare/report.h"
#include "compare/stats.h"
#include "hkv_version.h"
#include "reference/model.h"
#include "reference/synthetic.h"
#include "reference/tokens.h"

namespace hkv {

std::string Args::get(const std::string& k, const std::string& def) const {
  auto it = opts.find(k);
  return it == opts.end() ? def : it->second;
}
std::string Args::need(const std::string& k) const {
  auto it = opts.find(k);
  if (it == opts.end() || it->second.empty()) throw UsageError("hkv " + command + ": --" + k + " is required");
  return it->second;
}
bool parse_count(const std::string& s, long long* out) {
  size_t i = 0;
  const bool neg = !s.empty() && (s[0] == '-' || s[0] == '+');
  if (neg) i = 1;
  if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  unsigned long long v = 0;
  for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); i++) {
    v = v * 10 + unsigned(s[i] - '0');
    if (v > (1ULL << 62)) return false;
  }
  unsigned long long mult = 1;
  if (i < s.size()) {
    const char c = s[i++];
    if (c == 'K' || c == 'k')
      mult = 1ULL << 10;
    else if (c == 'M' || c == 'm')
      mult = 1ULL << 20;
    else
      return false;
  }
  if (i != s.size() || v > (1ULL << 62) / mult) return false;
  const long long x = static_cast<long long>(v * mult);
  *out = s[0] == '-' ? -x : x;
  return true;
}

long long Args::get_int(const std::string& k, long long def) const {
  if (!has(k)) return def;
  const std::string v = get(k);
  long long x = 0;
  if (!parse_count(v, &x))
    throw UsageError("hkv " + command + ": --" + k + " wants a number like 1024, 8K or 1M, got '" + v + "'");
  return x;
}

std::vector<long long> Args::get_int_list(const std::string& k, const std::string& def) const {
  const std::string v = get(k, def);
  std::vector<long long> out;
  for (const std::string& item : split_list(v)) {
    long long x = 0;
    if (!parse_count(item, &x))
      throw UsageError("hkv " + command + ": --" + k + " wants numbers like 1024, 8K or 1M, got '" + v + "'");
    out.push_back(x);
  }
  if (out.empty())
    throw UsageError("hkv " + command + ": --" + k + " wants numbers like 1024, 8K or 1M, got '" + v + "'");
  return out;
}

// ---- hkv format ---------------------------------------------------------------------------------

int cmd_format(const Args& a) {
  const int head_dim = int(a.get_int("head-dim", 256));
  if (a.has("grids")) {
    const int rows = int(a.get_int("rows", 4096));
    std::unique_ptr<CacheRows> model_rows;
    std::string model_note;
    int dim = head_dim;
    if (a.has("fixture")) {  // the rows a trained model stores, beside the seeded ones
      Fixture f = load_fixture(a.get("fixture"));
      Model m = load_model_arg(f.model);
      if (a.has("head-dim") && head_dim != m.config.head_dim)
        throw UsageError("hkv format: --head-dim " + std::to_string(head_dim) + " differs from the fixture's model (" +
                         std::to_string(m.config.head_dim) + ")");
      std::vector<int32_t> text = load_fixture_tokens(f, m.config.vocab_size);
      const int64_t n = a.get_int("tokens", 1024);
      if (n > int64_t(text.size()))
        throw UsageError("hkv format: --tokens " + std::to_string(n) + " exceeds the fixture's text (" +
                         std::to_string(text.size()) + " tokens in " + f.tokens_path + ")");
      text.resize(size_t(n));
      model_rows = std::make_unique<CacheRows>(model_cache_rows(m, text));
      dim = model_rows->head_dim;
      model_note = " Model rows: the fixture " + f.name +
                   "'s K and V rows (every full-attention layer and KV head) over "
                   "the first " +
                   std::to_string(n) + " tokens of its text, " + std::to_string(model_rows->k.size() / size_t(dim)) +
                   " rows each.";
    }
    std::printf("Round-trip error of 4-bit grids, %d rows of head_dim %d, seed %lld.%s\n", rows, dim,
                a.get_int("seed", 1), model_note.c_str());
    std::printf("RMS: relative RMS error over all rows. worst: largest |error| / row RMS.\n\n");
    std::fputs(grid_study_markdown(rows, dim, uint64_t(a.get_int("seed", 1)), model_rows.get()).c_str(), stdout);
    return 0;
  }
  KvFormat f = KvFormat::parse(a.get("format", "q4h"));
  std::string kind_s = a.get("row", "outliers");
  RowKind kind = kind_s == "gaussian"         ? RowKind::Gaussian
                 : kind_s == "near-duplicate" ? RowKind::NearDuplicate
                 : kind_s == "outliers"       ? RowKind::Outliers
                                        : throw UsageError("hkv format: --row is gaussian, outliers or near-duplicate");
  if (head_dim <= 0 || head_dim % f.group != 0)
    throw UsageError("hkv format: --head-dim must be a positive multiple of " + std::to_string(f.group));
  std::vector<float> x = seeded_row(kind, uint64_t(a.get_int("seed", 1)), head_dim);
  std::vector<uint8_t> bytes(kv_row_bytes(f, head_dim));
  kv_pack_row(f, x.data(), head_dim, bytes.data());
  std::vector<float> back(static_cast<size_t>(head_dim));
  kv_unpack_row(f, bytes.data(), head_dim, back.data());

  std::printf("format %s, head_dim %d, a %s row (seed %lld): %zu bytes (bf16 would be %d)\n", f.name().c_str(),
              head_dim, kind_s.c_str(), a.get_int("seed", 1), bytes.size(), 2 * head_dim);
  size_t code_bytes = f.kind == KvKind::BF16  ? bytes.size()
                      : f.kind == KvKind::FP8 ? size_t(head_dim)
                                              : size_t(head_dim / 2);
  std::printf("\nbytes (offset: hex)   [0, %zu) %s", code_bytes,
              f.kind == KvKind::BF16  ? "bf16 values, little-endian\n"
              : f.kind == KvKind::FP8 ? "e4m3 codes, one a byte\n"
                                      : "4-bit codes, element 2i in the low nibble of byte i, 2i+1 in the high\n");
  if (code_bytes < bytes.size())
    std::printf("                      [%zu, %zu) fp16 scales, one a group of %d, little-endian\n", code_bytes,
                bytes.size(), f.group);
  for (size_t i = 0; i < bytes.size(); i += 16) {
    std::printf("  %4zu:", i);
    for (size_t j = i; j < i + 16 && j < bytes.size(); j++) std::printf(" %02x", bytes[j]);
    std::printf("\n");
  }
  std::printf("\nvalues: original -> stored (error)\n");
  double e2 = 0, s2 = 0, worst = 0;
  int worst_i = 0;
  for (int d = 0; d < head_dim; d++) {
    double e = double(back[size_t(d)]) - double(x[size_t(d)]);
    e2 += e * e;
    s2 += double(x[size_t(d)]) * x[size_t(d)];
    if (std::fabs(e) > worst) worst = std::fabs(e), worst_i = d;
    std::printf("  [%3d] %9.4f -> %9.4f (%+.4f)%s", d, x[size_t(d)], back[size_t(d)], e, d % 3 == 2 ? "\n" : "");
  }
  std::printf("\n\nerror: RMS %.5f (relative %.5f), worst %.5f at [%d]\n", std::sqrt(e2 / head_dim), std::sqrt(e2 / s2),
              worst, worst_i);
  return 0;
}

// ---- models and outputs -----------------------------------------------------------------------------

void check_model_arg(const std::string& model) {
  namespace fs = std::filesystem;
  if (model.rfind("builtin:", 0) == 0) return;  // builtin_spec names the builtins when the name is not one
  std::error_code ec;
  if (!fs::exists(model, ec))
    throw std::runtime_error(model +
                             ": no such file or folder (--model takes builtin:NAME, a synthetic spec or a "
                             "checkpoint folder; `hkv --help` lists them)");
  if (!fs::is_directory(model, ec) || fs::exists(fs::path(model) / "config.json", ec)) return;
  std::vector<std::string> near;  // folders below it that hold a config.json, two levels deep
  for (auto it = fs::recursive_directory_iterator(model, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it.depth() > 1) it.disable_recursion_pending();
    if (it->is_directory(ec) && fs::exists(it->path() / "config.json", ec)) near.push_back(it->path().string());
  }
  std::sort(near.begin(), near.end());
  std::string hint;
  for (size_t i = 0; i < near.size() && i < 3; i++) hint += (i ? " or " : "") + near[i];
  throw std::runtime_error(model + ": no config.json here" + (hint.empty() ? "" : "; did you mean " + hint + "?"));
}

Model load_model_arg(const std::string& model) {
  check_model_arg(model);
  return load_any_model(model);
}

std::string generated_text(const std::vector<int32_t>& tokens, int64_t vocab, bool ids) {
  std::string s;
  if (ids || vocab != 256) {
    s = "[";
    for (size_t i = 0; i < tokens.size(); i++) s += (i ? ", " : "") + std::to_string(tokens[i]);
    return s + "]\n";
  }
  for (int32_t t : tokens) s += char(static_cast<unsigned char>(t));
  return s + "\n";
}

// ---- hkv logits / generate ----------------------------------------------------------------------

void check_logits_finite(const std::vector<float>& logits, int64_t vocab, const std::string& model) {
  for (size_t i = 0; i < logits.size(); i++)
    if (!std::isfinite(logits[i]))
      throw std::runtime_error(model + ": the logits of token " + std::to_string(i / size_t(vocab)) +
                               " are not finite (an activation overflowed): nothing was written");
}

void check_context(const std::string& tokens_path, int64_t n, const Model& m) {
  if (n <= m.config.max_position_embeddings) return;
  std::string where = m.source;
  if (std::filesystem::is_directory(where)) where += "/config.json";
  throw std::runtime_error(tokens_path + ": " + std::to_string(n) + " tokens exceed max_position_embeddings " +
                           std::to_string(m.config.max_position_embeddings) + " (field 'max_position_embeddings' of " +
                           where + ")");
}

Prefill prefill_arg(const Args& a, const std::string& backend) {
  const std::string v = a.get("prefill", "exact");
  Prefill p = Prefill::Exact;
  try {
    p = parse_prefill(v);
  } catch (const std::invalid_argument&) {
    throw UsageError("hkv " + a.command + ": --prefill is exact, fast or auto, got '" + v + "'");
  }
  if (p != Prefill::Exact && backend != "cuda")
    throw UsageError("hkv " + a.command + ": --prefill " + v +
                     " needs --backend cuda (the oracle has only the exact path)");
  return p;
}

static void set_threads(const Args& a) {
  if (a.has("threads")) omp_set_num_threads(int(a.get_int("threads", 1)));
}

int cmd_logits(const Args& a) {
  set_threads(a);
  if (a.get("backend", "cpu") == "cuda") return cmd_logits_cuda(a);
  if (a.get("backend", "cpu") != "cpu") throw UsageError("hkv logits: --backend is cpu or cuda");
  prefill_arg(a, "cpu");
  Model m = load_model_arg(a.need("model"));
  std::vector<int32_t> tokens = read_tokens(a.need("tokens"), m.config.vocab_size);
  const std::string out = a.need("out");
  KvFormat f = KvFormat::parse(a.get("kv-cache", "bf16"));
  check_context(a.need("tokens"), int64_t(tokens.size()), m);
  SequenceState s = new_sequence(m.config, f, int64_t(tokens.size()));
  std::vector<float> logits = forward(m, s, tokens);
  check_logits_finite(logits, m.config.vocab_size, m.source);
  write_file_atomic(out, logits.data(), logits.size() * sizeof(float));
  std::printf("%s: %zu tokens x %lld vocab, cache %s, xxh64 %s\n", out.c_str(), tokens.size(),
              static_cast<long long>(m.config.vocab_size), f.name().c_str(),
              xxh64_hex(logits.data(), logits.size() * sizeof(float)).c_str());
  return 0;
}

// Teacher-forced scoring: log p(token t+1 | tokens 0..t) for every t, fed in chunks so that only
// chunk × vocab logits are held at once, written as fp32 [tokens − 1] (little-endian).
int cmd_score(const Args& a) {
  set_threads(a);
  Model m = load_model_arg(a.need("model"));
  std::vector<int32_t> tokens = read_tokens(a.need("tokens"), m.config.vocab_size);
  if (tokens.size() < 2) throw std::runtime_error(a.get("tokens") + ": scoring needs at least 2 tokens");
  check_context(a.get("tokens"), int64_t(tokens.size()), m);
  const int64_t chunk = a.get_int("chunk", 256), V = m.config.vocab_size;
  if (chunk < 1) throw UsageError("hkv score: --chunk must be positive");
  KvFormat f = KvFormat::parse(a.get("kv-cache", "bf16"));
  SequenceState s = new_sequence(m.config, f, int64_t(tokens.size()));
  std::vector<float> logprobs;
  logprobs.reserve(tokens.size() - 1);
  std::vector<double> lp;
  double nll = 0;
  for (size_t c = 0; c + 1 < tokens.size(); c += size_t(chunk)) {
    const size_t n = std::min(size_t(chunk), tokens.size() - 1 - c);
    std::vector<float> logits =
        forward(m, s, std::vector<int32_t>(tokens.begin() + long(c), tokens.begin() + long(c + n)));
    check_logits_finite(logits, V, m.source);
    for (size_t i = 0; i < n; i++) {
      log_softmax(logits.data() + i * size_t(V), V, lp);
      const double l = lp[size_t(tokens[c + i + 1])];
      logprobs.push_back(float(l));
      nll -= l;
    }
  }
  const double mean = nll / double(logprobs.size());
  std::printf("%zu tokens scored, cache %s: mean NLL %.5f nats/token (%.4f bits), perplexity %.4f\n", logprobs.size(),
              f.name().c_str(), mean, mean / std::log(2.0), std::exp(mean));
  if (a.has("out")) write_file_atomic(a.get("out"), logprobs.data(), logprobs.size() * sizeof(float));
  return 0;
}

int cmd_generate(const Args& a) {
  set_threads(a);
  if (a.get_int("batch", 1) > 1 && a.get_int("draft", 0) > 0)  // for both backends
    throw UsageError("hkv generate: --draft and --batch cannot be combined (drafting decodes one sequence)");
  if (a.get("backend", "cpu") == "cuda") return cmd_generate_cuda(a);
  if (a.get("backend", "cpu") != "cpu") throw UsageError("hkv generate: --backend is cpu or cuda");
  prefill_arg(a, "cpu");
  Model m = load_model_arg(a.need("model"));
  std::vector<int32_t> prompt;
  if (a.has("tokens"))
    prompt = read_tokens(a.get("tokens"), m.config.vocab_size);
  else {
    std::string text = a.need("prompt");
    if (m.config.vocab_size < 256)
      throw UsageError("hkv generate: --prompt needs a byte-level vocabulary; use --tokens");
    for (unsigned char ch : text) prompt.push_back(ch);
    if (prompt.empty()) throw UsageError("hkv generate: --prompt is empty");
  }
  const int n = int(a.get_int("n", 32));
  if (n < 1) throw UsageError("hkv generate: --n must be at least 1");
  KvFormat f = KvFormat::parse(a.get("kv-cache", "bf16"));
  check_context(a.has("tokens") ? a.get("tokens") : std::string("--prompt"),
                int64_t(prompt.size()) + n + a.get_int("draft", 0), m);
  const int k = int(a.get_int("draft", 0));
  if (k < 0) throw UsageError("hkv generate: --draft must be at least 0");
  const int batch = int(a.get_int("batch", 1));
  if (batch < 1 || batch > int(prompt.size()))
    throw UsageError("hkv generate: --batch must be between 1 and the prompt's length");
  if (batch > 1) {  // the oracle decodes the batch's sequences one after the other: the same bytes as the engine
    for (int i = 0; i < batch; i++) {
      std::vector<int32_t> p(prompt.begin(), prompt.end() - i);
      SequenceState si = new_sequence(m.config, f, int64_t(p.size()) + n);
      std::vector<int32_t> out = generate_greedy(m, si, p, n);
      if (!a.has("ids")) std::printf("--- sequence %d (the prompt less its last %d tokens)\n", i, i);
      std::fputs(generated_text(out, m.config.vocab_size, a.has("ids")).c_str(), stdout);
    }
    return 0;
  }
  SequenceState s = new_sequence(m.config, f, int64_t(prompt.size()) + n + k);
  if (k > 0) {  // drafted decoding: same tokens as plain greedy decoding, fewer passes
    OracleDraftTarget target(m, s);
    DraftStats st;
    std::vector<int32_t> out = generate_drafted(target, prompt, n, k, &st);
    std::fprintf(stderr, "drafted decode: %lld rounds, %lld of %lld drafted tokens accepted\n",
                 static_cast<long long>(st.rounds), static_cast<long long>(st.accepted),
                 static_cast<long long>(st.drafted));
    std::fputs(generated_text(out, m.config.vocab_size, a.has("ids")).c_str(), stdout);
    return 0;
  }
  // the prompt in one call, then one token a call (generate_greedy's steps), timed separately
  ForwardOptions last;
  last.last_only = true;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits = forward(m, s, prompt, last);
  auto t1 = std::chrono::steady_clock::now();
  std::vector<int32_t> out;
  for (int i = 0; i < n; i++) {
    out.push_back(argmax(logits.data(), m.config.vocab_size));
    if (i + 1 < n) logits = forward(m, s, {out.back()}, last);
  }
  auto t2 = std::chrono::steady_clock::now();
  const double tp = std::chrono::duration<double>(t1 - t0).count(), td = std::chrono::duration<double>(t2 - t1).count();
  std::fprintf(
      stderr,
      "oracle, %d threads: prefill %zu tokens in %.3f s (%.1f tokens/s); decode %d tokens in %.3f s (%.2f tokens/s)\n",
      omp_get_max_threads(), prompt.size(), tp, double(prompt.size()) / tp, n - 1, td, double(n - 1) / td);
  std::fputs(generated_text(out, m.config.vocab_size, a.has("ids")).c_str(), stdout);
  return 0;
}

// ---- hkv gate / hash ------------------------------------------------------------------------------

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p <= s.size()) {
    size_t q = s.find(',', p);
    if (q == std::string::npos) q = s.size();
    if (q > p) out.push_back(s.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

static void write_text(const std::string& path, const std::string& text) {
  write_file_atomic(path, text.data(), text.size());
  std::fprintf(stderr, "wrote %s\n", path.c_str());
}

// "8K" for multiples of 1024, else the number.
static std::string depth_text(int64_t d) { return d % 1024 == 0 ? std::to_string(d / 1024) + "K" : std::to_string(d); }

static std::string minutes_text(double seconds) {
  char b[32];
  if (seconds < 90)
    std::snprintf(b, sizeof b, "%.0f s", seconds);
  else if (seconds < 5400)
    std::snprintf(b, sizeof b, "%.0f min", seconds / 60);
  else
    std::snprintf(b, sizeof b, "%.1f h", seconds / 3600);
  return b;
}

// Where the gate runs, for its reports: the card, or the CPU's model name and the oracle's threads.
static std::string machine_name(const std::string& backend) {
#ifdef HKV_HAVE_CUDA
  if (backend == "cuda") {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) return prop.name;
  }
#else
  (void)backend;  // without the engine every gate runs on the CPU
#endif
  std::ifstream in("/proc/cpuinfo");
  std::string line, cpu = "CPU";
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  return cpu + ", " + std::to_string(omp_get_max_threads()) + " threads";
}

// The CPU gate's depths when none are asked for: the fixture's depths in order while their estimated total
// stays within the budget; the rest are left out, listed as skipped with their estimate.
static void plan_cpu_depths(const Fixture& f, const Model& m, const std::vector<std::string>& formats, int64_t rows,
                            bool floor, double budget_s, GateOptions* opt) {
  const int sides = 1 + int(formats.size()) + (floor ? 1 : 0);
  double total = 0;
  std::string kept, left;
  for (int64_t d : f.depths) {
    const int64_t run_d = std::min(d, m.config.max_position_embeddings - rows + 1);
    const double est = oracle_gate_seconds(m.config, std::max<int64_t>(run_d, 2), rows, sides, omp_get_max_threads());
    if (total + est <= budget_s && left.empty()) {
      total += est;
      opt->depths.push_back(d);
      kept += (kept.empty() ? "" : ", ") + depth_text(d) + " (~" + minutes_text(est) + ")";
    } else {
      opt->depths.push_back(d);
      opt->left_out.push_back(
          {d, "left out on the CPU: ~" + minutes_text(est) + " estimated (--depths " + depth_text(d) + " runs it)"});
      left += (left.empty() ? "" : ",") + depth_text(d);
    }
  }
  std::fprintf(stderr, "gate: on the CPU, the depths estimated to fit %s: %s, ~%s in all\n",
               minutes_text(budget_s).c_str(), kept.empty() ? "none" : kept.c_str(), minutes_text(total).c_str());
  if (!left.empty())
    std::fprintf(stderr, "gate: left out: %s (ask for them with --depths %s, or raise --budget)\n", left.c_str(),
                 left.c_str());
}

// Progress on stderr: on a terminal one line rewritten in place; in a pipe or a log a line every 10 seconds and
// at the end of each depth. Each says the tokens fed (over every side), the rate, and the depth's time left.
class GateProgress {
 public:
  explicit GateProgress(bool tty) : tty_(tty) {}
  void operator()(int64_t depth, int64_t done, int64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (depth != depth_) depth_ = depth, start_ = now, last_ = now;
    if (done == 0) return;  // the depth starts
    const double el = std::chrono::duration<double>(now - start_).count();
    const bool end = done == total;
    if (!tty_ && !end && std::chrono::duration<double>(now - last_).count() < 10) return;
    last_ = now;
    const double rate = el > 0 ? double(done) / el : 0;
    char line[256];
    std::snprintf(line, sizeof line, "gate: depth %s: %lld/%lld tokens fed, %.0f tokens/s, %s",
                  depth_text(depth).c_str(), static_cast<long long>(done), static_cast<long long>(total), rate,
                  end        ? ("done in " + minutes_text(el)).c_str()
                  : rate > 0 ? ("~" + minutes_text(double(total - done) / rate) + " left").c_str()
                             : "");
    if (tty_)
      std::fprintf(stderr, "\r\033[K%s%s", line, end ? "\n" : "");
    else
      std::fprintf(stderr, "%s\n", line);
  }

 private:
  bool tty_;
  int64_t depth_ = -1;
  std::chrono::steady_clock::time_point start_, last_;
};

int cmd_gate(const Args& a) {
  set_threads(a);
  const std::string fixture_path = a.get("fixture", std::string(HKV_SOURCE_DIR) + "/fixtures/trained-gate.json");
  Fixture f = load_fixture(fixture_path);
  GateOptions opt;
  if (a.has("depths"))
    for (long long d : a.get_int_list("depths", "")) opt.depths.push_back(d);
  if (a.has("formats")) opt.formats = split_list(a.get("formats"));
  for (const std::string& fm : opt.formats) KvFormat::parse(fm);
  opt.rows = a.get_int("rows", 0);
  opt.noise_floor = !a.has("no-floor");
  auto progress = std::make_shared<GateProgress>(isatty(2));
  opt.progress = [progress](int64_t depth, int64_t done, int64_t total) { (*progress)(depth, done, total); };
  const std::string backend = a.get("backend", "cpu");
  const Prefill prefill = prefill_arg(a, backend);
  if (a.has("budget") && (backend != "cpu" || a.has("depths")))
    throw UsageError("hkv gate: --budget bounds the CPU gate's default depths (without --depths, --backend cpu)");
  Model m = load_model_arg(f.model);
  std::vector<int32_t> text = load_fixture_tokens(f, m.config.vocab_size);
  RunnerFactory runners;
  if (backend == "cpu")
    runners = oracle_runners(m);
  else
    runners = engine_runners(m, prefill);  // throws when the engine is not built or no GPU is present
  std::error_code ec;
  std::string shown = std::filesystem::relative(f.path, ec).string();
  if (ec || shown.empty() || shown.rfind("../../", 0) == 0) shown = f.path;
  std::fprintf(stderr, "gate: fixture %s (%s), backend %s\n", f.name.c_str(), shown.c_str(), backend.c_str());
  if (backend == "cpu" && opt.depths.empty())
    plan_cpu_depths(f, m, opt.formats.empty() ? f.formats : opt.formats, opt.rows ? opt.rows : f.rows, opt.noise_floor,
                    double(a.get_int("budget", 10)) * 60, &opt);
  GateReport g = run_gate(f, m, text, runners, backend == "cpu" ? "oracle (CPU)" : "engine (CUDA)", opt);
  g.commit = kHkvCommit;
  g.machine = machine_name(backend);
  std::fputs(gate_table(g).c_str(), stdout);
  if (gate_scored_skipped(g).first == 0)
    throw std::runtime_error(
        "hkv gate: no format-depth result was scored, so there is no verdict: every depth was "
        "skipped (the reasons are listed above)");
  if (a.has("json")) write_text(a.get("json"), gate_json(g));
  if (a.has("md")) write_text(a.get("md"), gate_markdown(g));
  if (a.has("html")) write_text(a.get("html"), gate_html(g));
  return g.pass ? 0 : 1;
}

int cmd_diff(const Args& a) {
  DiffOptions opt;
  opt.op = a.get("op");
  opt.filter = a.get("filter");
  opt.long_context = a.has("long");
  opt.list_only = a.has("list");
#ifdef HKV_HAVE_CUDA
  const bool engine = true;
  int ngpu = 0;
  const bool have_gpu = cudaGetDeviceCount(&ngpu) == cudaSuccess && ngpu > 0;
  if (a.has("require-gpu") && !have_gpu) {
    std::printf("hkv diff: no GPU here: not run\n");
    return 77;  // CTest's "not run"
  }
  if (have_gpu) cuda::select_ctest_device();
#else
  if (a.has("require-gpu")) {
    std::printf("hkv diff: built without the CUDA engine: not run\n");
    return 77;
  }
  const bool engine = false;
  std::printf("hkv diff: built without the CUDA engine: only the self-tests run\n");
#endif
  const std::vector<DiffCase> cases = diff_cases(engine);
  std::vector<const DiffCase*> chosen;
  try {
    chosen = select_cases(cases, opt);
  } catch (const std::regex_error& e) {
    throw UsageError("hkv diff: --filter '" + opt.filter + "' is not a regular expression (" + e.what() + ")");
  }
  if (chosen.empty()) {  // a verdict needs evidence: a filter that selects nothing is a mistake, not a pass
    std::set<std::string> ops;
    for (const DiffCase& c : cases) ops.insert(c.op);
    std::string all;
    for (const std::string& o : ops) all += (all.empty() ? "" : ", ") + o;
    throw UsageError("hkv diff: no case matches" + (opt.op.empty() ? "" : " --op " + opt.op) +
                     (opt.filter.empty() ? "" : " --filter '" + opt.filter + "'") +
                     (opt.long_context ? "" : " (without --long)") + "; the ops here are " + all);
  }
  return run_diff(cases, opt) ? 1 : 0;
}

int cmd_hash(const Args& a) {
  if (a.positional.empty()) throw UsageError("hkv hash: name one or more files");
  for (const std::string& p : a.positional) {
    std::string bytes = read_file(p);
    std::printf("%s  %zu bytes  xxh64 %s\n", p.c_str(), bytes.size(), xxh64_hex(bytes.data(), bytes.size()).c_str());
  }
  return 0;
}

#ifndef HKV_HAVE_CUDA
static int no_engine(const char* what) {
  throw UsageError(
      std::string(what) +
      " needs the CUDA engine, and this hkv was built without it (no nvcc at configure time, or HKV_CUDA=OFF)");
}
int cmd_logits_cuda(const Args&) { return no_engine("hkv logits --backend cuda"); }
int cmd_generate_cuda(const Args&) { return no_engine("hkv generate --backend cuda"); }
int cmd_bench(const Args&) { return no_engine("hkv bench"); }
int cmd_bench_ops(const Args&) { return no_engine("hkv bench-ops"); }
int cmd_bench_prefill(const Args&) { return no_engine("hkv bench-prefill"); }
#endif

}  // namespace hkv
