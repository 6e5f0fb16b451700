// Launchers of the engine's kernels, callable from plain C++ (the engine and the GPU tests). Pointers are
// device pointers; every launch is checked. Each kernel file says what it computes and in which order. A launcher
// that has a choice to make takes it from its `tu` (cuda/tuning.h; the engine passes its own, a caller that passes
// none gets the defaults); each choice's measured effect on a token is in docs/PERFORMANCE.md.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda/tuning.h"
#include "reference/kvformat.h"
#include "reference/weights.h"

namespace hkv::cuda {

// A weight matrix on the device, laid out as hkv::Matrix.
struct DMat {
  WType type = WType::F32;
  int64_t rows = 0, cols = 0;
  int group = 0;                     // MLX4
  const void* data = nullptr;        // values, or MLX4 words [rows][cols/8]
  const uint16_t* scales = nullptr;  // MLX4 [rows][cols/group] bf16
  const uint16_t* biases = nullptr;  // MLX4
  size_t nbytes() const;
};

// The current device's multiprocessor count (asked once a process).
int sm_count();
// n rounded up to a multiple of 256 (buffers carved from one allocation), and the blocks of `threads` threads
// that cover n.
inline size_t align256(size_t n) { return (n + 255) & ~size_t(255); }
inline unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

// ---- matvec.cu ----------------------------------------------------------------------------------
// The MLX4 products' record of a 32-element chunk of x, in words (xq_chunk in device.cuh gives the layout).
constexpr int kXqWords = 32;
// Y[n][r] = dot_row(W, r, X[n]) for n < N; X [N][ldx], Y [N][ldy]. xq: scratch of N·(cols/32)·kXqWords
// words (MLX4: the records of X). Each (n, r) is computed alone: batch-invariant.
void matvec(const DMat& W, const float* X, int64_t ldx, int64_t N, float* Y, int64_t ldy, uint32_t* xq, cudaStream_t st,
            const Tuning& tu = Tuning{});
// One matrix of a fused launch and where its rows go: Y[n][r] at y[n·ldy + r]; with add, the residual add
// y[n·ldy + r] = y[n·ldy + r] + product (one fp32 addition, the engine's h = h + y in the matvec's store).
struct MatTask {
  DMat W;
  float* y = nullptr;
  int64_t ldy = 0;
  bool add = false;
};
constexpr int kMaxTasks = 4;
// Where a decode MLX4 launch gets its x's records when it makes them itself (matvec_multi's src): from the
// rows x[n·ldx …] as they are, or, with norm_w, from rmsnorm(x[n]) (1+w, or w when plain; eps), the same
// values and records add_rmsnorm_rows and xq_records would give. Each block makes them in its prologue.
struct XSource {
  const float* x = nullptr;
  int64_t ldx = 0;
  const float* norm_w = nullptr;
  bool plain = false;
  float eps = 0.0f;
};
// Up to kMaxTasks matrices of one type, width and group that read the same X, in one launch (q|k|v,
// gate|up, …); each row's bytes are those of matvec. xq: xq_records of X (MLX4 reads only these; ignored
// for dense). src (only where matvec_fuses_records says so): the launch makes X's records from src itself
// and reads neither X nor xq. The decode MLX4 launches (N ≤ 2) read tu's pdl, mv_stage, mv_normw, mv_prefetch and
// pdl_all.
void matvec_multi(const MatTask* tasks, int ntasks, const float* X, int64_t ldx, int64_t N, const uint32_t* xq,
                  cudaStream_t st, const Tuning& tu = Tuning{}, const XSource* src = nullptr);
// A chain of decode launches (hkv bench-ops --chain --persistent): each step the tasks of one matvec_multi launch
// (MLX4 of one width and group, no residual add) over the records xq of its fixed input (N = 1), run in the steps'
// order as one launch of resident blocks that wait on per-step counters instead of launch boundaries
// (matvec_chain_kernel in matvec.cu says how). Every row's bytes are matvec_multi's. The plan's tables live on the
// device; run() resets the counters and launches on st. Items (matvec_chain_kernel): blocks of 16 warps over items of
// 16 row groups, a barrier and a count an item; Steps (matvec_chain_steps_kernel): each block of 16 warps strides
// through its row groups of a step, a barrier and a count a step; StepsWide: the same with 20 warps a block (the
// decode launches' block); Slices (matvec_chain_slices_kernel): StepsWide's blocks and striding with no barrier, each
// warp waiting before its m-th chunk for slice m of the step's x (1024 columns), counted as the step ahead's row groups
// that make it are stored (chain_slice_of), so that a step starts while the step ahead is still streaming. Slices needs
// every step's width a multiple of 1024 columns and at most 32 of them (ChainPlan::slices_ok).
enum class ChainForm { Items, Steps, StepsWide, Slices };
inline constexpr ChainForm kChainForms[] = {ChainForm::Items, ChainForm::Steps, ChainForm::StepsWide,
                                            ChainForm::Slices};
// ChainForm::Slices' slice of the next step's x that row group g of a step's `groups` makes, of `slices`: g·slices /
// groups (each slice a run of consecutive groups, the runs' lengths differing by at most one), and the groups each
// slice waits for.
__host__ __device__ inline int chain_slice_of(int64_t g, int64_t groups, int slices) {
  return int(g * slices / groups);
}
inline std::vector<unsigned> chain_slice_needs(int64_t groups, int slices) {
  std::vector<unsigned> need(size_t(slices > 0 ? slices : 0), 0u);
  for (int64_t g = 0; g < groups; g++) need[size_t(chain_slice_of(g, groups, slices))]++;
  return need;
}
struct ChainStep {
  std::vector<MatTask> tasks;
  const uint32_t* xq = nullptr;
};
class ChainPlan {
 public:
  explicit ChainPlan(const std::vector<ChainStep>& steps);
  // stamps (the step forms; else null): a device buffer of stamp_words(form) words that run() fills with each
  // (step, block)'s %globaltimer stamps (matvec_chain_steps_kernel says which), 0 where a block had no group there.
  void run(cudaStream_t st, ChainForm form = ChainForm::Items, unsigned long long* stamps = nullptr) const;
  size_t stamp_words(ChainForm form) const { return size_t(nsteps_) * size_t(grid(form)) * 4; }
  int steps() const { return nsteps_; }
  int items() const { return items_; }
  int grid(ChainForm form = ChainForm::Items) const { return grids_[int(form)]; }
  // Whether the Slices form can run this chain, and if not why ("" when it can).
  const std::string& slices_why_not() const { return slices_why_not_; }

