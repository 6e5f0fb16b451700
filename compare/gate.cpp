#include "compare/gate.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <stdexcept>

#include "reference/model.h"

namespace hkv {

// ---- the oracle as a runner ------------------------------------------------------------------------

namespace {
class OracleRunner : public SequenceRunner {
 public:
  OracleRunner(const Model& m, const KvFormat& f, int64_t capacity, bool wide)
      : m_(m), s_(new_sequence(m.config, f, capacity)), wide_(wide) {}
  void feed(const std::vector<int32_t>& tokens, std::vector<float>* logits) override {
    ForwardOptions opt;
    opt.want_logits = logits != nullptr;
    set_wide_accumulation(wide_);
    try {
      std::vector<float> l = forward(m_, s_, tokens, opt);
      set_wide_accumulation(false);
      if (logits) *logits = std::move(l);
    } catch (...) {
      set_wide_accumulation(false);
      throw;
    }
  }

 private:
  const Model& m_;
  SequenceState s_;
  bool wide_;
};
}  // namespace

RunnerFactory oracle_runners(const Model& m, bool wide) {
  return [&m, wide](const KvFormat& f, int64_t capacity) -> std::unique_ptr<SequenceRunner> {
    return std::make_unique<OracleRunner>(m, f, capacity, wide);
  };
}

#ifndef HKV_HAVE_CUDA
RunnerFactory engine_runners(const Model&, Prefill) {
  throw std::runtime_error("this hkv was built without the CUDA engine (no nvcc at configure time, or HKV_CUDA=OFF)");
}
#endif  // with the engine: compare/engine_cli.cpp

// ---- the context -----------------------------------------------------------------------------------

std::vector<int32_t> gate_context(const Fixture& f, const std::vector<int32_t>& text, int64_t depth, int64_t rows) {
  const int64_t need = depth + rows;
  if (int64_t(text.size()) < need)
    throw std::runtime_error("depth " + std::to_string(depth) + " needs " + std::to_string(need) +
                             " tokens; the token file has " + std::to_string(text.size()));
  std::vector<int32_t> ctx(text.begin(), text.begin() + need);
  if (!f.plant.empty()) {
    const int64_t a = int64_t(f.ask.size()), p = int64_t(f.plant.size()), n = int64_t(f.answer.size());
    if (depth / 2 + p > depth - a || n > rows)
      throw std::runtime_error("depth " + std::to_string(depth) + " is too short for the passphrase");
    std::copy(f.plant.begin(), f.plant.end(), ctx.begin() + depth / 2);  // planted at d/2
    std::copy(f.ask.begin(), f.ask.end(), ctx.begin() + (depth - a));    // asked, ending at d−1
    std::copy(f.answer.begin(), f.answer.end(), ctx.begin() + depth);    // the answer starts at d
  }
  return ctx;
}

// ---- one depth -------------------------------------------------------------------------------------

DepthResult gate_depth(const Fixture& f, const std::vector<int32_t>& text, int64_t depth, int64_t rows,
                       const RunnerFactory& ref, const KvFormat& ref_fmt, const RunnerFactory& cand,
                       const KvFormat& cand_fmt, int64_t vocab, const GateOptions& opt, const std::string& label) {
  const auto t0 = std::chrono::steady_clock::now();
  DepthResult r;
  r.depth = depth;
  r.rows = rows;
  r.format = label.empty() ? cand_fmt.name() : label;
  std::vector<int32_t> ctx = gate_context(f, text, depth, rows);
  // rows predict tokens depth … depth+rows−1: the logits at positions depth−1 … depth+rows−2
  const int64_t first = depth - 1, capacity = depth - 1 + rows;
  auto a = ref(ref_fmt, capacity), b = cand(cand_fmt, capacity);

  // prefill [0, depth−1) in pieces, without logits
  const int64_t piece = 4096;
  for (int64_t p = 0; p < first; p += piece) {
    std::vector<int32_t> part(ctx.begin() + p, ctx.begin() + std::min(first, p + piece));
    if (opt.progress)
      opt.progress("depth " + std::to_string(depth) + " " + r.format + ": prefill " + std::to_string(p) + "/" +
                   std::to_string(first));
    a->feed(part, nullptr);
    b->feed(part, nullptr);
  }

  StreamingSummary kl;
  int64_t agree = 0;
  double nll_a = 0, nll_b = 0;
  bool answer_a = true, answer_b = true;
  std::vector<float> la, lb;
  std::vector<double> lpa, lpb;
  for (int64_t c = 0; c < rows; c += opt.chunk) {
    const int64_t n = std::min(opt.chunk, rows - c);
    std::vector<int32_t> part(ctx.begin() + first + c, ctx.begin() + first + c + n);
    if (opt.progress)
      opt.progress("depth " + std::to_string(depth) + " " + r.format + ": rows " + std::to_string(c) + "/" +
                   std::to_string(rows));
    a->feed(part, &la);
    b->feed(part, &lb);
    for (int64_t i = 0; i < n; i++) {
      const int64_t row = c + i;
      const float* pa = la.data() + size_t(i * vocab);
      const float* pb = lb.data() + size_t(i * vocab);
      log_softmax(pa, vocab, lpa);
      log_softmax(pb, vocab, lpb);
      double k = 0;
      for (int64_t v = 0; v < vocab; v++) k += std::exp(lpa[size_t(v)]) * (lpa[size_t(v)] - lpb[size_t(v)]);
      kl.add(std::max(k, 0.0));
      const int32_t ta = argmax(pa, vocab), tb = argmax(pb, vocab);
      if (ta == tb)
        agree++;
      else
        r.diffs.push_back({row, ta, tb, lpa[size_t(ta)] - lpa[size_t(tb)], lpb[size_t(tb)] - lpb[size_t(ta)]});
      const int32_t next = ctx[size_t(depth + row)];
      nll_a -= lpa[size_t(next)];
      nll_b -= lpb[size_t(next)];
      if (row < int64_t(f.answer.size())) {
        answer_a = answer_a && ta == next;
        answer_b = answer_b && tb == next;
      }
    }
  }
  r.kl_mean = kl.mean();
  r.kl_max = kl.max();
  r.p999 = kl.quantile(0.999);
  r.p99 = kl.quantile(0.99);
  r.p90 = kl.quantile(0.90);
  r.p50 = kl.quantile(0.5);
  r.histogram = kl.bins();
  r.top1_agree = double(agree) / double(rows);
  r.ppl_ref = std::exp(nll_a / double(rows));
  r.ppl_fmt = std::exp(nll_b / double(rows));
  if (!f.answer.empty()) {
    r.recall_ref = answer_a ? 1 : 0;
    r.recall_fmt = answer_b ? 1 : 0;
  }
  r.pass = r.kl_mean <= f.bar_kl_mean && r.kl_max <= f.bar_kl_max;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// ---- the whole gate --------------------------------------------------------------------------------

GateReport run_gate(const Fixture& f, const Model& m, const std::vector<int32_t>& text, const RunnerFactory& runners,
                    const std::string& backend, const GateOptions& opt) {
  GateReport g;
  g.fixture = f.name;
  g.model = m.source;
  g.backend = backend;
  g.bar_kl_mean = f.bar_kl_mean;
  g.bar_kl_max = f.bar_kl_max;
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  g.date = date;
  const std::vector<int64_t> depths = opt.depths.empty() ? f.depths : opt.depths;
  const std::vector<std::string> formats = opt.formats.empty() ? f.formats : opt.formats;
  const int64_t rows = opt.rows ? opt.rows : f.rows;
  if (depths.empty()) throw std::runtime_error(f.path + ": field 'depths': no depths to run");
  if (formats.empty()) throw std::runtime_error(f.path + ": field 'formats': no formats to compare");
  const int64_t V = m.config.vocab_size;

  // A depth up to the model's window runs; where its scored rows would pass the window's last position
  // (d − 1 + rows > max_position_embeddings), it runs at the deepest depth whose rows fit, max − rows + 1,
  // and the result says both (the fixture's 262,144 on a 262,144-position model runs at 261,889).
  const int64_t max_pos = m.config.max_position_embeddings;
  auto fitted = [&](int64_t d) { return d <= max_pos ? std::min(d, max_pos - rows + 1) : d; };
  auto skip = [&](int64_t d, const std::string& fmt) -> std::string {
    if (d < 2) return "a depth of at least 2 is needed";
    if (d > max_pos) return "beyond max_position_embeddings " + std::to_string(max_pos);
    d = fitted(d);
    if (d < 2) return "max_position_embeddings " + std::to_string(max_pos) + " leaves no room for the rows";
    if (int64_t(text.size()) < d + rows) return "the token file holds " + std::to_string(text.size()) + " tokens";
    if (!f.plant.empty() &&
        (d / 2 + int64_t(f.plant.size()) > d - int64_t(f.ask.size()) || int64_t(f.answer.size()) > rows))
      return "too short for the passphrase";
    (void)fmt;
    return "";
  };
  g.pass = true;
  for (const std::string& fmt : formats)
    for (int64_t d : depths) {
      std::string why = skip(d, fmt);
      if (!why.empty()) {
        DepthResult r;
        r.depth = d;
        r.format = fmt;
        r.skipped = true;
        r.skip_reason = why;
        g.results.push_back(r);
        continue;
      }
      g.results.push_back(
          gate_depth(f, text, fitted(d), rows, runners, KvFormat::bf16(), runners, KvFormat::parse(fmt), V, opt));
      g.results.back().requested_depth = d;
      g.pass = g.pass && g.results.back().pass;
    }
  if (opt.noise_floor) {
    RunnerFactory wide = oracle_runners(m, true);
    for (int64_t d : depths) {
      if (!skip(d, "bf16").empty()) continue;
      g.floor.push_back(gate_depth(f, text, fitted(d), rows, wide, KvFormat::bf16(), runners, KvFormat::bf16(), V, opt,
                                   "noise floor"));
      g.floor.back().requested_depth = d;
    }
  }
  return g;
}

}  // namespace hkv
