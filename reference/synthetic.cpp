#include "reference/synthetic.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "reference/checkpoint.h"

namespace hkv {

uint64_t synth_tensor_id(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

int synth_exponent(int64_t cols, int gain_log2) {
  // entries n·2^−e with std(n) ≈ 73.3: std = 73.3·2^−e ≈ 2^gain / sqrt(cols)
  return int(std::lround(std::log2(73.3) + 0.5 * std::log2(double(cols)))) - gain_log2;
}

int synth_mlx4_exponent(int64_t cols, int gain_log2) {
  // codes are uniform on 0..15 (std 4.6): pick e so that 4.6·2^−e ≈ 2^gain/sqrt(cols)
  return int(std::lround(std::log2(4.6) + 0.5 * std::log2(double(cols)))) - gain_log2;
}

std::vector<float> synth_vector(uint64_t seed, const std::string& name, int64_t n, int e, float offset) {
  const uint64_t id = synth_tensor_id(name);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++)
    v[size_t(i)] = offset + float(synth_int(seed, id, uint64_t(i))) * f32_from_bits(uint32_t(127 - e) << 23);
  return v;
}

std::vector<float> synth_k_norm(const SyntheticSpec& spec, const std::string& layer_prefix, int head_dim) {
  std::vector<float> k = synth_vector(spec.seed, layer_prefix + "self_attn.k_norm", head_dim, 10);
  // outlier channels: spread over the head, made large through (1 + w)
  for (int i = 0; i < spec.outlier_channels; i++) k[size_t((i * 37 + 5) % head_dim)] = spec.outlier_gain - 1.0f;
  return k;
}

namespace {

struct Builder {
  const SyntheticSpec& spec;

  Matrix dense(const std::string& name, int64_t rows, int64_t cols, int gain_log2) const {
    return dense_e(name, rows, cols, synth_exponent(cols, gain_log2));
  }

  Matrix dense_e(const std::string& name, int64_t rows, int64_t cols, int e) const {
    const uint64_t id = synth_tensor_id(name);
    auto v = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(rows * cols));
    for (int64_t i = 0; i < rows * cols; i++) (*v)[size_t(i)] = synth_bf16(spec.seed, id, uint64_t(i), e);
    Matrix m;
    m.type = WType::BF16;
    m.rows = rows;
    m.cols = cols;
    m.data = v->data();
    m.keep = v;
    return m;
  }

  Matrix mlx4(const std::string& name, int64_t rows, int64_t cols, int gain_log2) const {
    const uint64_t id = synth_tensor_id(name);
    const int group = spec.config.quant_group_size;
    const int e = synth_mlx4_exponent(cols, gain_log2);
    auto q = std::make_shared<std::vector<uint32_t>>(static_cast<size_t>(rows * cols / 8));
    auto sb = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(2 * rows * (cols / group)));
    for (size_t i = 0; i < q->size(); i++) (*q)[i] = synth_mlx4_word(spec.seed, id, i);
    const size_t ng = size_t(rows * (cols / group));
    for (size_t g = 0; g < ng; g++) {
      uint16_t s = synth_mlx4_scale(spec.seed, id, g, e);
      (*sb)[g] = s;
      (*sb)[ng + g] = bf16_from_f32(-8.0f * f32_from_bf16(s));  // exact
    }
    Matrix m;
    m.type = WType::MLX4;
    m.rows = rows;
    m.cols = cols;
    m.group = group;
    m.data = q->data();
    m.scales = sb->data();
    m.biases = sb->data() + ng;
    struct Both {
      std::shared_ptr<std::vector<uint32_t>> q;
      std::shared_ptr<std::vector<uint16_t>> sb;
    };
    m.keep = std::make_shared<Both>(Both{q, sb});
    return m;
  }

  Matrix linear(const std::string& name, int64_t rows, int64_t cols, int gain_log2 = 0) const {
    return spec.weights == WType::MLX4 ? mlx4(name, rows, cols, gain_log2) : dense(name, rows, cols, gain_log2);
  }

