// libFuzzer target: the fixture reader (compare/fixture.cpp: parse_fixture, load_fixture, and the token-file
// hash check of load_fixture_tokens). The input is the text of a fixture file (fixtures/*.json). It is
// parsed from memory, and read back from a temporary file; when the fixture's token path names the small
// token file this target writes next to it ("tokens.u32"), that file is read and its hash checked too (other
// paths are never opened: the fuzzer must not read /dev/zero or the disk). A std::exception is a clean
// refusal; a crash, a sanitizer report, a leak or a hang is a bug.
#include <cstdint>
#include <exception>
#include <filesystem>
#include <string>

#include "compare/fixture.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  // A folder of its own: the fixture and the token file it may name.
  static const std::string dir = [] {
    std::string d = hkv_fuzz::temp_path("fixture", ".d");
    fs::create_directories(d);
    static const uint8_t tokens[] = {1, 0, 0, 0, 2, 0, 0, 0, 65, 0, 0, 0};  // xxh64 in corpus/fixture/*
    hkv_fuzz::write_bytes(d + "/tokens.u32", tokens, sizeof tokens);
    return d;
  }();
  const std::string path = dir + "/fixture.json";
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    hkv::Fixture f = hkv::parse_fixture(text, path);
    (void)f;
  } catch (const std::exception&) {
  }
  hkv_fuzz::write_bytes(path, data, size);
  try {
    hkv::Fixture f = hkv::load_fixture(path);
    if (fs::path(f.tokens_path).lexically_normal() == fs::path(dir + "/tokens.u32").lexically_normal()) {
      std::vector<int32_t> t = hkv::load_fixture_tokens(f, 256);
      (void)t;
    }
  } catch (const std::exception&) {
  }
  return 0;
}
