// The differential layer on the CPU: statistics against direct computations, fixtures and their hashes,
// the gate's context, the report schema, and a gate that must fail.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "compare/diff.h"
#include "compare/fixture.h"
#include "compare/gate.h"
#include "compare/report.h"
#include "compare/stats.h"
#include "reference/synthetic.h"
#include "reference/tokens.h"

using namespace hkv;
namespace fs = std::filesystem;

TEST_CASE("KL divergence of known distributions") {
  // P = (1/2, 1/4, 1/4), Q = (1/4, 1/4, 1/2): KL = 1/2 ln 2 + 0 + 1/4 ln(1/2) = 1/4 ln 2
  std::vector<float> p = {std::log(0.5f), std::log(0.25f), std::log(0.25f)};
  std::vector<float> q = {std::log(0.25f) + 3.0f, std::log(0.25f) + 3.0f, std::log(0.5f) + 3.0f};  // shifted logits
  CHECK(kl_divergence(p.data(), q.data(), 3) == doctest::Approx(0.25 * std::log(2.0)).epsilon(1e-6));
  CHECK(kl_divergence(p.data(), p.data(), 3) == 0.0);
  // two Bernoulli-like rows over a large vocabulary: KL is invariant to adding a constant to the logits
  std::vector<float> a(1000, 0.0f), b(1000, 5.0f);
  a[7] = 4.0f;
  b[7] = 9.0f;
  CHECK(kl_divergence(a.data(), b.data(), 1000) == doctest::Approx(0.0).epsilon(1e-12));
  std::vector<double> lp;
  log_softmax(a.data(), 1000, lp);
  double total = 0;
  for (double v : lp) total += std::exp(v);
  CHECK(total == doctest::Approx(1.0).epsilon(1e-12));
}

TEST_CASE("streaming percentiles against exact order statistics") {
  // 10,000 values spread over six decades; the histogram has 64 bins a decade, so a quantile is within a
  // bin's width (a factor of 10^(1/64) = 1.037) of the exact order statistic.
  StreamingSummary s;
  std::vector<double> v;
  for (int i = 0; i < 10000; i++) {
    double x = std::pow(10.0, -8.0 + 6.0 * double(synth_bits(1, 2, uint64_t(i)) % 1000003) / 1000003.0);
    v.push_back(x);
    s.add(x);
  }
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  CHECK(s.count() == 10000);
  CHECK(s.mean() == doctest::Approx(sum / 10000).epsilon(1e-12));
  CHECK(s.max() == v.back());
  for (double p : {0.5, 0.9, 0.99, 0.999}) {
    double exact = v[size_t(std::ceil(p * 10000)) - 1];
    CAPTURE(p);
    CHECK(s.quantile(p) <= exact * 1.04);
    CHECK(s.quantile(p) >= exact / 1.04);
  }
  CHECK(s.quantile(1.0) == v.back());
  StreamingSummary zeros;
  zeros.add(0.0);
  zeros.add(0.0);
  CHECK(zeros.quantile(0.5) == 0.0);
}

static std::string tiny_fixture_json(const std::string& tokens, const std::string& xxh) {
  return R"({"name": "t", "model": "builtin:tiny", "tokens": {"path": ")" + tokens + R"(", "xxh64": ")" + xxh +
         R"("}, "depths": [96], "rows": 16, "formats": ["q4h"],
         "passphrase": {"plant": " pass is ab12. ", "ask": " pass? ", "answer": "ab12"}})";
}

// The tiny fixture with two recall probes, at 1/8 and 7/8 of the context before the questions.
static std::string recall_fixture_json(const std::string& tokens, const std::string& xxh) {
  std::string j = tiny_fixture_json(tokens, xxh);
  j.insert(j.rfind('}'),
           R"(, "recall": [{"at": 0.125, "plant": " key=QX val=77. ", "ask": " val of QX? ", "answer": "77"},
                                           {"at": 0.875, "plant": [1, 2, 3], "ask": [4, 5], "answer": [6, 7, 8]}])");
  return j;
}

