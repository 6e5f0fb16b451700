// The oracle: the whole Qwen3.5 hybrid model on the CPU, one function per layer.
//
// Every floating-point operation follows docs/ARITHMETIC.md, so that the engine (cuda/) can reproduce the
// bytes. OpenMP runs over independent rows and heads only: the bytes never depend on the thread count.
//
// Prefill and decode are the same computation: tokens are fed in order, each token's K and V rows are
// written to the cache in its format before attention reads them back in that format.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/config.h"
#include "reference/kvformat.h"
#include "reference/sequence.h"

namespace hkv {

// Feed tokens[0..T) at positions s.pos … s.pos+T−1; returns logits [T or 1][vocab] (empty if none wanted).
// Throws std::runtime_error on a token id out of range or a context past capacity/max_position_embeddings.
std::vector<float> forward(const Model& m, SequenceState& s, const std::vector<int32_t>& tokens,
                           const ForwardOptions& opt = {});

// Greedy decode: feeds the prompt, then n_new argmax tokens. Returns the new tokens.
std::vector<int32_t> generate_greedy(const Model& m, SequenceState& s, const std::vector<int32_t>& prompt, int n_new);

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
