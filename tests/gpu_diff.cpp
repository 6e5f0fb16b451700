// The differential table as GPU tests: every case of engine_diff_cases() (compare/diff_engine.cpp, the table that
// `hkv diff` runs), engine against oracle, one line a case as hkv diff prints it, each a CHECK whose message names the
// op, the params and the failure. Three test cases split the table, so that doctest's filters (and
// cuda/run_gpu_suite.sh sanitize's tool:suite:CASE runs) can pick a part: the attention cases, the other ops, the whole
// model.
//
// HKV_DIFF_FILTER=REGEX keeps the cases whose name matches, as `hkv diff --filter` (e.g. 'shape=(slim|v-staged-x2)\)'
// for two attention shapes under racecheck); HKV_DIFF_LONG=1 adds the long-context cases, as `hkv diff --long`.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "compare/diff.h"

using namespace hkv;

namespace {

const std::vector<DiffCase>& table() {
  static const std::vector<DiffCase> cases = engine_diff_cases();
  return cases;
}

// Runs the table's cases that HKV_DIFF_FILTER and HKV_DIFF_LONG select and `part` keeps.
void run_table(const std::function<bool(const DiffCase&)>& part) {
  DiffOptions opt;
  const char* filter = std::getenv("HKV_DIFF_FILTER");
  const char* long_ctx = std::getenv("HKV_DIFF_LONG");
  opt.filter = filter ? filter : "";
  opt.long_context = long_ctx && std::strcmp(long_ctx, "0") != 0 && *long_ctx;
  int passed = 0, failed = 0, skipped = 0;
  for (const DiffCase* c : select_cases(table(), opt)) {
    if (!part(*c)) continue;
    const CaseResult r = run_case(*c);
    const std::string msg = c->name() + ": " + r.detail;
    CHECK_MESSAGE(r.status != CaseResult::Fail, msg);
    (r.status == CaseResult::Ok ? passed : r.status == CaseResult::Fail ? failed : skipped)++;
  }
  std::printf("%d passed, %d failed, %d skipped%s%s\n", passed, failed, skipped,
              opt.filter.empty() ? "" : (" (HKV_DIFF_FILTER " + opt.filter + ")").c_str(),
              opt.long_context ? " (with the long cases)" : "");
  std::fflush(stdout);
}

bool is_model(const DiffCase& c) { return c.op == "model" || c.op == "fast_prefill"; }

}  // namespace

TEST_CASE("diff table, attention: over the cache in 512-key chunks, every format, shape and head_dim, as attend()") {
  run_table([](const DiffCase& c) { return c.op == "attention"; });
}

TEST_CASE("diff table, the other ops: matvec, matvec_multi, norms, argmax, kv_pack, deltanet, byte for byte") {
  run_table([](const DiffCase& c) { return c.op != "attention" && !is_model(c); });
}

TEST_CASE("diff table, the whole model: taps, logits and the fast prefill's KL") {
  run_table(is_model);
  release_engine_case_models();  // before gpu_main's device reset
}
