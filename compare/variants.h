// Environment variants for `hkv bench --variants`: several settings of the engine's switches (HKV_PDL,
// HKV_DN_SPLIT, …; cuda/tuning.h) timed in one process, their tokens interleaved, so that a comparison does not also
// measure the difference between two processes or two machines. After each change the caller reads the switches again
// (cuda::tuning_from_env) and hands them to what it times.
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

// The first variable of the variants whose name starts with prefix and is not among known ("" when none): a switch
// the engine does not read (misspelt, or removed), which would time the default twice under two names.
std::string unknown_variable(const std::vector<EnvVariant>& variants, const std::vector<std::string>& known,
                             const std::string& prefix);

// Sets the environment to one variant at a time: apply(i) first gives every variable any variant names the value
// it had at construction (or none), then sets variant i's. on_change, when given, runs after every apply() and
// restore() (the engine: its switches read again, cuda::Engine::set_tuning). The destructor restores the
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
