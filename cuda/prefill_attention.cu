// The fast prefill path's attention (cuda/prefill.h): NOT EXACT, outside docs/ARITHMETIC.md's contract (§10);
// compared with the exact attention by tests/gpu_prefill.cpp and with the oracle by KL (hkv diff).
//
// fast_attention, per KV head kvh (the G = H/KV query heads that share it):
//   1. kv_decode_rows: cache rows [0, p0 + n) of kvh, K and V, decoded to bf16 [keys][D] in the scratch
//      (the stored value s_g·u_d of value_at, rounded once to nearest even).
//   2. flash_attn_kernel: the M = n·G query rows r = t·G + g (pass row t, head kvh·G + g, position p0 + t) in
//      tiles of 128 rows, one block of 8 warps a tile (HKV_FLASH_CFG=4x1: 64 rows, 4 warps, one key-tile stage, 2
//      blocks a multiprocessor), warp w owning rows 16w … 16w+15 of it:
//      - the tile's queries into shared memory as bf16 (q4h: each 32-group rotated first by warp_wht32, so the
//        scores are taken in the rotated space the keys are stored in);
//      - key tiles of 64 keys, k0 = 0, 64, … up to the tile's last visible key, loaded by cp.async into a
//        second stage while the first is used; per key tile and warp, with tensor cores
//        (mma.sync m16n8k16, bf16 operands, fp32 accumulation, k in increasing 16-steps):
//          S = Q·Kᵀ over d (16 rows × 64 keys); keys past a row's position get −inf;
//          in base 2: s' = S·(D^−½·log2 e); m' = max(m, max_j s'_j) (its 4 lanes' maxima combined by xor
//          shuffles); α = 2^(m − m'); p_j = bf16(2^(s'_j − m')); l = α·l + Σ_j p_j (the lane's own share of
//          the row, fp32); O = α·O (skipped when every α of the warp is 1) + P·V (16 rows × D, P taken from
//          the registers S was in);
//      - at the end l summed over the row's 4 lanes, O/l staged in shared memory as fp32, and per row and
//        32-group: warp_wht32 back (q4h), × sigmoid_c(gate), rounded to bf16 into out.
//   Tiles are launched heaviest (latest positions, most keys) first. When there are too few tiles to fill the
//   multiprocessors' waves (choose_splits), each tile's key tiles are cut in nsplit consecutive ranges, one
//   block a range, each writing its unnormalized O, m and l; then
//   3. flash_merge_kernel combines a row's ranges (m = max m_s, weights 2^(m_s − m)) and finishes it as above.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "cuda/check.h"
#include "cuda/device.cuh"
#include "cuda/prefill.h"
#include "cuda/prefill_attention_wgmma.cuh"

