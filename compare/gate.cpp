#include "compare/gate.h"

#include <algorithm>
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

// The probes' places at a depth, or why they do not fit.
static std::string probe_spans(const Fixture& f, int64_t depth, int64_t rows, std::vector<ProbeSpan>* spans,
                               int64_t* questions) {
  int64_t block = 0;  // the probes' questions and answers
  for (const RecallProbe& r : f.recall) block += int64_t(r.ask.size() + r.answer.size());
  // the questions end a sixteenth of the context before the passphrase's question, so that the text the scored rows
  // follow is the fixture's text, as without probes
  const int64_t a = int64_t(f.ask.size()), q = (depth - a) - (depth - a) / 16 - block;
  std::vector<std::pair<int64_t, int64_t>> plants;  // [start, end) of every plant
  if (!f.plant.empty()) {
    const int64_t p = int64_t(f.plant.size()), n = int64_t(f.answer.size());
    if (depth / 2 + p > depth - a || n > rows) return "too short for the passphrase";
    spans->push_back({0.5, depth / 2, depth, n});
    plants.push_back({depth / 2, depth / 2 + p});
  }
  int64_t next = q;  // where the next question starts
  for (const RecallProbe& r : f.recall) {
    const int64_t at = int64_t(std::floor(r.at * double(q)));
    next += int64_t(r.ask.size());
    spans->push_back({r.at, at, next, int64_t(r.answer.size())});
    next += int64_t(r.answer.size());
    plants.push_back({at, at + int64_t(r.plant.size())});
  }
  std::sort(plants.begin(), plants.end());
  for (size_t i = 0; i < plants.size(); i++)
    if (plants[i].first < 0 || plants[i].second > q || (i && plants[i].first < plants[i - 1].second))
      return f.recall.empty() ? "too short for the passphrase" : "too short for the recall probes";
  *questions = q;
  return "";
}

std::string gate_layout_problem(const Fixture& f, int64_t depth, int64_t rows) {
  std::vector<ProbeSpan> spans;
  int64_t q = 0;
  return probe_spans(f, depth, rows, &spans, &q);
}

GateLayout gate_layout(const Fixture& f, const std::vector<int32_t>& text, int64_t depth, int64_t rows) {
  const int64_t need = depth + rows;
  if (int64_t(text.size()) < need)
    throw std::runtime_error("depth " + std::to_string(depth) + " needs " + std::to_string(need) +
                             " tokens; the token file has " + std::to_string(text.size()));
  GateLayout g;
  int64_t q = 0;
  const std::string why = probe_spans(f, depth, rows, &g.probes, &q);
  if (!why.empty()) throw std::runtime_error("depth " + std::to_string(depth) + " is " + why);
  g.ctx.assign(text.begin(), text.begin() + need);
  g.logits_from = f.recall.empty() ? depth - 1 : q;
  auto put = [&g](const std::vector<int32_t>& t, int64_t at) { std::copy(t.begin(), t.end(), g.ctx.begin() + at); };
  if (!f.plant.empty()) {
    put(f.plant, depth / 2);                    // planted at d/2
    put(f.ask, depth - int64_t(f.ask.size()));  // asked, ending at d−1
    put(f.answer, depth);                       // the answer starts at d
  }
  const size_t first = f.plant.empty() ? 0 : 1;
  for (size_t i = 0; i < f.recall.size(); i++) {
    const ProbeSpan& sp = g.probes[first + i];
    put(f.recall[i].plant, sp.plant);
    put(f.recall[i].ask, sp.answer - int64_t(f.recall[i].ask.size()));
    put(f.recall[i].answer, sp.answer);
  }
  return g;
}

std::vector<int32_t> gate_context(const Fixture& f, const std::vector<int32_t>& text, int64_t depth, int64_t rows) {
  return gate_layout(f, text, depth, rows).ctx;
}

// ---- one depth -------------------------------------------------------------------------------------