  std::vector<float> vec(const std::string& name, int64_t n, int e, float offset = 0.0f) const {
    return synth_vector(spec.seed, name, n, e, offset);
  }
};

}  // namespace

// Bytes of the weights build_synthetic makes for a spec.
static double synthetic_bytes(const SyntheticSpec& spec) {
  const Config& c = spec.config;
  const WType t = spec.weights;
  const int g = c.quant_group_size;
  const int64_t E = c.hidden_size, I = c.intermediate_size;
  double b = double(matrix_bytes(WType::BF16, c.vocab_size, E, 0)) + double(matrix_bytes(t, c.vocab_size, E, g));
  for (LayerKind k : c.layer_types) {
    b += 3.0 * double(matrix_bytes(t, I, E, g));
    if (k == LayerKind::Full) {
      const int64_t H = c.num_attention_heads, KV = c.num_key_value_heads, D = c.head_dim;
      b += double(matrix_bytes(t, H * 2 * D, E, g)) + 2.0 * double(matrix_bytes(t, KV * D, E, g)) +
           double(matrix_bytes(t, E, H * D, g));
    } else {
      const int64_t nv = c.linear_num_value_heads, dv = c.linear_value_head_dim;
      b += double(matrix_bytes(t, c.conv_dim(), E, g)) + 2.0 * double(matrix_bytes(t, nv * dv, E, g)) +
           2.0 * double(matrix_bytes(t, nv, E, g));
    }
  }
  return b;
}

Model build_synthetic(const SyntheticSpec& spec) {
  const Config& c = spec.config;
  c.validate("synthetic config");
  // Refuse up front a model that does not fit (the 27B shape is for the engine, which builds it on the GPU).
  const double need = synthetic_bytes(spec);
  const uint64_t avail = available_memory_bytes();
  if (avail && need > double(avail))
    throw std::runtime_error("synthetic model: its weights need " + std::to_string(int64_t(need / 1048576.0)) +
                             " MiB; " + std::to_string(avail / 1048576) +
                             " MiB are available (the engine generates large shapes on the device)");
  if (spec.weights == WType::MLX4 && (c.quant_group_size == 0 || c.hidden_size % c.quant_group_size != 0))
    throw std::runtime_error("synthetic config: field 'quantization.group_size' must divide the hidden size");
  Builder b{spec};
  Model m;
  m.config = c;
  m.source = "synthetic(seed=" + std::to_string(spec.seed) + ")";
  const int64_t E = c.hidden_size, I = c.intermediate_size;
  // embeddings of std ≈ 1.1 (n·2^−6) whatever the width: RMSNorm follows, the scale only sets the residual's
  m.w.embed = b.dense_e("embed_tokens", c.vocab_size, E, 6);
  for (int l = 0; l < c.num_hidden_layers; l++) {
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerWeights lw;
    lw.kind = c.layer_types[size_t(l)];
    lw.input_norm = b.vec(p + "input_layernorm", E, 10);
    lw.post_attn_norm = b.vec(p + "post_attention_layernorm", E, 10);
    if (lw.kind == LayerKind::Full) {
      const int H = c.num_attention_heads, KV = c.num_key_value_heads, D = c.head_dim;
      lw.full.q_proj = b.linear(p + "self_attn.q_proj", int64_t(H) * 2 * D, E, spec.sharpness_log2);
      lw.full.k_proj = b.linear(p + "self_attn.k_proj", int64_t(KV) * D, E, spec.sharpness_log2);
      lw.full.v_proj = b.linear(p + "self_attn.v_proj", int64_t(KV) * D, E);
      lw.full.o_proj = b.linear(p + "self_attn.o_proj", E, int64_t(H) * D);
      lw.full.q_norm = b.vec(p + "self_attn.q_norm", D, 10);
      lw.full.k_norm = synth_k_norm(spec, p, D);
    } else {
      const int nv = c.linear_num_value_heads;
      const int dv = c.linear_value_head_dim;
      lw.lin.in_proj_qkv = b.linear(p + "linear_attn.in_proj_qkv", c.conv_dim(), E);
      lw.lin.in_proj_z = b.linear(p + "linear_attn.in_proj_z", int64_t(nv) * dv, E);
      lw.lin.in_proj_b = b.linear(p + "linear_attn.in_proj_b", nv, E);
      lw.lin.in_proj_a = b.linear(p + "linear_attn.in_proj_a", nv, E);
      lw.lin.out_proj = b.linear(p + "linear_attn.out_proj", E, int64_t(nv) * dv);
      lw.lin.conv = b.vec(p + "linear_attn.conv1d", c.conv_dim() * c.linear_conv_kernel_dim, 8);
      lw.lin.A_log = b.vec(p + "linear_attn.A_log", nv, 7);
      lw.lin.dt_bias = b.vec(p + "linear_attn.dt_bias", nv, 8);
      lw.lin.norm = b.vec(p + "linear_attn.norm", dv, 10, 1.0f);
    }
    lw.gate_proj = b.linear(p + "mlp.gate_proj", I, E);
    lw.up_proj = b.linear(p + "mlp.up_proj", I, E);
    lw.down_proj = b.linear(p + "mlp.down_proj", E, I);
    m.w.layers.push_back(std::move(lw));
  }
  m.w.final_norm = b.vec("norm", E, 10);
  m.w.lm_head = b.linear("lm_head", c.vocab_size, E);
  return m;
}

