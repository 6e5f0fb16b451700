// A probe for a proposed contract (not a test of hkv, not built into hkv): the value phase of q4h decode attention with
// integer products on the tensor cores, the other half of tests/probe_q4h_int_scores.cu. The contract measured on the
// CPU (docs/RESULTS.md §12), for a 512-key chunk, a query head h and a group g of 32 dims:
//   w_t = e_t · s_{t,g} (one fp32 multiplication: the key's weight exp_c(score_t − m_c) times its fp16 scale);
//   e = xq_exponent of the chunk's largest |w_t|;  W_t = xq_int(w_t, e) (|W| ≤ 2^22, reference/scalar.h);
//   o_c[d] = float(Σ_t W_t·(c_{t,d} − 8)) · xq_unit(e)   (the sum exact, in 64 bits; float() rounds once).
// The probe takes one layer's V cache (4 KV heads × n keys, the 27B shape) and weights e for the 6 query heads of
// each KV head, and computes every o_c. A block is a chunk and a KV head; warp w takes group w (dims 32w … 32w + 31):
// it finds each head's exponent over the chunk, then for each 32 keys makes W's three byte planes (B: keys × heads)
// and the codes transposed to dims × keys (A: a 16-dim tile's row g is dim 2g, row g + 8 dim 2g + 1, so that one byte
// of a row holds both), and sums with mma.sync.m16n8k32 (codes u8; planes 0, 1 u8, plane 2 s8) over the chunk's 512
// keys; the −8·ΣW and the planes meet in 64 bits at the end. It checks a sample of chunks against the host (bits
// equal), then times the kernel: µs a layer against the V bytes over the card's copy bandwidth. A second kernel reads
// the same cache stored keys along k (int_values_t, a hypothetical layout), checked and timed the same way.
// Build: cuda/run_gpu_suite.sh probe-q4h-int-values (the project's flags), or
// nvcc -arch=sm_90a -O3 -std=c++17 --fmad=false -I. tests/probe_q4h_int_values.cu.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "reference/scalar.h"
#include "tests/probe_util.cuh"

