// Every device allocation of the engine goes through device_alloc(): one place that names what failed, with
// the numbers, and one place where a failure can be injected to test the engine's clean-up paths (tests/gpu_alloc.cpp).
//
// Fault injection: the n-th device_alloc() call fails as cudaMalloc does when the device is out of memory
// (nothing is allocated, the error is cudaErrorMemoryAllocation), and only that one; the calls after it
// succeed again. Two ways to set n:
//   - the environment variable HKV_FAIL_ALLOC_AT=N: the N-th allocation of the process, counting from 1
//     (read at the first allocation; for the command line: `HKV_FAIL_ALLOC_AT=3 hkv logits ... --backend cuda`);
//   - set_alloc_failure(n): the n-th allocation after the call (it restarts the count); 0 turns it off.
// A failed allocation throws std::runtime_error: "device allocation failed: WHAT: B bytes (G GiB); the device
// has F bytes (G GiB) free of T: cudaErrorMemoryAllocation: ..." and, when injected, says so and by what.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace hkv::cuda {

// cudaMalloc of max(bytes, 1), or throw as described above. The memory is the caller's to device_free().
void* device_alloc(size_t bytes, const std::string& what);
// cudaFree, for memory from device_alloc (nullptr is fine); errors are ignored (called from destructors).
void device_free(void* p) noexcept;

// The n-th device_alloc() from now fails (n >= 1); 0: none. Restarts the count that alloc_count() reports.
void set_alloc_failure(int64_t n);
// device_alloc() calls since the process started or since the last set_alloc_failure(), failed ones included.
int64_t alloc_count();

}  // namespace hkv::cuda
