// Packing K and V rows into the cache: the bytes of kv_pack_row (reference/kvformat.cpp, docs/FORMAT.md).
//   bf16: bf16_from_f32 per element.
//   fp8:  per group of 32: amax (running `a > amax`, from +0), scale = f16(amax/448) as stored, code =
//         e4m3_from_f32(x/s) (0 when s == 0); codes, then the fp16 scales.
//   q4h:  per group of 32: the Walsh–Hadamard butterfly (warp_wht32), the first element of largest
//         magnitude (strict > in index order) as the extreme, the grid's own scale f16(extreme/−8), then the
//         scale searched (q4h_mse_bits): lane 8 + i takes candidate i of kv_pack_row's q4_group, sums its squared
//         error over the group in index order, and the warp keeps the first of the least in the oracle's order;
//         code = clamp(round_even_small(clamp(x/s, ±9)) + 8, 0, 15) from the scale s as stored (8 when s == 0);
//         element 2i in the low nibble of byte i, then the fp16 scales.
//   q4h-max (the oracle's ablation whose rows q4h's readers take unchanged): q4h with the grid's own scale, no search
//         (the kernels' instantiations with MSE false, which bf16 and fp8 take too).
// Non-finite input sets bit 1 of the error word, a scale overflowing fp16 bit 2; the row is not written.
// Launch: a block per (token, kv head, K or V), a warp a group (kv_pack_groups_kernel); prep_pack_kernel makes
// attn_prep's q and k and packs k and v in one launch (the engine's). A warp a row looping over the groups takes three
// times as long in the 27B shape (docs/PERFORMANCE.md).
#include <cstring>
#include <vector>

#include "cuda/check.h"
#include "cuda/device.cuh"
#include "cuda/kernels.h"

namespace hkv::cuda {
namespace {

// kv_row_offset with the format's block as a constant in each case, so that no thread divides by a
// runtime block size (the packing kernels take the format as an argument).
__device__ __forceinline__ size_t packed_row_offset(KvKind kind, int pos, int h, int KV, size_t row_bytes) {
  switch (kind) {
    case KvKind::BF16:
      return kv_row_offset(pos, h, KV, row_bytes, kv_block(KvKind::BF16));
    case KvKind::FP8:
      return kv_row_offset(pos, h, KV, row_bytes, kv_block(KvKind::FP8));
    default:
      return kv_row_offset(pos, h, KV, row_bytes, kv_block(KvKind::Q4H));
  }
}

__device__ __forceinline__ void put_u16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v & 0xff);
  p[1] = uint8_t(v >> 8);
}

// The fp16 bits of the scale of one group of 32 (lane holds element `lane`, rotated for q4h), as kv_pack_row: fp8,
// the largest magnitude (from +0) over 448; q4h, the element of largest magnitude (the first of equal ones) over −8.
// wanted (if not null): the scale before its rounding to fp16.
__device__ __forceinline__ uint16_t group_scale_bits(KvKind kind, float val, float* wanted_out = nullptr) {
  const float a = val < 0.0f ? -val : val;
  const float amax = warp_max(a > 0.0f ? a : 0.0f);  // +0 start, as the oracle's running maximum
  float wanted;
  if (kind == KvKind::FP8) {
    wanted = amax / 448.0f;
  } else {
    float extreme = 0.0f;
    if (amax > 0.0f) {
      unsigned hits = __ballot_sync(kFull, a == amax);
      extreme = __shfl_sync(kFull, val, __ffs(int(hits)) - 1);
    }
    wanted = extreme / -8.0f;
  }
  if (wanted_out) *wanted_out = wanted;
  return hkv::f16_from_f32(wanted);
}