 private:
  struct Dev;
  int nsteps_ = 0, items_ = 0, grids_[4] = {};
  std::string slices_why_not_;
  size_t slices_smem_ = 0;
  size_t smem_ = 0;
  std::shared_ptr<Dev> dev_;
};
// Whether matvec_multi can take src for these tasks and N rows: every matrix MLX4 of one width and group
// (cols a multiple of 32), N ≤ 2, and the records fit the decode kernel's shared memory.
bool matvec_fuses_records(const MatTask* tasks, int ntasks, int64_t N, bool norm);
// Diagnostic (hkv bench --attention-only --phases): between attn_phases_begin() and attn_phases_end(), the chunk
// blocks of the staged shapes of fp8 and q4h (all but slim and unstaged-x8) take an instantiation that adds thread 0's
// clock64 cycles in each phase to global sums: the wait (the block's start, its early copies, pdl_wait), q loaded and
// the rows' copies issued, the scores, the chunk's maximum and weights (with lc), the weighted values (to the block's
// end); the end returns the mean a block (blocks 0: no such launch ran). The same bytes.
struct AttnPhases {
  double blocks = 0, wait_cycles = 0, q_cycles = 0, score_cycles = 0, weight_cycles = 0, value_cycles = 0;
};
void attn_phases_begin();
AttnPhases attn_phases_end();
// Diagnostic (hkv bench --phases): between dn_phases_begin() and dn_phases_end(), the fused split recurrence of the
// 27B decode form (2 blocks a value head, 2 threads a column) takes an instantiation that adds thread 0's clock64
// cycles in each phase to global sums: the wait (the block's start to pdl_wait's return, the state already requested),
// conv and q/k norms, the two chains over the state's columns, the gated norm's exchange across the cluster, the gated
// store and the records, the state's store; the end returns the mean a block (blocks 0: no such launch ran). The
// same bytes.
struct DnPhases {
  double blocks = 0, cycles[6] = {};
};
void dn_phases_begin();
DnPhases dn_phases_end();
// Greedy decoding's argmax on the device (cuda/argmax.cu): out[r] = reference argmax() of row r of x (rows × n
// floats: the first index of the largest non-NaN value, 0 when x[r][0] is NaN); part_v and part_i hold
// rows · kArgmaxParts entries each (the partial results).
constexpr int kArgmaxParts = 256;
void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* out, float* part_v, int* part_i, cudaStream_t st,
                 const Tuning& tu = Tuning{});
