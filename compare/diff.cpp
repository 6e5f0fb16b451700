#include "compare/diff.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <regex>

#include "reference/model.h"
#include "reference/scalar.h"
#include "reference/synthetic.h"
#include "reference/tokens.h"

namespace hkv {

// ---- comparing traces ------------------------------------------------------------------------------

// First differing element of two float arrays of equal length, and how many differ.
static std::string compare_floats(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size());
  if (xxh64_hex(a.data(), a.size() * 4) == xxh64_hex(b.data(), b.size() * 4) &&
      std::memcmp(a.data(), b.data(), a.size() * 4) == 0)
    return "";
  size_t first = a.size(), count = 0;
  for (size_t i = 0; i < a.size(); i++)
    if (std::memcmp(&a[i], &b[i], 4) != 0) {
      if (first == a.size()) first = i;
      count++;
    }
  char buf[160];
  std::snprintf(buf, sizeof buf, "index %zu: %.9g vs %.9g (%08x vs %08x), %zu of %zu elements differ", first,
                double(a[first]), double(b[first]), f32_bits(a[first]), f32_bits(b[first]), count, a.size());
  return buf;
}

// The order in which a forward pass produces its tensors: by layer, then tensor (q, k, attn, deltanet,
// hidden), then token. A backend may report them in another order (the engine runs long prompts in rounds
// of tokens), so both traces are compared in this canonical order: the first mismatch is then the
// earliest layer and tensor where the two part.
static int tensor_rank(const std::string& name) {
  static const char* order[] = {"q", "k", "attn", "deltanet", "hidden"};
  for (int i = 0; i < 5; i++)
    if (name == order[i]) return i;
  return 5;
}

static std::vector<const Trace::Tap*> canonical(const Trace& t) {
  std::vector<const Trace::Tap*> v;
  for (const auto& tap : t.taps) v.push_back(&tap);
  std::stable_sort(v.begin(), v.end(), [](const Trace::Tap* x, const Trace::Tap* y) {
    if (x->layer != y->layer) return x->layer < y->layer;
    int rx = tensor_rank(x->name), ry = tensor_rank(y->name);
    if (rx != ry) return rx < ry;
    if (x->name != y->name) return x->name < y->name;
    return x->pos < y->pos;
  });
  return v;
}

std::string first_divergence(const Trace& a, const Trace& b) {
  const auto ta = canonical(a), tb = canonical(b);
  const size_t n = std::min(ta.size(), tb.size());
  for (size_t i = 0; i < n; i++) {
    const Trace::Tap &x = *ta[i], &y = *tb[i];
    if (x.layer != y.layer || x.name != y.name || x.pos != y.pos)
      return "layer " + std::to_string(x.layer) + " " + x.name + " token " + std::to_string(x.pos) +
             " is reported on one side only (the other has layer " + std::to_string(y.layer) + " " + y.name +
             " token " + std::to_string(y.pos) + " there)";
    std::string d = compare_floats(x.data, y.data);
    if (!d.empty())
      return "layer " + std::to_string(x.layer) + " tensor " + x.name + " token " + std::to_string(x.pos) + " " + d;
  }
  if (ta.size() != tb.size()) return "tap counts " + std::to_string(ta.size()) + " and " + std::to_string(tb.size());
  std::string d = compare_floats(a.logits, b.logits);
  return d.empty() ? "" : "logits " + d;
}

Trace record_trace(const ForwardFn& forward_fn, const std::vector<int32_t>& tokens, int64_t decode,
                   const std::function<void()>& after_prefill, bool taps) {
  Trace tr;
  int64_t base = 0;  // absolute position of the call's first token
  Tap tap = [&tr, &base](int layer, const char* name, int64_t t, const float* data, int64_t n) {
    tr.taps.push_back({layer, name, base + t, std::vector<float>(data, data + n)});
  };
  ForwardOptions opt;
  opt.tap = taps ? &tap : nullptr;
  const int64_t T = int64_t(tokens.size()), pre = T - decode;
  tr.logits = forward_fn(std::vector<int32_t>(tokens.begin(), tokens.begin() + pre), opt);
  if (after_prefill) after_prefill();
  for (int64_t i = pre; i < T; i++) {
    base = i;
    std::vector<float> l = forward_fn({tokens[size_t(i)]}, opt);
    tr.logits.insert(tr.logits.end(), l.begin(), l.end());
  }
  return tr;
}