// q4h's scale (kv_pack_row's q4_group with mse): the grid's own (bits0, from wanted; no search when it reads 0),
// then f16(wanted·(1 + i/32)) for i = −8 … 8 but 0, a candidate passed over when it overflows fp16 or reads 0. Lane
// 8 + i takes candidate i (lane 8 the grid's own) and sums q4_0_sq_err over the group's 32 elements in index order
// (element j from lane j by a shuffle), in float64 as the oracle; the warp takes the least sum, and of equal ones the
// first in the oracle's order: the grid's own, then i = −8, −7, …, 8.
__device__ __forceinline__ uint16_t q4h_mse_bits(float val, int lane, float wanted, uint16_t bits0) {
  if (hkv::f32_from_f16(bits0) == 0.0f) return bits0;
  const uint16_t bits = lane == 8 ? bits0 : hkv::f16_from_f32(wanted * (1.0f + float(lane - 8) / 32.0f));
  const float c = hkv::f32_from_f16(bits);
  const bool valid = lane <= 16 && (bits & 0x7c00u) != 0x7c00u && c != 0.0f;
  double err = 0.0;
  for (int j = 0; j < 32; j++) {
    const float y = __shfl_sync(kFull, val, j);
    if (valid) err += hkv::q4_0_sq_err(y, c);
  }
  double least = valid ? err : __longlong_as_double(0x7ff0000000000000ll);  // +inf
  for (int o = 16; o > 0; o >>= 1) least = fmin(least, __shfl_xor_sync(kFull, least, o));
  const unsigned hits = __ballot_sync(kFull, valid && err == least);
  const int winner = (hits >> 8) & 1u ? 8 : __ffs(int(hits)) - 1;
  return uint16_t(__shfl_sync(kFull, unsigned(bits), winner));
}

// Group g's codes and its scale (bits, not an overflow) into the row at out (D elements): fp8, e4m3 of val / s; q4h,
// round_even of val / s clamped to [−9, 9], + 8, clamped to [0, 15], two codes a byte (even element low).
__device__ __forceinline__ void store_group(KvKind kind, uint8_t* out, int D, int g, int lane, float val,
                                            uint16_t bits) {
  const float s = hkv::f32_from_f16(bits);
  if (kind == KvKind::FP8) {
    out[g * 32 + lane] = s == 0.0f ? uint8_t(0) : hkv::e4m3_from_f32(val / s);
    if (lane == 0) put_u16(out + D + 2 * g, bits);
  } else {
    const int c = s == 0.0f ? 8 : hkv::q4_0_code(val, s);
    const int hi = __shfl_down_sync(kFull, c, 1);
    if ((lane & 1) == 0) out[(g * 32 + lane) / 2] = uint8_t(c | (hi << 4));
    if (lane == 0) put_u16(out + D / 2 + 2 * g, bits);
  }
}

// A row of D elements (thread tid of the block holding element tid: lane tid % 32 of group tid / 32) into out, the
// body of kv_pack_groups_kernel below: the row's finiteness checked by the block first, and every group's scale
// before any byte is written.
template <bool MSE>
__device__ __forceinline__ void pack_row_groups(KvKind kind, float val, uint8_t* out, int D, int* err) {
  const int tid = threadIdx.x, lane = tid & 31, g = tid >> 5;
  if (__syncthreads_or(!hkv::is_finite(val))) {
    if (tid == 0) atomicOr(err, 1);
    return;
  }
  if (kind == KvKind::BF16) {
    put_u16(out + 2 * tid, hkv::bf16_from_f32(val));
    return;
  }
  if (kind == KvKind::Q4H) val = warp_wht32(val, lane);
  float wanted;
  uint16_t bits = group_scale_bits(kind, val, &wanted);
  if (__syncthreads_or((bits & 0x7c00u) == 0x7c00u)) {
    if (tid == 0) atomicOr(err, 2);
    return;
  }
  if (MSE && kind == KvKind::Q4H) bits = q4h_mse_bits(val, lane, wanted, bits);
  store_group(kind, out, D, g, lane, val, bits);
}

