// Config parsing, the safetensors reader and checkpoint loading.
//
// Every checkpoint here is written by the test itself into a temporary directory: a tiny model (2 layers,
// one Gated DeltaNet and one full attention, hidden 64) in each layout — HF CausalLM, HF
// ConditionalGeneration (with vision and MTP tensors to skip), sharded with an index, MLX 4-bit — with
// values that are a known function of the tensor's name and index, so that a value landing in the wrong
// place, a norm left shifted, or a transposed conv shows up as a wrong number. Then each kind of damage is
// applied to a good file and must give its own message.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/checkpoint.h"
#include "reference/config.h"
#include "reference/safetensors.h"
#include "reference/scalar.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- helpers: a temporary directory and a safetensors writer ----------------------------------------

struct TempDir {
  fs::path path;
  TempDir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("hkv_test_checkpoint_" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; i++) s[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file: the 8-byte length, the header text, the data, exactly as given.
void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  write_file(path, le64(header.size()) + header + data);
}

struct Entry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// Tensors to be written, with offsets laid out one after another.
struct StWriter {
  std::vector<Entry> entries;

  void add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape, std::string bytes) {
    entries.push_back({name, dtype, std::move(shape), std::move(bytes)});
  }
  Entry* find(const std::string& name) {
    for (Entry& e : entries)
      if (e.name == name) return &e;
    FAIL("no entry " << name);
    return nullptr;
  }
  void remove(const std::string& name) {
    std::erase_if(entries, [&](const Entry& e) { return e.name == name; });
  }
  // `aligned`: pad the header with spaces so data starts on 8 bytes (as real writers do); otherwise make
  // 8 + N odd, so that every multi-byte tensor is misaligned.
  void write(const std::string& path, bool aligned = true) const {
    json header = json::object();
    header["__metadata__"] = {{"format", "pt"}};
    std::string data;
    for (const Entry& e : entries) {
      header[e.name] = {
          {"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {data.size(), data.size() + e.bytes.size()}}};
      data += e.bytes;
    }
    std::string text = header.dump();
    if (aligned) {
      while (text.size() % 8) text += ' ';
    } else if (text.size() % 2 == 0) {
      text += ' ';
    }
    write_raw(path, text, data);
  }
};

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

std::string encode(const std::vector<float>& v, const std::string& dtype) {
  if (dtype == "F32") return bytes_of(v);
  std::vector<uint16_t> h;
  for (float x : v) h.push_back(dtype == "BF16" ? hkv::bf16_from_f32(x) : hkv::f16_from_f32(x));
  return bytes_of(h);
}

// ---- the tiny model and its known values -------------------------------------------------------------

constexpr int64_t kVocab = 40, kHidden = 64, kInter = 128, kHeads = 4, kKvHeads = 2, kHeadDim = 16;
constexpr int64_t kNk = 2, kNv = 4, kDk = 8, kDv = 8, kConvK = 4;
constexpr int64_t kConvDim = 2 * kNk * kDk + kNv * kDv;  // 64

json tiny_text_config() {
  return {{"vocab_size", kVocab},
          {"hidden_size", kHidden},
          {"intermediate_size", kInter},
          {"num_hidden_layers", 2},
          {"num_attention_heads", kHeads},
          {"num_key_value_heads", kKvHeads},
          {"head_dim", kHeadDim},
          {"linear_num_key_heads", kNk},
          {"linear_num_value_heads", kNv},
          {"linear_key_head_dim", kDk},
          {"linear_value_head_dim", kDv},
          {"linear_conv_kernel_dim", kConvK},
          {"full_attention_interval", 2},
          {"rms_norm_eps", 1e-6},
          {"max_position_embeddings", 4096},
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e7}, {"partial_rotary_factor", 0.25}}},
          {"tie_word_embeddings", false}};
}

uint32_t seed_of(const std::string& name) {  // FNV-1a: a fixed number per tensor name
  uint32_t h = 2166136261u;
  for (char c : name) h = (h ^ uint8_t(c)) * 16777619u;
  return h;
}

// Element i of the tensor `name`: a multiple of 1/16 in [-0.5, 0.5], exact in bf16, f16 and after +1.
float val(const std::string& name, int64_t i) {
  return float(int((uint64_t(seed_of(name)) + uint64_t(i) * 3) % 17) - 8) / 16.0f;
}
std::vector<float> vals(const std::string& name, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) v[size_t(i)] = val(name, i);
  return v;
}

// MLX 4-bit element (r, c) of module `m`: nibble and per-group scale chosen so scale·q + bias is exact.
uint32_t nib(const std::string& m, int64_t r, int64_t c) { return uint32_t((seed_of(m) % 16 + r * 5 + c * 3) % 16); }
float qscale(const std::string& m, int64_t r, int64_t g) { return 0.0625f * float(1 + (seed_of(m) + r + g) % 4); }
constexpr float kQBias = -0.5f;
float qval(const std::string& m, int64_t r, int64_t c, int group) {
  return qscale(m, r, c / group) * float(nib(m, r, c)) + kQBias;
}

enum class Layout { CausalLM, CondGen, MLX };

struct Fixture {
  Layout layout;
  std::string prefix, head;  // tensor name prefix of the text model; module name of lm_head
  StWriter st;
  json config;
};

