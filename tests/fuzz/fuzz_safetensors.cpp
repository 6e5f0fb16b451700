// libFuzzer target: the safetensors reader (reference/safetensors.cpp) and, behind it, the checkpoint
// loader's checks (reference/checkpoint.cpp: names, dtypes, shapes, NaN/inf, MLX 4-bit parts).
//
// The input is the bytes of one .safetensors file. It is written to a temporary file (the reader maps a
// path; no test-only API), opened with SafetensorsFile and with TensorSet, every float tensor is converted
// to fp32, and the tensors are loaded against a tiny config (tests/fuzz/corpus/safetensors/valid_tiny_model
// is a complete checkpoint for it, so mutations of that seed reach every check of the loader).
// A std::exception is a clean refusal; a crash, a sanitizer report, a leak or a hang is a bug.
#include <cstdint>
#include <exception>

#include "reference/checkpoint.h"
#include "reference/config.h"
#include "reference/safetensors.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

// hidden 8, 2 layers (linear, full), head_dim 4, conv kernel 2, vocab 4 (tests/fuzz/make_seeds.py).
constexpr const char* kTinyConfig = R"({
  "model_type": "qwen3_5_text", "vocab_size": 4, "hidden_size": 8, "intermediate_size": 8,
  "num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"],
  "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "partial_rotary_factor": 0.5,
  "linear_num_key_heads": 1, "linear_num_value_heads": 1, "linear_key_head_dim": 4,
  "linear_value_head_dim": 4, "linear_conv_kernel_dim": 2, "max_position_embeddings": 64,
  "tie_word_embeddings": false})";

// The same shapes, MLX-quantized (group 32 is the smallest allowed; hidden 8 is not a multiple of it, so the
// loader's "columns are not a multiple of group_size" and missing-scales checks get exercised too).
constexpr const char* kTinyMlxConfig = R"({
  "model_type": "qwen3_5_text", "vocab_size": 4, "hidden_size": 8, "intermediate_size": 8,
  "num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"],
  "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "partial_rotary_factor": 0.5,
  "linear_num_key_heads": 1, "linear_num_value_heads": 1, "linear_key_head_dim": 4,
  "linear_value_head_dim": 4, "linear_conv_kernel_dim": 2, "max_position_embeddings": 64,
  "tie_word_embeddings": true, "quantization": {"bits": 4, "group_size": 32}})";

const hkv::Config& config(int which) {
  static const hkv::Config plain = hkv::parse_config(kTinyConfig, "fuzz tiny config");
  static const hkv::Config mlx = hkv::parse_config(kTinyMlxConfig, "fuzz tiny mlx config");
  return which ? mlx : plain;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = hkv_fuzz::temp_path("safetensors", ".safetensors");
  hkv_fuzz::write_bytes(path, data, size);
  try {
    hkv::SafetensorsFile file(path);
    volatile float sink = 0;
    for (const auto& [name, t] : file.tensors()) {
      if (t.nbytes != t.numel() * int64_t(hkv::dtype_size(t.dtype))) __builtin_trap();  // the reader's promise
      if (t.dtype == hkv::DType::F32 || t.dtype == hkv::DType::BF16 || t.dtype == hkv::DType::F16 ||
          t.dtype == hkv::DType::F64) {
        for (float v : hkv::tensor_to_f32(t)) sink = sink + v;
      }
      (void)file.find(name);
    }
  } catch (const std::exception&) {
  }
  for (int which : {0, 1}) {
    try {
      hkv::TensorSet set = hkv::TensorSet::open(path);
      hkv::ModelWeights w = hkv::load_weights(config(which), set);
      (void)w;
    } catch (const std::exception&) {
    }
  }
  return 0;
}