// Phase stamps of the dependent decode MLX4 launches (hkv bench-ops --chain --phases): after mlx4_stamps_begin(n),
// those launches take an instantiation that records, for each of the next n launches, the earliest and latest
// %globaltimer (ns) over its blocks at their start, after pdl_wait, once x's records are staged, and at each warp's
// end; mlx4_stamps_end() turns it off and returns one record a launch that ran. For chains of matvec launches only
// (each launch must start after the one before it has completed: the stamped launches do not trigger their dependents
// at their start, as every other decode launch does, else the next launch's early blocks would stamp this one's slot).
// The same bytes.
struct MatvecStamps {
  uint64_t start[2], waited[2], records[2], end[2];  // min, max
  // by %smid (256 entries): a multiprocessor's latest x's records staged in a block on it, the latest and the
  // earliest of its warps' ends (0: no block ran there)
  std::vector<uint64_t> sm_records, sm_end, sm_first_end;
};
void mlx4_stamps_begin(int max_launches);
std::vector<MatvecStamps> mlx4_stamps_end();
// xq[n][c] = the MLX4 products' record of chunk c of X[n] (reference x_chunks), for n < N, c < cols/32.
void xq_records(const float* X, int64_t ldx, int64_t N, int64_t cols, uint32_t* xq, cudaStream_t st,
                const Tuning& tu = Tuning{});

// ---- norms.cu -----------------------------------------------------------------------------------
// out[r] = rmsnorm_1pw(x[r], w) (w may be null), or rmsnorm_plain(x[r], w) when plain.
void rmsnorm_rows(const float* x, int64_t ldx, const float* w, bool plain, int64_t n, float eps, int64_t rows,
                  float* out, int64_t ldo, cudaStream_t st, const Tuning& tu = Tuning{});
// Decode fusion, rows of n contiguous floats: h[r] ← h[r] + y[r] (y may be null), out[r] = rmsnorm_1pw(h[r];
// w), and, when xq is not null, the records of out[r] (as xq_records; n a multiple of 32).
void add_rmsnorm_rows(float* h, const float* y, const float* w, int64_t n, float eps, int64_t rows, float* out,
                      uint32_t* xq, cudaStream_t st, const Tuning& tu = Tuning{});
// a[i] = silu_c(a[i]) · b[i] for i < n (n a multiple of 32), and the records of the result (as xq_records).
void silu_mul_xq(float* a, const float* b, int64_t n, uint32_t* xq, cudaStream_t st, const Tuning& tu = Tuning{});
// For each row r < N and head h < nheads: v = x[r·ld + h·dim …] ← l2norm(v), then × scale for h < nscaled.
void l2norm_heads(float* x, int64_t ld, int64_t N, int nheads, int dim, int nscaled, float scale, cudaStream_t st,
                  const Tuning& tu = Tuning{});
