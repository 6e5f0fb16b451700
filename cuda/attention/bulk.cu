// attn_bulk_kernel: the slim shape's q4h chunks at head_dim 256 (144-byte rows) with the chunk's rows in shared memory,
// brought in by bulk copies (cp.async.bulk) instead of each thread's loads. The device cache keeps a q4h chunk's rows
// of one KV head as one contiguous stretch (kv_row_offset, blocks of 512 positions), so one thread asks for a whole
// half-chunk (256 rows, 36,864 bytes) with one instruction, and the copy engine streams it while the block's threads
// compute: the bytes in flight a multiprocessor no longer depend on how many loads each thread keeps going, and every
// byte of a row is fetched once (the 16-byte group loads of slim read a 32-byte sector's halves at different times).
// The operations and their order are attn_slim_kernel's (attend(), contract.cuh); what changes is where the rows are.
// attn_bulk_lc_key_kernel (Tuning's attn_q4h_form 19, the default), in order:
//   0. attn_q4h_records_kernel, launched ahead of it, makes the query's records once a row and head (rotated, then
//      q4h_record<true>: its planes' words in pairs);
//   1. thread 0 starts the copies of K's rows [0, 256) and [256, len) of the chunk (two mbarriers); the block copies
//      its heads' records meanwhile (step 1b; the other forms load and rotate the query themselves, load_q);
//   2. scores: warp w takes keys 32w … 32w + 31 of each half on the tensor cores (q4h_mma_scores, its paired order:
//      one code word a lane, a lane's four words of A one 16-byte load; the same integers and the same chains); the
//      first half as soon as its copy has landed; after each half (a barrier: no thread reads it any more) thread 0
//      starts the copy of the V rows of the same keys into the same bytes;
//   3. the chunk's maximum and weights (chunk_weights) while V's copies land, a key a thread (chunk_weights' ByKey):
//      each thread reads a key's row of e_s whole, makes its heads' weights against the chunk's maxima held in
//      registers, each exponential as exp_c_flat (exp_c's bits with no branch), and writes the row back whole with 0
//      past the block's heads; the keys past len, to the end of the last block of 32, get rows of 0 (chunk_weights'
//      Zero);
//   3c. the block has a ninth warp (288 threads), which takes no key in the scores and no group in the values: lc's
//      chain (store_ml: threads T − 1 − h) runs in it while the 8 warps go on to the values with no barrier between,
//      and no value warp waits for it;
//   4. values: q4h_values_block over the staged V rows, one group a warp (8 warps, 8 groups: one pass), V's codes read
//      in place (ldmatrix on the staged rows themselves, no copy into the warp's scratch) with q4h_int_values' Lean
//      tiles and bytes; each weight max(e, 0) as the loop takes it (q4h_w's Ready::Zeroed: the zeros are there).
// Steps 1b, 2 and 4 so are Lean, which changes instructions, not results. The other forms:
//   20 attn_bulk_max_key_kernel: form 19 with step 3's pass writing max(e, 0) (weights_by_key's Max) and any NaN
//      weight of a head to a word of its own, which lc's chain adds last (Σ e to the bit without one, NaN with one):
//      the value loops take e' as it is (q4h_w's Ready::Made), 8 instructions fewer for 32 keys of a group;
//   18 attn_bulk_lc_rec_kernel: form 19 with step 3's pass an entry a thread (each exponential exp_c, the maxima read
//      from shared memory); the same weights and zeros;
//   17 attn_bulk_rec_kernel: 18 in 256 threads, and step 3b instead of 3c: after a barrier (lc summed), each weight
//      made as the value loop takes it, max(e, 0) for a key below len and a head below ng, else 0, up to the end of
//      the chunk's last block of 32 keys (q4h_w's Ready::Made), then a barrier: the value loops skip that max and
//      those tests, with the same W;
//   11 attn_bulk_ready_kernel: form 17 without Lean and with load_q (each block loads and rotates the query itself);
//   8 attn_bulk_kernel<NG, false>: load_q, thread t takes key t of each half in the scores (q4h_int_scores, one key a
//      thread), the weights made in the value loop.
// 288 threads (256 without step 3c) and 101 KB of shared memory a block (the rows 73,728 bytes, q, the weights, the
// value scratch): two blocks a multiprocessor. Built for sm_90 and later (attn_bulk_built).
#include <cstddef>
#include <cstdint>

