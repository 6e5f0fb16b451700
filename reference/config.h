// The model description: the text config of Qwen3.5 (HF `qwen3_5_text`) and its weights.
// ../shared/model-facts.md (and docs/MODEL.md) say what each field means and where it was read.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "reference/weights.h"

namespace hkv {

enum class LayerKind { Linear, Full };  // Gated DeltaNet ("linear_attention") or gated full attention

struct Config {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int num_hidden_layers = 0;
  std::vector<LayerKind> layer_types;  // from layer_types, or from full_attention_interval
  // full attention
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  bool attn_output_gate = true;
  double rope_theta = 1e7;
  double partial_rotary_factor = 0.25;
  int rotary_dim() const { return int(head_dim * partial_rotary_factor); }
  // Gated DeltaNet
  int linear_num_key_heads = 0;
  int linear_num_value_heads = 0;
  int linear_key_head_dim = 0;
  int linear_value_head_dim = 0;
  int linear_conv_kernel_dim = 4;
  // other
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 262144;
  bool tie_word_embeddings = false;
  // MLX quantization (bits 0 = not quantized)
  int quant_bits = 0;
  int quant_group_size = 0;
  std::map<std::string, std::pair<int, int>> quant_overrides;  // module path -> (group, bits)

  int n_full_layers() const;
  int n_linear_layers() const;
  int64_t conv_dim() const {
    return 2LL * linear_num_key_heads * linear_key_head_dim + int64_t(linear_num_value_heads) * linear_value_head_dim;
  }

  // Checks every relation between fields; throws std::runtime_error naming the field.
  void validate(const std::string& where) const;
};

// Reads config.json: a `qwen3_5_text` config, or a `Qwen3_5ForConditionalGeneration` one whose text fields
// sit under `text_config`. Throws std::runtime_error naming the file and the field.
Config load_config(const std::string& path);
Config parse_config(const std::string& json_text, const std::string& where);

// All weights as fp32-computable matrices and vectors. Norm vectors are stored as the model uses them:
// `*_norm` of the (1+w) kind keep w (the +1 is applied by the norm), the DeltaNet norm keeps its plain w.
struct LinearAttnWeights {
  Matrix in_proj_qkv;                 // [2·nk·dk + nv·dv, hidden]
  Matrix in_proj_z;                   // [nv·dv, hidden]
  Matrix in_proj_b;                   // [nv, hidden]
  Matrix in_proj_a;                   // [nv, hidden]
  std::vector<float> conv;            // [conv_dim][K] (HF [C,1,K] and MLX [C,K,1] both land here)
  std::vector<float> A_log, dt_bias;  // [nv]
  std::vector<float> norm;            // [dv], plain weight
  Matrix out_proj;                    // [hidden, nv·dv]
};
struct FullAttnWeights {
  Matrix q_proj;  // [heads·2·head_dim, hidden]: per head, head_dim query rows then head_dim gate rows
  Matrix k_proj;  // [kv_heads·head_dim, hidden]
  Matrix v_proj;  // [kv_heads·head_dim, hidden]
  Matrix o_proj;  // [hidden, heads·head_dim]
  std::vector<float> q_norm, k_norm;  // [head_dim], (1+w) kind
};
struct LayerWeights {
  LayerKind kind;
  std::vector<float> input_norm, post_attn_norm;  // [hidden], (1+w) kind
  LinearAttnWeights lin;
  FullAttnWeights full;
  Matrix gate_proj, up_proj;  // [intermediate, hidden]
  Matrix down_proj;           // [hidden, intermediate]
};
struct ModelWeights {
  Matrix embed;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [hidden], (1+w) kind
  Matrix lm_head;                 // [vocab, hidden] (the embedding when tied)
};

struct Model {
  Config config;
  ModelWeights w;
  std::string source;  // where it came from, for messages
};

}  // namespace hkv
