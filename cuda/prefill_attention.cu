// The fast prefill path's attention (cuda/prefill.h): NOT EXACT, outside docs/ARITHMETIC.md's contract (§10);
// compared with the exact attention by tests/gpu_prefill.cpp and with the oracle by KL (hkv diff).
//
// fast_attention, per KV head kvh (the G = H/KV query heads that share it):
//   1. kv_decode_rows: cache rows [0, p0 + n) of kvh, K and V, decoded to bf16 [keys][D] in the scratch
//      (the stored value s_g·u_d of value_at, rounded once to nearest even).
//      (wg2: written as the shared-memory images of 64-key tiles, kv_decode_rows_kernel's TILED form)
//   2. the attention kernel of the form HKV_FLASH_CFG picks (Tuning's flash; auto: wg2 where the build
//      has wgmma, else 8x2). All forms compute the steps below; 8x2 and 4x1 (flash_attn_kernel on mma.sync)
//      and wg (the same kernel on wgmma) in this order, wg2 (flash_attn_wg2_kernel) in wg's order with the
//      next tile's Q·Kᵀ and the softmax overlapping P·V, byte for byte wg's output.
//      flash_attn_kernel: the M = n·G query rows r = t·G + g (pass row t, head kvh·G + g, position p0 + t) in
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
#include <stdexcept>
#include <string>

#include "cuda/check.h"
#include "cuda/device.cuh"
#include "cuda/prefill.h"
#include "cuda/prefill_attention_wgmma.cuh"

