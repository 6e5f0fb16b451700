// The whole model: engine vs oracle, byte for byte — logits, every tapped tensor ("q", "k", "attn",
// "deltanet", "hidden" per layer), the cache bytes and the DeltaNet and conv states — on the built-in
// synthetic models, a synthetic model with the 27B head layout, and the transformers fixtures, in all
// three cache formats, with contexts crossing 512-key chunks up to 4K; and the engine's own contracts:
// concurrent = solo, resumed = fresh, drafted rollback = plain, device-generated weights = host-built.
// On a mismatch the message names the first layer, tensor, token and index with both values.
//
// HKV_GPU_SMALL=1 shortens every context (prompts of about 24 tokens, one crossing of a 512-key chunk, no 4K
// case, the fixtures' first 24 tokens) for runs under compute-sanitizer, which slows kernels 10-100x
// (cuda/run_gpu_suite.sh sanitize). The same comparisons run; only the lengths change.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <tuple>

#include "compare/variants.h"
#include "cuda/engine.h"
#include "cuda/kernels.h"
#include "reference/model.h"
#include "reference/synthetic.h"
#include "reference/tokens.h"
#include "tests/gpu_util.h"

using namespace hkv;
using namespace hkv::gputest;
using cuda::Engine;

namespace {

const bool kSmall = [] {
  const char* e = std::getenv("HKV_GPU_SMALL");
  return e && *e && std::strcmp(e, "0") != 0;
}();
// `full`, or `small` under HKV_GPU_SMALL.
int len(int full, int small) { return kSmall ? small : full; }

struct TapLog {
  std::vector<std::tuple<int, std::string, int64_t>> order;
  std::map<std::tuple<int, std::string, int64_t>, std::vector<float>> data;
  Tap tap() {
    return [this](int layer, const char* name, int64_t t, const float* d, int64_t n) {
      auto key = std::make_tuple(layer, std::string(name), t);
      if (!data.count(key)) order.push_back(key);
      data[key] = std::vector<float>(d, d + n);
    };
  }
};

std::string compare_taps(const TapLog& eng, const TapLog& ora) {
  for (const auto& key : ora.order) {
    auto it = eng.data.find(key);
    const std::string where = "layer " + std::to_string(std::get<0>(key)) + " tensor '" + std::get<1>(key) +
                              "' token " + std::to_string(std::get<2>(key));
    if (it == eng.data.end()) return where + ": not tapped by the engine";
    std::string d = first_diff(it->second, ora.data.at(key));
    if (!d.empty()) return "first divergence at " + where + ", " + d;
  }
  return "";
}

std::string compare_states(const SequenceState& e, const SequenceState& o, const Config& c) {
  if (e.pos != o.pos) return "positions differ: " + std::to_string(e.pos) + " vs " + std::to_string(o.pos);
  const size_t used = size_t(o.pos) * size_t(c.num_key_value_heads) * o.row_bytes;
  for (size_t i = 0; i < o.k_cache.size(); i++) {
    std::string d = first_diff_bytes(e.k_cache[i].data(), o.k_cache[i].data(), used);
    if (!d.empty()) return "K cache of full layer " + std::to_string(i) + ": " + d;
    d = first_diff_bytes(e.v_cache[i].data(), o.v_cache[i].data(), used);
    if (!d.empty()) return "V cache of full layer " + std::to_string(i) + ": " + d;
  }
  for (size_t i = 0; i < o.conv.size(); i++) {
    std::string d = first_diff(e.conv[i], o.conv[i]);
    if (!d.empty()) return "conv state of DeltaNet layer " + std::to_string(i) + ": " + d;
    d = first_diff(e.S[i], o.S[i]);
    if (!d.empty()) return "DeltaNet state of DeltaNet layer " + std::to_string(i) + ": " + d;
  }
  return "";
}

// Prefill `prompt` (all logits), then n_decode greedy steps (the oracle's argmax fed to both); every logit,
// optionally every tap, and the final states compared.
std::string engine_vs_oracle(const Model& m, Engine& eng, const KvFormat& f, const std::vector<int32_t>& prompt,
                             int n_decode, bool taps) {
  const int64_t cap = int64_t(prompt.size()) + n_decode + 1;
  SequenceState os = new_sequence(m.config, f, cap);
  auto es = eng.new_sequence(f, cap);
  TapLog te, to;
  Tap tape = te.tap(), tapo = to.tap();
  ForwardOptions oe, oo;
  if (taps) oe.tap = &tape, oo.tap = &tapo;
  std::vector<float> lo = forward(m, os, prompt, oo), le = eng.forward(*es, prompt, oe);
  std::string d = taps ? compare_taps(te, to) : "";
  if (!d.empty()) return "prefill: " + d;
  d = first_diff(le, lo);
  if (!d.empty()) return "prefill logits: " + d;
  const int64_t V = m.config.vocab_size;
  for (int i = 0; i < n_decode; i++) {
    int32_t next = argmax(lo.data() + (int64_t(lo.size()) / V - 1) * V, V);
    lo = forward(m, os, {next}, oo);
    le = eng.forward(*es, {next}, oe);
    d = taps ? compare_taps(te, to) : "";
    if (!d.empty()) return "decode step " + std::to_string(i) + ": " + d;
    d = first_diff(le, lo);
    if (!d.empty()) return "decode step " + std::to_string(i) + " logits: " + d;
  }
  return compare_states(eng.download(*es), os, m.config);
}

// The 27B model's head layout (24/4 attention heads of 256, 16/48 DeltaNet heads of 128) with a small
// hidden size and four layers.
SyntheticSpec head_layout_27b(bool mlx4) {
  SyntheticSpec s = builtin_spec(mlx4 ? "27b-mlx4" : "27b");
  Config& c = s.config;
  c.vocab_size = 1024;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_hidden_layers = 4;
  c.layer_types = {LayerKind::Linear, LayerKind::Full, LayerKind::Linear, LayerKind::Full};
  return s;
}

const KvFormat kFormats[] = {KvFormat::bf16(), KvFormat::fp8(), KvFormat::q4h()};

void report(const std::string& what, const std::string& d) {
  std::printf("%s: %s\n", what.c_str(), d.empty() ? "OK" : ("FAIL " + d).c_str());
  std::fflush(stdout);
  const std::string msg = what + ": " + d;
  CHECK_MESSAGE(d.empty(), msg);
}

}  // namespace

