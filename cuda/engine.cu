// The engine's forward pass: the oracle's forward() (reference/model.cpp) as a sequence of kernel launches
// over "rounds" of rows (token, sequence) — at most kMaxRows rows a round, every layer for all of them:
//   embeddings; per layer: input RMSNorm; the mixer (gated attention over the cache, or Gated DeltaNet);
//   residual; post-attention RMSNorm; SwiGLU MLP; residual; then the final norm and lm_head.
// Every kernel follows its oracle function's order (see each kernel file); no batch size, row position or
// round boundary enters any value, so a sequence's bytes are the same alone, in a batch, or resumed.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "cuda/alloc.h"
#include "cuda/check.h"
#include "cuda/engine.h"
#include "reference/scalar.h"

namespace hkv::cuda {

namespace {
constexpr int64_t kMaxRows = 64;
constexpr size_t kReserve = size_t(256) << 20;  // left free for the CUDA context, cuBLAS and launches
std::string gib(size_t b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / double(1ull << 30));
  return buf;
}
}  // namespace

// ================================================================================================
// sequences and snapshots
// ================================================================================================

Sequence::~Sequence() { device_free(mem_); }
Snapshot::~Snapshot() { device_free(mem_); }

// ================================================================================================
// construction: upload or generate the weights
// ================================================================================================

void Engine::check_fits(size_t need, const std::string& what) const {
  size_t free_b = 0, total_b = 0;
  HKV_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (need + kReserve > free_b)
    throw std::runtime_error(what + " needs " + std::to_string(need) + " bytes (" + gib(need) +
                             ") but the device has " + std::to_string(free_b) + " bytes (" + gib(free_b) +
                             ") free of " + gib(total_b) + ", keeping " + gib(kReserve) + " in reserve");
}

void* Engine::dalloc(size_t bytes, const char* what) {
  check_fits(bytes, what);
  weight_allocs_.reserve(weight_allocs_.size() + 1);  // so that the push below cannot throw and leak p
  void* p = device_alloc(std::max<size_t>(bytes, 256), what);
  weight_allocs_.push_back(p);
  weight_bytes_ += bytes;
  return p;
}

float* Engine::upload_vec(const std::vector<float>& v) {
  float* d = static_cast<float*>(dalloc(v.size() * 4, "a weight vector"));
  HKV_CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
  return d;
}

DMat Engine::upload_matrix(const Matrix& m, std::map<const void*, DMat>& seen) {
  auto it = seen.find(m.data);
  if (it != seen.end()) return it->second;
  DMat d;
  d.type = m.type;
  d.rows = m.rows;
  d.cols = m.cols;
  d.group = m.group;
  if (m.type == WType::MLX4) {
    const size_t qb = size_t(m.rows * m.cols) / 2, sb = size_t(m.rows * (m.cols / m.group)) * 2;
    char* p = static_cast<char*>(dalloc(align256(qb) + 2 * align256(sb), "an MLX4 matrix"));
    HKV_CUDA_CHECK(cudaMemcpy(p, m.data, qb, cudaMemcpyHostToDevice));
    HKV_CUDA_CHECK(cudaMemcpy(p + align256(qb), m.scales, sb, cudaMemcpyHostToDevice));
    HKV_CUDA_CHECK(cudaMemcpy(p + align256(qb) + align256(sb), m.biases, sb, cudaMemcpyHostToDevice));
    d.data = p;
    d.scales = reinterpret_cast<const uint16_t*>(p + align256(qb));
    d.biases = reinterpret_cast<const uint16_t*>(p + align256(qb) + align256(sb));
  } else {
    void* p = dalloc(m.nbytes(), "a weight matrix");
    HKV_CUDA_CHECK(cudaMemcpy(p, m.data, m.nbytes(), cudaMemcpyHostToDevice));
    d.data = p;
  }
  seen[m.data] = d;
  return d;
}

void Engine::init_common() {
  c_.validate("engine config");
  if (c_.head_dim % 32 != 0 || c_.head_dim > 256)
    throw std::runtime_error("engine: head_dim " + std::to_string(c_.head_dim) + " (multiples of 32 up to 256)");
  n_full_ = c_.n_full_layers();
  n_lin_ = c_.n_linear_layers();
  HKV_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  err_ = static_cast<int*>(device_alloc(sizeof(int), "the engine's error flag"));
  HKV_CUDA_CHECK(cudaMemset(err_, 0, sizeof(int)));
  argmax_ = device_alloc(size_t(kMaxRows) * (1 + 2 * kArgmaxParts) * 4, "the greedy decode's argmax buffers");
  HKV_CUDA_CHECK(cudaDeviceSynchronize());
}

static size_t layer_read_bytes(const std::vector<DMat>& ms) {
  size_t s = 0;
  for (const DMat& m : ms) s += m.nbytes();
  return s;
}

// The public constructors delegate to Engine(const Config&, Bare), which only copies the config: once a
// delegated-to constructor has returned, the object counts as constructed, so when the rest of the
// constructor throws (a failed allocation, a bad config), ~Engine() runs and frees what was allocated.
Engine::Engine(const Config& c, const Tuning& t, Bare) : c_(c), tuning_(t) {}

