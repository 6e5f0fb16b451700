// exp_c_flat (cuda/attention/exp_flat.h), the engine's branch-free exp_c, against exp_c itself on the device, over a
// range of float bit patterns (tests/gpu_ops.cpp runs all 2^32). Launch: a grid-stride loop, one bit pattern a thread
// step; a mismatch adds one to a count and keeps the smallest differing pattern.
#include <cstdint>
#include <memory>

#include "cuda/attention/exp_flat.h"
#include "cuda/check.h"
#include "cuda/kernels.h"

namespace hkv::cuda {
namespace {

__global__ void exp_flat_check_kernel(uint64_t begin, uint64_t end, unsigned long long* differing, unsigned* first) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  unsigned long long local = 0;
  for (uint64_t b = begin + uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < end; b += stride) {
    const float x = __uint_as_float(uint32_t(b));
    if (__float_as_uint(exp_c_flat(x)) != __float_as_uint(hkv::exp_c(x))) {
      local++;
      atomicMin(first, unsigned(b));
    }
  }
  if (local) atomicAdd(differing, local);
}

}  // namespace

BitsCheck exp_flat_check(uint64_t begin, uint64_t end) {
  if (end > (uint64_t(1) << 32) || begin > end)
    throw std::invalid_argument("exp_flat_check: a range of 32-bit patterns");
  struct Words {  // the count, then the first differing pattern: one allocation, freed on every path
    unsigned long long differing;
    unsigned first;
  };
  Words* w = nullptr;
  HKV_CUDA_CHECK(cudaMalloc(&w, sizeof(Words)));
  const std::unique_ptr<Words, cudaError_t (*)(void*)> own(w, cudaFree);
  const Words init{0, ~0u};
  HKV_CUDA_CHECK(cudaMemcpy(w, &init, sizeof(init), cudaMemcpyHostToDevice));
  exp_flat_check_kernel<<<unsigned(sm_count()) * 8, 256>>>(begin, end, &w->differing, &w->first);
  HKV_CHECK_LAUNCH();
  Words got{};
  HKV_CUDA_CHECK(cudaMemcpy(&got, w, sizeof(got), cudaMemcpyDeviceToHost));
  BitsCheck r;
  r.checked = end - begin;
  r.differing = got.differing;
  r.first = got.first;
  return r;
}

}  // namespace hkv::cuda
