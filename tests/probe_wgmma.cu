// A probe of Hopper's warpgroup MMA (wgmma) for the fast prefill attention's wg forms (not a test of hkv's
// results, and not built into hkv): which shared-memory descriptor encodings give the right products. On the
// H200 (session 7) both QK candidates and the first PV candidate matched: the constants in
// cuda/prefill_attention_wgmma.cuh.
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
// proxy, runs the products and stores the accumulators by the documented fragment layout (warp w: rows 16w + g
// and 16w + g + 8, columns 8i + 2c, +1 of each 8-column block i; g = lane/4, c = lane%4).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

__device__ __forceinline__ uint64_t desc(const void* smem, uint32_t lbo, uint32_t sbo) {
  const uint64_t a = uint32_t(__cvta_generic_to_shared(smem));
  return ((a & 0x3ffff) >> 4) | (uint64_t((lbo >> 4) & 0x3fff) << 16) | (uint64_t((sbo >> 4) & 0x3fff) << 32) |
         (uint64_t(1) << 62);  // 128-byte swizzle
}

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

__global__ void qk_probe(const unsigned char* qimg, const unsigned char* kimg, float* S, uint32_t lbo, uint32_t sbo) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* qs = aligned_smem(smem_raw);
  unsigned char* ks = qs + 32768;
  copy_in(qs, qimg, 32768);
  copy_in(ks, kimg, 32768);
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  float d[32];
  for (int i = 0; i < 32; i++) d[i] = 0.0f;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  for (int kk = 0; kk < 16; kk++) {
    const uint64_t da = desc(qs + (kk / 4) * 8192 + (kk % 4) * 32, lbo, sbo);
    const uint64_t db = desc(ks + (kk / 4) * 8192 + (kk % 4) * 32, lbo, sbo);
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
        "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, "
        "1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(1));
  }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  for (int i = 0; i < 8; i++) {
    S[(16 * w + g) * 64 + 8 * i + 2 * c] = d[4 * i];
    S[(16 * w + g) * 64 + 8 * i + 2 * c + 1] = d[4 * i + 1];
    S[(16 * w + g + 8) * 64 + 8 * i + 2 * c] = d[4 * i + 2];
    S[(16 * w + g + 8) * 64 + 8 * i + 2 * c + 1] = d[4 * i + 3];
  }
#endif
}

// P [64][64] bf16 row-major in global memory, read into the A fragments of the warp's 16 rows.
__global__ void pv_probe(const uint16_t* P, const unsigned char* vimg, float* O, uint32_t lbo, uint32_t sbo) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* sm = aligned_smem(smem_raw);
  copy_in(sm, vimg, 16384);
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  auto pair = [&](int r, int k) { return uint32_t(P[r * 64 + k]) | uint32_t(P[r * 64 + k + 1]) << 16; };
  float d[64];
  for (int i = 0; i < 64; i++) d[i] = 0.0f;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  for (int kk = 0; kk < 4; kk++) {
    const int r = 16 * w + g, k = 16 * kk + 2 * c;
    const uint32_t a0 = pair(r, k), a1 = pair(r + 8, k), a2 = pair(r, k + 8), a3 = pair(r + 8, k + 8);
    const uint64_t db = desc(sm + 2048 * kk, lbo, sbo);
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
        "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, "
        "%35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, "
        "%57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
          "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
          "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
          "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(1));
  }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  for (int i = 0; i < 16; i++) {
    O[(16 * w + g) * 128 + 8 * i + 2 * c] = d[4 * i];
    O[(16 * w + g) * 128 + 8 * i + 2 * c + 1] = d[4 * i + 1];
    O[(16 * w + g + 8) * 128 + 8 * i + 2 * c] = d[4 * i + 2];
    O[(16 * w + g + 8) * 128 + 8 * i + 2 * c + 1] = d[4 * i + 3];
  }
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

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      return 2;                                                                            \
    }                                                                                      \
  } while (0)

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
  int ok = 0;
  const uint32_t qk_cand[][2] = {{16, 1024}, {0, 1024}};
  for (auto& cnd : qk_cand) {
    CK(cudaMemset(ds, 0xff, 64 * 64 * 4));
    qk_probe<<<1, 128, 65536 + 1024>>>(dq, dk, ds, cnd[0], cnd[1]);
    CK(cudaDeviceSynchronize());
    std::vector<float> s(64 * 64);
    CK(cudaMemcpy(s.data(), ds, s.size() * 4, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (size_t i = 0; i < s.size(); i++) worst = std::fmax(worst, std::fabs(s[i] - sref[i]) / 16.0);
    const bool good = worst < 1e-3;  // (|S| ~ 16: fp32 sums of 256 products of N(0,1) bf16 values)
    ok += good;
    std::printf("QK m64n64k16, K-major 128B swizzle, LBO %u SBO %u: worst |error|/16 %.3g %s\n", cnd[0], cnd[1], worst,
                good ? "MATCH" : "no");
  }
  const uint32_t pv_cand[][2] = {{8192, 1024}, {1024, 8192}};
  for (auto& cnd : pv_cand) {
    CK(cudaMemset(dout, 0xff, 64 * 128 * 4));
    pv_probe<<<1, 128, 16384 + 1024>>>(dp, dv, dout, cnd[0], cnd[1]);
    CK(cudaDeviceSynchronize());
    std::vector<float> o(64 * 128);
    CK(cudaMemcpy(o.data(), dout, o.size() * 4, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (size_t i = 0; i < o.size(); i++) worst = std::fmax(worst, std::fabs(o[i] - oref[i]) / 8.0);
    const bool good = worst < 1e-3;
    ok += good;
    std::printf("PV m64n128k16, B MN-major 128B swizzle (trans-b), LBO %u SBO %u: worst |error|/8 %.3g %s\n", cnd[0],
                cnd[1], worst, good ? "MATCH" : "no");
  }
  std::printf("%d encodings matched (one QK and one PV expected)\n", ok);
  return ok >= 2 ? 0 : 1;
}
