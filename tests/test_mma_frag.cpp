// The fragment indices of the q4h scores on the tensor cores (cuda/attention/mma_frag.h), checked on the host: the
// PTX layout of mma.sync.m16n8k32 places every element of A, B and D exactly once, and a warp that fills its registers
// as q4h_mma_scores does (records by score_a_word, codes by score_b_word and score_b_bits; or, in the paired order,
// records with their planes in pairs by paired_a_pairs and codes by paired_b_word; D started from −8·ΣX in the low
// plane), multiplied as the tensor cores multiply, hands each lane, for its (key, head) pairs, the integer
// P = 256·Σhi + Σlo − 8·ΣX that q4h_group_p takes with dp4a from the same record and codes. Host code: no GPU needed.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <utility>

#include "cuda/attention/mma_frag.h"

namespace frag = hkv::cuda::frag;

namespace {

int8_t byte_of(uint32_t w, int b) { return int8_t(uint8_t(w >> (8 * b))); }
int dp4a(uint32_t a, uint32_t b) {  // signed bytes of a times unsigned bytes of b (codes 0..15 fit either)
  int s = 0;
  for (int i = 0; i < 4; i++) s += int(byte_of(a, i)) * int(uint8_t(b >> (8 * i)));
  return s;
}

}  // namespace

TEST_CASE("mma_frag: the m16n8k32 layout places every element of A, B and D once") {
  std::set<std::pair<int, int>> a, b, c;
  for (int lane = 0; lane < 32; lane++) {
    for (int r = 0; r < 4; r++)
      for (int by = 0; by < 4; by++) a.insert({frag::a_row(lane, r), frag::a_k(lane, r, by)});
    for (int r = 0; r < 2; r++)
      for (int by = 0; by < 4; by++) b.insert({frag::b_k(lane, r, by), frag::b_col(lane)});
    for (int r = 0; r < 4; r++) c.insert({frag::c_row(lane, r), frag::c_col(lane, r)});
  }
  CHECK(a.size() == 16 * 32);
  CHECK(b.size() == 32 * 8);
  CHECK(c.size() == 16 * 8);
  for (const auto& [row, k] : a) CHECK((row >= 0 && row < 16 && k >= 0 && k < 32));
  for (const auto& [k, col] : b) CHECK((k >= 0 && k < 32 && col >= 0 && col < 8));
}

TEST_CASE("mma_frag: the q4h scores' registers give each lane q4h_group_p's integers, in either order") {
  std::mt19937 rng(20261207);
  for (int trial = 0; trial < 400; trial++) {
    const bool paired = trial % 2;
    // 8 heads' records of one group (16 plane words, −8·ΣX) and 8 keys' 16 code bytes
    uint32_t rec[8][16];
    int nx[8];
    uint8_t codes[8][16];
    for (auto& h : rec)
      for (uint32_t& w : h) w = rng();
    for (int& v : nx) v = int(rng() % 200001) - 100000;
    for (auto& k : codes)
      for (uint8_t& c : k) c = uint8_t(rng());
    uint32_t pairs[8]
                  [16];  // the records as q4h_record<true> lays them out: word 2i the low plane's i, 2i + 1 the high's
    for (int h = 0; h < 8; h++)
      for (int i = 0; i < 8; i++) pairs[h][2 * i] = rec[h][i], pairs[h][2 * i + 1] = rec[h][8 + i];
    // the warp's registers, placed into A, B and D as the PTX layout says
    int A[16][32], B[32][8], Dm[16][8];
    for (int lane = 0; lane < 32; lane++) {
      const int h = frag::score_head(lane);
      for (int r = 0; r < 4; r++) {
        const uint32_t w = paired ? pairs[h][frag::paired_a_pairs(lane) + r] : rec[h][frag::score_a_word(lane, r)];
        if (paired) CHECK(w == rec[h][frag::paired_a_word(lane, r)]);
        for (int by = 0; by < 4; by++) A[frag::a_row(lane, r)][frag::a_k(lane, r, by)] = byte_of(w, by);
      }
      const int key = frag::b_col(lane);
      for (int r = 0; r < 2; r++) {
        const uint32_t w =
            frag::score_b_bits(codes[key], paired ? frag::paired_b_word(lane, r) : frag::score_b_word(lane, r));
        for (int by = 0; by < 4; by++) B[frag::b_k(lane, r, by)][key] = int(uint8_t(w >> (8 * by)));
      }
      for (int r = 0; r < 4; r++) Dm[frag::c_row(lane, r)][frag::c_col(lane, r)] = r < 2 ? nx[h] : 0;
    }
    for (int i = 0; i < 16; i++)  // D += A·B, each sum exact
      for (int j = 0; j < 8; j++)
        for (int k = 0; k < 32; k++) Dm[i][j] += A[i][k] * B[k][j];
    // each lane's pairs against q4h_group_p's dp4a form: prep words of the codes against the record's planes
    int bad = 0;
    for (int lane = 0; lane < 32; lane++) {
      const int h = frag::score_head(lane);
      for (int i = 0; i < 2; i++) {
        const int key = frag::score_key(lane, i);
        const int lo = Dm[frag::c_row(lane, i)][frag::c_col(lane, i)];
        const int hi = Dm[frag::c_row(lane, 2 + i)][frag::c_col(lane, 2 + i)];
        CHECK(frag::c_col(lane, 2 + i) == key);
        CHECK(frag::c_row(lane, 2 + i) == h + 8);
        int wlo = nx[h], whi = 0;
        for (int w = 0; w < 4; w++) {
          uint32_t cw;
          std::memcpy(&cw, codes[key] + 4 * w, 4);
          const uint32_t x0 = cw & 0x0f0f0f0fu, x1 = (cw >> 4) & 0x0f0f0f0fu;  // prep<Q4H>: words 2w, 2w + 1
          wlo += dp4a(rec[h][2 * w], x0) + dp4a(rec[h][2 * w + 1], x1);
          whi += dp4a(rec[h][8 + 2 * w], x0) + dp4a(rec[h][8 + 2 * w + 1], x1);
        }
        bad += hi * 256 + lo != whi * 256 + wlo;
      }
    }
    REQUIRE(bad == 0);
  }
}
