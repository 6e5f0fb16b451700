// Device-side building blocks shared by the kernels: the canonical warp reductions and the 32-point
// Walsh–Hadamard transform, each the same IEEE operations in the same order as the oracle's loops.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "cuda/check.h"
#include "cuda/kernels.h"
#include "reference/scalar.h"

namespace hkv::cuda {

constexpr unsigned kFull = 0xffffffffu;

// The --phases diagnostics' counters: a __device__ array of N − 1 sums of cycles over the counted blocks, then the
// number of blocks counted. phase_sums_zero before the counted launches; phase_sums_mean after them (it waits for the
// device): each sum divided by the blocks (0 when none was counted), and last the blocks.
template <size_t N>
void phase_sums_zero(const unsigned long long (&sums)[N]) {
  const unsigned long long zero[N] = {};
  HKV_CUDA_CHECK(cudaMemcpyToSymbol(sums, zero, sizeof(zero)));
}
template <size_t N>
std::array<double, N> phase_sums_mean(const unsigned long long (&sums)[N]) {
  HKV_CUDA_CHECK(cudaDeviceSynchronize());
  unsigned long long c[N];
  HKV_CUDA_CHECK(cudaMemcpyFromSymbol(c, sums, sizeof(c)));
  std::array<double, N> m{};
  m[N - 1] = double(c[N - 1]);
  if (c[N - 1] != 0)
    for (size_t i = 0; i + 1 < N; i++) m[i] = double(c[i]) / m[N - 1];
  return m;
}

// (w & MASK) | EXP as one lop3: a LOP3 instruction takes one immediate, and written in C++ with two constants
// ptxas issues two LOP3s; given the lop3, it keeps one constant in a register (hoisted out of loops) and
// issues one. The q4h value pair of the attention (value_pair) extracts its codes' exact floats by it.
template <uint32_t MASK, uint32_t EXP>
__device__ __forceinline__ uint32_t masked_or(uint32_t w) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w), "n"(MASK), "n"(EXP));  // 0xEA: (a & b) | c
  return r;
}

// Stored cache values by the card's conversion instructions rather than hkv::f32_from_f16/f32_from_e4m3's
// integer code (which the compiler turns into ~15 instructions and two branches an element). Both give
// the same float for every finite f16 and every e4m3 code but the NaN 0x7f/0xff: cvt.f32.f16 without .ftz
// converts subnormals exactly, and every e4m3 value (2^-9 multiples to 448) is an f16. A packed row never
// holds a non-finite scale or a NaN code (kv_pack refuses an overflowing scale and saturates codes to
// ±448; docs/FORMAT.md), so no stored value converts differently.
__device__ __forceinline__ float f32_from_f16_hw(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float f32_from_e4m3_hw(uint8_t c) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), __NV_E4M3)));
}

// A byte, or a 2-byte aligned half-word, of a packed cache row: from shared memory when SMEM (staged rows),
// else through the read-only cache.
template <bool SMEM = false>
__device__ __forceinline__ uint16_t load_u16(const uint8_t* p) {
  if constexpr (SMEM)
    return *reinterpret_cast<const unsigned short*>(p);
  else
    return __ldg(reinterpret_cast<const unsigned short*>(p));
}
template <bool SMEM = false>
__device__ __forceinline__ uint8_t load_u8(const uint8_t* p) {
  if constexpr (SMEM)
    return *p;
  else
    return __ldg(p);
}

