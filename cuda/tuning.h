// The engine's run-time choices in one value: every switch a launch reads, filled from the environment by
// tuning_from_env() and nowhere else. The engine (cuda::Engine) holds one and hands it to each launcher; tests and the
// benches build their own. No choice changes a byte of the exact path: each picks between schedules of the same
// operations in the same order (HKV_FLASH_CFG picks the fast prefill's attention form, which is never exact).
// docs/TUNING.md lists every variable with its default; docs/PERFORMANCE.md has each default's measurement.
// Plain C++ (no CUDA header), so that CPU-only builds and tests can read and print it.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace hkv::cuda {

// The fast prefill's attention kernel form (cuda/prefill_attention.cu): Auto is Wg2 where the build has wgmma (an
// sm_90a build), else F8x2.
enum class FlashCfg { Auto, F8x2, F4x1, Wg, Wg2 };

struct Tuning {
  // ---- decode launches (cuda/matvec.cu, device.cuh's launch_k) ----
  bool pdl = true;          // HKV_PDL: the decode MLX4 matvec as a programmatic dependent launch
  bool pdl_all = true;      // HKV_PDL_ALL: every other decode kernel launched the same way
  bool mv_stage = true;     // HKV_MV_STAGE: x's records staged into shared memory 8 loads a thread at a time
  bool mv_normw = true;     // HKV_MV_NORMW: the matvec's norm weights read before pdl_wait
  int mv_prefetch = 3;      // HKV_MV_PF: 16-byte chunks a lane prefetches into L2 before pdl_wait: 0, 1, 3, 6, 9
  bool decode_fuse = true;  // HKV_DECODE_FUSE: residual adds and x's records made inside the matvec launches
  bool out_trigger = true;  // HKV_OUT_TRIGGER: the merge and the recurrence let the o / out products start early
  // ---- decode attention (cuda/attention/) ----
  int attn_slim = 1;              // HKV_ATTN_SLIM: Auto takes slim for fp8 and q4h (1), never (0), for fp8 alone (2)
  int attn_slim_from = 10;        // HKV_ATTN_SLIM_FROM: slim beyond this many tenths of a chunk block a multiprocessor
  int attn_q4h_form = 19;         // HKV_ATTN_Q4H_FORM: slim's q4h kernel: 0, 1 (at the 27B's layout, V scales copied
                                  // after the scores), or bulk.cu's (the rows staged by bulk copies): 19 (the query's
                                  // records made once, the scores on the tensor cores, the weights a key a thread, V's
                                  // codes read in place, lc summed by a ninth warp), 20 (19 with the weights' max
                                  // taken once a key), 18 (19 with its weights an entry a thread), 17, 11 and 8
                                  // (bulk.cu's head comment says what each does)
  int attn_value_unroll = 32;     // HKV_ATTN_VU: keys the value loop over staged V rows unrolls: 4, 8, 16, 32
  bool merge_fast = true;         // HKV_MERGE_FAST: the merge's whole batches of 32 chunks without a test a chunk
  bool attn_bf16_halves = false;  // HKV_ATTN_BF16_HALVES: bf16's staged shapes stage each chunk's K and then V rows
                                  // half a chunk at a time (attn_chunk_kernel's STAGE 3) instead of reading them
                                  // from global memory
  bool merge_wide = false;        // HKV_MERGE_WIDE: the merge a block a (row, head, 32 elements), every partial of a
                                  // tile in flight at once (attn_merge_wide_kernel), instead of a block a (row, head)
  // ---- decode DeltaNet (cuda/deltanet.cu) ----
  int dn_split = 2;        // HKV_DN_SPLIT: blocks a (sequence, value head) in the recurrence, one cluster: 1, 2, 4
  int dn_tpc = 2;          // HKV_DN_TPC: threads a column of the state: 1, 2
  bool dn_fused = true;    // HKV_DN_FUSED: conv, l2norm and the split recurrence in one launch for rounds of ≤ 8 rows
  bool dn_early = true;    // HKV_DN_EARLY: the recurrence reads its state and parameters before pdl_wait
  bool dn_preload = true;  // HKV_DN_PRELOAD: b, a and z loaded with qkv
  // ---- fast prefill (cuda/prefill_attention.cu) ----
  FlashCfg flash = FlashCfg::Auto;  // HKV_FLASH_CFG: auto, 8x2, 4x1, wg, wg2
};

// Every switch from the environment. An unset variable takes its default, and so does a value outside its list for
// the decode switches (as docs/TUNING.md says); HKV_FLASH_CFG refuses any other value (std::runtime_error naming the
// variable and its values). Reads the environment only: no device is touched.
Tuning tuning_from_env();

// The variables and their values in t, in the order of the struct: {"HKV_PDL", "1"}, …, {"HKV_FLASH_CFG", "auto"}.
// Setting each in the environment gives t back from tuning_from_env(). (hkv bench's JSON "tuning".)
std::vector<std::pair<std::string, std::string>> tuning_values(const Tuning& t);
// One line: "NAME=VALUE …" of every switch, then "(the defaults)" or "(not default: NAME=VALUE …)".
std::string tuning_text(const Tuning& t);
// The names of every variable tuning_from_env() reads.
std::vector<std::string> tuning_names();

// HKV_FLASH_CFG's spelling of a form ("auto", "8x2", "4x1", "wg", "wg2").
const char* flash_cfg_name(FlashCfg c);

}  // namespace hkv::cuda