int group_for(const Fixture& f, const std::string& module) {
  return f.layout == Layout::MLX && module.ends_with("in_proj_b") ? 64 : 32;  // see the override in make()
}

void add_matrix(Fixture& f, const std::string& module, int64_t rows, int64_t cols, const std::string& dtype = "BF16") {
  if (f.layout != Layout::MLX) {
    f.st.add(module + ".weight", dtype, {rows, cols}, encode(vals(module + ".weight", rows * cols), dtype));
    return;
  }
  const int group = group_for(f, module);
  std::vector<uint32_t> words(size_t(rows * cols / 8), 0);
  std::vector<float> scales, biases;
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = 0; c < cols; c++) words[size_t((r * cols + c) / 8)] |= nib(module, r, c) << (4 * (c % 8));
    for (int64_t g = 0; g < cols / group; g++) {
      scales.push_back(qscale(module, r, g));
      biases.push_back(kQBias);
    }
  }
  f.st.add(module + ".weight", "U32", {rows, cols / 8}, bytes_of(words));
  f.st.add(module + ".scales", "BF16", {rows, cols / group}, encode(scales, "BF16"));
  f.st.add(module + ".biases", "BF16", {rows, cols / group}, encode(biases, "BF16"));
}

// A 1-D weight; `plus_one`: a (1+w) norm, which MLX stores as 1 + w.
void add_vector(Fixture& f, const std::string& name, int64_t n, bool plus_one, const std::string& dtype = "BF16") {
  std::vector<float> v = vals(name, n);
  if (plus_one && f.layout == Layout::MLX)
    for (float& x : v) x += 1.0f;
  f.st.add(name, dtype, {n}, encode(v, dtype));
}

Fixture make(Layout layout) {
  Fixture f;
  f.layout = layout;
  f.prefix = layout == Layout::CausalLM  ? "model."
             : layout == Layout::CondGen ? "model.language_model."
                                         : "language_model.model.";
  f.head = layout == Layout::MLX ? "language_model.lm_head" : "lm_head";
  const std::string& P = f.prefix;

  add_matrix(f, P + "embed_tokens", kVocab, kHidden);
  for (int i = 0; i < 2; i++) {
    const std::string L = P + "layers." + std::to_string(i) + ".";
    add_vector(f, L + "input_layernorm.weight", kHidden, true);
    add_vector(f, L + "post_attention_layernorm.weight", kHidden, true, "F32");
    if (i == 0) {  // Gated DeltaNet
      add_matrix(f, L + "linear_attn.in_proj_qkv", kConvDim, kHidden);
      add_matrix(f, L + "linear_attn.in_proj_z", kNv * kDv, kHidden);
      add_matrix(f, L + "linear_attn.in_proj_b", kNv, kHidden);
      add_matrix(f, L + "linear_attn.in_proj_a", kNv, kHidden);
      add_matrix(f, L + "linear_attn.out_proj", kHidden, kNv * kDv);
      // HF [C,1,K], MLX [C,K,1]: the same bytes, c·K + k
      std::vector<int64_t> conv_shape =
          layout == Layout::MLX ? std::vector<int64_t>{kConvDim, kConvK, 1} : std::vector<int64_t>{kConvDim, 1, kConvK};
      f.st.add(L + "linear_attn.conv1d.weight", "BF16", conv_shape,
               encode(vals(L + "linear_attn.conv1d.weight", kConvDim * kConvK), "BF16"));
      add_vector(f, L + "linear_attn.A_log", kNv, false, "F32");
      add_vector(f, L + "linear_attn.dt_bias", kNv, false);
      add_vector(f, L + "linear_attn.norm.weight", kDv, false, "F32");
    } else {  // gated full attention
      add_matrix(f, L + "self_attn.q_proj", kHeads * kHeadDim * 2, kHidden);
      add_matrix(f, L + "self_attn.k_proj", kKvHeads * kHeadDim, kHidden);
      add_matrix(f, L + "self_attn.v_proj", kKvHeads * kHeadDim, kHidden);
      add_matrix(f, L + "self_attn.o_proj", kHidden, kHeads * kHeadDim);
      add_vector(f, L + "self_attn.q_norm.weight", kHeadDim, true);
      add_vector(f, L + "self_attn.k_norm.weight", kHeadDim, true, "F16");
    }
    add_matrix(f, L + "mlp.gate_proj", kInter, kHidden);
    add_matrix(f, L + "mlp.up_proj", kInter, kHidden);
    add_matrix(f, L + "mlp.down_proj", kHidden, kInter, "F16");
  }
  add_vector(f, P + "norm.weight", kHidden, true);

  json text = tiny_text_config();
  if (layout == Layout::CondGen) {
    // released-checkpoint style: text fields nested, embeddings tied at the top, extra towers to skip
    f.config = {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
                {"model_type", "qwen3_5"},
                {"tie_word_embeddings", true},
                {"vision_config", {{"depth", 1}}},
                {"text_config", text}};
    f.config["text_config"]["model_type"] = "qwen3_5_text";
    f.st.add("model.visual.blocks.0.attn.qkv.weight", "BF16", {4, 4}, std::string(32, '\xff'));  // NaN: never read
    f.st.add("mtp.fc.weight", "I32", {2}, std::string(8, '\0'));
  } else {
    add_matrix(f, f.head, kVocab, kHidden, "F32");
    text["model_type"] = "qwen3_5_text";
    f.config = text;
    if (layout == Layout::MLX) {
      f.config["quantization"] = {{"group_size", 32},
                                  {"bits", 4},
                                  {"mode", "affine"},
                                  {P + "layers.0.linear_attn.in_proj_b", {{"group_size", 64}, {"bits", 4}}}};
    }
  }
  return f;
}

