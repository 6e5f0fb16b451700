// The engine's switches (cuda/tuning.h): every HKV_ variable cuda/ reads is in docs/TUNING.md's tables with the
// default the code has, the tables name none it no longer reads, and tuning_from_env() parses each one, takes the
// default for values outside a switch's list and refuses a bad HKV_FLASH_CFG naming the variable.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/tuning.h"
#if !HKV_HAVE_CUDA
// cuda/tuning.cpp is plain C++ in the engine's library, which a build without CUDA does not have: compiled here then.
#include "cuda/tuning.cpp"
#endif

namespace fs = std::filesystem;
using hkv::cuda::FlashCfg;
using hkv::cuda::Tuning;
using hkv::cuda::tuning_from_env;
using hkv::cuda::tuning_names;
using hkv::cuda::tuning_values;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The HKV_ variables cuda/'s C++ and CUDA sources read: every string literal that is such a name ("HKV_X", the
// argument of getenv or an entry of tuning.cpp's table), by the file that names it.
std::map<std::string, std::set<std::string>> names_read_in_cuda() {
  std::map<std::string, std::set<std::string>> out;
  const std::regex name("\"(HKV_[A-Z0-9_]+)\"");
  for (const auto& e : fs::directory_iterator(fs::path(HKV_SOURCE_DIR) / "cuda")) {
    const std::string ext = e.path().extension().string();
    if (ext != ".h" && ext != ".cuh" && ext != ".cpp" && ext != ".cu") continue;
    const std::string text = read_text(e.path());
    for (std::sregex_iterator it(text.begin(), text.end(), name), end; it != end; ++it)
      out[(*it)[1].str()].insert(e.path().filename().string());
  }
  return out;
}

// docs/TUNING.md's switch rows (five cells: variable, what it changes, default, values, bytes): variable -> its default
// cell.
std::map<std::string, std::string> documented() {
  std::map<std::string, std::string> out;
  std::istringstream in(read_text(fs::path(HKV_SOURCE_DIR) / "docs" / "TUNING.md"));
  const std::regex row(R"(^\| `(HKV_[A-Z0-9_]+)` \|[^|]*\| ([^|]*) \|[^|]*\|[^|]*\|\s*$)");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, row)) out[m[1].str()] = m[2].str();
  }
  return out;
}

// Sets the variables as given (nullopt: unset) for the scope, and puts back what was there.
class EnvScope {
 public:
  explicit EnvScope(const std::map<std::string, std::optional<std::string>>& vars) {
    for (const auto& [name, value] : vars) {
      const char* e = std::getenv(name.c_str());
      saved_[name] = e ? std::optional<std::string>(e) : std::nullopt;
      set(name, value);
    }
  }
  ~EnvScope() {
    for (const auto& [name, value] : saved_) set(name, value);
  }
  EnvScope(const EnvScope&) = delete;
  EnvScope& operator=(const EnvScope&) = delete;