namespace {

constexpr int D = 256, G = 8, HQ = 6, KV = 4, ROW = 144, CH = 512;

__device__ __forceinline__ uint32_t abs_bits(float x) { return __float_as_uint(x) & 0x7fffffffu; }

// acc[p] += A·B_p for W's three byte planes (codes u8; planes 0 and 1 u8, plane 2 s8)
__device__ __forceinline__ void sum_planes(int (&acc)[3][4], const uint32_t (&a)[4], const uint32_t (&b)[3][2]) {
  probe::imma_acc<false>(acc[0], a, b[0][0], b[0][1]);
  probe::imma_acc<false>(acc[1], a, b[1][0], b[1][1]);
  probe::imma_acc<true>(acc[2], a, b[2][0], b[2][1]);
}

// W of key i (0..3) of a B register pair half into its three planes' bytes i
__device__ __forceinline__ void put_w(uint32_t (&b)[3][2], int half, int i, int32_t W) {
#pragma unroll
  for (int p = 0; p < 3; p++) b[p][half] |= ((uint32_t(W) >> (8 * p)) & 0xffu) << (8 * i);
}

// The closing steps of both kernels: ΣW and the exponent of heads 2t and 2t + 1 (held by lanes 4·head + t'), then
// S = D0 + 256·D1 + 65536·D2 − 8·ΣW in 64 bits, o = float(S)·unit.
__device__ __forceinline__ void close_values(const int (&acc)[2][3][4], long long sumw, uint32_t mb, int ex, int kv,
                                             int w, int gg, int t, int64_t n, float* O) {
  sumw += __shfl_xor_sync(0xffffffffu, sumw, 1);
  sumw += __shfl_xor_sync(0xffffffffu, sumw, 2);
  const int src0 = min(2 * t, HQ - 1) * 4, src1 = min(2 * t + 1, HQ - 1) * 4;
  const long long sw[2] = {__shfl_sync(0xffffffffu, sumw, src0), __shfl_sync(0xffffffffu, sumw, src1)};
  const uint32_t mbs[2] = {__shfl_sync(0xffffffffu, mb, src0), __shfl_sync(0xffffffffu, mb, src1)};
  const int exs[2] = {__shfl_sync(0xffffffffu, ex, src0), __shfl_sync(0xffffffffu, ex, src1)};
  if (t < 3) {
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
      for (int i = 0; i < 4; i++) {  // D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1]
        const int h = 2 * t + (i & 1), d = 32 * w + 16 * mt + 2 * gg + (i >> 1);
        const long long S =
            (long long)acc[mt][0][i] + 256ll * acc[mt][1][i] + 65536ll * acc[mt][2][i] - 8ll * sw[i & 1];
        const float o = mbs[i & 1] ? __ll2float_rn(S) * hkv::xq_unit(exs[i & 1]) : 0.0f;
        O[((int64_t(kv) * HQ + h) * (n / CH) + blockIdx.x) * D + d] = o;
      }
  }
}

// V: [n][KV][ROW]; E: [KV][HQ][n] weights; O: [KV][HQ][n / 512][D]. Block (chunk, kv), 8 warps; shared memory: the
// chunk's 512 rows (73,728 bytes) and its weights (6 × 512 floats).
__global__ void __launch_bounds__(256, 2) int_values(const uint8_t* V, const float* E, int64_t n, float* O) {
  extern __shared__ uint4 sm[];
  uint8_t* rows = reinterpret_cast<uint8_t*>(sm);
  float* ew = reinterpret_cast<float*>(rows + CH * ROW);  // [HQ][CH]
  const int kv = blockIdx.y, lane = threadIdx.x & 31, w = threadIdx.x >> 5, gg = lane >> 2, t = lane & 3;
  const int64_t c0 = int64_t(blockIdx.x) * CH;
  for (int i = threadIdx.x; i < CH * 9; i += 256) {  // row i / 9, piece i % 9
    const uint4* src = reinterpret_cast<const uint4*>(V + ((c0 + i / 9) * KV + kv) * ROW) + i % 9;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(unsigned(__cvta_generic_to_shared(sm + i))),
                 "l"(src));
  }
  for (int i = threadIdx.x; i < HQ * CH / 4; i += 256) {  // the weights, 4 floats a copy
    const int h = i / (CH / 4), k4 = i % (CH / 4);
    const float* src = E + (int64_t(kv) * HQ + h) * n + c0 + 4 * k4;
    asm volatile(
        "cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(unsigned(__cvta_generic_to_shared(ew + h * CH + 4 * k4))),
        "l"(src));
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  __syncthreads();
  auto scale = [&](int key) {  // the key's fp16 scale of group w (exact in fp32)
    return __half2float(*reinterpret_cast<const __half*>(rows + key * ROW + 128 + 2 * w));
  };
  // each head's exponent over the chunk: lane (gg, t) takes head gg (< 6) at keys t, t + 4, …
  const bool hl = gg < HQ;
  const int hh = hl ? gg : 0;
  uint32_t mb = 0;
  if (hl)
    for (int k = t; k < CH; k += 4) mb = max(mb, abs_bits(ew[hh * CH + k] * scale(k)));
  mb = max(mb, __shfl_xor_sync(0xffffffffu, mb, 1));
  mb = max(mb, __shfl_xor_sync(0xffffffffu, mb, 2));
  const int ex = mb ? hkv::xq_exponent(mb) : 0;
  int acc[2][3][4] = {};  // [dim tile][plane][D fragment]
  long long sumw = 0;     // Σ W of head gg over this lane's keys
  for (int ks = 0; ks < CH / 32; ks++) {
    // B: lane (gg, t) holds head gg's W at keys 32ks + 4t + i (b0) and 32ks + 16 + 4t + i (b1), one byte plane each
    uint32_t b[3][2] = {};
    if (hl && mb) {
#pragma unroll
      for (int half = 0; half < 2; half++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
          const int k = 32 * ks + 16 * half + 4 * t + i;
          const int32_t W = hkv::xq_int(ew[hh * CH + k] * scale(k), ex);
          sumw += W;
          put_w(b, half, i, W);
        }
    }
    // A: tile mt's rows g and g + 8 are dims 16mt + 2g and + 1: byte 8mt + g of the group's codes, of keys 4t + i
    // (a0 low nibbles, a1 high) and 16 + 4t + i (a2, a3)
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
      uint32_t by[2] = {0u, 0u};
#pragma unroll
      for (int half = 0; half < 2; half++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
          const int k = 32 * ks + 16 * half + 4 * t + i;
          by[half] |= uint32_t(rows[k * ROW + 16 * w + 8 * mt + gg]) << (8 * i);
        }
      const uint32_t a[4] = {by[0] & 0x0f0f0f0fu, (by[0] >> 4) & 0x0f0f0f0fu, by[1] & 0x0f0f0f0fu,
                             (by[1] >> 4) & 0x0f0f0f0fu};
      sum_planes(acc[mt], a, b);
    }
  }
  close_values(acc, sumw, mb, ex, kv, w, gg, t, n, O);
}