// Writes config.json and model.safetensors into dir.
void save(const Fixture& f, const TempDir& dir, bool aligned = true) {
  write_file(dir / "config.json", f.config.dump(2));
  f.st.write(dir / "model.safetensors", aligned);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

// Loading fails, with a message containing every one of `parts`.
void check_load_error(const TempDir& dir, std::initializer_list<std::string> parts) {
  std::string msg = error_of([&] { hkv::load_model(dir.path.string()); });
  INFO("message: " << msg);
  for (const std::string& p : parts) CHECK(msg.find(p) != std::string::npos);
}

// Every weight of a loaded fixture equals what was written (norms as w, never 1 + w).
void check_values(const Fixture& f, const hkv::Model& m) {
  const std::string& P = f.prefix;
  const bool mlx = f.layout == Layout::MLX;
  auto check_matrix = [&](const hkv::Matrix& W, const std::string& module, int64_t rows, int64_t cols) {
    INFO(module);
    REQUIRE(W.rows == rows);
    REQUIRE(W.cols == cols);
    if (mlx) {
      CHECK(W.type == hkv::WType::MLX4);
      CHECK(W.group == group_for(f, module));
    }
    for (int64_t r = 0; r < rows; r += 3)
      for (int64_t c = 0; c < cols; c += 5) {
        float want = mlx ? qval(module, r, c, group_for(f, module)) : val(module + ".weight", r * cols + c);
        REQUIRE(W.at(r, c) == want);
      }
  };
  auto check_vector = [&](const std::vector<float>& v, const std::string& name, int64_t n) {
    INFO(name);
    REQUIRE(int64_t(v.size()) == n);
    for (int64_t i = 0; i < n; i++) REQUIRE(v[size_t(i)] == val(name, i));
  };

  const hkv::ModelWeights& w = m.w;
  check_matrix(w.embed, P + "embed_tokens", kVocab, kHidden);
  if (f.layout == Layout::CondGen) {
    CHECK(w.lm_head.data == w.embed.data);  // tied
  } else {
    check_matrix(w.lm_head, f.head, kVocab, kHidden);
    if (!mlx) CHECK(w.lm_head.type == hkv::WType::F32);
  }
  check_vector(w.final_norm, P + "norm.weight", kHidden);
  REQUIRE(w.layers.size() == 2);
  for (int i = 0; i < 2; i++) {
    const std::string L = P + "layers." + std::to_string(i) + ".";
    const hkv::LayerWeights& lw = w.layers[size_t(i)];
    check_vector(lw.input_norm, L + "input_layernorm.weight", kHidden);
    check_vector(lw.post_attn_norm, L + "post_attention_layernorm.weight", kHidden);
    check_matrix(lw.gate_proj, L + "mlp.gate_proj", kInter, kHidden);
    check_matrix(lw.up_proj, L + "mlp.up_proj", kInter, kHidden);
    check_matrix(lw.down_proj, L + "mlp.down_proj", kHidden, kInter);
    if (!mlx) CHECK(lw.down_proj.type == hkv::WType::F16);
    if (i == 0) {
      REQUIRE(lw.kind == hkv::LayerKind::Linear);
      check_matrix(lw.lin.in_proj_qkv, L + "linear_attn.in_proj_qkv", kConvDim, kHidden);
      check_matrix(lw.lin.in_proj_z, L + "linear_attn.in_proj_z", kNv * kDv, kHidden);
      check_matrix(lw.lin.in_proj_b, L + "linear_attn.in_proj_b", kNv, kHidden);
      check_matrix(lw.lin.in_proj_a, L + "linear_attn.in_proj_a", kNv, kHidden);
      check_matrix(lw.lin.out_proj, L + "linear_attn.out_proj", kHidden, kNv * kDv);
      check_vector(lw.lin.conv, L + "linear_attn.conv1d.weight", kConvDim * kConvK);
      check_vector(lw.lin.A_log, L + "linear_attn.A_log", kNv);
      check_vector(lw.lin.dt_bias, L + "linear_attn.dt_bias", kNv);
      check_vector(lw.lin.norm, L + "linear_attn.norm.weight", kDv);  // never shifted
    } else {
      REQUIRE(lw.kind == hkv::LayerKind::Full);
      check_matrix(lw.full.q_proj, L + "self_attn.q_proj", kHeads * kHeadDim * 2, kHidden);
      check_matrix(lw.full.k_proj, L + "self_attn.k_proj", kKvHeads * kHeadDim, kHidden);
      check_matrix(lw.full.v_proj, L + "self_attn.v_proj", kKvHeads * kHeadDim, kHidden);
      check_matrix(lw.full.o_proj, L + "self_attn.o_proj", kHidden, kHeads * kHeadDim);
      check_vector(lw.full.q_norm, L + "self_attn.q_norm.weight", kHeadDim);
      check_vector(lw.full.k_norm, L + "self_attn.k_norm.weight", kHeadDim);
    }
  }
}

std::string config_error(const json& j) {
  return error_of([&] { hkv::parse_config(j.dump(), "config.json"); });
}

}  // namespace

