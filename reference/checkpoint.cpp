#include "reference/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>

#include "reference/scalar.h"

namespace hkv {

namespace {

// Tensors that belong to other parts of the released checkpoints: the vision tower and the multi-token
// prediction head. They are not part of the text model and are never read.
bool skipped(const std::string& name) {
  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  return starts("model.visual.") || starts("mtp.") || starts("vision_tower.") ||
         name.find(".visual.") != std::string::npos || name.find(".mtp.") != std::string::npos;
}

std::string shape_str(const std::vector<int64_t>& s) {
  Tensor t;
  t.shape = s;
  return t.shape_str();
}

// The first element of a float tensor that is NaN or infinite, or n when all are finite. `mask` is the
// exponent field: all ones means inf or NaN in every IEEE format. One parallel pass over the bytes.
template <typename U>
int64_t first_nonfinite(const uint8_t* p, int64_t n, U mask) {
  int64_t first = n;
#pragma omp parallel for reduction(min : first) schedule(static)
  for (int64_t i = 0; i < n; i++) {
    U v;
    std::memcpy(&v, p + size_t(i) * sizeof(U), sizeof(U));
    if ((v & mask) == mask) first = std::min(first, i);
  }
  return first;
}

void check_finite(const Tensor& t) {
  const int64_t n = t.numel();
  int64_t bad = n;
  switch (t.dtype) {
    case DType::F32:
      bad = first_nonfinite<uint32_t>(t.data, n, 0x7f800000u);
      break;
    case DType::BF16:
      bad = first_nonfinite<uint16_t>(t.data, n, 0x7f80u);
      break;
    case DType::F16:
      bad = first_nonfinite<uint16_t>(t.data, n, 0x7c00u);
      break;
    default:
      return;  // integer data (packed 4-bit words) has no NaN
  }
  if (bad < n) {
    float v = tensor_to_f32(t)[size_t(bad)];
    throw std::runtime_error(t.where() + ": element " + std::to_string(bad) + " is " +
                             (is_nan(v) ? "NaN" : "infinite"));
  }
}

// The tensor's bytes for a Matrix: zero-copy when aligned for the element type (writers pad the header, so
// this is the usual case), else a private aligned copy, so no product ever reads a misaligned value.
const void* matrix_bytes(const Tensor& t, std::shared_ptr<const void>& keep) {
  if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) == 0) {
    keep = t.keep;
    return t.data;
  }
  auto copy = std::make_shared<std::vector<uint64_t>>((t.nbytes + 7) / 8);
  std::memcpy(copy->data(), t.data, t.nbytes);
  keep = copy;
  return copy->data();
}

// Reads the tensors of one model, remembering which were used so that leftovers can be reported.
class Loader {
 public:
  Loader(const Config& cfg, const TensorSet& ts) : cfg_(cfg), ts_(ts) { detect_layout(); }

  ModelWeights load();

 private:
  const Config& cfg_;
  const TensorSet& ts_;
  std::string prefix_;   // "model." | "model.language_model." | "language_model.model."
  std::string lm_head_;  // "lm_head" | "language_model.lm_head"
  bool mlx_form_ = false;
  std::set<std::string> used_;

  void detect_layout();
  const Tensor& get(const std::string& name);
  void expect_shape(const Tensor& t, const std::vector<int64_t>& shape) const;
  Matrix matrix(const std::string& module, int64_t rows, int64_t cols);
  Matrix mlx4(const std::string& module, const Tensor& w, int64_t rows, int64_t cols);
  std::vector<float> vec(const std::string& name, int64_t n, bool stored_plus_one = false);
  std::vector<float> conv(const std::string& name);
  LayerWeights layer(int i);
  void check_all_used() const;
};

void Loader::detect_layout() {
  if (ts_.find("language_model.model.embed_tokens.weight")) {
    prefix_ = "language_model.model.";
    lm_head_ = "language_model.lm_head";
  } else if (ts_.find("model.language_model.embed_tokens.weight")) {
    prefix_ = "model.language_model.";
    lm_head_ = "lm_head";
  } else if (ts_.find("model.embed_tokens.weight")) {
    prefix_ = "model.";
    lm_head_ = "lm_head";
  } else {
    throw std::runtime_error(ts_.source() +
                             ": tensor 'model.embed_tokens.weight' is missing (nor under model.language_model. or "
                             "language_model.model.): not a Qwen3.5 checkpoint");
  }
  // mlx-lm decides whether weights are already in its own form by the conv1d layout: it moves HF's [C,1,K]
  // to [C,K,1] and adds 1 to the (1+w) norms in the same step. We decide the same way; a model without
  // linear-attention layers (or with K = 1) falls back to the MLX name prefix.
  mlx_form_ = prefix_ == "language_model.model.";
  const int K = cfg_.linear_conv_kernel_dim;
  for (int i = 0; i < cfg_.num_hidden_layers && K > 1; i++) {
    if (cfg_.layer_types[size_t(i)] != LayerKind::Linear) continue;
    const Tensor* t = ts_.find(prefix_ + "layers." + std::to_string(i) + ".linear_attn.conv1d.weight");
    if (t && t->shape.size() == 3) mlx_form_ = t->shape[1] == K && t->shape[2] == 1;
    break;
  }
}

