// Greedy decoding's argmax on the device, so that a decode step returns a token id instead of its logits (1 MB a
// token at the 27B vocabulary, copied to the host and scanned there while the card idled).
// It gives reference/model.cpp argmax()'s index: the scan keeps best = 0 and takes i when v[i] > v[best], so the
// answer is the first index of the largest value that is not NaN (+0 and −0 equal), and 0 when v[0] is NaN (no
// value is larger than a NaN) or every value is NaN. A maximum and "the smallest index among the equal" do not
// depend on the order they are taken in, so the reduction below, in any grouping, gives that index:
//   argmax_part_kernel grid (parts, rows), 256 threads: thread t of part p scans i = p·256 + t, then + parts·256, …
//     keeping its first largest non-NaN (v, i); the block combines them (larger v, or equal v and smaller i);
//   argmax_final_kernel grid (rows), parts threads: the parts' pairs combined the same way; v[0] NaN gives 0.
#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "cuda/check.h"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace hkv::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kNone = 0x7fffffff;  // "no non-NaN value seen" (any real index is smaller)

struct Best {
  float v;
  int i;
};

// a or b, whichever the sequential scan would keep: the larger value, at equal values the smaller index; a pair
// without an index (kNone) loses to any pair with one
__device__ __forceinline__ Best better(Best a, Best b) {
  if (b.i == kNone) return a;
  if (a.i == kNone) return b;
  return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}

__device__ __forceinline__ Best block_best(Best m) {
  __shared__ float vs[kThreads / 32];
  __shared__ int is[kThreads / 32];
  for (int off = 16; off > 0; off /= 2)
    m = better(m, {__shfl_xor_sync(kFull, m.v, off), __shfl_xor_sync(kFull, m.i, off)});
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = int(blockDim.x + 31) >> 5;
  if (lane == 0) vs[warp] = m.v, is[warp] = m.i;
  __syncthreads();
  if (warp == 0) {
    m = lane < nw ? Best{vs[lane], is[lane]} : Best{0.0f, kNone};
    for (int off = 16; off > 0; off /= 2)
      m = better(m, {__shfl_xor_sync(kFull, m.v, off), __shfl_xor_sync(kFull, m.i, off)});
  }
  return m;  // thread 0's is the block's
}

__global__ void argmax_part_kernel(const float* x, int64_t n, float* part_v, int* part_i) {
  pdl_wait();  // launch_k (device.cuh): nothing is read before the kernel ahead has completed
  const int64_t row = blockIdx.y, parts = gridDim.x;
  const float* v = x + row * n;
  Best m{0.0f, kNone};
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += parts * kThreads) {
    const float a = v[i];
    if (a == a && (m.i == kNone || a > m.v)) m = {a, int(i)};  // this thread's indices increase: the first stays
  }
  m = block_best(m);
  if (threadIdx.x == 0) part_v[row * parts + blockIdx.x] = m.v, part_i[row * parts + blockIdx.x] = m.i;
}

__global__ void argmax_final_kernel(const float* x, int64_t n, const float* part_v, const int* part_i, int parts,
                                    int32_t* out) {
  pdl_wait();
  const int64_t row = blockIdx.x;
  Best m = int(threadIdx.x) < parts ? Best{part_v[row * parts + threadIdx.x], part_i[row * parts + threadIdx.x]}
                                    : Best{0.0f, kNone};
  m = block_best(m);
  if (threadIdx.x == 0) {
    const float v0 = x[row * n];
    out[row] = (v0 != v0 || m.i == kNone) ? 0 : m.i;
  }
}

}  // namespace

void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* out, float* part_v, int* part_i, cudaStream_t st,
                 const Tuning& tu) {
  if (rows <= 0) return;
  if (n < 1 || n > int64_t(kNone) - 1) throw std::runtime_error("argmax_rows: a row must hold 1 to 2^31 - 2 values");
  const int parts = int(std::min<int64_t>(kArgmaxParts, (n + kThreads - 1) / kThreads));
  launch_k(tu.pdl_all, argmax_part_kernel, dim3(unsigned(parts), unsigned(rows)), dim3(kThreads), 0, st, x, n, part_v,
           part_i);
  launch_k(tu.pdl_all, argmax_final_kernel, dim3(unsigned(rows)), dim3(kThreads), 0, st, x, n,
           static_cast<const float*>(part_v), static_cast<const int*>(part_i), parts, out);
}

}  // namespace hkv::cuda
