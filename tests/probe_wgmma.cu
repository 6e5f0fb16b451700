// A probe of Hopper's warpgroup MMA (wgmma) for the fast prefill attention's wg forms (not a test of hkv's
// results, and not built into hkv): which shared-memory descriptor encodings give the right products. On the
// H200 both QK candidates and the first PV candidate match: the constants in cuda/prefill_attention_wgmma.cuh.
// Built for sm_90a only (wgmma needs it), as its own executable: build-gpu/tests/hkv_wgmma_probe.
//
// Two products, each the attention's shape, each against a float64 reference on the host:
//   QK: S[64][64] = Q[64][256] · K[64][256]ᵀ, one warpgroup, 16 wgmma m64n64k16 (k-steps of 16 along d). Q and
//       K in shared memory K-major (d contiguous) with the 128-byte swizzle: 4 atoms of 64 d, each [64 rows][128
//       bytes], row r's 16-byte chunk j stored at chunk j ^ (r % 8). The descriptor of k-step kk starts at atom
//       kk/4 plus (kk%4)·32 bytes. Candidates: (LBO, SBO) = (16, 1024) and (0, 1024) bytes.
//   PV: O[64][128] = P[64][64] · V[64][128], P from registers (the m16n8k16 A-fragment layout, per warp its 16
//       rows), V in shared memory MN-major (d contiguous: trans-b = 1) with the 128-byte swizzle: 2 atoms of 64
//       d, each [64 keys][128 bytes], key k's chunk j at j ^ (k % 8); 4 wgmma m64n128k16 (k-steps of 16 keys),
//       the descriptor of k-step kk at 2048·kk bytes. Candidates: (LBO, SBO) = (8192, 1024) and (1024, 8192).
// The host writes each operand's shared-memory image; the kernel copies it in as bytes, fences the async
// proxy, runs the products with the attention's own helpers (wg::desc, wg::qk_step, wg::pv_step<128>) and stores the
// accumulators by the documented fragment layout (warp w: rows 16w + g and 16w + g + 8, columns 8i + 2c, +1 of each
// 8-column block i; g = lane/4, c = lane%4). Exit status 0 only when the attention's own constants
// (wg::kKMajorLbo/Sbo, wg::kMnMajorLbo/Sbo) give the right products; the other candidates are printed beside them.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/prefill_attention_wgmma.cuh"  // wg::desc, qk_step, pv_step: the helpers the attention uses
#include "tests/probe_util.cuh"

namespace {

// The dynamic shared memory rounded up to 1024 bytes: the swizzle is of address bits, so an atom must start at
// a multiple of 1024 (launches ask for 1024 bytes more than they use).
__device__ __forceinline__ unsigned char* aligned_smem(unsigned char* sm) {
  const uint32_t a = uint32_t(__cvta_generic_to_shared(sm));
  return sm + ((1024u - (a & 1023u)) & 1023u);
}

__device__ __forceinline__ void copy_in(unsigned char* dst, const unsigned char* src, int bytes) {
  for (int i = threadIdx.x * 16; i < bytes; i += blockDim.x * 16)
    *reinterpret_cast<uint4*>(dst + i) = *reinterpret_cast<const uint4*>(src + i);
}

// A warpgroup's m64nN accumulator (d: N/2 floats a thread, the m16n8 C-fragment layout per warp and 8 columns) into
// row-major out [64][N].
template <int N>
__device__ __forceinline__ void store_acc(const float* d, float* out) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  for (int i = 0; i < N / 8; i++) {
    out[(16 * w + g) * N + 8 * i + 2 * c] = d[4 * i];
    out[(16 * w + g) * N + 8 * i + 2 * c + 1] = d[4 * i + 1];
    out[(16 * w + g + 8) * N + 8 * i + 2 * c] = d[4 * i + 2];
    out[(16 * w + g + 8) * N + 8 * i + 2 * c + 1] = d[4 * i + 3];
  }
}

__global__ void qk_probe(const unsigned char* qimg, const unsigned char* kimg, float* S, uint32_t lbo, uint32_t sbo) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* qs = aligned_smem(smem_raw);
  unsigned char* ks = qs + 32768;
  copy_in(qs, qimg, 32768);
  copy_in(ks, kimg, 32768);
  wg::proxy_fence();
  __syncthreads();
  float d[32];
  for (int i = 0; i < 32; i++) d[i] = 0.0f;
  wg::fence();
  for (int kk = 0; kk < 16; kk++)
    wg::qk_step(d, wg::desc(qs + (kk / 4) * 8192 + (kk % 4) * 32, lbo, sbo),
                wg::desc(ks + (kk / 4) * 8192 + (kk % 4) * 32, lbo, sbo), kk > 0);
  wg::commit_wait();
  store_acc<64>(d, S);
#endif
}

// P [64][64] bf16 row-major in global memory, read into the A fragments of the warp's 16 rows.
__global__ void pv_probe(const uint16_t* P, const unsigned char* vimg, float* O, uint32_t lbo, uint32_t sbo) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* sm = aligned_smem(smem_raw);
  copy_in(sm, vimg, 16384);
  wg::proxy_fence();
  __syncthreads();
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  auto pair = [&](int r, int k) { return uint32_t(P[r * 64 + k]) | uint32_t(P[r * 64 + k + 1]) << 16; };
  float d[64];
  for (int i = 0; i < 64; i++) d[i] = 0.0f;
  wg::fence();
  for (int kk = 0; kk < 4; kk++) {
    const int r = 16 * w + g, k = 16 * kk + 2 * c;
    const uint32_t a[4] = {pair(r, k), pair(r + 8, k), pair(r, k + 8), pair(r + 8, k + 8)};
    wg::pv_step<128>(d, a, wg::desc(sm + 2048 * kk, lbo, sbo));
  }
  wg::commit_wait();
  store_acc<128>(d, O);