// ---- config.json --------------------------------------------------------------------------------------

TEST_CASE("config: qwen3_5_text with layer_types and top-level rope fields") {
  json j = tiny_text_config();
  j["model_type"] = "qwen3_5_text";
  j.erase("rope_parameters");
  j.erase("full_attention_interval");
  j.erase("head_dim");  // defaults to hidden / heads = 16
  j["rope_theta"] = 5e6;
  j["partial_rotary_factor"] = 0.5;
  j["layer_types"] = {"full_attention", "linear_attention"};
  hkv::Config c = hkv::parse_config(j.dump(), "config.json");
  CHECK(c.vocab_size == kVocab);
  CHECK(c.hidden_size == kHidden);
  CHECK(c.intermediate_size == kInter);
  CHECK(c.head_dim == 16);
  CHECK(c.rope_theta == 5e6);
  CHECK(c.partial_rotary_factor == 0.5);
  CHECK(c.rotary_dim() == 8);
  REQUIRE(c.layer_types.size() == 2);
  CHECK(c.layer_types[0] == hkv::LayerKind::Full);
  CHECK(c.layer_types[1] == hkv::LayerKind::Linear);
  CHECK(c.n_full_layers() == 1);
  CHECK(c.n_linear_layers() == 1);
  CHECK(c.max_position_embeddings == 4096);
  CHECK(c.quant_bits == 0);
}

TEST_CASE("config: the 27B shape, layer types from full_attention_interval") {
  json j = {{"model_type", "qwen3_5_text"}, {"vocab_size", 248320},
            {"hidden_size", 5120},          {"intermediate_size", 17408},
            {"num_hidden_layers", 64},      {"num_attention_heads", 24},
            {"num_key_value_heads", 4},     {"head_dim", 256},
            {"linear_num_key_heads", 16},   {"linear_num_value_heads", 48},
            {"linear_key_head_dim", 128},   {"linear_value_head_dim", 128},
            {"full_attention_interval", 4}, {"rope_scaling", {{"rope_theta", 1e7}, {"partial_rotary_factor", 0.25}}}};
  hkv::Config c = hkv::parse_config(j.dump(), "config.json");
  CHECK(c.n_full_layers() == 16);
  CHECK(c.n_linear_layers() == 48);
  for (int i = 0; i < 64; i++) CHECK((c.layer_types[size_t(i)] == hkv::LayerKind::Full) == ((i + 1) % 4 == 0));
  CHECK(c.rotary_dim() == 64);
  CHECK(c.conv_dim() == 2 * 16 * 128 + 48 * 128);
  CHECK(c.rope_theta == 1e7);
}

TEST_CASE("config: Qwen3_5ForConditionalGeneration nests the text fields") {
  json j = {{"model_type", "qwen3_5"},
            {"architectures", {"Qwen3_5ForConditionalGeneration"}},
            {"tie_word_embeddings", true},
            {"vision_config", {{"depth", 27}, {"hidden_size", 1152}}},
            {"text_config", tiny_text_config()}};
  j["text_config"]["rope_parameters"] = {{"rope_type", "default"},
                                         {"mrope_section", {11, 11, 10}},
                                         {"mrope_interleaved", true},
                                         {"rope_theta", 12345.0},
                                         {"partial_rotary_factor", 0.25}};
  hkv::Config c = hkv::parse_config(j.dump(), "config.json");
  CHECK(c.hidden_size == kHidden);
  CHECK(c.rope_theta == 12345.0);
  CHECK(c.tie_word_embeddings);  // the composite's own setting
  CHECK(c.layer_types[1] == hkv::LayerKind::Full);

  j["text_config"].erase("num_key_value_heads");
  CHECK(config_error(j) == "config.json: field 'text_config.num_key_value_heads': missing (required)");
}

TEST_CASE("config: MLX quantization with per-module overrides") {
  json j = tiny_text_config();
  j["model_type"] = "qwen3_5_text";
  j["quantization"] = {{"group_size", 64},
                       {"bits", 4},
                       {"mode", "affine"},
                       {"model.layers.0.mlp.gate_proj", {{"group_size", 32}, {"bits", 4}}},
                       {"model.layers.0.linear_attn.in_proj_b", false}};
  hkv::Config c = hkv::parse_config(j.dump(), "config.json");
  CHECK(c.quant_bits == 4);
  CHECK(c.quant_group_size == 64);
  REQUIRE(c.quant_overrides.size() == 2);
  CHECK(c.quant_overrides.at("model.layers.0.mlp.gate_proj") == std::pair<int, int>{32, 4});
  CHECK(c.quant_overrides.at("model.layers.0.linear_attn.in_proj_b") == std::pair<int, int>{0, 0});

  j["quantization"]["bits"] = 8;
  CHECK(config_error(j).find("field 'quantization.bits': 8 is not supported") != std::string::npos);
  j["quantization"]["bits"] = 4;
  j["quantization"]["model.layers.0.mlp.gate_proj"]["bits"] = 8;
  CHECK(config_error(j).find("field 'quantization.model.layers.0.mlp.gate_proj.bits'") != std::string::npos);
  j["quantization"]["model.layers.0.mlp.gate_proj"]["bits"] = 4;
  j["quantization"]["group_size"] = 48;
  CHECK(config_error(j).find("field 'quantization.group_size': 48") != std::string::npos);
}