Engine::Engine(const Model& m, const Tuning& t) : Engine(m.config, t, Bare{}) {
  init_common();
  size_t need = 0;
  for (const LayerWeights& lw : m.w.layers)
    for (const Matrix* mm :
         {&lw.full.q_proj, &lw.full.k_proj, &lw.full.v_proj, &lw.full.o_proj, &lw.lin.in_proj_qkv, &lw.lin.in_proj_z,
          &lw.lin.in_proj_b, &lw.lin.in_proj_a, &lw.lin.out_proj, &lw.gate_proj, &lw.up_proj, &lw.down_proj})
      need += mm->data ? mm->nbytes() : 0;
  need += m.w.embed.nbytes() + (m.w.lm_head.data == m.w.embed.data ? 0 : m.w.lm_head.nbytes());
  check_fits(need, "the weights of " + m.source);
  std::map<const void*, DMat> seen;
  embed_ = upload_matrix(m.w.embed, seen);
  lm_head_ = upload_matrix(m.w.lm_head, seen);
  final_norm_ = upload_vec(m.w.final_norm);
  for (const LayerWeights& lw : m.w.layers) {
    Layer L;
    L.kind = lw.kind;
    L.input_norm = upload_vec(lw.input_norm);
    L.post_norm = upload_vec(lw.post_attn_norm);
    if (lw.kind == LayerKind::Full) {
      L.q = upload_matrix(lw.full.q_proj, seen);
      L.k = upload_matrix(lw.full.k_proj, seen);
      L.v = upload_matrix(lw.full.v_proj, seen);
      L.o = upload_matrix(lw.full.o_proj, seen);
      L.q_norm = upload_vec(lw.full.q_norm);
      L.k_norm = upload_vec(lw.full.k_norm);
    } else {
      L.qkv = upload_matrix(lw.lin.in_proj_qkv, seen);
      L.z = upload_matrix(lw.lin.in_proj_z, seen);
      L.b = upload_matrix(lw.lin.in_proj_b, seen);
      L.a = upload_matrix(lw.lin.in_proj_a, seen);
      L.out = upload_matrix(lw.lin.out_proj, seen);
      L.conv = upload_vec(lw.lin.conv);
      L.A_log = upload_vec(lw.lin.A_log);
      L.dt_bias = upload_vec(lw.lin.dt_bias);
      L.norm = upload_vec(lw.lin.norm);
    }
    L.gate = upload_matrix(lw.gate_proj, seen);
    L.up = upload_matrix(lw.up_proj, seen);
    L.down = upload_matrix(lw.down_proj, seen);
    layers_.push_back(L);
    weight_read_bytes_ += layer_read_bytes({L.q, L.k, L.v, L.o, L.qkv, L.z, L.b, L.a, L.out, L.gate, L.up, L.down});
  }
  weight_read_bytes_ += lm_head_.nbytes() + embed_.nbytes() / size_t(std::max<int64_t>(1, embed_.rows));
  HKV_CUDA_CHECK(cudaDeviceSynchronize());
}

// ---- synthetic weights on the device: build_synthetic (reference/synthetic.cpp), tensor by tensor ----

namespace {
struct SynthGen {
  const SyntheticSpec& spec;
  Engine* eng;
  std::function<void*(size_t)> alloc;
  cudaStream_t st;

  DMat dense_e(const std::string& name, int64_t rows, int64_t cols, int e) {
    DMat d;
    d.type = WType::BF16;
    d.rows = rows;
    d.cols = cols;
    void* p = alloc(size_t(rows * cols) * 2);
    synth_bf16_fill(static_cast<uint16_t*>(p), rows * cols, spec.seed, synth_tensor_id(name), e, st);
    d.data = p;
    return d;
  }
  DMat mlx4(const std::string& name, int64_t rows, int64_t cols, int gain_log2) {
    const int group = spec.config.quant_group_size;
    const int e = synth_mlx4_exponent(cols, gain_log2);
    const size_t qb = size_t(rows * cols) / 2, ng = size_t(rows * (cols / group));
    char* p = static_cast<char*>(alloc(align256(qb) + 2 * align256(ng * 2)));
    DMat d;
    d.type = WType::MLX4;
    d.rows = rows;
    d.cols = cols;
    d.group = group;
    d.data = p;
    d.scales = reinterpret_cast<const uint16_t*>(p + align256(qb));
    d.biases = reinterpret_cast<const uint16_t*>(p + align256(qb) + align256(ng * 2));
    synth_mlx4_fill(reinterpret_cast<uint32_t*>(p), const_cast<uint16_t*>(d.scales), const_cast<uint16_t*>(d.biases),
                    int64_t(qb / 4), int64_t(ng), spec.seed, synth_tensor_id(name), e, st);
    return d;
  }
  DMat linear(const std::string& name, int64_t rows, int64_t cols, int gain_log2 = 0) {
    return spec.weights == WType::MLX4 ? mlx4(name, rows, cols, gain_log2)
                                       : dense_e(name, rows, cols, synth_exponent(cols, gain_log2));
  }
  std::vector<float> vec(const std::string& name, int64_t n, int e, float offset = 0.0f) const {
    return synth_vector(spec.seed, name, n, e, offset);
  }
};

size_t synth_matrix_bytes(const SyntheticSpec& spec, int64_t rows, int64_t cols) {
  if (spec.weights != WType::MLX4) return size_t(rows * cols) * 2;
  return size_t(rows * cols) / 2 + size_t(rows * (cols / spec.config.quant_group_size)) * 4;
}
}  // namespace

