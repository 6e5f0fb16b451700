// attn_ring_kernel: q4h's slim shape at head_dim 256 as a persistent grid whose copies run from one chunk into the
// next. It computes what attn_bulk_kernel computes, chunk for chunk (the same functions of contract.cuh and
// q4h_values.cuh, in the same order), so every byte of every chunk's (mc, lc, oc) is the same; what changes is when
// the rows arrive. attn_bulk_kernel's block takes one chunk and exits, so its multiprocessor's copy engine idles while
// the block computes the chunk's values and until the next block has started and asked for its K rows.
// Here each block stays and takes the chunks (work items: KV head and head block, chunk, row) i, i + grid, i + 2·grid,
// … of the launch's grid in order, skipping those past their row's keys. Its shared rows are four stages of a quarter
// chunk (128 rows, 18,432 bytes), stage q holding the quarter q of the current chunk: K's rows, then V's.
// An item, in order:
//   1. the query's records (load_q) while its K quarters land (asked for by the item before, or at the start);
//   2. scores: thread t takes key t of each half (quarters 0–1, then 2–3) once those two quarters have landed; after
//      each half (a barrier) thread 0 asks for V's rows of the same keys into the same stages;
//   3. the chunk's maximum, weights and lc (chunk_weights, store_ml);
//   4. values (q4h_int_values, warp w group w) once V's quarters have landed. As each warp finishes reading a
//      quarter's rows it counts itself on that stage; the eighth warp there asks for the next item's K rows of the
//      same quarter into it, so the next chunk's K streams in while this chunk's values are computed.
// A stage's copies complete on its mbarrier; every thread waits on each of them, in order, and keeps each stage's
// phase parity (ring_wait: a wait that never ends traps). Which chunks a block takes, which quarters hold rows, the
// parities and the passes are ring_plan.h's, which the CPU tests walk (tests/test_ring_plan.cpp). 256 threads and 101
// KB of shared memory a block, two blocks a multiprocessor (as attn_bulk_kernel). Built for sm_90 and later
// (attn_bulk_built); Tuning's attn_q4h_form 9 picks it.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cuda/attention/contract.cuh"
#include "cuda/attention/launch.h"
#include "cuda/attention/q4h_values.cuh"
#include "cuda/attention/ring_plan.h"
#include "cuda/attention/staged.cuh"
#include "cuda/check.h"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace hkv::cuda {
namespace {
using namespace attn;
using ring::Item;
using ring::kQuarter;
using ring::quarter_rows;

constexpr int kRingT = 256, kRingB = 2;                        // threads a block, blocks a multiprocessor
constexpr int kRingRow = Fmt<KvKind::Q4H>::row_bytes(kSlimD);  // 144
constexpr int kWarpsR = kRingT / 32;
static_assert(kChunk / 2 == kRingT, "a half-chunk's keys, one a thread");
static_assert(ring::kChunkKeys == kChunk && ring::kStages == 4, "ring_plan.h's chunk, four stages of a quarter");
static_assert(kSlimD / 32 == kWarpsR, "one group of the values a warp, so each warp passes every quarter once");

// The item's K (v: V) rows of KV head kvh: one contiguous stretch (q4h's blocks of kChunk positions).
__device__ __forceinline__ const uint8_t* item_rows(const AttnArgs& a, const Item& it, int kvh, bool v) {
  return (v ? a.v_rows : a.k_rows)[it.row] +
         kv_row_offset(int64_t(it.c) * kChunk, kvh, a.KV, kRingRow, kv_block(KvKind::Q4H));
}
// mbar_wait with a bound: a copy that has not landed after about 2^24 tries (seconds) traps, so that a schedule that
// waits for a copy never asked for ends the launch with an error instead of hanging it.
__device__ __forceinline__ void ring_wait(uint64_t* bar, uint32_t parity) {
  for (uint32_t tries = 0; !mbar_try_wait(bar, parity); tries++)
    if (tries > (1u << 24)) __trap();
}
// Thread 0 or a releasing lane: quarter q of the rows at src into stage q, completing on bar.
__device__ __forceinline__ void ask_quarter(uint8_t* stages, const uint8_t* src, int rows, int q, uint64_t* bar) {
  mbar_arrive_expect(bar, uint32_t(rows * kRingRow));
  bulk_copy(stages + size_t(q) * kQuarter * kRingRow, src + size_t(q) * kQuarter * kRingRow, uint32_t(rows * kRingRow),
            bar);
}

// The value loop's hook (q4h_values.cuh's Pass): a warp that has passed quarter q counts itself on rel[q]; the last of
// the block's warps there asks for the next item's K rows of that quarter (none where it has none).
struct Release {
  unsigned* rel;
  uint8_t* stages;
  uint64_t* full;
  const uint8_t* next_k;  // the next item's K rows (null: no next item)
  int next_len;
  int passed = 0;  // quarters this warp has counted itself on (q4h_int_values keeps its copy of the hook)
  __device__ __forceinline__ void count(int q) const {
    __syncwarp();  // every lane's reads of the quarter are done
    if ((threadIdx.x & 31) == 0) {
      __threadfence_block();
      if (atomicAdd(&rel[q], 1u) == unsigned(kWarpsR - 1)) {
        rel[q] = 0;
        __threadfence_block();
        const int rows = next_k ? quarter_rows(next_len, q) : 0;
        if (rows > 0) {
          async_proxy_fence();  // the block's reads of the stage before the copy's writes
          ask_quarter(stages, next_k, rows, q, &full[q]);
        }
      }
    }
  }
  __device__ __forceinline__ void keys_done(int k) {
    for (const int now = ring::passed_below(passed, k); passed < now;) count(passed++);
  }
  __device__ __forceinline__ void all_done() {
    while (passed < ring::kStages) count(passed++);
  }
};

template <int NG>
__global__ void __launch_bounds__(kRingT, kRingB)
    attn_ring_kernel(AttnArgs a, int qblocks, int hpb, int maxch, float scale, int64_t items) {
  constexpr int T = kRingT, D = kSlimD, RB = kRingRow, ES = staged_es<NG>();
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* const stages = smem;                                               // [4][kQuarter][RB]
  float* const q_s = reinterpret_cast<float*>(smem + size_t(kChunk) * RB);    // [NG][D]: the query's records
  float* const e_s = q_s + NG * D;                                            // [key][ES]: scores, then weights
  Q4hScratch* const vq_s = reinterpret_cast<Q4hScratch*>(e_s + kChunk * ES);  // a warp's value scratch
  __shared__ float red_s[T / 32][NG];
  __shared__ float mc_s[NG];
  __shared__ __align__(8) uint64_t full[ring::kStages];  // stage q's copies
  __shared__ unsigned rel[ring::kStages];                // warps past stage q's rows in the current values
  const int tid = threadIdx.x, warp = tid >> 5;
  const int X = a.KV * qblocks, qpk = a.H / a.KV;
  const int64_t G = gridDim.x;
  if (tid == 0) {
    for (int q = 0; q < ring::kStages; q++) mbar_init(&full[q], 1), rel[q] = 0;
    mbar_init_fence();
  }
  __syncthreads();  // the mbarriers initialized before any thread uses them
  pdl_wait();       // nothing is read before the kernel ahead has completed (launch_k)
  // this block's next item with keys at or after i (items: none)
  auto next_from = [&](int64_t i, Item& it) { return ring::next_item(i, G, items, X, maxch, a.n_keys, it); };
  Item cur;
  int64_t i = next_from(blockIdx.x, cur);
  if (i >= items) return;
  if (tid == 0)  // the first item's K quarters
    for (int q = 0; q < ring::kStages; q++)
      if (quarter_rows(cur.len, q) > 0)
        ask_quarter(stages, item_rows(a, cur, cur.x / qblocks, false), quarter_rows(cur.len, q), q, &full[q]);
  ring::Phases ph;  // the parity each stage's next copy completes
  auto wait = [&](int q) { ring_wait(&full[q], ph.take(q)); };
  while (i < items) {
    Item nxt;
    const int64_t ni = next_from(i + G, nxt);
    const int kvh = cur.x / qblocks, qb = cur.x % qblocks, len = cur.len;
    const int h0 = kvh * qpk + qb * hpb, ng = min(min(hpb, NG), qpk - qb * hpb);
    const uint8_t* vbase = item_rows(a, cur, kvh, true);
    // 1. the query
    load_q<KvKind::Q4H, NG, T>(a, cur.row, h0, ng, q_s);
    // 2. scores: key hf·256 + tid of each half, one chain per (key, head)
    float mloc[NG];
#pragma unroll
    for (int h = 0; h < NG; h++) mloc[h] = -INFINITY;
    for (int hf = 0; hf < 2; hf++) {
      const int r0 = quarter_rows(len, 2 * hf), r1 = quarter_rows(len, 2 * hf + 1);
      if (r0 == 0) break;
      wait(2 * hf);
      if (r1 > 0) wait(2 * hf + 1);
      if (tid < r0 + r1) {
        const int j = hf * (2 * kQuarter) + tid;
        const uint8_t* const kr[1] = {stages + size_t(j) * RB};
        float sc[1][NG];
        q4h_int_scores<NG, 1, true, false>(kr, q_s, D, true, scale, sc);
#pragma unroll
        for (int h = 0; h < NG; h++) {
          e_s[j * ES + h] = sc[0][h];
          mloc[h] = max_step(mloc[h], sc[0][h]);
        }
      }
      __syncthreads();  // no thread reads this half's K rows any more
      if (tid == 0) {   // V's rows of the same keys into the same stages
        async_proxy_fence();
        ask_quarter(stages, vbase, r0, 2 * hf, &full[2 * hf]);
        if (r1 > 0) ask_quarter(stages, vbase, r1, 2 * hf + 1, &full[2 * hf + 1]);
      }
    }
    // 3. the weights
    chunk_weights<NG, T, ES>(mloc, e_s, len, red_s, mc_s);
    float* part = a.part + ((cur.row * a.H + h0) * int64_t(maxch) + cur.c) * (D + 2);
    const int64_t head_stride = int64_t(maxch) * (D + 2);
    store_ml<NG, T, ES>(part, head_stride, e_s, mc_s, len, ng);
    // 4. the values, once V's rows have landed; each warp frees the stages behind it for the next item's K
    for (int q = 0; q < ring::kStages && quarter_rows(len, q) > 0; q++) wait(q);
    const Release rel_hook{rel, stages, full, ni < items ? item_rows(a, nxt, nxt.x / qblocks, false) : nullptr,
                           nxt.len};
    q4h_int_values<NG, ES, Release>(stages, RB, true, stages + Fmt<KvKind::Q4H>::scale_off(D, 0) + size_t(warp) * 2, RB,
                                    warp, len, e_s, ng, part, head_stride, vq_s + warp, rel_hook);
    i = ni, cur = nxt;
  }
}

}  // namespace