TEST_CASE("config: each error names the file and the field") {
  json good = tiny_text_config();
  good["model_type"] = "qwen3_5_text";
  REQUIRE_NOTHROW(hkv::parse_config(good.dump(), "config.json"));

  auto with = [&](const std::string& key, const json& v) {
    json j = good;
    j[key] = v;
    return config_error(j);
  };
  CHECK(with("num_key_value_heads", 3) ==
        "config.json: field 'num_key_value_heads': 3 does not divide num_attention_heads 4");
  CHECK(with("linear_num_key_heads", 3) ==
        "config.json: field 'linear_num_key_heads': 3 does not divide linear_num_value_heads 4");
  CHECK(with("model_type", "llama").find("config.json: field 'model_type': string \"llama\" is not supported") == 0);
  CHECK(with("hidden_size", "64") == "config.json: field 'hidden_size': expected an integer, got string \"64\"");
  CHECK(with("num_hidden_layers", 0).find("field 'num_hidden_layers': 0 is not a positive int") != std::string::npos);
  CHECK(with("tie_word_embeddings", 1).find("field 'tie_word_embeddings': expected true or false") !=
        std::string::npos);
  CHECK(with("layer_types", json{"linear_attention"}) ==
        "config.json: field 'layer_types': has 1 entries but num_hidden_layers is 2");
  CHECK(with("layer_types", json{"linear_attention", "sliding"}).find("field 'layer_types[1]'") != std::string::npos);
  CHECK(with("rope_parameters", json{{"partial_rotary_factor", 0.375}}) == "(no error)");  // 6: even, fine
  CHECK(with("rope_parameters", json{{"partial_rotary_factor", 0.3}}).find("field 'partial_rotary_factor'") !=
        std::string::npos);  // 4.8: not an integer
  CHECK(with("rope_parameters", json{{"partial_rotary_factor", 0.1875}}).find("3 is not an even integer") !=
        std::string::npos);  // 3: odd
  CHECK(with("rope_parameters", json{{"rope_type", "yarn"}}).find("field 'rope_parameters.rope_type'") !=
        std::string::npos);
  CHECK(with("rope_parameters", json{{"rope_theta", "big"}})
            .find("field 'rope_parameters.rope_theta': expected a number") != std::string::npos);
  {
    json j = good;
    j.erase("vocab_size");
    CHECK(config_error(j) == "config.json: field 'vocab_size': missing (required)");
  }
  {
    json j = good;
    j.erase("model_type");
    CHECK(config_error(j) == "config.json: field 'model_type': missing (required)");
  }
  {
    json j = good;
    j.erase("head_dim");
    j["num_attention_heads"] = 6;  // 64 / 6: no default head_dim (and 6 % 2 heads is fine)
    CHECK(config_error(j).find("field 'head_dim': absent") != std::string::npos);
  }
  CHECK(error_of([] { hkv::parse_config("{\"model_type\": ", "config.json"); }).find("config.json: not valid JSON") ==
        0);
  CHECK(error_of([] { hkv::load_config("/nonexistent/config.json"); }).find("/nonexistent/config.json") == 0);
}

// ---- the safetensors reader ---------------------------------------------------------------------------

