// A probe of the integer paths an exact product can take on the card (not a test of hkv's results, and not built
// into hkv): how many warp instructions a multiprocessor retires a cycle of
//   IMMA  mma.sync.m16n8k32 u8 x u8 -> s32 (8,192 multiply-adds of bytes an instruction),
//   IDP4A dp4a u8 x u8 (4 an instruction, per lane: 128 a warp instruction),
//   FFMA  fp32 fma (1 per lane, 32 a warp instruction),
// and the latency of one dependent IMMA chain. Each warp runs C independent chains of N instructions; the probe
// times the launch with events (one block of W warps per multiprocessor, a grid of the multiprocessor count) and
// gives the rate as instructions / (multiprocessors x cycles at the measured clock), the clock read from
// clock64 over the same kernel. First it checks that one IMMA gives the exact sums (the fragment layout
// docs/receipts/2026-12-01-a uses): D[r][n] = sum_k A[r][k] B[k][n] against the host, as integers.
// Built for sm_90a as its own executable: build-gpu/tests/hkv_imma_probe (cuda/run_gpu_suite.sh probe-imma).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tests/probe_util.cuh"

namespace {

__device__ __forceinline__ void imma(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One m16n8k32 product by the PTX fragment layout: thread (g = lane/4, t = lane%4) holds A[g][4t..4t+3] (a0),
// A[g+8][4t..] (a1), A[g][16+4t..] (a2), A[g+8][16+4t..] (a3), B[4t..4t+3][g] (b0), B[16+4t..][g] (b1), and gets
// D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1].
__global__ void one_product(const uint8_t* A, const uint8_t* B, int* D) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  auto word = [](const uint8_t* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  };
  const uint32_t a[4] = {word(A + g * 32 + 4 * t), word(A + (g + 8) * 32 + 4 * t), word(A + g * 32 + 16 + 4 * t),
                         word(A + (g + 8) * 32 + 16 + 4 * t)};
  uint8_t bc0[4], bc1[4];
  for (int i = 0; i < 4; i++) bc0[i] = B[(4 * t + i) * 8 + g], bc1[i] = B[(16 + 4 * t + i) * 8 + g];
  int d[4] = {0, 0, 0, 0};
  imma(d, a, word(bc0), word(bc1));
  D[g * 8 + 2 * t] = d[0], D[g * 8 + 2 * t + 1] = d[1], D[(g + 8) * 8 + 2 * t] = d[2],
                D[(g + 8) * 8 + 2 * t + 1] = d[3];
}

// kind 0: IMMA, 1: IDP4A, 2: FFMA. C chains of n instructions a warp; the sum goes to out so nothing is dropped.
template <int KIND, int C>
__global__ void rate(int n, uint32_t seed, int* out, unsigned long long* cycles) {
  const unsigned long long t0 = clock64();
  const uint32_t s = seed ^ (threadIdx.x * 2654435761u);
  int acc = 0;
  if constexpr (KIND == 0) {
    int d[C][4];
    for (int c = 0; c < C; c++) d[c][0] = d[c][1] = d[c][2] = d[c][3] = c;
    const uint32_t a[4] = {s, s * 3u, s * 5u, s * 7u};
    for (int i = 0; i < n; i++)
#pragma unroll
      for (int c = 0; c < C; c++) imma(d[c], a, s + uint32_t(c), s ^ uint32_t(i));
    for (int c = 0; c < C; c++) acc += d[c][0] + d[c][1] + d[c][2] + d[c][3];
  } else if constexpr (KIND == 1) {
    uint32_t d[C];
    for (int c = 0; c < C; c++) d[c] = uint32_t(c);
    for (int i = 0; i < n; i++)
#pragma unroll
      for (int c = 0; c < C; c++) d[c] = __dp4a(s + uint32_t(c), s ^ uint32_t(i), d[c]);
    for (int c = 0; c < C; c++) acc += int(d[c]);
  } else {
    float d[C];
    const float x = __uint_as_float((s & 0x007fffffu) | 0x3f800000u);
    for (int c = 0; c < C; c++) d[c] = float(c);
    for (int i = 0; i < n; i++)
#pragma unroll
      for (int c = 0; c < C; c++) d[c] = __fmaf_rn(d[c], x, x);
    for (int c = 0; c < C; c++) acc += __float_as_int(d[c]);
  }
  if (acc == 0x12345678) out[0] = acc;  // practically never; keeps the chains live
  if (threadIdx.x == 0) cycles[blockIdx.x] = clock64() - t0;
}

template <int KIND, int C>
void measure(const char* name, int warps, int sms, double per_instr_ops) {
  const int n = KIND == 0 ? 4096 : 65536;
  int* out = nullptr;
  unsigned long long* cyc = nullptr;
  CK(cudaMalloc(&out, 4));
  CK(cudaMalloc(&cyc, size_t(sms) * 8));
  rate<KIND, C><<<sms, warps * 32>>>(n / 8, 1u, out, cyc);  // warm-up
  CK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0));
  rate<KIND, C><<<sms, warps * 32>>>(n, 7u, out, cyc);
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  std::vector<unsigned long long> h(static_cast<size_t>(sms));
  CK(cudaMemcpy(h.data(), cyc, h.size() * 8, cudaMemcpyDeviceToHost));
  unsigned long long mx = 0;
  for (auto v : h) mx = v > mx ? v : mx;
  const double instr_per_sm = double(warps) * C * n;  // warp instructions a multiprocessor
  const double per_cycle = instr_per_sm / double(mx);
  std::printf("| %s | %d | %d | %.0f | %.3f | %.1f | %.0f |\n", name, warps, C, double(mx), ms, per_cycle,
              per_cycle * per_instr_ops);
  CK(cudaFree(out));
  CK(cudaFree(cyc));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
}

}  // namespace