std::vector<DepthResult> gate_depth(const Fixture& f, const std::vector<int32_t>& text, int64_t depth, int64_t rows,
                                    const std::vector<GateSide>& sides, const std::vector<GatePair>& pairs,
                                    int64_t vocab, const GateOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const GateLayout lay = gate_layout(f, text, depth, rows);
  const std::vector<int32_t>& ctx = lay.ctx;
  // rows predict tokens depth … depth+rows−1: the logits at positions depth−1 … depth+rows−2
  const int64_t first = depth - 1, capacity = depth - 1 + rows, from = lay.logits_from;
  std::vector<std::unique_ptr<SequenceRunner>> run;
  for (const GateSide& sd : sides) run.push_back((*sd.make)(sd.fmt, capacity));

  // the probe whose answer holds the token at position t (from < t <= capacity), or −1
  std::vector<int> answer_of(size_t(capacity - from + 1), -1);
  for (size_t k = 0; k < lay.probes.size(); k++)
    for (int64_t t = lay.probes[k].answer; t < lay.probes[k].answer + lay.probes[k].length; t++)
      answer_of[size_t(t - from)] = int(k);
  // recalled[s][k]: side s's top token was the answer's at every token of probe k so far
  std::vector<std::vector<char>> recalled(sides.size(), std::vector<char>(lay.probes.size(), 1));
  const auto check_recall = [&](size_t s, int64_t t, int32_t top) {  // side s's top token at position t
    const int k = answer_of[size_t(t + 1 - from)];
    if (k >= 0 && top != ctx[size_t(t + 1)]) recalled[s][size_t(k)] = 0;
  };

  // prefill [0, from) in pieces, without logits, each side fed once
  const int64_t piece = 4096, total = int64_t(sides.size()) * capacity;
  int64_t done = 0;
  const auto fed = [&](int64_t n) {
    done += n;
    if (opt.progress) opt.progress(depth, done, total);
  };
  fed(0);
  for (int64_t p = 0; p < from; p += piece) {
    std::vector<int32_t> part(ctx.begin() + p, ctx.begin() + std::min(from, p + piece));
    for (auto& r : run) {
      r->feed(part, nullptr);
      fed(int64_t(part.size()));
    }
  }
  // the probes' questions [from, depth−1), with logits: only their answers are read
  std::vector<std::vector<float>> logits(sides.size());
  for (int64_t p = from; p < first; p += opt.chunk) {
    const int64_t n = std::min(opt.chunk, first - p);
    std::vector<int32_t> part(ctx.begin() + p, ctx.begin() + p + n);
    for (size_t s = 0; s < sides.size(); s++) {
      run[s]->feed(part, &logits[s]);
      fed(n);
      for (int64_t i = 0; i < n; i++) check_recall(s, p + i, argmax(logits[s].data() + size_t(i * vocab), vocab));
    }
  }

  struct Tally {  // one pair's running scores
    StreamingSummary kl;
    int64_t agree = 0;
    double nll_a = 0, nll_b = 0;
    std::vector<TopDiff> diffs;
  };
  std::vector<Tally> tally(pairs.size());
  std::vector<std::vector<double>> lp(sides.size());
  std::vector<int32_t> top(sides.size());
  for (int64_t c = 0; c < rows; c += opt.chunk) {
    const int64_t n = std::min(opt.chunk, rows - c);
    std::vector<int32_t> part(ctx.begin() + first + c, ctx.begin() + first + c + n);
    for (size_t s = 0; s < sides.size(); s++) {
      run[s]->feed(part, &logits[s]);
      fed(n);
    }
    for (int64_t i = 0; i < n; i++) {
      const int64_t row = c + i;
      for (size_t s = 0; s < sides.size(); s++) {
        const float* l = logits[s].data() + size_t(i * vocab);
        log_softmax(l, vocab, lp[s]);
        top[s] = argmax(l, vocab);
        check_recall(s, first + row, top[s]);
      }
      const int32_t next = ctx[size_t(depth + row)];
      for (size_t k = 0; k < pairs.size(); k++) {
        const std::vector<double>&la = lp[size_t(pairs[k].a)], &lb = lp[size_t(pairs[k].b)];
        const int32_t ta = top[size_t(pairs[k].a)], tb = top[size_t(pairs[k].b)];
        Tally& t = tally[k];
        double kl = 0;
        for (int64_t v = 0; v < vocab; v++) kl += std::exp(la[size_t(v)]) * (la[size_t(v)] - lb[size_t(v)]);
        t.kl.add(std::max(kl, 0.0));
        if (ta == tb)
          t.agree++;
        else
          t.diffs.push_back({row, ta, tb, la[size_t(ta)] - la[size_t(tb)], lb[size_t(tb)] - lb[size_t(ta)]});
        t.nll_a -= la[size_t(next)];
        t.nll_b -= lb[size_t(next)];
      }
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<DepthResult> out;
  for (size_t k = 0; k < pairs.size(); k++) {
    const Tally& t = tally[k];
    DepthResult r;
    r.depth = depth;
    r.rows = rows;
    r.format = pairs[k].label;
    r.kl_mean = t.kl.mean();
    r.kl_max = t.kl.max();
    r.p999 = t.kl.quantile(0.999);
    r.p99 = t.kl.quantile(0.99);
    r.p90 = t.kl.quantile(0.90);
    r.p50 = t.kl.quantile(0.5);
    r.histogram = t.kl.bins();
    r.diffs = t.diffs;
    r.top1_agree = double(t.agree) / double(rows);
    r.ppl_ref = std::exp(t.nll_a / double(rows));
    r.ppl_fmt = std::exp(t.nll_b / double(rows));
    const std::vector<char>&ra = recalled[size_t(pairs[k].a)], &rb = recalled[size_t(pairs[k].b)];
    for (size_t i = 0; i < lay.probes.size(); i++) {
      const ProbeSpan& sp = lay.probes[i];
      r.probes.push_back({sp.at, sp.plant, sp.answer, ra[i] != 0, rb[i] != 0});
      r.recalled_ref += ra[i];
      r.recalled_fmt += rb[i];
    }
    if (!f.plant.empty()) {  // the passphrase is the first probe
      r.recall_ref = ra[0];
      r.recall_fmt = rb[0];
    }
    r.recall_pass = r.recalled_fmt >= r.recalled_ref;
    r.pass = r.kl_mean <= f.bar_kl_mean && r.kl_max <= f.bar_kl_max && r.recall_pass;
    r.seconds = seconds;
    out.push_back(std::move(r));
  }
  return out;
}

// ---- the CPU's time estimate ----------------------------------------------------------------------

double oracle_gate_seconds(const Config& c, int64_t depth, int64_t rows, int sides, int threads) {
  // Rates fitted to the oracle's gate on the trained fixture (6.2M parameters, 2 attention layers of 4 heads at
  // head_dim 256, 4 sides) on 2 cores: 15 s at 1K and 238 s at 8K, i.e. 2.2 ms a token before its attention and
  // 1.15 us for each position it attends to. Weight products and attention scale with their operation counts.
  constexpr double kWeightFlopsPerS = 5.6e9, kAttnFlopsPerS = 7.1e9, kThreadsMeasured = 2;
  const double E = double(c.hidden_size), I = double(c.intermediate_size), V = double(c.vocab_size);
  const double full = double(c.n_full_layers()), linear = double(c.num_hidden_layers) - full;
  const double H = double(c.num_attention_heads), KV = double(c.num_key_value_heads), D = double(c.head_dim);
  const double dk = double(c.linear_key_head_dim), dv = double(c.linear_value_head_dim);
  const double nk = double(c.linear_num_key_heads), nv = double(c.linear_num_value_heads);
  const double attn_proj = E * (2 * H * D + 2 * KV * D) + H * D * E;
  const double dn_proj = E * (2 * nk * dk + 2 * nv * dv + 2 * nv) + nv * dv * E + nv * dk * dv * 4;
  const double weight_flops = 2 * (full * attn_proj + linear * dn_proj + c.num_hidden_layers * 3 * E * I + V * E);
  const double attn_flops_per_position = full * H * D * 4;
  const double n = double(depth - 1 + rows);  // tokens fed a side; token t attends to t + 1 positions
  const double scale = kThreadsMeasured / double(std::max(1, threads));
  return double(sides) * scale *
         (n * weight_flops / kWeightFlopsPerS + n * (n + 1) / 2 * attn_flops_per_position / kAttnFlopsPerS);
}

// ---- the whole gate --------------------------------------------------------------------------------

GateReport run_gate(const Fixture& f, const Model& m, const std::vector<int32_t>& text, const RunnerFactory& runners,
                    const std::string& backend, const GateOptions& opt) {
  GateReport g;
  g.fixture = f.name;
  g.model = f.model_field.empty() ? m.source : f.model_field;
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
  auto skip = [&](int64_t d) -> std::string {
    for (const auto& [left, why] : opt.left_out)
      if (left == d) return why;
    if (d < 2) return "a depth of at least 2 is needed";
    if (d > max_pos) return "beyond max_position_embeddings " + std::to_string(max_pos);
    d = fitted(d);
    if (d < 2) return "max_position_embeddings " + std::to_string(max_pos) + " leaves no room for the rows";
    if (int64_t(text.size()) < d + rows) return "the token file holds " + std::to_string(text.size()) + " tokens";
    return gate_layout_problem(f, d, rows);
  };
  g.pass = true;
  // Each depth feeds every side once: the bf16 cache (the reference of every format and the candidate of the
  // noise floor), each format's cache, and the float64-accumulating bf16 cache of the floor.
  std::vector<std::vector<DepthResult>> by_format(formats.size());
  RunnerFactory wide = opt.noise_floor ? oracle_runners(m, true) : RunnerFactory();
  for (int64_t d : depths) {
    const std::string why = skip(d);
    if (!why.empty()) {
      for (size_t i = 0; i < formats.size(); i++) {
        DepthResult r;
        r.depth = d;
        r.format = formats[i];
        r.skipped = true;
        r.skip_reason = why;
        by_format[i].push_back(r);
      }
      continue;
    }
    std::vector<GateSide> sides = {{&runners, KvFormat::bf16()}};
    std::vector<GatePair> pairs;
    for (const std::string& fmt : formats) {
      pairs.push_back({0, int(sides.size()), fmt});
      sides.push_back({&runners, KvFormat::parse(fmt)});
    }
    if (opt.noise_floor) {
      pairs.push_back({int(sides.size()), 0, "noise floor"});
      sides.push_back({&wide, KvFormat::bf16()});
    }
    std::vector<DepthResult> rs = gate_depth(f, text, fitted(d), rows, sides, pairs, V, opt);
    for (auto& r : rs) r.requested_depth = d;
    for (size_t i = 0; i < formats.size(); i++) {
      g.pass = g.pass && rs[i].pass;
      by_format[i].push_back(std::move(rs[i]));
    }
    if (opt.noise_floor) g.floor.push_back(std::move(rs.back()));
  }
  bool scored = false;
  for (auto& v : by_format)  // results format by format, each in depth order
    for (auto& r : v) {
      scored = scored || !r.skipped;
      g.results.push_back(std::move(r));
    }
  g.pass = g.pass && scored;  // a gate that scored nothing has no evidence to pass on
  return g;
}

}  // namespace hkv