TEST_CASE("whole model: builtin tiny and tiny-mlx4, every format, taps, prefill and decode") {
  for (const char* name : {"builtin:tiny", "builtin:tiny-mlx4"}) {
    Model m = load_any_model(name);
    Engine eng(m);
    const int prompt = len(100, 24), decode = len(4, 2);
    for (const KvFormat& f : kFormats)
      report(std::string("model(") + name + ",format=" + f.name() + ",prompt=" + std::to_string(prompt) +
                 ",decode=" + std::to_string(decode) + ")",
             engine_vs_oracle(m, eng, f, random_tokens(size_t(prompt), m.config.vocab_size, 1), decode, true));
  }
}

TEST_CASE("whole model: the 27B head layout (24/4 x 256, 16/48 x 128), bf16 and MLX4 weights") {
  for (bool mlx4 : {false, true}) {
    Model m = build_synthetic(head_layout_27b(mlx4));
    Engine eng(m);
    const int prompt = len(70, 24), decode = len(3, 1);
    for (const KvFormat& f : kFormats)
      report(std::string("model(27b-layout,weights=") + (mlx4 ? "mlx4" : "bf16") + ",format=" + f.name() +
                 ",prompt=" + std::to_string(prompt) + ",decode=" + std::to_string(decode) + ")",
             engine_vs_oracle(m, eng, f, random_tokens(size_t(prompt), m.config.vocab_size, 2), decode, true));
  }
}

TEST_CASE("the DeltaNet recurrence's phase counts (hkv bench --phases): the oracle's bytes, every phase counted") {
  // The 27B layout's decode steps take the fused split recurrence's counting instantiation between dn_phases_begin and
  // dn_phases_end: the same logits and states as the oracle, and every block's six phases counted.
  Model m = build_synthetic(head_layout_27b(true));
  Engine eng(m);
  eng.set_graphs(true);
  cuda::dn_phases_begin();
  const std::string d = engine_vs_oracle(m, eng, KvFormat::q4h(), random_tokens(20, m.config.vocab_size, 6), 2, true);
  const cuda::DnPhases p = cuda::dn_phases_end();
  report("dn phases(27b-layout,mlx4,q4h,prompt=20,decode=2)", d);
  // at least the 2 decode steps' blocks (48 value heads, 2 blocks each) in every DeltaNet layer; whole launches only
  const auto linear = std::count(m.config.layer_types.begin(), m.config.layer_types.end(), LayerKind::Linear);
  CHECK(p.blocks >= 2.0 * 96 * double(linear));
  CHECK(std::fmod(p.blocks, 96.0) == 0.0);
  for (double c : p.cycles) CHECK(c > 0);
}

