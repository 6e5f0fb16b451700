// exp_c without branches, for the attention's weights pass: the same bits as exp_c (reference/scalar.h) for every
// float, in plain C++ so that the CPU tests compare the two (tests/test_scalar.cpp).
//
// exp_c tests its input three times before it reduces it (NaN, above 88.72…, below −103.97…), and on the card each
// test is a branch around the rest. exp_c_flat reduces x clamped into [−104, 89] (a NaN clamps to −104), where
// exp_reduce and scale2 are defined, and then selects exp_c's result for the inputs outside: 0 below −103.97…, inf
// above 88.72…, the canonical NaN for a NaN. Inside, the clamp leaves x as it is, so the reduction, the polynomial and
// the scaling are exp_c's operations on exp_c's input. With no branch, the weights of one key (one per head) are
// independent straight-line chains that the scheduler can interleave.
#pragma once

#include "reference/scalar.h"

namespace hkv::cuda {

HKV_HD float exp_c_flat(float x) {
  const float lo = -104.0f, hi = 89.0f;
  const float xc = x > lo ? (x < hi ? x : hi) : lo;  // a NaN fails x > lo: lo
  int k;
  const float p = exp_reduce(xc, k);
  float r = scale2(p, k);
  r = x < -103.972084045410f ? 0.0f : r;
  r = x > 88.72283935546875f ? f32_from_bits(0x7f800000u) : r;
  return is_nan(x) ? canonical_nan() : r;
}

}  // namespace hkv::cuda