TEST_CASE("safetensors: a written file reads back") {
  TempDir dir;
  StWriter st;
  st.add("a", "F32", {2, 3}, bytes_of(std::vector<float>{1, 2, 3, 4, 5, 6}));
  st.add("b", "BF16", {4}, encode({0.5f, -1.0f, 2.0f, 0.25f}, "BF16"));
  st.add("empty", "I64", {0, 5}, "");
  st.write(dir / "x.safetensors");
  hkv::SafetensorsFile file(dir / "x.safetensors");
  REQUIRE(file.tensors().size() == 3);
  const hkv::Tensor* a = file.find("a");
  REQUIRE(a);
  CHECK(a->dtype == hkv::DType::F32);
  CHECK(a->shape_str() == "[2, 3]");
  CHECK(hkv::tensor_to_f32(*a) == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(hkv::tensor_to_f32(*file.find("b")) == std::vector<float>{0.5f, -1.0f, 2.0f, 0.25f});
  CHECK(file.find("__metadata__") == nullptr);
  CHECK(file.find("empty")->numel() == 0);
  // the tensors keep the mapping alive after the file object is gone
  hkv::Tensor kept = *a;
  { hkv::SafetensorsFile gone = std::move(file); }
  CHECK(hkv::tensor_to_f32(kept)[5] == 6.0f);
}

TEST_CASE("safetensors: each damaged file gives its own error") {
  TempDir dir;
  const std::string path = dir / "bad.safetensors";
  auto error = [&] { return error_of([&] { hkv::SafetensorsFile f(path); }); };
  auto header = [](const json& j) { return j.dump(); };
  const std::string data128(128, '\0');

  SUBCASE("shorter than the length field") {
    write_file(path, "abc");
    CHECK(error() == path + ": file is 3 bytes, too short for the 8-byte header length (truncated?)");
  }
  SUBCASE("truncated inside the data") {
    StWriter st;
    st.add("model.norm.weight", "BF16", {64}, std::string(128, '\0'));
    st.write(path);
    std::string bytes;
    {
      std::ifstream in(path, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    write_file(path, bytes.substr(0, bytes.size() - 10));
    CHECK(error() == path +
                         ": tensor 'model.norm.weight': data_offsets [0, 128] run past the end of the data (118 "
                         "bytes after the header; truncated file?)");
  }
  SUBCASE("header length past the end of the file") {
    write_file(path, le64(1000) + "{}");
    CHECK(error() == path + ": header length 1000 runs past the end of the file (10 bytes)");
  }
  SUBCASE("header over 100 MB") {
    write_file(path, le64(100'000'001) + "{}");
    CHECK(error() == path + ": header length 100000001 exceeds the 100 MB limit");
  }
  SUBCASE("header not JSON") {
    write_raw(path, "{\"a\": {\"dtype\": ", data128);
    CHECK(error().find(path + ": header is not valid JSON") == 0);
  }
  SUBCASE("header not an object") {
    write_raw(path, "[1, 2]", "");
    CHECK(error() == path + ": header is not a JSON object");
  }
  SUBCASE("unknown dtype") {
    write_raw(path, header({{"w", {{"dtype", "Q4"}, {"shape", {4}}, {"data_offsets", {0, 4}}}}}), data128);
    CHECK(error() == path + ": tensor 'w': dtype \"Q4\" is not a known safetensors dtype");
  }
  SUBCASE("missing field") {
    write_raw(path, header({{"w", {{"dtype", "F32"}, {"shape", {4}}}}}), data128);
    CHECK(error() == path + ": tensor 'w': field 'data_offsets' is missing");
  }
  SUBCASE("negative dimension") {
    write_raw(path, header({{"w", {{"dtype", "F32"}, {"shape", {-4}}, {"data_offsets", {0, 16}}}}}), data128);
    CHECK(error().find(path + ": tensor 'w': shape [-4]") == 0);
  }
  SUBCASE("shape does not match the byte range") {
    write_raw(path, header({{"model.norm.weight", {{"dtype", "BF16"}, {"shape", {64}}, {"data_offsets", {0, 40}}}}}),
              data128);
    CHECK(error() == path +
                         ": tensor 'model.norm.weight': data_offsets [0, 40] hold 40 bytes but shape [64] of BF16 "
                         "needs 128");
  }
  SUBCASE("offsets out of range") {
    write_raw(path, header({{"w", {{"dtype", "F32"}, {"shape", {64}}, {"data_offsets", {0, 256}}}}}), data128);
    CHECK(error() == path +
                         ": tensor 'w': data_offsets [0, 256] run past the end of the data (128 bytes after the "
                         "header; truncated file?)");
  }
  SUBCASE("offsets reversed") {
    write_raw(path, header({{"w", {{"dtype", "U8"}, {"shape", {0}}, {"data_offsets", {8, 4}}}}}), data128);
    CHECK(error() == path + ": tensor 'w': data_offsets [8, 4] end before they begin");
  }
  SUBCASE("negative offsets") {
    write_raw(path, header({{"w", {{"dtype", "U8"}, {"shape", {4}}, {"data_offsets", {-4, 0}}}}}), data128);
    CHECK(error().find("is not two non-negative integers") != std::string::npos);
  }
  SUBCASE("overlapping tensors") {
    write_raw(path,
              header({{"a", {{"dtype", "F32"}, {"shape", {16}}, {"data_offsets", {0, 64}}}},
                      {"b", {{"dtype", "F32"}, {"shape", {16}}, {"data_offsets", {32, 96}}}}}),
              data128);
    CHECK(error() == path + ": tensor 'b': data_offsets [32, 96] overlap tensor 'a' at [0, 64]");
  }
  SUBCASE("adjacent tensors do not overlap") {
    write_raw(path,
              header({{"a", {{"dtype", "F32"}, {"shape", {16}}, {"data_offsets", {0, 64}}}},
                      {"b", {{"dtype", "F32"}, {"shape", {16}}, {"data_offsets", {64, 128}}}}}),
              data128);
    CHECK(error() == "(no error)");
  }
}

// ---- checkpoints --------------------------------------------------------------------------------------

TEST_CASE("checkpoint: HF Qwen3_5ForCausalLM round trip") {
  TempDir dir;
  Fixture f = make(Layout::CausalLM);
  save(f, dir);
  hkv::Model m = hkv::load_model(dir.path.string());
  CHECK(m.config.num_hidden_layers == 2);
  CHECK(m.w.embed.type == hkv::WType::BF16);
  check_values(f, m);
  // the path of config.json works too
  hkv::Model m2 = hkv::load_model(dir / "config.json");
  CHECK(m2.w.layers[1].full.q_norm == m.w.layers[1].full.q_norm);
}

TEST_CASE("checkpoint: misaligned data is copied, values unchanged") {
  TempDir dir;
  Fixture f = make(Layout::CausalLM);
  save(f, dir, /*aligned=*/false);
  hkv::Model m = hkv::load_model(dir.path.string());
  check_values(f, m);
  CHECK(reinterpret_cast<uintptr_t>(m.w.lm_head.data) % 4 == 0);
}

TEST_CASE("checkpoint: HF Qwen3_5ForConditionalGeneration, tied, visual and mtp skipped") {
  TempDir dir;
  Fixture f = make(Layout::CondGen);
  save(f, dir);
  hkv::Model m = hkv::load_model(dir.path.string());
  CHECK(m.config.tie_word_embeddings);
  check_values(f, m);
}

TEST_CASE("checkpoint: sharded with model.safetensors.index.json") {
  TempDir dir;
  Fixture f = make(Layout::CausalLM);
  StWriter a, b;
  json weight_map = json::object();
  for (size_t i = 0; i < f.st.entries.size(); i++) {
    const Entry& e = f.st.entries[i];
    std::string shard = i % 2 ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
    (i % 2 ? b : a).entries.push_back(e);
    weight_map[e.name] = shard;
  }
  a.write(dir / "model-00001-of-00002.safetensors");
  b.write(dir / "model-00002-of-00002.safetensors");
  write_file(dir / "model.safetensors.index.json",
             json{{"metadata", {{"total_size", 1}}}, {"weight_map", weight_map}}.dump());
  write_file(dir / "config.json", f.config.dump());
  hkv::Model m = hkv::load_model(dir.path.string());
  check_values(f, m);

  // the index names a shard that lacks the tensor
  const std::string other = weight_map["model.norm.weight"] == "model-00001-of-00002.safetensors"
                                ? "model-00002-of-00002.safetensors"
                                : "model-00001-of-00002.safetensors";
  weight_map["model.norm.weight"] = other;
  write_file(dir / "model.safetensors.index.json", json{{"weight_map", weight_map}}.dump());
  std::string msg = error_of([&] { hkv::load_model(dir.path.string()); });
  CHECK(msg.find("tensor 'model.norm.weight': listed in") != std::string::npos);
  CHECK(msg.find(other + ": tensor") != std::string::npos);
}

TEST_CASE("checkpoint: MLX 4-bit, shifted norms, [C,K,1] conv, per-module group") {
  TempDir dir;
  Fixture f = make(Layout::MLX);
  save(f, dir);
  hkv::Model m = hkv::load_model(dir.path.string());
  CHECK(m.config.quant_bits == 4);
  CHECK(m.w.layers[0].lin.in_proj_b.group == 64);
  CHECK(m.w.embed.type == hkv::WType::MLX4);
  check_values(f, m);
  // a row of the quantized embedding, as the model reads it
  std::vector<float> row(kHidden);
  m.w.embed.row(7, row.data());
  for (int64_t c = 0; c < kHidden; c++) CHECK(row[size_t(c)] == qval(f.prefix + "embed_tokens", 7, c, 32));
}

TEST_CASE("checkpoint: each bad checkpoint gives its own error") {
  TempDir dir;
  Fixture f = make(Layout::CausalLM);
  const std::string file = dir / "model.safetensors";

  SUBCASE("missing tensor") {
    f.st.remove("model.layers.1.self_attn.k_norm.weight");
    save(f, dir);
    check_load_error(dir, {file, "tensor 'model.layers.1.self_attn.k_norm.weight' is missing"});
  }
  SUBCASE("missing lm_head when untied") {
    f.st.remove("lm_head.weight");
    save(f, dir);
    check_load_error(dir, {"tensor 'lm_head.weight' is missing"});
  }
  SUBCASE("wrong shape against the config") {
    Entry* e = f.st.find("model.layers.1.self_attn.q_proj.weight");
    e->shape = {64, 128};  // same bytes, transposed
    save(f, dir);
    check_load_error(dir, {file,
                           "tensor 'model.layers.1.self_attn.q_proj.weight': shape [64, 128] but config.json "
                           "implies [128, 64]"});
  }
  SUBCASE("a [C,K,1] conv marks the MLX form, as in mlx-lm") {
    // mlx-lm converts HF weights (conv [C,1,K]) by moving the conv to [C,K,1] and adding 1 to the (1+w)
    // norms in the same step, so a [C,K,1] conv means the norms hold 1 + w, whatever the names.
    f.st.find("model.layers.0.linear_attn.conv1d.weight")->shape = {kConvDim, kConvK, 1};
    save(f, dir);
    hkv::Model m = hkv::load_model(dir.path.string());
    CHECK(m.w.final_norm[0] == val("model.norm.weight", 0) - 1.0f);
    CHECK(m.w.layers[0].lin.norm[0] == val("model.layers.0.linear_attn.norm.weight", 0));  // never shifted
  }
  SUBCASE("wrong dtype for a weight") {
    Entry* e = f.st.find("model.layers.0.mlp.up_proj.weight");
    e->dtype = "I16";  // same byte count
    save(f, dir);
    check_load_error(dir, {file, "tensor 'model.layers.0.mlp.up_proj.weight': dtype I16 is not a weight type"});
  }
  SUBCASE("wrong dtype for a norm") {
    Entry* e = f.st.find("model.norm.weight");
    e->dtype = "U16";
    save(f, dir);
    check_load_error(dir, {file, "tensor 'model.norm.weight': dtype U16 is not a float type"});
  }
  SUBCASE("NaN in a bf16 weight") {
    Entry* e = f.st.find("model.layers.0.linear_attn.in_proj_z.weight");
    uint16_t nan = 0x7fc0;
    std::memcpy(e->bytes.data() + 2 * 77, &nan, 2);
    save(f, dir);
    check_load_error(dir, {file, "tensor 'model.layers.0.linear_attn.in_proj_z.weight': element 77 is NaN"});
  }
  SUBCASE("inf in an f32 norm") {
    Entry* e = f.st.find("model.layers.1.post_attention_layernorm.weight");
    float inf = std::numeric_limits<float>::infinity();
    std::memcpy(e->bytes.data() + 4 * 5, &inf, 4);
    save(f, dir);
    check_load_error(dir, {file, "tensor 'model.layers.1.post_attention_layernorm.weight': element 5 is infinite"});
  }
  SUBCASE("NaN in an f16 weight") {
    Entry* e = f.st.find("model.layers.1.mlp.down_proj.weight");
    uint16_t nan = 0x7e00;
    std::memcpy(e->bytes.data(), &nan, 2);
    save(f, dir);
    check_load_error(dir, {file, "tensor 'model.layers.1.mlp.down_proj.weight': element 0 is NaN"});
  }
  SUBCASE("a tensor the config does not describe") {
    f.st.add("model.layers.2.mlp.up_proj.weight", "BF16", {2}, std::string(4, '\0'));
    save(f, dir);
    check_load_error(dir, {file, "tensor 'model.layers.2.mlp.up_proj.weight': not part of the model"});
  }
  SUBCASE("config and checkpoint disagree on a size") {
    f.config["intermediate_size"] = 96;
    save(f, dir);
    check_load_error(dir, {"tensor 'model.layers.0.mlp.gate_proj.weight': shape [128, 64] but config.json implies "
                           "[96, 64]"});
  }
  SUBCASE("bad config.json") {
    save(f, dir);
    write_file(dir / "config.json", "{\"model_type\": \"qwen3_5_text\",");
    check_load_error(dir, {dir / "config.json", "not valid JSON"});
  }
  SUBCASE("bad safetensors header") {
    save(f, dir);
    write_raw(file, "{not json", "");
    check_load_error(dir, {file, "header is not valid JSON"});
  }
  SUBCASE("no weights at all") {
    write_file(dir / "config.json", f.config.dump());
    check_load_error(dir, {"holds neither model.safetensors.index.json nor model.safetensors"});
  }
  SUBCASE("not a Qwen3.5 checkpoint") {
    StWriter st;
    st.add("transformer.wte.weight", "F32", {1}, std::string(4, '\0'));
    write_file(dir / "config.json", f.config.dump());
    st.write(file);
    check_load_error(dir, {file, "'model.embed_tokens.weight' is missing"});
  }
}

TEST_CASE("checkpoint: MLX-specific errors") {
  TempDir dir;
  Fixture f = make(Layout::MLX);
  const std::string file = dir / "model.safetensors";
  const std::string mod = "language_model.model.layers.0.mlp.up_proj";

  SUBCASE("scales of the wrong group count") {
    Entry* e = f.st.find(mod + ".scales");
    e->shape = {kInter * 2, 1};  // same bytes, wrong shape
    save(f, dir);
    check_load_error(dir, {file, "tensor '" + mod + ".scales': shape [256, 1] but config.json implies [128, 2]"});
  }
  SUBCASE("scales in f32") {
    Entry* e = f.st.find(mod + ".scales");
    std::vector<float> s(size_t(kInter * 2), 0.5f);
    e->dtype = "F32";
    e->bytes = bytes_of(s);
    save(f, dir);
    check_load_error(dir, {file, "tensor '" + mod + ".scales': dtype F32 (MLX 4-bit scales and biases are BF16)"});
  }
  SUBCASE("missing biases") {
    f.st.remove(mod + ".biases");
    save(f, dir);
    check_load_error(dir, {"tensor '" + mod + ".biases' is missing"});
  }
  SUBCASE("NaN in a scale") {
    Entry* e = f.st.find(mod + ".scales");
    uint16_t nan = 0x7fc0;
    std::memcpy(e->bytes.data() + 2 * 3, &nan, 2);
    save(f, dir);
    check_load_error(dir, {"tensor '" + mod + ".scales': element 3 is NaN"});
  }
  SUBCASE("quantized weights without a quantization config") {
    f.config.erase("quantization");
    save(f, dir);
    check_load_error(dir, {file,
                           "tensor 'language_model.model.embed_tokens.weight': stored MLX-quantized, but "
                           "config.json has no quantization"});
  }
  SUBCASE("norms not shifted are read as shifted") {
    // An MLX-form checkpoint's (1+w) norm at 1 + w reads back as w: write w itself and see w − 1.
    Entry* e = f.st.find("language_model.model.norm.weight");
    e->bytes = encode(vals("language_model.model.norm.weight", kHidden), "BF16");
    save(f, dir);
    hkv::Model m = hkv::load_model(dir.path.string());
    CHECK(m.w.final_norm[3] == val("language_model.model.norm.weight", 3) - 1.0f);
  }
}