TEST_CASE("switches changed between decode steps, graphs captured anew (hkv bench --variants): the oracle's bytes") {
  // What hkv bench --variants does between blocks of tokens: the environment set to another variant, the switches
  // read again (tuning_from_env) and handed to the engine, which drops its captured graphs. Each decode step runs under
  // the next variant, with graphs, and must still give the oracle's logits and, at the end, its states.
  Model m = build_synthetic(head_layout_27b(true));
  Engine eng(m);
  eng.set_graphs(true);
  CHECK(eng.embedding_to_host() > 0);  // as hkv bench runs: the table read from pinned host memory
  EnvVariants env(
      parse_variants("default;HKV_DECODE_FUSE=0;HKV_DN_SPLIT=1,HKV_DN_TPC=1;"
                     "HKV_MV_STAGE=0,HKV_MV_NORMW=0,HKV_DN_EARLY=0,HKV_DN_PRELOAD=0;HKV_PDL=0,HKV_PDL_ALL=0;"
                     "HKV_DN_SPLIT=4,HKV_MV_PF=0;HKV_DN_FUSED=0;"
                     "HKV_ATTN_VU=4,HKV_OUT_TRIGGER=0,HKV_MERGE_FAST=0,HKV_MV_PF=9"),
      [&] { eng.set_tuning(cuda::tuning_from_env()); });
  const KvFormat f = KvFormat::q4h();
  const std::vector<int32_t> prompt = random_tokens(size_t(len(40, 20)), m.config.vocab_size, 4);
  const int steps = 2 * int(env.size());
  SequenceState os = new_sequence(m.config, f, int64_t(prompt.size()) + steps + 1);
  auto es = eng.new_sequence(f, int64_t(prompt.size()) + steps + 1);
  ForwardOptions o;
  o.last_only = true;
  std::vector<float> lo = forward(m, os, prompt, o), le = eng.forward(*es, prompt, o);
  std::string d = first_diff(le, lo);
  for (int i = 0; i < steps && d.empty(); i++) {
    env.apply(size_t(i) % env.size());
    // the hook ran: the engine's switches are the variant's, each variable as the variant sets it or the default
    const EnvVariant& var = env[size_t(i) % env.size()];
    const std::vector<std::pair<std::string, std::string>> now = cuda::tuning_values(eng.tuning()),
                                                           dflt = cuda::tuning_values(cuda::Tuning{});
    for (size_t k = 0; k < now.size(); k++) {
      std::string want = dflt[k].second;
      for (const auto& [name, value] : var.vars)
        if (name == now[k].first) want = value;
      CHECK_MESSAGE(now[k].second == want, now[k].first, " under ", var.text);
    }
    const int32_t next = argmax(lo.data(), m.config.vocab_size);
    lo = forward(m, os, {next}, o);
    le = eng.forward(*es, {next}, o);
    d = first_diff(le, lo);
    if (!d.empty()) d = "decode step " + std::to_string(i) + " under " + env[size_t(i) % env.size()].text + ": " + d;
  }
  env.restore();
  if (d.empty()) d = compare_states(eng.download(*es), os, m.config);
  report("variants between decode steps(27b-layout,mlx4,q4h,steps=" + std::to_string(steps) + ")", d);
}

TEST_CASE("Engine::set_tuning: the decode switches from the environment, handed to the engine (hkv bench --variants)") {
  const char* names[] = {"HKV_DN_SPLIT", "HKV_DN_TPC", "HKV_DECODE_FUSE"};
  for (const char* n : names) REQUIRE_MESSAGE(std::getenv(n) == nullptr, n << " is set: this test needs the defaults");
  Engine eng(head_layout_27b(true));
  CHECK(eng.tuning().dn_split == 2);
  CHECK(eng.tuning().dn_tpc == 2);
  CHECK(eng.tuning().decode_fuse);
  setenv("HKV_DN_SPLIT", "4", 1), setenv("HKV_DN_TPC", "1", 1), setenv("HKV_DECODE_FUSE", "0", 1);
  CHECK(eng.tuning().dn_split == 2);  // the engine's own: unchanged until handed another
  eng.set_tuning(cuda::tuning_from_env());
  CHECK(eng.tuning().dn_split == 4);
  CHECK(eng.tuning().dn_tpc == 1);
  CHECK_FALSE(eng.tuning().decode_fuse);
  for (const char* n : names) unsetenv(n);
  eng.set_tuning(cuda::tuning_from_env());
  CHECK(eng.tuning().dn_split == 2);
  CHECK(eng.tuning().decode_fuse);
}

