// The command line as its users meet it: the built `hkv` run as a subprocess (tests/hkv_process.h).
//
// Bad invocations come from two tables: one made from the parser itself (every subcommand with an unknown option,
// each option without its value, each choice with a value that is not one, each count with a negative number),
// and one written by hand for the cases a user reported. Each must exit 2 with one line on stderr that starts
// "hkv: error: hkv CMD: " and says what was wrong. Good invocations: each command's help lists every option the
// parser holds, docs/CLI.md is the parser's own Markdown, and the verdicts need evidence.
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compare/cli.h"
#include "compare/commands.h"
#include "compare/gate.h"
#include "hkv_process.h"
#include "hkv_version.h"
#include "reference/synthetic.h"

namespace fs = std::filesystem;
using hkv_test::HkvRun;

namespace {

struct Scratch {
  fs::path path;
  Scratch() {
    path = fs::temp_directory_path() / ("hkv_test_cli_" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~Scratch() { fs::remove_all(path); }
};

HkvRun run(const Scratch& s, const std::vector<std::string>& args) { return hkv_test::run_hkv_in(s.path, args); }

std::string joined(const std::vector<std::string>& args) {
  std::string s = "hkv";
  for (const std::string& a : args) s += " " + a;
  return s;
}

bool has_validator(CLI::Option* o, const std::string& name) {
  try {
    return o->get_validator(name) != nullptr;
  } catch (const CLI::OptionNotFound&) {
    return false;
  }
}

// A value that satisfies an option's grammar, for options that must be given before another one can be tried.
std::vector<std::string> required_args(CLI::App* sub) {
  std::vector<std::string> v;
  for (CLI::Option* o : sub->get_options())
    if (o->get_required() && !o->get_lnames().empty()) v.insert(v.end(), {"--" + o->get_lnames().front(), "x"});
  return v;
}

}  // namespace

TEST_CASE("cli: the number syntax of every count") {
  const std::vector<std::pair<std::string, long long>> good = {{"0", 0},     {"1024", 1024},  {"8K", 8192},
                                                               {"8k", 8192}, {"1M", 1048576}, {"262144", 262144},
                                                               {"-3", -3},   {"+5", 5},       {"256K", 262144}};
  for (const auto& [s, want] : good) {
    CAPTURE(s);
    long long v = 0;
    REQUIRE(hkv::parse_count(s, &v));
    CHECK(v == want);
  }
  for (const std::string s :
       {"", "K", "1.5K", "1KB", "8 K", "0x10", "12a", "-", "99999999999999999999", "4611686018427387904K"}) {
    CAPTURE(s);
    long long v = 0;
    CHECK_FALSE(hkv::parse_count(s, &v));
  }
}

TEST_CASE("cli: the parser's table of bad invocations: every command refuses, exit 2, one line naming the option") {
  Scratch s;
  hkv::Cli cli;
  int cases = 0;
  for (CLI::App* sub : cli.app.get_subcommands({})) {
    const std::string cmd = sub->get_name(), where = "hkv: error: hkv " + cmd + ": ";
    const std::vector<std::string> req = required_args(sub);
    auto refused = [&](std::vector<std::string> args, const std::string& want) {
      args.insert(args.begin(), cmd);
      CAPTURE(joined(args));
      const HkvRun r = run(s, args);
      INFO("stderr: ", r.err);
      CHECK(r.code == 2);
      CHECK(r.first_err_line().rfind(where, 0) == 0);
      CHECK(r.first_err_line().find(want) != std::string::npos);
      CHECK(r.out.empty());
      cases++;
    };
    refused({"--no-such-option"}, "unknown option --no-such-option");
    refused({"--no-such-option=3"}, "unknown option --no-such-option");
    for (CLI::Option* o : sub->get_options()) {
      if (o->get_lnames().empty() || o->get_lnames().front() == "help") continue;
      const std::string name = "--" + o->get_lnames().front();
      if (o->get_type_name().empty() || o->get_items_expected_max() == 0) continue;  // a flag
      std::vector<std::string> rest = req;
      for (size_t i = 0; i + 1 < rest.size(); i += 2)
        if (rest[i] == name) rest.erase(rest.begin() + long(i), rest.begin() + long(i) + 2);
      std::vector<std::string> no_value = rest;
      no_value.push_back(name);
      refused(no_value, name + " needs a value");
      if (has_validator(o, "choice")) {
        std::vector<std::string> bad = rest;
        bad.insert(bad.end(), {name, "nope"});
        refused(bad, name + ": 'nope' is not one of ");
      }
      if (has_validator(o, "count")) {
        std::vector<std::string> bad = rest;
        bad.insert(bad.end(), {name, "-3"});
        refused(bad, name + ": '-3' is not ");
        bad.back() = "3.5";
        refused(bad, name + ": wants ");
      }
      if (has_validator(o, "format")) {
        std::vector<std::string> bad = rest;
        bad.insert(bad.end(), {name, "q5x"});
        refused(bad, name + ": ");
      }
    }
  }
  MESSAGE(cases, " bad invocations refused");
  CHECK(cases > 100);
}

TEST_CASE("cli: the reported bad invocations") {
  Scratch s;
  const std::string fixtures = std::string(HKV_SOURCE_DIR) + "/fixtures";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"format", "--bogus"}, "hkv: error: hkv format: unknown option --bogus (`hkv format --help` lists the options)"},
      {{"gate", "--depth", "1K"}, "hkv: error: hkv gate: unknown option --depth (did you mean --depths?)"},
      {{"gate", "--rows", "-3"}, "hkv: error: hkv gate: --rows: '-3' is not at least 1"},
      {{"gate", "--rows", "0"}, "hkv: error: hkv gate: --rows: '0' is not at least 1"},
      {{"gate", "--depths", "1K,,x"}, "hkv: error: hkv gate: --depths: wants numbers like 1024, 8K or 1M"},
      {{"gate", "--budget", "5", "--backend", "cuda"}, "hkv: error: hkv gate: --budget bounds the CPU gate's"},
      {{"diff", "--op", "nope"}, "hkv: error: hkv diff: no case matches --op nope"},
      {{"diff", "--filter", "("}, "hkv: error: hkv diff: --filter '(' is not a regular expression"},
      {{"bench", "--graphs", "foo"}, "hkv: error: hkv bench: --graphs: 'foo' is not one of on, off"},
      {{"bench", "--depths", "1K", "--tokens", "0"}, "hkv: error: hkv bench: --tokens: '0' is not at least 1"},
      {{"logits", "--threads", "0", "--model", "builtin:tiny", "--tokens", "t", "--out", "o"},
       "hkv: error: hkv logits: --threads: '0' is not between 1 and 4096"},
      {{"logits", "--model", "builtin:tiny"}, "hkv: error: hkv logits: --tokens is required"},
      {{"generate", "--model", "builtin:tiny", "--prompt", "a", "--tokens", "t"},
       "hkv: error: hkv generate: --prompt excludes --tokens"},
      {{"generate", "--model", fixtures + "/nope", "--prompt", "a"},
       "hkv: error: " + fixtures + "/nope: no such file or folder"},
      {{"generate", "--model", fixtures + "/trained", "--prompt", "a"},
       "hkv: error: " + fixtures + "/trained: no config.json here; did you mean " + fixtures + "/trained/hf or " +
           fixtures + "/trained/mlx?"},
      {{"gat"}, "hkv: error: hkv: unknown command 'gat' (did you mean gate?)"},
      {{"hash"}, "hkv: error: hkv hash: files is required"},
      {{"format", "extra"}, "hkv: error: hkv format: unexpected argument 'extra'"},
  };
  for (const auto& [args, want] : cases) {
    CAPTURE(joined(args));
    const HkvRun r = run(s, args);
    INFO("stderr: ", r.err);
    CHECK(r.code == 2);
    CHECK(r.first_err_line().rfind(want, 0) == 0);
  }
}

