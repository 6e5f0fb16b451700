// `hkv bench-prefill`: the fast prefill path's wall time and peak device memory on a model (by default the
// 27B shape with MLX 4-bit weights, generated on the device), for prompts of each length, then a few exact
// decode steps after it (the sequence must continue). Built only with the CUDA engine.
#if defined(HKV_HAVE_CUDA)

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>

#include "compare/cli.h"
#include "compare/gpu_bench.h"
#include "cuda/check.h"
#include "cuda/engine.h"
#include "cuda/prefill.h"
#include "reference/kvformat.h"
#include "reference/model.h"
#include "reference/synthetic.h"

namespace hkv {

namespace {
// hkv bench-prefill --attention-only [--model builtin:27b-mlx4] [--tokens …] [--rows 4096] [--reps 3]
// The fast path's attention alone (cuda/prefill_attention.cu) at the model's attention layout: for each T, the
// last pass of a T-token prompt (rows p0 = T − rows … T − 1) over a cache of T positions of one layer (1,024
// random rows packed in the format, repeated: the time does not depend on the values): the median of --reps
// calls timed one at a time by CUDA events (time_ms) after one warm-up. TFLOP/s counts 4·D flops a visible
// (query head, key) pair (Q·Kᵀ and P·V); "all layers, whole prompt" is the prompt's attention flops over the
// full-attention layers at that rate.
int bench_attention_only(const Args& a, const Config& c, const KvFormat& f, const std::vector<long long>& lengths) {
  const int H = c.num_attention_heads, KV = c.num_key_value_heads, D = c.head_dim;
  const int64_t rows_arg = a.get_int("rows", 4096), reps = a.get_int("reps", 3);
  if (rows_arg < 1 || reps < 1) throw UsageError("hkv bench-prefill: --rows and --reps must be at least 1");
  if (!cuda::fast_attn_head_dim_ok(D))
    throw UsageError("hkv bench-prefill: head_dim " + std::to_string(D) + " has no fast attention");
  cudaDeviceProp prop;
  HKV_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const cuda::FlashCfg flash = cuda::tuning_from_env().flash;
  const size_t rb = kv_row_bytes(f, D);
  constexpr int64_t kPattern = 1024;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(D));
  std::vector<uint8_t> rows(size_t(kPattern) * KV * rb * 2);  // K rows, then V rows, in position order
  for (size_t r = 0; r < size_t(kPattern) * KV * 2; r++) {
    for (float& v : x) v = nd(rng);
    kv_pack_row(f, x.data(), D, rows.data() + r * rb);
  }
  // the pattern in the device layout (whole blocks: kPattern is a multiple of cuda::kKvBlock), K's, then V's
  static_assert(kPattern % cuda::kKvBlock == 0, "the pattern is whole blocks");
  const int B = cuda::kv_block(f.kind);
  std::vector<uint8_t> pat = cuda::kv_rows_to_blocks(rows.data(), kPattern, KV, rb, B);
  const std::vector<uint8_t> vpat =
      cuda::kv_rows_to_blocks(rows.data() + size_t(kPattern) * KV * rb, kPattern, KV, rb, B);
  pat.insert(pat.end(), vpat.begin(), vpat.end());
  std::printf(
      "hkv bench-prefill --attention-only: %s attention (%d heads, %d KV heads, head_dim %d, %d of %d layers) "
      "on %s, cache %s, HKV_FLASH_CFG=%s\n",
      a.get("model", "builtin:27b-mlx4").c_str(), H, KV, D, c.n_full_layers(), c.num_hidden_layers, prop.name,
      f.name().c_str(), cuda::fast_attn_form(flash));
  std::printf(
      "| tokens | rows | p0 | ms a layer | TFLOP/s | all layers, whole prompt, s |\n|---|---|---|---|---|---|\n");
  for (int64_t T : lengths) {
    const int64_t n = std::min<int64_t>(rows_arg, T), p0 = T - n;
    struct Buf {
      void* p = nullptr;
      explicit Buf(size_t b) { HKV_CUDA_CHECK(cudaMalloc(&p, b)); }
      ~Buf() { cudaFree(p); }
    };
    const size_t cache_b = cuda::kv_cache_bytes(T, KV, rb, B);
    Buf kc(cache_b), vc(cache_b), q(size_t(n) * H * D * 4), gate(size_t(n) * H * D * 4), out(size_t(n) * H * D * 2),
        scratch(cuda::fast_attn_scratch_bytes(T, D));
    const size_t blk = size_t(kPattern) * KV * rb;
    for (int64_t p = 0; p < T; p += kPattern) {
      const size_t bytes = cuda::kv_cache_bytes(std::min<int64_t>(kPattern, T - p), KV, rb, B);  // whole blocks
      HKV_CUDA_CHECK(
          cudaMemcpy(static_cast<uint8_t*>(kc.p) + size_t(p) * KV * rb, pat.data(), bytes, cudaMemcpyHostToDevice));
      HKV_CUDA_CHECK(cudaMemcpy(static_cast<uint8_t*>(vc.p) + size_t(p) * KV * rb, pat.data() + blk, bytes,
                                cudaMemcpyHostToDevice));
    }
    std::vector<float> hq(size_t(n) * H * D);
    for (float& v : hq) v = nd(rng);
    HKV_CUDA_CHECK(cudaMemcpy(q.p, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice));
    HKV_CUDA_CHECK(cudaMemcpy(gate.p, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice));
    cuda::FastAttnArgs fa;
    fa.kind = f.kind, fa.D = D, fa.H = H, fa.KV = KV, fa.row_bytes = rb;
    fa.q = static_cast<const float*>(q.p), fa.ldq = int64_t(H) * D;
    fa.gate = static_cast<const float*>(gate.p), fa.ldg = int64_t(H) * D, fa.gate_stride = D;
    fa.k_cache = static_cast<const uint8_t*>(kc.p), fa.v_cache = static_cast<const uint8_t*>(vc.p);
    fa.p0 = p0, fa.n = n, fa.out = static_cast<uint16_t*>(out.p), fa.ldo = int64_t(H) * D;
    fa.max_keys = T, fa.scratch = scratch.p;
    const double ms = time_ms(nullptr, 1, int(reps), [&] { cuda::fast_attention(fa, nullptr, flash); }).median;
    const double pairs = double(H) * (double(n) * double(p0) + double(n) * double(n + 1) / 2);
    const double tflops = 4.0 * D * pairs / (double(ms) * 1e-3) / 1e12;
    const double whole = 4.0 * D * double(H) * double(T) * double(T + 1) / 2 * c.n_full_layers() / (tflops * 1e12);
    std::printf("| %lld | %lld | %lld | %.3f | %.1f | %.1f |\n", (long long)T, (long long)n, (long long)p0, double(ms),
                tflops, whole);
    std::fflush(stdout);
  }
  return 0;
}
}  // namespace