#include "cuda/attention/contract.cuh"
#include "cuda/attention/launch.h"
#include "cuda/attention/q4h_mma_scores.cuh"
#include "cuda/attention/q4h_values.cuh"
#include "cuda/attention/staged.cuh"
#include "cuda/check.h"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace hkv::cuda {
namespace {
using namespace attn;

constexpr int kBulkT = 256, kBulkB = 2;                        // threads a block, blocks a multiprocessor
constexpr int kBulkRow = Fmt<KvKind::Q4H>::row_bytes(kSlimD);  // 144
constexpr int kHalf = kChunk / 2;                              // rows a copy: one key a thread
static_assert(kHalf == kBulkT, "a half-chunk's keys, one a thread");

constexpr int kBulkLcT = kBulkT + 32;  // threads a block with step 3c: the ninth warp sums lc

// The dynamic shared memory of a block of T threads: the rows, q [NG][D], e_s [key][ES], a Q4hScratch a warp
// (q4h_values.cuh).
template <int NG, int T = kBulkT>
__host__ __device__ constexpr size_t bulk_smem() {
  return staged_smem<NG, T>(kBulkRow);
}

// One chunk block of the kernels below, T threads (the file's head comment; Ready::Made: step 3b; Ready::Zeroed:
// step 3c). Lean: steps 1b, 2 and 4 as the head comment says (the records' planes in pairs, which only
// attn_q4h_records_kernel makes); else load_q and the first orders.
// ByKey: step 3 a key a thread, and with Ready::Made its max taken there (form 20) instead of in step 3b.
template <int NG, bool TC, Ready R, int T = kBulkT, bool Lean = false, bool ByKey = false>
__device__ __forceinline__ void bulk_chunk(const AttnArgs& a, int qblocks, int hpb, int maxch, float scale) {
  constexpr int D = kSlimD, RB = kBulkRow, ES = staged_es<NG>();
  constexpr bool Max = ByKey && R == Ready::Made;  // form 20
  static_assert(T == kBulkT || (TC && T == kBulkLcT), "one key a thread needs 256 threads; a ninth warp sums lc");
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* const rows_s = smem;                                               // [kChunk][RB]: K's rows, then V's
  float* const q_s = reinterpret_cast<float*>(smem + size_t(kChunk) * RB);    // [NG][D]: the query's records
  float* const e_s = q_s + NG * D;                                            // [key][ES]: scores, then weights
  Q4hScratch* const vq_s = reinterpret_cast<Q4hScratch*>(e_s + kChunk * ES);  // a warp's value scratch
  __shared__ float red_s[T / 32][NG];
  __shared__ float mc_s[NG];
  __shared__ float nan_s[NG];                 // form 20: a NaN weight of each head's, else 0
  __shared__ __align__(8) uint64_t bar_s[4];  // K half 0, K half 1, V half 0, V half 1
  const int tid = threadIdx.x;
  const int64_t row = blockIdx.z;
  const int c = blockIdx.y, c0 = c * kChunk;
  const int qpk = a.H / a.KV, kvh = blockIdx.x / qblocks, qb = blockIdx.x % qblocks;
  const int h0 = kvh * qpk + qb * hpb, ng = min(min(hpb, NG), qpk - qb * hpb);
  // the chunk's rows of KV head kvh: one contiguous stretch (q4h's blocks of kChunk positions)
  const uint8_t* kbase = a.k_rows[row] + kv_row_offset(c0, kvh, a.KV, RB, kv_block(KvKind::Q4H));
  const uint8_t* vbase = a.v_rows[row] + kv_row_offset(c0, kvh, a.KV, RB, kv_block(KvKind::Q4H));
  if (tid == 0) {
    for (int i = 0; i < 4; i++) mbar_init(&bar_s[i], 1);
    mbar_init_fence();
  }
  __syncthreads();  // the mbarriers initialized before any thread uses them
  pdl_wait();       // nothing is read before the kernel ahead has completed (launch_k)
  const int n = a.n_keys[row];
  if (c0 >= n) return;
  const int len = min(kChunk, n - c0);
  const int len0 = min(len, kHalf), len1 = len - len0;
  auto rows = [&](int hf) { return hf ? len1 : len0; };  // keys of each half
  if (tid == 0) {                                        // 1. K's rows (a half with no keys: no copy, never waited for)
    for (int hf = 0; hf < 2; hf++)
      if (rows(hf) > 0) {
        mbar_arrive_expect(&bar_s[hf], uint32_t(rows(hf) * RB));
        bulk_copy(rows_s + size_t(hf) * kHalf * RB, kbase + size_t(hf) * kHalf * RB, uint32_t(rows(hf) * RB),
                  &bar_s[hf]);
      }
  }
  if constexpr (Lean) {  // 1b. the records attn_q4h_records_kernel made, copied (heads past ng: zeros, their records)
    static_assert(TC, "the paired records are read on the tensor cores");
    const uint4* src = reinterpret_cast<const uint4*>(q4h_records(a) + (row * a.H + h0) * int64_t(D));
    uint4* dst = reinterpret_cast<uint4*>(q_s);
    for (int i = tid; i < NG * D / 4; i += T) dst[i] = i < ng * D / 4 ? src[i] : make_uint4(0, 0, 0, 0);
    __syncthreads();
  } else {
    load_q<KvKind::Q4H, NG, T>(a, row, h0, ng, q_s);
  }

  // 2. scores: key hf·kHalf + tid of each half, one chain per (key, head)
  float mloc[NG];
#pragma unroll
  for (int h = 0; h < NG; h++) mloc[h] = -INFINITY;
  for (int hf = 0; hf < 2 && rows(hf) > 0; hf++) {
    mbar_wait(&bar_s[hf], 0);
    if constexpr (TC) {
      const int k0 = hf * kHalf + 32 * (tid >> 5), valid = rows(hf) - 32 * (tid >> 5);
      if (valid > 0) q4h_mma_scores<NG, ES, Lean>(rows_s + size_t(k0) * RB, RB, D, valid, q_s, scale, e_s, k0, mloc);
    } else if (tid < rows(hf)) {
      const int j = hf * kHalf + tid;
      const uint8_t* const kr[1] = {rows_s + size_t(j) * RB};
      float sc[1][NG];
      q4h_int_scores<NG, 1, true, false>(kr, q_s, D, true, scale, sc);
#pragma unroll
      for (int h = 0; h < NG; h++) {
        e_s[j * ES + h] = sc[0][h];
        mloc[h] = max_step(mloc[h], sc[0][h]);
      }
    }
    __syncthreads();  // no thread reads this half's K rows any more
    if (tid == 0) {   // V's rows of the same keys into the same bytes
      async_proxy_fence();
      mbar_arrive_expect(&bar_s[2 + hf], uint32_t(rows(hf) * RB));
      bulk_copy(rows_s + size_t(hf) * kHalf * RB, vbase + size_t(hf) * kHalf * RB, uint32_t(rows(hf) * RB),
                &bar_s[2 + hf]);
    }
  }
  // 3. the weights
  chunk_weights<NG, T, ES, R == Ready::Zeroed || Max, ByKey, Max>(mloc, e_s, len, red_s, mc_s, ng, nan_s);
  float* part = a.part + ((row * a.H + h0) * int64_t(maxch) + c) * (D + 2);
  const int64_t head_stride = int64_t(maxch) * (D + 2);
  store_ml<NG, T, ES>(part, head_stride, e_s, mc_s, len, ng, Max ? nan_s : nullptr);
  if constexpr (R == Ready::Made && !ByKey) {  // 3b. each weight as the value loop takes it, once for the 8 groups
    __syncthreads();                           // store_ml has summed lc from e_s
    weights_to_block<T, ES>(e_s, len, ng, [](float e, int) { return fmaxf(e, 0.0f); });
    __syncthreads();
  }
  // 4. the values, once V's rows have landed
  for (int hf = 0; hf < 2 && rows(hf) > 0; hf++) mbar_wait(&bar_s[2 + hf], 0);
  q4h_values_block<NG, ES, T, R, Lean>(rows_s, RB, true, rows_s + Fmt<KvKind::Q4H>::scale_off(D, 0), RB, 2, 0, D / 32,
                                       len, e_s, ng, part, head_stride, vq_s);
}

template <int NG, bool TC>
__global__ void __launch_bounds__(kBulkT, kBulkB)
    attn_bulk_kernel(AttnArgs a, int qblocks, int hpb, int maxch, float scale) {
  bulk_chunk<NG, TC, Ready::None>(a, qblocks, hpb, maxch, scale);
}
// Form 10 with each key's weight made ready once a chunk (step 3b).
template <int NG>
__global__ void __launch_bounds__(kBulkT, kBulkB)
    attn_bulk_ready_kernel(AttnArgs a, int qblocks, int hpb, int maxch, float scale) {
  bulk_chunk<NG, true, Ready::Made>(a, qblocks, hpb, maxch, scale);
}
// Form 11, Lean, with the query's records made once a row and head (attn_q4h_records_kernel) and copied (step 1b).
template <int NG>
__global__ void __launch_bounds__(kBulkT, kBulkB)
    attn_bulk_rec_kernel(AttnArgs a, int qblocks, int hpb, int maxch, float scale) {
  bulk_chunk<NG, true, Ready::Made, kBulkT, true>(a, qblocks, hpb, maxch, scale);
}
// Form 17 with step 3c instead of 3b: the weights' zeros made with the weights, lc summed by a ninth warp.
template <int NG>
__global__ void __launch_bounds__(kBulkLcT, kBulkB)
    attn_bulk_lc_rec_kernel(AttnArgs a, int qblocks, int hpb, int maxch, float scale) {
  bulk_chunk<NG, true, Ready::Zeroed, kBulkLcT, true>(a, qblocks, hpb, maxch, scale);
}
// Form 18 with step 3 a key a thread: form 19, the default.
template <int NG>
__global__ void __launch_bounds__(kBulkLcT, kBulkB)
    attn_bulk_lc_key_kernel(AttnArgs a, int qblocks, int hpb, int maxch, float scale) {
  bulk_chunk<NG, true, Ready::Zeroed, kBulkLcT, true, true>(a, qblocks, hpb, maxch, scale);
}
// Form 19 with the weights' max taken in step 3: form 20.
template <int NG>
__global__ void __launch_bounds__(kBulkLcT, kBulkB)
    attn_bulk_max_key_kernel(AttnArgs a, int qblocks, int hpb, int maxch, float scale) {
  bulk_chunk<NG, true, Ready::Made, kBulkLcT, true, true>(a, qblocks, hpb, maxch, scale);
}
// The query's records of every row, head and group, once (load_q's for the TC forms: rotated, then q4h_record<true>),
// into q4h_records(a): a warp a (head, group), 8 a block; grid (⌈H·D/32 / 8⌉, N). Words 18–31 of each record are
// written 0, so that the chunk kernels copy whole records and no byte they copy is unwritten.
__global__ void __launch_bounds__(256) attn_q4h_records_kernel(AttnArgs a) {
  pdl_wait();
  const int lane = threadIdx.x & 31, G = a.D / 32;
  const int idx = blockIdx.x * 8 + (threadIdx.x >> 5);
  if (idx >= a.H * G) return;
  const int64_t row = blockIdx.y;
  const int h = idx / G, g = idx % G;
  uint32_t* rec = reinterpret_cast<uint32_t*>(q4h_records(a) + (row * a.H + h) * int64_t(a.D) + 32 * g);
  const float v = a.q[row * a.ldq + int64_t(h) * a.D + 32 * g + lane];
  q4h_record<true>(warp_wht32(v, lane), lane, rec);
  if (lane >= 18) rec[lane] = 0u;
}

}  // namespace

