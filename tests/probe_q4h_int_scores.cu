// A probe for a proposed contract (not a test of hkv, not built into hkv): the score phase of q4h decode attention
// with integer products on the tensor cores. The contract measured on the CPU (docs/RESULTS.md §12):
// q, rotated, becomes per group g of 32 its block fixed point Q_j = xq_int(q_j, e_g) (the MLX4 records' rule,
// reference/scalar.h), unit_g = xq_unit(e_g), SQ_g = Σ_j Q_j; a key's score is
//   acc = 0;  for g in 0..7:  P = Σ_j c_j·Q_j − 8·SQ_g (exact; c the stored codes, u = c − 8),
//                             acc = fma(s_g, float(P)·unit_g, acc);   score = acc · (1/16)
// (head_dim 256). The probe computes every score of one layer's K cache (4 KV heads × n keys, 6 query heads a KV
// head, the 27B shape) with mma.sync.m16n8k32: A = 16 keys' codes of a group (u8), B = one byte plane of Q for the 6
// heads (columns 0..5; planes 0 and 1 u8, plane 2 s8), three products a group, so thread (g, t) gets planes 0..2 of
// keys g and g + 8 for heads 2t and 2t + 1 and closes them in the order above. It checks every score of a sample of
// keys against the host (bits equal), then times the kernel: µs a layer against the K bytes over the card's copy
// bandwidth. Build: nvcc -arch=sm_90a -O3 -std=c++17 --fmad=false -I. tests/probe_q4h_int_scores.cu, or
// cuda/run_gpu_suite.sh probe-q4h-int (the project's flags).
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

constexpr int D = 256, G = 8, HQ = 6, KV = 4, ROW = 144;  // head_dim, groups, query heads a KV head, row bytes

// d = a·b + c, c given as (c0, c1) for columns 2t and 2t + 1 of both rows
template <bool SIGNED>
__device__ __forceinline__ void imma(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, int c0, int c1) {
  if constexpr (SIGNED)
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%10,%11};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c0), "r"(c1));
  else
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%10,%11};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c0), "r"(c1));
}

// Per KV head: bfrag [32 lanes][G][3 planes][2] words (each lane's B fragments, zeros for columns 6 and 7),
// sq [HQ][G], uq [HQ][G]. K: [n][KV][ROW]. scores: [KV·HQ][n].
struct Query {
  uint32_t bfrag[32][G][3][2];
  int32_t sq[HQ][G];
  float uq[HQ][G];
};

