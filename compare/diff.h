// The differential suite (`hkv diff`): the engine against the oracle, case by case, as a table.
//
// Cases are data: an op, a description of its parameters, and a function that runs both sides and compares
// them. Small contexts are exact: outputs are compared by xxh64 digest and, on a mismatch, searched for the
// first divergence (layer, tensor, token, index, both values, how many elements differ). One line a case,
// `OP(params): OK` or `OP(params): FAIL (reason)`, then `N passed, M failed`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "reference/config.h"
#include "reference/kvformat.h"
#include "reference/model.h"

namespace hkv {

struct CaseResult {
  enum Status { Ok, Fail, Skip } status = Ok;
  std::string detail;
};

struct DiffCase {
  std::string op;             // "matvec", "rmsnorm", "kv_pack", "attention", "deltanet", "model", "self-test", ...
  std::string params;         // "type=bf16,rows=37,cols=320,batch=3"
  bool long_context = false;  // run only with --long
  std::function<CaseResult()> run;
  std::string name() const { return op + "(" + params + ")"; }
};

// Every intermediate tensor a forward pass reports through ForwardOptions::tap, plus the logits.
struct Trace {
  struct Tap {
    int layer;
    std::string name;
    int64_t pos;  // absolute token position
    std::vector<float> data;
  };
  std::vector<Tap> taps;
  std::vector<float> logits;  // [tokens][vocab]
};

// Where two traces first part, or "" when they are equal byte for byte.
std::string first_divergence(const Trace& a, const Trace& b);

// One backend's forward call: tokens in, logits out, taps reported through opt.tap.
using ForwardFn = std::function<std::vector<float>(const std::vector<int32_t>&, const ForwardOptions&)>;

// The trace of any backend over tokens: a prefill of all but the last `decode` tokens, then one token at a
// time; `after_prefill` (may be empty) runs between the two. With taps = false only the logits are kept.
Trace record_trace(const ForwardFn& forward_fn, const std::vector<int32_t>& tokens, int64_t decode,
                   const std::function<void()>& after_prefill, bool taps);

// The oracle's trace over tokens: a prefill of all but the last `decode` tokens, then one token at a time.
// When corrupt_byte >= 0, that byte of the first full-attention layer's K cache is flipped after the
// prefill (the self-test that proves the comparison can fail).
// With taps = false only the logits are kept (long contexts).
Trace oracle_trace(const Model& m, const KvFormat& f, const std::vector<int32_t>& tokens, int64_t decode,
                   int64_t corrupt_byte = -1, bool taps = true);

// The cases that run on this machine: the CPU self-tests always; the engine cases when hkv has the engine
// and a GPU is present (otherwise they are listed as skipped).
std::vector<DiffCase> diff_cases(bool with_engine);

// The engine's cases (compare/diff_engine.cpp): every comparison of the engine with the oracle, ops (matvec, norms,
// argmax, kv_pack, attention, DeltaNet, ...) and the whole model; empty without the engine. The GPU tests run them too
// (tests/gpu_diff.cpp).
std::vector<DiffCase> engine_diff_cases();
// Frees the models and engines that the model cases keep from one case to the next (before a device reset).
void release_engine_case_models();

struct DiffOptions {
  std::string op;      // run only this op ("" = all)
  std::string filter;  // ECMAScript regex matched against the case name ("" = all)
  bool long_context = false;
  bool list_only = false;
};

// The cases of the table that the options select (--op, --filter, --long), in order. std::regex_error for a bad filter.
std::vector<const DiffCase*> select_cases(const std::vector<DiffCase>& cases, const DiffOptions& opt);

// Runs one case and prints its line, `  OP(params): OK|FAIL|SKIP (detail) (seconds)`; an exception is a failure.
CaseResult run_case(const DiffCase& c);

// Runs the table, prints one line a case and the summary; returns the number of failures.
int run_diff(const std::vector<DiffCase>& cases, const DiffOptions& opt);

}  // namespace hkv