int main() {
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  const int sms = p.multiProcessorCount;
  // the layout check
  std::vector<uint8_t> A(16 * 32), B(32 * 8);
  uint32_t r = 12345u;
  for (auto& v : A) v = uint8_t((r = r * 1664525u + 1013904223u) >> 24);
  for (auto& v : B) v = uint8_t((r = r * 1664525u + 1013904223u) >> 24);
  uint8_t *dA, *dB;
  int* dD;
  CK(cudaMalloc(&dA, A.size()));
  CK(cudaMalloc(&dB, B.size()));
  CK(cudaMalloc(&dD, 16 * 8 * 4));
  CK(cudaMemcpy(dA, A.data(), A.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dB, B.data(), B.size(), cudaMemcpyHostToDevice));
  one_product<<<1, 32>>>(dA, dB, dD);
  std::vector<int> D(16 * 8);
  CK(cudaMemcpy(D.data(), dD, D.size() * 4, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 8; j++) {
      long long s = 0;
      for (int k = 0; k < 32; k++) s += int(A[i * 32 + k]) * int(B[k * 8 + j]);
      bad += s != D[i * 8 + j];
    }
  std::printf("%s, %d multiprocessors\nIMMA m16n8k32 u8 layout check: %s (%d of 128 sums differ)\n", p.name, sms,
              bad ? "FAIL" : "OK", bad);
  std::printf(
      "| instruction | warps a multiprocessor | chains a warp | cycles | ms | warp instructions a cycle a "
      "multiprocessor | multiply-adds a cycle |\n|---|---|---|---|---|---|---|\n");
  measure<0, 1>("IMMA m16n8k32 u8 (one chain: latency)", 1, sms, 4096);
  for (int w : {4, 8, 16, 32}) measure<0, 4>("IMMA m16n8k32 u8", w, sms, 4096);
  measure<0, 8>("IMMA m16n8k32 u8", 16, sms, 4096);
  for (int w : {8, 16, 32}) measure<1, 4>("IDP4A u8", w, sms, 128);
  for (int w : {8, 16, 32}) measure<2, 4>("FFMA", w, sms, 32);
  return bad ? 1 : 0;
}
