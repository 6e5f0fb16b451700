// The ring attention kernel's schedule (cuda/attention/ring_plan.h), walked on the host as ring.cu walks it: every
// chunk with keys is taken by exactly one block, and in each block's walk every wait on a stage is for the one copy
// asked for there and not yet waited for, at the parity that copy's phase completes, holding the rows the reader
// expects; the value loop's reads (two blocks of 32 keys ahead) find V's rows; no copy is asked for into a stage that
// still holds a copy not waited for or rows still being read; and no copy is left in flight when the block ends. Host
// code: no GPU needed.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/attention/ring_plan.h"

namespace ring = hkv::cuda::ring;

namespace {

// One stage of one block: copies asked for and waited for, what the last copy brings, whether its rows are being read.
struct Stage {
  int copies = 0, waits = 0;
  int64_t rows = -1;  // 2·item for its K rows, 2·item + 1 for its V rows
  bool reading = false;
};

// Block b's walk of ring.cu's steps over the launch's items. Returns the items it took.
std::vector<int64_t> walk_block(int64_t b, int64_t G, int64_t items, int X, int maxch, const std::vector<int>& n_keys) {
  Stage st[ring::kStages];
  ring::Phases ph;
  auto tag = [](char kv, int64_t i) { return 2 * i + (kv == 'V' ? 1 : 0); };
  auto ask = [&](int q, int64_t rows) {
    INFO("stage ", q, ": ask for ", rows);
    CHECK(st[q].copies == st[q].waits);  // none in flight there
    CHECK_FALSE(st[q].reading);
    st[q].copies++;
    st[q].rows = rows;
  };
  auto wait = [&](int q, int64_t rows) {
    INFO("stage ", q, ": wait for ", rows);
    const uint32_t parity = ph.take(q);
    REQUIRE(st[q].copies == st[q].waits + 1);  // exactly one copy in flight, the one waited for
    CHECK(parity == uint32_t(st[q].waits % 2));
    CHECK(st[q].rows == rows);
    st[q].waits++;
    st[q].reading = true;
  };
  std::vector<int64_t> took;
  ring::Item cur, nxt;
  int64_t i = ring::next_item(b, G, items, X, maxch, n_keys.data(), cur);
  if (i < items)
    for (int q = 0; q < ring::kStages; q++)
      if (ring::quarter_rows(cur.len, q) > 0) ask(q, tag('K', i));
  while (i < items) {
    took.push_back(i);
    const int64_t ni = ring::next_item(i + G, G, items, X, maxch, n_keys.data(), nxt);
    const int len = cur.len;
    for (int hf = 0; hf < 2; hf++) {  // scores, a half at a time; then V into the half's stages
      const int r0 = ring::quarter_rows(len, 2 * hf), r1 = ring::quarter_rows(len, 2 * hf + 1);
      if (r0 == 0) break;
      wait(2 * hf, tag('K', i));
      if (r1 > 0) wait(2 * hf + 1, tag('K', i));
      st[2 * hf].reading = st[2 * hf + 1].reading = false;  // the half's barrier
      ask(2 * hf, tag('V', i));
      if (r1 > 0) ask(2 * hf + 1, tag('V', i));
    }
    for (int q = 0; q < ring::kStages && ring::quarter_rows(len, q) > 0; q++) wait(q, tag('V', i));
    int passed = 0;
    auto release = [&](int now) {
      for (; passed < now; passed++) {
        st[passed].reading = false;
        if (ni < items && ring::quarter_rows(nxt.len, passed) > 0) ask(passed, tag('K', ni));
      }
    };
    for (int k = 32; k < len + 32; k += 32) {  // the value loop's blocks of 32 keys
      // by the end of block k the loop has read keys up to k + 63 (its loads run two blocks ahead, q4h_values.cuh)
      for (int key = k - 32; key <= std::min(k + 63, len - 1); key += 32) {
        INFO("values of item ", i, ": key ", key, " read from stage ", key / ring::kQuarter);
        CHECK(st[key / ring::kQuarter].rows == tag('V', i));
      }
      release(ring::passed_below(passed, k));
    }
    release(ring::kStages);  // all_done
    i = ni, cur = nxt;
  }
  for (int q = 0; q < ring::kStages; q++) {
    INFO("stage ", q, " at the block's end");
    CHECK(st[q].copies == st[q].waits);
  }
  return took;
}

}  // namespace

TEST_CASE("ring plan: every chunk once, and each stage's copies and waits in step") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 60; trial++) {
    const int rows = 1 + int(rng() % 4), X = std::vector<int>{1, 2, 4, 6}[rng() % 4];
    std::vector<int> n_keys(static_cast<size_t>(rows));
    for (int& n : n_keys)  // short rows, rows ending at and near a chunk's or a quarter's edge, long rows
      n = std::vector<int>{1, 31, 127, 128, 129, 256, 300, 511, 512, 513, 1000, 2048, 2100, 4097}[rng() % 14];
    const int maxch = (*std::max_element(n_keys.begin(), n_keys.end()) + ring::kChunkKeys - 1) / ring::kChunkKeys;
    const int64_t items = int64_t(X) * maxch * rows;
    for (const int64_t G : {int64_t(1), int64_t(3), int64_t(7), std::min<int64_t>(items, 264)}) {
      CAPTURE(trial);
      CAPTURE(G);
      std::vector<int> taken(static_cast<size_t>(items), 0);
      for (int64_t b = 0; b < G; b++)
        for (const int64_t i : walk_block(b, G, items, X, maxch, n_keys)) taken[static_cast<size_t>(i)]++;
      for (int64_t i = 0; i < items; i++) {
        const ring::Item it = ring::item_at(i, X, maxch, n_keys.data());
        INFO("item ", i, " (row ", it.row, ", chunk ", it.c, ", head block ", it.x, ", ", it.len, " keys)");
        CHECK(taken[static_cast<size_t>(i)] == (it.len > 0 ? 1 : 0));
      }
    }
  }
}

TEST_CASE("ring plan: a chunk's quarters and the value loop's passes") {
  for (const int len : {1, 127, 128, 129, 384, 511, 512}) {
    int sum = 0;
    for (int q = 0; q < ring::kStages; q++) sum += ring::quarter_rows(len, q);
    CHECK(sum == len);
  }
  CHECK(ring::quarter_rows(300, 2) == 44);
  CHECK(ring::quarter_rows(300, 3) == 0);
  CHECK(ring::passed_below(0, 96) == 0);
  CHECK(ring::passed_below(0, 128) == 1);
  CHECK(ring::passed_below(1, 512) == 4);
  CHECK(ring::passed_below(4, 1024) == 4);
  ring::Phases ph;
  CHECK(ph.take(2) == 0);
  CHECK(ph.take(2) == 1);
  CHECK(ph.take(1) == 0);
  CHECK(ph.take(2) == 0);
}
