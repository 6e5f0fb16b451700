// The oracle's layers against direct float64 computations, and its whole-model contracts: prefill equals
// decode, save/restore equals straight through, thread count does not matter, golden logits digests.
#include <doctest/doctest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "reference/model.h"
#include "reference/synthetic.h"
#include "reference/tokens.h"

using namespace hkv;

static std::vector<float> noise(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) v[size_t(i)] = scale * float(synth_int(seed, 77, uint64_t(i))) / 73.0f;
  return v;
}

// Layer tests: fp32 results against float64 formulas. Bounds are relative to the output scale, from a few
// fp32 roundings (2^-24 each) per element, with room for the n-term sums: 1e-5.
TEST_CASE("rmsnorm (1+w) and plain against float64") {
  for (int n : {32, 100, 256, 5120}) {
    auto x = noise(n, 1, 3.0f), w = noise(n, 2, 0.2f);
    std::vector<float> y(static_cast<size_t>(n)), z(static_cast<size_t>(n));
    rmsnorm_1pw(x.data(), w.data(), n, 1e-6f, y.data());
    rmsnorm_plain(x.data(), w.data(), n, 1e-6f, z.data());
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    double r = 1.0 / std::sqrt(ss / n + 1e-6);
    for (int i = 0; i < n; i++) {
      CHECK(std::fabs(y[size_t(i)] - x[size_t(i)] * r * (1.0 + w[size_t(i)])) <=
            1e-5 * (1 + std::fabs(x[size_t(i)] * r)));
      CHECK(std::fabs(z[size_t(i)] - x[size_t(i)] * r * w[size_t(i)]) <= 1e-5 * (1 + std::fabs(x[size_t(i)] * r)));
    }
  }
}

TEST_CASE("l2norm against float64") {
  auto x = noise(128, 3);
  auto y = x;
  l2norm_inplace(y.data(), 128);
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  for (int i = 0; i < 128; i++) CHECK(std::fabs(y[size_t(i)] - x[size_t(i)] / std::sqrt(ss + 1e-6)) <= 1e-6);
}

TEST_CASE("RoPE: rotate_half on the first rd dims, against float64") {
  Config c;
  c.head_dim = 256;
  c.partial_rotary_factor = 0.25;
  c.rope_theta = 1e7;
  const int rd = c.rotary_dim(), h = rd / 2;
  for (int64_t pos : {0, 1, 17, 4095, 262143}) {
    std::vector<float> cs(static_cast<size_t>(h)), sn(static_cast<size_t>(h));
    rope_row(c, pos, cs.data(), sn.data());
    auto x = noise(256, 4 + uint64_t(pos)), y = x;
    rope_apply(y.data(), rd, cs.data(), sn.data());
    for (int i = 0; i < h; i++) {
      double f = double(float(pos) * float(1.0 / std::pow(1e7, 2.0 * i / rd)));
      CHECK(std::fabs(y[size_t(i)] - (x[size_t(i)] * std::cos(f) - x[size_t(i + h)] * std::sin(f))) <= 1e-5);
      CHECK(std::fabs(y[size_t(i + h)] - (x[size_t(i + h)] * std::cos(f) + x[size_t(i)] * std::sin(f))) <= 1e-5);
    }
    for (int i = rd; i < 256; i++) CHECK(y[size_t(i)] == x[size_t(i)]);  // the rest pass through
  }
}

TEST_CASE("DeltaNet recurrence against a float64 delta rule") {
  const int dk = 32, dv = 48, T = 40;
  std::vector<float> S(size_t(dk * dv), 0.0f);
  std::vector<double> Sd(size_t(dk * dv), 0.0);
  std::vector<float> o(static_cast<size_t>(dv));
  for (int t = 0; t < T; t++) {
    auto q = noise(dk, 100 + uint64_t(t), 0.2f), k = noise(dk, 200 + uint64_t(t)), v = noise(dv, 300 + uint64_t(t));
    l2norm_inplace(k.data(), dk);
    const float beta = 0.3f + 0.01f * float(t), g = -0.05f * float(t % 5);
    deltanet_step(S.data(), q.data(), k.data(), v.data(), beta, g, dk, dv, o.data());
    // S ← exp(g)·S;  S ← S + k (β(v − Sᵀk))ᵀ;  o = Sᵀq
    double decay = std::exp(double(g));
    for (double& s : Sd) s *= decay;
    for (int j = 0; j < dv; j++) {
      double m = 0;
      for (int i = 0; i < dk; i++) m += Sd[size_t(i * dv + j)] * k[size_t(i)];
      double delta = beta * (v[size_t(j)] - m);
      for (int i = 0; i < dk; i++) Sd[size_t(i * dv + j)] += k[size_t(i)] * delta;
    }
    for (int j = 0; j < dv; j++) {
      double oj = 0;
      for (int i = 0; i < dk; i++) oj += Sd[size_t(i * dv + j)] * q[size_t(i)];
      CHECK(std::fabs(o[size_t(j)] - oj) <= 2e-5);
    }
  }
}

