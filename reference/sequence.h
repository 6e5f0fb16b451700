// What the oracle and the engine share about a sequence, on the host: its state (cache, DeltaNet and conv states,
// position) and the file that saves it, the RoPE table, the options and checks of a forward call, and the greedy
// choice. cuda/ includes this header, not reference/model.h (the oracle's arithmetic). Defined in
// reference/sequence.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "reference/config.h"
#include "reference/kvformat.h"

namespace hkv {

// The RoPE table for one position: cos[rd/2], sin[rd/2] (rd = rotary dims). Computed on the host once,
// shared by oracle and engine: inv_freq[i] = fp32(1 / theta^(2i/rd)); angle = fp32(pos · inv_freq[i]);
// cos and sin of that angle in double, rounded to fp32.
void rope_row(const Config& c, int64_t pos, float* cos_out, float* sin_out);

// Everything a sequence carries from one token to the next.
struct SequenceState {
  int64_t pos = 0;       // tokens consumed so far
  int64_t capacity = 0;  // cache slots per full-attention layer
  KvFormat format;       // cache format
  size_t row_bytes = 0;  // one (position, kv head) row of K or V
  // full-attention layers, in order: cache[l] holds K then V, each [capacity][kv_heads][row_bytes]
  std::vector<std::vector<uint8_t>> k_cache, v_cache;
  // DeltaNet layers, in order: conv[l] is [conv_dim][K-1] (oldest first), S[l] is [nv][dk][dv]
  std::vector<std::vector<float>> conv, S;
};

// Refuses, with the numbers, a cache that does not fit in the memory the machine has available.
SequenceState new_sequence(const Config& c, const KvFormat& f, int64_t capacity);

// Save/restore a sequence's whole state (cache up to pos, DeltaNet and conv states, position).
// The file is written to path + ".tmp" and renamed. Restore checks it matches the config and format.
void save_state(const SequenceState& s, const Config& c, const std::string& path);
SequenceState load_state(const Config& c, const std::string& path, int64_t capacity);

// Optional observer of intermediate tensors, for the differential layer's first-divergence search:
// called with (layer, tensor name, token index within the call, data, count).
using Tap = std::function<void(int layer, const char* name, int64_t t, const float* data, int64_t n)>;

// Which path the engine (cuda/) takes for a call's tokens; the oracle has only the exact one and ignores it.
// Fast: tensor-core products, attention and a chunked DeltaNet, for long prompts; not exact (ARITHMETIC.md §10).
// Auto: the engine's choice by the prompt's length (cuda::kAutoFastPrefillTokens, cuda/engine.h), exact with a tap.
enum class Prefill { Exact, Fast, Auto };
// Prefill::Exact|Fast|Auto from "exact", "fast", "auto"; std::invalid_argument naming the text otherwise.
Prefill parse_prefill(const std::string& s);
const char* prefill_name(Prefill p);

struct ForwardOptions {
  bool want_logits = true;  // compute logits for every token (else only hidden states advance)
  bool last_only = false;   // logits for the last token only
  const Tap* tap = nullptr;
  Prefill prefill = Prefill::Exact;  // engine only (see Prefill)
};

// The checks every backend makes before feeding T tokens at position pos of a sequence of the given
// capacity: the context fits the cache and max_position_embeddings, every id is in the vocabulary.
// Throws std::runtime_error with the numbers.
void check_forward_input(const Config& c, int64_t pos, int64_t capacity, const std::vector<int32_t>& tokens);

// Index of the largest logit (the first one on ties).
int32_t argmax(const float* logits, int64_t n);

}  // namespace hkv
