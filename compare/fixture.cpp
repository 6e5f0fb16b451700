#include "compare/fixture.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "reference/kvformat.h"
#include "reference/tokens.h"

namespace hkv {

namespace fs = std::filesystem;
using nlohmann::json;

static std::runtime_error field_error(const std::string& path, const std::string& field, const std::string& what) {
  return std::runtime_error(path + ": field '" + field + "': " + what);
}

// Passphrase parts: a string (bytes as tokens) or an array of token ids.
static std::vector<int32_t> token_list(const json& j, const std::string& path, const std::string& field) {
  std::vector<int32_t> out;
  if (j.is_string()) {
    for (unsigned char ch : j.get<std::string>()) out.push_back(ch);
  } else if (j.is_array()) {
    for (const json& e : j) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0) throw field_error(path, field, "expected token ids");
      out.push_back(int32_t(e.get<int64_t>()));
    }
  } else {
    throw field_error(path, field, "expected a string or an array of token ids");
  }
  if (out.empty()) throw field_error(path, field, "is empty");
  return out;
}

Fixture parse_fixture(const std::string& text, const std::string& path) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw std::runtime_error(path + ": expected a JSON object");
  const fs::path dir = fs::path(path).parent_path();
  auto resolve = [&dir](const std::string& p) { return fs::path(p).is_absolute() ? p : (dir / p).string(); };
  auto need = [&](const char* key) -> const json& {
    if (!j.contains(key)) throw field_error(path, key, "is missing");
    return j[key];
  };
  Fixture f;
  f.path = path;
  if (!need("name").is_string()) throw field_error(path, "name", "expected a string");
  f.name = j["name"].get<std::string>();
  f.description = j.value("description", "");
  if (!need("model").is_string()) throw field_error(path, "model", "expected a string");
  f.model = j["model"].get<std::string>();
  f.model_field = f.model;
  if (f.model.rfind("builtin:", 0) != 0) f.model = resolve(f.model);

  const json& t = need("tokens");
  if (!t.is_object() || !t.contains("path") || !t["path"].is_string())
    throw field_error(path, "tokens.path", "is missing");
  f.tokens_path = resolve(t["path"].get<std::string>());
  if (!t.contains("xxh64") || !t["xxh64"].is_string() || t["xxh64"].get<std::string>().size() != 16)
    throw field_error(path, "tokens.xxh64", "expected 16 hex digits");
  f.tokens_xxh64 = t["xxh64"].get<std::string>();
  f.tokens_sha256 = t.value("sha256", "");

  if (j.contains("depths")) {
    if (!j["depths"].is_array() || j["depths"].empty()) throw field_error(path, "depths", "expected a non-empty array");
    for (const json& d : j["depths"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 2) throw field_error(path, "depths", "expected integers >= 2");
      f.depths.push_back(d.get<int64_t>());
    }
  }
  if (j.contains("rows")) {
    if (!j["rows"].is_number_integer() || j["rows"].get<int64_t>() < 1)
      throw field_error(path, "rows", "expected a positive integer");
    f.rows = j["rows"].get<int64_t>();
  }
  if (j.contains("formats")) {
    if (!j["formats"].is_array()) throw field_error(path, "formats", "expected an array");
    for (const json& x : j["formats"]) {
      if (!x.is_string()) throw field_error(path, "formats", "expected strings");
      try {
        KvFormat::parse(x.get<std::string>());
      } catch (const std::exception& e) {
        throw field_error(path, "formats", e.what());
      }
      f.formats.push_back(x.get<std::string>());
    }
  }
  if (j.contains("passphrase")) {
    const json& p = j["passphrase"];
    for (const char* k : {"plant", "ask", "answer"})
      if (!p.contains(k)) throw field_error(path, std::string("passphrase.") + k, "is missing");
    f.plant = token_list(p["plant"], path, "passphrase.plant");
    f.ask = token_list(p["ask"], path, "passphrase.ask");
    f.answer = token_list(p["answer"], path, "passphrase.answer");
  }
  if (j.contains("recall")) {
    if (!j["recall"].is_array()) throw field_error(path, "recall", "expected an array of probes");
    for (size_t i = 0; i < j["recall"].size(); i++) {
      const json& p = j["recall"][i];
      const std::string at = "recall[" + std::to_string(i) + "]";
      if (!p.is_object()) throw field_error(path, at, "expected an object");
      RecallProbe r;
      if (!p.contains("at") || !p["at"].is_number() || !(p["at"].get<double>() > 0 && p["at"].get<double>() < 1))
        throw field_error(path, at + ".at", "expected a number between 0 and 1 (a share of the context)");
      r.at = p["at"].get<double>();
      for (const char* k : {"plant", "ask", "answer"})
        if (!p.contains(k)) throw field_error(path, at + "." + k, "is missing");
      r.plant = token_list(p["plant"], path, at + ".plant");
      r.ask = token_list(p["ask"], path, at + ".ask");
      r.answer = token_list(p["answer"], path, at + ".answer");
      f.recall.push_back(std::move(r));
    }
  }
  if (j.contains("bars")) {
    const json& b = j["bars"];
    if (b.contains("kl_mean")) f.bar_kl_mean = b["kl_mean"].get<double>();
    if (b.contains("kl_max")) f.bar_kl_max = b["kl_max"].get<double>();
  }
  if (j.contains("golden")) {
    if (!j["golden"].is_object()) throw field_error(path, "golden", "expected an object");
    for (auto& [k, v] : j["golden"].items()) f.golden[k] = v.get<std::string>();
  }
  return f;
}

Fixture load_fixture(const std::string& path) { return parse_fixture(read_file(path), path); }

std::vector<int32_t> load_fixture_tokens(const Fixture& f, int64_t vocab) {
  std::string bytes = read_file(f.tokens_path);
  std::string got = xxh64_hex(bytes.data(), bytes.size());
  if (got != f.tokens_xxh64)
    throw std::runtime_error(f.path + ": field 'tokens.xxh64': " + f.tokens_path + " has xxh64 " + got +
                             " but the fixture expects " + f.tokens_xxh64);
  return read_tokens(f.tokens_path, vocab);
}

}  // namespace hkv
