// device_alloc() and its fault injection (cuda/alloc.h).
#include "cuda/alloc.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

namespace hkv::cuda {

namespace {

std::mutex g_mu;
bool g_env_read = false;  // HKV_FAIL_ALLOC_AT has been read (or set_alloc_failure() overrode it)
int64_t g_fail_at = 0;    // the call that fails, counting from 1; 0: none
int64_t g_count = 0;      // calls so far
const char* g_by = "";    // what set g_fail_at

// Under g_mu. A malformed value is refused at every allocation, so that it cannot go unnoticed.
void read_env_locked() {
  if (g_env_read) return;
  const char* e = std::getenv("HKV_FAIL_ALLOC_AT");
  if (e && *e) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(e, &end, 10);
    if (errno != 0 || *end != '\0' || v < 1)
      throw std::runtime_error(std::string("environment variable HKV_FAIL_ALLOC_AT: '") + e +
                               "' is not a positive integer (the allocation to fail, counting from 1)");
    g_fail_at = v;
    g_by = "HKV_FAIL_ALLOC_AT";
  }
  g_env_read = true;
}

std::string with_gib(size_t b) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%zu bytes (%.2f GiB)", b, double(b) / double(1ull << 30));
  return buf;
}

}  // namespace

void set_alloc_failure(int64_t n) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_env_read = true;  // the call overrides the environment
  g_fail_at = n > 0 ? n : 0;
  g_count = 0;
  g_by = "set_alloc_failure";
}

int64_t alloc_count() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_count;
}

void* device_alloc(size_t bytes, const std::string& what) {
  int64_t call = 0;
  bool inject = false;
  const char* by = "";
  {
    std::lock_guard<std::mutex> lock(g_mu);
    read_env_locked();
    call = ++g_count;
    inject = g_fail_at != 0 && call == g_fail_at;
    by = g_by;
  }
  void* p = nullptr;
  cudaError_t e = inject ? cudaErrorMemoryAllocation : cudaMalloc(&p, bytes > 0 ? bytes : 1);
  if (e == cudaSuccess) return p;
  if (!inject) (void)cudaGetLastError();  // a failed cudaMalloc leaves its error for the next launch check
  std::string msg = "device allocation failed: " + what + ": " + with_gib(bytes) + "; the device has ";
  size_t free_b = 0, total_b = 0;
  const cudaError_t ie = cudaMemGetInfo(&free_b, &total_b);
  if (ie == cudaSuccess) {
    msg += with_gib(free_b) + " free of " + with_gib(total_b);
  } else {
    msg += std::string("unknown free memory (cudaMemGetInfo: ") + cudaGetErrorName(ie) + ")";
    (void)cudaGetLastError();
  }
  msg += std::string(": ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
  if (inject) {
    // (appended piece by piece: "literal" + std::string&& trips g++ 12's -Wrestrict)
    msg += " (injected: allocation ";
    msg += std::to_string(call);
    msg += ", by ";
    msg += by;
    if (std::string(by) == "HKV_FAIL_ALLOC_AT") {
      msg += '=';
      msg += std::to_string(call);
    }
    msg += ')';
  }
  throw std::runtime_error(msg);
}

void device_free(void* p) noexcept {
  if (p) (void)cudaFree(p);
}

}  // namespace hkv::cuda
