// Loading a checkpoint (config.json + safetensors) into hkv::Model.
//
// Three layouts are recognised by their tensor names (../shared/model-facts.md):
//   HF Qwen3_5ForCausalLM               model.layers.N.…, model.embed_tokens, model.norm, lm_head
//   HF Qwen3_5ForConditionalGeneration  model.language_model.…, lm_head (model.visual.*, mtp.* skipped)
//   MLX (mlx-lm / mlx-vlm)              language_model.model.…, language_model.lm_head; 4-bit affine weights
//                                       as U32 `weight` + bf16 `scales`/`biases`; conv1d [C,K,1]; the (1+w)
//                                       norms stored as 1+w (un-shifted here, so ModelWeights always holds w)
// Projection weights become zero-copy hkv::Matrix views over the file mapping; norm, conv, A_log and dt_bias
// become fp32 vectors. Every expected tensor is checked for presence, dtype, shape against the config and
// finite values (one pass); any tensor the model does not use is an error too. Messages name the file and
// the tensor.
#pragma once

#include <string>

#include "reference/config.h"
#include "reference/safetensors.h"

namespace hkv {

// `path`: a directory holding config.json and model.safetensors (or model.safetensors.index.json and its
// shards), or the path of that config.json.
Model load_model(const std::string& path);

// The weights of a config from an already opened set of tensors (load_model's second half).
ModelWeights load_weights(const Config& config, const TensorSet& tensors);

}  // namespace hkv