TEST_CASE("cli: each command's help lists every option its parser takes, for -h and --help alike") {
  Scratch s;
  hkv::Cli cli;
  const HkvRun top = run(s, {"--help"});
  CHECK(top.code == 0);
  for (CLI::App* sub : cli.app.get_subcommands({})) {
    const std::string cmd = sub->get_name();
    CAPTURE(cmd);
    CHECK(top.out.find("  " + cmd + " ") != std::string::npos);
    const HkvRun help = run(s, {cmd, "--help"}), h = run(s, {cmd, "-h"});
    CHECK(help.code == 0);
    CHECK(help.err.empty());
    CHECK(h.code == 0);
    CHECK(h.out == help.out);
    CHECK(help.out.find("Usage: hkv " + cmd + " ") != std::string::npos);
    int listed = 0;
    for (CLI::Option* o : sub->get_options()) {
      const std::string name = o->get_lnames().empty() ? o->get_name() : "--" + o->get_lnames().front();
      CAPTURE(name);
      CHECK(help.out.find(name) != std::string::npos);
      listed++;
    }
    CHECK(listed >= 2);  // at least one option besides --help
  }
  const HkvRun v = run(s, {"--version"});
  CHECK(v.code == 0);
  CHECK(v.out.rfind("hkv " + std::string(kHkvVersion) + " (commit " + kHkvCommit + ")", 0) == 0);
}