#endif
}

uint16_t bf16(float f) {  // nearest even (finite inputs)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
double f64(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The 128-byte-swizzled image of a [rows][cols] bf16 matrix, contiguous along cols (cols a multiple of 64):
// atoms of 64 columns, each [rows][128 bytes]; row r's 16-byte chunk j at chunk j ^ (r % 8).
std::vector<unsigned char> swizzled(const std::vector<uint16_t>& m, int rows, int cols) {
  std::vector<unsigned char> img(size_t(rows) * cols * 2);
  for (int r = 0; r < rows; r++)
    for (int col = 0; col < cols; col++) {
      const int atom = col / 64, j = (col % 64) / 8, e = col % 8;
      const size_t off = size_t(atom) * rows * 128 + size_t(r) * 128 + size_t((j ^ (r % 8)) * 16 + e * 2);
      std::memcpy(&img[off], &m[size_t(r) * cols + col], 2);
    }
  return img;
}

}  // namespace

int main() {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto randm = [&](int n) {
    std::vector<uint16_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = bf16(nd(rng));
    return v;
  };
  const std::vector<uint16_t> q = randm(64 * 256), k = randm(64 * 256), p = randm(64 * 64), v = randm(64 * 128);
  std::vector<double> sref(64 * 64), oref(64 * 128);
  for (int i = 0; i < 64; i++)
    for (int j = 0; j < 64; j++) {
      double s = 0;
      for (int t = 0; t < 256; t++) s += f64(q[i * 256 + t]) * f64(k[j * 256 + t]);
      sref[i * 64 + j] = s;
    }
  for (int i = 0; i < 64; i++)
    for (int j = 0; j < 128; j++) {
      double s = 0;
      for (int t = 0; t < 64; t++) s += f64(p[i * 64 + t]) * f64(v[t * 128 + j]);
      oref[i * 128 + j] = s;
    }
  const std::vector<unsigned char> qi = swizzled(q, 64, 256), ki = swizzled(k, 64, 256), vi = swizzled(v, 64, 128);
  unsigned char *dq, *dk, *dv;
  uint16_t* dp;
  float *ds, *dout;
  CK(cudaMalloc(&dq, qi.size()));
  CK(cudaMalloc(&dk, ki.size()));
  CK(cudaMalloc(&dv, vi.size()));
  CK(cudaMalloc(&dp, p.size() * 2));
  CK(cudaMalloc(&ds, 64 * 64 * 4));
  CK(cudaMalloc(&dout, 64 * 128 * 4));
  CK(cudaMemcpy(dq, qi.data(), qi.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dk, ki.data(), ki.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dv, vi.data(), vi.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dp, p.data(), p.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaFuncSetAttribute(qk_probe, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536 + 1024));
  // One encoding of one product: launch, read back, worst error against the float64 reference in units of the
  // product's scale (|S| ~ 16: fp32 sums of 256 products of N(0,1) bf16 values; |O| ~ 8 over 64 keys).
  auto check = [](const char* what, uint32_t lbo, uint32_t sbo, float* dres, const std::vector<double>& ref,
                  double unit, auto launch) {
    CK(cudaMemset(dres, 0xff, ref.size() * 4));
    launch(lbo, sbo);
    CK(cudaDeviceSynchronize());
    std::vector<float> got(ref.size());
    CK(cudaMemcpy(got.data(), dres, got.size() * 4, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (size_t i = 0; i < got.size(); i++) worst = std::fmax(worst, std::fabs(got[i] - ref[i]) / unit);
    const bool good = worst < 1e-3;  // (NaN, from the 0xff poison, is not)
    std::printf("%s, LBO %u SBO %u: worst |error| %.3g of the scale %s\n", what, lbo, sbo, worst,
                good ? "MATCH" : "no");
    return good;
  };
  auto qk = [&](uint32_t lbo, uint32_t sbo) { qk_probe<<<1, 128, 65536 + 1024>>>(dq, dk, ds, lbo, sbo); };
  auto pv = [&](uint32_t lbo, uint32_t sbo) { pv_probe<<<1, 128, 16384 + 1024>>>(dp, dv, dout, lbo, sbo); };
  const char* qk_name = "QK m64n64k16, K-major 128B swizzle";
  const char* pv_name = "PV m64n128k16, B MN-major 128B swizzle (trans-b)";
  // the attention's own constants (cuda/prefill_attention_wgmma.cuh): the exit status
  const bool qk_ok = check(qk_name, wg::kKMajorLbo, wg::kKMajorSbo, ds, sref, 16.0, qk);
  const bool pv_ok = check(pv_name, wg::kMnMajorLbo, wg::kMnMajorSbo, dout, oref, 8.0, pv);
  // the other candidates, for the record (on the H200 LBO 0 for QK matches too; the swapped PV does not)
  check(qk_name, 0, 1024, ds, sref, 16.0, qk);
  check(pv_name, 1024, 8192, dout, oref, 8.0, pv);
  std::printf("the attention's encodings: QK %s, PV %s\n", qk_ok ? "MATCH" : "WRONG", pv_ok ? "MATCH" : "WRONG");
  return qk_ok && pv_ok ? 0 : 1;
}