// Block: 8 warps, 64 keys a warp in 4 tiles of 16; grid (n / 512, KV); 9,216 bytes of shared memory a warp.
__global__ void __launch_bounds__(256, 2) int_scores(const uint8_t* K, const Query* qs, int64_t n, float* scores) {
  const int kv = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const Query& Q = qs[kv];
  uint32_t B[G][3][2];
#pragma unroll
  for (int gr = 0; gr < G; gr++)
#pragma unroll
    for (int p = 0; p < 3; p++) B[gr][p][0] = Q.bfrag[lane][gr][p][0], B[gr][p][1] = Q.bfrag[lane][gr][p][1];
  // lane (g, t) closes heads 2t and 2t + 1 (t = 3 holds the unused columns 6, 7: heads 5 again, not stored)
  // per lane column pair (heads h0, h1) and group: {−8·SQ_h0, −8·SQ_h1, unit_h0, unit_h1}, in shared memory (registers
  // hold B)
  __shared__ int4 qsu[4][G];
  if (threadIdx.x < 4 * G) {
    const int tt = threadIdx.x / G, gr = threadIdx.x % G;
    const int a0 = min(2 * tt, HQ - 1), a1 = min(2 * tt + 1, HQ - 1);
    qsu[tt][gr] =
        make_int4(-8 * Q.sq[a0][gr], -8 * Q.sq[a1][gr], __float_as_int(Q.uq[a0][gr]), __float_as_int(Q.uq[a1][gr]));
  }
  __syncthreads();
  // the warp's 64 rows (9,216 bytes) into its shared memory, 16 bytes a cp.async, consecutive lanes along a row; then
  // fragments from there (rows 144 bytes apart: lane (g, t)'s word 36g + 4·group + t, 32 banks, no conflicts)
  extern __shared__ uint4 sm[];
  uint4* my = sm + warp * 576;
  const int64_t kw = int64_t(blockIdx.x) * 512 + warp * 64;
  // piece i (16 bytes) of the warp's rows is piece i % 9 of row i / 9; lane l takes i = l, l + 32, … (consecutive lanes
  // along a row), (row, piece) stepped without divisions; a commit group a pair of tiles (288 pieces)
  {
    int r = lane / 9, c = lane % 9;
    for (int pair = 0; pair < 2; pair++) {
      for (int i = pair * 288 + lane; i < pair * 288 + 288; i += 32) {
        const uint4* src = reinterpret_cast<const uint4*>(K + ((kw + r) * KV + kv) * ROW) + c;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(unsigned(__cvta_generic_to_shared(my + i))),
                     "l"(src));
        r += 3, c += 5;  // i + 32 = 9·(r + 3) + c + 5
        if (c >= 9) c -= 9, r++;
      }
      asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
  }
  const uint8_t* rows = reinterpret_cast<const uint8_t*>(my);
  for (int mt = 0; mt < 4; mt++) {
    if (mt == 0) {  // tiles 0 and 1 (lanes 0..15 and 16..31 of the first group)
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");
      __syncwarp();
    }
    if (mt == 2) {
      asm volatile("cp.async.wait_group 0;\n" ::: "memory");
      __syncwarp();
    }
    const int64_t k0 = kw + mt * 16;
    const uint8_t* ra = rows + (mt * 16 + g) * ROW;
    const uint8_t* rb = ra + 8 * ROW;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // (key g, h0), (key g, h1), (key g+8, h0), (key g+8, h1)
    // the two rows' scales: one 16-byte load each, converted by the hardware (f16 to f32 is exact)
    float scA[G], scB[G];
    {
      const uint4 va = *reinterpret_cast<const uint4*>(ra + 128), vb = *reinterpret_cast<const uint4*>(rb + 128);
      const uint32_t wa4[4] = {va.x, va.y, va.z, va.w}, wb4[4] = {vb.x, vb.y, vb.z, vb.w};
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const float2 fa = __half22float2(*reinterpret_cast<const __half2*>(&wa4[i]));
        const float2 fb = __half22float2(*reinterpret_cast<const __half2*>(&wb4[i]));
        scA[2 * i] = fa.x, scA[2 * i + 1] = fa.y, scB[2 * i] = fb.x, scB[2 * i + 1] = fb.y;
      }
    }
    // the codes: ldmatrix.x4 gives lane (g, t) word t of keys g and g + 8 for two groups (lane l addresses row l % 8
    // of matrix l / 8: keys 0..7, 8..15 of group gr, then of group gr + 1)
    const unsigned lrow = unsigned(
        __cvta_generic_to_shared(rows + (mt * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * ROW + 16 * (lane >> 4)));
#pragma unroll
    for (int gp = 0; gp < G; gp += 2) {
      uint32_t w[4];
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                   : "r"(lrow + 16u * gp));
#pragma unroll
      for (int h2 = 0; h2 < 2; h2++) {
        const int gr = gp + h2;
        const uint32_t wa = w[2 * h2], wb = w[2 * h2 + 1];
        const uint32_t a[4] = {wa & 0x0f0f0f0fu, wb & 0x0f0f0f0fu, (wa >> 4) & 0x0f0f0f0fu, (wb >> 4) & 0x0f0f0f0fu};
        // plane 0's sums start from −8·SQ (u = c − 8), so that P = d0 + (d1 << 8) + (d2 << 16)
        const int4 su = qsu[t][gr];  // {−8·SQ_h0, −8·SQ_h1, unit_h0, unit_h1}
        int d0[4], d1[4], d2[4];
        imma<false>(d0, a, B[gr][0][0], B[gr][0][1], su.x, su.y);
        imma<false>(d1, a, B[gr][1][0], B[gr][1][1], 0, 0);
        imma<true>(d2, a, B[gr][2][0], B[gr][2][1], 0, 0);
        const float sa = scA[gr], sb = scB[gr];
#pragma unroll
        for (int i = 0; i < 4; i++) {
          const int hh = i & 1;
          const int P = int(uint32_t(d0[i]) + (uint32_t(d1[i]) << 8) + (uint32_t(d2[i]) << 16));
          acc[i] = __fmaf_rn(i < 2 ? sa : sb, __int2float_rn(P) * __int_as_float(hh ? su.w : su.z), acc[i]);
        }
      }
    }
    if (t < 3) {
      float* s0 = scores + int64_t(kv * HQ + 2 * t) * n;
      float* s1 = s0 + n;
      s0[k0 + g] = acc[0] * 0.0625f, s1[k0 + g] = acc[1] * 0.0625f;
      s0[k0 + g + 8] = acc[2] * 0.0625f, s1[k0 + g + 8] = acc[3] * 0.0625f;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 262144;  // keys, a multiple of 512
  if (n % 512 != 0) return std::fprintf(stderr, "keys: a multiple of 512\n"), 2;
  // the cache: random codes, scales from normal-ish magnitudes (fp16)
  uint64_t s = 1;
  const std::vector<uint8_t> K = probe::random_q4h(n, KV, s);
  // the queries (rotated space), their block fixed point and each lane's B fragments
  std::vector<Query> qs(KV);
  std::vector<int32_t> Qint(size_t(KV) * HQ * D);
  for (int kv = 0; kv < KV; kv++) {
    Query& Q = qs[size_t(kv)];
    std::memset(&Q, 0, sizeof(Q));
    for (int h = 0; h < HQ; h++)
      for (int gr = 0; gr < G; gr++) {
        float q[32];
        uint32_t mb = 0;
        for (int j = 0; j < 32; j++) {
          q[j] = (float(int(probe::rng(s) % 2001) - 1000) * 1e-3f) * (gr == 3 ? 40.0f : 1.0f);
          uint32_t b;
          std::memcpy(&b, &q[j], 4);
          mb = std::max(mb, b & 0x7fffffffu);
        }
        const int e = hkv::xq_exponent(mb);
        int32_t sum = 0;
        for (int j = 0; j < 32; j++) {
          const int32_t X = hkv::xq_int(q[j], e);
          Qint[size_t((kv * HQ + h) * D + gr * 32 + j)] = X;
          sum += X;
        }
        Q.sq[h][gr] = sum;
        Q.uq[h][gr] = hkv::xq_unit(e);
      }
    // lane (g, t): B[k][n = g] at k = 4t + i (element 8t + 2i: the low nibbles of word t) and 16 + 4t + i (8t + 2i + 1)
    for (int lane = 0; lane < 32; lane++) {
      const int g = lane >> 2, t = lane & 3;
      if (g >= HQ) continue;
      for (int gr = 0; gr < G; gr++)
        for (int p = 0; p < 3; p++)
          for (int half = 0; half < 2; half++) {
            uint32_t w = 0;
            for (int i = 0; i < 4; i++) {
              const int32_t X = Qint[size_t((kv * HQ + g) * D + gr * 32 + 8 * t + 2 * i + half)];
              w |= uint32_t((uint32_t(X) >> (8 * p)) & 0xffu) << (8 * i);
            }
            Q.bfrag[lane][gr][p][half] = w;
          }
    }
  }
  uint8_t* dK;
  Query* dQ;
  float* dS;
  CK(cudaMalloc(&dK, K.size()));
  CK(cudaMalloc(&dQ, sizeof(Query) * KV));
  CK(cudaMalloc(&dS, size_t(KV) * HQ * n * 4));
  CK(cudaMemcpy(dK, K.data(), K.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dQ, qs.data(), sizeof(Query) * KV, cudaMemcpyHostToDevice));
  const dim3 grid(unsigned(n / 512), KV);
  constexpr int kSmem = 8 * 576 * 16;
  const int occ = probe::allow_smem(int_scores, 256, kSmem);
  int_scores<<<grid, 256, kSmem>>>(dK, dQ, n, dS);
  CK(cudaDeviceSynchronize());
  std::vector<float> S(size_t(KV) * HQ * n);
  CK(cudaMemcpy(S.data(), dS, S.size() * 4, cudaMemcpyDeviceToHost));
  // the host's scores of a sample of keys, the same operations in the same order
  int64_t checked = 0, bad = 0;
  for (int64_t key = 0; key < n; key += (key < 4096 ? 1 : 997))
    for (int kv = 0; kv < KV; kv++)
      for (int h = 0; h < HQ; h++) {
        const uint8_t* row = K.data() + size_t(key * KV + kv) * ROW;
        float acc = 0.0f;
        for (int gr = 0; gr < G; gr++) {
          int64_t P = 0;
          for (int j = 0; j < 32; j++) {
            const int c = (row[16 * gr + j / 2] >> (4 * (j & 1))) & 15;
            P += int64_t(c - 8) * Qint[size_t((kv * HQ + h) * D + gr * 32 + j)];
          }
          uint16_t hs;
          std::memcpy(&hs, row + 128 + 2 * gr, 2);
          acc = std::fma(hkv::f32_from_f16(hs), float(int32_t(P)) * qs[size_t(kv)].uq[h][gr], acc);
        }
        const float want = acc * 0.0625f, got = S[size_t((kv * HQ + h) * n + key)];
        checked++;
        if (std::memcmp(&want, &got, 4) != 0 && bad++ < 5)
          std::printf("key %lld kv %d head %d: host %.9g, card %.9g\n", (long long)key, kv, h, want, got);
      }
  // time: the probe's kernel, and a copy of the K bytes for the card's bandwidth
  const double us = probe::time_us([&] { int_scores<<<grid, 256, kSmem>>>(dK, dQ, n, dS); });
  const double bytes = double(K.size()), bw = probe::copy_bandwidth(dK, K.size());
  std::printf("q4h integer scores on the tensor cores: %lld keys x %d KV heads x %d query heads, one layer\n",
              (long long)n, KV, HQ);
  std::printf("blocks a multiprocessor: %d (8 warps each)\n", occ);
  std::printf("check: %lld scores, %lld differ from the host's (bits)\n", (long long)checked, (long long)bad);
  std::printf(
      "| keys | K MB | us a layer (median of 20) | copy bandwidth TB/s | K at copy bandwidth us | %% of it |\n");
  std::printf("|---|---|---|---|---|---|\n| %lld | %.1f | %.1f | %.3f | %.1f | %.0f%% |\n", (long long)n, bytes / 1e6,
              us, bw / 1e12, bytes / bw * 1e6, 100.0 * (bytes / bw * 1e6) / us);
  return bad ? 1 : 0;
}