// Element d of a packed cache row (docs/FORMAT.md; rows 2-byte aligned: even row bytes) as the stored value
// s_g · u_d, exact (attend(); bf16: 1 · u); the decode attention's values and the fast prefill's decoded rows.
// q4h u = c − 8, exactly, in one lop3 and one add: the nibble masked where it lies in its byte (0x0f for even
// d, 0xf0 for odd), under an exponent that makes the nibble's low bit worth 1 (2^23 for bit 0, 2^19 for bit 4),
// so as_float((b & mask) | exponent) = 2^e + c; minus 2^e + 8. Mask, exponent and offset depend on d alone and
// leave a key loop (shifting the odd nibble down first takes a SHF and a second LOP3).
template <KvKind F, bool SMEM = false>
__device__ __forceinline__ float value_at(const uint8_t* row, int D, int d) {
  if constexpr (F == KvKind::BF16) {
    return 1.0f * hkv::f32_from_bf16(load_u16<SMEM>(row + 2 * d));
  } else if constexpr (F == KvKind::FP8) {
    return f32_from_f16_hw(load_u16<SMEM>(row + D + 2 * (d / 32))) * f32_from_e4m3_hw(load_u8<SMEM>(row + d));
  } else {
    const bool odd = d & 1;
    const uint32_t mask = odd ? 0xf0u : 0x0fu, expo = odd ? 0x49000000u : 0x4b000000u;
    const float off = odd ? 524296.0f : 8388616.0f;
    const uint32_t b = load_u8<SMEM>(row + d / 2);
    return f32_from_f16_hw(load_u16<SMEM>(row + D / 2 + 2 * (d / 32))) * (__uint_as_float((b & mask) | expo) - off);
  }
}

// lane_tree32 (reference/weights.cpp): for off = 16, 8, 4, 2, 1: a[l] = a[l] + a[l + off]. The xor
// butterfly computes a[l] + a[l ^ off] in every lane; IEEE addition is commutative, so every lane ends
// with exactly the tree's value.
__device__ __forceinline__ float warp_tree_sum(float v) {
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) v = v + __shfl_xor_sync(kFull, v, off);
  return v;
}

// One lane's share of a 32-element chunk's block fixed point (reference/scalar.h, x_chunks), the whole warp together,
// lane j holding x_j: X_j = xq_int(x_j, e, TOP) and, as bits, the chunk's unit (0 for a chunk of zeros, the NaN
// 0x7fc00000 for one holding an inf or NaN, whose X are 0: a NaN held in a float register nvcc writes as 0x7fffffff,
// H200, 2026-11-30). TOP 21: the MLX4 products' records (xq_chunk); 13: the q4h scores' query (q4h_record).
template <int TOP>
__device__ __forceinline__ int32_t xq_lane(float v, uint32_t& unit, bool& bad) {
  const uint32_t mb = __reduce_max_sync(kFull, hkv::f32_bits(v) & 0x7fffffffu);  // finite: ordered as floats
  int32_t X = 0;
  unit = 0u;
  bad = mb >= 0x7f800000u;
  if (bad) {
    unit = 0x7fc00000u;  // canonical_nan()
  } else if (mb != 0) {
    const int e = hkv::xq_exponent(mb);
    X = hkv::xq_int(v, e, TOP);
    unit = hkv::f32_bits(hkv::xq_unit(e, TOP));
  }
  return X;
}
// The byte of element j (lane j) in a record's first byte plane of 8 words, the planes 32 bytes apart: word
// 2·(j/8) + j%2, byte (j%8)/2, so that word 2t holds elements 8t, 8t+2, 8t+4, 8t+6 and word 2t+1 elements 8t+1, …,
// 8t+7: the low and the high nibbles of a 4-bit word t (matvec's MLX4 weights, q4h's codes) as bytes.
__device__ __forceinline__ uint8_t* xq_plane_byte(uint32_t* rec, int lane) {
  return reinterpret_cast<uint8_t*>(rec) + 4 * (2 * (lane >> 3) + (lane & 1)) + ((lane & 7) >> 1);
}

