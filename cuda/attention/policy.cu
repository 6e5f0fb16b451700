// The exact path's attention, split by what a reader looks for (cuda/attention/):
//   contract.cuh    the contract (attend(), docs/ARITHMETIC.md §6), and the device code both chunk kernels share: the
//                   format decoders, q4h's records and integer scores, the fp32 score chains of fp8 at head_dim 256,
//                   the chunk's maximum, weights and lc
//   q4h_values.cuh  q4h's weighted values in integers on the tensor cores
//   chunk.cu        attn_chunk_kernel: the staged shapes (kv-staged, kv-staged-h1, kv-staged-h2, v-staged-x2) and
//                   unstaged-x8
//   slim.cu         attn_slim_kernel: fp8 and q4h at head_dim 256, beyond one chunk block a multiprocessor
//   bulk.cu         attn_bulk_lc_key_kernel and its other forms: q4h's slim shape, its rows staged by bulk copies;
//                   with Tuning's attn_q4h_form 19 (the default) the query's records made once a row and head
//                   (attn_q4h_records_kernel), its scores on the tensor cores (q4h_mma_scores.cuh, whose fragment
//                   indices are mma_frag.h's, plain C++ checked by tests/test_mma_frag.cpp), its weights a key a
//                   thread, lc summed by a ninth warp, V's codes read in place; 18, 17, 11 and 8 the forms bulk.cu
//                   names
//   staged.cuh      bulk.cu's block layout
//   merge.cu        attn_merge_kernel: the chunks merged in order, the gate, the records of the output
//   launch.h        what this file and the kernels' files share: the fixed sizes, a launch function a kernel
//   policy.cu       this file: the shapes' names, Auto's choice of shape by depth and format, attention()
// attention() checks its arguments, picks the shape, sets the grid (KV heads × head blocks, chunks, rows) and launches
// the shape's chunk kernel, then the merge. The chunks' (mc, lc, oc) do not depend on each other, so each is its own
// block (split-K over chunks); only the merge is sequential, in a second kernel. A maximum does not depend on the
// order it is taken in (±0 ties only reach exp_c of a difference, where they give the same value).
// Measured (H200, docs/RESULTS.md §12): q4h attention at 262K, the 16 layers of a 27B token with the merge, 4,275 µs
// for 4.83 GB, 27% of copy bandwidth.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <stdexcept>
#include <string>

#include "cuda/attention/launch.h"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace hkv::cuda {
namespace {
using namespace attn;

AttnLaunch g_last_launch;  // what the last attention() launched (attn_last_launch)

constexpr const char* kShapeNames[] = {"auto",        "kv-staged",    "unstaged-x8", "kv-staged-h2",
                                       "v-staged-x2", "kv-staged-h1", "slim"};  // AttnShape's order

// The kernel of `shape` for format F and NG heads a block: slim's where it applies, else the chunk kernel's form.
template <KvKind F, int NG>
void launch_shape(const ChunkGrid& cg, AttnShape shape) {
  if (shape == AttnShape::Slim) {
    if constexpr (F != KvKind::BF16) {
      if (cg.a.D == kSlimD && cg.a.row_bytes % 16 == 0) {
        launch_slim_kernel<F, NG>(cg, g_last_launch);
        return;
      }
    }
    shape =
        AttnShape::VStagedX2;  // slim is written for fp8 and q4h at head_dim 256; the others take v-staged-x2's path
  }
  launch_chunk_kernel<F, NG>(cg, shape, g_last_launch);
}

// NG, the heads a block as a constant: the least of 1, 2, 4, 6 and 8 that holds hpb.
template <KvKind F>
void launch_chunks(const ChunkGrid& cg, AttnShape shape) {
  if (cg.hpb <= 1)
    launch_shape<F, 1>(cg, shape);
  else if (cg.hpb <= 2)
    launch_shape<F, 2>(cg, shape);
  else if (cg.hpb <= 4)
    launch_shape<F, 4>(cg, shape);
  else if (cg.hpb <= 6)
    launch_shape<F, 6>(cg, shape);
  else
    launch_shape<F, 8>(cg, shape);
}

}  // namespace

size_t attn_part_floats(int64_t N, int H, int D, int max_keys) {
  const int64_t maxch = (max_keys + kChunk - 1) / kChunk;
  return size_t(N * H * maxch * (D + 2) + N * H * D);  // the chunks' partials, then form 17's records (q4h_records)
}

const char* attn_shape_name(AttnShape s) { return kShapeNames[int(s)]; }

AttnShape parse_attn_shape(const std::string& name) {
  std::string all;
  for (int i = 0; i < int(std::size(kShapeNames)); i++) {
    if (name == kShapeNames[i]) return AttnShape(i);
    all += std::string(i ? ", " : "") + kShapeNames[i];
  }
  throw std::invalid_argument("attention shape '" + name + "': the shapes are " + all);
}

