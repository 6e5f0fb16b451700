// The oracle: the whole Qwen3.5 hybrid model on the CPU, one function per layer.
//
// Every floating-point operation follows docs/ARITHMETIC.md, so that the engine (cuda/) can reproduce the
// bytes. OpenMP runs over independent rows and heads only: the bytes never depend on the thread count.
//
// Prefill and decode are the same computation: tokens are fed in order, each token's K and V rows are
// written to the cache in its format before attention reads them back in that format.
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
// Auto: fast for kAutoFastPrefillTokens tokens or more (and no tap), exact below.
enum class Prefill { Exact, Fast, Auto };
// The Auto threshold. Measured on the H200 (2026-11-29, hkv bench-prefill --exact, 27B MLX4 shape, q4h):
// a 4,096-token prompt takes 103 s exact (25 ms a token) and 1.6 s fast. Below 64 tokens the exact path
// costs under ~1.6 s and keeps every byte; from 64 on the fast path is taken.
inline constexpr int64_t kAutoFastPrefillTokens = 64;
// Prefill::Exact|Fast|Auto from "exact", "fast", "auto"; std::invalid_argument naming the text otherwise.
Prefill parse_prefill(const std::string& s);
const char* prefill_name(Prefill p);

struct ForwardOptions {
  bool want_logits = true;  // compute logits for every token (else only hidden states advance)
  bool last_only = false;   // logits for the last token only
  const Tap* tap = nullptr;
  Prefill prefill = Prefill::Exact;  // engine only (see Prefill)
};

// Feed tokens[0..T) at positions s.pos … s.pos+T−1; returns logits [T or 1][vocab] (empty if none wanted).
// Throws std::runtime_error on a token id out of range or a context past capacity/max_position_embeddings.
std::vector<float> forward(const Model& m, SequenceState& s, const std::vector<int32_t>& tokens,
                           const ForwardOptions& opt = {});

// The checks every backend makes before feeding T tokens at position pos of a sequence of the given
// capacity: the context fits the cache and max_position_embeddings, every id is in the vocabulary.
// Throws std::runtime_error with the numbers.
void check_forward_input(const Config& c, int64_t pos, int64_t capacity, const std::vector<int32_t>& tokens);

// Greedy decode: feeds the prompt, then n_new argmax tokens. Returns the new tokens.
std::vector<int32_t> generate_greedy(const Model& m, SequenceState& s, const std::vector<int32_t>& prompt, int n_new);

// Index of the largest logit (the first one on ties).
int32_t argmax(const float* logits, int64_t n);

// ---- layers (exposed for tests) -----------------------------------------------------------------

// out = x · rsqrt(mean(x²) + eps) · (1 + w); w == nullptr means plain (no weight).
void rmsnorm_1pw(const float* x, const float* w, int64_t n, float eps, float* out);
// out = (x · rsqrt(mean(x²) + eps)) · w   (the DeltaNet's plain-weight norm)
void rmsnorm_plain(const float* x, const float* w, int64_t n, float eps, float* out);
// x ← x · rsqrt(Σx² + 1e-6)
void l2norm_inplace(float* x, int64_t n);
// RoPE on the first rd dims of x (rotate_half convention).
void rope_apply(float* x, int rd, const float* cos, const float* sin);

// Attention of one query head over n cache rows of one KV head (rows at stride `stride` bytes).
// q: [head_dim], already normed and roped. out: [head_dim]. Follows ARITHMETIC.md §6 (512-key chunks).
void attend(const KvFormat& f, const float* q, int head_dim, const uint8_t* k_rows, const uint8_t* v_rows,
            size_t stride, int64_t n, float* out);
// attend()'s score of one key for q4h (ARITHMETIC.md §6, integer sums): qx = x_chunks(the rotated query, head_dim, 13),
// u and s the key's row as kv_read_row reads it, scale = fp32(1/sqrt(head_dim)).
float q4h_key_score(const XChunks& qx, const float* u, const float* s, int head_dim, float scale);
// attend()'s weighted values of one chunk for q4h (ARITHMETIC.md §6, integer sums): e [len] the chunk's weights,
// u [len][head_dim] and s [len][head_dim/32] its V rows as kv_read_row reads them; oc [head_dim].
void q4h_chunk_values(const float* e, const float* u, const float* s, int64_t len, int head_dim, float* oc);

// One DeltaNet recurrence step for one value head: S [dk][dv] in place; q,k [dk], v [dv] -> o [dv].
void deltanet_step(float* S, const float* q, const float* k, const float* v, float beta, float g, int dk, int dv,
                   float* o);

}  // namespace hkv
