// The peer file behind `hkv bench --peer`: what it accepts, what it refuses (naming the field), and which of the
// peer's cache types stands beside each hkv format.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "compare/peer.h"

using hkv::parse_peer;

namespace {

std::string error_of(const std::string& text) {
  try {
    parse_peer(text, "peer.json");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("peer: a llama-bench file, each figure beside the hkv format of the same bytes a row") {
  const auto p = parse_peer(R"({"peer":"llama.cpp","commit":"abc","card":"NVIDIA H100 80GB HBM3","results":[
      {"depth":1024,"kv":"f16","tokens_per_s":40.5},{"depth":1024,"kv":"q4_0","tokens_per_s":39.0},
      {"depth":32768,"kv":"q4_0","tokens_per_s":31.25}]})",
                            "peer.json");
  CHECK(p.peer == "llama.cpp");
  CHECK(p.card == "NVIDIA H100 80GB HBM3");
  REQUIRE(p.results.size() == 3);
  REQUIRE(p.beside("bf16", 1024).has_value());
  CHECK(p.beside("bf16", 1024)->tokens_per_s == 40.5);
  CHECK(p.beside("q4h", 32768)->tokens_per_s == 31.25);
  CHECK_FALSE(p.beside("bf16", 32768).has_value());  // not measured
  CHECK_FALSE(p.beside("fp8", 1024).has_value());
  CHECK_FALSE(p.beside("q4h-nf", 1024).has_value());  // an oracle ablation has no peer
  CHECK(hkv::peer_kv_for("fp8") == "q8_0");
}

TEST_CASE("peer: a bad file is refused, naming the file and the field") {
  CHECK(error_of("{").find("peer.json: not JSON") == 0);
  CHECK(error_of("[]") == "peer.json: not a JSON object");
  CHECK(error_of(R"({"card":"x","results":[]})") == "peer.json: field 'peer': missing");
  CHECK(error_of(R"({"peer":"p","results":[]})") == "peer.json: field 'card': missing");
  CHECK(error_of(R"({"peer":"p","card":"c"})") == "peer.json: field 'results': missing or not an array");
  CHECK(error_of(R"({"peer":"p","card":"c","results":[{"kv":"f16","tokens_per_s":1}]})") ==
        "peer.json: field 'results[0].depth': missing or not a positive integer");
  CHECK(error_of(R"({"peer":"p","card":"c","results":[{"depth":1,"tokens_per_s":1}]})") ==
        "peer.json: field 'results[0].kv': missing or not a cache type");
  CHECK(error_of(R"({"peer":"p","card":"c","results":[{"depth":1,"kv":"f16","tokens_per_s":-3}]})") ==
        "peer.json: field 'results[0].tokens_per_s': not a positive finite rate");
  CHECK(error_of(R"({"peer":"p","card":"c","results":[{"depth":1,"kv":"f16","tokens_per_s":"fast"}]})") ==
        "peer.json: field 'results[0].tokens_per_s': missing or not a number");
  CHECK(error_of(R"({"peer":"p","card":"c","results":[{"depth":1,"kv":"f16","tokens_per_s":2},
                                                       {"depth":1,"kv":"f16","tokens_per_s":3}]})") ==
        "peer.json: field 'results[1]': a second result for depth 1 and kv f16");
  CHECK(error_of(R"({"peer":"p","card":"c","results":[]})").empty());
  CHECK_THROWS_WITH(hkv::load_peer("/nonexistent/peer.json"), "/nonexistent/peer.json: cannot be read");
}