// Full-attention preparation for N rows: q heads (from qg [N][H·2D], per head D query rows then D gate
// rows) normed with q_norm and roped into q [N][H·D]; k heads normed with k_norm and roped in place in
// k [N][KV·D]. rope: [N][rd] (cos[rd/2] then sin[rd/2]) from hkv::rope_row.
void attn_prep(const float* qg, float* q, float* k, const float* q_norm, const float* k_norm, const float* rope,
               int64_t N, int H, int KV, int D, int rd, float eps, cudaStream_t st, const Tuning& tu = Tuning{});
// h[r][:] = embedding row tokens[r] (for MLX4: fma(scale, q, bias) per element).
void embed_rows(const DMat& E, const int32_t* tokens, int64_t N, float* h, cudaStream_t st,
                const Tuning& tu = Tuning{});
// a[i] = silu_c(a[i]) · b[i];  a[i] = a[i] + b[i]
void silu_mul(float* a, const float* b, int64_t n, cudaStream_t st, const Tuning& tu = Tuning{});
void add_inplace(float* a, const float* b, int64_t n, cudaStream_t st, const Tuning& tu = Tuning{});

// ---- kvcache.cu ---------------------------------------------------------------------------------
// The device cache's layout (docs/FORMAT.md, "In device memory"): a layer's K (or V) cache is blocks of B positions,
// [capacity / B][KV][B][row_bytes], B = kv_block(kind). q4h takes B = kKvBlock, the attention's chunk, so that the rows
// of one KV head's chunk are one contiguous stretch of memory; bf16 and fp8 take B = 1, position order
// ([capacity][KV][row_bytes]), where their kernels measure faster (docs/PERFORMANCE.md). Each row is the format's row
// (kv_pack_row), unchanged. The host's SequenceState keeps rows in position order: Engine::download and upload convert.
constexpr int kKvBlock = 512;
__host__ __device__ constexpr int kv_block(KvKind kind) { return kind == KvKind::Q4H ? kKvBlock : 1; }
// The byte offset of the row of position pos, KV head h, in a layer's cache of KV heads, rows of rb bytes, blocks of B.
// Positions are below 2^31 (int), so the block's number is a 32-bit quotient.
__host__ __device__ __forceinline__ size_t kv_row_offset(int64_t pos, int h, int KV, size_t rb, int B) {
  const uint32_t p = uint32_t(pos), b = uint32_t(B), blk = p / b;
  return (size_t(blk) * size_t(KV) + size_t(h)) * size_t(b) * rb + size_t(p - blk * b) * rb;
}
// The bytes between rows p and p + 1 of one KV head inside a block (B = 1: the next position's row of that head).
__host__ __device__ __forceinline__ size_t kv_row_stride(int KV, size_t rb, int B) {
  return B == 1 ? size_t(KV) * rb : rb;
}
// The bytes of a layer's K (or V) cache that holds positions [0, npos): whole blocks.
inline size_t kv_cache_bytes(int64_t npos, int KV, size_t rb, int B) {
  return size_t((npos + B - 1) / B) * size_t(B) * size_t(KV) * rb;
}
// Host copies of a layer's rows for positions [0, npos) between position order ([npos][KV][rb]) and the device layout
// of blocks of B (kv_cache_bytes(npos, KV, rb, B) bytes; the last block's rows past npos are zeros).
std::vector<uint8_t> kv_rows_to_blocks(const uint8_t* rows, int64_t npos, int KV, size_t rb, int B);
void kv_blocks_to_rows(const uint8_t* blocks, uint8_t* rows, int64_t npos, int KV, size_t rb, int B);