TEST_CASE("greedy decode with the argmax on the card: the ids of argmax(forward), the same states") {
  // forward_argmax / forward_batch_argmax leave the logits on the device and return their argmax: against the
  // argmax of forward()'s logits, for a prompt, decode steps and a batch of two sequences of different lengths
  // (graphs on, the decode path's), and the sequences' states after it byte for byte.
  Model m = build_synthetic(head_layout_27b(true));
  Engine eng(m);
  eng.set_graphs(true);
  const KvFormat f = KvFormat::q4h();
  const std::vector<int32_t> prompt = random_tokens(size_t(len(30, 12)), m.config.vocab_size, 6);
  const int steps = 6;
  auto a = eng.new_sequence(f, int64_t(prompt.size()) + steps + 1),
       b = eng.new_sequence(f, int64_t(prompt.size()) + steps + 1);
  ForwardOptions o;
  o.last_only = true;
  std::vector<float> la = eng.forward(*a, prompt, o);
  std::vector<int32_t> ib = eng.forward_argmax(*b, prompt, o);
  std::string d;
  for (int i = 0; i <= steps && d.empty(); i++) {
    const int32_t want = argmax(la.data(), m.config.vocab_size);
    if (ib.size() != 1 || ib[0] != want)
      d = "step " + std::to_string(i) + ": " + (ib.empty() ? std::string("no id") : std::to_string(ib[0])) +
          " against argmax " + std::to_string(want);
    if (i < steps && d.empty()) {
      la = eng.forward(*a, {want}, o);
      ib = eng.forward_argmax(*b, {want}, o);
    }
  }
  if (d.empty()) d = compare_states(eng.download(*b), eng.download(*a), m.config);
  // a batch of two new sequences, one token and three, every row's logits wanted, twice (logits, then ids)
  if (d.empty()) {
    ForwardOptions all;
    const std::vector<std::vector<int32_t>> feed = {{5}, {prompt.begin(), prompt.begin() + 3}};
    auto a2 = eng.new_sequence(f, 16), c2 = eng.new_sequence(f, 16), a3 = eng.new_sequence(f, 16),
         c3 = eng.new_sequence(f, 16);
    const std::vector<std::vector<float>> lg = eng.forward_batch({a2.get(), c2.get()}, feed, all);
    const std::vector<std::vector<int32_t>> ids = eng.forward_batch_argmax({a3.get(), c3.get()}, feed, all);
    for (size_t sq = 0; sq < 2 && d.empty(); sq++) {
      const size_t rows = lg[sq].size() / size_t(m.config.vocab_size);
      if (ids[sq].size() != rows)
        d = "batch sequence " + std::to_string(sq) + ": " + std::to_string(ids[sq].size()) + " ids for " +
            std::to_string(rows) + " rows";
      for (size_t r = 0; r < rows && d.empty(); r++)
        if (ids[sq][r] != argmax(lg[sq].data() + r * size_t(m.config.vocab_size), m.config.vocab_size))
          d = "batch sequence " + std::to_string(sq) + " row " + std::to_string(r) + ": another id";
    }
  }
  report("greedy argmax on the card(27b-layout,mlx4,q4h,steps=" + std::to_string(steps) + ",batch of 2)", d);
}

TEST_CASE("whole model: the transformers fixtures (fixtures/hf)") {
  const auto dirs = hf_fixture_dirs();
  for (const auto& dir : dirs) {
    const std::string name = dir.filename().string();
    Model m;
    try {
      m = load_any_model(dir.string());
    } catch (const std::exception& e) {
      report("fixture(" + name + ") load", e.what());
      continue;
    }
    std::vector<int32_t> tokens = read_tokens((dir / "tokens.json").string(), m.config.vocab_size);
    if (kSmall && tokens.size() > 24) tokens.resize(24);
    Engine eng(m);
    for (const KvFormat& f : kFormats)
      report("fixture(" + name + ",format=" + f.name() + ",tokens=" + std::to_string(tokens.size()) + ")",
             engine_vs_oracle(m, eng, f, tokens, len(2, 1), true));
  }
  CHECK(!dirs.empty());
}

