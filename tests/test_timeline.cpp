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
  // two tokens: e (0–10), a (12–30), b (25–40: starts 5 before a ends), e (100–110), a (150–170), b (171–200);
  // and a kernel before the first e, left out
  const std::vector<KernelSpan> spans = {{"b", 171, 200}, {"x", 0, 5},     {"e", 10, 20},  {"a", 22, 40},
                                         {"b", 35, 50},   {"e", 100, 110}, {"a", 150, 170}};
  const TokenTimeline t = summarize_tokens(spans, "e");
  CHECK(t.tokens == 2);
  // spans: 50 − 10 = 40 and 200 − 100 = 100; busy: 10 + 28 = 38 and 10 + 20 + 29 = 59; durations 10 + 18 + 15 = 43
  // and 10 + 20 + 29 = 59 (ns, a token on average, in ms)
  CHECK(t.span_ms == doctest::Approx(70e-6));
  CHECK(t.busy_ms == doctest::Approx(48.5e-6));
  CHECK(t.sum_ms == doctest::Approx(51e-6));
  REQUIRE(t.rows.size() == 3);
  // by busy time a token: b (15 + 29) / 2 = 22, a (18 + 20) / 2 = 19, e 10 (µs: ns / 1000)
  CHECK(t.rows[0].kernel == "b");
  CHECK(t.rows[0].busy_us == doctest::Approx(22e-3));
  CHECK(t.rows[0].launches == doctest::Approx(1.0));
  CHECK(t.rows[0].mean_us == doctest::Approx(22e-3));
  CHECK(t.rows[0].gap_us == doctest::Approx((-5.0 + 1.0) / 2 * 1e-3));  // 35 − 40 and 171 − 170
  CHECK(t.rows[1].kernel == "a");
  CHECK(t.rows[1].gap_us == doctest::Approx((2.0 + 40.0) / 2 * 1e-3));  // 22 − 20 and 150 − 110
  CHECK(t.rows[2].kernel == "e");
  CHECK(t.rows[2].gap_us == 0.0);  // the first kernel of each token has no gap before it
  CHECK_THROWS_AS(summarize_tokens(spans, "missing"), std::runtime_error);
}