Engine::Engine(const SyntheticSpec& spec, const Tuning& t) : Engine(spec.config, t, Bare{}) {
  init_common();
  const Config& c = c_;
  if (spec.weights == WType::MLX4 && (c.quant_group_size == 0 || c.hidden_size % c.quant_group_size != 0))
    throw std::runtime_error("synthetic config: field 'quantization.group_size' must divide the hidden size");
  const int64_t E = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int H = c.num_attention_heads, KV = c.num_key_value_heads, D = c.head_dim;
  const int nv = c.linear_num_value_heads, dv = c.linear_value_head_dim;
  size_t need = size_t(V * E) * 2 + synth_matrix_bytes(spec, V, E);
  for (LayerKind k : c.layer_types) {
    if (k == LayerKind::Full)
      need += synth_matrix_bytes(spec, int64_t(H) * 2 * D, E) + 2 * synth_matrix_bytes(spec, int64_t(KV) * D, E) +
              synth_matrix_bytes(spec, E, int64_t(H) * D);
    else
      need += synth_matrix_bytes(spec, c.conv_dim(), E) + synth_matrix_bytes(spec, int64_t(nv) * dv, E) +
              2 * synth_matrix_bytes(spec, nv, E) + synth_matrix_bytes(spec, E, int64_t(nv) * dv);
    need += 2 * synth_matrix_bytes(spec, I, E) + synth_matrix_bytes(spec, E, I);
  }
  check_fits(need, "the synthetic weights");
  SynthGen b{spec, this, [this](size_t n) { return dalloc(n, "a synthetic weight"); }, stream_};
  embed_ = b.dense_e("embed_tokens", V, E, 6);
  for (int l = 0; l < c.num_hidden_layers; l++) {
    const std::string p = "layers." + std::to_string(l) + ".";
    Layer L;
    L.kind = c.layer_types[size_t(l)];
    L.input_norm = upload_vec(b.vec(p + "input_layernorm", E, 10));
    L.post_norm = upload_vec(b.vec(p + "post_attention_layernorm", E, 10));
    if (L.kind == LayerKind::Full) {
      L.q = b.linear(p + "self_attn.q_proj", int64_t(H) * 2 * D, E, spec.sharpness_log2);
      L.k = b.linear(p + "self_attn.k_proj", int64_t(KV) * D, E, spec.sharpness_log2);
      L.v = b.linear(p + "self_attn.v_proj", int64_t(KV) * D, E);
      L.o = b.linear(p + "self_attn.o_proj", E, int64_t(H) * D);
      L.q_norm = upload_vec(b.vec(p + "self_attn.q_norm", D, 10));
      L.k_norm = upload_vec(synth_k_norm(spec, p, D));
    } else {
      L.qkv = b.linear(p + "linear_attn.in_proj_qkv", c.conv_dim(), E);
      L.z = b.linear(p + "linear_attn.in_proj_z", int64_t(nv) * dv, E);
      L.b = b.linear(p + "linear_attn.in_proj_b", nv, E);
      L.a = b.linear(p + "linear_attn.in_proj_a", nv, E);
      L.out = b.linear(p + "linear_attn.out_proj", E, int64_t(nv) * dv);
      L.conv = upload_vec(b.vec(p + "linear_attn.conv1d", c.conv_dim() * c.linear_conv_kernel_dim, 8));
      L.A_log = upload_vec(b.vec(p + "linear_attn.A_log", nv, 7));
      L.dt_bias = upload_vec(b.vec(p + "linear_attn.dt_bias", nv, 8));
      L.norm = upload_vec(b.vec(p + "linear_attn.norm", dv, 10, 1.0f));
    }
    L.gate = b.linear(p + "mlp.gate_proj", I, E);
    L.up = b.linear(p + "mlp.up_proj", I, E);
    L.down = b.linear(p + "mlp.down_proj", E, I);
    layers_.push_back(L);
    weight_read_bytes_ += layer_read_bytes({L.q, L.k, L.v, L.o, L.qkv, L.z, L.b, L.a, L.out, L.gate, L.up, L.down});
  }
  final_norm_ = upload_vec(b.vec("norm", E, 10));
  lm_head_ = b.linear("lm_head", V, E);
  weight_read_bytes_ += lm_head_.nbytes() + size_t(E) * 2;
  HKV_CUDA_CHECK(cudaDeviceSynchronize());
}

Engine::~Engine() {
  fast_.reset();  // the fast prefill path's cuBLAS handle and scratch, before the stream goes
  if (stream_) cudaStreamSynchronize(stream_);  // kernels still filling weights (a constructor that threw)
  free_scratch();
  for (void* p : weight_allocs_) device_free(p);
  device_free(err_);
  device_free(argmax_);
  if (stream_) cudaStreamDestroy(stream_);
  if (host_embed_) cudaFreeHost(host_embed_);
}

size_t Engine::embedding_to_host() {
  if (host_embed_ || embed_.data == lm_head_.data) return 0;
  auto it = std::find(weight_allocs_.begin(), weight_allocs_.end(), embed_.data);
  if (it == weight_allocs_.end()) return 0;
  const size_t qb = size_t(embed_.rows * embed_.cols) / 2,
               sb = size_t(embed_.rows * (embed_.cols / std::max(1, embed_.group))) * 2;
  const size_t bytes = embed_.type == WType::MLX4 ? align256(qb) + 2 * align256(sb) : embed_.nbytes();
  HKV_CUDA_CHECK(cudaDeviceSynchronize());
  HKV_CUDA_CHECK(cudaHostAlloc(&host_embed_, bytes, cudaHostAllocMapped));
  HKV_CUDA_CHECK(cudaMemcpy(host_embed_, embed_.data, bytes, cudaMemcpyDeviceToHost));
  void* dev = nullptr;
  HKV_CUDA_CHECK(cudaHostGetDevicePointer(&dev, host_embed_, 0));
  const char* old = static_cast<const char*>(embed_.data);
  char* base = static_cast<char*>(dev);
  if (embed_.scales)
    embed_.scales = reinterpret_cast<const uint16_t*>(base + (reinterpret_cast<const char*>(embed_.scales) - old));
  if (embed_.biases)
    embed_.biases = reinterpret_cast<const uint16_t*>(base + (reinterpret_cast<const char*>(embed_.biases) - old));
  embed_.data = base;
  HKV_CUDA_CHECK(cudaFree(*it));
  weight_allocs_.erase(it);
  weight_bytes_ -= bytes;
  drop_graphs();
  return bytes;
}

// ================================================================================================
// sequences
// ================================================================================================

std::unique_ptr<Sequence> Engine::new_sequence(const KvFormat& f, int64_t capacity) {
  if (!f.engine_runs()) throw std::runtime_error("engine: cache format '" + f.name() + "' is an oracle-only ablation");
  if (capacity <= 0) throw std::runtime_error("engine: sequence capacity must be positive");
  std::unique_ptr<Sequence> s(new Sequence());
  s->format_ = f;
  s->capacity_ = capacity;
  s->row_bytes_ = kv_row_bytes(f, c_.head_dim);
  const size_t cache = align256(kv_cache_bytes(capacity, c_.num_key_value_heads, s->row_bytes_, kv_block(f.kind)));
  const int K = c_.linear_conv_kernel_dim;
  const size_t conv_f = size_t(c_.conv_dim()) * size_t(K - 1);
  const size_t S_f =
      size_t(c_.linear_num_value_heads) * size_t(c_.linear_key_head_dim) * size_t(c_.linear_value_head_dim);
  s->state_bytes_ = size_t(n_lin_) * (conv_f + S_f) * 4;
  s->bytes_ = 2 * size_t(n_full_) * cache + align256(s->state_bytes_);
  const std::string what = "a sequence of " + std::to_string(capacity) + " positions in " + f.name() + " (cache " +
                           std::to_string(2 * size_t(n_full_) * cache) + " bytes, DeltaNet states " +
                           std::to_string(s->state_bytes_) + " bytes)";
  check_fits(s->bytes_, what);
  s->mem_ = device_alloc(s->bytes_, what);  // freed by ~Sequence when anything below throws
  HKV_CUDA_CHECK(cudaMemset(s->mem_, 0, s->bytes_));
  HKV_CUDA_CHECK(cudaDeviceSynchronize());  // the engine's stream does not wait for the legacy stream
  char* p = static_cast<char*>(s->mem_);
  for (int i = 0; i < n_full_; i++) {
    s->k_.push_back(reinterpret_cast<uint8_t*>(p)), p += cache;
    s->v_.push_back(reinterpret_cast<uint8_t*>(p)), p += cache;
  }
  s->states_ = reinterpret_cast<float*>(p);
  float* q = s->states_;
  for (int i = 0; i < n_lin_; i++) {
    s->conv_.push_back(q), q += conv_f;
    s->S_.push_back(q), q += S_f;
  }
  return s;
}