// kv_pack_row of K and V rows: for row r < N and kv head h: K row k[r·ldk + h·D …] goes to
// kdst[r] + kv_row_offset(pos[r], h, KV, row_bytes, kv_block(kind)), V likewise, a warp a group of 32 (head_dim a
// multiple of 32, at most 1024). Non-finite input sets bit 1 of *err, a scale that overflows fp16 bit 2 (the oracle
// throws std::domain_error); such rows are not written at all. f: a format the engine runs (KvFormat::engine_runs).
void kv_pack(const KvFormat& f, const float* k, int64_t ldk, const float* v, int64_t ldv, uint8_t* const* kdst,
             uint8_t* const* vdst, const int* pos, int64_t N, int KV, int D, int* err, cudaStream_t st,
             const Tuning& tu = Tuning{});
// attn_prep followed by kv_pack (k's rows as attn_prep leaves them, v's, ldk = KV·D) in one launch (the engine's every
// round), which lets the attention's chunk kernel launch once its own blocks have passed their pdl_wait (AttnArgs
// pre_ok). The bytes of the two launches (q, k, the cache rows, err).
void attn_prep_pack(const float* qg, float* q, float* k, const float* v, int64_t ldv, const float* q_norm,
                    const float* k_norm, const float* rope, int64_t N, int H, int KV, int D, int rd, float eps,
                    const KvFormat& f, uint8_t* const* kdst, uint8_t* const* vdst, const int* pos, int* err,
                    cudaStream_t st, const Tuning& tu = Tuning{});
// Valid random rows for positions [0, npos) of a cache (benchmarks: a cache at depth d without a prefill), and for the
// rest of npos's last block: kv_cache_bytes(npos, KV, row bytes, kv_block(kind)) are written. Not an exact path.
void kv_fill_random(KvKind kind, uint8_t* cache, int64_t npos, int KV, int D, uint64_t seed, cudaStream_t st);

// ---- attention (cuda/attention/: policy.cu, chunk.cu, slim.cu, merge.cu) ------------------------
// How a chunk is spread over threads and what is staged in shared memory (the arithmetic is the same in all):
//   kv-staged     256 threads, all of a KV head's query heads in a block, the chunk's K and V rows staged by cp.async
//                 (fp8 at head_dim 256 stages V alone: K and V do not fit), one value element a thread (few chunks)
//   kv-staged-h2  kv-staged with two query heads a block (3× the blocks at 6:1, each K/V row decoded 3×)
//   kv-staged-h1  kv-staged with one query head a block (6× the blocks), Auto's choice while they fit one wave (to 2K)
//   v-staged-x2   128 threads, V rows alone staged (two q4h blocks fit a multiprocessor), two value elements a thread,
//                 so that each key's weights, scale and q4h code byte serve two elements
//   unstaged-x8   64 threads, rows read from global memory, 8 consecutive value elements a thread (bf16, many chunks)
//   slim          attn_slim_kernel (fp8 and q4h at head_dim 256; other formats and widths take v-staged-x2's path):
//                 128 threads, codes read from global memory, only the K and V group scales staged, every thread busy
//                 in both phases (4 keys in the scores, 2 elements for all the block's heads in the values); Auto's
//                 choice for fp8 and q4h beyond one chunk block a multiprocessor (17K at batch 1; auto_attn_shape).
//                 q4h's slim shape runs attn_bulk_lc_key_kernel (Tuning's attn_q4h_form 19, the default) after
//                 attn_q4h_records_kernel has made the query's records once a row and head: 288 threads, the chunk's
//                 K and then V rows copied whole into shared memory by bulk copies, the scores on the tensor cores (32
//                 keys a warp), the weights a key a thread, lc summed by a ninth warp, one group a warp in the values
//                 with V's codes read in place (attn_q4h_form 20, 18, 17, 11 and 8: the other forms,
//                 cuda/attention/bulk.cu)
// bf16 stages nothing: its staged shapes take the chunk kernel's unstaged one-element form. Auto picks by block count
// (attention()).
enum class AttnShape { Auto, KvStaged, UnstagedX8, KvStagedH2, VStagedX2, KvStagedH1, Slim };
// The shapes' names as hkv bench takes them ("auto", "kv-staged", "unstaged-x8", "kv-staged-h2", "v-staged-x2",
// "kv-staged-h1", "slim"), and back; parse_attn_shape throws std::invalid_argument naming the text and the names.
const char* attn_shape_name(AttnShape s);
AttnShape parse_attn_shape(const std::string& name);