// The same sums from a layout that stores V's codes keys along k (a hypothetical format, for the question of what the
// transposition costs): VT [KV][n / 32][128 code bytes][32 keys] (byte b of 32 consecutive keys together), VS [KV]
// [n / 512][G][512] (a chunk's scales group by group). A is then one 32-bit shared load a tile and half; W's weights
// and scales four keys a load; W by xq_int's steps taken once a head (as the MLX4 records' staging does: the same
// integers).
__global__ void __launch_bounds__(256, 2)
    int_values_t(const uint8_t* VT, const uint16_t* VS, const float* E, int64_t n, float* O) {
  extern __shared__ uint4 sm[];
  uint8_t* codes = reinterpret_cast<uint8_t*>(sm);                 // [16 blocks][128][32]
  uint16_t* sc = reinterpret_cast<uint16_t*>(codes + CH * D / 2);  // [G][CH]
  float* ew = reinterpret_cast<float*>(sc + G * CH);               // [HQ][CH]
  const int kv = blockIdx.y, lane = threadIdx.x & 31, w = threadIdx.x >> 5, gg = lane >> 2, t = lane & 3;
  const int64_t c0 = int64_t(blockIdx.x) * CH;
  const uint4* cs = reinterpret_cast<const uint4*>(VT + (int64_t(kv) * (n / 32) + c0 / 32) * 128 * 32);
  for (int i = threadIdx.x; i < CH * D / 2 / 16; i += 256)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(unsigned(__cvta_generic_to_shared(sm + i))),
                 "l"(cs + i));
  const uint4* ss = reinterpret_cast<const uint4*>(VS + (int64_t(kv) * (n / CH) + blockIdx.x) * G * CH);
  for (int i = threadIdx.x; i < G * CH * 2 / 16; i += 256)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                     unsigned(__cvta_generic_to_shared(reinterpret_cast<uint4*>(sc) + i))),
                 "l"(ss + i));
  for (int i = threadIdx.x; i < HQ * CH / 4; i += 256) {
    const int h = i / (CH / 4), k4 = i % (CH / 4);
    asm volatile(
        "cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(unsigned(__cvta_generic_to_shared(ew + h * CH + 4 * k4))),
        "l"(E + (int64_t(kv) * HQ + h) * n + c0 + 4 * k4));
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  __syncthreads();
  // four consecutive keys' w = e·s of head hh, group w
  const bool hl = gg < HQ;
  const int hh = hl ? gg : 0;
  auto w4 = [&](int k) {
    const float4 e4 = *reinterpret_cast<const float4*>(ew + hh * CH + k);
    const uint2 s2 = *reinterpret_cast<const uint2*>(sc + w * CH + k);
    const float2 sa = __half22float2(*reinterpret_cast<const __half2*>(&s2.x));
    const float2 sb = __half22float2(*reinterpret_cast<const __half2*>(&s2.y));
    return make_float4(e4.x * sa.x, e4.y * sa.y, e4.z * sb.x, e4.w * sb.y);
  };
  uint32_t mb = 0;
  if (hl)
    for (int k = 4 * t; k < CH; k += 16) {
      const float4 v = w4(k);
      mb = max(max(mb, max(abs_bits(v.x), abs_bits(v.y))), max(abs_bits(v.z), abs_bits(v.w)));
    }
  mb = max(mb, __shfl_xor_sync(0xffffffffu, mb, 1));
  mb = max(mb, __shfl_xor_sync(0xffffffffu, mb, 2));
  const int ex = mb ? hkv::xq_exponent(mb) : 0;
  // xq_int's steps once: k = 21 − e; x · 2^127 first where k > 127; then the integer in the low bits of y + 1.5·2^23
  const int kk = 21 - ex;
  const float f1 = kk > 127 ? hkv::exp2i(127) : 1.0f, f2 = hkv::exp2i(kk > 127 ? kk - 127 : kk);
  auto fx = [&](float x) {
    return int32_t(__float_as_uint(__fadd_rn(__fmul_rn(__fmul_rn(x, f1), f2), 12582912.0f)) - 0x4b400000u);
  };
  int acc[2][3][4] = {};
  long long sumw = 0;
  for (int ks = 0; ks < CH / 32; ks++) {
    uint32_t b[3][2] = {};
    if (hl && mb) {
#pragma unroll
      for (int half = 0; half < 2; half++) {
        const float4 v = w4(32 * ks + 16 * half + 4 * t);
        const int32_t W[4] = {fx(v.x), fx(v.y), fx(v.z), fx(v.w)};
#pragma unroll
        for (int i = 0; i < 4; i++) {
          sumw += W[i];
          put_w(b, half, i, W[i]);
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
      const uint8_t* col = codes + (ks * 128 + 16 * w + 8 * mt + gg) * 32 + 4 * t;  // byte 8mt + gg, keys 4t … 4t + 3
      const uint32_t by0 = *reinterpret_cast<const uint32_t*>(col), by1 = *reinterpret_cast<const uint32_t*>(col + 16);
      const uint32_t a[4] = {by0 & 0x0f0f0f0fu, (by0 >> 4) & 0x0f0f0f0fu, by1 & 0x0f0f0f0fu, (by1 >> 4) & 0x0f0f0f0fu};
      sum_planes(acc[mt], a, b);
    }
  }
  close_values(acc, sumw, mb, ex, kv, w, gg, t, n, O);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 262144;  // keys, a multiple of 512
  if (n % CH != 0) return std::fprintf(stderr, "keys: a multiple of 512\n"), 2;
  uint64_t s = 3;
  const std::vector<uint8_t> V = probe::random_q4h(n, KV, s);
  // weights as exp(score − max) gives them: in (0, 1], 1 at one key of each chunk, some far below (down to 2^-100)
  std::vector<float> E(size_t(KV) * HQ * n);
  for (size_t i = 0; i < E.size(); i++) {
    const uint32_t r = probe::rng(s);
    E[i] = r % 17 == 0 ? std::ldexp(1.0f, -int(r % 100)) : float(r % 1000000 + 1) * 1e-6f;
  }
  for (int64_t c = 0; c < n / CH; c++)
    for (int q = 0; q < KV * HQ; q++) E[size_t(q) * n + c * CH + (c * 7 + q) % CH] = 1.0f;
  uint8_t* dV;
  float *dE, *dO;
  const size_t osz = size_t(KV) * HQ * (n / CH) * D;
  CK(cudaMalloc(&dV, V.size()));
  CK(cudaMalloc(&dE, E.size() * 4));
  CK(cudaMalloc(&dO, osz * 4));
  CK(cudaMemcpy(dV, V.data(), V.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dE, E.data(), E.size() * 4, cudaMemcpyHostToDevice));
  constexpr int kSmem = CH * ROW + HQ * CH * 4;
  const int occ = probe::allow_smem(int_values, 256, kSmem);
  const dim3 grid(unsigned(n / CH), KV);
  int_values<<<grid, 256, kSmem>>>(dV, dE, n, dO);
  CK(cudaDeviceSynchronize());
  std::vector<float> O(osz), OT(osz);
  CK(cudaMemcpy(O.data(), dO, osz * 4, cudaMemcpyDeviceToHost));
  // the keys-along-k layout of the same cache, and its kernel
  std::vector<uint8_t> VT(V.size() / ROW * 128);
  std::vector<uint16_t> VS(size_t(n) * KV * G);
  for (int kv = 0; kv < KV; kv++)
    for (int64_t k = 0; k < n; k++) {
      const uint8_t* row = V.data() + size_t(k * KV + kv) * ROW;
      for (int b = 0; b < 128; b++)
        VT[((size_t(kv) * size_t(n / 32) + size_t(k / 32)) * 128 + size_t(b)) * 32 + size_t(k % 32)] = row[b];
      for (int gr = 0; gr < G; gr++)
        std::memcpy(&VS[((size_t(kv) * size_t(n / CH) + size_t(k / CH)) * G + size_t(gr)) * CH + size_t(k % CH)],
                    row + 128 + 2 * gr, 2);
    }
  uint8_t* dVT;
  uint16_t* dVS;
  CK(cudaMalloc(&dVT, VT.size()));
  CK(cudaMalloc(&dVS, VS.size() * 2));
  CK(cudaMemcpy(dVT, VT.data(), VT.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dVS, VS.data(), VS.size() * 2, cudaMemcpyHostToDevice));
  probe::allow_smem(int_values_t, 256, kSmem);
  CK(cudaMemset(dO, 0xa5, osz * 4));
  int_values_t<<<grid, 256, kSmem>>>(dVT, dVS, dE, n, dO);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(OT.data(), dO, osz * 4, cudaMemcpyDeviceToHost));
  // the host: the same operations in the same order, for the first 8 chunks and every 37th
  int64_t checked = 0, bad = 0, badt = 0;
  for (int64_t c = 0; c < n / CH; c += (c < 8 ? 1 : 37))
    for (int kv = 0; kv < KV; kv++)
      for (int h = 0; h < HQ; h++)
        for (int gr = 0; gr < G; gr++) {
          std::vector<float> wv(CH);
          uint32_t mb = 0;
          for (int k = 0; k < CH; k++) {
            const uint8_t* row = V.data() + size_t((c * CH + k) * KV + kv) * ROW;
            uint16_t hs;
            std::memcpy(&hs, row + 128 + 2 * gr, 2);
            wv[size_t(k)] = E[size_t(kv * HQ + h) * n + c * CH + k] * hkv::f32_from_f16(hs);
            mb = std::max(mb, hkv::f32_bits(wv[size_t(k)]) & 0x7fffffffu);
          }
          const int e = mb ? hkv::xq_exponent(mb) : 0;
          for (int j = 0; j < 32; j++) {
            long long S = 0;
            for (int k = 0; k < CH; k++) {
              const uint8_t* row = V.data() + size_t((c * CH + k) * KV + kv) * ROW;
              const int dd = 32 * gr + j, code = (row[dd / 2] >> (4 * (dd & 1))) & 15;
              S += (long long)(mb ? hkv::xq_int(wv[size_t(k)], e) : 0) * (code - 8);
            }
            const float want = mb ? float(S) * hkv::xq_unit(e) : 0.0f;
            const float got = O[((size_t(kv) * HQ + h) * size_t(n / CH) + size_t(c)) * D + size_t(32 * gr + j)];
            const float gott = OT[((size_t(kv) * HQ + h) * size_t(n / CH) + size_t(c)) * D + size_t(32 * gr + j)];
            checked++;
            if (std::memcmp(&want, &got, 4) != 0 && bad++ < 5)
              std::printf("chunk %lld kv %d head %d dim %d: host %.9g, card %.9g\n", (long long)c, kv, h, 32 * gr + j,
                          want, got);
            if (std::memcmp(&want, &gott, 4) != 0 && badt++ < 5)
              std::printf("keys along k: chunk %lld kv %d head %d dim %d: host %.9g, card %.9g\n", (long long)c, kv, h,
                          32 * gr + j, want, gott);
          }
        }
  const double us = probe::time_us([&] { int_values<<<grid, 256, kSmem>>>(dV, dE, n, dO); });
  const double ust = probe::time_us([&] { int_values_t<<<grid, 256, kSmem>>>(dVT, dVS, dE, n, dO); });
  const double bytes = double(V.size()), bw = probe::copy_bandwidth(dV, V.size());
  std::printf("q4h integer values on the tensor cores: %lld keys x %d KV heads x %d query heads, one layer\n",
              (long long)n, KV, HQ);
  std::printf("blocks a multiprocessor: %d (8 warps each)\n", occ);
  std::printf("check: %lld outputs, %lld differ from the host's (bits); from the keys-along-k layout %lld differ\n",
              (long long)checked, (long long)bad, (long long)badt);
  std::printf(
      "| layout | keys | V MB | us a layer (median of 20) | copy bandwidth TB/s | V at copy bandwidth us | %% |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (int l = 0; l < 2; l++)
    std::printf("| %s | %lld | %.1f | %.1f | %.3f | %.1f | %.0f%% |\n", l ? "keys along k (hypothetical)" : "q4h rows",
                (long long)n, bytes / 1e6, l ? ust : us, bw / 1e12, bytes / bw * 1e6,
                100.0 * (bytes / bw * 1e6) / (l ? ust : us));
  return bad || badt ? 1 : 0;
}
