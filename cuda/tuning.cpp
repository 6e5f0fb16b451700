// Tuning from the environment, and back as text (cuda/tuning.h). One table names every decode switch, its member,
// its values and so its default (the member's initializer); HKV_FLASH_CFG, the one switch that is not a number, is
// read beside it.
#include "cuda/tuning.h"

#include <cstdlib>
#include <stdexcept>

namespace hkv::cuda {

namespace {

struct Switch {
  const char* name;
  std::vector<int> values;  // the values it takes; any other leaves the default
  bool Tuning::*on;         // an on/off switch (values 0 and 1), or
  int Tuning::*choice;      // a choice among values
};

const std::vector<Switch>& switches() {
  static const std::vector<Switch> s = {
      {"HKV_PDL", {0, 1}, &Tuning::pdl, nullptr},
      {"HKV_PDL_ALL", {0, 1}, &Tuning::pdl_all, nullptr},
      {"HKV_MV_STAGE", {0, 1}, &Tuning::mv_stage, nullptr},
      {"HKV_MV_NORMW", {0, 1}, &Tuning::mv_normw, nullptr},
      {"HKV_MV_PF", {0, 1, 3, 6, 9}, nullptr, &Tuning::mv_prefetch},
      {"HKV_DECODE_FUSE", {0, 1}, &Tuning::decode_fuse, nullptr},
      {"HKV_OUT_TRIGGER", {0, 1}, &Tuning::out_trigger, nullptr},
      {"HKV_ATTN_SLIM", {0, 1, 2}, nullptr, &Tuning::attn_slim},
      {"HKV_ATTN_SLIM_FROM", {10, 12, 15, 20, 30}, nullptr, &Tuning::attn_slim_from},
      {"HKV_ATTN_Q4H_FORM", {0, 1, 8, 11, 17, 18, 19, 20}, nullptr, &Tuning::attn_q4h_form},
      {"HKV_ATTN_VU", {4, 8, 16, 32}, nullptr, &Tuning::attn_value_unroll},
      {"HKV_ATTN_BF16_HALVES", {0, 1}, &Tuning::attn_bf16_halves, nullptr},
      {"HKV_MERGE_FAST", {0, 1}, &Tuning::merge_fast, nullptr},
      {"HKV_MERGE_WIDE", {0, 1}, &Tuning::merge_wide, nullptr},
      {"HKV_DN_SPLIT", {1, 2, 4}, nullptr, &Tuning::dn_split},
      {"HKV_DN_TPC", {1, 2}, nullptr, &Tuning::dn_tpc},
      {"HKV_DN_FUSED", {0, 1}, &Tuning::dn_fused, nullptr},
      {"HKV_DN_EARLY", {0, 1}, &Tuning::dn_early, nullptr},
      {"HKV_DN_PRELOAD", {0, 1}, &Tuning::dn_preload, nullptr},
  };
  return s;
}

int get(const Tuning& t, const Switch& s) { return s.on ? int(t.*s.on) : t.*s.choice; }
void set(Tuning& t, const Switch& s, int v) {
  if (s.on)
    t.*s.on = v != 0;
  else
    t.*s.choice = v;
}

constexpr const char* kFlashName = "HKV_FLASH_CFG";
constexpr FlashCfg kFlashCfgs[] = {FlashCfg::Auto, FlashCfg::F8x2, FlashCfg::F4x1, FlashCfg::Wg, FlashCfg::Wg2};

}  // namespace

const char* flash_cfg_name(FlashCfg c) {
  switch (c) {
    case FlashCfg::F8x2:
      return "8x2";
    case FlashCfg::F4x1:
      return "4x1";
    case FlashCfg::Wg:
      return "wg";
    case FlashCfg::Wg2:
      return "wg2";
    case FlashCfg::Auto:
      break;
  }
  return "auto";
}

Tuning tuning_from_env() {
  Tuning t;
  for (const Switch& s : switches()) {
    const char* e = std::getenv(s.name);
    if (e == nullptr) continue;
    for (int v : s.values)
      if (std::to_string(v) == e) set(t, s, v);
  }
  if (const char* e = std::getenv(kFlashName); e != nullptr && *e != '\0') {
    bool known = false;
    for (FlashCfg c : kFlashCfgs)
      if (std::string(e) == flash_cfg_name(c)) t.flash = c, known = true;
    if (!known) throw std::runtime_error(std::string(kFlashName) + "=" + e + ": expected auto, 8x2, 4x1, wg or wg2");
  }
  return t;
}

std::vector<std::pair<std::string, std::string>> tuning_values(const Tuning& t) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Switch& s : switches()) out.emplace_back(s.name, std::to_string(get(t, s)));
  out.emplace_back(kFlashName, flash_cfg_name(t.flash));
  return out;
}

std::string tuning_text(const Tuning& t) {
  const auto now = tuning_values(t), dflt = tuning_values(Tuning{});
  std::string all, changed;
  for (size_t i = 0; i < now.size(); i++) {
    const std::string nv = now[i].first + "=" + now[i].second;
    all += (i ? " " : "") + nv;
    if (now[i].second != dflt[i].second) changed += (changed.empty() ? "" : " ") + nv;
  }
  return all + (changed.empty() ? " (the defaults)" : " (not default: " + changed + ")");
}

std::vector<std::string> tuning_names() {
  std::vector<std::string> out;
  for (const auto& [name, value] : tuning_values(Tuning{})) out.push_back(name);
  return out;
}

}  // namespace hkv::cuda