TEST_CASE("a fixture's recall probes: read, and refused with the field named") {
  Fixture f = parse_fixture(recall_fixture_json("t.u32", "0123456789abcdef"), "f.json");
  REQUIRE(f.recall.size() == 2);
  CHECK(f.recall[0].at == 0.125);
  CHECK(std::string(f.recall[0].answer.begin(), f.recall[0].answer.end()) == "77");
  CHECK(f.recall[1].plant == std::vector<int32_t>{1, 2, 3});
  std::string bad = recall_fixture_json("t.u32", "0123456789abcdef");
  bad.replace(bad.find("0.875"), 5, "1.5");
  CHECK_THROWS_WITH_AS(parse_fixture(bad, "f.json"), doctest::Contains("recall[1].at"), std::runtime_error);
  bad = recall_fixture_json("t.u32", "0123456789abcdef");
  bad.replace(bad.find(R"("answer": "77")"), 14, R"("answr": "77")");
  CHECK_THROWS_WITH_AS(parse_fixture(bad, "f.json"), doctest::Contains("recall[0].answer"), std::runtime_error);
}

TEST_CASE("the gate's context: recall probes planted across the context, asked just before the passphrase") {
  Fixture f = parse_fixture(recall_fixture_json("t.u32", "0123456789abcdef"), "f.json");
  std::vector<int32_t> text(400, 'x');
  const GateLayout g = gate_layout(f, text, 192, 16);
  REQUIRE(g.ctx.size() == 208);
  // the questions' block: 12 + 2 + 2 + 3 = 19 tokens ending a sixteenth of the context before the passphrase's
  // question starts (192 − 7 = 185; 185 − 11 = 174)
  const int64_t q = 174 - 19;
  CHECK(g.logits_from == q);
  REQUIRE(g.probes.size() == 3);
  CHECK(g.probes[0].plant == 96);  // the passphrase at d/2, its answer the first scored row
  CHECK(g.probes[0].answer == 192);
  CHECK(g.probes[1].plant == q / 8);
  CHECK(g.probes[2].plant == int64_t(0.875 * double(q)));
  CHECK(std::string(g.ctx.begin() + q / 8, g.ctx.begin() + q / 8 + 16) == " key=QX val=77. ");
  CHECK(std::vector<int32_t>(g.ctx.begin() + g.probes[2].plant, g.ctx.begin() + g.probes[2].plant + 3) ==
        std::vector<int32_t>{1, 2, 3});
  CHECK(std::string(g.ctx.begin() + q, g.ctx.begin() + q + 14) == " val of QX? 77");
  CHECK(g.probes[1].answer == q + 12);
  CHECK(std::vector<int32_t>(g.ctx.begin() + q + 14, g.ctx.begin() + q + 19) == std::vector<int32_t>{4, 5, 6, 7, 8});
  CHECK(g.probes[2].answer == q + 16);
  CHECK(std::string(g.ctx.begin() + 192 - 7, g.ctx.begin() + 196) == " pass? ab12");
  // at 64 the questions start at 57 − 3 − 19 = 35, before the passphrase's plant at 32 ends: the depth does not fit
  CHECK(gate_layout_problem(f, 192, 16).empty());
  CHECK(gate_layout_problem(f, 64, 16) == "too short for the recall probes");
  CHECK_THROWS_WITH_AS(gate_layout(f, text, 64, 16), doctest::Contains("too short for the recall probes"),
                       std::runtime_error);
}

TEST_CASE("a fixture whose token file does not match its hash is refused, naming both hashes") {
  const fs::path dir = fs::temp_directory_path() / "hkv_fixture_test";
  fs::create_directories(dir);
  std::vector<uint32_t> toks(200);
  for (size_t i = 0; i < toks.size(); i++) toks[i] = uint32_t(97 + i % 26);
  write_file_atomic((dir / "t.u32").string(), toks.data(), toks.size() * 4);
  const std::string good = xxh64_hex(toks.data(), toks.size() * 4);
  Fixture f = parse_fixture(tiny_fixture_json("t.u32", good), (dir / "f.json").string());
  CHECK(load_fixture_tokens(f, 256).size() == 200);
  Fixture bad = parse_fixture(tiny_fixture_json("t.u32", "0123456789abcdef"), (dir / "f.json").string());
  CHECK_THROWS_WITH_AS(load_fixture_tokens(bad, 256), doctest::Contains(good.c_str()), std::runtime_error);
  CHECK_THROWS_WITH_AS(load_fixture_tokens(bad, 256), doctest::Contains("0123456789abcdef"), std::runtime_error);
  CHECK_THROWS_WITH_AS(parse_fixture(R"({"name": "x", "model": "builtin:tiny"})", "f.json"),
                       doctest::Contains("field 'tokens'"), std::runtime_error);
  CHECK_THROWS_WITH_AS(parse_fixture(tiny_fixture_json("t.u32", "short"), "f.json"), doctest::Contains("tokens.xxh64"),
                       std::runtime_error);
  fs::remove_all(dir);
}

