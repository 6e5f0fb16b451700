// What the card probes (tests/probe_*.cu) share: the CUDA call check, a generator, the median time of a launch, the
// card's copy bandwidth, and a random q4h cache (codes and fp16 scales).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "reference/scalar.h"

// On an error: the call, its place and CUDA's reason, then exit 2.
#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)

namespace probe {

inline uint32_t rng(uint64_t& s) {
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  return uint32_t(s >> 33);
}

// Microseconds of f() (a launch), the median of 20 after 3 warm-ups, by events on the default stream.
template <class F>
double time_us(F&& f) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; i++) f();
  std::vector<float> v;
  for (int i = 0; i < 20; i++) {
    CK(cudaEventRecord(e0));
    f();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    v.push_back(ms * 1000.0f);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::sort(v.begin(), v.end());
  return double(v[v.size() / 2]);
}

__global__ void copy_kernel(const uint4* a, uint4* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    b[i] = a[i];
}

// The card's copy bandwidth (bytes read and written a second) over a copy of `bytes` bytes at src (a multiple of 16).
inline double copy_bandwidth(const void* src, size_t bytes) {
  uint4* dst = nullptr;
  CK(cudaMalloc(&dst, bytes));
  const double us =
      time_us([&] { copy_kernel<<<132 * 8, 512>>>(static_cast<const uint4*>(src), dst, int64_t(bytes / 16)); });
  CK(cudaFree(dst));
  return 2.0 * double(bytes) / (us * 1e-6);
}

// Let `kernel` take `smem` bytes of dynamic shared memory, the carveout all shared memory; its blocks a multiprocessor.
template <class K>
int allow_smem(K* kernel, int threads, int smem) {
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  int occ = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, threads, smem));
  return occ;
}

// A layer's q4h cache for `kv` KV heads of n keys, [n][kv][144] at head_dim 256: random codes, fp16 scales 0.01–0.11,
// from the generator state s (which goes on from there).
inline std::vector<uint8_t> random_q4h(int64_t n, int kv, uint64_t& s) {
  std::vector<uint8_t> c(size_t(n) * size_t(kv) * 144);
  for (size_t r = 0; r < size_t(n) * size_t(kv); r++) {
    uint8_t* row = c.data() + r * 144;
    for (int i = 0; i < 128; i++) row[i] = uint8_t(rng(s));
    for (int g = 0; g < 8; g++) {
      const uint16_t h = hkv::f16_from_f32(0.01f + float(rng(s) % 1000) * 1e-4f);
      std::memcpy(row + 128 + 2 * g, &h, 2);
    }
  }
  return c;
}

// d = a·b + d by mma.sync.m16n8k32 on bytes, s32 sums (A u8; B u8, or s8 when SIGNED). Thread (g = lane/4,
// t = lane%4) holds A[g][4t..4t+3] (a0), A[g+8][4t..] (a1), A[g][16+4t..] (a2), A[g+8][16+4t..] (a3), B[4t..4t+3][g]
// (b0), B[16+4t..][g] (b1), and d0, d1 = D[g][2t], D[g][2t+1], d2, d3 = D[g+8][2t], D[g+8][2t+1] (tests/probe_imma.cu
// checks the layout on the card).
template <bool SIGNED>
__device__ __forceinline__ void imma_acc(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (SIGNED)
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace probe
