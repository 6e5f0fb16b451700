// The engine (cuda/) behind the SequenceRunner interface, for the gate and the differential suite.
#include <stdexcept>

#include "compare/gate.h"

#ifdef HKV_HAVE_CUDA
#include <cuda_runtime.h>

#include "cuda/engine.h"
#endif

namespace hkv {

#ifdef HKV_HAVE_CUDA
namespace {
class EngineRunner : public SequenceRunner {
 public:
  EngineRunner(std::shared_ptr<cuda::Engine> e, const KvFormat& f, int64_t capacity)
      : e_(std::move(e)), s_(e_->new_sequence(f, capacity)) {}
  void feed(const std::vector<int32_t>& tokens, std::vector<float>* logits) override {
    ForwardOptions opt;
    opt.want_logits = logits != nullptr;
    std::vector<float> l = e_->forward(*s_, tokens, opt);
    if (logits) *logits = std::move(l);
  }

 private:
  std::shared_ptr<cuda::Engine> e_;
  std::unique_ptr<cuda::Sequence> s_;
};
}  // namespace

RunnerFactory engine_runners(const Model& m) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) throw std::runtime_error("no CUDA device is present");
  auto engine = std::make_shared<cuda::Engine>(m);
  return [engine](const KvFormat& f, int64_t capacity) -> std::unique_ptr<SequenceRunner> {
    if (!f.is_canonical()) throw std::runtime_error("the engine implements bf16, fp8 and q4h only, not " + f.name());
    return std::make_unique<EngineRunner>(engine, f, capacity);
  };
}
#else
RunnerFactory engine_runners(const Model&) {
  throw std::runtime_error("this hkv was built without the CUDA engine (no nvcc at configure time, or HKV_CUDA=OFF)");
}
#endif

}  // namespace hkv