namespace hkv::cuda {
namespace {

constexpr int kBN = 64;  // keys a tile (a block takes 16·WARPS query rows: 128 by default)

// Keys [0, nkeys) of KV head kvh, K and V, as bf16 rows of D; a thread writes 8 elements (16 bytes). TILED (the
// wg2 form): as tile images instead, key k's 8 elements at byte (k/64)·(64·D·2) + wg::sw(64, k%64, d0), the
// shared-memory image of its 64-key tile, and keys [nkeys, nrows) (to the tile's end) zeros.
template <KvKind F, bool TILED>
__global__ void kv_decode_rows_kernel(const uint8_t* k_cache, const uint8_t* v_cache, int KV, int kvh, size_t row_bytes,
                                      int D, int64_t nkeys, int64_t nrows, uint16_t* kb, uint16_t* vb) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, per_row = D / 8;
  if (i >= 2 * nrows * per_row) return;
  const bool is_v = i >= nrows * per_row;
  const int64_t e = is_v ? i - nrows * per_row : i, key = e / per_row;
  const int d0 = int(e % per_row) * 8;
  uint32_t w[4] = {0, 0, 0, 0};
  if (key < nkeys) {
    const uint8_t* row = (is_v ? v_cache : k_cache) + kv_row_offset(key, kvh, KV, row_bytes, kv_block(F));
#pragma unroll
    for (int j = 0; j < 4; j++)
      w[j] = uint32_t(hkv::bf16_from_f32(value_at<F>(row, D, d0 + 2 * j))) |
             uint32_t(hkv::bf16_from_f32(value_at<F>(row, D, d0 + 2 * j + 1))) << 16;
  }
  unsigned char* dst = reinterpret_cast<unsigned char*>(is_v ? vb : kb);
  dst += TILED ? size_t(key / 64) * size_t(64 * D * 2) + wg::sw(64, int(key % 64), d0) : size_t(key * D + d0) * 2;
  *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
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

// The block's share of the work: tile `tile` (query rows r0 … r0+BM−1), key tiles [kt0, kt1) of its range.
struct TileWork {
  int64_t item, r0, kend;  // kend: keys [0, kend) are visible to some row of the tile
  int kt0, kt1;
};
template <int BM>
__device__ __forceinline__ TileWork tile_work(const FlashArgs& f) {
  TileWork w;
  w.item = f.tiles * f.nsplit - 1 - blockIdx.x;  // heaviest tiles first
  const int64_t tile = w.item / f.nsplit;
  const int split = int(w.item % f.nsplit);
  w.r0 = tile * BM;
  const int64_t r_last = (w.r0 + BM < f.M ? w.r0 + BM : f.M) - 1;
  w.kend = f.a.p0 + r_last / f.G + 1;
  const int64_t ntiles = (w.kend + kBN - 1) / kBN;
  w.kt0 = int(ntiles * split / f.nsplit), w.kt1 = int(ntiles * (split + 1) / f.nsplit);
  return w;
}

// The tile's queries into shared memory as bf16 (q4h: each 32-group rotated first), rows past M zeros; WG: in
// the 128-byte-swizzled image (wg::sw), else rows of LDS elements.
template <int D, bool ROT, int BM, int WARPS, int LDS, bool WG>
__device__ __forceinline__ void load_queries(const FlashArgs& f, int64_t r0, uint16_t* Qs, int warp, int lane) {
  const FastAttnArgs& a = f.a;
  for (int i = warp; i < BM; i += WARPS) {
    const int64_t r = r0 + i;
    const bool ok = r < f.M;
    const int64_t t = ok ? r / f.G : 0;
    const float* q = a.q + t * a.ldq + int64_t(f.kvh * f.G + (ok ? r % f.G : 0)) * D;
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
}

// One key tile's online softmax for this thread's two rows (g and g + 8 of its warp's 16), s in the m16n8
// accumulator layout (n-tile i: keys 8i + 2qd and +1): s' = s·c (base 2); on a diagonal tile, keys past a
// row's position to −inf; m' = max(m, max_j s'_j) over the row's 4 lanes (xor shuffles); α = 2^(m − m');
// p_j = bf16(2^(s'_j − m')) as pairs in the A-fragment layout (n-tiles 2k and 2k+1: the 16 keys of PV's k-step
// k); l = α·l + Σ_j p_j (the lane's share, from the rounded p). Returns α of each row in al0, al1.
template <int NT>
__device__ __forceinline__ void softmax_tile(const float (&acc)[NT][4], uint32_t (&p)[NT][2], float c, int k0,
                                             int pos_min, int pos0, int pos1, int qd, float& m0, float& m1, float& l0,
                                             float& l1, float& al0, float& al1) {
  float s[NT][4];  // (acc itself is not written: wgmma's accumulators stay untouched by other instructions)
#pragma unroll
  for (int i = 0; i < NT; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) s[i][e] = acc[i][e] * c;
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
  al0 = ex2(m0 - u0), al1 = ex2(m1 - u1);  // m = −∞ (nothing seen yet): 0
  m0 = n0, m1 = n1;
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
}

// O = α·O for this thread's two rows, skipped when every α of the warp is 1 (past the first key tiles the
// maxima rarely move).
template <int DT>
__device__ __forceinline__ void rescale(float (&o)[DT][4], float al0, float al1) {
  if (__any_sync(kFull, al0 != 1.0f || al1 != 1.0f)) {
#pragma unroll
    for (int i = 0; i < DT; i++) o[i][0] *= al0, o[i][1] *= al0, o[i][2] *= al1, o[i][3] *= al1;
  }
}

// The end of a block: l summed over each row's 4 lanes; with nsplit > 1 the range's partial result for
// flash_merge_kernel (unnormalized O, m, l; an empty range: O = 0, m = −∞, l = 0); else O/l staged in shared
// memory as fp32 over the tiles (each warp reads back only its own 16 rows) and store_row for each row.
template <int D, bool ROT, int BM>
__device__ __forceinline__ void finish_tile(const FlashArgs& f, int64_t item, int64_t r0, unsigned char* smem,
                                            float (&o)[D / 8][4], float m0, float m1, float l0, float l1, int warp,
                                            int lane) {
  constexpr int DT = D / 8;
  const int g = lane >> 2, qd = lane & 3;
#pragma unroll
  for (int off = 1; off <= 2; off *= 2) {
    l0 += __shfl_xor_sync(kFull, l0, off);
    l1 += __shfl_xor_sync(kFull, l1, off);
  }
  if (f.nsplit > 1) {
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
  const int64_t rw = r0 + warp * 16;
  for (int i = 0; i < 16; i++) {
    const int64_t r = rw + i;
    if (r >= f.M) break;
    float v[D / 32];
#pragma unroll
    for (int j = 0; j < D / 32; j++) v[j] = Os[(warp * 16 + i) * LDO + j * 32 + lane];
    store_row<D, ROT>(f, r, lane, v);
  }
}

// WARPS 8, STAGES 2 (HKV_FLASH_CFG=8x2): one block a multiprocessor, the next key tile loaded during this one;
// WARPS 4, STAGES 1 (HKV_FLASH_CFG=4x1): two blocks a multiprocessor, each loading its tile between barriers;
// WG (HKV_FLASH_CFG=wg): 8 warps, 2 stages, the products on wgmma (prefill_attention_wgmma.cuh).
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
  const TileWork w = tile_work<BM>(f);
  const int64_t r0 = w.r0, kend = w.kend;
  const int kt0 = w.kt0, kt1 = w.kt1;

  load_queries<D, ROT, BM, WARPS, LDS, WG>(f, r0, Qs, warp, lane);
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
                // zero-fill form, which takes 81 more instructions a tile and 7 registers)
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
    if constexpr (WG) wg::async_proxy_fence();  // this thread's copies and stores, seen by wgmma's async proxy
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
    uint32_t p[NT][2];
    float al0, al1;
    softmax_tile<NT>(s, p, f.c, k0, pos_min, pos0, pos1, qd, m0, m1, l0, l1, al0, al1);
    rescale<DT>(o, al0, al1);
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
  finish_tile<D, ROT, BM>(f, w.item, r0, smem, o, m0, m1, l0, l1, warp, lane);
}

// HKV_FLASH_CFG=wg2 (the default where the build has wgmma): the wg form's arithmetic, in the same order, with
//   - K and V read as tile images (kv_decode_rows with TILED: a 64-key tile is its shared-memory image, the
//     128-byte swizzle included, keys past the last zero), each copied in by one bulk copy (cp.async.bulk) that
//     one thread issues and an mbarrier counts, instead of 16 cp.async a thread;
//   - the products of a tile overlapped with the softmax: in loop step i, S_i = Q·K_iᵀ and O += P_{i−1}·V_{i−1}
//     are issued together, the softmax of S_i runs while the second is in flight, and O is rescaled by α_i after
//     it. O therefore goes through (… + P_{i−1}·V_{i−1})·α_i + P_i·V_i, the wg form's operations in its order,
//     and the two forms give the same bytes (tests/gpu_prefill.cpp checks it).
// Shared memory: Q (128 rows), K stages 0 and 1, V stages 0 and 1, each a swizzled image. Step i waits for round
// i of the copies (K_i into K stage i&1, V_{i−1} into V stage (i−1)&1, on mbarrier i&1), then issues round i+1
// (K_{i+1}, V_i) into the stages that K_{i−1} and V_{i−2} left: every warp finished those products in step i−1,
// before its closing barrier. After the loop, round n brings V_{n−1} for the last P·V, and a barrier before the
// epilogue's staging (which writes over the tiles). H200, the 27B layout, the last 4,096-row pass of a 262,144-
// token prompt: 586 TFLOP/s, against 386 for wg and 256 for 8x2 (docs/RESULTS.md §13).
template <int D, bool ROT>
__global__ void __launch_bounds__(256, 1) flash_attn_wg2_kernel(FlashArgs f) {
  constexpr int NT = kBN / 8, DT = D / 8, BM = 128;
  constexpr uint32_t TILE = kBN * D * 2;  // bytes of a key tile's image, K or V
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ __align__(8) uint64_t bar[2];
  unsigned char* base = smem + ((1024u - (uint32_t(__cvta_generic_to_shared(smem)) & 1023u)) & 1023u);
  uint16_t* Qs = reinterpret_cast<uint16_t*>(base);
  unsigned char* Ks = base + BM * D * 2;  // [2][TILE]
  unsigned char* Vs = Ks + 2 * TILE;      // [2][TILE]
  const FastAttnArgs& a = f.a;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, G = f.G;
  const TileWork w = tile_work<BM>(f);
  const int64_t r0 = w.r0;
  const int n = w.kt1 - w.kt0;
  const unsigned char* kimg = reinterpret_cast<const unsigned char*>(f.kb) + size_t(w.kt0) * TILE;
  const unsigned char* vimg = reinterpret_cast<const unsigned char*>(f.vb) + size_t(w.kt0) * TILE;

  if (tid == 0) {
    wg::mbar_init(&bar[0], 1);
    wg::mbar_init(&bar[1], 1);
    wg::mbar_init_fence();
  }
  load_queries<D, ROT, BM, 8, D, true>(f, r0, Qs, warp, lane);
  for (uint32_t i = uint32_t(tid) * 16; i < TILE; i += 256 * 16)  // V stage 1 zeros, for step 0's empty P·V
    *reinterpret_cast<uint4*>(Vs + TILE + i) = make_uint4(0, 0, 0, 0);
  wg::async_proxy_fence();  // Q's and the zeros' stores, seen by wgmma's async proxy
  __syncthreads();
  if (tid == 0 && n > 0) {  // round 0: K_0
    wg::mbar_arrive_expect(&bar[0], TILE);
    wg::bulk_copy(Ks, kimg, TILE, &bar[0]);
  }

  const int g = lane >> 2, qd = lane & 3;
  const int64_t rw = r0 + warp * 16;
  auto clamp_row = [&](int64_t r) { return r < f.M ? r : f.M - 1; };
  const int pos0 = int(a.p0 + clamp_row(rw + g) / G), pos1 = int(a.p0 + clamp_row(rw + g + 8) / G);
  const int pos_min = int(a.p0 + clamp_row(rw) / G);
  const unsigned char* qb = reinterpret_cast<const unsigned char*>(Qs) + (warp / 4) * 64 * 128;
  float o[DT][4];
#pragma unroll
  for (int i = 0; i < DT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  // P of a key tile is computed in one step and multiplied by V in the next: two register sets, pa_ and pb_, in
  // turn (the loop unrolled by two), so that the softmax never writes registers that the P·V in flight reads
  // (one set copied into the other lets ptxas merge them, and it then serializes the wgmmas: warning C7513).
  uint32_t pa_[NT][2] = {}, pb_[NT][2] = {};
  // P·V's operands (A fragments and descriptors) are formed before wgmma.fence, with nothing in flight
  auto pv_operands = [&](const uint32_t(&pp)[NT][2], const unsigned char* vs, uint32_t(&pa)[kBN / 16][4],
                         uint64_t(&dv)[kBN / 16]) {
#pragma unroll
    for (int kk = 0; kk < kBN / 16; kk++) {
      pa[kk][0] = pp[2 * kk][0], pa[kk][1] = pp[2 * kk][1], pa[kk][2] = pp[2 * kk + 1][0];
      pa[kk][3] = pp[2 * kk + 1][1];
      dv[kk] = wg::desc(vs + kk * 16 * 128, wg::kMnMajorLbo, wg::kMnMajorSbo);
    }
  };
  auto issue_pv = [&](const uint32_t(&pa)[kBN / 16][4], const uint64_t(&dv)[kBN / 16]) {
#pragma unroll
    for (int kk = 0; kk < kBN / 16; kk++) wg::pv_step<D>(reinterpret_cast<float(&)[D / 2]>(o), pa[kk], dv[kk]);
    wg::commit();
  };
  // step i: prev = P_{i−1} (zeros at i = 0, against V stage 1's zeros: O stays +0), cur receives P_i
  auto step = [&](int i, const uint32_t(&prev)[NT][2], uint32_t(&cur)[NT][2]) {
    wg::mbar_wait(&bar[i & 1], uint32_t(i >> 1) & 1u);  // round i: K_i (and V_{i−1})
    if (tid == 0) {                                     // round i+1: K_{i+1} (if any) and V_i
      uint64_t* b = &bar[(i + 1) & 1];
      wg::mbar_arrive_expect(b, (i + 1 < n ? TILE : 0) + TILE);
      if (i + 1 < n) wg::bulk_copy(Ks + ((i + 1) & 1) * TILE, kimg + size_t(i + 1) * TILE, TILE, b);
      wg::bulk_copy(Vs + (i & 1) * TILE, vimg + size_t(i) * TILE, TILE, b);
    }
    float s[NT][4];
#pragma unroll
    for (int k = 0; k < NT; k++) s[k][0] = s[k][1] = s[k][2] = s[k][3] = 0.0f;
    uint32_t pa[kBN / 16][4];
    uint64_t dv[kBN / 16];
    pv_operands(prev, Vs + ((i - 1) & 1) * TILE, pa, dv);
    wg::fence();
    const unsigned char* ks = Ks + (i & 1) * TILE;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
      wg::qk_step(reinterpret_cast<float(&)[32]>(s),
                  wg::desc(qb + (kk / 4) * BM * 128 + (kk % 4) * 32, wg::kKMajorLbo, wg::kKMajorSbo),
                  wg::desc(ks + (kk / 4) * kBN * 128 + (kk % 4) * 32, wg::kKMajorLbo, wg::kKMajorSbo), kk > 0);
    wg::commit();
    issue_pv(pa, dv);
    wg::wait<1>();  // S_i (the older group) done; P_{i−1}·V_{i−1} may still run
    float al0, al1;
    softmax_tile<NT>(s, cur, f.c, (w.kt0 + i) * kBN, pos_min, pos0, pos1, qd, m0, m1, l0, l1, al0, al1);
    wg::wait<0>();  // P_{i−1}·V_{i−1} done
    rescale<DT>(o, al0, al1);
    __syncthreads();  // every warp is done with K_i and V_{i−1} before round i+2 copies over them
  };
  for (int i = 0; i < n; i += 2) {
    step(i, pb_, pa_);
    if (i + 1 < n) step(i + 1, pa_, pb_);
  }
  if (n > 0) {  // round n: V_{n−1}, and the last P·V (P_{n−1}: in pa_ when n is odd)
    wg::mbar_wait(&bar[n & 1], uint32_t(n >> 1) & 1u);
    uint32_t last[NT][2];
#pragma unroll
    for (int k = 0; k < NT; k++) last[k][0] = n & 1 ? pa_[k][0] : pb_[k][0], last[k][1] = n & 1 ? pa_[k][1] : pb_[k][1];
    uint32_t pa[kBN / 16][4];
    uint64_t dv[kBN / 16];
    pv_operands(last, Vs + ((n - 1) & 1) * TILE, pa, dv);
    wg::fence();
    issue_pv(pa, dv);
    wg::wait<0>();
  }
  // every warpgroup's last P·V is done before finish_tile stages O over the tiles' shared memory (without
  // this barrier one warpgroup's staging can overwrite V while the other's product still reads it: a race that
  // gpu_prefill shows under racecheck's timing)
  __syncthreads();
  finish_tile<D, ROT, BM>(f, w.item, r0, smem, o, m0, m1, l0, l1, warp, lane);
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

// One attention launch (a block a tile and key range), then, with split ranges, the merge.
template <int D, bool ROT>
void launch_attn(void (*kern)(FlashArgs), size_t smem, int threads, const FlashArgs& f, cudaStream_t st) {
  HKV_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kern<<<unsigned(f.tiles * f.nsplit), unsigned(threads), smem, st>>>(f);
  HKV_CHECK_LAUNCH();
  if (f.nsplit > 1) {
    flash_merge_kernel<D, ROT><<<unsigned((f.M + 7) / 8), 256, 0, st>>>(f);
    HKV_CHECK_LAUNCH();
  }
}

template <int D, bool ROT, int WARPS, int STAGES, bool WG = false>
void launch_flash(const FlashArgs& f, cudaStream_t st) {
  launch_attn<D, ROT>(flash_attn_kernel<D, ROT, WARPS, STAGES, WG>, flash_smem_bytes<D, WARPS, STAGES, WG>(),
                      WARPS * 32, f, st);
}

template <int D, bool ROT>
void launch_flash_wg2(const FlashArgs& f, cudaStream_t st) {
  // (the wg form's shared memory: Q, two K and two V stages)
  launch_attn<D, ROT>(flash_attn_wg2_kernel<D, ROT>, flash_smem_bytes<D, 8, 2, true>(), 256, f, st);
}

template <int D>
void launch_flash(const FlashArgs& f, bool rotated, int cfg, cudaStream_t st) {
  if (cfg == 3)
    rotated ? launch_flash_wg2<D, true>(f, st) : launch_flash_wg2<D, false>(f, st);
  else if (cfg == 1)
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
// The form as a number: 0 = 8x2 (8 warps, 2 stages, mma.sync), 1 = 4x1 (4 warps, 1 stage, 2 blocks a
// multiprocessor), 2 = wg (8 warps, 2 stages, wgmma), 3 = wg2 (wg's arithmetic with bulk copies and the softmax
// overlapped); wg and wg2 need an sm_90a build. Auto: wg2 where the build has wgmma, else 8x2.
int flash_cfg(FlashCfg c) {
  switch (c) {
    case FlashCfg::F8x2:
      return 0;
    case FlashCfg::F4x1:
      return 1;
    case FlashCfg::Wg:
      return 2;
    case FlashCfg::Wg2:
      return 3;
    case FlashCfg::Auto:
      break;
  }
  return fast_attn_wgmma_built() ? 3 : 0;
}
// The partials' room: 3 · (multiprocessors) · 128 query rows, whatever the rows a tile.
int64_t part_rows() { return 3 * int64_t(sm_count()) * 128; }

// The scratch, in order: K, then V of one KV head ([max_keys][D] bf16 each, max_keys rounded up to whole 64-key
// tiles for wg2's tile images), the split ranges' O
// ([part_rows][D] fp32) and their (m, l) ([part_rows][2] fp32); byte offsets and the whole.
struct ScratchLayout {
  size_t v, part_o, part_ml, bytes;
};
ScratchLayout scratch_layout(int64_t max_keys, int D) {
  const int64_t keys = (max_keys + kBN - 1) / kBN * kBN;
  const size_t kv = align256(size_t(keys) * size_t(D) * 2), po = align256(size_t(part_rows()) * size_t(D) * 4);
  return {kv, 2 * kv, 2 * kv + po, 2 * kv + po + align256(size_t(part_rows()) * 2 * 4)};
}

// Ranges a tile's keys are cut in: the fewest, from 1 to 16, for which tiles·n blocks fill at least 90% of
// their waves of per_sm blocks a multiprocessor (else the fullest); at most the heaviest tile's key tiles and
// max_items blocks. (On the H200, 192 tiles of the 4,096-row passes of the 27B shape on 132 SMs make 1.45 waves,
// the SMs active 71% of the launch; 2 ranges make 384 blocks, 97% of 3 waves.)
// forced > 0 (tests): that many ranges, clamped to the partials' room.
int choose_splits(int64_t tiles, int64_t key_tiles, int per_sm, int64_t max_items, int forced) {
  const int64_t sms = int64_t(sm_count()) * per_sm,
                cap = std::max<int64_t>(1, std::min<int64_t>(key_tiles, max_items / tiles));
  if (forced > 0) return int(std::min<int64_t>(forced, std::max<int64_t>(1, max_items / tiles)));
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

const char* fast_attn_form(FlashCfg cfg) {
  static const char* names[] = {"8x2", "4x1", "wg", "wg2"};
  return names[flash_cfg(cfg)];
}

size_t fast_attn_scratch_bytes(int64_t max_keys, int D) { return scratch_layout(max_keys, D).bytes; }

void fast_attention(const FastAttnArgs& a, cudaStream_t st, FlashCfg flash, int splits) {
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
  const int cfg = flash_cfg(flash);
  if (cfg >= 2 && !fast_attn_wgmma_built())
    throw std::runtime_error(
        "fast attention: HKV_FLASH_CFG=wg and wg2 need an sm_90a build on an sm_90 card "
        "(CMAKE_CUDA_ARCHITECTURES=90a)");
  const bool two = cfg == 1;
  f.bm = two ? 64 : 128;
  f.tiles = (f.M + f.bm - 1) / f.bm;
  f.nsplit = choose_splits(f.tiles, (a.p0 + a.n + kBN - 1) / kBN, two ? 2 : 1, part_rows() / f.bm, splits);
  char* p = static_cast<char*>(a.scratch);
  const ScratchLayout sl = scratch_layout(a.max_keys, D);
  uint16_t* kb = reinterpret_cast<uint16_t*>(p);
  uint16_t* vb = reinterpret_cast<uint16_t*>(p + sl.v);
  f.kb = kb, f.vb = vb;
  f.part_o = reinterpret_cast<float*>(p + sl.part_o);
  f.part_ml = reinterpret_cast<float*>(p + sl.part_ml);
  f.c = float(1.0 / std::sqrt(double(D)) * 1.4426950408889634);
  const bool rotated = a.kind == KvKind::Q4H;
  const bool tiled = cfg == 3;
  const int64_t nrows = tiled ? (nkeys + kBN - 1) / kBN * kBN : nkeys;  // (within the scratch's rounded keys)
  for (int kvh = 0; kvh < a.KV; kvh++) {
    const unsigned nb = blocks_for(2 * nrows * (D / 8), 256);
    auto decode = [&](auto kern) {
      kern<<<nb, 256, 0, st>>>(a.k_cache, a.v_cache, a.KV, kvh, a.row_bytes, D, nkeys, nrows, kb, vb);
    };
    switch (a.kind) {
      case KvKind::BF16:
        tiled ? decode(kv_decode_rows_kernel<KvKind::BF16, true>) : decode(kv_decode_rows_kernel<KvKind::BF16, false>);
        break;
      case KvKind::FP8:
        tiled ? decode(kv_decode_rows_kernel<KvKind::FP8, true>) : decode(kv_decode_rows_kernel<KvKind::FP8, false>);
        break;
      default:
        tiled ? decode(kv_decode_rows_kernel<KvKind::Q4H, true>) : decode(kv_decode_rows_kernel<KvKind::Q4H, false>);
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