// A layer's cache rows for positions [0, npos) from the device's layout (kv_row_offset) to the host's position order
// [npos][KV][rb], and back.
static void cache_rows_to_host(const uint8_t* dev, uint8_t* host, int64_t npos, int KV, size_t rb, int B) {
  if (B == 1) {  // position order on both sides
    HKV_CUDA_CHECK(cudaMemcpy(host, dev, kv_cache_bytes(npos, KV, rb, B), cudaMemcpyDeviceToHost));
    return;
  }
  std::vector<uint8_t> blocks(kv_cache_bytes(npos, KV, rb, B));
  HKV_CUDA_CHECK(cudaMemcpy(blocks.data(), dev, blocks.size(), cudaMemcpyDeviceToHost));
  kv_blocks_to_rows(blocks.data(), host, npos, KV, rb, B);
}

static void cache_rows_to_device(const uint8_t* host, uint8_t* dev, int64_t npos, int KV, size_t rb, int B) {
  if (B == 1) {
    HKV_CUDA_CHECK(cudaMemcpy(dev, host, kv_cache_bytes(npos, KV, rb, B), cudaMemcpyHostToDevice));
    return;
  }
  const std::vector<uint8_t> blocks = kv_rows_to_blocks(host, npos, KV, rb, B);
  HKV_CUDA_CHECK(cudaMemcpy(dev, blocks.data(), blocks.size(), cudaMemcpyHostToDevice));
}

SequenceState Engine::download(const Sequence& s) const {
  SequenceState st = hkv::new_sequence(c_, s.format_, s.capacity_);
  st.pos = s.pos_;
  HKV_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const int KV = c_.num_key_value_heads, B = kv_block(s.format_.kind);
  for (int i = 0; i < n_full_; i++) {
    cache_rows_to_host(s.k_[size_t(i)], st.k_cache[size_t(i)].data(), s.capacity_, KV, s.row_bytes_, B);
    cache_rows_to_host(s.v_[size_t(i)], st.v_cache[size_t(i)].data(), s.capacity_, KV, s.row_bytes_, B);
  }
  for (int i = 0; i < n_lin_; i++) {
    HKV_CUDA_CHECK(cudaMemcpy(st.conv[size_t(i)].data(), s.conv_[size_t(i)], st.conv[size_t(i)].size() * 4,
                              cudaMemcpyDeviceToHost));
    HKV_CUDA_CHECK(
        cudaMemcpy(st.S[size_t(i)].data(), s.S_[size_t(i)], st.S[size_t(i)].size() * 4, cudaMemcpyDeviceToHost));
  }
  return st;
}

std::unique_ptr<Sequence> Engine::upload(const SequenceState& st) {
  std::unique_ptr<Sequence> s = new_sequence(st.format, st.capacity);
  if (st.k_cache.size() != size_t(n_full_) || st.conv.size() != size_t(n_lin_))
    throw std::runtime_error("engine: sequence state is for another model shape");
  s->pos_ = st.pos;
  const int KV = c_.num_key_value_heads, B = kv_block(s->format_.kind);
  for (int i = 0; i < n_full_; i++) {
    cache_rows_to_device(st.k_cache[size_t(i)].data(), s->k_[size_t(i)], s->capacity_, KV, s->row_bytes_, B);
    cache_rows_to_device(st.v_cache[size_t(i)].data(), s->v_[size_t(i)], s->capacity_, KV, s->row_bytes_, B);
  }
  for (int i = 0; i < n_lin_; i++) {
    HKV_CUDA_CHECK(cudaMemcpy(s->conv_[size_t(i)], st.conv[size_t(i)].data(), st.conv[size_t(i)].size() * 4,
                              cudaMemcpyHostToDevice));
    HKV_CUDA_CHECK(
        cudaMemcpy(s->S_[size_t(i)], st.S[size_t(i)].data(), st.S[size_t(i)].size() * 4, cudaMemcpyHostToDevice));
  }
  HKV_CUDA_CHECK(cudaDeviceSynchronize());
  return s;
}

void Engine::save(const Sequence& s, const std::string& path) const { save_state(download(s), c_, path); }

std::unique_ptr<Sequence> Engine::restore(const std::string& path, int64_t capacity) {
  return upload(load_state(c_, path, capacity));
}

std::unique_ptr<Snapshot> Engine::snapshot(const Sequence& s) {
  std::unique_ptr<Snapshot> sn(new Snapshot());
  sn->bytes_ = s.state_bytes_;
  sn->pos_ = s.pos_;
  check_fits(sn->bytes_, "a DeltaNet snapshot");
  sn->mem_ = device_alloc(std::max<size_t>(sn->bytes_, 256), "a DeltaNet snapshot");
  HKV_CUDA_CHECK(cudaMemcpyAsync(sn->mem_, s.states_, sn->bytes_, cudaMemcpyDeviceToDevice, stream_));
  return sn;
}

void Engine::rollback(Sequence& s, const Snapshot& sn) {
  if (sn.bytes_ != s.state_bytes_) throw std::runtime_error("engine: snapshot of another model shape");
  HKV_CUDA_CHECK(cudaMemcpyAsync(s.states_, sn.mem_, sn.bytes_, cudaMemcpyDeviceToDevice, stream_));
  s.pos_ = sn.pos_;  // cache rows past pos are never read and are overwritten by the next tokens
}

void Engine::fill_random_cache(Sequence& s, int64_t pos, uint64_t seed) {
  if (pos > s.capacity_) throw std::runtime_error("engine: fill past the capacity");
  for (int i = 0; i < n_full_; i++) {
    kv_fill_random(s.format_.kind, s.k_[size_t(i)], pos, c_.num_key_value_heads, c_.head_dim, seed + 2 * uint64_t(i),
                   stream_);
    kv_fill_random(s.format_.kind, s.v_[size_t(i)], pos, c_.num_key_value_heads, c_.head_dim,
                   seed + 2 * uint64_t(i) + 1, stream_);
  }
  HKV_CUDA_CHECK(cudaStreamSynchronize(stream_));
  s.pos_ = pos;
}

