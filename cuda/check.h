// Error checking for every CUDA runtime and cuBLAS call: a failure throws std::runtime_error naming the
// file, the line, the call and the error string. Kernel launches are checked with HKV_CHECK_LAUNCH().
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace hkv::cuda {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what + ": " + cudaGetErrorName(e) +
                           ": " + cudaGetErrorString(e));
}

}  // namespace hkv::cuda

#define HKV_CUDA_CHECK(call)                                                                   \
  do {                                                                                         \
    cudaError_t hkv_err_ = (call);                                                             \
    if (hkv_err_ != cudaSuccess) ::hkv::cuda::throw_cuda(hkv_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define HKV_CHECK_LAUNCH() HKV_CUDA_CHECK(cudaGetLastError())

#define HKV_CUBLAS_CHECK(call)                                                           \
  do {                                                                                   \
    int hkv_st_ = int(call);                                                             \
    if (hkv_st_ != 0)                                                                    \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) +  \
                               ": " #call ": cuBLAS status " + std::to_string(hkv_st_)); \
  } while (0)
