// Helpers of the GPU tests: device buffers, seeded random inputs, and byte comparison that names the
// first differing element with both values.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "compare/diff_engine.h"
#include "cuda/check.h"

namespace hkv::gputest {

// Device buffers (put, get, poison) and seeded gaussian inputs: those of the engine's op cases (compare/diff_engine.h).
using opcase::DBuf;
using opcase::gaussian;

inline std::vector<int32_t> random_tokens(size_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<int32_t> v(n);
  for (auto& t : v) t = int32_t(g() % uint64_t(vocab));
  return v;
}

// "" when the arrays are byte-identical, else the first differing index and both values.
inline std::string first_diff(const float* a, const float* b, size_t n) {
  if (std::memcmp(a, b, n * 4) == 0) return "";
  for (size_t i = 0; i < n; i++) {
    uint32_t x, y;
    std::memcpy(&x, a + i, 4);
    std::memcpy(&y, b + i, 4);
    if (x != y) {
      std::ostringstream s;
      s.precision(9);
      s << "index " << i << ": engine " << a[i] << " (0x" << std::hex << x << ") oracle " << std::dec << b[i] << " (0x"
        << std::hex << y << ")";
      return s.str();
    }
  }
  return "";
}
inline std::string first_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return "sizes differ: " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  return first_diff(a.data(), b.data(), a.size());
}
inline std::string first_diff_bytes(const uint8_t* a, const uint8_t* b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i])
      return "byte " + std::to_string(i) + ": engine " + std::to_string(a[i]) + " oracle " + std::to_string(b[i]);
  return "";
}

// The compute-sanitizer tool the suite runs under (HKV_SANITIZER, set by cuda/run_gpu_suite.sh), or "".
inline std::string sanitizer_tool() {
  const char* t = std::getenv("HKV_SANITIZER");
  return t ? t : "";
}

// The transformers fixtures: the folders of fixtures/hf that hold a config.json, in name order.
inline std::vector<std::filesystem::path> hf_fixture_dirs() {
  std::vector<std::filesystem::path> dirs;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(HKV_SOURCE_DIR) / "fixtures" / "hf"))
    if (std::filesystem::exists(e.path() / "config.json")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

}  // namespace hkv::gputest