// ================================================================================================
// the forward pass
// ================================================================================================

struct Engine::Round {
  std::vector<Sequence*> seqs;  // B, each with at least one row
  std::vector<int> first, count, call_offset;
  std::vector<int32_t> tok, pos, t_in_call;  // per row
  std::vector<int> logit_rows;               // rows whose logits are wanted, in output order
  std::vector<int> logit_seq;                // ... and their sequence index
  int64_t N = 0;
  int max_keys = 0;
  KvKind kind = KvKind::BF16;
  // device views into meta_
  int *d_tok = nullptr, *d_pos = nullptr, *d_nkeys = nullptr, *d_first = nullptr, *d_count = nullptr;
  uint8_t** d_k = nullptr;  // [n_full][N]
  uint8_t** d_v = nullptr;
  float** d_conv = nullptr;  // [n_lin][B]
  float** d_S = nullptr;
  float* d_rope = nullptr;  // [N][rd]
};

void Engine::ensure_scratch(int64_t rows, int max_keys) {
  const Config& c = c_;
  const int64_t E = c.hidden_size, I = c.intermediate_size, H = c.num_attention_heads, KV = c.num_key_value_heads,
                D = c.head_dim, C = c.conv_dim(), nvdv = int64_t(c.linear_num_value_heads) * c.linear_value_head_dim,
                nv = c.linear_num_value_heads;
  const size_t part_need = attn_part_floats(rows, int(H), int(D), std::max(1, max_keys));
  if (rows <= scratch_rows_ && part_need <= part_floats_) return;
  struct Release {  // on a throw below, release all scratch: the next call allocates it again
    Engine* e;
    bool armed;
    ~Release() {
      if (armed) e->free_scratch();
    }
  } release{this, true};
  if (rows > scratch_rows_) {
    drop_graphs();
    device_free(scratch_);
    device_free(meta_);
    scratch_ = nullptr, meta_ = nullptr, scratch_rows_ = 0;
    const int64_t big = std::max({H * 2 * D, C, I, nvdv});
    const int64_t xs = (std::max({E, I, H * D, nvdv, C}) / 32 + 1) * kXqWords;  // MLX4 records of x (words)
    const int64_t per_row = 3 * E + 2 * big + 2 * KV * D + 2 * H * D + nvdv + 2 * nv + C + nvdv + xs + c.vocab_size;
    size_t bytes = 0;
    std::vector<std::pair<float**, int64_t>> parts = {
        {&h_, E},        {&x_, E},         {&y_, E},         {&big_, big},
        {&big2_, big},   {&kbuf_, KV * D}, {&vbuf_, KV * D}, {&qbuf_, H * D},
        {&att_, H * D},  {&zbuf_, nvdv},   {&bbuf_, nv},     {&abuf_, nv},
        {&conv_out_, C}, {&core_, nvdv},   {&xq_, xs},       {&logits_, c.vocab_size}};
    for (auto& pr : parts) bytes += align256(size_t(pr.second * rows) * 4);
    (void)per_row;
    check_fits(bytes, "scratch for " + std::to_string(rows) + " rows");
    scratch_ = device_alloc(bytes, "scratch for " + std::to_string(rows) + " rows");
    char* p = static_cast<char*>(scratch_);
    for (auto& pr : parts) {
      *pr.first = reinterpret_cast<float*>(p);
      p += align256(size_t(pr.second * rows) * 4);
    }
    const int rd = c.rotary_dim();
    meta_bytes_ = align256(size_t(rows) * 5 * 4) + align256(size_t(2 * n_full_ * rows + 2 * n_lin_ * rows) * 8) +
                  align256(size_t(rows * std::max(rd, 1)) * 4);
    meta_ = device_alloc(meta_bytes_, "per-round metadata for " + std::to_string(rows) + " rows");
    scratch_rows_ = rows;
  }
  if (part_need > part_floats_) {
    drop_graphs();
    device_free(part_);
    part_ = nullptr, part_floats_ = 0;
    const std::string what =
        "attention partials for " + std::to_string(rows) + " rows of " + std::to_string(max_keys) + " keys";
    check_fits(part_need * 4, what);
    part_ = static_cast<float*>(device_alloc(part_need * 4, what));
    part_floats_ = part_need;
  }
  release.armed = false;
}

void Engine::drop_graphs() noexcept {
  for (auto& [k, g] : graph_cache_) cudaGraphExecDestroy(g);
  graph_cache_.clear();
}

void Engine::free_scratch() noexcept {
  drop_graphs();
  device_free(scratch_);
  device_free(meta_);
  device_free(part_);
  scratch_ = nullptr, meta_ = nullptr, part_ = nullptr;
  scratch_rows_ = 0, part_floats_ = 0, meta_bytes_ = 0;
}