// kv_pack_row with one warp a group: block (token, kv head, K or V) of 32·(D/32) threads, warp g taking group g, the
// same operations in the same order. The row's finiteness is checked by the block first, and every group's scale
// before any byte is written, so a row with a non-finite element or a scale overflowing fp16 is not written at all.
template <bool MSE>
__global__ void kv_pack_groups_kernel(KvKind kind, const float* k, int64_t ldk, const float* v, int64_t ldv,
                                      uint8_t* const* kdst, uint8_t* const* vdst, const int* pos, int KV, int D,
                                      size_t row_bytes, int* err) {
  pdl_wait();  // launch_k (device.cuh): nothing is read or written before the kernel ahead has completed
  const int tid = threadIdx.x, h = blockIdx.y, which = blockIdx.z;
  const int64_t row = blockIdx.x;
  const float* x = which == 0 ? k + row * ldk + int64_t(h) * D : v + row * ldv + int64_t(h) * D;
  uint8_t* out = (which == 0 ? kdst[row] : vdst[row]) + packed_row_offset(kind, pos[row], h, KV, row_bytes);
  pack_row_groups<MSE>(kind, x[tid], out, D, err);  // element tid: lane `lane` of group g
}

// attn_prep and kv_pack in one launch: block (token, head) of D threads over H query heads, KV key
// heads and KV value heads. A query head: warp 0 norms and ropes it (norm_rope_head, as attn_prep_kernel) into q. A
// key head: warp 0 norms and ropes it in place in k (as attn_prep_kernel), then the block packs the values it left in
// shared memory (pack_row_groups, as kv_pack_groups_kernel, which reads the same floats back from k). A value head:
// the block packs v's row. The same operations in the same order as the two launches.
template <bool MSE>
__global__ void prep_pack_kernel(const float* qg, float* q, float* k, const float* v, int64_t ldv, const float* q_norm,
                                 const float* k_norm, const float* rope, int H, int KV, int D, int rd, float eps,
                                 KvKind kind, uint8_t* const* kdst, uint8_t* const* vdst, const int* pos,
                                 size_t row_bytes, int* err, bool trigger) {
  pdl_wait();  // launch_k (device.cuh): nothing is read or written before the kernel ahead has completed
  // trigger (attn_prep_pack: always): the attention's chunk kernel may launch now and copy the cache rows this launch
  // does not write (every kernel before this one has completed); it waits for this grid before reading anything else
  if (trigger) pdl_trigger();
  __shared__ float buf[1024];
  const int tid = threadIdx.x, hh = blockIdx.y;
  const int64_t row = blockIdx.x;
  if (hh < H + KV) {
    if (tid < 32) {
      const bool isq = hh < H;
      const float* src =
          isq ? qg + row * int64_t(H) * 2 * D + int64_t(hh) * 2 * D : k + row * int64_t(KV) * D + int64_t(hh - H) * D;
      float* dst = isq ? q + row * int64_t(H) * D + int64_t(hh) * D : const_cast<float*>(src);
      norm_rope_head(src, dst, isq ? q_norm : k_norm, rope + row * rd, D, rd, eps, buf, tid);
    }
    if (hh < H) return;
    __syncthreads();  // warp 0's buf
    const int h = hh - H;
    pack_row_groups<MSE>(kind, buf[tid], kdst[row] + packed_row_offset(kind, pos[row], h, KV, row_bytes), D, err);
    return;
  }
  const int h = hh - H - KV;
  pack_row_groups<MSE>(kind, v[row * ldv + int64_t(h) * D + tid],
                       vdst[row] + packed_row_offset(kind, pos[row], h, KV, row_bytes), D, err);
}

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Random but valid rows: bf16 values of magnitude < 2, fp8 codes below 0x70 with scale 2^-7, q4h codes of
// any value with scale 2^-4.
__global__ void kv_fill_kernel(KvKind kind, uint8_t* cache, int64_t nbytes, size_t row_bytes, int D, uint64_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nbytes; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t off = i % int64_t(row_bytes);
    const uint8_t r = uint8_t(mix64(seed * 0x9e3779b97f4a7c15ull + uint64_t(i)));
    uint8_t b = r;
    if (kind == KvKind::BF16)
      b = (off & 1) ? uint8_t(0x3f | (r & 0x80)) - (r & 1) : r;  // exponent ~2^0
    else if (kind == KvKind::FP8)
      b = off < D ? uint8_t(r & 0xef) : ((off - D) & 1 ? 0x20 : 0x00);  // |code| <= 0x6f, f16 2^-7
    else
      b = off < D / 2 ? r : ((off - D / 2) & 1 ? 0x2c : 0x00);  // f16 0x2c00 = 2^-4
    cache[i] = b;
  }
}