namespace attn {

template <int NG>
void launch_ring_kernel(const ChunkGrid& cg, AttnLaunch& rec) {
  constexpr size_t smem = staged_smem<NG, kRingT>(kRingRow);  // the four stages are the chunk's rows
  static int per_sm = 0;
  if (per_sm == 0) {
    HKV_CUDA_CHECK(cudaFuncSetAttribute(attn_ring_kernel<NG>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    HKV_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, attn_ring_kernel<NG>, kRingT, smem));
    if (per_sm < 1) throw std::runtime_error("attention: the ring kernel does not fit a multiprocessor");
  }
  const int64_t items = int64_t(cg.grid.x) * cg.grid.y * cg.grid.z;
  const int64_t want = cg.ring_blocks > 0 ? cg.ring_blocks : int64_t(per_sm) * sm_count();
  const unsigned blocks = unsigned(std::max<int64_t>(1, std::min(items, want)));
  launch_k(cg.pdl, attn_ring_kernel<NG>, dim3(blocks), dim3(kRingT), smem, cg.st, cg.a, cg.qblocks, cg.hpb, cg.maxch,
           cg.scale, items);
  rec.slim_kernel = true;
  rec.slim_scores = false;
  rec.q4h_form = 9;
  rec.ring_blocks = int(blocks);
}

template void launch_ring_kernel<1>(const ChunkGrid&, AttnLaunch&);
template void launch_ring_kernel<2>(const ChunkGrid&, AttnLaunch&);
template void launch_ring_kernel<4>(const ChunkGrid&, AttnLaunch&);
template void launch_ring_kernel<6>(const ChunkGrid&, AttnLaunch&);
template void launch_ring_kernel<8>(const ChunkGrid&, AttnLaunch&);

}  // namespace attn
}  // namespace hkv::cuda