void Engine::launch_layers(const Round& r, const ForwardOptions* topt) {
  const Config& c = c_;
  cudaStream_t st = stream_;
  const Tuning& tu = tuning_;
  const int64_t N = r.N, E = c.hidden_size, I = c.intermediate_size;
  const int H = c.num_attention_heads, KV = c.num_key_value_heads, D = c.head_dim, rd = c.rotary_dim();
  const int nk = c.linear_num_key_heads, nv = c.linear_num_value_heads, dk = c.linear_key_head_dim,
            dv = c.linear_value_head_dim;
  const int64_t C = c.conv_dim();
  const float eps = float(c.rms_norm_eps);
  auto tap = [&](int layer, const char* name, const float* d, int64_t n) {
    if (!topt || !topt->tap) return;
    std::vector<float> hbuf(size_t(N * n));
    HKV_CUDA_CHECK(cudaMemcpyAsync(hbuf.data(), d, hbuf.size() * 4, cudaMemcpyDeviceToHost, st));
    HKV_CUDA_CHECK(cudaStreamSynchronize(st));
    for (int64_t i = 0; i < N; i++) (*topt->tap)(layer, name, r.t_in_call[size_t(i)], hbuf.data() + i * n, n);
  };

  // Matrices that read the same x go out in as few launches as their types allow (matvec_multi); the
  // records of x that MLX4 reads come from x's producer (add_rmsnorm_rows, silu_mul_xq) or xq_records.
  uint32_t* const xq = reinterpret_cast<uint32_t*>(xq_);
  auto mv = [&](std::initializer_list<MatTask> tasks, const float* X, int64_t ldx, int64_t rows) {
    std::vector<MatTask> group;
    auto flush = [&] {
      if (!group.empty()) matvec_multi(group.data(), int(group.size()), X, ldx, rows, xq, st, tu);
      group.clear();
    };
    for (const MatTask& t : tasks) {
      if (!group.empty() && (t.W.type != group[0].W.type || t.W.cols != group[0].W.cols ||
                             t.W.group != group[0].W.group || int(group.size()) == kMaxTasks))
        flush();
      group.push_back(t);
    }
    flush();
  };
  uint32_t* const xs_E = E % 32 == 0 ? xq : nullptr;  // x_'s records, for whichever reader is MLX4
  const bool taps = topt && topt->tap;
  // The decode fusion (N ≤ 2 rows, no taps): the o, out and down launches add their products into h in their
  // store (h = h + y, the same fp32 addition add_rmsnorm_rows makes), and a launch whose matrices are all MLX4
  // of one width makes its x's records itself (matvec_multi's XSource): x = rmsnorm(h) after a norm, or the
  // attention / DeltaNet output, so the add_rmsnorm and xq_records launches between them go. The same bytes.
  const bool fuse = !taps && N <= 2 && tu.decode_fuse;
  const float* pending = nullptr;  // a residual y_ not yet added into h_ (added by the next norm)
  // x = rmsnorm(h + pending) with weight w, then the matrices that read x
  auto norm_mv = [&](const float* w, std::initializer_list<MatTask> tasks) {
    const std::vector<MatTask> ts(tasks);
    if (fuse && !pending && matvec_fuses_records(ts.data(), int(ts.size()), N, true)) {
      XSource src;
      src.x = h_, src.ldx = E, src.norm_w = w, src.eps = eps;
      matvec_multi(ts.data(), int(ts.size()), nullptr, 0, N, nullptr, st, tu, &src);
      return;
    }
    add_rmsnorm_rows(h_, pending, w, E, eps, N, x_, xs_E, st, tu);
    pending = nullptr;
    mv(tasks, x_, E, N);
  };
  // h = h + W·x (fused), or y_ = W·x left pending for the next norm; xrec: make x's records (x is not a
  // SwiGLU output, whose records silu_mul_xq made)
  auto residual_mv = [&](const DMat& W, const float* x, int64_t ldx, bool xrec) {
    const MatTask t = fuse ? MatTask{W, h_, E, true} : MatTask{W, y_, E};
    if (fuse && xrec && matvec_fuses_records(&t, 1, N, false)) {
      XSource src;
      src.x = x, src.ldx = ldx;
      matvec_multi(&t, 1, nullptr, 0, N, nullptr, st, tu, &src);
      return;
    }
    if (xrec && W.type == WType::MLX4) xq_records(x, ldx, N, W.cols, xq, st, tu);
    mv({t}, x, ldx, N);
    if (!fuse) pending = y_;
  };

  embed_rows(embed_, r.d_tok, N, h_, st, tu);
  int fi = 0, li = 0;
  for (int l = 0; l < c.num_hidden_layers; l++) {
    const Layer& L = layers_[size_t(l)];
    if (L.kind == LayerKind::Full) {
      norm_mv(L.input_norm,
              {{L.q, big_, int64_t(H) * 2 * D}, {L.k, kbuf_, int64_t(KV) * D}, {L.v, vbuf_, int64_t(KV) * D}});
      attn_prep_pack(big_, qbuf_, kbuf_, vbuf_, int64_t(KV) * D, L.q_norm, L.k_norm, r.d_rope, N, H, KV, D, rd, eps,
                     r.seqs[0]->format_, r.d_k + int64_t(fi) * N, r.d_v + int64_t(fi) * N, r.d_pos, err_, st, tu);
      tap(l, "q", qbuf_, int64_t(H) * D);
      tap(l, "k", kbuf_, int64_t(KV) * D);
      AttnArgs a;
      a.kind = r.kind;
      a.D = D, a.H = H, a.KV = KV;
      a.row_bytes = kv_row_bytes(r.seqs[0]->format_, D);
      a.q = qbuf_, a.ldq = int64_t(H) * D;
      a.gate = big_ + D, a.ldg = int64_t(H) * 2 * D, a.gate_stride = 2 * D;
      a.n_keys = r.d_nkeys;
      a.k_rows = r.d_k + int64_t(fi) * N;
      a.v_rows = r.d_v + int64_t(fi) * N;
      a.out = att_, a.ldo = int64_t(H) * D;
      a.N = N;
      a.max_keys = r.max_keys;
      a.part = part_;
      a.pre_ok = true;  // the kernel ahead is attn_prep_pack, which writes only this step's rows
      // the merge makes o's records, which the o launch then stages from xq
      const bool o_rec = fuse && L.o.type == WType::MLX4;
      if (o_rec) a.xq_out = xq;
      attention(a, st, tu);
      tap(l, "attn", att_, int64_t(H) * D);
      residual_mv(L.o, att_, int64_t(H) * D, !o_rec);
      fi++;
    } else {
      norm_mv(L.input_norm, {{L.qkv, big_, C}, {L.z, zbuf_, int64_t(nv) * dv}, {L.b, bbuf_, nv}, {L.a, abuf_, nv}});
      DeltaArgs d;
      d.nk = nk, d.nv = nv, d.dk = dk, d.dv = dv, d.K = c.linear_conv_kernel_dim, d.C = C;
      d.eps = eps;
      d.q_scale = float(1.0 / std::sqrt(double(dk)));
      d.B = int(r.seqs.size());
      d.seq_first = r.d_first, d.seq_rows = r.d_count;
      d.conv_state = r.d_conv + int64_t(li) * d.B;
      d.S = r.d_S + int64_t(li) * d.B;
      d.conv_w = L.conv, d.A_log = L.A_log, d.dt_bias = L.dt_bias, d.norm_w = L.norm;
      d.qkv = big_, d.conv_out = conv_out_, d.z = zbuf_, d.b = bbuf_, d.a = abuf_, d.core = core_;
      d.N = N;
      if (fuse && L.out.type == WType::MLX4) d.xq_out = xq;
      const bool out_rec = deltanet(d, st, tu);  // whether it made out's records
      tap(l, "deltanet", core_, int64_t(nv) * dv);
      residual_mv(L.out, core_, int64_t(nv) * dv, !out_rec);
      li++;
    }
    norm_mv(L.post_norm, {{L.gate, big_, I}, {L.up, big2_, I}});
    if (L.down.type == WType::MLX4)
      silu_mul_xq(big_, big2_, N * I, xq, st, tu);
    else
      silu_mul(big_, big2_, N * I, st, tu);
    residual_mv(L.down, big_, I, false);
    if (taps) {
      add_inplace(h_, y_, N * E, st, tu);
      tap(l, "hidden", h_, E);
      pending = nullptr;
    }
  }
  if (r.logit_rows.empty()) {
    if (pending) add_inplace(h_, y_, N * E, st, tu);
    return;
  }
  add_rmsnorm_rows(h_, pending, final_norm_, E, eps, N, x_, nullptr, st, tu);
  const int64_t R = int64_t(r.logit_rows.size());
  const float* xin = x_;
  if (R != N) {  // gather the wanted rows
    for (int64_t i = 0; i < R; i++)
      HKV_CUDA_CHECK(cudaMemcpyAsync(y_ + i * E, x_ + int64_t(r.logit_rows[size_t(i)]) * E, size_t(E) * 4,
                                     cudaMemcpyDeviceToDevice, st));
    xin = y_;
  }
  if (lm_head_.type == WType::MLX4) xq_records(xin, E, R, E, xq, st, tu);
  mv({{lm_head_, logits_, c.vocab_size}}, xin, E, R);
}