// The MLX4 products' record of one 32-element chunk of x (reference/weights.cpp x_chunks, ARITHMETIC.md
// §2): kXqWords words (128 bytes). X_j = round_even(x_j · 2^(21−e)) as a two's complement int32 split into
// three bytes p = 0, 1, 2 (bits 0–7, 8–15, 16–23; the top one signed, −64..64); word 8p + 2k + h holds in
// its byte b the byte p of element 8k + h + 2b: the element that byte b of (code word k >> 4h) & 0x0f0f0f0f
// carries, so one dp4a of a masked code word with a record word is 4 products and a sum. Word 24: the chunk
// sum (x_0 + x_1 + … in index order, from 0.0f); word 25: the unit 2^(e−21) (0 and X = 0 for a chunk of
// zeros; a chunk holding an inf or NaN has X = 0 and the sum and the unit both the NaN 0x7fc00000, as
// hardware NaN payloads differ); words 26–31: zero (the records are read as whole
// 128-byte lines). Written by one warp, lane j holding x_j of the chunk, which is also at c4 in shared
// memory (8 float4, written before a __syncwarp): every lane reads the 32 values from there (broadcast
// loads) and adds them in index order. (By 32 shuffles a chunk instead, the 32 warps of the norm kernel
// waited on the multiprocessor's shuffle unit.)
__device__ __forceinline__ void xq_chunk(float v, const float4* c4, uint32_t* rec) {
  const int lane = threadIdx.x & 31;
  float s = 0.0f;
#pragma unroll
  for (int q = 0; q < 8; q++) {
    const float4 t = c4[q];
    s = s + t.x;
    s = s + t.y;
    s = s + t.z;
    s = s + t.w;
  }
  uint32_t unit;
  bool bad;  // an inf or NaN: the sum and the unit are the one NaN
  const int32_t X = xq_lane<21>(v, unit, bad);
  uint8_t* bytes = xq_plane_byte(rec, lane);
#pragma unroll
  for (int p = 0; p < 3; p++) bytes[32 * p] = uint8_t(uint32_t(X) >> (8 * p));
  if (lane >= 24) rec[lane] = lane == 24 ? (bad ? 0x7fc00000u : hkv::f32_bits(s)) : lane == 25 ? unit : 0u;
}

// warp_sum_squares (below) of n floats in shared memory, 16-byte aligned: the whole 4-float chunks as 16-byte loads
// (unrolled by 8), then, with TAIL, a last short chunk element by element (TAIL false: n a multiple of 4); the same
// chains and tree. Called by a whole warp.
template <bool TAIL = true>
__device__ __forceinline__ float warp_sum_squares_smem(const float* x, int n, int lane) {
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float acc = 0.0f;
  int c = lane;
#pragma unroll 8
  for (; TAIL ? 4 * c + 3 < n : 4 * c < n; c += 32) {
    const float4 v = x4[c];
    acc = hkv::fma_rn(v.x, v.x, acc);
    acc = hkv::fma_rn(v.y, v.y, acc);
    acc = hkv::fma_rn(v.z, v.z, acc);
    acc = hkv::fma_rn(v.w, v.w, acc);
  }
  if constexpr (TAIL)
    for (int j = 4 * c; j < n; j++) acc = hkv::fma_rn(x[j], x[j], acc);  // a last short chunk (n % 4 != 0)
  return warp_tree_sum(acc);
}

// sum_squares (reference/weights.cpp): lane l takes 4-float chunks l, l+32, …, an fma chain in index
// order, then the lane tree. Called by a whole warp; every lane gets the result.
__device__ __forceinline__ float warp_sum_squares(const float* x, int64_t n, int lane) {
  float acc = 0.0f;
  for (int64_t c = lane; c * 4 < n; c += 32)
    for (int64_t j = c * 4; j < c * 4 + 4 && j < n; j++) acc = hkv::fma_rn(x[j], x[j], acc);
  return warp_tree_sum(acc);
}

