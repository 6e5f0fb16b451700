// Synthetic weights generated on the device with the oracle's own generator functions
// (reference/synthetic.h, HKV_HD): the same bytes as build_synthetic(), without building them on the host.
// Launch: grid-stride loops, one element (or one MLX4 word / group) per thread step.
#include "cuda/check.h"
#include "cuda/kernels.h"
#include "reference/synthetic.h"

namespace hkv::cuda {
namespace {

__global__ void bf16_kernel(uint16_t* out, int64_t n, uint64_t seed, uint64_t tensor, int e) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = hkv::synth_bf16(seed, tensor, uint64_t(i), e);
}

__global__ void mlx4_kernel(uint32_t* words, uint16_t* scales, uint16_t* biases, int64_t nwords, int64_t ngroups,
                            uint64_t seed, uint64_t tensor, int e) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nwords; i += stride)
    words[i] = hkv::synth_mlx4_word(seed, tensor, uint64_t(i));
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < ngroups; g += stride) {
    const uint16_t s = hkv::synth_mlx4_scale(seed, tensor, uint64_t(g), e);
    scales[g] = s;
    biases[g] = hkv::bf16_from_f32(-8.0f * hkv::f32_from_bf16(s));
  }
}

}  // namespace

void synth_bf16_fill(uint16_t* out, int64_t n, uint64_t seed, uint64_t tensor, int e, cudaStream_t st) {
  if (n <= 0) return;
  bf16_kernel<<<unsigned(std::min<int64_t>((n + 255) / 256, 65536)), 256, 0, st>>>(out, n, seed, tensor, e);
  HKV_CHECK_LAUNCH();
}

void synth_mlx4_fill(uint32_t* words, uint16_t* scales, uint16_t* biases, int64_t nwords, int64_t ngroups,
                     uint64_t seed, uint64_t tensor, int e, cudaStream_t st) {
  if (nwords <= 0) return;
  mlx4_kernel<<<unsigned(std::min<int64_t>((nwords + 255) / 256, 65536)), 256, 0, st>>>(words, scales, biases, nwords,
                                                                                        ngroups, seed, tensor, e);
  HKV_CHECK_LAUNCH();
}

}  // namespace hkv::cuda
