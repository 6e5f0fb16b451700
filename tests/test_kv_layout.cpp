// The device cache's layout (cuda/kernels.h: kv_block, kv_row_offset, kv_row_stride, kv_cache_bytes and the host
// conversions to and from position order), host code: no GPU needed. Built where the CUDA engine is.
#include <doctest/doctest.h>

#if HKV_HAVE_CUDA
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "cuda/kernels.h"

using hkv::KvKind;
namespace hc = hkv::cuda;

TEST_CASE("kv layout: q4h in blocks of 512 positions, bf16 and fp8 in position order") {
  CHECK(hc::kv_block(KvKind::Q4H) == 512);
  CHECK(hc::kv_block(KvKind::BF16) == 1);
  CHECK(hc::kv_block(KvKind::FP8) == 1);
  // position order: row (p, h) at (p·KV + h)·rb
  for (int64_t p : {0, 1, 511, 512, 70000})
    for (int h = 0; h < 4; h++) CHECK(hc::kv_row_offset(p, h, 4, 272, 1) == size_t((p * 4 + h) * 272));
  // blocks: row (513, 2) of 4 heads, 144 bytes: block 1, head 2's stretch, its row 1
  CHECK(hc::kv_row_offset(513, 2, 4, 144, 512) == size_t(((1 * 4 + 2) * 512 + 1) * 144));
  CHECK(hc::kv_row_stride(4, 144, 512) == 144);
  CHECK(hc::kv_row_stride(4, 144, 1) == 576);
  CHECK(hc::kv_cache_bytes(1100, 4, 144, 512) == size_t(3 * 512 * 4 * 144));
  CHECK(hc::kv_cache_bytes(1100, 4, 144, 1) == size_t(1100 * 4 * 144));
}

TEST_CASE("kv layout: every row in its own place inside the cache, a chunk's rows a stride apart") {
  for (int B : {1, 512})
    for (int KV : {1, 2, 4}) {
      const size_t rb = 144;
      const int64_t npos = 1100;
      std::set<size_t> seen;
      for (int64_t p = 0; p < npos; p++)
        for (int h = 0; h < KV; h++) {
          const size_t o = hc::kv_row_offset(p, h, KV, rb, B);
          CHECK(o % rb == 0);
          CHECK(o + rb <= hc::kv_cache_bytes(npos, KV, rb, B));
          seen.insert(o);
          // the attention kernels read key c0 + j of a chunk (c0 a multiple of 512) at base + j·stride
          const int64_t c0 = p / 512 * 512;
          CHECK(o == hc::kv_row_offset(c0, h, KV, rb, B) + size_t(p - c0) * hc::kv_row_stride(KV, rb, B));
        }
      CHECK(seen.size() == size_t(npos * KV));
    }
}

TEST_CASE("kv layout: position order to blocks and back gives the same bytes; the last block's rest is zeros") {
  const int KV = 4;
  const size_t rb = 72;
  const int64_t npos = 1100;
  std::vector<uint8_t> rows(size_t(npos) * KV * rb);
  for (size_t i = 0; i < rows.size(); i++) rows[i] = uint8_t(1 + i * 131 % 251);
  for (int B : {1, 512}) {
    const std::vector<uint8_t> blocks = hc::kv_rows_to_blocks(rows.data(), npos, KV, rb, B);
    REQUIRE(blocks.size() == hc::kv_cache_bytes(npos, KV, rb, B));
    // each row where kv_row_offset puts it (a conversion pair that agreed on another layout would pass the round trip)
    bool placed = true;
    for (int64_t p = 0; p < npos; p++)
      for (int h = 0; h < KV; h++)
        placed = placed && std::memcmp(blocks.data() + hc::kv_row_offset(p, h, KV, rb, B),
                                       rows.data() + (size_t(p) * KV + size_t(h)) * rb, rb) == 0;
    CHECK(placed);
    std::vector<uint8_t> back(rows.size());
    hc::kv_blocks_to_rows(blocks.data(), back.data(), npos, KV, rb, B);
    CHECK(back == rows);
    size_t zeros = 0;
    for (uint8_t b : blocks) zeros += b == 0;
    CHECK(zeros == blocks.size() - rows.size());  // the rows' bytes are never 0 here
  }
}
#endif