TEST_CASE("the committed fixtures load and their token files match") {
  for (const char* name : {"tiny-gate.json", "trained-gate.json", "recall-gate.json"}) {
    Fixture f = load_fixture(std::string(HKV_SOURCE_DIR) + "/fixtures/" + name);
    CHECK(load_fixture_tokens(f, 256).size() >= size_t(f.depths.back() + f.rows));
  }
}

TEST_CASE("the gate's context plants the passphrase at d/2 and asks it just before d") {
  Fixture f = parse_fixture(tiny_fixture_json("t.u32", "0123456789abcdef"), "f.json");
  std::vector<int32_t> text(200, 'x');
  auto ctx = gate_context(f, text, 96, 16);
  REQUIRE(ctx.size() == 112);
  CHECK(std::string(ctx.begin() + 48, ctx.begin() + 48 + 15) == " pass is ab12. ");
  CHECK(std::string(ctx.begin() + 96 - 7, ctx.begin() + 96) == " pass? ");
  CHECK(std::string(ctx.begin() + 96, ctx.begin() + 100) == "ab12");
  CHECK_THROWS(gate_context(f, text, 190, 16));  // does not fit the text
}

// The tiny fixture over 300 pseudo-random byte tokens written into temp/name.
static Fixture small_fixture(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / name;
  fs::create_directories(dir);
  std::vector<uint32_t> toks(300);
  for (size_t i = 0; i < toks.size(); i++) toks[i] = uint32_t(synth_bits(3, 4, i) % 256);
  write_file_atomic((dir / "t.u32").string(), toks.data(), toks.size() * 4);
  return parse_fixture(tiny_fixture_json("t.u32", xxh64_hex(toks.data(), toks.size() * 4)), (dir / "f.json").string());
}

static GateReport small_gate(const std::string& candidate_format, double bar_mean = 0.01, double bar_max = 0.1) {
  Fixture f = small_fixture("hkv_gate_test");
  f.bar_kl_mean = bar_mean;
  f.bar_kl_max = bar_max;
  static Model m = build_synthetic(builtin_spec("tiny"));
  GateOptions opt;
  opt.formats = {candidate_format};
  opt.chunk = 5;  // several chunks of rows
  return run_gate(f, m, load_fixture_tokens(f, 256), oracle_runners(m), "oracle (CPU)", opt);
}

TEST_CASE("the gate report: values and schema") {
  GateReport g = small_gate("q4h");
  REQUIRE(g.results.size() == 1);
  const DepthResult& r = g.results[0];
  CHECK(r.rows == 16);
  CHECK(r.kl_mean > 0.0);
  CHECK(r.kl_max >= r.p999);
  CHECK(r.p999 >= r.p99);
  CHECK(r.p99 >= r.p90);
  CHECK(r.p90 >= r.p50);
  CHECK(r.top1_agree > 0.5);
  CHECK(g.floor.size() == 1);
  CHECK(g.floor[0].kl_mean < r.kl_mean);  // fp32 rounding is far below what 4 bits cost
  auto j = nlohmann::json::parse(gate_json(g));
  CHECK(j["schema"] == "hkv-gate-1");
  for (const char* k : {"fixture", "model", "backend", "date", "bars", "results", "noise_floor", "pass"})
    CHECK(j.contains(k));
  const auto& d = j["results"][0];
  for (const char* k : {"depth", "format", "rows", "kl", "top1_agreement", "perplexity", "passphrase_recalled",
                        "recall", "top1_differences", "kl_histogram", "pass"})
    CHECK(d.contains(k));
  CHECK(d["recall"]["probes"] == 1);  // the passphrase alone
  CHECK(d["recall"]["bf16"] == r.recalled_ref);
  CHECK(d["recall"]["each"][0]["plant"] == 48);
  CHECK(d["recall"]["each"][0]["answer"] == 96);
  for (const char* k : {"mean", "max", "p99_9", "p99", "p90", "median"}) CHECK(d["kl"].contains(k));
  CHECK(gate_markdown(g).find("| q4h |") != std::string::npos);
  const std::string html = gate_html(g);
  CHECK(html.find("<svg") != std::string::npos);
  CHECK(html.find("</html>") != std::string::npos);
}

