// What policy.cu and the kernels' files of cuda/attention/ share (policy.cu's head comment maps the folder): the
// fixed sizes both sides need, the chunk launch as the policy shapes it, and one launch function a kernel, each
// defined and explicitly instantiated in its kernel's file for the formats and head counts that policy.cu dispatches
// to (chunk.cu: bf16, fp8, q4h; slim.cu: fp8, q4h; NG 1, 2, 4, 6, 8).
#pragma once

#include <cuda_runtime.h>

#include "cuda/kernels.h"

namespace hkv::cuda::attn {

constexpr int kChunk = 512;  // keys a chunk: a fixed size, never a fixed count (ARITHMETIC.md §6)
static_assert(kKvBlock % kChunk == 0, "a chunk's rows of one KV head lie in one block of the device cache");
constexpr int kMaxG = 8;                   // query heads a chunk block, at most
constexpr int kMaxD = 256;                 // head_dim, at most
constexpr int kSlimT = 128, kSlimD = 256;  // slim.cu: threads a block; the head_dim it is written for
constexpr int kSlimB = 4;                  // slim.cu: blocks a multiprocessor (__launch_bounds__)

// One attention() call's chunk launch, as policy.cu shapes it.
struct ChunkGrid {
  AttnArgs a;       // the call's arguments as attention() completes them (vu, pre, fast_scores, trigger; dsplit 1)
  dim3 grid;        // (KV heads × qblocks, chunks, rows)
  int qblocks = 0;  // head blocks a KV head
  int hpb = 0;      // query heads a head block
  int maxch = 0;    // chunks of the longest row
  float scale = 0;  // fp32(1/sqrt(head_dim)), as attend()
  cudaStream_t st = nullptr;
  bool pdl = true;           // launch_k's pdl (tu.pdl_all)
  int q4h_form = 0;          // tu.attn_q4h_form: the slim shape's q4h form (slim.cu's VLATE or bulk.cu's)
  bool bf16_halves = false;  // tu.attn_bf16_halves: bf16's staged shapes stage half a chunk at a time (chunk.cu)
};

// chunk.cu: attn_chunk_kernel<F, NG, …> in the form `shape` takes (any shape but Auto and Slim), with a.dsplit where
// the shape takes it (attn_dsplit, recorded in rec.dsplit).
template <KvKind F, int NG>
void launch_chunk_kernel(const ChunkGrid& cg, AttnShape shape, AttnLaunch& rec);
// slim.cu: attn_slim_kernel<F, NG, …> for F fp8 or q4h at head_dim kSlimD, rows a multiple of 16 bytes (the caller
// checks); records its form in rec.
template <KvKind F, int NG>
void launch_slim_kernel(const ChunkGrid& cg, AttnLaunch& rec);
// bulk.cu (q4h at head_dim kSlimD, the slim shape's forms; Tuning's attn_q4h_form): attn_q4h_records_kernel, then
// attn_bulk_lc_key_kernel<NG> (19, the default: the query's records made once a row and head, Lean, the weights a key
// a thread, lc summed by a ninth warp), attn_bulk_max_key_kernel<NG> (20: 19 with the weights' max taken once a key),
// attn_bulk_lc_rec_kernel<NG> (18: 19 with its weights an entry a thread) or
// attn_bulk_rec_kernel<NG> (17: 256 threads, the weights made ready after lc);
// attn_bulk_ready_kernel<NG> (11); attn_bulk_kernel<NG, false> (8: one key a thread in the scores).
template <int NG>
void launch_bulk_lc_rec_kernel(const ChunkGrid& cg, AttnLaunch& rec);
template <int NG>
void launch_bulk_lc_key_kernel(const ChunkGrid& cg, AttnLaunch& rec);
template <int NG>
void launch_bulk_max_key_kernel(const ChunkGrid& cg, AttnLaunch& rec);
template <int NG>
void launch_bulk_rec_kernel(const ChunkGrid& cg, AttnLaunch& rec);
template <int NG>
void launch_bulk_ready_kernel(const ChunkGrid& cg, AttnLaunch& rec);
template <int NG>
void launch_bulk_kernel(const ChunkGrid& cg, AttnLaunch& rec);
// merge.cu, after the chunk kernel: attn_merge_kernel over (rows, H), head_dim threads (fast: tu.merge_fast), or with
// wide (tu.merge_wide) attn_merge_wide_kernel over (rows, H, head_dim/32), 256 threads. Returns whether the wide kernel
// ran.
bool launch_merge_kernel(const AttnArgs& a, int maxch, cudaStream_t st, bool pdl, bool fast, bool wide);

}  // namespace hkv::cuda::attn
