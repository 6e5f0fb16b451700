// hkv bench --timeline: the kernel names shortened, and the spans summed into tokens (the span, the union of
// busy time, the durations, the gap before each kernel), on spans whose answers are worked out by hand.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "compare/timeline.h"

using namespace hkv;

TEST_CASE("timeline: kernel names demangled, namespaces, casts and parameters dropped") {
  CHECK(short_kernel_name("_ZN3hkv4cuda12_GLOBAL__N_117attn_chunk_kernelILNS_6KvKindE2ELi6ELi256ELi1ELi1ELi2EEEvNS0_"
                          "8AttnArgsEiiif") == "attn_chunk_kernel<2, 6, 256, 1, 1, 2>");
  CHECK(short_kernel_name("_ZN3hkv4cuda12_GLOBAL__N_112embed_kernelEPKfPKiPfl") == "embed_kernel");
  CHECK(short_kernel_name("not_mangled") == "not_mangled");
}

TEST_CASE("timeline: spans grouped into tokens at the first kernel's starts") {
  // two tokens: e (10–20), a (22–40), c (24–30: inside a), b (35–50: starts 5 before a ends), then e (100–110),
  // a (150–170), b (171–200); and a kernel before the first e, left out
  const std::vector<KernelSpan> spans = {{"b", 171, 200}, {"x", 0, 5},   {"e", 10, 20},   {"a", 22, 40},
                                         {"c", 24, 30},   {"b", 35, 50}, {"e", 100, 110}, {"a", 150, 170}};
  const TokenTimeline t = summarize_tokens(spans, "e");
  CHECK(t.tokens == 2);
  // spans: 50 − 10 = 40 and 200 − 100 = 100; busy: 10 + 28 = 38 and 10 + 20 + 29 = 59; durations 10 + 18 + 6 + 15
  // = 49 and 10 + 20 + 29 = 59 (ns, a token on average, in ms)
  CHECK(t.span_ms == doctest::Approx(70e-6));
  CHECK(t.busy_ms == doctest::Approx(48.5e-6));
  CHECK(t.sum_ms == doctest::Approx(54e-6));
  REQUIRE(t.rows.size() == 4);
  // by busy time a token: b (15 + 29) / 2 = 22, a (18 + 20) / 2 = 19, e 10, c 3 (µs: ns / 1000)
  CHECK(t.rows[0].kernel == "b");
  CHECK(t.rows[0].busy_us == doctest::Approx(22e-3));
  CHECK(t.rows[0].launches == doctest::Approx(1.0));
  CHECK(t.rows[0].mean_us == doctest::Approx(22e-3));
  // 35 − 40 (the latest end before b is a's, not c's) and 171 − 170
  CHECK(t.rows[0].gap_us == doctest::Approx((-5.0 + 1.0) / 2 * 1e-3));
  CHECK(t.rows[1].kernel == "a");
  CHECK(t.rows[1].gap_us == doctest::Approx((2.0 + 40.0) / 2 * 1e-3));  // 22 − 20 and 150 − 110
  CHECK(t.rows[2].kernel == "e");
  CHECK(t.rows[2].gap_us == 0.0);  // the first kernel of each token has no gap before it
  CHECK(t.rows[3].kernel == "c");
  CHECK(t.rows[3].launches == doctest::Approx(0.5));
  CHECK(t.rows[3].gap_us == doctest::Approx(-16e-3));  // 24 − 40
  CHECK_THROWS_AS(summarize_tokens(spans, "missing"), std::runtime_error);
  // the first token left out: the second alone (span 100 ns, its b 29 ns after a gap of 1 ns)
  const TokenTimeline t1 = summarize_tokens(spans, "e", 1);
  CHECK(t1.tokens == 1);
  CHECK(t1.span_ms == doctest::Approx(100e-6));
  REQUIRE(t1.rows.size() == 3);  // (c ran in the first token only)
  CHECK(t1.rows[0].kernel == "b");
  CHECK(t1.rows[0].busy_us == doctest::Approx(29e-3));
  CHECK(t1.rows[0].gap_us == doctest::Approx(1e-3));
  CHECK_THROWS_AS(summarize_tokens(spans, "e", 2), std::runtime_error);  // no token left
}
