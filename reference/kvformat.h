// The attention cache's row formats: bf16, fp8 (e4m3) and q4h, the 4-bit Hadamard format.
// docs/FORMAT.md fixes every byte; this file is its plain implementation.
//
// A row is one (position, KV head) of K or of V: head_dim values, in groups of 32.
//   bf16: head_dim × bf16 (round to nearest even).                          512 B at head_dim 256
//   fp8:  head_dim × e4m3 codes, then head_dim/32 fp16 scales (absmax/448).  272 B
//   q4h:  each group rotated by the 32-point Walsh–Hadamard transform, then head_dim/2 bytes of 4-bit
//         codes, then head_dim/32 fp16 scales (q4_0 grid; the scale of least  144 B
//         squared error among 17 around extreme/−8).
//
// Every format reads back as, per group g, a scale s_g and 32 "unit values" u_j, with the stored value
// s_g·u_j exact in fp32. Attention (reference/attention.cpp) uses that form: the score of a group is
// s_g · Σ u_j q_j, and a q4h row is read in rotated space.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hkv {

enum class KvKind { BF16, FP8, Q4H, F32 };  // F32: oracle-only ablation (conformance checks)

// 4-bit code grids, compared in docs/FORMAT.md. Q4_0 measured best and is the q4h format; the others
// are ablations. Each grid's own scale s is below; with mse (q4h's) the scale is searched around it.
enum class Grid {
  Q4_0,       // codes −8..7 stored as c+8, s = (signed extreme)/−8: with s itself the extreme is exact
  Symmetric,  // codes −7..7 stored as c+8, s = absmax/7
  Midpoint,   // 16 levels (c − 7.5)·s, s = absmax/7.5, no zero level
  Normal,     // 16 symmetric levels ±kNormalLevels[i]·s, denser near 0, s = absmax (kvformat.cpp)
};

// The oracle's ablations at q4h's bytes (16 bytes of codes and an fp16 scale a group of 32), for study; the engine
// runs q4h-max alone (engine_runs: its rows are q4h's rows, only their scales chosen otherwise) and refuses the rest.
// Each combines with the others and with the grids above:
//   q4h-max    each group's scale the grid's own (for q4_0, extreme/−8), not searched. q4h and every other ablation
//              search it: among 17 candidates from 3/4 to 5/4 of the grid's own, the least squared error of the
//              group, codes computed from each candidate as rounded to fp16 (docs/FORMAT.md "Scale");
//   q4h-nf     the Normal grid: 16 symmetric levels fitted to rotated rows (Lloyd–Max), codes as level indices;
//   q4h-seedN  the transform S·H·S with a ±1 diagonal S drawn from seed N (1 for "seed"): another rotation, so that
//              repeated seeds measure how much one gate result owes to where the rounding errors happen to fall.
struct KvFormat {
  KvKind kind = KvKind::BF16;
  // Ablations for study (oracle only). q4h is rotate = true, group = 32, grid = Q4_0, mse = true, seed = 0.
  bool rotate = true;
  int group = 32;
  Grid grid = Grid::Q4_0;
  bool mse = false;  // each group's scale searched for the least squared error, the grid's own among the candidates
  int seed = 0;      // not 0: a fixed ±1 diagonal S drawn from this seed around each group's transform, S·H·S for H

  static KvFormat bf16() { return {KvKind::BF16, false, 32, Grid::Q4_0, false, 0}; }
  static KvFormat fp8() { return {KvKind::FP8, false, 32, Grid::Q4_0, false, 0}; }
  static KvFormat q4h() { return {KvKind::Q4H, true, 32, Grid::Q4_0, true, 0}; }
  static KvFormat f32() { return {KvKind::F32, false, 32, Grid::Q4_0, false, 0}; }
  // "bf16", "fp8", "q4h"; "f32" (no rounding: for conformance with fp32 implementations); ablations "q4h-norot",
  // "q4h-g16|g64|g128", "q4h-sym", "q4h-mid", "q4h-nf", "q4h-max", "q4h-seed" (seed 1) or "q4h-seedN",
  // and combinations such as "q4h-norot-sym" or "q4h-nf-max". Throws std::invalid_argument naming the text.
  static KvFormat parse(const std::string& name);
  std::string name() const;
  bool is_canonical() const;  // one of the three formats bf16, fp8 and q4h
  bool engine_runs() const;   // a canonical format or q4h-max, the formats the engine implements
  // Rows read back in rotated space, where attention runs with the query rotated by rotate_groups. The seeded
  // ablation's transform S·H·S is not the query's H: kv_read_row turns its rows back to the original space.
  bool rotated() const { return kind == KvKind::Q4H && rotate && seed == 0; }
  // Scores taken in integers (ARITHMETIC.md §6): 4-bit codes whose unit values are integers, in groups of 32
  // (q4h, and its ablations with the q4_0 or the symmetric grid, read in rotated space, at group 32).
  bool integer_scores() const {
    return kind == KvKind::Q4H && group == 32 && (grid == Grid::Q4_0 || grid == Grid::Symmetric) && seed == 0;
  }
};

size_t kv_row_bytes(const KvFormat& f, int head_dim);

// Pack one row. Throws std::domain_error on non-finite input or a scale that overflows fp16.
void kv_pack_row(const KvFormat& f, const float* x, int head_dim, uint8_t* out);

// Unit values and scales of a stored row, in stored (for q4h: rotated) space:
// u[head_dim], s[head_dim / group]; the stored value of element d is s[d / group] · u[d], exact.
void kv_read_row(const KvFormat& f, const uint8_t* row, int head_dim, float* u, float* s);

// The stored row as values in the original space (for q4h: rotated back). For tests and for people.
void kv_unpack_row(const KvFormat& f, const uint8_t* row, int head_dim, float* out);

// The orthonormal Walsh–Hadamard transform of n = 2^k values in place (docs/FORMAT.md §Rotation):
// butterflies for h = 1, 2, 4, …, n/2 over pairs (i, i+h), (a, b) -> (a + b, a − b), then every value
// multiplied by the fp32 constant 1/sqrt(n). Its own inverse up to rounding.
void wht_inplace(float* x, int n);

// Rotate each group of a head_dim vector (q4h queries are rotated once; outputs rotated back once).
void rotate_groups(float* x, int head_dim, int group);

}  // namespace hkv