TEST_CASE("a depth at the model's window runs where its scored rows fit; a deeper one is skipped") {
  const Fixture f = small_fixture("hkv_gate_window_test");
  Model m = build_synthetic(builtin_spec("tiny"));
  m.config.max_position_embeddings = 100;  // a 100-position window: depth 100 with 16 rows needs positions to 114
  GateOptions opt;
  opt.depths = {96, 100, 101};
  opt.noise_floor = false;
  GateReport g = run_gate(f, m, load_fixture_tokens(f, 256), oracle_runners(m), "oracle (CPU)", opt);
  REQUIRE(g.results.size() == 3);
  // 96 does not fit either (96 − 1 + 16 > 100): both run at 100 − 16 + 1 = 85, the last row at position 99
  for (int i = 0; i < 2; i++) {
    CAPTURE(i);
    CHECK_FALSE(g.results[size_t(i)].skipped);
    CHECK(g.results[size_t(i)].depth == 85);
    CHECK(g.results[size_t(i)].rows == 16);
  }
  CHECK(g.results[0].requested_depth == 96);
  CHECK(g.results[1].requested_depth == 100);
  CHECK(g.results[0].kl_mean == g.results[1].kl_mean);  // the same context, the same rows
  CHECK(g.results[2].skipped);
  CHECK(g.results[2].skip_reason.find("max_position_embeddings 100") != std::string::npos);
  const auto j = nlohmann::json::parse(gate_json(g));
  CHECK(j["results"][1]["depth"] == 85);
  CHECK(j["results"][1]["requested_depth"] == 100);
  CHECK(gate_table(g).find("depth 85 stands for the fixture's 100") != std::string::npos);
  fs::remove_all(fs::temp_directory_path() / "hkv_gate_window_test");
}

TEST_CASE("a depth's comparisons share their feeds: each result equals the one run alone") {
  const Fixture f = small_fixture("hkv_gate_shared_test");
  static Model m = build_synthetic(builtin_spec("tiny"));
  auto run = [&](std::vector<std::string> formats, bool floor) {
    GateOptions opt;
    opt.formats = formats;
    opt.noise_floor = floor;
    opt.chunk = 5;
    return run_gate(f, m, load_fixture_tokens(f, 256), oracle_runners(m), "oracle (CPU)", opt);
  };
  const GateReport both = run({"fp8", "q4h"}, true), q4 = run({"q4h"}, false), f8 = run({"fp8"}, true);
  REQUIRE(both.results.size() == 2);
  REQUIRE(both.floor.size() == 1);
  auto same = [](const DepthResult& a, const DepthResult& b) {
    CHECK(a.format == b.format);
    CHECK(a.kl_mean == b.kl_mean);
    CHECK(a.kl_max == b.kl_max);
    CHECK(a.p99 == b.p99);
    CHECK(a.top1_agree == b.top1_agree);
    CHECK(a.ppl_ref == b.ppl_ref);
    CHECK(a.ppl_fmt == b.ppl_fmt);
    CHECK(a.diffs.size() == b.diffs.size());
    CHECK(a.histogram == b.histogram);
  };
  same(both.results[0], f8.results[0]);
  same(both.results[1], q4.results[0]);
  same(both.floor[0], f8.floor[0]);
  CHECK(both.results[0].kl_mean != both.results[1].kl_mean);  // two formats, two different results
  fs::remove_all(fs::temp_directory_path() / "hkv_gate_shared_test");
}

