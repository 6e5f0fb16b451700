// libFuzzer target: the config reader (reference/config.cpp, parse_config) and the synthetic-spec reader
// (reference/synthetic.cpp, load_synthetic_spec, which takes a path: the input goes to a temporary file).
// The input is the text of a config.json (or of a spec {"synthetic": {...}}). A std::exception is a clean
// refusal; a crash, a sanitizer report, a leak or a hang is a bug. A config that parses must also validate.
#include <cstdint>
#include <exception>
#include <string>

#include "reference/config.h"
#include "reference/synthetic.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    hkv::Config c = hkv::parse_config(text, "fuzz.json");
    c.validate("fuzz.json");  // parse_config's result must pass its own check
    (void)c.rotary_dim();
    (void)c.conv_dim();
    (void)c.n_full_layers();
  } catch (const std::exception&) {
  }
  static const std::string path = hkv_fuzz::temp_path("config", ".json");
  hkv_fuzz::write_bytes(path, data, size);
  try {
    hkv::SyntheticSpec s = hkv::load_synthetic_spec(path);
    (void)s;
  } catch (const std::exception&) {
  }
  return 0;
}
