// The engine: the whole Qwen3.5 hybrid model on one NVIDIA GPU, byte for byte with the oracle
// (reference/model.cpp) on its exact path. Weights are uploaded once (bf16/f32/f16 as stored, MLX 4-bit as
// words + scales + biases) or generated on the device from a SyntheticSpec; each sequence owns its cache in
// one of the three canonical formats (bf16, fp8, q4h) and its DeltaNet and conv states.
//
// forward() has the oracle's semantics: tokens are fed in order, each token's K and V rows are packed into
// the cache before attention reads them back in the cache's format; a prefill of T tokens is the same
// per-token computation as T decode steps. forward_batch() runs several sequences in one pass (weights read
// once for all rows); a sequence's bytes do not depend on the others.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda/kernels.h"
#include "reference/config.h"
#include "reference/kvformat.h"
#include "reference/sequence.h"
#include "reference/synthetic.h"

namespace hkv::cuda {

// One sequence's device state: a cache per full-attention layer (K and V) in kv_row_offset's layout of blocks of
// kKvBlock positions (cuda/kernels.h; download and upload convert to and from SequenceState's position order),
// conv [conv_dim][K−1] and S [nv][dk][dv] per DeltaNet layer. Owned memory; freed with the object.
class Sequence {
 public:
  ~Sequence();
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;
  int64_t pos() const { return pos_; }
  int64_t capacity() const { return capacity_; }
  const KvFormat& format() const { return format_; }
  size_t row_bytes() const { return row_bytes_; }
  size_t bytes() const { return bytes_; }

 private:
  friend class Engine;
  Sequence() = default;
  KvFormat format_;
  int64_t capacity_ = 0, pos_ = 0;
  size_t row_bytes_ = 0, bytes_ = 0, state_bytes_ = 0;
  void* mem_ = nullptr;
  std::vector<uint8_t*> k_, v_;   // per full-attention layer
  float* states_ = nullptr;       // conv and S of every DeltaNet layer, contiguous
  std::vector<float*> conv_, S_;  // per DeltaNet layer, into states_
};

// The DeltaNet and conv states and the position of a sequence, for rolling back drafted tokens.
class Snapshot {
 public:
  ~Snapshot();
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;

 private:
  friend class Engine;
  Snapshot() = default;
  void* mem_ = nullptr;
  size_t bytes_ = 0;
  int64_t pos_ = 0;
};

struct FastPrefillState;  // cuda/prefill.h

// Prefill::Auto's threshold: the fast path from this many tokens on (and no tap), exact below. Measured on the H200
// (2026-11-29, hkv bench-prefill --exact, 27B MLX4 shape, q4h): a 4,096-token prompt takes 103 s exact (25 ms a token)
// and 1.6 s fast. Below 64 tokens the exact path costs under ~1.6 s and keeps every byte; from 64 on the fast path is
// taken.
inline constexpr int64_t kAutoFastPrefillTokens = 64;

class Engine {
 public:
  // t: the engine's run-time choices (cuda/tuning.h), by default the environment's; no choice changes a byte of the
  // exact path.
  explicit Engine(const Model& m, const Tuning& t = tuning_from_env());  // uploads the host weights
  // generates build_synthetic(spec)'s bytes on the device
  explicit Engine(const SyntheticSpec& spec, const Tuning& t = tuning_from_env());
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Config& config() const { return c_; }
  // The choices every launch from now on takes, and another set of them (hkv bench --variants): the captured decode
  // graphs are dropped, so that the next decode steps capture their launches anew.
  const Tuning& tuning() const { return tuning_; }
  void set_tuning(const Tuning& t) {
    tuning_ = t;
    drop_graphs();
  }
  size_t weight_bytes() const { return weight_bytes_; }
  // Bytes of weights one decode token reads (every matrix but the embedding, plus one embedding row).
  size_t weight_bytes_per_token() const { return weight_read_bytes_; }