// hkv bench-prefill [--model builtin:27b-mlx4] [--tokens 4096,32768] [--kv-cache q4h] [--decode 4] [--exact]
//                   [--embed host|device] [--limit-gib G] [--attention-only [--rows N] [--reps R]]
// Prints, per prompt length: rows a pass, the scratch's bytes, seconds, tokens/s, device memory in use after
// it (weights + cache + scratch, which the engine keeps), and the exact decode steps' median ms after it.
// --exact also times the exact path's prefill of the same prompt (slow at 27B: minutes at 32K).
// --limit-gib G first takes (total − G GiB) of device memory as ballast, so that the run shows whether the
// model, its cache and the fast path's scratch fit in G GiB (e.g. 20 for the 27B shape at 262,144 tokens).
// Peak GB in use then counts the ballast; "in the limit" is that less the ballast.
int cmd_bench_prefill(const Args& a) {
  const std::string model = a.get("model", "builtin:27b-mlx4");
  const std::vector<long long> lengths = a.get_int_list("tokens", "4096,32768");
  const KvFormat f = KvFormat::parse(a.get("kv-cache", "q4h"));
  const int ndec = int(a.get_int("decode", 4));
  const bool exact = a.has("exact");
  if (ndec < 0) throw UsageError("hkv bench-prefill: --decode must be at least 0");
  // Each prompt and the tokens decoded after it must fit the model's window: refused before anything runs
  // (a builtin model's window is known without the device, so there even before the GPU check).
  const auto check_window = [&](const Config& c) {
    for (int64_t T : lengths)
      if (T < 1 || T + ndec > c.max_position_embeddings)
        throw UsageError("hkv bench-prefill: --tokens " + std::to_string(T) + " with --decode " + std::to_string(ndec) +
                         " needs positions 0.." + std::to_string(T + ndec - 1) + ", past max_position_embeddings " +
                         std::to_string(c.max_position_embeddings) + " of " + model + " (use --tokens up to " +
                         std::to_string(c.max_position_embeddings - ndec) + ")");
  };
  if (a.has("attention-only")) {  // (one layer's cache of T positions: no decode steps, no window beyond T)
    if (model.rfind("builtin:", 0) != 0) throw UsageError("hkv bench-prefill: --attention-only takes a builtin: model");
    const Config ac = builtin_spec(model.substr(8)).config;
    for (int64_t T : lengths)
      if (T < 1 || T > ac.max_position_embeddings)
        throw UsageError("hkv bench-prefill: --tokens " + std::to_string(T) + " outside 1.." +
                         std::to_string(ac.max_position_embeddings) + " for " + model);
    require_gpu("hkv bench-prefill");
    return bench_attention_only(a, ac, f, lengths);
  }
  if (model.rfind("builtin:", 0) == 0) check_window(builtin_spec(model.substr(8)).config);
  require_gpu("hkv bench-prefill");
  cudaDeviceProp prop;
  HKV_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  void* ballast = nullptr;
  size_t ballast_b = 0;
  if (a.has("limit-gib")) {
    const size_t limit = size_t(a.get_int("limit-gib", 20)) << 30;
    if (limit < prop.totalGlobalMem) {
      ballast_b = prop.totalGlobalMem - limit;
      HKV_CUDA_CHECK(cudaMalloc(&ballast, ballast_b));
    }
    std::printf("device limited to %.2f GiB (ballast %.2f GB)\n", double(limit) / double(1ull << 30),
                double(ballast_b) / 1e9);
  }
  struct Free {
    void* p;
    ~Free() {
      if (p) cudaFree(p);
    }
  } free_ballast{ballast};
  const size_t base_used = used_device_bytes() - ballast_b;
  std::unique_ptr<cuda::Engine> eng = make_engine(model);
  const Config& c = eng->config();
  check_window(c);
  // As hkv bench: the bf16 embedding table (2.54 GB at the 27B shape, one row read a token) in pinned host
  // memory unless --embed device.
  const size_t moved = a.get("embed", "host") != "device" ? eng->embedding_to_host() : 0;
  std::printf(
      "hkv bench-prefill: %s on %s, weights %.2f GB on the device (embedding table of %.2f GB in host memory), "
      "cache %s, attention form %s, device memory in use before the engine %.2f GB\n",
      model.c_str(), prop.name, double(eng->weight_bytes()) / 1e9, double(moved) / 1e9, f.name().c_str(),
      cuda::fast_attn_form(eng->tuning().flash), double(base_used) / 1e9);
  std::printf(
      "| tokens | rows/pass | scratch GB | prefill s | tokens/s | peak GB in use | cache GB | decode ms/token |%s\n",
      exact ? " exact prefill s |" : "");
  std::printf("|---|---|---|---|---|---|---|---|%s\n", exact ? "---|" : "");
  std::mt19937_64 rng(7);
  for (int64_t T : lengths) {
    std::vector<int32_t> toks(static_cast<size_t>(T));
    for (auto& t : toks) t = int32_t(rng() % uint64_t(c.vocab_size));
    auto s = eng->new_sequence(f, T + ndec + 1);
    const double cache_gb = double(s->bytes()) / 1e9;
    ForwardOptions o;
    o.last_only = true;
    o.prefill = Prefill::Fast;
    HKV_CUDA_CHECK(cudaDeviceSynchronize());
    auto t0 = std::chrono::steady_clock::now();
    std::vector<float> lg = eng->forward(*s, toks, o);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const size_t peak = used_device_bytes() - ballast_b;
    int32_t tok = argmax(lg.data(), c.vocab_size);
    std::vector<double> dms;
    o.prefill = Prefill::Exact;
    for (int i = 0; i < ndec; i++) {
      auto td = std::chrono::steady_clock::now();
      lg = eng->forward(*s, {tok}, o);
      dms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - td).count());
      tok = argmax(lg.data(), c.vocab_size);
    }
    std::sort(dms.begin(), dms.end());
    double exact_s = 0;
    if (exact) {
      auto s2 = eng->new_sequence(f, T + 1);
      HKV_CUDA_CHECK(cudaDeviceSynchronize());
      auto te = std::chrono::steady_clock::now();
      eng->forward(*s2, toks, o);
      exact_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - te).count();
    }
    const int64_t rows = eng->fast_prefill_rows(T);
    std::printf("| %lld | %lld | %.3f | %.3f | %.0f | %.2f | %.2f | %.3f |", (long long)T, (long long)rows,
                double(eng->fast_prefill_bytes(rows)) / 1e9, sec, double(T) / sec, double(peak) / 1e9, cache_gb,
                dms.empty() ? 0.0 : dms[dms.size() / 2]);
    if (exact) std::printf(" %.3f |", exact_s);
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace hkv

#endif  // HKV_HAVE_CUDA