TEST_CASE("whole model: contexts crossing 512-key chunks, up to 4K") {
  Model tiny = load_any_model("builtin:tiny");
  Engine et(tiny);
  const int prompt = len(1100, 530), decode = len(3, 1);  // small: still across the first 512-key chunk
  for (const KvFormat& f : kFormats)
    report("long(tiny,format=" + f.name() + ",prompt=" + std::to_string(prompt) + ",decode=" + std::to_string(decode) +
               ")",
           engine_vs_oracle(tiny, et, f, random_tokens(size_t(prompt), 256, 3), decode, false));
  if (!kSmall)
    report("long(tiny,format=q4h,prompt=4090,decode=6)",
           engine_vs_oracle(tiny, et, KvFormat::q4h(), random_tokens(4090, 256, 4), 6, false));
  Model big = build_synthetic(head_layout_27b(true));
  Engine eb(big);
  const int bprompt = len(1030, 520), bdecode = len(2, 1);
  report(
      "long(27b-layout-mlx4,format=q4h,prompt=" + std::to_string(bprompt) + ",decode=" + std::to_string(bdecode) + ")",
      engine_vs_oracle(big, eb, KvFormat::q4h(), random_tokens(size_t(bprompt), 1024, 5), bdecode, false));
}

TEST_CASE("concurrent = solo: mixed lengths across 512-key chunks, batched prefill and decode, with graphs") {
  Model m = load_any_model("builtin:tiny");
  for (const KvFormat& f : kFormats) {
    Engine solo_eng(m), batch_eng(m);
    batch_eng.set_graphs(true);
    const std::vector<size_t> lens = kSmall ? std::vector<size_t>{5, 40, 530} : std::vector<size_t>{5, 530, 1030};
    const int64_t cap = kSmall ? 600 : 1100;
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = 0; i < lens.size(); i++) prompts.push_back(random_tokens(lens[i], 256, 10 + i));
    const int steps = len(4, 2);
    // solo
    std::vector<std::vector<std::vector<float>>> solo(lens.size());
    std::vector<std::vector<int32_t>> fed(lens.size());
    std::vector<SequenceState> solo_state;
    for (size_t i = 0; i < lens.size(); i++) {
      auto s = solo_eng.new_sequence(f, cap);
      ForwardOptions o;
      o.last_only = true;
      solo[i].push_back(solo_eng.forward(*s, prompts[i], o));
      for (int k = 0; k < steps; k++) {
        fed[i].push_back(argmax(solo[i].back().data(), 256));
        solo[i].push_back(solo_eng.forward(*s, {fed[i].back()}, o));
      }
      solo_state.push_back(solo_eng.download(*s));
    }
    // batched
    std::vector<std::unique_ptr<cuda::Sequence>> seqs;
    std::vector<cuda::Sequence*> ptrs;
    for (size_t i = 0; i < lens.size(); i++)
      seqs.push_back(batch_eng.new_sequence(f, cap)), ptrs.push_back(seqs.back().get());
    ForwardOptions o;
    o.last_only = true;
    std::string d;
    auto out = batch_eng.forward_batch(ptrs, prompts, o);
    for (size_t i = 0; i < lens.size() && d.empty(); i++) d = first_diff(out[i], solo[i][0]);
    for (int k = 0; k < steps && d.empty(); k++) {
      std::vector<std::vector<int32_t>> toks;
      for (size_t i = 0; i < lens.size(); i++) toks.push_back({fed[i][size_t(k)]});
      out = batch_eng.forward_batch(ptrs, toks, o);
      for (size_t i = 0; i < lens.size() && d.empty(); i++) {
        d = first_diff(out[i], solo[i][size_t(k) + 1]);
        if (!d.empty()) d = "sequence " + std::to_string(i) + " step " + std::to_string(k) + ": " + d;
      }
    }
    for (size_t i = 0; i < lens.size() && d.empty(); i++)
      d = compare_states(batch_eng.download(*seqs[i]), solo_state[i], m.config);
    report("concurrent=solo(tiny,format=" + f.name() + ",lengths=" + std::to_string(lens[0]) + "/" +
               std::to_string(lens[1]) + "/" + std::to_string(lens[2]) + ",steps=" + std::to_string(steps) + ")",
           d);
  }
}