const Tensor& Loader::get(const std::string& name) {
  const Tensor* t = ts_.find(name);
  if (!t) throw std::runtime_error(ts_.source() + ": tensor '" + name + "' is missing");
  used_.insert(name);
  return *t;
}

void Loader::expect_shape(const Tensor& t, const std::vector<int64_t>& shape) const {
  if (t.shape != shape)
    throw std::runtime_error(t.where() + ": shape " + t.shape_str() + " but config.json implies " + shape_str(shape));
}

// A projection weight [rows, cols]: dense f32/bf16/f16, or MLX 4-bit when it has `scales`.
Matrix Loader::matrix(const std::string& module, int64_t rows, int64_t cols) {
  const Tensor& w = get(module + ".weight");
  if (w.dtype == DType::U32 || ts_.find(module + ".scales")) return mlx4(module, w, rows, cols);
  Matrix m;
  switch (w.dtype) {
    case DType::F32:
      m.type = WType::F32;
      break;
    case DType::BF16:
      m.type = WType::BF16;
      break;
    case DType::F16:
      m.type = WType::F16;
      break;
    default:
      throw std::runtime_error(w.where() + ": dtype " + dtype_name(w.dtype) +
                               " is not a weight type (want F32, BF16, F16, or U32 with scales and biases)");
  }
  expect_shape(w, {rows, cols});
  check_finite(w);
  m.rows = rows;
  m.cols = cols;
  m.data = matrix_bytes(w, m.keep);
  return m;
}

// MLX affine 4-bit: weight U32 [rows, cols/8], scales and biases bf16 [rows, cols/group].
Matrix Loader::mlx4(const std::string& module, const Tensor& w, int64_t rows, int64_t cols) {
  if (w.dtype != DType::U32)
    throw std::runtime_error(w.where() + ": dtype " + dtype_name(w.dtype) + " but '" + module +
                             ".scales' exists: MLX 4-bit weights are U32");
  if (cfg_.quant_bits == 0)
    throw std::runtime_error(w.where() + ": stored MLX-quantized, but config.json has no quantization");
  int group = cfg_.quant_group_size, bits = cfg_.quant_bits;
  if (auto it = cfg_.quant_overrides.find(module); it != cfg_.quant_overrides.end()) std::tie(group, bits) = it->second;
  if (bits != 4)
    throw std::runtime_error(w.where() + ": stored quantized, but config.json's quantization gives this module " +
                             std::to_string(bits) + " bits");
  if (cols % group != 0)
    throw std::runtime_error(w.where() + ": " + std::to_string(cols) + " columns are not a multiple of group_size " +
                             std::to_string(group));
  expect_shape(w, {rows, cols / 8});

  Matrix m;
  m.type = WType::MLX4;
  m.rows = rows;
  m.cols = cols;
  m.group = group;
  std::shared_ptr<const void> keep_w, keep_s, keep_b;
  m.data = matrix_bytes(w, keep_w);
  for (const char* part : {"scales", "biases"}) {
    const Tensor& t = get(module + "." + part);
    if (t.dtype != DType::BF16)
      throw std::runtime_error(t.where() + ": dtype " + dtype_name(t.dtype) +
                               " (MLX 4-bit scales and biases are BF16)");
    expect_shape(t, {rows, cols / group});
    check_finite(t);
    const void* bytes = matrix_bytes(t, part[0] == 's' ? keep_s : keep_b);
    (part[0] == 's' ? m.scales : m.biases) = static_cast<const uint16_t*>(bytes);
  }
  // The three parts may live in different shards (mappings): one owner holding all of them.
  m.keep = std::make_shared<std::vector<std::shared_ptr<const void>>>(
      std::vector<std::shared_ptr<const void>>{keep_w, keep_s, keep_b});
  return m;
}

// A 1-D weight as fp32. `stored_plus_one`: a (1+w) norm, which MLX stores as 1+w; ModelWeights keeps w.
std::vector<float> Loader::vec(const std::string& name, int64_t n, bool stored_plus_one) {
  const Tensor& t = get(name);
  expect_shape(t, {n});
  check_finite(t);
  std::vector<float> v = tensor_to_f32(t);
  if (stored_plus_one && mlx_form_)
    for (float& x : v) x = x - 1.0f;
  return v;
}

