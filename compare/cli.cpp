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
#include <stdexcept>

#include "compare/diff.h"
#include "compare/draft.h"
#include "compare/fixture.h"
#include "compare/format_study.h"
#include "compare/gate.h"
#include "compare/report.h"
#include "compare/stats.h"
#include "reference/model.h"
#include "reference/synthetic.h"
#include "reference/tokens.h"

namespace hkv {

static const char* kHelp = R"(hkv: a CPU oracle and a CUDA engine for a Qwen3.5-style hybrid model, and the layer that
compares them bit for bit.

usage: hkv <command> [options]

commands:
  format     pack a seeded cache row and show its bytes, its values and its error
               --format bf16|fp8|q4h   (default q4h; ablations: q4h-norot, q4h-sym, q4h-mid, q4h-g64 ...)
               --seed N  --head-dim N (default 256)  --row gaussian|outliers|near-duplicate
               --grids   print the grid study of docs/FORMAT.md instead
  logits     run the model over a token file and write fp32 logits [tokens][vocab], little-endian
               --model PATH  --tokens FILE  --out FILE  [--kv-cache bf16|fp8|q4h]  [--backend cpu|cuda]
               [--threads N]  [--prefill exact|fast|auto]  (cuda only; fast = tensor cores, NOT exact; auto =
               fast from 64 tokens on; default exact)
  score      teacher-forced scoring: log p of every next token, streamed (chunk x vocab logits at a time)
               --model PATH  --tokens FILE  [--out FILE (fp32 [tokens-1])]  [--kv-cache F]  [--chunk N]
  generate   greedy decode from a prompt
               --model PATH  (--prompt TEXT | --tokens FILE)  [--n N]  [--kv-cache F]  [--backend cpu|cuda]
               [--draft K]  (K tokens drafted by prompt lookup, verified in one pass: the same output)
               [--batch B]  (B sequences, the prompt less its last 0..B-1 tokens, decoded together)
               [--prefill exact|fast|auto]  (cuda only: the prompt's path; decode is always exact)
  gate       the fidelity gate: each cache format against bf16, teacher-forced, at each depth
               --fixture FILE (default fixtures/trained-gate.json)  [--backend cpu|cuda]
               [--formats fp8,q4h]  [--depths 1024,8192]  [--rows N]  [--no-floor]  [--prefill exact|fast|auto]
               [--json FILE] [--md FILE] [--html FILE]   exit 0 when every depth passes, 1 when not
  diff       the differential suite: the engine against the oracle, one line a case, then "N passed, M failed"
               [--op NAME] [--filter REGEX] [--long] [--list] [--require-gpu (exit 77 without one)]
               exit 1 when a case fails
  bench      decode speed of the 27B shape (MLX 4-bit weights) against its bandwidth floor (GPU only): a table
               (depth x cache: tokens/s, ms/token, floor ms, % of floor, peak device memory)
               [--depths 1024,32768] [--kv-cache bf16,q4h] [--tokens 16] [--json FILE (schema hkv-bench-1)]
               [--embed host|device (the embedding table's home, default host)]
               [--attention (then the attention kernels alone) | --attention-only]
               [--phases (a token's DeltaNet recurrence phases a row; with --attention, the chunk kernels' too)]
               [--attn-shape auto,narrow,wide,narrow-v,narrow-h2,narrow-v2,narrow-h1,slim]
               [--variants "default;HKV_DN_SPLIT=1,HKV_DN_TPC=1" (engine switches timed in one process,
                their tokens interleaved) [--rounds 4]]
               [--timeline (then, a row, each kernel of a token as the card timed it: CUPTI)]
               [--greedy device|host (each token's argmax on the card, the default, or its logits copied back)]
  bench-ops  the exact MLX4 matrix-vector products of a 27B decode token, each against copy bandwidth (GPU only)
               [--reps 50] [--chain (then a token's 257 launches in one graph, each with its own matrices)
               [--variants "default;HKV_MV_U3=0" [--rounds 4]] [--phases (each launch's phases, %globaltimer)]
               [--as-token (the launches as a decode token makes them: norms and records in their prologues)]]
  bench-prefill  the fast prefill path's time and peak memory; --attention-only: its attention alone (GPU only)
               [--model builtin:27b-mlx4]  [--tokens 4096,32768]  [--kv-cache q4h]  [--decode N]  [--exact]
               [--embed host|device]  [--limit-gib G (ballast: the card limited to G GiB)]
  hash       print the xxh64 and size of files (for fixtures)   hkv hash FILE...

models (--model): builtin:tiny (fast exactness tests), builtin:tiny-mlx4, builtin:100m, builtin:27b, builtin:27b-mlx4,
  a synthetic spec (JSON with a "synthetic" key), or a checkpoint folder (config.json + safetensors),
  e.g. fixtures/trained/hf (the small trained model).
token files: a JSON array of integers, or raw little-endian uint32 (name ending in .u32).

exit codes: 0 done, 1 a check failed, 2 bad usage or bad input (the message names the file and field).
)";

std::string Args::get(const std::string& k, const std::string& def) const {
  auto it = opts.find(k);
  return it == opts.end() ? def : it->second;
}
std::string Args::need(const std::string& k) const {
  auto it = opts.find(k);
  if (it == opts.end() || it->second.empty()) throw UsageError("hkv " + command + ": --" + k + " is required");
  return it->second;
}
long long Args::get_int(const std::string& k, long long def) const {
  if (!has(k)) return def;
  std::string v = get(k);
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0') throw UsageError("hkv " + command + ": --" + k + " wants an integer, got '" + v + "'");
  return x;
}

std::vector<long long> Args::get_int_list(const std::string& k, const std::string& def) const {
  const std::string v = get(k, def);
  std::vector<long long> out;
  for (const std::string& item : split_list(v)) {
    char* end = nullptr;
    const long long x = std::strtoll(item.c_str(), &end, 10);
    if (*end != '\0')
      throw UsageError("hkv " + command + ": --" + k + " wants comma-separated integers, got '" + v + "'");
    out.push_back(x);
  }
  if (out.empty()) throw UsageError("hkv " + command + ": --" + k + " wants comma-separated integers, got '" + v + "'");
  return out;
}

static Args parse_args(int argc, char** argv) {
  Args a;
  a.command = argv[1];
  for (int i = 2; i < argc; i++) {
    std::string s = argv[i];
    if (s.rfind("--", 0) == 0) {
      std::string key = s.substr(2), val;
      size_t eq = key.find('=');
      if (eq != std::string::npos) {
        val = key.substr(eq + 1);
        key = key.substr(0, eq);
      } else if (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0) {
        val = argv[++i];
      }
      a.opts[key] = val;
    } else {
      a.positional.push_back(s);
    }
  }
  return a;
}

// ---- hkv format ---------------------------------------------------------------------------------

int cmd_format(const Args& a) {
  const int head_dim = int(a.get_int("head-dim", 256));
  if (a.has("grids")) {
    const int rows = int(a.get_int("rows", 4096));
    std::printf("Round-trip error of 4-bit grids, %d rows of head_dim %d, seed %lld.\n", rows, head_dim,
                a.get_int("seed", 1));
    std::printf("RMS: relative RMS error over all rows. worst: largest |error| / row RMS.\n\n");
    std::fputs(grid_study_markdown(rows, head_dim, uint64_t(a.get_int("seed", 1))).c_str(), stdout);
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
  Model m = load_any_model(a.need("model"));
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
  prefill_arg(a, a.get("backend", "cpu"));  // the oracle's command: exact only
  if (a.get("backend", "cpu") != "cpu") throw UsageError("hkv score: runs on the oracle only (--backend cpu)");
  Model m = load_any_model(a.need("model"));
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
  Model m = load_any_model(a.need("model"));
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
      std::printf("[");
      for (size_t j = 0; j < out.size(); j++) std::printf("%s%d", j ? ", " : "", out[j]);
      std::printf("]\n");
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
    std::printf("[");
    for (size_t i = 0; i < out.size(); i++) std::printf("%s%d", i ? ", " : "", out[i]);
    std::printf("]\n");
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
  std::printf("[");
  for (size_t i = 0; i < out.size(); i++) std::printf("%s%d", i ? ", " : "", out[i]);
  std::printf("]\n");
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

static int64_t parse_depth(const std::string& s) {
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (end && (*end == 'K' || *end == 'k')) v *= 1024, end++;
  if (s.empty() || !end || *end != '\0' || v < 2)
    throw UsageError("hkv gate: --depths wants numbers like 1024 or 8K, got '" + s + "'");
  return v;
}

static void write_text(const std::string& path, const std::string& text) {
  write_file_atomic(path, text.data(), text.size());
  std::fprintf(stderr, "wrote %s\n", path.c_str());
}

int cmd_gate(const Args& a) {
  set_threads(a);
  const std::string fixture_path = a.get("fixture", std::string(HKV_SOURCE_DIR) + "/fixtures/trained-gate.json");
  Fixture f = load_fixture(fixture_path);
  GateOptions opt;
  if (a.has("depths"))
    for (const std::string& d : split_list(a.get("depths"))) opt.depths.push_back(parse_depth(d));
  if (a.has("formats")) opt.formats = split_list(a.get("formats"));
  for (const std::string& fm : opt.formats) KvFormat::parse(fm);
  opt.rows = a.get_int("rows", 0);
  opt.noise_floor = !a.has("no-floor");
  const bool tty = isatty(2);
  // On a terminal, one line rewritten in place; in a log, a line when each depth starts its scored rows.
  opt.progress = [tty](const std::string& msg) {
    if (tty)
      std::fprintf(stderr, "\r\033[K%s", msg.c_str());
    else if (msg.find(": rows 0/") != std::string::npos)
      std::fprintf(stderr, "%s\n", msg.c_str());
  };
  const std::string backend = a.get("backend", "cpu");
  if (backend != "cpu" && backend != "cuda") throw UsageError("hkv gate: --backend is cpu or cuda");
  const Prefill prefill = prefill_arg(a, backend);
  Model m = load_any_model(f.model);
  std::vector<int32_t> text = load_fixture_tokens(f, m.config.vocab_size);
  RunnerFactory runners;
  if (backend == "cpu")
    runners = oracle_runners(m);
  else
    runners = engine_runners(m, prefill);  // throws when the engine is not built or no GPU is present
  std::fprintf(stderr, "gate: fixture %s (%s), backend %s\n", f.name.c_str(), f.path.c_str(), backend.c_str());
  GateReport g = run_gate(f, m, text, runners, backend == "cpu" ? "oracle (CPU)" : "engine (CUDA)", opt);
  if (tty) std::fprintf(stderr, "\r\033[K");
  std::fputs(gate_table(g).c_str(), stdout);
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
  return run_diff(diff_cases(engine), opt) ? 1 : 0;
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

// ---- dispatch -----------------------------------------------------------------------------------

int run_cli(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::fputs(kHelp, stdout);
    return argc < 2 ? 2 : 0;
  }
  try {
    Args a = parse_args(argc, argv);
    if (a.has("help")) {
      std::fputs(kHelp, stdout);
      return 0;
    }
    if (a.command == "format") return cmd_format(a);
    if (a.command == "logits") return cmd_logits(a);
    if (a.command == "generate") return cmd_generate(a);
    if (a.command == "gate") return cmd_gate(a);
    if (a.command == "score") return cmd_score(a);
    if (a.command == "hash") return cmd_hash(a);
    if (a.command == "diff") return cmd_diff(a);
    if (a.command == "bench") return cmd_bench(a);
    if (a.command == "bench-ops") return cmd_bench_ops(a);
    if (a.command == "bench-prefill") return cmd_bench_prefill(a);
    throw UsageError("unknown command '" + a.command + "' (hkv --help lists them)");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hkv: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace hkv
