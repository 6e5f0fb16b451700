// libFuzzer target: the token-file reader (reference/tokens.cpp). Every input is read both ways:
// as JSON text (parse_tokens_json, with and without a vocabulary) and as a raw little-endian uint32 file
// (read_tokens on a temporary file whose name ends in .u32). A std::exception is a clean refusal; a crash,
// a sanitizer report, a leak or a hang is a bug. Whatever is accepted must hold ids in [0, vocab).
#include <cstdint>
#include <exception>
#include <string>

#include "reference/tokens.h"
#include "tests/fuzz/fuzz_common.h"

namespace {
void check_ids(const std::vector<int32_t>& ids, int64_t vocab) {
  if (ids.empty()) __builtin_trap();  // an empty token file must be refused
  for (int32_t id : ids)
    if (id < 0 || (vocab > 0 && id >= vocab)) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (int64_t vocab : {int64_t(0), int64_t(320)}) {
    try {
      check_ids(hkv::parse_tokens_json(text, "fuzz.json", vocab), vocab);
    } catch (const std::exception&) {
    }
  }
  static const std::string path = hkv_fuzz::temp_path("tokens", ".u32");
  hkv_fuzz::write_bytes(path, data, size);
  for (int64_t vocab : {int64_t(0), int64_t(248320)}) {
    try {
      check_ids(hkv::read_tokens(path, vocab), vocab);
    } catch (const std::exception&) {
    }
  }
  return 0;
}
