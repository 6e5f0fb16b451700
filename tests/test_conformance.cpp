// The oracle against transformers' Qwen3_5ForCausalLM (fp32, CPU) on the fixtures of fixtures/hf/
// (made by fixtures/hf/make_fixtures.py; see its README). Each fixture varies head counts, GQA and
// DeltaNet head ratios, head_dim, weight dtype and checkpoint layout.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reference/model.h"
#include "reference/synthetic.h"
#include "reference/tokens.h"

using namespace hkv;

namespace {

struct Compared {
  double max_abs = 0;
  int argmax_mismatch = 0;        // rows whose argmax differs
  int argmax_mismatch_clear = 0;  // ... among rows whose reference top-2 margin exceeds 2× the row's max |Δ|
};

// model: a checkpoint folder; ref: the folder with tokens.json and logits.f32 (the same folder for fixtures/hf)
Compared run_fixture(const std::string& dir, const char* cache, const std::string& ref_dir = "") {
  const std::string ref = ref_dir.empty() ? dir : ref_dir;
  Model m = load_any_model(dir);
  std::vector<int32_t> toks = read_tokens(ref + "/tokens.json", m.config.vocab_size);
  std::string ref_bytes = read_file(ref + "/logits.f32");
  const size_t V = size_t(m.config.vocab_size);
  REQUIRE(ref_bytes.size() == toks.size() * V * 4);
  const float* want = reinterpret_cast<const float*>(ref_bytes.data());
  SequenceState s = new_sequence(m.config, KvFormat::parse(cache), int64_t(toks.size()));
  std::vector<float> got = forward(m, s, toks);
  Compared c;
  for (size_t r = 0; r < toks.size(); r++) {
    const float* a = want + r * V;
    const float* b = got.data() + r * V;
    double row_max = 0;
    for (size_t i = 0; i < V; i++) row_max = std::max(row_max, std::fabs(double(a[i]) - b[i]));
    c.max_abs = std::max(c.max_abs, row_max);
    int32_t ia = argmax(a, int64_t(V)), ib = argmax(b, int64_t(V));
    if (ia != ib) {
      c.argmax_mismatch++;
      std::vector<float> sorted(a, a + V);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      if (double(sorted[0]) - sorted[1] > 2 * row_max) c.argmax_mismatch_clear++;
    }
  }
  return c;
}

std::vector<std::string> fixtures() {
  nlohmann::json man = nlohmann::json::parse(read_file(std::string(HKV_SOURCE_DIR) + "/fixtures/hf/manifest.json"));
  std::vector<std::string> out;
  for (auto& f : man["fixtures"])
    out.push_back(std::string(HKV_SOURCE_DIR) + "/fixtures/hf/" + f["name"].get<std::string>());
  return out;
}

}  // namespace

TEST_CASE("the oracle matches transformers with an unrounded (f32) cache") {
  // Tolerance 1e-4 absolute on logits of std ≈ 1: both sides compute in fp32, in different orders
  // (transformers' chunked DeltaNet, its matmul blocking); measured worst 2.0e-5 over the 5 fixtures.
  // With nothing rounded to a storage format, every row must pick the same top token.
  auto list = fixtures();
  REQUIRE(list.size() >= 5);
  for (const std::string& dir : list) {
    CAPTURE(dir);
    Compared c = run_fixture(dir, "f32");
    CHECK(c.max_abs <= 1e-4);
    CHECK(c.argmax_mismatch == 0);
  }
}

TEST_CASE("the oracle matches transformers with the bf16 cache") {
  // Tolerance 2e-2 absolute: the bf16 cache rounds every K and V element to 8 significant bits (relative
  // error up to 2^-9), which transformers' fp32 cache does not; measured worst 8.8e-3. The top token must
  // agree on every row whose reference margin between its two best tokens exceeds twice that row's
  // largest difference (2 of 1203 rows fall below: margins 1e-4 and 5e-4).
  for (const std::string& dir : fixtures()) {
    CAPTURE(dir);
    Compared c = run_fixture(dir, "bf16");
    CHECK(c.max_abs <= 2e-2);
    CHECK(c.argmax_mismatch_clear == 0);
    CHECK(c.argmax_mismatch <= 1);
  }
}

TEST_CASE("the trained model (fixtures/trained) matches transformers") {
  // 512 held-out tokens; logits of std 3.7, so the bounds are scaled from the fixtures' above: f32 cache
  // 1e-4 (measured 1.3e-5), bf16 cache 5e-2 (measured 1.8e-2); the top token agrees on every row.
  const std::string dir = std::string(HKV_SOURCE_DIR) + "/fixtures/trained";
  Compared f = run_fixture(dir + "/hf", "f32", dir + "/ref");
  CHECK(f.max_abs <= 1e-4);
  CHECK(f.argmax_mismatch == 0);
  Compared b = run_fixture(dir + "/hf", "bf16", dir + "/ref");
  CHECK(b.max_abs <= 5e-2);
  CHECK(b.argmax_mismatch == 0);
}