static Config base_config() {
  Config c;
  c.rope_theta = 1e7;
  c.partial_rotary_factor = 0.25;
  c.rms_norm_eps = 1e-6;
  c.max_position_embeddings = 262144;
  c.linear_conv_kernel_dim = 4;
  return c;
}

static void interval_layers(Config& c, int interval) {
  c.layer_types.clear();
  for (int i = 0; i < c.num_hidden_layers; i++)
    c.layer_types.push_back((i + 1) % interval == 0 ? LayerKind::Full : LayerKind::Linear);
}

SyntheticSpec builtin_spec(const std::string& name) {
  SyntheticSpec s;
  Config c = base_config();
  if (name == "tiny" || name == "tiny-mlx4") {
    c.vocab_size = 256;  // byte-level
    c.hidden_size = 128;
    c.intermediate_size = 256;
    c.num_hidden_layers = 4;
    interval_layers(c, 2);
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 256;
    c.linear_num_key_heads = 2;
    c.linear_num_value_heads = 4;
    c.linear_key_head_dim = 32;
    c.linear_value_head_dim = 32;
    s.outlier_channels = 4;
    s.sharpness_log2 = 1;
    if (name == "tiny-mlx4") {
      s.weights = WType::MLX4;
      c.quant_bits = 4;
      c.quant_group_size = 64;
    }
  } else if (name == "100m") {
    c.vocab_size = 8192;
    c.hidden_size = 768;
    c.intermediate_size = 2048;
    c.num_hidden_layers = 12;
    interval_layers(c, 4);
    c.num_attention_heads = 8;
    c.num_key_value_heads = 2;
    c.head_dim = 256;
    c.linear_num_key_heads = 4;
    c.linear_num_value_heads = 8;
    c.linear_key_head_dim = 64;
    c.linear_value_head_dim = 64;
    s.outlier_channels = 4;
  } else if (name == "27b" || name == "27b-mlx4") {
    c.vocab_size = 248320;
    c.hidden_size = 5120;
    c.intermediate_size = 17408;
    c.num_hidden_layers = 64;
    interval_layers(c, 4);
    c.num_attention_heads = 24;
    c.num_key_value_heads = 4;
    c.head_dim = 256;
    c.linear_num_key_heads = 16;
    c.linear_num_value_heads = 48;
    c.linear_key_head_dim = 128;
    c.linear_value_head_dim = 128;
    s.outlier_channels = 4;
    if (name == "27b-mlx4") {
      s.weights = WType::MLX4;
      c.quant_bits = 4;
      c.quant_group_size = 64;
    }
  } else {
    throw std::runtime_error("unknown built-in model '" + name + "' (tiny, tiny-mlx4, 100m, 27b, 27b-mlx4)");
  }
  s.config = c;
  return s;
}