  // Refused up front (std::runtime_error with the numbers) when it does not fit in free device memory.
  std::unique_ptr<Sequence> new_sequence(const KvFormat& f, int64_t capacity);

  // As hkv::forward: logits [T or 1][vocab] (none when !opt.want_logits); opt.tap sees "q", "k", "attn",
  // "deltanet", "hidden" per layer exactly as the oracle's. Throws std::domain_error on a non-finite K/V.
  std::vector<float> forward(Sequence& s, const std::vector<int32_t>& tokens, const ForwardOptions& opt = {});
  // opt.prefill (reference/sequence.h): Exact as above; Fast runs the tokens through the fast prefill path
  // (cuda/prefill.h: tensor cores, chunked DeltaNet; NOT exact, no taps) and leaves the sequence in the exact
  // path's formats, so exact decode continues from it; Auto is Fast from kAutoFastPrefillTokens tokens on.
  // Several sequences at once; tokens[i] goes to seqs[i]. Logits per sequence, as forward().
  std::vector<std::vector<float>> forward_batch(const std::vector<Sequence*>& seqs,
                                                const std::vector<std::vector<int32_t>>& tokens,
                                                const ForwardOptions& opt = {});

  // Greedy decoding: forward() and forward_batch() with the wanted rows' logits left on the device and only their
  // argmax (reference argmax(), taken on the device) coming back, one id a wanted row (a decode step copies 4
  // bytes to the host instead of its logits). The same sequence state and the same ids as argmax of forward().
  std::vector<int32_t> forward_argmax(Sequence& s, const std::vector<int32_t>& tokens, const ForwardOptions& opt = {});
  std::vector<std::vector<int32_t>> forward_batch_argmax(const std::vector<Sequence*>& seqs,
                                                         const std::vector<std::vector<int32_t>>& tokens,
                                                         const ForwardOptions& opt = {});

  // The sequence's state as the oracle holds it, and back (save_state / load_state use these files).
  SequenceState download(const Sequence& s) const;
  std::unique_ptr<Sequence> upload(const SequenceState& st);
  void save(const Sequence& s, const std::string& path) const;
  std::unique_ptr<Sequence> restore(const std::string& path, int64_t capacity);

  // Drafted decode: snapshot before feeding drafts, roll back to it (then re-feed the accepted tokens).
  std::unique_ptr<Snapshot> snapshot(const Sequence& s);
  void rollback(Sequence& s, const Snapshot& snap);

  // Benchmarks: valid random cache rows for positions [0, pos), and the sequence set to pos.
  void fill_random_cache(Sequence& s, int64_t pos, uint64_t seed);
  // Moves the embedding table (2.5 GB of bf16 in the synthetic 27B shape) to pinned host memory that the
  // GPU reads directly (one row a token over the bus) and frees its device memory; the bytes computed do not
  // change. Returns the device bytes freed (0 when the table is shared with lm_head). Call before forward().
  size_t embedding_to_host();
  // Capture decode steps (one token per sequence) in CUDA graphs and replay them.
  void set_graphs(bool on) { graphs_ = on; }
  // The captured decode graphs destroyed: the next decode step captures its launches anew (set_tuning; hkv bench's
  // diagnostics, whose instantiations are taken at capture).
  void drop_graphs() noexcept;
  // Tests: cap the fast prefill's bf16 weight tile at n elements (0: the default 64M), before its first prompt,
  // so that small models' products go through several row tiles as the 27B shape's do.
  void set_fast_weight_tile_cap(size_t n) { fast_tile_cap_ = n; }
  // Whether a call of T tokens with these options takes the fast prefill path.
  bool uses_fast_prefill(int64_t T, const ForwardOptions& opt) const;
  // Rows a pass of the fast path would take for a prompt of T tokens in the device memory free now, and the
  // scratch bytes it needs (refused up front by forward(), with these numbers, when they do not fit).
  int64_t fast_prefill_rows(int64_t T) const;
  size_t fast_prefill_bytes(int64_t rows) const;
  cudaStream_t stream() const { return stream_; }

