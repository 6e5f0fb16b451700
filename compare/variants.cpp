#include "compare/variants.h"

#include <cstdlib>
#include <stdexcept>

namespace hkv {

namespace {
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t e; (e = s.find(sep, b)) != std::string::npos; b = e + 1) out.push_back(s.substr(b, e - b));
  out.push_back(s.substr(b));
  return out;
}
bool valid_name(const std::string& n) {
  if (n.empty() || (n[0] >= '0' && n[0] <= '9')) return false;
  for (char c : n)
    if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}
}  // namespace

std::vector<EnvVariant> parse_variants(const std::string& text) {
  std::vector<EnvVariant> out;
  for (const std::string& entry : split(text, ';')) {
    auto bad = [&](const std::string& why) {
      return std::invalid_argument("--variants: entry '" + entry + "': " + why +
                                   " (expected default or NAME=VALUE[,NAME=VALUE], entries separated by ';')");
    };
    EnvVariant v{entry, {}};
    if (entry != "default") {
      for (const std::string& kv : split(entry, ',')) {
        const size_t eq = kv.find('=');
        if (eq == std::string::npos) throw bad("'" + kv + "' has no '='");
        const std::string name = kv.substr(0, eq), value = kv.substr(eq + 1);
        if (!valid_name(name)) throw bad("'" + name + "' is not a variable name (A-Z, 0-9, _)");
        if (value.empty()) throw bad("'" + name + "' has no value");
        for (const auto& [n, _] : v.vars)
          if (n == name) throw bad("'" + name + "' is set twice");
        v.vars.emplace_back(name, value);
      }
    }
    out.push_back(std::move(v));
  }
  if (out.size() > 8) throw std::invalid_argument("--variants: " + std::to_string(out.size()) + " entries (at most 8)");
  return out;
}

std::string unknown_variable(const std::vector<EnvVariant>& variants, const std::vector<std::string>& known,
                             const std::string& prefix) {
  for (const EnvVariant& v : variants)
    for (const auto& [name, value] : v.vars) {
      if (name.rfind(prefix, 0) != 0) continue;
      bool found = false;
      for (const std::string& k : known) found = found || k == name;
      if (!found) return name;
    }
  return "";
}

EnvVariants::EnvVariants(std::vector<EnvVariant> variants, std::function<void()> on_change)
    : variants_(std::move(variants)), on_change_(std::move(on_change)) {
  for (const EnvVariant& v : variants_)
    for (const auto& [name, _] : v.vars) {
      bool seen = false;
      for (const auto& s : saved_) seen = seen || s.first == name;
      if (seen) continue;
      const char* e = std::getenv(name.c_str());
      saved_.emplace_back(name, e ? std::optional<std::string>(e) : std::nullopt);
    }
}

namespace {
void set_saved(const std::vector<std::pair<std::string, std::optional<std::string>>>& saved) {
  for (const auto& [name, value] : saved) {
    if (value)
      setenv(name.c_str(), value->c_str(), 1);
    else
      unsetenv(name.c_str());
  }
}
}  // namespace

EnvVariants::~EnvVariants() { set_saved(saved_); }

void EnvVariants::restore() {
  set_saved(saved_);
  if (on_change_) on_change_();
}

void EnvVariants::apply(size_t i) {
  set_saved(saved_);
  for (const auto& [name, value] : variants_.at(i).vars) setenv(name.c_str(), value.c_str(), 1);
  if (on_change_) on_change_();
}

}  // namespace hkv
