// Reading config.json into hkv::Config.
//
// Three shapes of file are accepted (../shared/model-facts.md, transformers' configuration_qwen3_5.py):
//   - `qwen3_5_text` (Qwen3_5ForCausalLM): the text fields at the top level;
//   - `qwen3_5` (Qwen3_5ForConditionalGeneration, how the released checkpoints ship): the text fields under
//     `text_config`, the vision fields elsewhere (ignored);
//   - either of them converted by MLX: the same, plus `quantization` {group_size, bits, mode, <module>: {...}}.
// Every problem is a std::runtime_error naming the file and the field, because a wrong config is the most
// common way to load a checkpoint into the wrong shape.
#include "reference/config.h"

#include <climits>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace hkv {

namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& where, const std::string& field, const std::string& what) {
  throw std::runtime_error(where + ": field '" + field + "': " + what);
}

// One JSON object of the config and how its fields are named in messages ("text_config.hidden_size").
struct Fields {
  const json& obj;
  std::string where;   // the file
  std::string prefix;  // "" or "text_config."

  std::string name(const std::string& key) const { return prefix + key; }
  const json* find(const std::string& key) const {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  const json& require(const std::string& key) const {
    const json* v = find(key);
    if (!v) fail(where, name(key), "missing (required)");
    return *v;
  }
};

std::string got(const json& v) {
  std::string text = v.dump();
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  return std::string(v.type_name()) + " " + text;
}

// A JSON integer that fits an int64 (the only integral type the config needs; ints are narrowed later).
int64_t as_int(const Fields& f, const std::string& key, const json& v) {
  if (!v.is_number_integer()) fail(f.where, f.name(key), "expected an integer, got " + got(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) fail(f.where, f.name(key), "too large");
  return v.get<int64_t>();
}

double as_double(const Fields& f, const std::string& key, const json& v) {
  if (!v.is_number()) fail(f.where, f.name(key), "expected a number, got " + got(v));
  return v.get<double>();
}

bool as_bool(const Fields& f, const std::string& key, const json& v) {
  if (!v.is_boolean()) fail(f.where, f.name(key), "expected true or false, got " + got(v));
  return v.get<bool>();
}

// A positive count that must fit in an int (heads, layers, dims).
int positive_int(const Fields& f, const std::string& key, const json& v) {
  int64_t n = as_int(f, key, v);
  if (n <= 0 || n > INT_MAX) fail(f.where, f.name(key), std::to_string(n) + " is not a positive int");
  return int(n);
}

int64_t positive_int64(const Fields& f, const std::string& key, const json& v) {
  int64_t n = as_int(f, key, v);
  if (n <= 0) fail(f.where, f.name(key), std::to_string(n) + " is not positive");
  return n;
}

// layer_types when given, else derived from full_attention_interval exactly as transformers does:
// layer i is full attention when (i+1) % interval == 0 (interval defaults to 4).
std::vector<LayerKind> read_layer_types(const Fields& f, int num_layers) {
  std::vector<LayerKind> kinds;
  if (const json* lt = f.find("layer_types")) {
    if (!lt->is_array()) fail(f.where, f.name("layer_types"), "expected a list, got " + got(*lt));
    for (size_t i = 0; i < lt->size(); i++) {
      const json& e = (*lt)[i];
      std::string field = "layer_types[" + std::to_string(i) + "]";
      if (e == "linear_attention") {
        kinds.push_back(LayerKind::Linear);
      } else if (e == "full_attention") {
        kinds.push_back(LayerKind::Full);
      } else {
        fail(f.where, f.name(field), got(e) + " is neither \"linear_attention\" nor \"full_attention\"");
      }
    }
    return kinds;
  }
  int interval = 4;
  if (const json* v = f.find("full_attention_interval")) interval = positive_int(f, "full_attention_interval", *v);
  for (int i = 0; i < num_layers; i++) kinds.push_back((i + 1) % interval == 0 ? LayerKind::Full : LayerKind::Linear);
  return kinds;
}

// rope_theta and partial_rotary_factor: newer transformers keep them inside `rope_parameters`, older configs
// at the top level or inside `rope_scaling`. The first place that has the key wins.
const json* find_rope_key(const Fields& f, const std::string& key, std::string& field) {
  for (const char* dict : {"rope_parameters", "rope_scaling"}) {
    const json* d = f.find(dict);
    if (d && d->is_object() && d->contains(key) && !(*d)[key].is_null()) {
      field = std::string(dict) + "." + key;
      return &(*d)[key];
    }
  }
  field = key;
  return f.find(key);
}

void read_rope(const Fields& f, Config& c) {
  for (const char* dict : {"rope_parameters", "rope_scaling"}) {
    const json* d = f.find(dict);
    if (!d) continue;
    if (!d->is_object()) fail(f.where, f.name(dict), "expected an object, got " + got(*d));
    // M-RoPE ("default" with mrope_section) reduces to plain RoPE for text; anything else changes the math.
    for (const char* type_key : {"rope_type", "type"}) {
      auto it = d->find(type_key);
      if (it != d->end() && !it->is_null() && *it != "default")
        fail(f.where, f.name(std::string(dict) + "." + type_key), got(*it) + " is not supported (only \"default\")");
    }
  }
  std::string field;
  if (const json* v = find_rope_key(f, "rope_theta", field)) c.rope_theta = as_double(f, field, *v);
  if (const json* v = find_rope_key(f, "partial_rotary_factor", field))
    c.partial_rotary_factor = as_double(f, field, *v);
}

// MLX `quantization`: {group_size, bits, mode, "<module path>": {group_size, bits} | false | true}.
// An override of `false` means "this module is not quantized" and is stored as (0, 0).
void read_quantization(const Fields& top, Config& c) {
  const json* q = top.find("quantization");
  if (!q) return;
  if (!q->is_object()) fail(top.where, "quantization", "expected an object, got " + got(*q));
  Fields f{*q, top.where, "quantization."};
  c.quant_bits = positive_int(f, "bits", f.require("bits"));
  c.quant_group_size = positive_int(f, "group_size", f.require("group_size"));
  if (const json* mode = f.find("mode"); mode && *mode != "affine")
    fail(f.where, f.name("mode"), got(*mode) + " is not supported (only \"affine\")");
  for (auto& [key, value] : q->items()) {
    if (key == "bits" || key == "group_size" || key == "mode") continue;
    if (value.is_boolean()) {
      if (!value.get<bool>()) c.quant_overrides[key] = {0, 0};
    } else if (value.is_object()) {
      Fields m{value, top.where, "quantization." + key + "."};
      int group = c.quant_group_size, bits = c.quant_bits;
      if (const json* g = m.find("group_size")) group = positive_int(m, "group_size", *g);
      if (const json* b = m.find("bits")) bits = positive_int(m, "bits", *b);
      c.quant_overrides[key] = {group, bits};
    }
    // other scalar entries (future keys) say nothing about the weights' layout
  }
}

// The text fields, wherever they sit.
void read_text_fields(const Fields& f, Config& c) {
  c.vocab_size = positive_int64(f, "vocab_size", f.require("vocab_size"));
  c.hidden_size = positive_int64(f, "hidden_size", f.require("hidden_size"));
  c.intermediate_size = positive_int64(f, "intermediate_size", f.require("intermediate_size"));
  c.num_hidden_layers = positive_int(f, "num_hidden_layers", f.require("num_hidden_layers"));
  c.num_attention_heads = positive_int(f, "num_attention_heads", f.require("num_attention_heads"));
  c.num_key_value_heads = positive_int(f, "num_key_value_heads", f.require("num_key_value_heads"));
  c.linear_num_key_heads = positive_int(f, "linear_num_key_heads", f.require("linear_num_key_heads"));
  c.linear_num_value_heads = positive_int(f, "linear_num_value_heads", f.require("linear_num_value_heads"));
  c.linear_key_head_dim = positive_int(f, "linear_key_head_dim", f.require("linear_key_head_dim"));
  c.linear_value_head_dim = positive_int(f, "linear_value_head_dim", f.require("linear_value_head_dim"));

  // head_dim: as transformers, hidden / heads when absent
  if (const json* v = f.find("head_dim")) {
    c.head_dim = positive_int(f, "head_dim", *v);
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      fail(f.where, f.name("head_dim"),
           "absent, and num_attention_heads " + std::to_string(c.num_attention_heads) +
               " does not divide hidden_size " + std::to_string(c.hidden_size));
    c.head_dim = int(c.hidden_size / c.num_attention_heads);
  }
  if (const json* v = f.find("linear_conv_kernel_dim"))
    c.linear_conv_kernel_dim = positive_int(f, "linear_conv_kernel_dim", *v);
  if (const json* v = f.find("attn_output_gate")) c.attn_output_gate = as_bool(f, "attn_output_gate", *v);
  if (const json* v = f.find("rms_norm_eps")) c.rms_norm_eps = as_double(f, "rms_norm_eps", *v);
  if (const json* v = f.find("max_position_embeddings"))
    c.max_position_embeddings = positive_int64(f, "max_position_embeddings", *v);
  if (const json* v = f.find("tie_word_embeddings")) c.tie_word_embeddings = as_bool(f, "tie_word_embeddings", *v);
  if (const json* v = f.find("attention_bias"); v && as_bool(f, "attention_bias", *v))
    fail(f.where, f.name("attention_bias"), "true is not supported (Qwen3.5 has no attention biases)");
  if (const json* v = f.find("hidden_act"); v && *v != "silu")
    fail(f.where, f.name("hidden_act"), got(*v) + " is not supported (only \"silu\")");
  read_rope(f, c);
  c.layer_types = read_layer_types(f, c.num_hidden_layers);
}

}  // namespace

int Config::n_full_layers() const {
  int n = 0;
  for (LayerKind k : layer_types) n += k == LayerKind::Full;
  return n;
}

int Config::n_linear_layers() const { return int(layer_types.size()) - n_full_layers(); }

void Config::validate(const std::string& where) const {
  auto check = [&](bool ok, const std::string& field, const std::string& what) {
    if (!ok) fail(where, field, what);
  };
  auto s = [](auto v) { return std::to_string(v); };
  check(vocab_size > 0, "vocab_size", s(vocab_size) + " is not positive");
  check(hidden_size > 0, "hidden_size", s(hidden_size) + " is not positive");
  check(intermediate_size > 0, "intermediate_size", s(intermediate_size) + " is not positive");
  check(num_hidden_layers > 0, "num_hidden_layers", s(num_hidden_layers) + " is not positive");
  check(num_attention_heads > 0, "num_attention_heads", s(num_attention_heads) + " is not positive");
  check(num_key_value_heads > 0, "num_key_value_heads", s(num_key_value_heads) + " is not positive");
  check(head_dim > 0, "head_dim", s(head_dim) + " is not positive");
  check(linear_num_key_heads > 0, "linear_num_key_heads", s(linear_num_key_heads) + " is not positive");
  check(linear_num_value_heads > 0, "linear_num_value_heads", s(linear_num_value_heads) + " is not positive");
  check(linear_key_head_dim > 0, "linear_key_head_dim", s(linear_key_head_dim) + " is not positive");
  check(linear_value_head_dim > 0, "linear_value_head_dim", s(linear_value_head_dim) + " is not positive");
  check(linear_conv_kernel_dim > 0, "linear_conv_kernel_dim", s(linear_conv_kernel_dim) + " is not positive");

  // GQA: query head h reads KV head h / (heads / kv_heads); DeltaNet value head h uses key head h / (nv / nk).
  check(num_attention_heads % num_key_value_heads == 0, "num_key_value_heads",
        s(num_key_value_heads) + " does not divide num_attention_heads " + s(num_attention_heads));
  check(linear_num_value_heads % linear_num_key_heads == 0, "linear_num_key_heads",
        s(linear_num_key_heads) + " does not divide linear_num_value_heads " + s(linear_num_value_heads));
  check(int64_t(layer_types.size()) == num_hidden_layers, "layer_types",
        "has " + s(layer_types.size()) + " entries but num_hidden_layers is " + s(num_hidden_layers));

  // RoPE rotates rotary_dim = head_dim·factor dims in two halves, so that must be an even integer.
  const double rot = head_dim * partial_rotary_factor;
  std::ostringstream rot_text;
  rot_text << "head_dim " << head_dim << " × " << partial_rotary_factor << " = " << rot;
  check(partial_rotary_factor > 0 && partial_rotary_factor <= 1, "partial_rotary_factor",
        rot_text.str() + ": the factor must be in (0, 1]");
  check(rot == std::floor(rot) && int64_t(rot) % 2 == 0, "partial_rotary_factor",
        rot_text.str() + " is not an even integer");
  check(rope_theta > 0 && std::isfinite(rope_theta), "rope_theta", "must be a positive number");
  check(rms_norm_eps > 0 && std::isfinite(rms_norm_eps), "rms_norm_eps", "must be a positive number");
  check(max_position_embeddings > 0, "max_position_embeddings", "must be positive");

  // MLX: only 4-bit affine is implemented; the canonical product needs 32-weight chunks inside one group.
  auto check_quant = [&](const std::string& field, int group, int bits) {
    check(bits == 4, field + "bits", s(bits) + " is not supported (only 4)");
    check(group == 32 || group == 64 || group == 128, field + "group_size", s(group) + " is not 32, 64 or 128");
  };
  if (quant_bits != 0) check_quant("quantization.", quant_group_size, quant_bits);
  for (const auto& [module, gb] : quant_overrides) {
    if (gb.second == 0) continue;  // not quantized
    check(quant_bits != 0, "quantization." + module, "an override without a global quantization");
    check_quant("quantization." + module + ".", gb.first, gb.second);
  }
}

Config parse_config(const std::string& json_text, const std::string& where) {
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw std::runtime_error(where + ": not valid JSON: " + e.what());
  }
  if (!doc.is_object()) throw std::runtime_error(where + ": expected a JSON object at the top, got " + got(doc));
  Fields top{doc, where, ""};

  const json& model_type = top.require("model_type");
  Config c;
  if (model_type == "qwen3_5_text") {
    read_text_fields(top, c);
  } else if (model_type == "qwen3_5") {
    const json& text = top.require("text_config");
    if (!text.is_object()) fail(where, "text_config", "expected an object, got " + got(text));
    Fields tf{text, where, "text_config."};
    // mlx-vlm writes "qwen3_5" here, transformers "qwen3_5_text"
    if (const json* mt = tf.find("model_type"); mt && *mt != "qwen3_5_text" && *mt != "qwen3_5")
      fail(where, tf.name("model_type"), got(*mt) + " is not a Qwen3.5 text model");
    read_text_fields(tf, c);
    // The composite model ties (or not) at its own level; that setting is the one transformers applies.
    if (const json* v = top.find("tie_word_embeddings"))
      c.tie_word_embeddings = as_bool(top, "tie_word_embeddings", *v);
  } else {
    fail(where, "model_type", got(model_type) + " is not supported (want \"qwen3_5_text\" or \"qwen3_5\")");
  }
  read_quantization(top, c);
  c.validate(where);
  return c;
}

Config load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open the config file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path);
}

}  // namespace hkv
