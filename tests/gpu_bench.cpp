// `hkv bench` from the GPU test binary, until compare/cli.cpp wires the subcommand: skipped unless run as
//   hkv_gpu_tests -tc='hkv bench' --no-skip
// with the bench's arguments in HKV_BENCH_ARGS (e.g. "--depths 1024,32768 --kv-cache bf16,q4h").
#include <doctest/doctest.h>

#include <cstdlib>
#include <sstream>

#include "compare/cli.h"

namespace hkv {
int cmd_bench(const Args& a);
}

TEST_CASE("hkv bench" * doctest::skip(true)) {
  hkv::Args a;
  a.command = "bench";
  const char* env = std::getenv("HKV_BENCH_ARGS");
  std::stringstream ss(env ? env : "");
  std::string key, val;
  while (ss >> key) {
    if (key.rfind("--", 0) != 0) continue;
    ss >> val;
    a.opts[key.substr(2)] = val;
  }
  CHECK(hkv::cmd_bench(a) == 0);
}
