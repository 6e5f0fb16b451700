// The GPU suite's main: doctest, after checking that a GPU is there. Without one it exits with 77, which
// CTest (SKIP_RETURN_CODE 77) reports as "not run", never as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstdio>

#include "cuda/device_select.h"

int main(int argc, char** argv) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    std::fprintf(stderr, "hkv gpu tests: no GPU (%s): not run\n",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  if (hkv::cuda::select_ctest_device() < 0) {
    std::fprintf(stderr, "hkv gpu tests: the device CTest assigned cannot be selected\n");
    return 1;
  }
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  const int rc = ctx.run();
  // Destroy this process's CUDA context, so that compute-sanitizer's leak check (--leak-check full) sees
  // every allocation still alive as a leak (cuda/run_gpu_suite.sh sanitize).
  cudaDeviceReset();
  return rc;
}