TEST_CASE("cli: docs/CLI.md is the parser's Markdown, and README names every command") {
  hkv::Cli cli;
  const std::string doc = hkv_test::read_text(fs::path(HKV_SOURCE_DIR) / "docs" / "CLI.md");
  CHECK_MESSAGE(doc == cli.markdown_help(),
                "docs/CLI.md differs from the parser: regenerate it with `build/hkv --markdown-help > docs/CLI.md`");
  const std::string readme = hkv_test::read_text(fs::path(HKV_SOURCE_DIR) / "README.md");
  for (CLI::App* sub : cli.app.get_subcommands({})) {
    CAPTURE(sub->get_name());
    CHECK(readme.find("hkv " + sub->get_name()) != std::string::npos);
  }
}

TEST_CASE("cli: a gate that scores nothing has no verdict (exit 2), and lists what it skipped") {
  Scratch s;
  const std::string fixture = std::string(HKV_SOURCE_DIR) + "/fixtures/tiny-gate.json";
  const HkvRun r = run(s, {"gate", "--fixture", fixture, "--depths", "300K", "--formats", "q4h", "--no-floor"});
  INFO("stderr: ", r.err);
  CHECK(r.code == 2);
  CHECK(r.out.find("q4h        300K  skipped: beyond max_position_embeddings 262144") != std::string::npos);
  CHECK(r.out.find("gate: NO VERDICT (0 format-depth results scored, 1 skipped)") != std::string::npos);
  CHECK(r.err.find("hkv: error: hkv gate: no format-depth result was scored") != std::string::npos);
}