namespace hkv::cuda {
namespace {

constexpr int kBN = 64;  // keys a tile (a block takes 16·WARPS query rows: 128 by default)

// Keys [0, nkeys) of KV head kvh, K and V, as bf16 rows of D; a thread writes 8 elements (16 bytes).
template <KvKind F>
__global__ void kv_decode_rows_kernel(const uint8_t* k_cache, const uint8_t* v_cache, int KV, int kvh, size_t row_bytes,
                                      int D, int64_t nkeys, uint16_t* kb, uint16_t* vb) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, per_row = D / 8;
  if (i >= 2 * nkeys * per_row) return;
  const bool is_v = i >= nkeys * per_row;
  const int64_t e = is_v ? i - nkeys * per_row : i, key = e / per_row;
  const int d0 = int(e % per_row) * 8;
  const uint8_t* row = (is_v ? v_cache : k_cache) + (size_t(key) * KV + kvh) * row_bytes;
  uint32_t w[4];
#pragma unroll
  for (int j = 0; j < 4; j++)
    w[j] = uint32_t(hkv::bf16_from_f32(value_at<F>(row, D, d0 + 2 * j))) |
           uint32_t(hkv::bf16_from_f32(value_at<F>(row, D, d0 + 2 * j + 1))) << 16;
  *reinterpret_cast<uint4*>((is_v ? vb : kb) + key * D + d0) = make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
// c += a·b: m16n8k16, a row-major 16×16 (4 registers of bf16 pairs), b 16×8 (2), c fp32 16×8 (4).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));  // (results below 2^-126 flush to 0)
  return y;
}
// Two finite floats as a bf16 pair (lo in the low half), each rounded to nearest even: one cvt.rn.bf16x2.f32
// (hkv::bf16_from_f32's bit arithmetic gives the same bits for finite values in about 5 instructions each).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ float bf16_lo(uint32_t p) { return __uint_as_float(p << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t p) { return __uint_as_float(p & 0xffff0000u); }

template <int D, int WARPS, int STAGES, bool WG = false>
constexpr size_t flash_smem_bytes() {
  // bf16 a shared row: 16 bytes of padding make ldmatrix's 8 rows hit 8 banks (WG: swizzled atoms, no padding,
  // and 1024 bytes to align the first atom)
  constexpr size_t lds = WG ? D : D + 8;
  constexpr size_t bm = 16 * WARPS, tiles = (bm + 2 * STAGES * kBN) * lds * 2 + (WG ? 1024 : 0),
                   staged = bm * (D + 4) * 4;
  return tiles > staged ? tiles : staged;
}

struct FlashArgs {
  FastAttnArgs a;
  int kvh, G;
  int64_t M, tiles;
  int bm;      // query rows a tile (16 a warp)
  int nsplit;  // blocks a tile: its key tiles cut in nsplit consecutive ranges (1: no partials)
  const uint16_t *kb, *vb;
  float* part_o;   // nsplit > 1: [tile·nsplit + split][bm][D] unnormalized O of the range
  float* part_ml;  // [tile·nsplit + split][bm][2]: its m (base 2) and l
  float c;         // D^−½ · log2(e)
};

// Query row r's output (its warp together; v[j] = O/l at d = 32j + lane): warp_wht32 back (q4h), × sigmoid_c(gate),
// rounded to bf16 into out.
template <int D, bool ROT>
__device__ __forceinline__ void store_row(const FlashArgs& f, int64_t r, int lane, const float (&v)[D / 32]) {
  const FastAttnArgs& a = f.a;
  const int64_t t = r / f.G;
  const int h = f.kvh * f.G + int(r % f.G);
#pragma unroll
  for (int j = 0; j < D / 32; j++) {
    const int d = j * 32 + lane;
    float x = v[j];
    if constexpr (ROT) x = warp_wht32(x, lane);
    if (a.gate) x = x * hkv::sigmoid_c(a.gate[t * a.ldg + int64_t(h) * a.gate_stride + d]);
    a.out[t * a.ldo + int64_t(h) * D + d] = hkv::bf16_from_f32(x);
  }
}

// WARPS 8, STAGES 2 (the default): one block a multiprocessor, the next key tile loaded during this one;
// WARPS 4, STAGES 1 (HKV_FLASH_CFG=4x1): two blocks a multiprocessor, each loading its tile between barriers.
template <int D, bool ROT, int WARPS, int STAGES, bool WG>
__global__ void __launch_bounds__(WARPS * 32, WARPS == 4 ? 2 : 1) flash_attn_kernel(FlashArgs f) {
  static_assert(!WG || (WARPS == 8 && STAGES == 2), "the wgmma form: 2 warpgroups, 2 stages");
  constexpr int LDS = WG ? D : D + 8, NT = kBN / 8, DT = D / 8, BM = 16 * WARPS, THREADS = 32 * WARPS;
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* base = smem;
  if constexpr (WG) base += (1024u - (uint32_t(__cvta_generic_to_shared(smem)) & 1023u)) & 1023u;
  uint16_t* Qs = reinterpret_cast<uint16_t*>(base);
  uint16_t* Ks = Qs + BM * LDS;  // [STAGES][kBN][LDS]
  uint16_t* Vs = Ks + STAGES * kBN * LDS;
  // (WG: each of them the 128-byte-swizzled image of its rows, wg::sw gives an element's byte offset)
  const FastAttnArgs& a = f.a;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, G = f.G;
  const int64_t item = f.tiles * f.nsplit - 1 - blockIdx.x;  // heaviest tiles first
  const int64_t tile = item / f.nsplit, r0 = tile * BM;
  const int split = int(item % f.nsplit);
  const int64_t r_last = (r0 + BM < f.M ? r0 + BM : f.M) - 1;
  const int64_t kend = a.p0 + r_last / G + 1;  // keys [0, kend) are visible to some row of the tile
  const int64_t ntiles = (kend + kBN - 1) / kBN;
  const int kt0 = int(ntiles * split / f.nsplit), kt1 = int(ntiles * (split + 1) / f.nsplit);  // this block's

  // the tile's queries, bf16 (rows past M: zeros)
  for (int i = warp; i < BM; i += WARPS) {
    const int64_t r = r0 + i;
    const bool ok = r < f.M;
    const int64_t t = ok ? r / G : 0;
    const float* q = a.q + t * a.ldq + int64_t(f.kvh * G + (ok ? r % G : 0)) * D;
#pragma unroll
    for (int j = 0; j < D / 32; j++) {
      float v = ok ? q[j * 32 + lane] : 0.0f;
      if constexpr (ROT) v = warp_wht32(v, lane);
      if constexpr (WG)
        *reinterpret_cast<uint16_t*>(reinterpret_cast<unsigned char*>(Qs) + wg::sw(BM, i, j * 32 + lane)) =
            hkv::bf16_from_f32(v);
      else
        Qs[i * LDS + j * 32 + lane] = hkv::bf16_from_f32(v);
    }
  }
  auto load_tile = [&](int kt, int stage) {
    const int64_t k0 = int64_t(kt) * kBN;
    uint16_t* ks = Ks + stage * kBN * LDS;
    uint16_t* vs = Vs + stage * kBN * LDS;
    for (int i = tid; i < kBN * (D / 8); i += THREADS) {
      const int j = i / (D / 8), c = (i % (D / 8)) * 8;
      void* kd = WG ? static_cast<void*>(reinterpret_cast<unsigned char*>(ks) + wg::sw(kBN, j, c)) : ks + j * LDS + c;
      void* vd = WG ? static_cast<void*>(reinterpret_cast<unsigned char*>(vs) + wg::sw(kBN, j, c)) : vs + j * LDS + c;
      if (k0 + j < kend) {
        cp_async16(kd, f.kb + (k0 + j) * D + c);
        cp_async16(vd, f.vb + (k0 + j) * D + c);
      } else {  // (keys past the tile's last visible one: zeros; a branch costs the loop less than cp.async's
                // zero-fill form, which took 81 more instructions a tile and 7 registers)
        *reinterpret_cast<uint4*>(kd) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(vd) = make_uint4(0, 0, 0, 0);
      }
    }
  };

  // this thread's two rows: g = lane/4 and g + 8 of the warp's 16; their positions (rows past M: the last's)
  const int g = lane >> 2, qd = lane & 3;
  const int64_t rw = r0 + warp * 16;
  auto clamp_row = [&](int64_t r) { return r < f.M ? r : f.M - 1; };
  // positions as int (a context is far below 2^31) relative to the key tile in the loop
  const int pos0 = int(a.p0 + clamp_row(rw + g) / G), pos1 = int(a.p0 + clamp_row(rw + g + 8) / G);
  const int pos_min = int(a.p0 + clamp_row(rw) / G);
  float o[DT][4];
#pragma unroll
  for (int i = 0; i < DT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

  if constexpr (STAGES == 2) {
    if (kt0 < kt1) load_tile(kt0, 0);
    cp_async_commit();
  }
  for (int kt = kt0; kt < kt1; kt++) {
    if constexpr (STAGES == 2) {
      if (kt + 1 < kt1) load_tile(kt + 1, (kt + 1 - kt0) & 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      load_tile(kt, 0);
      cp_async_commit();
      cp_async_wait<0>();
    }
    if constexpr (WG) wg::proxy_fence();  // this thread's copies and stores, seen by wgmma's async proxy
    __syncthreads();
    const int stage = STAGES == 2 ? (kt - kt0) & 1 : 0;
    const uint16_t* ks = Ks + stage * kBN * LDS;
    const uint16_t* vs = Vs + stage * kBN * LDS;
    const int k0 = kt * kBN;
    // S = Q·Kᵀ
    float s[NT][4];
#pragma unroll
    for (int i = 0; i < NT; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
    if constexpr (WG) {  // the warpgroup's 64 rows (warp/4) against the tile's 64 keys, k-steps of 16 along d
      const unsigned char* qb = reinterpret_cast<const unsigned char*>(Qs) + (warp / 4) * 64 * 128;
      const unsigned char* kb = reinterpret_cast<const unsigned char*>(ks);
      wg::fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++)
        wg::qk_step(reinterpret_cast<float(&)[32]>(s),
                    wg::desc(qb + (kk / 4) * BM * 128 + (kk % 4) * 32, wg::kKMajorLbo, wg::kKMajorSbo),
                    wg::desc(kb + (kk / 4) * kBN * 128 + (kk % 4) * 32, wg::kKMajorLbo, wg::kKMajorSbo), kk > 0);
      wg::commit_wait();
    } else {
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++) {
        uint32_t qa[4];
        ldmatrix_x4(qa, Qs + (warp * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * LDS + kk * 16 + 8 * (lane >> 4));
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
          uint32_t kf[4];
          ldmatrix_x4(kf, ks + (np * 16 + (lane & 7) + 8 * (lane >> 4)) * LDS + kk * 16 + 8 * ((lane >> 3) & 1));
          mma_bf16(s[2 * np], qa, kf[0], kf[1]);
          mma_bf16(s[2 * np + 1], qa, kf[2], kf[3]);
        }
      }
    }
    // scale to base 2, mask, running maximum
#pragma unroll
    for (int i = 0; i < NT; i++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[i][e] *= f.c;
    if (k0 + kBN - 1 > pos_min) {  // a tile on the diagonal: keys past a row's position out
      const int lim0 = pos0 - k0 - 2 * qd, lim1 = pos1 - k0 - 2 * qd;  // key offset i·8 + (e & 1) must be <= lim
#pragma unroll
      for (int i = 0; i < NT; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          if (i * 8 + (e & 1) > (e < 2 ? lim0 : lim1)) s[i][e] = -INFINITY;
    }
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int i = 0; i < NT; i++) {
      mx0 = fmaxf(mx0, fmaxf(s[i][0], s[i][1]));
      mx1 = fmaxf(mx1, fmaxf(s[i][2], s[i][3]));
    }
#pragma unroll
    for (int off = 1; off <= 2; off *= 2) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(kFull, mx0, off));
      mx1 = fmaxf(mx1, __shfl_xor_sync(kFull, mx1, off));
    }
    const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
    const float u0 = n0 == -INFINITY ? 0.0f : n0, u1 = n1 == -INFINITY ? 0.0f : n1;
    const float al0 = ex2(m0 - u0), al1 = ex2(m1 - u1);  // m = −∞ (nothing seen yet): 0
    m0 = n0, m1 = n1;
    // P as bf16 pairs in the A-fragment layout: n-tiles 2k and 2k+1 are the 16 keys of PV's k-step k
    uint32_t p[NT][2];
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int i = 0; i < NT; i++) {
      p[i][0] = pack_bf16(ex2(s[i][0] - u0), ex2(s[i][1] - u0));
      p[i][1] = pack_bf16(ex2(s[i][2] - u1), ex2(s[i][3] - u1));
      sum0 += bf16_lo(p[i][0]) + bf16_hi(p[i][0]);
      sum1 += bf16_lo(p[i][1]) + bf16_hi(p[i][1]);
    }
    l0 = al0 * l0 + sum0;
    l1 = al1 * l1 + sum1;
    if (__any_sync(kFull, al0 != 1.0f || al1 != 1.0f)) {  // (past the first key tiles the maxima rarely move)
#pragma unroll
      for (int i = 0; i < DT; i++) o[i][0] *= al0, o[i][1] *= al0, o[i][2] *= al1, o[i][3] *= al1;
    }
    // O += P·V
    if constexpr (WG) {  // the warpgroup's 64 rows × D, k-steps of 16 keys; V MN-major (trans-b)
      wg::fence();
#pragma unroll
      for (int kk = 0; kk < kBN / 16; kk++) {
        const uint32_t pa[4] = {p[2 * kk][0], p[2 * kk][1], p[2 * kk + 1][0], p[2 * kk + 1][1]};
        wg::pv_step<D>(
            reinterpret_cast<float(&)[D / 2]>(o), pa,
            wg::desc(reinterpret_cast<const unsigned char*>(vs) + kk * 16 * 128, wg::kMnMajorLbo, wg::kMnMajorSbo));
      }
      wg::commit_wait();
    } else {
#pragma unroll
      for (int kk = 0; kk < kBN / 16; kk++) {
        const uint32_t pa[4] = {p[2 * kk][0], p[2 * kk][1], p[2 * kk + 1][0], p[2 * kk + 1][1]};
#pragma unroll
        for (int dp = 0; dp < DT / 2; dp++) {
          uint32_t vf[4];
          ldmatrix_x4_trans(vf, vs + (kk * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * LDS + dp * 16 + 8 * (lane >> 4));
          mma_bf16(o[2 * dp], pa, vf[0], vf[1]);
          mma_bf16(o[2 * dp + 1], pa, vf[2], vf[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with this stage before the next iteration loads into it
  }
  cp_async_wait<0>();
#pragma unroll
  for (int off = 1; off <= 2; off *= 2) {
    l0 += __shfl_xor_sync(kFull, l0, off);
    l1 += __shfl_xor_sync(kFull, l1, off);
  }
  if (f.nsplit > 1) {  // the range's partial result for flash_merge_kernel (an empty range: O = 0, m = −∞, l = 0)
    const int lr0 = warp * 16 + g, lr1 = lr0 + 8;
    float* po = f.part_o + item * BM * D;
#pragma unroll
    for (int i = 0; i < DT; i++) {
      const int c = i * 8 + 2 * qd;
      *reinterpret_cast<float2*>(po + lr0 * D + c) = make_float2(o[i][0], o[i][1]);
      *reinterpret_cast<float2*>(po + lr1 * D + c) = make_float2(o[i][2], o[i][3]);
    }
    if (qd == 0) {
      float* pml = f.part_ml + item * BM * 2;
      pml[lr0 * 2] = m0, pml[lr0 * 2 + 1] = l0;
      pml[lr1 * 2] = m1, pml[lr1 * 2 + 1] = l1;
    }
    return;
  }

  // O/l staged as fp32 (over the tiles' shared memory; each warp reads back only its own 16 rows)
  float* Os = reinterpret_cast<float*>(smem);
  constexpr int LDO = D + 4;
#pragma unroll
  for (int i = 0; i < DT; i++) {
    const int c = i * 8 + 2 * qd;
    Os[(warp * 16 + g) * LDO + c] = o[i][0] / l0;
    Os[(warp * 16 + g) * LDO + c + 1] = o[i][1] / l0;
    Os[(warp * 16 + g + 8) * LDO + c] = o[i][2] / l1;
    Os[(warp * 16 + g + 8) * LDO + c + 1] = o[i][3] / l1;
  }
  __syncwarp();
  for (int i = 0; i < 16; i++) {
    const int64_t r = rw + i;
    if (r >= f.M) break;
    float v[D / 32];
#pragma unroll
    for (int j = 0; j < D / 32; j++) v[j] = Os[(warp * 16 + i) * LDO + j * 32 + lane];
    store_row<D, ROT>(f, r, lane, v);
  }
}

// One warp a query row r < M when a tile's keys were cut in nsplit ranges: with m = max_s m_s and w_s = 2^(m_s − m)
// (0 for an empty range), l = Σ_s w_s·l_s and O = Σ_s w_s·O_s in split order; then as the single-range epilogue:
// O/l, warp_wht32 back (q4h), × sigmoid_c(gate), bf16.
template <int D, bool ROT>
__global__ void flash_merge_kernel(FlashArgs f) {
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= f.M) return;
  const int64_t tile = r / f.bm, i = r % f.bm;
  float m = -INFINITY;
  for (int s = 0; s < f.nsplit; s++) m = fmaxf(m, f.part_ml[((tile * f.nsplit + s) * f.bm + i) * 2]);
  float l = 0.0f, acc[D / 32];
#pragma unroll
  for (int j = 0; j < D / 32; j++) acc[j] = 0.0f;
  for (int s = 0; s < f.nsplit; s++) {
    const int64_t it = tile * f.nsplit + s;
    const float ms = f.part_ml[(it * f.bm + i) * 2], w = ms == -INFINITY ? 0.0f : ex2(ms - m);
    l += w * f.part_ml[(it * f.bm + i) * 2 + 1];
    const float* po = f.part_o + (it * f.bm + i) * D;
#pragma unroll
    for (int j = 0; j < D / 32; j++) acc[j] += w * po[j * 32 + lane];
  }
#pragma unroll
  for (int j = 0; j < D / 32; j++) acc[j] = acc[j] / l;
  store_row<D, ROT>(f, r, lane, acc);
}

template <int D, bool ROT, int WARPS, int STAGES, bool WG = false>
void launch_flash(const FlashArgs& f, cudaStream_t st) {
  constexpr size_t smem = flash_smem_bytes<D, WARPS, STAGES, WG>();
  auto* kern = flash_attn_kernel<D, ROT, WARPS, STAGES, WG>;
  HKV_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kern<<<unsigned(f.tiles * f.nsplit), WARPS * 32, smem, st>>>(f);
  HKV_CHECK_LAUNCH();
  if (f.nsplit > 1) {
    flash_merge_kernel<D, ROT><<<unsigned((f.M + 7) / 8), 256, 0, st>>>(f);
    HKV_CHECK_LAUNCH();
  }
}

template <int D>
void launch_flash(const FlashArgs& f, bool rotated, int cfg, cudaStream_t st) {
  if (cfg == 1)
    rotated ? launch_flash<D, true, 4, 1>(f, st) : launch_flash<D, false, 4, 1>(f, st);
  else if (cfg == 2)
    rotated ? launch_flash<D, true, 8, 2, true>(f, st) : launch_flash<D, false, 8, 2, true>(f, st);
  else
    rotated ? launch_flash<D, true, 8, 2>(f, st) : launch_flash<D, false, 8, 2>(f, st);
}

__global__ void wgmma_built_kernel(int* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *out = 1;
#else
  *out = 0;
#endif
}

}  // namespace

bool fast_attn_wgmma_built() {
  static int built = -1;
  if (built < 0) {
    int* d = nullptr;
    HKV_CUDA_CHECK(cudaMalloc(&d, sizeof(int)));
    wgmma_built_kernel<<<1, 1>>>(d);
    HKV_CHECK_LAUNCH();
    HKV_CUDA_CHECK(cudaMemcpy(&built, d, sizeof(int), cudaMemcpyDeviceToHost));
    HKV_CUDA_CHECK(cudaFree(d));
  }
  return built == 1;
}

bool fast_attn_head_dim_ok(int D) { return D == 64 || D == 128 || D == 256; }

namespace {
int g_splits = 0;  // set_fast_attn_splits: 0 = chosen per launch
// set_fast_attn_config / HKV_FLASH_CFG: 0 = 8x2 (8 warps, 2 stages, mma.sync), 1 = 4x1 (4 warps, 1 stage,
// 2 blocks a multiprocessor), 2 = wg (8 warps, 2 stages, wgmma: an sm_90a build only)
int g_cfg = -1;
int flash_cfg() {
  if (g_cfg < 0) {
    const char* e = std::getenv("HKV_FLASH_CFG");
    const std::string v = e ? e : "";
    g_cfg = v == "4x1" ? 1 : v == "wg" ? 2 : 0;
  }
  return g_cfg;
}
// The partials' room: 3 · (multiprocessors) · 128 query rows, whatever the rows a tile.
int64_t part_rows() { return 3 * int64_t(sm_count()) * 128; }

// The scratch, in order: K, then V of one KV head ([max_keys][D] bf16 each), the split ranges' O
// ([part_rows][D] fp32) and their (m, l) ([part_rows][2] fp32); byte offsets and the whole.
struct ScratchLayout {
  size_t v, part_o, part_ml, bytes;
};
ScratchLayout scratch_layout(int64_t max_keys, int D) {
  const size_t kv = align256(size_t(max_keys) * size_t(D) * 2), po = align256(size_t(part_rows()) * size_t(D) * 4);
  return {kv, 2 * kv, 2 * kv + po, 2 * kv + po + align256(size_t(part_rows()) * 2 * 4)};
}

// Ranges a tile's keys are cut in: the fewest, from 1 to 16, for which tiles·n blocks fill at least 90% of
// their waves of per_sm blocks a multiprocessor (else the fullest); at most the heaviest tile's key tiles and
// max_items blocks. (H200, 2026-11-30: 192 tiles of the 4,096-row passes of the 27B shape on 132 SMs ran
// 1.45 waves, the SMs active 71% of the launch; 2 ranges make 384 blocks, 97% of 3 waves.)
int choose_splits(int64_t tiles, int64_t key_tiles, int per_sm, int64_t max_items) {
  const int64_t sms = int64_t(sm_count()) * per_sm,
                cap = std::max<int64_t>(1, std::min<int64_t>(key_tiles, max_items / tiles));
  if (g_splits > 0) return int(std::min<int64_t>(g_splits, std::max<int64_t>(1, max_items / tiles)));
  int best = 1;
  double best_fill = 0;
  for (int n = 1; n <= 16 && n <= cap; n++) {
    const int64_t items = tiles * n;
    const double fill = double(items) / double((items + sms - 1) / sms * sms);
    if (fill >= 0.9) return n;
    if (fill > best_fill + 1e-9) best = n, best_fill = fill;
  }
  return best;
}
}  // namespace

void set_fast_attn_splits(int n) { g_splits = n < 0 ? 0 : n; }
void set_fast_attn_config(int cfg) { g_cfg = cfg < 0 || cfg > 2 ? 0 : cfg; }

size_t fast_attn_scratch_bytes(int64_t max_keys, int D) { return scratch_layout(max_keys, D).bytes; }

void fast_attention(const FastAttnArgs& a, cudaStream_t st) {
  if (a.n <= 0) return;
  if (!fast_attn_head_dim_ok(a.D))
    throw std::runtime_error("fast attention: head_dim " + std::to_string(a.D) +
                             " is not supported (64, 128 or 256; use --prefill exact)");
  if (a.H % a.KV != 0) throw std::runtime_error("fast attention: heads must be a multiple of kv heads");
  if (a.kind == KvKind::F32) throw std::invalid_argument("fast attention: the f32 cache is an oracle-only ablation");
  const int64_t nkeys = a.p0 + a.n;
  if (nkeys > a.max_keys || !a.scratch)
    throw std::runtime_error("fast attention: scratch for " + std::to_string(a.max_keys) + " keys, " +
                             std::to_string(nkeys) + " needed");
  const int G = a.H / a.KV, D = a.D;
  FlashArgs f;
  f.a = a;
  f.G = G;
  f.M = a.n * G;
  const int cfg = flash_cfg();
  if (cfg == 2 && !fast_attn_wgmma_built())
    throw std::runtime_error("fast attention: HKV_FLASH_CFG=wg needs an sm_90a build (CMAKE_CUDA_ARCHITECTURES=90a)");
  const bool two = cfg == 1;
  f.bm = two ? 64 : 128;
  f.tiles = (f.M + f.bm - 1) / f.bm;
  f.nsplit = choose_splits(f.tiles, (a.p0 + a.n + kBN - 1) / kBN, two ? 2 : 1, part_rows() / f.bm);
  char* p = static_cast<char*>(a.scratch);
  const ScratchLayout sl = scratch_layout(a.max_keys, D);
  uint16_t* kb = reinterpret_cast<uint16_t*>(p);
  uint16_t* vb = reinterpret_cast<uint16_t*>(p + sl.v);
  f.kb = kb, f.vb = vb;
  f.part_o = reinterpret_cast<float*>(p + sl.part_o);
  f.part_ml = reinterpret_cast<float*>(p + sl.part_ml);
  f.c = float(1.0 / std::sqrt(double(D)) * 1.4426950408889634);
  const bool rotated = a.kind == KvKind::Q4H;
  for (int kvh = 0; kvh < a.KV; kvh++) {
    const unsigned nb = blocks_for(2 * nkeys * (D / 8), 256);
    switch (a.kind) {
      case KvKind::BF16:
        kv_decode_rows_kernel<KvKind::BF16>
            <<<nb, 256, 0, st>>>(a.k_cache, a.v_cache, a.KV, kvh, a.row_bytes, D, nkeys, kb, vb);
        break;
      case KvKind::FP8:
        kv_decode_rows_kernel<KvKind::FP8>
            <<<nb, 256, 0, st>>>(a.k_cache, a.v_cache, a.KV, kvh, a.row_bytes, D, nkeys, kb, vb);
        break;
      default:
        kv_decode_rows_kernel<KvKind::Q4H>
            <<<nb, 256, 0, st>>>(a.k_cache, a.v_cache, a.KV, kvh, a.row_bytes, D, nkeys, kb, vb);
        break;
    }
    HKV_CHECK_LAUNCH();
    f.kvh = kvh;
    switch (D) {
      case 64:
        launch_flash<64>(f, rotated, cfg, st);
        break;
      case 128:
        launch_flash<128>(f, rotated, cfg, st);
        break;
      default:
        launch_flash<256>(f, rotated, cfg, st);
        break;
    }
  }
}

}  // namespace hkv::cuda
