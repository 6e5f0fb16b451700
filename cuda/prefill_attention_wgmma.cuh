// Hopper's warpgroup MMA (wgmma) for the fast prefill attention's wg and wg2 forms (prefill_attention.cu, which
// includes this file); sm_90a only: every helper is empty in another build, where those forms are never
// launched (fast_attn_wgmma_built). What the forms compute and in which order is written at their kernels.
//   Operands: Q, K and V in shared memory as bf16 in the 128-byte swizzle (atoms of 64 columns, each
//   [rows][128 bytes], row r's 16-byte chunk j at chunk j ^ (r % 8); wg::sw gives an element's byte offset).
//   qk_step: S[64][64] += Q·Kᵀ over 16 of d, m64n64k16, A and B from shared memory, both K-major.
//   pv_step: O[64][D] += P·V over 16 keys, m64nDk16, A = P from registers (bf16 pairs in the m16n8k16
//   A-fragment layout), B = V MN-major (trans-b).
//   Descriptors: the constants below, settled on the H200 by tests/probe_wgmma.cu (both QK candidates and the
//   first PV candidate match a float64 product; the swapped PV encoding does not).
#pragma once

namespace wg {

// K-major operands (Q, K): 8-row groups 1024 bytes apart (SBO); LBO unused inside one 128-byte atom.
constexpr uint32_t kKMajorLbo = 16, kKMajorSbo = 1024;
// MN-major V: 8-key groups 1024 bytes apart (SBO), 64-column atoms 64 keys × 128 bytes = 8192 apart (LBO).
constexpr uint32_t kMnMajorLbo = 8192, kMnMajorSbo = 1024;

__device__ __forceinline__ uint64_t desc(const void* smem, uint32_t lbo, uint32_t sbo) {
  const uint64_t a = uint32_t(__cvta_generic_to_shared(smem));
  return ((a & 0x3ffff) >> 4) | (uint64_t((lbo >> 4) & 0x3fff) << 16) | (uint64_t((sbo >> 4) & 0x3fff) << 32) |
         (uint64_t(1) << 62);
}
// Byte offset of element (r, c) in a swizzled image of `rows` rows (c along the 128-byte atoms).
__device__ __forceinline__ uint32_t sw(int rows, int r, int c) {
  return uint32_t((c / 64) * rows * 128 + r * 128 + ((((c % 64) / 8) ^ (r % 8)) * 16) + (c % 8) * 2);
}

__device__ __forceinline__ void qk_step(float (&s)[32], uint64_t da, uint64_t db, int scale_d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, "
      "1, 0, 0;\n}\n"
      : "+f"(s[0]), "+f"(s[1]), "+f"(s[2]), "+f"(s[3]), "+f"(s[4]), "+f"(s[5]), "+f"(s[6]), "+f"(s[7]), "+f"(s[8]),
        "+f"(s[9]), "+f"(s[10]), "+f"(s[11]), "+f"(s[12]), "+f"(s[13]), "+f"(s[14]), "+f"(s[15]), "+f"(s[16]),
        "+f"(s[17]), "+f"(s[18]), "+f"(s[19]), "+f"(s[20]), "+f"(s[21]), "+f"(s[22]), "+f"(s[23]), "+f"(s[24]),
        "+f"(s[25]), "+f"(s[26]), "+f"(s[27]), "+f"(s[28]), "+f"(s[29]), "+f"(s[30]), "+f"(s[31])
      : "l"(da), "l"(db), "r"(scale_d));
#endif
}
template <int D>
__device__ __forceinline__ void pv_step(float (&o)[D / 2], const uint32_t (&a)[4], uint64_t db) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (D == 256) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
        "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, "
        "%35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, "
        "%57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, "
        "%79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, "
        "%100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, "
        "%118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
        : "+f"(o[0]), "+f"(o[1]), "+f"(o[2]), "+f"(o[3]), "+f"(o[4]), "+f"(o[5]), "+f"(o[6]), "+f"(o[7]), "+f"(o[8]),
          "+f"(o[9]), "+f"(o[10]), "+f"(o[11]), "+f"(o[12]), "+f"(o[13]), "+f"(o[14]), "+f"(o[15]), "+f"(o[16]),
          "+f"(o[17]), "+f"(o[18]), "+f"(o[19]), "+f"(o[20]), "+f"(o[21]), "+f"(o[22]), "+f"(o[23]), "+f"(o[24]),
          "+f"(o[25]), "+f"(o[26]), "+f"(o[27]), "+f"(o[28]), "+f"(o[29]), "+f"(o[30]), "+f"(o[31]), "+f"(o[32]),
          "+f"(o[33]), "+f"(o[34]), "+f"(o[35]), "+f"(o[36]), "+f"(o[37]), "+f"(o[38]), "+f"(o[39]), "+f"(o[40]),
          "+f"(o[41]), "+f"(o[42]), "+f"(o[43]), "+f"(o[44]), "+f"(o[45]), "+f"(o[46]), "+f"(o[47]), "+f"(o[48]),
          "+f"(o[49]), "+f"(o[50]), "+f"(o[51]), "+f"(o[52]), "+f"(o[53]), "+f"(o[54]), "+f"(o[55]), "+f"(o[56]),
          "+f"(o[57]), "+f"(o[58]), "+f"(o[59]), "+f"(o[60]), "+f"(o[61]), "+f"(o[62]), "+f"(o[63]), "+f"(o[64]),
          "+f"(o[65]), "+f"(o[66]), "+f"(o[67]), "+f"(o[68]), "+f"(o[69]), "+f"(o[70]), "+f"(o[71]), "+f"(o[72]),
          "+f"(o[73]), "+f"(o[74]), "+f"(o[75]), "+f"(o[76]), "+f"(o[77]), "+f"(o[78]), "+f"(o[79]), "+f"(o[80]),
          "+f"(o[81]), "+f"(o[82]), "+f"(o[83]), "+f"(o[84]), "+f"(o[85]), "+f"(o[86]), "+f"(o[87]), "+f"(o[88]),
          "+f"(o[89]), "+f"(o[90]), "+f"(o[91]), "+f"(o[92]), "+f"(o[93]), "+f"(o[94]), "+f"(o[95]), "+f"(o[96]),
          "+f"(o[97]), "+f"(o[98]), "+f"(o[99]), "+f"(o[100]), "+f"(o[101]), "+f"(o[102]), "+f"(o[103]), "+f"(o[104]),
          "+f"(o[105]), "+f"(o[106]), "+f"(o[107]), "+f"(o[108]), "+f"(o[109]), "+f"(o[110]), "+f"(o[111]),
          "+f"(o[112]), "+f"(o[113]), "+f"(o[114]), "+f"(o[115]), "+f"(o[116]), "+f"(o[117]), "+f"(o[118]),
          "+f"(o[119]), "+f"(o[120]), "+f"(o[121]), "+f"(o[122]), "+f"(o[123]), "+f"(o[124]), "+f"(o[125]),
          "+f"(o[126]), "+f"(o[127])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
  } else if constexpr (D == 128) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
        "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, "
        "%35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, "
        "%57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : "+f"(o[0]), "+f"(o[1]), "+f"(o[2]), "+f"(o[3]), "+f"(o[4]), "+f"(o[5]), "+f"(o[6]), "+f"(o[7]), "+f"(o[8]),
          "+f"(o[9]), "+f"(o[10]), "+f"(o[11]), "+f"(o[12]), "+f"(o[13]), "+f"(o[14]), "+f"(o[15]), "+f"(o[16]),
          "+f"(o[17]), "+f"(o[18]), "+f"(o[19]), "+f"(o[20]), "+f"(o[21]), "+f"(o[22]), "+f"(o[23]), "+f"(o[24]),
          "+f"(o[25]), "+f"(o[26]), "+f"(o[27]), "+f"(o[28]), "+f"(o[29]), "+f"(o[30]), "+f"(o[31]), "+f"(o[32]),
          "+f"(o[33]), "+f"(o[34]), "+f"(o[35]), "+f"(o[36]), "+f"(o[37]), "+f"(o[38]), "+f"(o[39]), "+f"(o[40]),
          "+f"(o[41]), "+f"(o[42]), "+f"(o[43]), "+f"(o[44]), "+f"(o[45]), "+f"(o[46]), "+f"(o[47]), "+f"(o[48]),
          "+f"(o[49]), "+f"(o[50]), "+f"(o[51]), "+f"(o[52]), "+f"(o[53]), "+f"(o[54]), "+f"(o[55]), "+f"(o[56]),
          "+f"(o[57]), "+f"(o[58]), "+f"(o[59]), "+f"(o[60]), "+f"(o[61]), "+f"(o[62]), "+f"(o[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
        "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, "
        "%34, %35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(o[0]), "+f"(o[1]), "+f"(o[2]), "+f"(o[3]), "+f"(o[4]), "+f"(o[5]), "+f"(o[6]), "+f"(o[7]), "+f"(o[8]),
          "+f"(o[9]), "+f"(o[10]), "+f"(o[11]), "+f"(o[12]), "+f"(o[13]), "+f"(o[14]), "+f"(o[15]), "+f"(o[16]),
          "+f"(o[17]), "+f"(o[18]), "+f"(o[19]), "+f"(o[20]), "+f"(o[21]), "+f"(o[22]), "+f"(o[23]), "+f"(o[24]),
          "+f"(o[25]), "+f"(o[26]), "+f"(o[27]), "+f"(o[28]), "+f"(o[29]), "+f"(o[30]), "+f"(o[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
  }
#endif
}
__device__ __forceinline__ void fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Waits until at most N of the warpgroup's committed groups are in flight (groups finish in order).
template <int N>
__device__ __forceinline__ void wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
__device__ __forceinline__ void commit_wait() {
  commit();
  wait<0>();
}

// The mbarrier and bulk-copy helpers of the wg2 form are device.cuh's (mbar_init, …, bulk_copy).
using hkv::cuda::async_proxy_fence;
using hkv::cuda::bulk_copy;
using hkv::cuda::mbar_arrive_expect;
using hkv::cuda::mbar_init;
using hkv::cuda::mbar_init_fence;
using hkv::cuda::mbar_wait;
using hkv::cuda::saddr;

}  // namespace wg