TEST_CASE("cli: the gate's reports name the commit and the machine, and no absolute path") {
  Scratch s;
  const std::string fixture = std::string(HKV_SOURCE_DIR) + "/fixtures/tiny-gate.json";
  const std::string json = (s.path / "gate.json").string(), md = (s.path / "gate.md").string();
  const HkvRun r = run(s, {"gate", "--fixture", fixture, "--depths", "1K", "--rows", "32", "--formats", "q4h",
                           "--no-floor", "--json", json, "--md", md, "--threads", "2"});
  INFO("stderr: ", r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("gate: PASS (1 format-depth result scored, 0 skipped)") != std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(hkv_test::read_text(json));
  CHECK(j["commit"] == kHkvCommit);
  CHECK(j["machine"].get<std::string>().find("2 threads") != std::string::npos);
  CHECK(j["model"] == "builtin:tiny");
  CHECK(j["rows_scored"] == 1);
  CHECK(j["results"][0]["depth"] == 1024);
  for (const std::string& text : {hkv_test::read_text(json), hkv_test::read_text(md)}) {
    CHECK(text.find(HKV_SOURCE_DIR) == std::string::npos);
    CHECK(text.find(s.path.string()) == std::string::npos);
  }
  // Progress goes to stderr as lines, also when it is not a terminal; each depth ends with its own line.
  CHECK(r.err.find("gate: depth 1K: ") != std::string::npos);
  CHECK(r.err.find(" tokens fed, ") != std::string::npos);
  CHECK(r.err.find("done in ") != std::string::npos);
}

TEST_CASE("cli: the CPU gate without --depths runs the depths that fit its budget and lists the rest") {
  // The estimate reproduces the two runs it was fitted to (the trained fixture, 4 sides, 2 threads): 15 s at 1K
  // and 238 s at 8K; within 10%.
  const hkv::Model m = hkv::load_any_model(std::string(HKV_SOURCE_DIR) + "/fixtures/trained/hf");
  CHECK(hkv::oracle_gate_seconds(m.config, 1024, 256, 4, 2) == doctest::Approx(15).epsilon(0.1));
  CHECK(hkv::oracle_gate_seconds(m.config, 8192, 256, 4, 2) == doctest::Approx(238).epsilon(0.1));
  CHECK(hkv::oracle_gate_seconds(m.config, 8192, 256, 4, 4) == doctest::Approx(119).epsilon(0.1));

  // The trained fixture with a budget of one minute: 1K fits (~4 s), 8K (~1 min) and deeper are listed as left out,
  // with how to ask for them.
  Scratch s;
  const std::string fixture = std::string(HKV_SOURCE_DIR) + "/fixtures/trained-gate.json";
  const HkvRun r =
      run(s, {"gate", "--fixture", fixture, "--rows", "32", "--formats", "q4h", "--no-floor", "--budget", "1"});
  INFO("stderr: ", r.err);
  REQUIRE(r.code == 0);
  CHECK(r.err.find("gate: on the CPU, the depths estimated to fit 60 s: 1K (~") != std::string::npos);
  CHECK(r.err.find("gate: left out: 8K,32K,64K,128K,256K (ask for them with --depths 8K,32K,64K,128K,256K") !=
        std::string::npos);
  CHECK(r.out.find("q4h        256K  skipped: left out on the CPU: ~") != std::string::npos);
  CHECK(r.out.find("(--depths 256K runs it)") != std::string::npos);
  CHECK(r.out.find("gate: PASS (") != std::string::npos);
}

TEST_CASE("cli: generate prints text for a byte-level model, ids with --ids") {
  Scratch s;
  const HkvRun text = run(s, {"generate", "--model", "builtin:tiny", "--prompt", "abc", "--n", "5", "--threads", "1"});
  const HkvRun ids =
      run(s, {"generate", "--model", "builtin:tiny", "--prompt", "abc", "--n", "5", "--threads", "1", "--ids"});
  REQUIRE(text.code == 0);
  REQUIRE(ids.code == 0);
  REQUIRE(ids.out.front() == '[');
  // The ids, read back, are the text's bytes.
  const nlohmann::json j = nlohmann::json::parse(ids.out);
  REQUIRE(j.size() == 5);
  std::string bytes;
  for (const auto& t : j) bytes += char(static_cast<unsigned char>(t.get<int>()));
  CHECK(text.out == bytes + "\n");
}

TEST_CASE("cli: format --grids --fixture adds the model's K and V rows; --fixture and --tokens need what they extend") {
  Scratch s;
  const std::string fixture = std::string(HKV_SOURCE_DIR) + "/fixtures/trained-gate.json";
  const HkvRun r = run(s, {"format", "--grids", "--fixture", fixture, "--tokens", "32", "--rows", "8"});
  INFO("stderr: ", r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("over the first 32 tokens of its text") != std::string::npos);
  CHECK(r.out.find("| model K RMS | model K worst | model V RMS | model V worst |") != std::string::npos);
  // Without --grids, --fixture means nothing; without --fixture, --tokens means nothing: both refused, exit 2.
  CHECK(run(s, {"format", "--fixture", fixture}).code == 2);
  CHECK(run(s, {"format", "--grids", "--tokens", "32"}).code == 2);
  // More tokens than the fixture's text: refused, naming the token file.
  const HkvRun big = run(s, {"format", "--grids", "--fixture", fixture, "--tokens", "100M", "--rows", "8"});
  CHECK(big.code != 0);
  CHECK(big.err.find("exceeds the fixture's text") != std::string::npos);
  // A head_dim other than the model's: refused, naming both.
  const HkvRun hd = run(s, {"format", "--grids", "--fixture", fixture, "--head-dim", "128", "--rows", "8"});
  CHECK(hd.code == 2);
  CHECK(hd.err.find("differs from the fixture's model (256)") != std::string::npos);
}
