// What the GPU benchmarks share (hkv bench, bench-ops, bench-prefill; defined in compare/engine_cli.cpp, except
// time_ms). Built only with the CUDA engine.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "compare/cli.h"
#include "compare/variants.h"
#include "cuda/check.h"
#include "cuda/engine.h"

namespace hkv {

// The device's used memory (cudaMemGetInfo total − free), bytes.
size_t used_device_bytes();
// Device-to-device copy bandwidth, bytes read plus bytes written (median of 1 GiB copies).
double copy_bandwidth(cudaStream_t st);
// The engine for --model: "builtin:NAME" built from its spec (the 27B shapes generated on the device),
// anything else loaded as a checkpoint or a synthetic spec; tu, its switches.
std::unique_ptr<cuda::Engine> make_engine(const std::string& model, const cuda::Tuning& tu = cuda::tuning_from_env());

// --variants and --rounds of hkv bench and bench-ops (cmd names the command in errors): the variants (empty
// without --variants), the rounds (1 without) and each variant's switches as cuda::tuning_from_env() reads them under
// it. UsageError naming the entry, the option, or an HKV_ variable the engine does not read, otherwise.
struct VariantsOption {
  std::vector<EnvVariant> list;
  std::vector<cuda::Tuning> tunings;  // one a variant
  int rounds = 1;
};
VariantsOption variants_option(const Args& a, const std::string& cmd);

// Milliseconds of f() on stream st, timed by events one call at a time after `warm` untimed calls: the
// median, the fastest and the slowest of `reps`.
struct Timing {
  double median = 0, min = 0, max = 0;
};
template <class F>
Timing time_ms(cudaStream_t st, int warm, int reps, F&& f) {
  if (reps < 1) throw std::invalid_argument("time_ms: reps must be at least 1");
  for (int i = 0; i < warm; i++) f();
  cudaEvent_t e0, e1;
  HKV_CUDA_CHECK(cudaEventCreate(&e0));
  HKV_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<double> t;
  for (int i = 0; i < reps; i++) {
    HKV_CUDA_CHECK(cudaEventRecord(e0, st));
    f();
    HKV_CUDA_CHECK(cudaEventRecord(e1, st));
    HKV_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    HKV_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(double(ms));
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front(), t.back()};
}

}  // namespace hkv
