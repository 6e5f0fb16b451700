// The ring attention kernel's schedule (ring.cu), in plain C++ so that the CPU tests walk it
// (tests/test_ring_plan.cpp): which chunks a block takes, which quarters of a chunk hold rows, the parity a thread
// waits for at each stage, and when a warp of the value loop has passed a quarter. The kernel makes every one of these
// decisions through this header.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HKV_RING_HD __host__ __device__ __forceinline__
#else
#define HKV_RING_HD inline
#endif

namespace hkv::cuda::ring {

constexpr int kChunkKeys = 512;                 // attention's chunk (launch.h's kChunk)
constexpr int kStages = 4;                      // a block's stages
constexpr int kQuarter = kChunkKeys / kStages;  // rows a stage
static_assert(kQuarter % 32 == 0, "the value loop's blocks of 32 keys never straddle two stages");

// A work item: chunk c of row `row`'s keys for head block x (the chunk grid flattened, x fastest); len its keys, 0
// where the chunk lies past the row's keys.
struct Item {
  int64_t row = 0;
  int c = 0, x = 0, len = 0;
};
HKV_RING_HD Item item_at(int64_t i, int X, int maxch, const int* n_keys) {
  Item it;
  it.x = int(i % X);
  it.c = int(i / X % maxch);
  it.row = i / (int64_t(X) * maxch);
  const int rest = n_keys[it.row] - it.c * kChunkKeys;
  it.len = rest < 0 ? 0 : rest < kChunkKeys ? rest : kChunkKeys;
  return it;
}
// The first item with keys among i, i + G, i + 2G, … below items (the block's list); items where there is none.
HKV_RING_HD int64_t next_item(int64_t i, int64_t G, int64_t items, int X, int maxch, const int* n_keys, Item& it) {
  for (; i < items; i += G) {
    it = item_at(i, X, maxch, n_keys);
    if (it.len > 0) return i;
  }
  return items;
}
// Rows of quarter q of a chunk of len keys.
HKV_RING_HD int quarter_rows(int len, int q) {
  const int r = len - q * kQuarter;
  return r < 0 ? 0 : r < kQuarter ? r : kQuarter;
}
// One thread's parities: bit q the phase parity of stage q's next copy. take(q): the parity to wait for, and the
// next one.
struct Phases {
  uint32_t bits = 0;
  HKV_RING_HD uint32_t take(int q) {
    const uint32_t p = (bits >> q) & 1u;
    bits ^= 1u << q;
    return p;
  }
};
// A warp of the value loop that has counted itself on `passed` quarters and has now read every key below k for the
// last time: the quarters it has passed now (those wholly below k).
HKV_RING_HD int passed_below(int passed, int k) {
  while (passed < kStages && (passed + 1) * kQuarter <= k) passed++;
  return passed;
}

}  // namespace hkv::cuda::ring
