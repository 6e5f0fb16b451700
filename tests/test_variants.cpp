// hkv bench --variants: the entries as parsed, the refusals naming the entry, and the environment each
// variant leaves (its own variables set, the others' as found) and restores.
#include <doctest/doctest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "compare/variants.h"

using namespace hkv;

namespace {
std::string env_or(const char* name, const char* none) {
  const char* e = std::getenv(name);
  return e ? e : none;
}
std::string refusal(const std::string& text) {
  try {
    parse_variants(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("variants: entries split at ';', variables at ','") {
  const std::vector<EnvVariant> v = parse_variants("default;HKV_DN_SPLIT=1,HKV_DN_TPC=1;HKV_PDL=0");
  REQUIRE(v.size() == 3);
  CHECK(v[0].text == "default");
  CHECK(v[0].vars.empty());
  CHECK(v[1].text == "HKV_DN_SPLIT=1,HKV_DN_TPC=1");
  REQUIRE(v[1].vars.size() == 2);
  CHECK(v[1].vars[0] == std::make_pair(std::string("HKV_DN_SPLIT"), std::string("1")));
  CHECK(v[1].vars[1] == std::make_pair(std::string("HKV_DN_TPC"), std::string("1")));
  CHECK(v[2].vars.size() == 1);
}

TEST_CASE("variants: bad entries are refused, naming the entry") {
  CHECK(refusal("default;HKV_PDL").find("entry 'HKV_PDL': 'HKV_PDL' has no '='") != std::string::npos);
  CHECK(refusal("HKV_PDL=").find("'HKV_PDL' has no value") != std::string::npos);
  CHECK(refusal("hkv_pdl=0").find("not a variable name") != std::string::npos);
  CHECK(refusal("1X=0").find("not a variable name") != std::string::npos);
  CHECK(refusal("A=1,A=2").find("'A' is set twice") != std::string::npos);
  CHECK(refusal("default;").find("entry ''") != std::string::npos);
  CHECK(refusal("A=1;A=2;A=3;A=4;A=5;A=6;A=7;A=8;A=9").find("at most 8") != std::string::npos);
  CHECK(refusal("A=1;A=2;A=3;A=4;A=5;A=6;A=7;A=8").empty());
}

TEST_CASE("variants: each sets its variables, the others' as found; the environment restored after") {
  setenv("HKV_TEST_VAR_A", "orig", 1);
  unsetenv("HKV_TEST_VAR_B");
  {
    EnvVariants ev(parse_variants("default;HKV_TEST_VAR_A=1;HKV_TEST_VAR_B=2,HKV_TEST_VAR_A=3"));
    ev.apply(1);
    CHECK(env_or("HKV_TEST_VAR_A", "-") == "1");
    CHECK(env_or("HKV_TEST_VAR_B", "-") == "-");
    ev.apply(2);
    CHECK(env_or("HKV_TEST_VAR_A", "-") == "3");
    CHECK(env_or("HKV_TEST_VAR_B", "-") == "2");
    ev.apply(0);  // default: as found
    CHECK(env_or("HKV_TEST_VAR_A", "-") == "orig");
    CHECK(env_or("HKV_TEST_VAR_B", "-") == "-");
    ev.apply(2);
  }
  CHECK(env_or("HKV_TEST_VAR_A", "-") == "orig");
  CHECK(env_or("HKV_TEST_VAR_B", "-") == "-");
  unsetenv("HKV_TEST_VAR_A");
}

TEST_CASE("variants: on_change runs after each apply and restore, not from the destructor") {
  int calls = 0;
  std::string seen;
  {
    EnvVariants ev(parse_variants("default;HKV_TEST_VAR_C=5"), [&] {
      calls++;
      seen += env_or("HKV_TEST_VAR_C", "-");
    });
    ev.apply(1);
    ev.apply(0);
    ev.apply(1);
    ev.restore();
  }
  CHECK(calls == 4);
  CHECK(seen == "5-5-");  // each call sees the environment already set
  CHECK(env_or("HKV_TEST_VAR_C", "-") == "-");
}

TEST_CASE("variants: a variable with the switches' prefix that is not a switch is named") {
  const std::vector<std::string> known = {"HKV_PDL", "HKV_DN_SPLIT"};
  CHECK(unknown_variable(parse_variants("default;HKV_PDL=0;HKV_DN_SPLIT=1"), known, "HKV_").empty());
  CHECK(unknown_variable(parse_variants("default;HKV_PDL=0,HKV_MV_U3=0"), known, "HKV_") == "HKV_MV_U3");
  CHECK(unknown_variable(parse_variants("OMP_NUM_THREADS=2"), known, "HKV_").empty());  // other variables pass
}
