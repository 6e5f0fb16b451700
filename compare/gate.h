// The fidelity gate (design.md): what a cache format costs against the bf16 cache, teacher-forced.
//
// At each depth d: the fixture's text, a passphrase planted at d/2 and asked just before d, so that the
// answer is the next tokens at d, and the fixture's further recall probes planted across the context and asked
// just before the passphrase (gate_layout). Both caches consume the same tokens (teacher forcing); the rows
// predicting tokens d … d+rows−1 are scored: KL(bf16 ‖ format), top-token agreement, perplexity; and every probe's
// recall. Logits are produced and consumed in chunks: memory does not grow with the rows.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compare/fixture.h"
#include "compare/stats.h"
#include "reference/config.h"
#include "reference/kvformat.h"
#include "reference/model.h"

namespace hkv {

// One sequence on some backend (the oracle, the engine): feeds tokens in order; when `logits` is not
// null it receives [tokens][vocab] for the fed tokens.
class SequenceRunner {
 public:
  virtual ~SequenceRunner() = default;
  virtual void feed(const std::vector<int32_t>& tokens, std::vector<float>* logits) = 0;
};
using RunnerFactory = std::function<std::unique_ptr<SequenceRunner>(const KvFormat&, int64_t capacity)>;

// The oracle as a runner. `wide` selects float64 accumulation (the noise floor).
RunnerFactory oracle_runners(const Model& m, bool wide = false);

// The engine as a runner (compare/engine_runner.cpp). Throws when hkv was built without the CUDA engine
// or no GPU is present. `prefill` is each feed's ForwardOptions::prefill (the gate's 4096-token prefill
// pieces take the fast path under Fast or Auto; its scored rows are fed 256 at a time, exact under Auto).
RunnerFactory engine_runners(const Model& m, Prefill prefill = Prefill::Exact);

struct TopDiff {
  int64_t row;               // scored row index (0 = the row predicting token d)
  int32_t ref_top, fmt_top;  // each side's top token
  double ref_margin;         // log p_ref(ref_top) − log p_ref(fmt_top)
  double fmt_margin;         // log p_fmt(fmt_top) − log p_fmt(ref_top)
};

// A recall probe at one depth: where it sits and whether each side recalled it (every answer token the top token,
// teacher-forced).
struct ProbeResult {
  double at = 0;       // the plant's share of the context before the questions (0.5: the passphrase at d/2)
  int64_t plant = 0;   // position of the plant's first token
  int64_t answer = 0;  // position of the answer's first token
  bool ref = false, fmt = false;
};

struct DepthResult {
  int64_t depth = 0;            // the context depth d that ran
  int64_t requested_depth = 0;  // the fixture's depth: d, or above d where d's rows had to fit the window
  std::string format;           // compared format ("bf16-f64" for the noise floor)
  bool skipped = false;
  std::string skip_reason;
  int64_t rows = 0;
  double kl_mean = 0, kl_max = 0, p999 = 0, p99 = 0, p90 = 0, p50 = 0;
  double top1_agree = 0;
  std::vector<TopDiff> diffs;
  double ppl_ref = 0, ppl_fmt = 0;
  int recall_ref = -1, recall_fmt = -1;  // 1 if every answer token is the top token (teacher-forced), -1: no passphrase
  // Every recall probe, the passphrase first, and how many each side recalled. The recall bar: the format recalls at
  // least as many as bf16 at this depth.
  std::vector<ProbeResult> probes;
  int recalled_ref = 0, recalled_fmt = 0;
  bool recall_pass = true;
  bool pass = false;  // the KL bars and the recall bar
  double seconds = 0;
  std::vector<std::pair<double, int64_t>> histogram;  // of the KL values
};

struct GateReport {
  std::string fixture, model, backend, date;
  std::string commit;   // the hkv commit that ran it (git describe)
  std::string machine;  // the card, or the CPU and its threads
  double bar_kl_mean = 0.01, bar_kl_max = 0.1;
  std::vector<DepthResult> results;  // format × depth
  std::vector<DepthResult> floor;    // the fp32 arithmetic's own noise: bf16 cache, fp32 vs float64 accumulation
  bool pass = false;
};

struct GateOptions {
  std::vector<int64_t> depths;       // empty: the fixture's
  std::vector<std::string> formats;  // empty: the fixture's
  int64_t rows = 0;                  // 0: the fixture's
  int64_t chunk = 64;                // rows of logits held at once
  bool noise_floor = true;
  // Depths listed as skipped with their reason and not run (the CPU gate's depths past its time budget).
  std::vector<std::pair<int64_t, std::string>> left_out;
  // Called after each side has been fed a piece of a depth's context: `done` of `total` tokens fed, summed over
  // the sides (every side is fed the whole context).
  std::function<void(int64_t depth, int64_t done, int64_t total)> progress;
};

// The oracle's estimated seconds for one gate depth on this machine with `threads` OpenMP threads: `sides`
// sequences (bf16, each format, the noise floor) each fed depth − 1 + rows tokens. Each token costs its weight
// products and its attention over the positions before it, at rates measured on a 2-core machine of the kind
// CI runs on (the trained fixture at 1K and 8K), scaled by the threads.
double oracle_gate_seconds(const Config& c, int64_t depth, int64_t rows, int sides, int threads);

// The context for depth d, depth + rows tokens of the text with the recall probes written over it:
//   [text … plant_1 … passphrase plant at d/2 … plant_k … | ask_1 answer_1 … ask_k answer_k | text … | ask] answer …
// Probe i's plant starts at floor(at_i · q), q the start of the block of the probes' questions, which ends a
// sixteenth of the context before the passphrase's question (at e − e/16, e = d − |ask|), so that the text the scored
// rows follow is the fixture's own; the passphrase's answer starts at d, the first scored row. Logits are taken from
// q on, so that every answer is read; the rows scored for KL stay d … d+rows−1.
struct ProbeSpan {
  double at;
  int64_t plant, answer, length;  // positions of the plant and the answer, and the answer's tokens
};
struct GateLayout {
  std::vector<int32_t> ctx;
  std::vector<ProbeSpan> probes;  // the passphrase first (when the fixture has one), then the fixture's recall list
  int64_t logits_from = 0;        // q with recall probes, else d − 1
};
// Why the probes do not fit at this depth ("" when they do): too short for the passphrase, or for the recall probes
// (plants overlapping each other or the questions).
std::string gate_layout_problem(const Fixture& f, int64_t depth, int64_t rows);
// Throws if the text is too short or the probes do not fit.
GateLayout gate_layout(const Fixture& f, const std::vector<int32_t>& text, int64_t depth, int64_t rows);
std::vector<int32_t> gate_context(const Fixture& f, const std::vector<int32_t>& text, int64_t depth, int64_t rows);

// One side of a depth's comparisons: a runner made by `make` with the cache format `fmt`.
struct GateSide {
  const RunnerFactory* make;
  KvFormat fmt;
};
// A comparison of two sides (indices into the sides), scored as KL(a ‖ b); label names the result.
struct GatePair {
  int a, b;
  std::string label;
};
// The comparisons of one depth on its context: every side is fed the same tokens once, each pair is scored
// from their logits; a result per pair, in order, each with the depth's wall time.
std::vector<DepthResult> gate_depth(const Fixture& f, const std::vector<int32_t>& text, int64_t depth, int64_t rows,
                                    const std::vector<GateSide>& sides, const std::vector<GatePair>& pairs,
                                    int64_t vocab, const GateOptions& opt);

GateReport run_gate(const Fixture& f, const Model& m, const std::vector<int32_t>& text, const RunnerFactory& runners,
                    const std::string& backend, const GateOptions& opt);

}  // namespace hkv