TEST_CASE("a gate that must fail: a format far from bf16 fails the bar") {
  // The unrotated 4-bit grid on K with outlier channels (the tiny model's k_norm) costs more than q4h.
  // With the bar set between the two, q4h passes and the unrotated grid FAILS: the gate can fail.
  GateReport q4 = small_gate("q4h");
  GateReport norot = small_gate("q4h-norot");
  REQUIRE(norot.results[0].kl_mean > 2 * q4.results[0].kl_mean);  // rotation helps, measurably
  const double bar = std::sqrt(norot.results[0].kl_mean * q4.results[0].kl_mean);
  CHECK(small_gate("q4h", bar, 1.0).pass);
  GateReport fail = small_gate("q4h-norot", bar, 1.0);
  CHECK_FALSE(fail.pass);
  CHECK_FALSE(fail.results[0].pass);
  CHECK(gate_table(fail).find("FAIL") != std::string::npos);
  CHECK(nlohmann::json::parse(gate_json(fail))["pass"] == false);
}

// A runner that knows the context: each row's logits put the next token of the context on top (by 8 nats), except
// at the positions in `wrong`, where token 0 is on top. A stand-in for a cache that recalls, or forgets, a probe.
class ScriptedRunner : public SequenceRunner {
 public:
  ScriptedRunner(std::vector<int32_t> ctx, std::vector<int64_t> wrong)
      : ctx_(std::move(ctx)), wrong_(std::move(wrong)) {}
  void feed(const std::vector<int32_t>& tokens, std::vector<float>* logits) override {
    if (logits) logits->assign(tokens.size() * 256, 0.0f);
    for (size_t i = 0; i < tokens.size(); i++, pos_++) {
      REQUIRE(tokens[i] == ctx_[size_t(pos_)]);
      const bool w = std::find(wrong_.begin(), wrong_.end(), pos_ + 1) != wrong_.end();
      if (logits) (*logits)[i * 256 + size_t(w ? 0 : ctx_[size_t(pos_ + 1)])] = 8.0f;
    }
  }

 private:
  std::vector<int32_t> ctx_;
  std::vector<int64_t> wrong_;
  int64_t pos_ = 0;
};