// The depthwise conv weight as [conv_dim][K]. HF stores [C,1,K], MLX [C,K,1]: both are c·K + k in memory.
std::vector<float> Loader::conv(const std::string& name) {
  const Tensor& t = get(name);
  const int64_t C = cfg_.conv_dim(), K = cfg_.linear_conv_kernel_dim;
  expect_shape(t, mlx_form_ ? std::vector<int64_t>{C, K, 1} : std::vector<int64_t>{C, 1, K});
  check_finite(t);
  return tensor_to_f32(t);
}

LayerWeights Loader::layer(int i) {
  const Config& c = cfg_;
  const std::string p = prefix_ + "layers." + std::to_string(i) + ".";
  const int64_t H = c.hidden_size;
  LayerWeights L;
  L.kind = c.layer_types[size_t(i)];
  L.input_norm = vec(p + "input_layernorm.weight", H, true);
  L.post_attn_norm = vec(p + "post_attention_layernorm.weight", H, true);
  if (L.kind == LayerKind::Linear) {
    const int64_t nv = c.linear_num_value_heads, value_dim = nv * c.linear_value_head_dim;
    LinearAttnWeights& a = L.lin;
    a.in_proj_qkv = matrix(p + "linear_attn.in_proj_qkv", c.conv_dim(), H);
    a.in_proj_z = matrix(p + "linear_attn.in_proj_z", value_dim, H);
    a.in_proj_b = matrix(p + "linear_attn.in_proj_b", nv, H);
    a.in_proj_a = matrix(p + "linear_attn.in_proj_a", nv, H);
    a.conv = conv(p + "linear_attn.conv1d.weight");
    a.A_log = vec(p + "linear_attn.A_log", nv);
    a.dt_bias = vec(p + "linear_attn.dt_bias", nv);
    a.norm = vec(p + "linear_attn.norm.weight", c.linear_value_head_dim);  // plain w, never shifted
    a.out_proj = matrix(p + "linear_attn.out_proj", H, value_dim);
  } else {
    const int64_t hd = c.head_dim, q_rows = int64_t(c.num_attention_heads) * hd * (c.attn_output_gate ? 2 : 1);
    FullAttnWeights& a = L.full;
    a.q_proj = matrix(p + "self_attn.q_proj", q_rows, H);
    a.k_proj = matrix(p + "self_attn.k_proj", c.num_key_value_heads * hd, H);
    a.v_proj = matrix(p + "self_attn.v_proj", c.num_key_value_heads * hd, H);
    a.o_proj = matrix(p + "self_attn.o_proj", H, c.num_attention_heads * hd);
    a.q_norm = vec(p + "self_attn.q_norm.weight", hd, true);
    a.k_norm = vec(p + "self_attn.k_norm.weight", hd, true);
  }
  L.gate_proj = matrix(p + "mlp.gate_proj", c.intermediate_size, H);
  L.up_proj = matrix(p + "mlp.up_proj", c.intermediate_size, H);
  L.down_proj = matrix(p + "mlp.down_proj", H, c.intermediate_size);
  return L;
}

// A tensor nobody reads means the config and the checkpoint disagree (another layer count, a bias, ...).
void Loader::check_all_used() const {
  for (const auto& [name, t] : ts_.tensors())
    if (!used_.count(name) && !skipped(name))
      throw std::runtime_error(t.where() + ": not part of the model config.json describes");
}

ModelWeights Loader::load() {
  ModelWeights w;
  w.embed = matrix(prefix_ + "embed_tokens", cfg_.vocab_size, cfg_.hidden_size);
  for (int i = 0; i < cfg_.num_hidden_layers; i++) w.layers.push_back(layer(i));
  w.final_norm = vec(prefix_ + "norm.weight", cfg_.hidden_size, true);
  if (cfg_.tie_word_embeddings) {
    w.lm_head = w.embed;
    // a tied checkpoint may still carry a copy of the head; it is ignored, as transformers does
    for (const char* part : {".weight", ".scales", ".biases"})
      if (ts_.find(lm_head_ + part)) used_.insert(lm_head_ + part);
  } else {
    w.lm_head = matrix(lm_head_, cfg_.vocab_size, cfg_.hidden_size);
  }
  check_all_used();
  return w;
}

}  // namespace

ModelWeights load_weights(const Config& config, const TensorSet& tensors) { return Loader(config, tensors).load(); }

Model load_model(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path dir(path);
  if (!fs::is_directory(dir)) dir = dir.parent_path();  // the path of config.json
  if (dir.empty()) dir = ".";
  Model m;
  m.source = path;
  m.config = load_config((dir / "config.json").string());
  TensorSet tensors = TensorSet::open(dir.string());
  m.w = load_weights(m.config, tensors);
  return m;
}

}  // namespace hkv