// ---- whole model -----------------------------------------------------------------------------------

static const Model& tiny() {
  static Model m = build_synthetic(builtin_spec("tiny"));
  return m;
}

static std::vector<int32_t> text_tokens(int n) {
  const char* text = "The quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs. ";
  std::vector<int32_t> t;
  for (int i = 0; i < n; i++) t.push_back(int32_t((unsigned char)text[i % 86]));
  return t;
}

static std::string digest(const std::vector<float>& v) { return xxh64_hex(v.data(), v.size() * 4); }

TEST_CASE("prefill in one call equals token-by-token decode, byte for byte, in every cache format") {
  const auto toks = text_tokens(40);
  for (const char* fmt : {"bf16", "fp8", "q4h"}) {
    SequenceState a = new_sequence(tiny().config, KvFormat::parse(fmt), 64);
    SequenceState b = new_sequence(tiny().config, KvFormat::parse(fmt), 64);
    std::vector<float> all = forward(tiny(), a, toks);
    std::vector<float> step;
    for (int32_t t : toks) {
      auto l = forward(tiny(), b, {t});
      step.insert(step.end(), l.begin(), l.end());
    }
    CHECK(std::memcmp(all.data(), step.data(), all.size() * 4) == 0);
    CHECK(a.k_cache[0] == b.k_cache[0]);
    CHECK(a.S[0] == b.S[0]);
  }
}

TEST_CASE("save and restore equals running straight through, byte for byte") {
  const auto toks = text_tokens(30);
  const std::string path = (std::filesystem::temp_directory_path() / "hkv_state_test.bin").string();
  for (const char* fmt : {"bf16", "fp8", "q4h"}) {
    SequenceState s = new_sequence(tiny().config, KvFormat::parse(fmt), 64);
    std::vector<float> straight = forward(tiny(), s, toks);
    SequenceState p = new_sequence(tiny().config, KvFormat::parse(fmt), 64);
    forward(tiny(), p, std::vector<int32_t>(toks.begin(), toks.begin() + 17));
    save_state(p, tiny().config, path);
    SequenceState r = load_state(tiny().config, path, 64);
    CHECK(r.pos == 17);
    std::vector<float> rest = forward(tiny(), r, std::vector<int32_t>(toks.begin() + 17, toks.end()));
    const size_t V = size_t(tiny().config.vocab_size);
    CHECK(std::memcmp(rest.data(), straight.data() + 17 * V, rest.size() * 4) == 0);
  }
  std::filesystem::remove(path);
}

TEST_CASE("a state file for another model or a truncated one is refused") {
  const std::string path = (std::filesystem::temp_directory_path() / "hkv_state_bad.bin").string();
  SequenceState s = new_sequence(tiny().config, KvFormat::q4h(), 16);
  forward(tiny(), s, text_tokens(5));
  save_state(s, tiny().config, path);
  std::string bytes = read_file(path);
  write_file_atomic(path, bytes.data(), bytes.size() - 10);
  CHECK_THROWS_WITH_AS(load_state(tiny().config, path, 16), doctest::Contains("truncated"), std::runtime_error);
  Config other = tiny().config;
  other.hidden_size = 64;
  write_file_atomic(path, bytes.data(), bytes.size());
  CHECK_THROWS_WITH_AS(load_state(other, path, 16), doctest::Contains("another model"), std::runtime_error);
  std::filesystem::remove(path);
}

TEST_CASE("logits do not depend on the thread count") {
  const auto toks = text_tokens(24);
  const int saved = omp_get_max_threads();
  std::string d[2];
  for (int th : {1, 2}) {
    omp_set_num_threads(th);
    SequenceState s = new_sequence(tiny().config, KvFormat::q4h(), 32);
    d[th - 1] = digest(forward(tiny(), s, toks));
  }
  omp_set_num_threads(saved);
  CHECK(d[0] == d[1]);
}

