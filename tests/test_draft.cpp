// Drafted decoding on the oracle: the same tokens and the same state bytes as plain greedy decoding, in
// every cache format, with drafts both accepted and rejected.
#include <doctest/doctest.h>

#include "compare/draft.h"
#include "reference/model.h"
#include "reference/synthetic.h"

using namespace hkv;

TEST_CASE("prompt lookup drafts what followed the latest earlier match") {
  std::vector<int32_t> h = {1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3};
  CHECK(prompt_lookup_draft(h, 2) == std::vector<int32_t>{7, 8});  // latest match of "1 2 3"
  CHECK(prompt_lookup_draft(h, 10) == std::vector<int32_t>{7, 8, 5, 1, 2, 3});
  CHECK(prompt_lookup_draft({4, 5, 6}, 3).empty());                        // nothing repeats
  CHECK(prompt_lookup_draft({4, 5, 4}, 3) == std::vector<int32_t>{5, 4});  // falls back to a 1-gram
}

TEST_CASE("drafted = plain: tokens and state bytes, every cache format") {
  static Model m = build_synthetic(builtin_spec("tiny"));
  // a repetitive prompt, so that prompt lookup drafts often and greedy output sometimes follows it
  std::vector<int32_t> prompt;
  const char* text = "abc abd abc abd abc ";
  for (int r = 0; r < 3; r++)
    for (const char* p = text; *p; p++) prompt.push_back(int32_t(*p));
  const int n = 40;
  for (const char* fmt : {"bf16", "fp8", "q4h"}) {
    CAPTURE(fmt);
    SequenceState plain = new_sequence(m.config, KvFormat::parse(fmt), int64_t(prompt.size()) + n + 8);
    std::vector<int32_t> want = generate_greedy(m, plain, prompt, n);
    SequenceState drafted = new_sequence(m.config, KvFormat::parse(fmt), int64_t(prompt.size()) + n + 8);
    OracleDraftTarget target(m, drafted);
    DraftStats st;
    std::vector<int32_t> got = generate_drafted(target, prompt, n, 4, &st);
    CHECK(got == want);
    CHECK(st.drafted > 0);
    CHECK(st.accepted > 0);           // some drafts were right...
    CHECK(st.accepted < st.drafted);  // ...and some were rolled back
    // bring both to the same position (plain decoding does not feed its last token), then compare bytes
    if (plain.pos < int64_t(prompt.size()) + n) forward(m, plain, {want.back()});
    if (drafted.pos < int64_t(prompt.size()) + n) forward(m, drafted, {got.back()});
    REQUIRE(plain.pos == drafted.pos);
    CHECK(plain.S == drafted.S);
    CHECK(plain.conv == drafted.conv);
    const size_t used = size_t(plain.pos) * size_t(m.config.num_key_value_heads) * plain.row_bytes;
    for (size_t l = 0; l < plain.k_cache.size(); l++) {
      CHECK(std::equal(plain.k_cache[l].begin(), plain.k_cache[l].begin() + long(used), drafted.k_cache[l].begin()));
      CHECK(std::equal(plain.v_cache[l].begin(), plain.v_cache[l].begin() + long(used), drafted.v_cache[l].begin()));
    }
  }
}