 private:
  struct Layer {
    LayerKind kind;
    float *input_norm = nullptr, *post_norm = nullptr;
    DMat q, k, v, o;
    float *q_norm = nullptr, *k_norm = nullptr;
    DMat qkv, z, b, a, out;
    float *conv = nullptr, *A_log = nullptr, *dt_bias = nullptr, *norm = nullptr;
    DMat gate, up, down;
  };
  struct Round;
  struct Bare {};

  Engine(const Config& c, const Tuning& t, Bare);  // the config only; see engine.cu for why the constructors delegate
  void init_common();
  void free_scratch() noexcept;
  void* dalloc(size_t bytes, const char* what);
  float* upload_vec(const std::vector<float>& v);
  DMat upload_matrix(const Matrix& m, std::map<const void*, DMat>& seen);
  void ensure_scratch(int64_t rows, int max_keys);
  // A round's logits to logits[seq] or, with ids, their argmax to ids[seq] (the logits stay on the device).
  void run_round(const Round& r, const ForwardOptions& opt, std::vector<float>* logits,
                 std::vector<int32_t>* ids = nullptr);
  // forward_batch and forward_batch_argmax: one of logits and ids is wanted.
  void run_rounds(const std::vector<Sequence*>& seqs, const std::vector<std::vector<int32_t>>& tokens,
                  const ForwardOptions& opt, std::vector<std::vector<float>>* logits,
                  std::vector<std::vector<int32_t>>* ids);
  void launch_layers(const Round& r, const ForwardOptions* tap_opt);
  void check_fits(size_t need, const std::string& what) const;
  void check_pack_error(cudaStream_t st);
  // the fast prefill path (cuda/prefill_engine.cpp)
  std::vector<float> forward_fast(Sequence& s, const std::vector<int32_t>& tokens, const ForwardOptions& opt);
  // Elements of the fast path's bf16 weight tile: the largest converted layer matrix, capped, at least a row.
  size_t fast_weight_tile_elems() const;
  void fast_gemm(const DMat& W, int64_t r0, int64_t r1, const uint16_t* X, int64_t ldx, int64_t n, float* Y,
                 int64_t ldy, float beta);

  Config c_;
  Tuning tuning_;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> weight_allocs_;
  void* host_embed_ = nullptr;  // pinned, mapped (embedding_to_host)
  size_t weight_bytes_ = 0, weight_read_bytes_ = 0;
  DMat embed_, lm_head_;
  float* final_norm_ = nullptr;
  std::vector<Layer> layers_;
  int n_full_ = 0, n_lin_ = 0;

  // scratch, sized for scratch_rows_ rows and part_floats_ attention partials
  int64_t scratch_rows_ = 0;
  size_t part_floats_ = 0;
  void* scratch_ = nullptr;
  float* part_ = nullptr;
  float *h_ = nullptr, *x_ = nullptr, *y_ = nullptr, *big_ = nullptr, *big2_ = nullptr, *kbuf_ = nullptr,
        *vbuf_ = nullptr, *qbuf_ = nullptr, *att_ = nullptr, *zbuf_ = nullptr, *bbuf_ = nullptr, *abuf_ = nullptr,
        *conv_out_ = nullptr, *core_ = nullptr, *xq_ = nullptr, *logits_ = nullptr, *rope_ = nullptr;
  void* meta_ = nullptr;  // per-round device metadata (Round::host_meta)
  size_t meta_bytes_ = 0;
  int* err_ = nullptr;
  void* argmax_ = nullptr;  // forward_argmax: the ids of a round's rows, then argmax_rows' partials
  bool graphs_ = false;
  size_t fast_tile_cap_ = 0;
  std::map<std::string, cudaGraphExec_t> graph_cache_;
  std::shared_ptr<FastPrefillState> fast_;  // cuBLAS handle and scratch of the fast prefill path
};

}  // namespace hkv::cuda
