// The engine (cuda/) behind the SequenceRunner interface, for the gate and the differential suite.
#include <stdexcept>

#include "compare/gate.h"

namespace hkv {

#ifndef HKV_HAVE_CUDA
RunnerFactory engine_runners(const Model&) {
  throw std::runtime_error("this hkv was built without the CUDA engine (no nvcc at configure time, or HKV_CUDA=OFF)");
}
#endif

}  // namespace hkv
