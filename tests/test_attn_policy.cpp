// The engine's choice of decode-attention shape (cuda::auto_attn_shape, host code: no GPU needed), at the
// boundaries cuda/attention/policy.cu states with the measurements behind them. Built where the CUDA engine is.
#include <doctest/doctest.h>

#if HKV_HAVE_CUDA
#include "cuda/kernels.h"

using hkv::KvKind;
using hkv::cuda::AttnShape;
using hkv::cuda::auto_attn_shape;

namespace {
constexpr int64_t P = 132;  // the H200's multiprocessors
constexpr int qpk = 6;      // the 27B shape: 24 query heads over 4 KV heads
// b = KV heads × chunks × rows at batch 1 in the 27B shape: 4 × ⌈depth / 512⌉
int64_t b_at(int64_t depth) { return 4 * ((depth + 511) / 512); }
AttnShape dflt(KvKind k, int64_t b) { return auto_attn_shape(k, b, qpk, P, 1, 10); }
}  // namespace

TEST_CASE("attention shape: short contexts spread a chunk over more blocks, both 4-bit formats alike") {
  for (KvKind k : {KvKind::FP8, KvKind::Q4H}) {
    CHECK(dflt(k, b_at(1024)) == AttnShape::KvStagedH1);  // b·6 = 48 ≤ P
    CHECK(dflt(k, 22) == AttnShape::KvStagedH1);          // 132, one wave
    CHECK(dflt(k, 23) == AttnShape::KvStagedH2);          // 138 > P; 69 two-head blocks
    CHECK(dflt(k, b_at(4096)) == AttnShape::KvStagedH2);  // 32 · 3 = 96
    CHECK(dflt(k, 45) == AttnShape::KvStaged);            // 45 · 3 = 135 > P
    CHECK(dflt(k, b_at(16384)) == AttnShape::KvStaged);   // 128 < P
    CHECK(dflt(k, P) == AttnShape::VStagedX2);            // one block a multiprocessor: slim's 4 warps alone
    CHECK(dflt(k, P + 1) == AttnShape::Slim);
    CHECK(dflt(k, b_at(20480)) == AttnShape::Slim);  // 160
    CHECK(dflt(k, b_at(262144)) == AttnShape::Slim);
  }
}

TEST_CASE("attention shape: q4h takes slim where its bulk kernels' grid is under two waves, as fp8") {
  for (int64_t b : {int64_t(244), int64_t(245), b_at(32768), int64_t(264), int64_t(265)})  // b_at(32768): 256, 1.94 P
    for (KvKind k : {KvKind::FP8, KvKind::Q4H}) CHECK(dflt(k, b) == AttnShape::Slim);
}

TEST_CASE("attention shape: the switches (HKV_ATTN_SLIM, HKV_ATTN_SLIM_FROM) and bf16") {
  for (KvKind k : {KvKind::FP8, KvKind::Q4H}) {
    CHECK(auto_attn_shape(k, 600, qpk, P, 0, 10) == AttnShape::VStagedX2);    // never slim
    CHECK(auto_attn_shape(k, 3 * P, qpk, P, 1, 30) == AttnShape::VStagedX2);  // 30: Slim only past 3P
    CHECK(auto_attn_shape(k, 3 * P + 1, qpk, P, 1, 30) == AttnShape::Slim);
    CHECK(auto_attn_shape(k, 158, qpk, P, 1, 12) == AttnShape::VStagedX2);  // 1.197 P
    CHECK(auto_attn_shape(k, 159, qpk, P, 1, 12) == AttnShape::Slim);
    CHECK(auto_attn_shape(k, P - 1, qpk, P, 1, 10) == AttnShape::KvStaged);  // below one wave no switch matters
    CHECK(auto_attn_shape(k, 2 * P, qpk, P, 1, 20) == AttnShape::VStagedX2);
    CHECK(auto_attn_shape(k, 2 * P + 1, qpk, P, 1, 20) == AttnShape::Slim);
    CHECK(auto_attn_shape(k, 199, qpk, P, 1, 15) == AttnShape::Slim);
    CHECK(auto_attn_shape(k, 198, qpk, P, 1, 15) == AttnShape::VStagedX2);
  }
  CHECK(auto_attn_shape(KvKind::FP8, 600, qpk, P, 2, 10) == AttnShape::Slim);  // slim for fp8 alone
  CHECK(auto_attn_shape(KvKind::Q4H, 600, qpk, P, 2, 10) == AttnShape::VStagedX2);
  CHECK(dflt(KvKind::BF16, 8) == AttnShape::KvStaged);  // bf16 has no slim kernel and no kv-staged-h shapes
  CHECK(dflt(KvKind::BF16, 4 * P - 1) == AttnShape::KvStaged);
  CHECK(dflt(KvKind::BF16, 4 * P) == AttnShape::UnstagedX8);
  // bf16 with its rows staged half a chunk at a time (HKV_ATTN_BF16_HALVES): spread below one wave as the others, then
  // its own rule
  auto halves = [](int64_t b) { return auto_attn_shape(KvKind::BF16, b, qpk, P, 1, 10, true); };
  CHECK(halves(b_at(1024)) == AttnShape::KvStagedH1);
  CHECK(halves(22) == AttnShape::KvStagedH1);
  CHECK(halves(23) == AttnShape::KvStagedH2);
  CHECK(halves(44) == AttnShape::KvStagedH2);
  CHECK(halves(45) == AttnShape::KvStaged);
  CHECK(halves(P) == AttnShape::KvStaged);  // no v-staged-x2 or slim for bf16
  CHECK(halves(4 * P - 1) == AttnShape::KvStaged);
  CHECK(halves(4 * P) == AttnShape::UnstagedX8);
  CHECK(auto_attn_shape(KvKind::Q4H, 8, qpk, P, 1, 10, true) == AttnShape::KvStagedH1);  // the others unchanged
  CHECK(auto_attn_shape(KvKind::Q4H, 600, qpk, P, 1, 10, true) == AttnShape::Slim);
}

TEST_CASE("attention: slim's fp8 score loop rolled past one wave, the values split while two blocks a chunk fit one") {
  using hkv::cuda::attn_dsplit;
  using hkv::cuda::attn_slim_fp8_rolled;
  CHECK_FALSE(attn_slim_fp8_rolled(4 * P, P));  // 4 slim blocks a multiprocessor: one wave
  CHECK(attn_slim_fp8_rolled(4 * P + 1, P));
  CHECK_FALSE(attn_slim_fp8_rolled(b_at(65536), P));  // 512 slim blocks at 64K (batch 1)
  CHECK(attn_slim_fp8_rolled(b_at(131072), P));       // 1024 at 128K
  CHECK(attn_dsplit(256, P / 2, P) == 2);             // 132 blocks doubled: one wave
  CHECK(attn_dsplit(256, P / 2 + 1, P) == 1);
  CHECK(attn_dsplit(256, b_at(8192), P) == 2);  // the kv-staged shape's 64 blocks at 8K
  CHECK(attn_dsplit(96, 8, P) == 1);            // head dims not a multiple of 64 keep one block
}
#endif