 private:
  static void set(const std::string& name, const std::optional<std::string>& v) {
    if (v)
      setenv(name.c_str(), v->c_str(), 1);
    else
      unsetenv(name.c_str());
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

// Every switch unset, then the given ones set.
std::map<std::string, std::optional<std::string>> only(const std::map<std::string, std::string>& set) {
  std::map<std::string, std::optional<std::string>> vars;
  for (const std::string& n : tuning_names()) vars[n] = std::nullopt;
  for (const auto& [n, v] : set) vars[n] = v;
  return vars;
}

}  // namespace

TEST_CASE("tuning: every HKV_ variable cuda/ reads is in docs/TUNING.md, and the tables name no other") {
  const auto read = names_read_in_cuda();
  const auto docs = documented();
  REQUIRE(docs.size() >= tuning_names().size());  // the tables were found
  for (const auto& [name, files] : read) {
    std::string where;
    for (const std::string& f : files) where += " " + f;
    CHECK_MESSAGE(docs.count(name) == 1, name << " (read in cuda/:" << where << ") is not in docs/TUNING.md's tables");
  }
  for (const auto& [name, dflt] : docs)
    CHECK_MESSAGE(read.count(name) == 1, name << " is in docs/TUNING.md's tables, but nothing in cuda/ reads it");
  for (const std::string& name : tuning_names())  // (the table in tuning.cpp is among what the grep finds)
    CHECK_MESSAGE(read.count(name) == 1, name << " is a switch of tuning.cpp that the grep of cuda/ missed");
}

TEST_CASE("tuning: docs/TUNING.md's default for each switch is the code's") {
  const auto docs = documented();
  for (const auto& [name, value] : tuning_values(Tuning{})) {
    CAPTURE(name);
    REQUIRE(docs.count(name) == 1);
    const std::string cell = docs.at(name);
    CHECK_MESSAGE(cell.rfind(value, 0) == 0,
                  name << ": the code's default is " << value << ", TUNING.md says '" << cell << "'");
  }
}

TEST_CASE("tuning: nothing set gives the defaults; each value in a switch's list is taken") {
  {
    EnvScope env(only({}));
    CHECK(tuning_values(tuning_from_env()) == tuning_values(Tuning{}));
    CHECK(hkv::cuda::tuning_text(tuning_from_env()).find("(the defaults)") != std::string::npos);
  }
  {
    EnvScope env(only({{"HKV_PDL", "0"},
                       {"HKV_MV_PF", "9"},
                       {"HKV_ATTN_SLIM", "2"},
                       {"HKV_ATTN_SLIM_FROM", "30"},
                       {"HKV_ATTN_VU", "8"},
                       {"HKV_DN_SPLIT", "4"},
                       {"HKV_DN_TPC", "1"},
                       {"HKV_DECODE_FUSE", "0"},
                       {"HKV_FLASH_CFG", "wg"}}));
    const Tuning t = tuning_from_env();
    CHECK_FALSE(t.pdl);
    CHECK(t.pdl_all);  // not set: the default
    CHECK(t.mv_prefetch == 9);
    CHECK(t.attn_slim == 2);
    CHECK(t.attn_slim_from == 30);
    CHECK(t.attn_value_unroll == 8);
    CHECK(t.dn_split == 4);
    CHECK(t.dn_tpc == 1);
    CHECK_FALSE(t.decode_fuse);
    CHECK(t.flash == FlashCfg::Wg);
    const std::string text = hkv::cuda::tuning_text(t);
    CHECK_MESSAGE(text.find("(not default: HKV_PDL=0 HKV_MV_PF=9") != std::string::npos, text);
  }
}

TEST_CASE("tuning: tuning_values gives the environment that reads back as the same tuning") {
  Tuning t;
  t.pdl = t.pdl_all = t.mv_stage = t.mv_normw = t.decode_fuse = t.out_trigger = t.merge_fast = false;
  t.dn_fused = t.dn_early = t.dn_preload = false;
  t.mv_prefetch = 1, t.attn_slim = 0, t.attn_slim_from = 12, t.attn_value_unroll = 4, t.dn_split = 1, t.dn_tpc = 1;
  t.attn_q4h_form = 1;
  t.merge_wide = !Tuning{}.merge_wide;
  t.attn_bf16_halves = !Tuning{}.attn_bf16_halves;
  t.flash = FlashCfg::F4x1;
  std::map<std::string, std::string> vars;
  for (const auto& [name, value] : tuning_values(t)) vars[name] = value;
  CHECK(vars.size() == tuning_names().size());
  EnvScope env(only(vars));
  CHECK(tuning_values(tuning_from_env()) == tuning_values(t));
  for (const auto& [name, value] : tuning_values(Tuning{}))  // every switch moved: a member the table misses shows
    CHECK_MESSAGE(vars.at(name) != value, name << " kept its default");
}

TEST_CASE("tuning: a value outside a switch's list takes the default; a bad HKV_FLASH_CFG is refused, named") {
  {
    EnvScope env(only({{"HKV_PDL", "off"}, {"HKV_MV_PF", "5"}, {"HKV_DN_SPLIT", "3"}, {"HKV_ATTN_VU", ""}}));
    CHECK(tuning_values(tuning_from_env()) == tuning_values(Tuning{}));
  }
  for (const char* v : {"", "auto"}) {
    EnvScope env(only({{"HKV_FLASH_CFG", v}}));
    CHECK(tuning_from_env().flash == FlashCfg::Auto);
  }
  for (const char* v : {"8x2", "4x1", "wg", "wg2"}) {
    EnvScope env(only({{"HKV_FLASH_CFG", v}}));
    CHECK(std::string(hkv::cuda::flash_cfg_name(tuning_from_env().flash)) == v);
  }
  EnvScope env(only({{"HKV_FLASH_CFG", "wg3"}}));
  try {
    tuning_from_env();
    FAIL("HKV_FLASH_CFG=wg3 was accepted");
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    CHECK_MESSAGE(m.find("HKV_FLASH_CFG=wg3") != std::string::npos, m);
    CHECK_MESSAGE(m.find("auto, 8x2, 4x1, wg or wg2") != std::string::npos, m);
  }
}
