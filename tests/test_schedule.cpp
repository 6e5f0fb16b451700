// The persistent decode kernel's work list and its host model (cuda/schedule.h): the 27B token's list is in dependency
// order and carries the token's bytes, and it finishes for any number of blocks; a list that waits on a later op is
// refused. Host code: no GPU needed. Built where the CUDA engine is.
#include <doctest/doctest.h>

#if HKV_HAVE_CUDA
#include <algorithm>
#include <string>
#include <vector>

#include "cuda/kernels.h"
#include "cuda/schedule.h"
#include "reference/synthetic.h"

namespace sc = hkv::cuda::sched;

namespace {
hkv::Config cfg27b() { return hkv::builtin_spec("27b-mlx4").config; }
}  // namespace

TEST_CASE("schedule: the 27B token's list is in dependency order, with the token's ops and bytes") {
  const hkv::Config c = cfg27b();
  sc::Shape sh;
  sh.depth = 1024;
  const sc::Schedule s = sc::decode_schedule(c, sh);
  CHECK(s.check() == "");
  // per layer: attention q|k|v, prep, chunks, merge, o; DeltaNet in_proj, heads, out_proj; both: gate|up, down
  CHECK(s.ops.size() == size_t(16 * 7 + 48 * 5 + 2));
  // its bytes: every weight of the 27B once at 4.5 bits, the cache to the depth, the DeltaNet states read and written
  const double E = 5120, I = 17408, V = 248320, wb = 4.5 / 8;
  const double attn = (24 * 256 * 2 + 2 * 4 * 256) * E + E * 24 * 256;
  const double lin = (c.conv_dim() + 48.0 * 128 + 2 * 48) * E + E * 48 * 128;
  const double mlp = 3 * I * E;
  const double weights = (16 * attn + 48 * lin + 64 * mlp + V * E) * wb;
  const double cache = 16 * 2.0 * 1024 * 4 * 144;
  const double states = 48 * 48 * 2.0 * 128 * 128 * 4;
  CHECK(s.bytes() == doctest::Approx(weights + cache + states).epsilon(1e-9));
  // the items: lm_head's 248,320 rows in tiles of 64; attention at 1K: 4 KV heads × 2 chunks a layer
  CHECK(s.ops[s.ops.size() - 2].items == 3880);
  int chunks = 0;
  for (const sc::Op& o : s.ops)
    if (o.kind == sc::OpKind::AttnChunk) chunks += o.items;
  CHECK(chunks == 16 * 8);
}

TEST_CASE("schedule: the list finishes for any number of blocks, no faster than the floor") {
  const sc::Schedule s = sc::decode_schedule(cfg27b(), sc::Shape{});
  for (int blocks : {1, 2, 7, 132, 264}) {
    sc::SimConfig sim;
    sim.blocks = blocks;
    const sc::SimResult r = sc::simulate(s, sim);
    CAPTURE(blocks);
    CHECK(r.error == "");
    CHECK(r.finished);
    CHECK(r.items_run == s.items());
    CHECK(r.seconds >= r.floor_seconds * (1 - sim.jitter));
  }
}

TEST_CASE("schedule: streaming the weights while waiting is never slower; fixed costs add time") {
  const sc::Schedule s = sc::decode_schedule(cfg27b(), sc::Shape{});
  sc::SimConfig on, off;
  off.prefetch = false;
  const sc::SimResult a = sc::simulate(s, on), b = sc::simulate(s, off);
  CHECK(a.seconds < b.seconds);
  sc::SimConfig slow = on;
  slow.item_overhead_s = 3e-6;
  CHECK(sc::simulate(s, slow).seconds > a.seconds);
}

TEST_CASE("schedule: a list that waits on a later op, or on more items than an op has, is refused") {
  sc::Schedule s = sc::decode_schedule(cfg27b(), sc::Shape{});
  sc::Schedule later = s;
  later.ops[3].deps.push_back({7, 1});
  CHECK(later.check().find("not before it in the list") != std::string::npos);
  const sc::SimResult r = sc::simulate(later, sc::SimConfig{});
  CHECK_FALSE(r.finished);
  CHECK(r.error.find("cannot finish") != std::string::npos);
  sc::Schedule more = s;
  more.ops[2].deps = {{1, s.ops[1].items + 1}};
  CHECK(more.check().find("which has") != std::string::npos);
}

// The chain's Slices form (matvec_chain_slices_kernel): slice m of a step's x waits for the row groups of the step
// ahead that chain_slice_of maps to m; chain_slice_needs counts them. Each slice is one run of consecutive groups, the
// runs in slice order and within one group of each other's length, and the counts add up to the step's groups, so that
// every stored group is waited for once and a slice's wait ends when its groups are stored.
TEST_CASE("chain slices: each slice of the next step's x is one run of the step's row groups, counted once") {
  // the 27B chain's widths (5,120, 6,144, 17,408 columns: 5, 6, 17 slices) after steps of their row groups (2 rows
  // a group: 2,560 to 124,160), and small and odd cases
  const int64_t groups[] = {1, 2, 5, 17, 31, 100, 2560, 3072, 8704, 17408, 124160};
  for (const int64_t G : groups)
    for (const int S : {1, 2, 5, 6, 17, 32}) {
      CAPTURE(G);
      CAPTURE(S);
      const std::vector<unsigned> need = hkv::cuda::chain_slice_needs(G, S);
      REQUIRE(need.size() == size_t(S));
      int64_t sum = 0;
      for (unsigned n : need) sum += n;
      CHECK(sum == G);
      int prev = 0;
      std::vector<int64_t> first(size_t(S), -1), last(size_t(S), -1);
      for (int64_t g = 0; g < G; g++) {
        const int m = hkv::cuda::chain_slice_of(g, G, S);
        REQUIRE(m >= 0);
        REQUIRE(m < S);
        CHECK(m >= prev);  // in slice order
        prev = m;
        if (first[size_t(m)] < 0) first[size_t(m)] = g;
        last[size_t(m)] = g;
      }
      unsigned lo = ~0u, hi = 0;
      for (int m = 0; m < S; m++) {
        if (need[size_t(m)] == 0) continue;                                         // (fewer groups than slices)
        CHECK(last[size_t(m)] - first[size_t(m)] + 1 == int64_t(need[size_t(m)]));  // one run
        lo = std::min(lo, need[size_t(m)]), hi = std::max(hi, need[size_t(m)]);
      }
      CHECK(hi - lo <= 1);
      if (G >= S) CHECK(lo >= 1);  // every slice waits for a group when there are enough
    }
}
#endif