// Auto, by the number of chunk blocks with all of a KV head's query heads in a block (b = KV · chunks · rows) against
// the multiprocessors (P). q4h and fp8: KvStagedH1 while its blocks (b · qpk) fit one wave, KvStagedH2 while its blocks
// (b · ⌈qpk/2⌉) fit one wave, then KvStaged while b < P, VStagedX2 (V alone staged, two blocks a multiprocessor, two
// elements a thread in the values) at b = P, where one slim block of 4 warps a multiprocessor is slower, and Slim for
// b > P (from = 10, in tenths of P, HKV_ATTN_SLIM_FROM: 12, 15, 20 and 30 for measuring). bf16: KvStaged while b < 4P,
// then UnstagedX8. Each is the fastest shape, or within 1% of it (2% for bf16), at the depths it takes (hkv bench
// --attention-only and hkv bench, 27B shape, batch 1, depths 1K–262K). Measured again on the H200 on 2026-12-07:
// - q4h's slim shape runs bulk.cu's kernels, whose attention alone is faster than the kv-staged shapes' from 4K on, but
//   a token is not, below one wave (8K and 16K the same within 0.5%); at 32K (b = 1.94P) a token is 3.4–4.4% faster in
//   Slim than in VStagedX2;
// - bf16 in KvStagedH1 and KvStagedH2 while they fit a wave, as q4h and fp8: a token not faster at 1K, 1.3–2.6% slower
//   at 4K.
// slim (HKV_ATTN_SLIM): 0 VStagedX2 instead of Slim, 2 Slim for fp8 alone. docs/PERFORMANCE.md has the measurements.
// bf16_halves (HKV_ATTN_BF16_HALVES, bf16's rows staged half a chunk at a time): bf16 takes q4h's and fp8's spread of
// a chunk over more blocks below one wave (KvStagedH1, KvStagedH2), then its own rule; not yet measured there.
AttnShape auto_attn_shape(KvKind kind, int64_t b, int qpk, int64_t P, int slim, int from, bool bf16_halves) {
  if (kind == KvKind::BF16 && !bf16_halves) return b >= 4 * P ? AttnShape::UnstagedX8 : AttnShape::KvStaged;
  if (b * qpk <= P) return AttnShape::KvStagedH1;
  if (kind == KvKind::BF16 && b * ((qpk + 1) / 2) <= P) return AttnShape::KvStagedH2;
  if (kind == KvKind::BF16) return b >= 4 * P ? AttnShape::UnstagedX8 : AttnShape::KvStaged;
  if (b * ((qpk + 1) / 2) <= P) return AttnShape::KvStagedH2;
  if (b < P) return AttnShape::KvStaged;
  if (!(slim == 1 || (slim == 2 && kind == KvKind::FP8))) return AttnShape::VStagedX2;
  if (10 * b <= from * P) return AttnShape::VStagedX2;
  return AttnShape::Slim;
}

bool attn_slim_fp8_rolled(int64_t blocks, int64_t P) { return blocks > int64_t(kSlimB) * P; }

int attn_dsplit(int D, int64_t blocks, int64_t P) { return D % 64 == 0 && 2 * blocks <= P ? 2 : 1; }

void attention(const AttnArgs& a_in, cudaStream_t st, const Tuning& tu) {
  AttnArgs a = a_in;
  a.vu = tu.attn_value_unroll;
  a.pre = a_in.pre_ok;
  // the one place fast scores are decided: fp8 where slim_scores applies
  a.fast_scores = a.kind == KvKind::FP8 && a.D == kSlimD && a.row_bytes % 16 == 0;
  g_last_launch = AttnLaunch{};  // every field its default (a positional list sets fields by their order)
  g_last_launch.slim_scores = a.fast_scores;
  a.dsplit = 1;  // (launch_chunk_kernel sets it for the staged one-element kernels: with_dsplit)
  a.trigger = tu.out_trigger;
  if (a.N <= 0 || a.max_keys <= 0) return;
  if (a.D % 32 != 0 || a.D > kMaxD)
    throw std::runtime_error("attention: head_dim must be a multiple of 32, at most 256");
  if (a.H % a.KV != 0) throw std::runtime_error("attention: heads must be a multiple of kv heads");
  const int maxch = (a.max_keys + kChunk - 1) / kChunk;
  const int qpk = a.H / a.KV;
  AttnShape shape = a.shape;
  if (shape == AttnShape::Auto)
    shape = auto_attn_shape(a.kind, int64_t(a.KV) * maxch * a.N, qpk, sm_count(), tu.attn_slim, tu.attn_slim_from,
                            tu.attn_bf16_halves);
  g_last_launch.shape = shape;
  // KvStagedH2 and KvStagedH1: two query heads a block, or one, so a chunk spreads over more multiprocessors
  const int hpb = std::min(qpk, shape == AttnShape::KvStagedH1   ? 1
                                : shape == AttnShape::KvStagedH2 ? 2
                                                                 : kMaxG),
            qblocks = (qpk + hpb - 1) / hpb;
  ChunkGrid cg;
  cg.a = a;
  cg.grid = dim3(unsigned(a.KV * qblocks), unsigned(maxch), unsigned(a.N));
  cg.qblocks = qblocks, cg.hpb = hpb, cg.maxch = maxch;
  cg.scale = float(1.0 / std::sqrt(double(a.D)));  // as attend(): fp32(1/sqrt(head_dim))
  cg.st = st;
  cg.pdl = tu.pdl_all;
  cg.q4h_form = tu.attn_q4h_form;
  cg.bf16_halves = tu.attn_bf16_halves;
  switch (a.kind) {
    case KvKind::BF16:
      launch_chunks<KvKind::BF16>(cg, shape);
      break;
    case KvKind::FP8:
      launch_chunks<KvKind::FP8>(cg, shape);
      break;
    case KvKind::Q4H:
      launch_chunks<KvKind::Q4H>(cg, shape);
      break;
    case KvKind::F32:  // an oracle-only ablation: Engine::new_sequence refuses it before anything runs
      throw std::invalid_argument("engine attention: the f32 cache is an oracle-only ablation");
  }
  g_last_launch.merge_wide = launch_merge_kernel(a, maxch, st, tu.pdl_all, tu.merge_fast, tu.merge_wide);
}

AttnLaunch attn_last_launch() { return g_last_launch; }

}  // namespace hkv::cuda