SyntheticSpec load_synthetic_spec(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(path + ": cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("synthetic") || !j["synthetic"].is_object())
    throw std::runtime_error(path + ": field 'synthetic' is missing");
  const nlohmann::json& sj = j["synthetic"];
  SyntheticSpec s;
  if (sj.contains("builtin")) s = builtin_spec(sj["builtin"].get<std::string>());
  if (sj.contains("config")) s.config = parse_config(sj["config"].dump(), path + ": synthetic.config");
  // A number that fits the field's type: converting an out-of-range double (1e300 as a seed) is undefined.
  auto num = [&](const char* key, auto& out) {
    using T = std::remove_reference_t<decltype(out)>;
    if (!sj.contains(key)) return;
    const nlohmann::json& v = sj[key];
    const std::string field = path + ": field 'synthetic." + key + "'";
    if (!v.is_number()) throw std::runtime_error(field + " must be a number");
    if constexpr (std::is_integral_v<T>) {
      if (!v.is_number_integer()) throw std::runtime_error(field + ": " + v.dump() + " is not an integer");
      const bool fits = v.is_number_unsigned()
                            ? v.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max())
                            : v.get<int64_t>() >= int64_t(std::numeric_limits<T>::min()) &&
                                  (std::is_unsigned_v<T> || v.get<int64_t>() <= int64_t(std::numeric_limits<T>::max()));
      if (!fits) throw std::runtime_error(field + ": " + v.dump() + " is out of range");
    } else {
      if (!(std::fabs(v.get<double>()) <= double(std::numeric_limits<T>::max())))
        throw std::runtime_error(field + ": " + v.dump() + " is out of range");
    }
    out = v.get<T>();
  };
  num("seed", s.seed);
  num("outlier_channels", s.outlier_channels);
  num("outlier_gain", s.outlier_gain);
  num("sharpness_log2", s.sharpness_log2);
  if (sj.contains("weights")) {
    std::string w = sj["weights"].get<std::string>();
    if (w == "bf16")
      s.weights = WType::BF16;
    else if (w == "mlx4")
      s.weights = WType::MLX4;
    else
      throw std::runtime_error(path + ": field 'synthetic.weights': '" + w + "' is not bf16 or mlx4");
  }
  if (s.config.num_hidden_layers == 0) throw std::runtime_error(path + ": field 'synthetic.config' is missing");
  // build_synthetic indexes k_norm by (i·37 + 5) mod head_dim and shifts exponents by sharpness_log2: keep
  // both where that arithmetic cannot overflow.
  if (s.outlier_channels < 0 || s.outlier_channels > s.config.head_dim)
    throw std::runtime_error(path + ": field 'synthetic.outlier_channels': " + std::to_string(s.outlier_channels) +
                             " is not in [0, head_dim " + std::to_string(s.config.head_dim) + "]");
  if (s.sharpness_log2 < -16 || s.sharpness_log2 > 16)
    throw std::runtime_error(path + ": field 'synthetic.sharpness_log2': " + std::to_string(s.sharpness_log2) +
                             " is not in [-16, 16]");
  return s;
}

Model load_any_model(const std::string& path) {
  if (path.rfind("builtin:", 0) == 0) {
    Model m = build_synthetic(builtin_spec(path.substr(8)));
    m.source = path;
    return m;
  }
  if (path.size() > 5 && path.substr(path.size() - 5) == ".json") {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    if (ss.str().find("\"synthetic\"") != std::string::npos) {
      Model m = build_synthetic(load_synthetic_spec(path));
      m.source = path;
      return m;
    }
  }
  return load_model(path);
}

}  // namespace hkv