// One attention head's q_norm or k_norm, then RoPE, by one warp (attn_prep): r = rsqrt_c(sum_squares(src) / D + eps),
// buf[i] = (src[i]·r)·(1 + w[i]), then rotate_half over the first rd elements with the row's table (cos[rd/2] then
// sin[rd/2]), then dst = buf. buf: D floats of shared memory; src and dst may be the same.
__device__ __forceinline__ void norm_rope_head(const float* src, float* dst, const float* w, const float* cs, int D,
                                               int rd, float eps, float* buf, int lane) {
  const float r = hkv::rsqrt_c(warp_sum_squares(src, D, lane) / float(D) + eps);
  for (int i = lane; i < D; i += 32) buf[i] = (src[i] * r) * (1.0f + w[i]);
  __syncwarp();
  const int half = rd / 2;
  const float* sn = cs + half;
  for (int i = lane; i < half; i += 32) {
    float a = buf[i], b = buf[i + half];
    buf[i] = hkv::fma_rn(a, cs[i], -(b * sn[i]));
    buf[i + half] = hkv::fma_rn(b, cs[i], a * sn[i]);
  }
  __syncwarp();
  for (int i = lane; i < D; i += 32) dst[i] = buf[i];
}

// wht_inplace for n = 32 (reference/kvformat.cpp), one element per lane: butterflies h = 1, 2, 4, 8, 16
// over pairs (j, j+h): (a, b) -> (a + b, a − b), then × fp32(1/sqrt(32)) = 0x3e3504f3.
__device__ __forceinline__ float warp_wht32(float v, int lane) {
#pragma unroll
  for (int h = 1; h < 32; h *= 2) {
    float o = __shfl_xor_sync(kFull, v, h);
    v = (lane & h) ? (o - v) : (v + o);
  }
  return v * __int_as_float(0x3e3504f3);
}

// Programmatic dependent launch (sm_90). A kernel launched with the programmatic-serialization attribute
// may start while the kernel before it in the stream still runs: pdl_wait() blocks until that kernel has
// completed and its writes are visible (a no-op for a kernel launched the ordinary way), so a dependent
// touches nothing that kernel writes or reads before it. pdl_trigger() lets this kernel's dependent launch
// now (it still waits for this kernel in its pdl_wait); without it the dependent launches at completion.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" :::);
#endif
}
// kernel<<<grid, block, smem, st>>>(args…) as a programmatic dependent launch: the kernel must call pdl_wait()
// before it touches anything the kernel ahead of it writes or reads.
// launch_k(pdl, kernel, grid, block, smem, stream, args…): launch_pdl where pdl (Tuning's pdl_all, on by default),
// else kernel<<<grid, block, smem, stream>>>(args…). Every kernel launched through it begins with pdl_wait(): only its
// launch and the ramp of its blocks overlap the tail of the kernel ahead.
template <class... P, class... A>
void launch_pdl(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, A... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = st;
  cfg.attrs = attr, cfg.numAttrs = 1;
  HKV_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}
template <class... P, class... A>
void launch_k(bool pdl, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, A... args) {
  if (pdl) {
    launch_pdl(kernel, grid, block, smem, st, args...);
  } else {
    kernel<<<grid, block, smem, st>>>(args...);
    HKV_CHECK_LAUNCH();
  }
}

// The 128-byte line holding p into L2 (no register written, nothing waited for).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

// One token of the causal depthwise conv of a DeltaNet channel (reference/model.cpp linear_attention):
// acc = fma chain of w[j]·s[j] over the K − 1 window entries (oldest first) from 0, then fma(w[K−1], x, acc),
// and silu_c of it; the window then shifts by one and takes x. s and w hold up to MK entries (K ≤ MK).
template <int MK>
__device__ __forceinline__ float conv_step(float (&s)[MK], const float (&w)[MK], int K, float x) {
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < MK - 1; j++)
    if (j < K - 1) acc = hkv::fma_rn(w[j], s[j], acc);
  float wl = w[0];
#pragma unroll
  for (int j = 0; j < MK; j++)
    if (j == K - 1) wl = w[j];
  acc = hkv::fma_rn(wl, x, acc);
