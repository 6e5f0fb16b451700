// Environment variants for `hkv bench --variants`: several settings of the engine's switches (HKV_PDL,
// HKV_DN_SPLIT, …) timed in one process, their tokens interleaved, so that a comparison does not also measure
// the difference between two processes or two machines.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hkv {

struct EnvVariant {
  std::string text;                                       // as given: "default" or "A=1,B=2"
  std::vector<std::pair<std::string, std::string>> vars;  // empty for "default"
};

// "default;HKV_DN_SPLIT=1,HKV_DN_TPC=1": entries split at ';', each "default" or NAME=VALUE[,NAME=VALUE], NAME
// of A–Z, 0–9 and '_' (not starting with a digit), VALUE not empty. 1 to 8 entries. Throws std::invalid_argument
// naming the entry and what is wrong.
std::vector<EnvVariant> parse_variants(const std::string& text);

// Sets the environment to one variant at a time: apply(i) first gives every variable any variant names the value
// it had at construction (or none), then sets variant i's. on_change, when given, runs after every apply() and
// restore() (the engine: read the switches again, drop its captured graphs). The destructor restores the
// environment as found, without on_change (what it would act on may be gone by then).
class EnvVariants {
 public:
  explicit EnvVariants(std::vector<EnvVariant> variants, std::function<void()> on_change = {});
  ~EnvVariants();
  EnvVariants(const EnvVariants&) = delete;
  EnvVariants& operator=(const EnvVariants&) = delete;
  void apply(size_t i);
  void restore();
  size_t size() const { return variants_.size(); }
  const EnvVariant& operator[](size_t i) const { return variants_[i]; }

 private:
  std::vector<EnvVariant> variants_;
  std::function<void()> on_change_;
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;  // every named variable, as found
};

}  // namespace hkv