TEST_CASE("the recall bar: a format that recalls fewer probes than bf16 fails, with the counts in every report") {
  const fs::path dir = fs::temp_directory_path() / "hkv_gate_recall_test";
  fs::create_directories(dir);
  std::vector<uint32_t> toks(400);
  for (size_t i = 0; i < toks.size(); i++) toks[i] = uint32_t(97 + synth_bits(5, 6, i) % 26);
  write_file_atomic((dir / "t.u32").string(), toks.data(), toks.size() * 4);
  Fixture f =
      parse_fixture(recall_fixture_json("t.u32", xxh64_hex(toks.data(), toks.size() * 4)), (dir / "f.json").string());
  const std::vector<int32_t> text = load_fixture_tokens(f, 256);
  const GateLayout lay = gate_layout(f, text, 192, 16);
  // bf16 and fp8 recall every probe; q4h forgets the second token of the probe at 7/8; "q4h-nf" forgets every
  // answer, the passphrase's included (its scored rows then differ from bf16's, so its KL bar is set out of reach)
  RunnerFactory scripted = [&](const KvFormat& fmt, int64_t) -> std::unique_ptr<SequenceRunner> {
    std::vector<int64_t> wrong;
    if (fmt.name() == "q4h") wrong = {lay.probes[2].answer + 1};
    if (fmt.name() == "q4h-nf")
      for (const ProbeSpan& p : lay.probes) wrong.push_back(p.answer);
    return std::make_unique<ScriptedRunner>(lay.ctx, wrong);
  };
  static Model m = build_synthetic(builtin_spec("tiny"));
  f.bar_kl_max = f.bar_kl_mean = 1e9;
  GateOptions opt;
  opt.depths = {192};
  opt.formats = {"fp8", "q4h", "q4h-nf"};
  opt.noise_floor = false;
  opt.chunk = 5;
  const GateReport g = run_gate(f, m, text, scripted, "scripted", opt);
  REQUIRE(g.results.size() == 3);
  const DepthResult &fp8 = g.results[0], &q4h = g.results[1], &nf = g.results[2];
  CHECK(fp8.recalled_ref == 3);
  CHECK(fp8.recalled_fmt == 3);
  CHECK(fp8.recall_pass);
  CHECK(fp8.pass);
  CHECK(fp8.kl_max == 0.0);
  CHECK(q4h.recalled_ref == 3);
  CHECK(q4h.recalled_fmt == 2);
  CHECK(q4h.kl_max == 0.0);  // the probes' answers lie before the scored rows: only the recall bar fails
  CHECK_FALSE(q4h.recall_pass);
  CHECK_FALSE(q4h.pass);
  CHECK(q4h.recall_ref == 1);  // the passphrase, recalled by both
  CHECK(q4h.recall_fmt == 1);
  CHECK(q4h.probes[2].ref);
  CHECK_FALSE(q4h.probes[2].fmt);
  CHECK(nf.recalled_fmt == 0);
  CHECK(nf.recall_fmt == 0);
  CHECK_FALSE(nf.pass);
  CHECK_FALSE(g.pass);
  const auto j = nlohmann::json::parse(gate_json(g));
  CHECK(j["results"][1]["recall"]["probes"] == 3);
  CHECK(j["results"][1]["recall"]["bf16"] == 3);
  CHECK(j["results"][1]["recall"]["format"] == 2);
  CHECK(j["results"][1]["recall"]["pass"] == false);
  CHECK(j["results"][1]["recall"]["each"][2]["at"] == 0.875);
  CHECK(j["results"][1]["recall"]["each"][2]["answer"] == lay.probes[2].answer);
  CHECK(j["results"][1]["recall"]["each"][2]["format"] == false);
  CHECK(j["results"][1]["pass"] == false);
  CHECK(j["results"][0]["recall"]["pass"] == true);
  const std::string table = gate_table(g);
  CHECK(table.find("q4h at 192: bf16 recalled 3, q4h 2 of 3 probes, fewer than bf16: FAILS the recall bar") !=
        std::string::npos);
  CHECK(table.find("      3/3     2/3   FAIL") != std::string::npos);
  CHECK(gate_markdown(g).find("| 3/3 | 2/3 | **FAIL** |") != std::string::npos);
  CHECK(gate_html(g).find("3/3 / 2/3") != std::string::npos);
  // the same run with q4h recalling every probe passes
  opt.formats = {"fp8"};
  CHECK(run_gate(f, m, text, scripted, "scripted", opt).pass);
  fs::remove_all(dir);
}

TEST_CASE("first divergence: the order taps are reported in does not matter, the earliest layer is named") {
  // The engine reports a prompt's taps in rounds of tokens, the oracle layer by layer: the same tensors
  // in another order must compare equal, and a mismatch must be named at its layer, tensor and token.
  Trace a, b;
  for (int layer = 0; layer < 2; layer++)
    for (const char* name : {"deltanet", "hidden"})
      for (int64_t t = 0; t < 3; t++) a.taps.push_back({layer, name, t, {float(layer), float(t), 1.5f}});
  for (int64_t t = 0; t < 3; t++)  // token-major: another order of the same taps
    for (int layer = 0; layer < 2; layer++)
      for (const char* name : {"deltanet", "hidden"})
        b.taps.push_back({layer, name, t, {float(layer), float(t), 1.5f}});
  a.logits = b.logits = {1.0f, 2.0f};
  CHECK(first_divergence(a, b).empty());
  Trace missing = b;
  missing.taps.erase(missing.taps.begin());  // layer 0 deltanet token 0 absent on one side
  CHECK(first_divergence(a, missing).find("reported on one side only") != std::string::npos);
  // corrupt layer 1 hidden token 2 and layer 0 deltanet token 1: the earliest (layer 0) is reported
  for (auto& tap : b.taps) {
    if (tap.layer == 1 && tap.name == "hidden" && tap.pos == 2) tap.data[2] = 2.5f;
    if (tap.layer == 0 && tap.name == "deltanet" && tap.pos == 1) tap.data[1] = 7.0f;
  }
  const std::string d = first_divergence(a, b);
  CHECK(d.find("layer 0 tensor deltanet token 1 index 1") != std::string::npos);
  CHECK(d.find("1 of 3 elements differ") != std::string::npos);
}
