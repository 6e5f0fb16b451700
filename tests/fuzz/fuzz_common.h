// Shared by the libFuzzer targets: the input bytes as a file, for readers that take a path.
// The file lives in $HKV_FUZZ_TMP if set, else /dev/shm (RAM) when writable, else $TMPDIR or /tmp, and is named after
// the process so that parallel fuzzing jobs (-jobs=N) do not share it.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace hkv_fuzz {

inline std::string temp_dir() {
  if (const char* d = std::getenv("HKV_FUZZ_TMP"); d && *d) return d;  // run.sh: a folder it removes after
  if (::access("/dev/shm", W_OK) == 0) return "/dev/shm";
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

// "<dir>/hkv_fuzz_<tag>_<pid><suffix>", the same for the whole run of one process.
inline std::string temp_path(const char* tag, const char* suffix) {
  return temp_dir() + "/hkv_fuzz_" + tag + "_" + std::to_string(::getpid()) + suffix;
}

// Writes the bytes (replacing the file), or aborts: a fuzzer that cannot write its input tests nothing.
inline void write_bytes(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    std::perror(path.c_str());
    std::abort();
  }
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

}  // namespace hkv_fuzz
