#include "compare/peer.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "reference/tokens.h"  // read_file

namespace hkv {

std::string peer_kv_for(const std::string& format) {
  if (format == "bf16") return "f16";
  if (format == "fp8") return "q8_0";
  if (format == "q4h") return "q4_0";
  return "";
}

std::optional<PeerResult> PeerFigures::beside(const std::string& format, int64_t depth) const {
  const std::string kv = peer_kv_for(format);
  for (const PeerResult& r : results)
    if (r.depth == depth && r.kv == kv) return r;
  return std::nullopt;
}

PeerFigures parse_peer(const std::string& json_text, const std::string& path) {
  auto bad = [&path](const std::string& field, const std::string& why) {
    return std::runtime_error(path + ": field '" + field + "': " + why);
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(path + ": not JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw std::runtime_error(path + ": not a JSON object");
  PeerFigures p;
  p.path = path;
  auto text = [&](const char* key, bool required) {
    if (!j.contains(key)) {
      if (required) throw bad(key, "missing");
      return std::string();
    }
    if (!j[key].is_string()) throw bad(key, "not a string");
    return j[key].get<std::string>();
  };
  p.peer = text("peer", true);
  p.card = text("card", true);
  p.commit = text("commit", false);
  p.model = text("model", false);
  if (!j.contains("results") || !j["results"].is_array()) throw bad("results", "missing or not an array");
  for (size_t i = 0; i < j["results"].size(); i++) {
    const nlohmann::json& r = j["results"][i];
    const std::string at = "results[" + std::to_string(i) + "]";
    if (!r.is_object()) throw bad(at, "not an object");
    PeerResult pr;
    if (!r.contains("depth") || !r["depth"].is_number_integer() || r["depth"].get<int64_t>() < 1)
      throw bad(at + ".depth", "missing or not a positive integer");
    pr.depth = r["depth"].get<int64_t>();
    if (!r.contains("kv") || !r["kv"].is_string() || r["kv"].get<std::string>().empty())
      throw bad(at + ".kv", "missing or not a cache type");
    pr.kv = r["kv"].get<std::string>();
    if (!r.contains("tokens_per_s") || !r["tokens_per_s"].is_number())
      throw bad(at + ".tokens_per_s", "missing or not a number");
    pr.tokens_per_s = r["tokens_per_s"].get<double>();
    if (!(pr.tokens_per_s > 0) || !std::isfinite(pr.tokens_per_s))
      throw bad(at + ".tokens_per_s", "not a positive finite rate");
    for (const PeerResult& o : p.results)
      if (o.depth == pr.depth && o.kv == pr.kv)
        throw bad(at, "a second result for depth " + std::to_string(pr.depth) + " and kv " + pr.kv);
    p.results.push_back(pr);
  }
  return p;
}

PeerFigures load_peer(const std::string& path) { return parse_peer(read_file(path), path); }

}  // namespace hkv
