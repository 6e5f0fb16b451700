// Synthetic models: a config plus a seed gives the same weight bytes on every machine.
//
// The generator is counter-based (each value is a pure function of seed, tensor id and element index)
// and uses integer arithmetic only, so the engine can generate the same bytes on the device for shapes
// too large to build on the host. Values are small integers times powers of two: exact in bf16.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/config.h"
#include "reference/scalar.h"

namespace hkv {

// splitmix64's finaliser over (seed, tensor, index).
HKV_HD uint64_t synth_bits(uint64_t seed, uint64_t tensor, uint64_t index) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + tensor * 0xbf58476d1ce4e5b9ull + index * 0x94d049bb133111ebull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// An approximately Gaussian integer in [−252, 252] (sum of four uniform 7-bit values; std ≈ 73.3).
HKV_HD int synth_int(uint64_t seed, uint64_t tensor, uint64_t index) {
  uint64_t b = synth_bits(seed, tensor, index);
  int s = 0;
  for (int i = 0; i < 4; i++) s += int((b >> (16 * i)) & 0x7f) - 63;
  return s;
}

// The value n · 2^−e as bf16 bits (exact: |n| <= 252 needs 8 significant bits).
HKV_HD uint16_t synth_bf16(uint64_t seed, uint64_t tensor, uint64_t index, int e) {
  float v = float(synth_int(seed, tensor, index)) * f32_from_bits(uint32_t(127 - e) << 23);
  return bf16_from_f32(v);
}

// MLX4 synthetic weights: uniform codes, per-group scale (1 + (h mod 4)/8)·2^−e and bias −8·scale.
HKV_HD uint32_t synth_mlx4_word(uint64_t seed, uint64_t tensor, uint64_t word_index) {
  return uint32_t(synth_bits(seed, tensor ^ 0x5151ull, word_index));
}
HKV_HD uint16_t synth_mlx4_scale(uint64_t seed, uint64_t tensor, uint64_t group_index, int e) {
  uint32_t h = uint32_t(synth_bits(seed, tensor ^ 0xa5a5ull, group_index) & 3u);
  return bf16_from_f32((1.0f + float(h) * 0.125f) * f32_from_bits(uint32_t(127 - e) << 23));
}

// FNV-1a of a tensor's name: the tensor id.
uint64_t synth_tensor_id(const std::string& name);

// The exponent e that gives a [rows, cols] product matrix entries of std ≈ gain/sqrt(cols).
int synth_exponent(int64_t cols, int gain_log2);
// The same for MLX4 matrices, whose codes are uniform on 0..15 (std 4.6 instead of 73.3).
int synth_mlx4_exponent(int64_t cols, int gain_log2);

struct SyntheticSpec;
// A synthetic fp32 vector (norm weights, conv, A_log, dt_bias): offset + n·2^−e per element.
std::vector<float> synth_vector(uint64_t seed, const std::string& name, int64_t n, int e, float offset = 0.0f);
// The k_norm weights of a layer ("layers.N."), with the spec's outlier channels made large through (1 + w).
std::vector<float> synth_k_norm(const SyntheticSpec& spec, const std::string& layer_prefix, int head_dim);

struct SyntheticSpec {
  Config config;
  uint64_t seed = 1;
  WType weights = WType::BF16;  // BF16 or MLX4 (MLX4 needs a group size in config.quant_group_size)
  int outlier_channels = 0;     // K channels per head made large through k_norm (the cache's hard case)
  float outlier_gain = 8.0f;    // their (1+w)
  int sharpness_log2 = 0;       // q/k projections scaled by 2^s: sharper attention
};

// Built-in specs: "tiny" (the default fixture: fast, head_dim 256), "tiny-mlx4", "100m", "27b" (the 27B
// dense shape, 64 layers). Throws naming the unknown name.
SyntheticSpec builtin_spec(const std::string& name);
// A spec from a JSON file: {"synthetic": {"config": {...HF text config...}, "seed": N, "weights": "bf16"|"mlx4",
//   "outlier_channels": N, "outlier_gain": X, "sharpness_log2": N}}.
SyntheticSpec load_synthetic_spec(const std::string& path);

Model build_synthetic(const SyntheticSpec& spec);

// A model from a path: "builtin:NAME", a synthetic spec (.json with a "synthetic" key), or a checkpoint
// directory / config.json.
Model load_any_model(const std::string& path);

}  // namespace hkv
