// Named fixtures: one JSON file that names everything a run needs (fixtures/*.json).
//
// {
//   "name": "tiny-gate",
//   "description": "...",
//   "model": "builtin:tiny" | "relative/path/to/checkpoint" | "relative/path/to/synthetic.json",
//   "tokens": {"path": "text/debian-docs.u32", "xxh64": "16 hex digits", "sha256": "64 hex digits"},
//   "depths": [1024, 8192, ...],          gate depths d
//   "rows": 256,                           rows scored from each depth
//   "formats": ["fp8", "q4h"],             cache formats compared with bf16
//   "passphrase": {"plant": "text", "ask": "text", "answer": "text"}   (byte-level models), or the same
//                 keys holding arrays of token ids,
//   "recall": [{"at": 0.125, "plant": "...", "ask": "...", "answer": "..."}, ...]   more recall probes (optional),
//                 each planted at a share `at` (0 < at < 1) of the context before the questions, all asked
//                 just before the passphrase's question, in order (compare/gate.h),
//   "bars": {"kl_mean": 0.01, "kl_max": 0.1},
//   "golden": {"bf16": "xxh64 of the oracle's logits over the first 64 tokens", ...}
// }
// Paths are relative to the fixture file's folder. The token file's xxh64 is checked when it is read: a
// mismatch is refused with both values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hkv {

// A recall probe beyond the passphrase: a plant, its question and the answer that follows the question.
struct RecallProbe {
  double at = 0;  // where the plant starts, as a share of the context before the probes' questions
  std::vector<int32_t> plant, ask, answer;
};

struct Fixture {
  std::string path;  // the fixture file
  std::string name, description;
  std::string model;        // resolved: "builtin:NAME" or an absolute/relative path usable by load_any_model
  std::string model_field;  // as the fixture names it (a path relative to the fixture's folder, or builtin:NAME)
  std::string tokens_path;  // resolved
  std::string tokens_xxh64, tokens_sha256;
  std::vector<int64_t> depths;
  int64_t rows = 256;
  std::vector<std::string> formats;
  std::vector<int32_t> plant, ask, answer;  // passphrase tokens (empty: none)
  std::vector<RecallProbe> recall;          // more probes (empty: the passphrase alone)
  double bar_kl_mean = 0.01, bar_kl_max = 0.1;
  std::map<std::string, std::string> golden;
};

// Reads and checks a fixture file (not the token file). Throws std::runtime_error naming the file and field.
Fixture load_fixture(const std::string& path);
Fixture parse_fixture(const std::string& json_text, const std::string& path);

// Reads the fixture's token file and checks its xxh64. Throws, printing both hashes, on a mismatch.
std::vector<int32_t> load_fixture_tokens(const Fixture& f, int64_t vocab);

}  // namespace hkv