struct AttnArgs {
  KvKind kind = KvKind::BF16;
  int D = 0, H = 0, KV = 0;
  size_t row_bytes = 0;
  const float* q = nullptr;  // [N][ldq], head h at h·D (normed and roped, not rotated)
  int64_t ldq = 0;
  const float* gate = nullptr;  // [N][ldg], head h at h·gate_stride (null: no gate)
  int64_t ldg = 0, gate_stride = 0;
  const int* n_keys = nullptr;             // [N] keys each row attends to (its position + 1)
  const uint8_t* const* k_rows = nullptr;  // [N] K cache base of the row's sequence (kv_row_offset's layout)
  const uint8_t* const* v_rows = nullptr;
  float* out = nullptr;  // [N][ldo], head h at h·D
  int64_t ldo = 0;
  int64_t N = 0;
  int max_keys = 0;       // the largest n_keys (sets the chunk grid)
  float* part = nullptr;  // scratch: attn_part_floats(N, H, D, max_keys)
  AttnShape shape = AttnShape::Auto;
  // the merge writes the records of out too ([N][H·D/32], xq_chunk's bytes), so that the o product stages them from
  // memory instead of making them in its prologue (the engine's decode fusion)
  uint32_t* xq_out = nullptr;
  int vu = 32;  // set by attention() from tu.attn_value_unroll: callers leave it
  // The caller's word that nothing that may still run when the chunk kernel starts writes n_keys, the row pointers,
  // or any cache row but those of each row's last N keys (the decode step: attn_prep_pack, the kernel ahead, lets the
  // chunk kernel launch only once its own blocks have passed pdl_wait). With it the staged shapes' chunk kernel copies
  // the other rows before its pdl_wait.
  bool pre_ok = false;
  bool pre = false, trigger = false;  // set by attention() (pre_ok, tu.out_trigger): callers leave them
  bool fast_scores = false;           // set by attention() (fp8 at head_dim 256): callers leave it
  int dsplit = 1;                     // set by attention() where the shape takes it (attn_dsplit): callers leave it
};
size_t attn_part_floats(int64_t N, int H, int D, int max_keys);
// Reads tu's attn_slim, attn_slim_from (Auto's shape), attn_q4h_form, attn_value_unroll, attn_bf16_halves, merge_fast,
// merge_wide, out_trigger and pdl_all.
void attention(const AttnArgs& a, cudaStream_t st, const Tuning& tu = Tuning{});
// Auto's shape (cuda/attention/policy.cu says why; docs/PERFORMANCE.md has the measurements) for b chunk blocks of
// all a KV head's query heads (KV heads × chunks × rows) on P multiprocessors, qpk query heads a KV head, under
// tu.attn_slim = slim (1: Slim for fp8 and q4h, 0: VStagedX2 there instead, 2: Slim for fp8 alone) and
// tu.attn_slim_from = from (Slim beyond that many tenths of a chunk block a multiprocessor: 10, or 12, 15, 20, 30 for
// measuring); bf16_halves = tu.attn_bf16_halves (bf16 then spread over more blocks below one wave, as the others).
AttnShape auto_attn_shape(KvKind kind, int64_t b, int qpk, int64_t P, int slim, int from, bool bf16_halves = false);
// Slim at the 27B's layout (4 KV heads of 6 query heads, head_dim 256) takes a kernel with the row stride as a
// constant, so that a value batch's 16 code loads take immediate offsets from one address; there fp8's score loop is
// rolled where the grid of `blocks` slim blocks is more than one wave on P multiprocessors (from 128K at batch 1),
// unrolled within one wave, where it is faster. The same operations in the same order.
bool attn_slim_fp8_rolled(int64_t blocks, int64_t P);
// The staged shapes with one element a thread in the values (kv-staged, kv-staged-h1, kv-staged-h2; fp8 and q4h, and
// bf16 with Tuning's attn_bf16_halves; head dims a multiple of 64) split each chunk's value phase over 2 blocks, each
// computing every score of the chunk and the weighted values of half the head's elements (the first also lc), where the
// doubled grid of `blocks` blocks still fits one wave of a block a multiprocessor (q4h and fp8 to 8K at batch 1);
// else 1. The operations and their order are unchanged. Few chunks leave most multiprocessors idle, and the value phase
// is half a block's cycles.
int attn_dsplit(int D, int64_t blocks, int64_t P);
// What the last attention() call launched, so that a test can tell that a shape or switch reached its kernel (the
// bytes alone cannot: every form gives the same): the slim chunk kernel, and slim's score loop (in it, or as fast
// scores).
struct AttnLaunch {
  AttnShape shape = AttnShape::Auto;  // the shape asked for, or Auto's choice (Slim where v-staged-x2's path ran it)
  bool slim_kernel = false, slim_scores = false;
  bool slim_roll = false;   // the slim kernel's fp8 score loop rolled (attn_slim_fp8_rolled)
  bool slim_kvc = false;    // the slim kernel with the 27B's KV heads as a constant
  int q4h_form = 0;         // the slim shape's q4h form taken: 1 (slim's VLATE), 8 (attn_bulk_kernel), 11
                            // (attn_bulk_ready_kernel), 17 (attn_bulk_rec_kernel), 18 (attn_bulk_lc_rec_kernel), 19
                            // (attn_bulk_lc_key_kernel), else 0
  int dsplit = 1;           // the staged one-element kernels' blocks a chunk and head block (attn_dsplit)
  bool halves = false;      // the chunk's rows staged half a chunk at a time (Tuning's attn_bf16_halves)
  bool merge_wide = false;  // the merge as attn_merge_wide_kernel (Tuning's merge_wide)
};
AttnLaunch attn_last_launch();
// Whether this build's device code has attn_bulk_kernel's bulk copies (sm_90 and later): else attn_q4h_form 8, 11,
// 17, 18, 19 and 20 run slim's default form.
bool attn_bulk_built();

