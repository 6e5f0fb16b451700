// The block layout of the kernel that stages a whole chunk's q4h rows in shared memory (bulk.cu).
#pragma once

#include <cstddef>

#include "cuda/attention/launch.h"
#include "cuda/attention/q4h_values.cuh"

namespace hkv::cuda::attn {

// The block of the kernel that stages a whole chunk's q4h rows in shared memory (bulk.cu): T threads, then
// in its dynamic shared memory the chunk's rows (row_bytes each), q [NG][kSlimD], e_s [key][staged_es<NG>()] (the
// floats a key's weights take: slim's q4h choice) and a Q4hScratch a warp.
template <int NG>
__host__ __device__ constexpr int staged_es() {
  return NG > 4 ? 8 : (NG + 1) / 2 * 2;
}
template <int NG, int T>
__host__ __device__ constexpr size_t staged_smem(int row_bytes) {
  return size_t(kChunk) * row_bytes + sizeof(float) * (size_t(NG) * kSlimD + size_t(kChunk) * staged_es<NG>()) +
         sizeof(Q4hScratch) * (T / 32);
}

}  // namespace hkv::cuda::attn