// The bytes of a stored row of D elements in the cache format of `kind` (kv_row_bytes of that format).
size_t stored_row_bytes(KvKind kind, int D) {
  return kv_row_bytes(kind == KvKind::BF16  ? KvFormat::bf16()
                      : kind == KvKind::FP8 ? KvFormat::fp8()
                                            : KvFormat::q4h(),
                      D);
}

}  // namespace

void kv_pack(const KvFormat& f, const float* k, int64_t ldk, const float* v, int64_t ldv, uint8_t* const* kdst,
             uint8_t* const* vdst, const int* pos, int64_t N, int KV, int D, int* err, cudaStream_t st,
             const Tuning& tu) {
  if (N <= 0) return;
  if (!f.engine_runs()) throw std::runtime_error("kv_pack: '" + f.name() + "' is an oracle-only ablation");
  if (D % 32 != 0 || D > 1024) throw std::runtime_error("kv_pack: head_dim must be a multiple of 32, at most 1024");
  const size_t rb = stored_row_bytes(f.kind, D);
  launch_k(tu.pdl_all, f.mse ? kv_pack_groups_kernel<true> : kv_pack_groups_kernel<false>,
           dim3(unsigned(N), unsigned(KV), 2), dim3(unsigned(D)), 0, st, f.kind, k, ldk, v, ldv, kdst, vdst, pos, KV, D,
           rb, err);
}

void attn_prep_pack(const float* qg, float* q, float* k, const float* v, int64_t ldv, const float* q_norm,
                    const float* k_norm, const float* rope, int64_t N, int H, int KV, int D, int rd, float eps,
                    const KvFormat& f, uint8_t* const* kdst, uint8_t* const* vdst, const int* pos, int* err,
                    cudaStream_t st, const Tuning& tu) {
  if (N <= 0) return;
  if (!f.engine_runs()) throw std::runtime_error("attn_prep_pack: '" + f.name() + "' is an oracle-only ablation");
  if (D % 32 != 0 || D > 1024)
    throw std::runtime_error("attn_prep_pack: head_dim must be a multiple of 32, at most 1024");
  launch_k(tu.pdl_all, f.mse ? prep_pack_kernel<true> : prep_pack_kernel<false>,
           dim3(unsigned(N), unsigned(H + 2 * KV)), dim3(unsigned(D)), 0, st, qg, q, k, v, ldv, q_norm, k_norm, rope, H,
           KV, D, rd, eps, f.kind, kdst, vdst, pos, stored_row_bytes(f.kind, D), err, true);
}

std::vector<uint8_t> kv_rows_to_blocks(const uint8_t* rows, int64_t npos, int KV, size_t rb, int B) {
  std::vector<uint8_t> blocks(kv_cache_bytes(npos, KV, rb, B), 0);
  for (int64_t p = 0; p < npos; p++)
    for (int h = 0; h < KV; h++)
      std::memcpy(blocks.data() + kv_row_offset(p, h, KV, rb, B), rows + (size_t(p) * size_t(KV) + size_t(h)) * rb, rb);
  return blocks;
}

void kv_blocks_to_rows(const uint8_t* blocks, uint8_t* rows, int64_t npos, int KV, size_t rb, int B) {
  for (int64_t p = 0; p < npos; p++)
    for (int h = 0; h < KV; h++)
      std::memcpy(rows + (size_t(p) * size_t(KV) + size_t(h)) * rb, blocks + kv_row_offset(p, h, KV, rb, B), rb);
}

void kv_fill_random(KvKind kind, uint8_t* cache, int64_t npos, int KV, int D, uint64_t seed, cudaStream_t st) {
  const size_t rb = stored_row_bytes(kind, D);
  const int64_t nbytes = int64_t(kv_cache_bytes(npos, KV, rb, kv_block(kind)));
  if (nbytes <= 0) return;
  kv_fill_kernel<<<4096, 256, 0, st>>>(kind, cache, nbytes, rb, D, seed);
  HKV_CHECK_LAUNCH();
}

}  // namespace hkv::cuda