TEST_CASE("resumed = fresh: save/restore mid-sequence, and drafted rollback = plain") {
  Model m = load_any_model("builtin:tiny-mlx4");
  Engine eng(m);
  const std::string path = (std::filesystem::temp_directory_path() / "hkv_gpu_resume.state").string();
  const int n_a = len(300, 40), n_b = len(400, 56);
  const int64_t cap = len(800, 128);
  for (const KvFormat& f : kFormats) {
    std::vector<int32_t> toks = random_tokens(size_t(n_a + n_b), 256, 20);
    std::vector<int32_t> a(toks.begin(), toks.begin() + n_a), b(toks.begin() + n_a, toks.end());
    ForwardOptions o;
    o.last_only = true;
    auto fresh = eng.new_sequence(f, cap);
    std::vector<float> lf = eng.forward(*fresh, toks, o);
    auto first = eng.new_sequence(f, cap);
    eng.forward(*first, a, o);
    eng.save(*first, path);
    first.reset();
    auto resumed = eng.restore(path, cap);
    std::vector<float> lr = eng.forward(*resumed, b, o);
    std::string d = first_diff(lr, lf);
    if (d.empty()) d = compare_states(eng.download(*resumed), eng.download(*fresh), m.config);
    report("resumed=fresh(tiny-mlx4,format=" + f.name() + "," + std::to_string(n_a) + "+" + std::to_string(n_b) + ")",
           d);

    // drafted: feed 5 drafts, roll back, feed the 2 accepted ones = feeding those 2 directly
    std::vector<int32_t> drafts = random_tokens(5, 256, 21);
    auto plain = eng.new_sequence(f, cap);
    eng.forward(*plain, a, o);
    auto drafted = eng.upload(eng.download(*plain));
    std::vector<float> lp = eng.forward(*plain, {drafts[0], drafts[1]}, o);
    auto snap = eng.snapshot(*drafted);
    eng.forward(*drafted, drafts, o);
    eng.rollback(*drafted, *snap);
    std::vector<float> ld = eng.forward(*drafted, {drafts[0], drafts[1]}, o);
    d = first_diff(ld, lp);
    if (d.empty()) d = compare_states(eng.download(*drafted), eng.download(*plain), m.config);
    report("drafted=plain(tiny-mlx4,format=" + f.name() + ",5 drafts,2 accepted)", d);
  }
  std::filesystem::remove(path);
}

TEST_CASE("synthetic weights generated on the device equal build_synthetic's") {
  std::vector<std::pair<std::string, SyntheticSpec>> specs = {{"tiny", builtin_spec("tiny")},
                                                              {"tiny-mlx4", builtin_spec("tiny-mlx4")},
                                                              {"27b-layout-mlx4", head_layout_27b(true)}};
  for (auto& [name, spec] : specs) {
    Model m = build_synthetic(spec);
    Engine host(m), dev(spec);
    std::vector<int32_t> toks = random_tokens(40, spec.config.vocab_size, 30);
    auto s1 = host.new_sequence(KvFormat::q4h(), 64), s2 = dev.new_sequence(KvFormat::q4h(), 64);
    std::string d = first_diff(dev.forward(*s2, toks), host.forward(*s1, toks));
    if (d.empty() && dev.weight_bytes_per_token() != host.weight_bytes_per_token()) d = "weight byte counts differ";
    report("device-synthetic(" + name + ")", d);
  }
}

TEST_CASE("refusals: a context that does not fit, past capacity, bad tokens") {
  Model m = load_any_model("builtin:tiny");
  Engine eng(m);
  try {
    eng.new_sequence(KvFormat::bf16(), int64_t(1) << 40);
    FAIL("a 2^40-position sequence was not refused");
  } catch (const std::runtime_error& e) {
    std::printf("refusal: %s\n", e.what());
    CHECK(std::string(e.what()).find("needs") != std::string::npos);
  }
  auto s = eng.new_sequence(KvFormat::q4h(), 4);
  CHECK_THROWS_AS(eng.forward(*s, {1, 2, 3, 4, 5}), std::runtime_error);
  CHECK_THROWS_AS(eng.forward(*s, {300}), std::runtime_error);
  CHECK_THROWS_AS(eng.new_sequence(KvFormat::parse("q4h-mid"), 4), std::runtime_error);
}