// ---- deltanet.cu --------------------------------------------------------------------------------
struct DeltaArgs {
  int nk = 0, nv = 0, dk = 0, dv = 0, K = 4;
  int64_t C = 0;  // conv channels = 2·nk·dk + nv·dv
  float eps = 1e-6f, q_scale = 1.0f;
  int B = 0;                       // sequences
  const int* seq_first = nullptr;  // [B] first row, [B] row count (rows of a sequence in order)
  const int* seq_rows = nullptr;
  float* const* conv_state = nullptr;  // [B] -> [C][K-1]
  float* const* S = nullptr;           // [B] -> [nv][dk][dv]
  const float* conv_w = nullptr;       // [C][K]
  const float* A_log = nullptr;        // [nv]
  const float* dt_bias = nullptr;      // [nv]
  const float* norm_w = nullptr;       // [dv]
  const float* qkv = nullptr;          // [N][C] projections (input of the conv)
  float* conv_out = nullptr;           // [N][C]
  const float* z = nullptr;            // [N][nv·dv]
  const float* b = nullptr;            // [N][nv]
  const float* a = nullptr;            // [N][nv]
  float* core = nullptr;               // [N][nv·dv] gated, normed output
  int64_t N = 0;
  uint32_t* xq_out = nullptr;  // the records of core too ([N][nv·dv/32], xq_chunk's bytes), as AttnArgs' xq_out
  bool early = false;          // set by deltanet() from tu.dn_early: callers leave it
  bool preload = false;        // set by deltanet() from tu.dn_preload (the split recurrence): callers leave it
  bool trigger = false;        // set by deltanet() from tu.out_trigger (the split recurrence): callers leave it
};
// The conv with SiLU, the q/k l2norm, and the recurrence with its gated norm, for every sequence's rows. Returns
// whether it wrote the records of core into a.xq_out (asked for and taken: the split recurrence, whose blocks hold
// whole 32-column chunks). For rounds of at most 8 rows the conv, the q/k l2norm and the split recurrence go in one
// launch (recurrence_split_kernel's FUSED form: a cluster holds a key head's value heads) where the shape allows and
// tu.dn_fused (deltanet_fused_form); other shapes and rounds take the three launches. The same bytes, conv_out
// included. Reads tu's dn_split, dn_tpc, dn_fused, dn_early, dn_preload, out_trigger and pdl_all.
bool deltanet(const DeltaArgs& a, cudaStream_t st, const Tuning& tu = Tuning{});
// The recurrence's blocks a (sequence, value head) as a cluster that splits the head's columns (tu.dn_split: 2, 1 or
// 4) and threads a column of S (tu.dn_tpc: 2 or 1). Shapes the split kernel does not take (dk other than 64 or 128,
// dv > 128, dv/blocks·threads not a multiple of 32) and cards without thread-block clusters (before sm_90) run the
// one-block kernel, as do blocks = threads = 1. The same bytes (gpu_ops). The one-block kernel's 48 blocks of one head
// each leave 84 multiprocessors idle, and its <128> form spills 236 bytes a thread.
// What deltanet() launches for a: the split kernel's (blocks, threads a column), or (1, 1), the one-block kernel.
std::pair<int, int> recurrence_form(const DeltaArgs& a, const Tuning& tu = Tuning{});
// Whether deltanet(a) takes the one fused launch: tu.dn_fused, at most 8 rows, a conv of size 4, a thread a q/k channel
// (dv/blocks·threads = dk), a key head's blocks in one cluster of at most 8, and clusters. Its 27B form (dk = dv = 128,
// 2 blocks of 2 threads a column) stores the state as soon as the last row has updated it, before that row's o chain,
// whose fma latency the stores then fill; the v conv window after the last row's conv, the q and k windows after its
// first cluster sync. The same bytes.
bool deltanet_fused_form(const DeltaArgs& a, const Tuning& tu = Tuning{});
// The MODE bits the 27B decode form of the fused split recurrence launches with now: 2 (the early stores), and 1 while
// its phases are counted (dn_phases_begin).
int fused_recurrence_mode();
// Whether the device launches thread-block clusters (compute capability 9.0 and later), which the split
// recurrence needs.
bool clusters_supported();
// One deltanet_step per value head (tests): S [nv][dk][dv], q,k [nv][dk], v [nv][dv], beta, g [nv] -> o.
void deltanet_step_heads(float* S, const float* q, const float* k, const float* v, const float* beta, const float* g,
                         int nv, int dk, int dv, float* o, cudaStream_t st);

// ---- scalar_check.cu ----------------------------------------------------------------------------
// exp_c_flat against exp_c on the device, bit patterns [begin, end) (end at most 2^32): how many differ as bits, and
// the smallest of those (~0u where none does).
struct BitsCheck {
  uint64_t checked = 0, differing = 0;
  uint32_t first = ~0u;
};
BitsCheck exp_flat_check(uint64_t begin, uint64_t end);

// ---- synthetic.cu -------------------------------------------------------------------------------
// The bytes of reference/synthetic.cpp's generators, on the device.
void synth_bf16_fill(uint16_t* out, int64_t n, uint64_t seed, uint64_t tensor, int e, cudaStream_t st);
void synth_mlx4_fill(uint32_t* words, uint16_t* scales, uint16_t* biases, int64_t nwords, int64_t ngroups,
                     uint64_t seed, uint64_t tensor, int e, cudaStream_t st);

}  // namespace hkv::cuda