Trace oracle_trace(const Model& m, const KvFormat& f, const std::vector<int32_t>& tokens, int64_t decode,
                   int64_t corrupt_byte, bool taps) {
  SequenceState s = new_sequence(m.config, f, int64_t(tokens.size()));
  auto fwd = [&m, &s](const std::vector<int32_t>& t, const ForwardOptions& o) { return forward(m, s, t, o); };
  auto corrupt = [&s, corrupt_byte] {
    if (corrupt_byte >= 0 && !s.k_cache.empty()) s.k_cache[0][size_t(corrupt_byte)] ^= 0x10;
  };
  return record_trace(fwd, tokens, decode, corrupt, taps);
}

// ---- the CPU cases: the comparison itself must be able to fail ---------------------------------------

static std::vector<int32_t> byte_tokens(int n, uint64_t seed) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; i++) t.push_back(int32_t(synth_bits(seed, 3, uint64_t(i)) & 0xff));
  return t;
}

static std::vector<DiffCase> self_test_cases() {
  std::vector<DiffCase> cases;
  for (const char* fmt : {"bf16", "q4h"}) {
    cases.push_back({"self-test", std::string("oracle=oracle,cache=") + fmt, false, [fmt]() {
                       Model m = build_synthetic(builtin_spec("tiny"));
                       auto toks = byte_tokens(40, 1);
                       Trace a = oracle_trace(m, KvFormat::parse(fmt), toks, 4);
                       Trace b = oracle_trace(m, KvFormat::parse(fmt), toks, 4);
                       std::string d = first_divergence(a, b);
                       return d.empty() ? CaseResult{CaseResult::Ok, ""} : CaseResult{CaseResult::Fail, d};
                     }});
    cases.push_back({"self-test", std::string("corrupted-cache-must-differ,cache=") + fmt, false, [fmt]() {
                       Model m = build_synthetic(builtin_spec("tiny"));
                       auto toks = byte_tokens(40, 1);
                       Trace a = oracle_trace(m, KvFormat::parse(fmt), toks, 4);
                       Trace b = oracle_trace(m, KvFormat::parse(fmt), toks, 4, /*corrupt_byte=*/3);
                       std::string d = first_divergence(a, b);
                       if (d.empty()) return CaseResult{CaseResult::Fail, "a flipped cache byte went unnoticed"};
                       return CaseResult{CaseResult::Ok, "detected: " + d};
                     }});
  }
  return cases;
}

std::vector<DiffCase> diff_cases(bool with_engine) {
  std::vector<DiffCase> cases = self_test_cases();
  if (with_engine) {
    auto e = engine_diff_cases();
    cases.insert(cases.end(), e.begin(), e.end());
  }
  return cases;
}

std::vector<const DiffCase*> select_cases(const std::vector<DiffCase>& cases, const DiffOptions& opt) {
  const std::regex re(opt.filter.empty() ? ".*" : opt.filter);
  std::vector<const DiffCase*> out;
  for (const DiffCase& c : cases) {
    if (!opt.op.empty() && c.op != opt.op) continue;
    if (!opt.filter.empty() && !std::regex_search(c.name(), re)) continue;
    if (c.long_context && !opt.long_context) continue;
    out.push_back(&c);
  }
  return out;
}

CaseResult run_case(const DiffCase& c) {
  std::printf("  %s: ", c.name().c_str());
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  CaseResult r;
  try {
    r = c.run();
  } catch (const std::exception& e) {
    r = {CaseResult::Fail, std::string("error: ") + e.what()};
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const char* word = r.status == CaseResult::Ok ? "OK" : r.status == CaseResult::Fail ? "FAIL" : "SKIP";
  std::printf("%s%s%s%s (%.2f s)\n", word, r.detail.empty() ? "" : " (", r.detail.c_str(), r.detail.empty() ? "" : ")",
              s);
  std::fflush(stdout);
  return r;
}

int run_diff(const std::vector<DiffCase>& cases, const DiffOptions& opt) {
  int passed = 0, failed = 0, skipped = 0;
  for (const DiffCase* cp : select_cases(cases, opt)) {
    const DiffCase& c = *cp;
    if (opt.list_only) {
      std::printf("%s\n", c.name().c_str());
      continue;
    }
    const CaseResult r = run_case(c);
    (r.status == CaseResult::Ok ? passed : r.status == CaseResult::Fail ? failed : skipped)++;
  }
  if (!opt.list_only) {
    if (skipped)
      std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    else
      std::printf("%d passed, %d failed\n", passed, failed);
  }
  return failed;
}

}  // namespace hkv
