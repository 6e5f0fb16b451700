// A peer's decode figures (another engine timed on the same card in the same run, e.g. llama.cpp's llama-bench by the
// peer script of docs/receipts/2026-12-06-d/), read from its JSON so that `hkv bench --peer FILE` prints them beside
// hkv's:
//   {"peer": "llama.cpp", "commit": "...", "card": "NVIDIA H100 80GB HBM3", "model": "...",
//    "results": [{"depth": 1024, "kv": "f16", "tokens_per_s": 41.2}, ...]}
// The peer's cache types stand beside hkv's formats of the same bytes a row: f16 beside bf16, q8_0 beside fp8 (one
// byte an element and a scale a block), q4_0 beside q4h (4.5 bits an element: 144 bytes a row at head_dim 256).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hkv {

struct PeerResult {
  int64_t depth = 0;
  std::string kv;  // the peer's cache type: f16, q8_0, q4_0, ...
  double tokens_per_s = 0;
};

struct PeerFigures {
  std::string path, peer, commit, card, model;
  std::vector<PeerResult> results;
  // The peer's figure beside hkv's cache format `format` at `depth`, if it has one.
  std::optional<PeerResult> beside(const std::string& format, int64_t depth) const;
};

// The peer's cache type that stands beside an hkv cache format ("" if none does).
std::string peer_kv_for(const std::string& format);

// Reads and checks a peer file. Throws std::runtime_error naming the file and the field.
PeerFigures load_peer(const std::string& path);
PeerFigures parse_peer(const std::string& json_text, const std::string& path);

}  // namespace hkv
