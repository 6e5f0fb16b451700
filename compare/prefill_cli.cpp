// `hkv bench-prefill`: the fast prefill path's wall time and peak device memory on a model (by default the
// 27B shape with MLX 4-bit weights, generated on the device), for prompts of each length, then a few exact
// decode steps after it (the sequence must continue). Built only with the CUDA engine.
#if defined(HKV_HAVE_CUDA)

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>

#include "compare/cli.h"
#include "compare/gpu_bench.h"
#include "cuda/check.h"
#include "cuda/engine.h"
#include "reference/model.h"
#include "reference/synthetic.h"

namespace hkv {

// hkv bench-prefill [--model builtin:27b-mlx4] [--tokens 4096,32768] [--kv-cache q4h] [--decode 4] [--exact]
//                   [--embed host|device] [--limit-gib G]
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
      "cache %s, device memory in use before the engine %.2f GB\n",
      model.c_str(), prop.name, double(eng->weight_bytes()) / 1e9, double(moved) / 1e9, f.name().c_str(),
      double(base_used) / 1e9);
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