TEST_CASE("bad token ids and contexts past the capacity are refused") {
  SequenceState s = new_sequence(tiny().config, KvFormat::bf16(), 4);
  CHECK_THROWS_WITH_AS(forward(tiny(), s, {1, 256}), doctest::Contains("outside the vocabulary"), std::runtime_error);
  CHECK_THROWS_WITH_AS(forward(tiny(), s, {1, 2, 3, 4, 5}), doctest::Contains("capacity"), std::runtime_error);
  CHECK(s.pos == 0);  // nothing was consumed
}

TEST_CASE("the synthetic generator gives the same bytes everywhere (golden weights digest)") {
  const Matrix& q = tiny().w.layers[1].full.q_proj;
  CHECK(xxh64_hex(q.data, q.nbytes()) == "4f2be0ca7b444a86");
  Model m4 = build_synthetic(builtin_spec("tiny-mlx4"));
  const Matrix& g = m4.w.layers[0].gate_proj;
  CHECK(xxh64_hex(g.data, size_t(g.rows * g.cols / 2)) == "c5ec82ae178acfcf");
}

// Golden digests of the built-in fixture's logits, for each cache format (design.md: "default
// unchanged"). Any change to any arithmetic of the oracle moves these; a deliberate change updates them
// and says why in the commit.
TEST_CASE("golden logits digests of the built-in tiny model") {
  const auto toks = text_tokens(64);
  const char* want[4][2] = {{"bf16", "55b0372be528000d"},
                            {"fp8", "a5ed074b6f9750ae"},
                            {"q4h", "afbf82db75112137"},
                            {"q4h-max", "e9a5a182489a062d"}};
  for (auto& w : want) {
    SequenceState s = new_sequence(tiny().config, KvFormat::parse(w[0]), 64);
    CAPTURE(w[0]);
    CHECK(digest(forward(tiny(), s, toks)) == std::string(w[1]));
  }
  Model m4 = build_synthetic(builtin_spec("tiny-mlx4"));
  SequenceState s = new_sequence(m4.config, KvFormat::q4h(), 64);
  CHECK(digest(forward(m4, s, toks)) == "1c390b91ec18f563");
}

TEST_CASE("the cache formats differ from bf16 by a little, not a lot") {
  // KL between the bf16-cache and the other caches' next-token distributions on the tiny model: a sanity
  // bound that catches a cache read back wrongly (that gives KL of order 1).
  const auto toks = text_tokens(64);
  SequenceState s = new_sequence(tiny().config, KvFormat::bf16(), 64);
  auto ref = forward(tiny(), s, toks);
  const int64_t V = tiny().config.vocab_size;
  for (const char* fmt : {"fp8", "q4h"}) {
    SequenceState t = new_sequence(tiny().config, KvFormat::parse(fmt), 64);
    auto got = forward(tiny(), t, toks);
    double worst = 0;
    for (size_t r = 0; r < toks.size(); r++) {
      const float* p = ref.data() + r * size_t(V);
      const float* q = got.data() + r * size_t(V);
      double mp = -1e30, mq = -1e30, zp = 0, zq = 0, kl = 0;
      for (int64_t i = 0; i < V; i++) mp = std::max(mp, double(p[i])), mq = std::max(mq, double(q[i]));
      for (int64_t i = 0; i < V; i++) zp += std::exp(p[i] - mp), zq += std::exp(q[i] - mq);
      for (int64_t i = 0; i < V; i++) {
        double lp = p[i] - mp - std::log(zp), lq = q[i] - mq - std::log(zq);
        kl += std::exp(lp) * (lp - lq);
      }
      worst = std::max(worst, kl);
    }
    CAPTURE(fmt);
    CHECK(worst < 0.05);
    CHECK(worst > 0.0);  // and they are not silently the same cache
  }
}

