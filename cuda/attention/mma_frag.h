// Where q4h_mma_scores (q4h_mma_scores.cuh) puts each operand byte of its mma.sync and finds each sum, in plain C++ so
// that the CPU tests check it (tests/test_mma_frag.cpp): the PTX ISA's fragment layout of mma.sync.m16n8k32 with 8-bit
// operands, and the kernel's choice of which record word and which code word fills each register. The kernel takes
// every one of these indices from this header.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define HKV_FRAG_HD __host__ __device__ __forceinline__
#else
#define HKV_FRAG_HD inline
#endif

namespace hkv::cuda::frag {

// mma.sync.aligned.m16n8k32, .s8/.u8 operands and .s32 sums (PTX ISA, "Matrix Fragments for mma.m16n8k32"): lane
// = 4·g + t; byte b (0..3) of register r holds
//   A (16 × 32, .row): a_row(lane, r), a_k(lane, r, b), for r = 0..3;
//   B (32 × 8, .col):  b_k(lane, r, b), b_col(lane),     for r = 0..1;
// and register r = 0..3 of C and D (16 × 8, one s32 each) is element (c_row(lane, r), c_col(lane, r)).
HKV_FRAG_HD constexpr int a_row(int lane, int r) { return (lane >> 2) + 8 * (r & 1); }
HKV_FRAG_HD constexpr int a_k(int lane, int r, int b) { return 4 * (lane & 3) + b + 16 * (r >> 1); }
HKV_FRAG_HD constexpr int b_k(int lane, int r, int b) { return 4 * (lane & 3) + b + 16 * r; }
HKV_FRAG_HD constexpr int b_col(int lane) { return lane >> 2; }
HKV_FRAG_HD constexpr int c_row(int lane, int r) { return (lane >> 2) + 8 * (r >> 1); }
HKV_FRAG_HD constexpr int c_col(int lane, int r) { return 2 * (lane & 3) + (r & 1); }

// q4h's scores: k runs over a group's 32 codes in the order of the prep<Q4H> words (word i: bytes 4i … 4i + 3), A's
// row h is head h's low record plane (words 0–7 of its record), row 8 + h its high plane (words 8–15), and B's
// column n is key n. So register r of A is record word score_a_word(lane, r), and register r of B is prep word
// score_b_word(lane, r) of key b_col(lane), taken from the group's 16 code bytes by score_b_bits.
HKV_FRAG_HD constexpr int score_a_word(int lane, int r) { return 8 * (r & 1) + (lane & 3) + 4 * (r >> 1); }
HKV_FRAG_HD constexpr int score_b_word(int lane, int r) { return (lane & 3) + 4 * r; }
// The paired order (q4h_mma_scores' Paired): the k slots of lane t are prep words 2t and 2t + 1, the low and the high
// nibbles of one code word, t (one load, constant shifts): register r of B is prep word paired_b_word(lane, r), and
// register r of A plane word paired_a_word(lane, r). With the record's planes in pairs (q4h_record<true>: word 2i the
// low plane's word i, 2i + 1 the high plane's) that is word 2·(paired_a_word % 8) + r % 2 = paired_a_pairs(lane) + r:
// the four words of A are one 16-byte load.
HKV_FRAG_HD constexpr int paired_a_word(int lane, int r) { return 8 * (r & 1) + 2 * (lane & 3) + (r >> 1); }
HKV_FRAG_HD constexpr int paired_b_word(int lane, int r) { return 2 * (lane & 3) + r; }
HKV_FRAG_HD constexpr int paired_a_pairs(int lane) { return 4 * (lane & 3); }
// prep word i of a group's codes (bytes p, 16 of them, 4-byte aligned on the card): the low nibbles of code word i/2
// for even i, the high ones for odd i, one to a byte (the host reads the word by memcpy, the card with one load)
HKV_FRAG_HD uint32_t score_b_bits(const uint8_t* p, int i) {
#if defined(__CUDA_ARCH__)
  const uint32_t w = *reinterpret_cast<const uint32_t*>(p + 4 * (i >> 1));
#else
  uint32_t w;
  std::memcpy(&w, p + 4 * (i >> 1), 4);
#endif
  return (w >> (4 * (i & 1))) & 0x0f0f0f0fu;
}
// Of D's registers, lane's (key, head) pairs: register i (0, 1) is the low plane's sum of key c_col(lane, i) and head
// c_row(lane, i), register 2 + i the high plane's of the same pair.
HKV_FRAG_HD constexpr int score_key(int lane, int i) { return c_col(lane, i); }
HKV_FRAG_HD constexpr int score_head(int lane) { return c_row(lane, 0); }

}  // namespace hkv::cuda::frag