#pragma unroll
  for (int j = 0; j + 1 < MK - 1; j++)
    if (j + 1 < K - 1) s[j] = s[j + 1];
#pragma unroll
  for (int j = 0; j < MK - 1; j++)
    if (j == K - 2) s[j] = x;
  return hkv::silu_c(acc);
}

// mbarriers and bulk copies (sm_90: the fast prefill's wg2 form, the decode attention's bulk form). Empty in a build
// for an older card, where the kernels that use them are never launched (fast_attn_wgmma_built, attn_bulk_built).
// An mbarrier in shared memory counts arrivals and bytes of copies in flight (tx); its phase completes when
// both reach zero, and waiters poll the parity of the phase they wait for.
__device__ __forceinline__ uint32_t saddr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
// This thread's accesses to shared memory so far, ordered before the async proxy's (bulk copies, wgmma) after it.
__device__ __forceinline__ void async_proxy_fence() {
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(saddr(bar)), "r"(count) : "memory");
#endif
}
// The initialized barriers, visible to the async proxy (the bulk copies that complete on them).
__device__ __forceinline__ void mbar_init_fence() {
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// This thread's arrival, and `bytes` more expected from copies in this phase.
__device__ __forceinline__ void mbar_arrive_expect(uint64_t* bar, uint32_t bytes) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(saddr(bar)), "r"(bytes) : "memory");
#endif
}
// Whether the phase of parity `parity` has completed (the hardware may wait a while before it answers no).
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 1;
#if __CUDA_ARCH__ >= 900
  asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(done)
               : "r"(saddr(bar)), "r"(parity)
               : "memory");
#endif
  return done != 0;
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}
// `bytes` (a multiple of 16, both addresses 16-aligned) from global to this block's shared memory by the copy
// engine; its completion counts the bytes off bar's tx.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(saddr(dst)),
      "l"(src), "r"(bytes), "r"(saddr(bar))
      : "memory");
#endif
}

// cp.async (sm_80+): 16 bytes from global to shared memory without a register; commit_group closes
// a group, wait_group<N> waits until at most N of the thread's groups are in flight. A thread sees its own
// copies after the wait; other threads' copies after the wait and a barrier.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(uint32_t(__cvta_generic_to_shared(smem))),
               "l"(gmem));
}
// The same, or 16 zero bytes when !valid (the source is then not read, but must be a valid address).
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(uint32_t(__cvta_generic_to_shared(smem))),
               "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Element (r, c) of a weight matrix as Matrix::at gives it: the stored value converted exactly to binary32;
// MLX4 as fma(scale, q, bias) of its group.
__device__ __forceinline__ float dmat_at(const DMat& W, int64_t r, int64_t c) {
  const int64_t n = W.cols;
  switch (W.type) {
    case WType::F32:
      return static_cast<const float*>(W.data)[r * n + c];
    case WType::BF16:
      return hkv::f32_from_bf16(static_cast<const uint16_t*>(W.data)[r * n + c]);
    case WType::F16:
      return hkv::f32_from_f16(static_cast<const uint16_t*>(W.data)[r * n + c]);
    case WType::MLX4: {
      const uint32_t word = static_cast<const uint32_t*>(W.data)[r * (n / 8) + c / 8];
      const uint32_t nib = (word >> (4 * (c % 8))) & 0xfu;
      const int64_t g = r * (n / W.group) + c / W.group;
      return hkv::fma_rn(hkv::f32_from_bf16(W.scales[g]), float(nib), hkv::f32_from_bf16(W.biases[g]));
    }
  }
  return 0.0f;
}

// The oracle's running maximum `m = e > m ? e : m`, as a combining step.
__device__ __forceinline__ float max_step(float m, float e) { return e > m ? e : m; }

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) v = max_step(v, __shfl_xor_sync(kFull, v, off));
  return v;
}

}  // namespace hkv::cuda