TEST_CASE("the cache holds each K row exactly as its format packs it") {
  // Every K row the model wrote equals kv_pack_row of the K vector the layer computed (tapped after
  // k_norm and RoPE), byte for byte; and unpacking it gives that vector back within the format's bound.
  const auto toks = text_tokens(20);
  for (const char* fmt : {"bf16", "fp8", "q4h"}) {
    const KvFormat f = KvFormat::parse(fmt);
    std::vector<std::vector<float>> ks;  // [t] K of the first full-attention layer (layer 1)
    Tap tap = [&ks](int layer, const char* name, int64_t, const float* data, int64_t n) {
      if (layer == 1 && std::string(name) == "k") ks.emplace_back(data, data + n);
    };
    ForwardOptions opt;
    opt.tap = &tap;
    SequenceState s = new_sequence(tiny().config, f, 32);
    forward(tiny(), s, toks, opt);
    REQUIRE(ks.size() == toks.size());
    const int D = tiny().config.head_dim;
    std::vector<uint8_t> row(s.row_bytes);
    std::vector<float> back(static_cast<size_t>(D));
    for (size_t t = 0; t < ks.size(); t++) {
      kv_pack_row(f, ks[t].data(), D, row.data());
      CHECK(std::memcmp(row.data(), s.k_cache[0].data() + t * s.row_bytes, s.row_bytes) == 0);
      kv_unpack_row(f, s.k_cache[0].data() + t * s.row_bytes, D, back.data());
      double e2 = 0, x2 = 0;
      for (int d = 0; d < D; d++) {
        e2 += (back[size_t(d)] - ks[t][size_t(d)]) * double(back[size_t(d)] - ks[t][size_t(d)]);
        x2 += double(ks[t][size_t(d)]) * ks[t][size_t(d)];
      }
      // relative RMS error bounds of docs/FORMAT.md's table, with room for rows unlike the study's
      CHECK(std::sqrt(e2 / x2) < (f.kind == KvKind::Q4H ? 0.15 : f.kind == KvKind::FP8 ? 0.04 : 0.004));
    }
  }
}

TEST_CASE("hkv score: chunked scoring gives the bytes of one pass, and the log-probabilities of the logits") {
  const std::string dir = std::filesystem::temp_directory_path().string();
  const auto toks = text_tokens(50);
  std::string json = "[";
  for (size_t i = 0; i < toks.size(); i++) json.append(i ? "," : "").append(std::to_string(toks[i]));
  write_file_atomic(dir + "/hkv_score.json", (json + "]").data(), json.size() + 1);
  const std::string base = std::string(HKV_BINARY) + " score --model builtin:tiny --tokens " + dir + "/hkv_score.json";
  REQUIRE(std::system((base + " --chunk 7 --out " + dir + "/hkv_score7.f32 > /dev/null").c_str()) == 0);
  REQUIRE(std::system((base + " --chunk 1000 --out " + dir + "/hkv_score_all.f32 > /dev/null").c_str()) == 0);
  const std::string a = read_file(dir + "/hkv_score7.f32"), b = read_file(dir + "/hkv_score_all.f32");
  REQUIRE(a.size() == (toks.size() - 1) * 4);
  CHECK(a == b);
  SequenceState s = new_sequence(tiny().config, KvFormat::bf16(), 64);
  std::vector<float> logits = forward(tiny(), s, toks);
  const float* lp = reinterpret_cast<const float*>(a.data());
  const int64_t V = tiny().config.vocab_size;
  for (size_t t = 0; t + 1 < toks.size(); t++) {
    double m = -1e30, z = 0;
    for (int64_t i = 0; i < V; i++) m = std::max(m, double(logits[t * size_t(V) + size_t(i)]));
    for (int64_t i = 0; i < V; i++) z += std::exp(logits[t * size_t(V) + size_t(i)] - m);
    CHECK(lp[t] == doctest::Approx(logits[t * size_t(V) + size_t(toks[t + 1])] - m - std::log(z)).epsilon(1e-6));
  }
}

TEST_CASE("a cache that does not fit in memory is refused up front, with the numbers") {
  // 2^40 positions of the 27B shape's q4h rows: far beyond any machine's memory
  Config c = builtin_spec("27b").config;
  CHECK_THROWS_WITH_AS(new_sequence(c, KvFormat::q4h(), int64_t(1) << 40), doctest::Contains("MiB are available"),
                       std::runtime_error);
  CHECK_THROWS_AS(new_sequence(c, KvFormat::q4h(), -1), std::runtime_error);
}

TEST_CASE("a synthetic model that does not fit in memory is refused up front, with the numbers") {
  // The 27B shape with a 64 times wider MLP: about 2 TiB of bf16 weights, more than any machine here has.
  SyntheticSpec spec = builtin_spec("27b");
  spec.config.intermediate_size *= 64;
  CHECK_THROWS_WITH_AS(build_synthetic(spec), doctest::Contains("MiB are available"), std::runtime_error);
}
