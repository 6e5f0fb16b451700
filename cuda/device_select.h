// Which GPU a test uses: CTest's resource allocation (scripts/gpu-ci, --resource-spec-file) hands each gpu
// test one "gpus" slot and says which in CTEST_RESOURCE_GROUP_0_GPUS ("id:N,slots:1"). Without it: device 0.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

namespace hkv::cuda {

inline int select_ctest_device() {
  const char* g = std::getenv("CTEST_RESOURCE_GROUP_0_GPUS");
  int id = 0;
  if (g && std::strncmp(g, "id:", 3) == 0) id = std::atoi(g + 3);
  if (cudaSetDevice(id) != cudaSuccess) return -1;
  return id;
}

}  // namespace hkv::cuda