// kv_pack's error flag after a round: a non-finite K/V element or an fp16 scale overflow throws (as the
// oracle's std::domain_error), with the flag cleared for the next round.
void Engine::check_pack_error(cudaStream_t st) {
  int err = 0;
  HKV_CUDA_CHECK(cudaMemcpyAsync(&err, err_, sizeof(int), cudaMemcpyDeviceToHost, st));
  HKV_CUDA_CHECK(cudaStreamSynchronize(st));
  if (err) {
    HKV_CUDA_CHECK(cudaMemset(err_, 0, sizeof(int)));
    HKV_CUDA_CHECK(cudaDeviceSynchronize());
    throw std::domain_error(err & 1 ? "cache row element is not finite" : "cache group scale overflows fp16");
  }
}

void Engine::run_round(const Round& r0, const ForwardOptions& opt, std::vector<float>* logits_out,
                       std::vector<int32_t>* ids_out) {
  Round r = r0;
  const Config& c = c_;
  const int64_t N = r.N;
  const int B = int(r.seqs.size()), rd = c.rotary_dim();
  ensure_scratch(N, r.max_keys);

  // per-round metadata: ints, then pointers, then the RoPE rows
  std::vector<char> host(meta_bytes_, 0);
  char* dbase = static_cast<char*>(meta_);
  int* ints = reinterpret_cast<int*>(host.data());
  for (int64_t i = 0; i < N; i++) {
    ints[i] = r.tok[size_t(i)];
    ints[N + i] = r.pos[size_t(i)];
    ints[2 * N + i] = r.pos[size_t(i)] + 1;
  }
  for (int b = 0; b < B; b++) {
    ints[3 * N + b] = r.first[size_t(b)];
    ints[4 * N + b] = r.count[size_t(b)];
  }
  r.d_tok = reinterpret_cast<int*>(dbase);
  r.d_pos = r.d_tok + N;
  r.d_nkeys = r.d_tok + 2 * N;
  r.d_first = r.d_tok + 3 * N;
  r.d_count = r.d_tok + 4 * N;
  const size_t poff = align256(size_t(scratch_rows_) * 5 * 4);
  void** ptrs = reinterpret_cast<void**>(host.data() + poff);
  size_t pi = 0;
  std::vector<int> row_seq(static_cast<size_t>(N));
  for (int b = 0; b < B; b++)
    for (int t = 0; t < r.count[size_t(b)]; t++) row_seq[size_t(r.first[size_t(b)] + t)] = b;
  for (int f = 0; f < n_full_; f++)
    for (int64_t i = 0; i < N; i++) ptrs[pi++] = r.seqs[size_t(row_seq[size_t(i)])]->k_[size_t(f)];
  const size_t voff = pi;
  for (int f = 0; f < n_full_; f++)
    for (int64_t i = 0; i < N; i++) ptrs[pi++] = r.seqs[size_t(row_seq[size_t(i)])]->v_[size_t(f)];
  const size_t coff = pi;
  for (int l = 0; l < n_lin_; l++)
    for (int b = 0; b < B; b++) ptrs[pi++] = r.seqs[size_t(b)]->conv_[size_t(l)];
  const size_t soff = pi;
  for (int l = 0; l < n_lin_; l++)
    for (int b = 0; b < B; b++) ptrs[pi++] = r.seqs[size_t(b)]->S_[size_t(l)];
  void** dptrs = reinterpret_cast<void**>(dbase + poff);
  r.d_k = reinterpret_cast<uint8_t**>(dptrs);
  r.d_v = reinterpret_cast<uint8_t**>(dptrs + voff);
  r.d_conv = reinterpret_cast<float**>(dptrs + coff);
  r.d_S = reinterpret_cast<float**>(dptrs + soff);
  const size_t roff = poff + align256(size_t(2 * n_full_ * scratch_rows_ + 2 * n_lin_ * scratch_rows_) * 8);
  float* rope = reinterpret_cast<float*>(host.data() + roff);
  for (int64_t i = 0; i < N; i++) rope_row(c, r.pos[size_t(i)], rope + i * rd, rope + i * rd + rd / 2);
  r.d_rope = reinterpret_cast<float*>(dbase + roff);
  HKV_CUDA_CHECK(cudaMemcpyAsync(meta_, host.data(), meta_bytes_, cudaMemcpyHostToDevice, stream_));

  const bool all_rows = int64_t(r.logit_rows.size()) == N;
  const bool use_graph = graphs_ && !opt.tap && (all_rows || r.logit_rows.empty());
  if (use_graph) {
    const std::string key = std::to_string(N) + "/" + std::to_string(B) + "/" +
                            std::to_string((r.max_keys + 511) / 512) + "/" + std::to_string(int(r.kind)) + "/" +
                            (all_rows ? "all" : "none");
    auto it = graph_cache_.find(key);
    if (it == graph_cache_.end()) {
      cudaGraph_t g;
      HKV_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      try {
        launch_layers(r, nullptr);
      } catch (...) {
        cudaStreamEndCapture(stream_, &g);
        throw;
      }
      HKV_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
      cudaGraphExec_t ge;
      HKV_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
      HKV_CUDA_CHECK(cudaGraphDestroy(g));
      it = graph_cache_.emplace(key, ge).first;
    }
    HKV_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
  } else {
    launch_layers(r, &opt);
  }

  std::vector<int32_t> ids(ids_out ? r.logit_rows.size() : 0);
  if (!ids.empty()) {  // the wanted rows' argmax on the device; 4 bytes a row come back
    int32_t* d_ids = static_cast<int32_t*>(argmax_);
    float* part_v = reinterpret_cast<float*>(d_ids + kMaxRows);
    int* part_i = reinterpret_cast<int*>(part_v + kMaxRows * kArgmaxParts);
    argmax_rows(logits_, int64_t(ids.size()), c.vocab_size, d_ids, part_v, part_i, stream_, tuning_);
    HKV_CUDA_CHECK(cudaMemcpyAsync(ids.data(), d_ids, ids.size() * 4, cudaMemcpyDeviceToHost, stream_));
  }
  check_pack_error(stream_);
  for (int b = 0; b < B; b++) r.seqs[size_t(b)]->pos_ += r.count[size_t(b)];
  if (ids_out) {
    for (size_t i = 0; i < ids.size(); i++) ids_out[size_t(r.logit_seq[i])].push_back(ids[i]);
  } else if (!r.logit_rows.empty()) {
    const size_t V = size_t(c.vocab_size);
    std::vector<float> hbuf(r.logit_rows.size() * V);
    HKV_CUDA_CHECK(cudaMemcpy(hbuf.data(), logits_, hbuf.size() * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < r.logit_rows.size(); i++) {
      std::vector<float>& out = logits_out[size_t(r.logit_seq[i])];
      out.insert(out.end(), hbuf.begin() + ptrdiff_t(i * V), hbuf.begin() + ptrdiff_t((i + 1) * V));
    }
  }
}

void Engine::run_rounds(const std::vector<Sequence*>& seqs, const std::vector<std::vector<int32_t>>& tokens,
                        const ForwardOptions& opt, std::vector<std::vector<float>>* logits_out,
                        std::vector<std::vector<int32_t>>* ids_out) {
  const Config& c = c_;
  if (seqs.size() != tokens.size()) throw std::runtime_error("engine: one token list per sequence");
  for (size_t i = 0; i < seqs.size(); i++) {
    const Sequence& s = *seqs[i];
    const int64_t T = int64_t(tokens[i].size());
    for (size_t j = 0; j < i; j++)
      if (seqs[j] == seqs[i]) throw std::runtime_error("engine: a sequence appears twice in one batch");
    // (the formats the engine runs differ in kind and mse alone: KvFormat::engine_runs)
    if (s.format_.kind != seqs[0]->format_.kind || s.format_.mse != seqs[0]->format_.mse)
      throw std::runtime_error("engine: the sequences of one batch must share a cache format");
    check_forward_input(c, s.pos_, s.capacity_, tokens[i]);
  }
  std::vector<std::vector<float>> logits(seqs.size());
  std::vector<std::vector<int32_t>> ids(seqs.size());
  std::vector<size_t> done(seqs.size(), 0);
  for (size_t i = 0; i < seqs.size(); i++)  // long prompts through the fast prefill path
    if (uses_fast_prefill(int64_t(tokens[i].size()), opt)) {
      logits[i] = forward_fast(*seqs[i], tokens[i], opt);
      done[i] = tokens[i].size();
      if (ids_out)  // its logits are on the host already
        for (size_t r = 0; r * size_t(c.vocab_size) < logits[i].size(); r++)
          ids[i].push_back(argmax(logits[i].data() + r * size_t(c.vocab_size), c.vocab_size));
    }
  for (;;) {
    Round r;
    int active = 0;
    for (size_t i = 0; i < seqs.size(); i++) active += done[i] < tokens[i].size();
    if (active == 0) break;
    const int64_t share = std::max<int64_t>(1, kMaxRows / active);
    for (size_t i = 0; i < seqs.size(); i++) {
      const size_t left = tokens[i].size() - done[i];
      if (left == 0) continue;
      const int take = int(std::min<int64_t>(int64_t(left), share));
      Sequence* s = seqs[i];
      r.kind = s->format_.kind;
      r.first.push_back(int(r.N));
      r.count.push_back(take);
      r.seqs.push_back(s);
      for (int t = 0; t < take; t++) {
        const size_t ti = done[i] + size_t(t);
        r.tok.push_back(tokens[i][ti]);
        r.pos.push_back(int32_t(s->pos_ + t));
        r.t_in_call.push_back(int32_t(ti));
        r.max_keys = std::max(r.max_keys, int(s->pos_ + t + 1));
        const bool last = ti + 1 == tokens[i].size();
        if (opt.want_logits && (!opt.last_only || last)) {
          r.logit_rows.push_back(int(r.N));
          r.logit_seq.push_back(int(i));
        }
        r.N++;
      }
      done[i] += size_t(take);
    }
    run_round(r, opt, logits.data(), ids_out ? ids.data() : nullptr);
  }
  if (logits_out) *logits_out = std::move(logits);
  if (ids_out) *ids_out = std::move(ids);
}

std::vector<std::vector<float>> Engine::forward_batch(const std::vector<Sequence*>& seqs,
                                                      const std::vector<std::vector<int32_t>>& tokens,
                                                      const ForwardOptions& opt) {
  std::vector<std::vector<float>> logits;
  run_rounds(seqs, tokens, opt, &logits, nullptr);
  return logits;
}

std::vector<std::vector<int32_t>> Engine::forward_batch_argmax(const std::vector<Sequence*>& seqs,
                                                               const std::vector<std::vector<int32_t>>& tokens,
                                                               const ForwardOptions& opt) {
  std::vector<std::vector<int32_t>> ids;
  run_rounds(seqs, tokens, opt, nullptr, &ids);
  return ids;
}

std::vector<float> Engine::forward(Sequence& s, const std::vector<int32_t>& tokens, const ForwardOptions& opt) {
  if (tokens.empty()) return {};
  return forward_batch({&s}, {tokens}, opt)[0];
}

std::vector<int32_t> Engine::forward_argmax(Sequence& s, const std::vector<int32_t>& tokens,
                                            const ForwardOptions& opt) {
  if (tokens.empty()) return {};
  return forward_batch_argmax({&s}, {tokens}, opt)[0];
}

}  // namespace hkv::cuda