// The machine code the card runs for the kernel is for sm_90 or later (cudaFuncGetAttributes: no stream work, so it may
// be asked while a stream is being captured).
bool attn_bulk_built() {
  static const bool built = [] {
    cudaFuncAttributes fa{};
    HKV_CUDA_CHECK(cudaFuncGetAttributes(&fa, attn_bulk_kernel<6, false>));
    return fa.binaryVersion >= 90;
  }();
  return built;
}

namespace attn {

// Sets `kernel`'s dynamic shared memory once (a static per NG and Form), launches it over the chunk grid, T threads a
// block, and records the form taken.
template <int NG, int Form, int T = kBulkT, class Kernel>
void launch_bulk_form(Kernel kernel, const ChunkGrid& cg, AttnLaunch& rec) {
  constexpr size_t smem = bulk_smem<NG, T>();
  static bool attr_set = false;
  if (!attr_set) HKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  attr_set = true;
  launch_k(cg.pdl, kernel, cg.grid, dim3(T), smem, cg.st, cg.a, cg.qblocks, cg.hpb, cg.maxch, cg.scale);
  rec.slim_kernel = true;
  rec.slim_scores = false;
  rec.q4h_form = Form;
}

template <int NG>
void launch_bulk_kernel(const ChunkGrid& cg, AttnLaunch& rec) {
  launch_bulk_form<NG, 8>(attn_bulk_kernel<NG, false>, cg, rec);
}

template <int NG>
void launch_bulk_ready_kernel(const ChunkGrid& cg, AttnLaunch& rec) {
  launch_bulk_form<NG, 11>(attn_bulk_ready_kernel<NG>, cg, rec);
}

// attn_q4h_records_kernel over the grid's rows, ahead of the forms that copy the records (17, 18).
static void launch_q4h_records(const ChunkGrid& cg) {
  const AttnArgs& a = cg.a;
  const unsigned groups = unsigned(a.H * (a.D / 32));
  launch_k(cg.pdl, attn_q4h_records_kernel, dim3((groups + 7) / 8, unsigned(a.N)), dim3(256), 0, cg.st, a);
}

template <int NG>
void launch_bulk_rec_kernel(const ChunkGrid& cg, AttnLaunch& rec) {
  launch_q4h_records(cg);
  launch_bulk_form<NG, 17>(attn_bulk_rec_kernel<NG>, cg, rec);
}

template <int NG>
void launch_bulk_lc_rec_kernel(const ChunkGrid& cg, AttnLaunch& rec) {
  launch_q4h_records(cg);
  launch_bulk_form<NG, 18, kBulkLcT>(attn_bulk_lc_rec_kernel<NG>, cg, rec);
}

template <int NG>
void launch_bulk_lc_key_kernel(const ChunkGrid& cg, AttnLaunch& rec) {
  launch_q4h_records(cg);
  launch_bulk_form<NG, 19, kBulkLcT>(attn_bulk_lc_key_kernel<NG>, cg, rec);
}

template <int NG>
void launch_bulk_max_key_kernel(const ChunkGrid& cg, AttnLaunch& rec) {
  launch_q4h_records(cg);
  launch_bulk_form<NG, 20, kBulkLcT>(attn_bulk_max_key_kernel<NG>, cg, rec);
}

template void launch_bulk_kernel<1>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_kernel<2>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_kernel<4>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_kernel<6>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_kernel<8>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_ready_kernel<1>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_ready_kernel<2>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_ready_kernel<4>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_ready_kernel<6>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_ready_kernel<8>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_rec_kernel<1>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_lc_rec_kernel<1>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_lc_key_kernel<1>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_max_key_kernel<1>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_rec_kernel<2>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_lc_rec_kernel<2>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_lc_key_kernel<2>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_max_key_kernel<2>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_rec_kernel<4>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_lc_rec_kernel<4>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_lc_key_kernel<4>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_max_key_kernel<4>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_rec_kernel<6>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_lc_rec_kernel<6>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_lc_key_kernel<6>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_max_key_kernel<6>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_rec_kernel<8>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_lc_rec_kernel<8>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_lc_key_kernel<8>(const ChunkGrid&, AttnLaunch&);
template void launch_bulk_max_key_kernel<8>(const ChunkGrid&, AttnLaunch&);

}  // namespace attn
}  // namespace hkv::cuda
