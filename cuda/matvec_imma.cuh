// The decode MLX4 product with its integer sums on the tensor cores (HKV_MV_IMMA; off by default: an experiment,
// docs/RESULTS.md §11). Included by matvec.cu inside its anonymous namespace; the same bytes as mlx4_chunk and
// mlx4_rows, which ARITHMETIC.md §2 defines.
//
// What a block computes, and in which order:
//   A tile is 16 consecutive rows of one task's matrix. Blocks are persistent (one a multiprocessor) and take the
//   tiles blockIdx.x, + gridDim.x, … of the launch (the tasks' tiles one after another).
//   Warp 16, the producer: its lane 0 copies each of the block's tiles whole (the 16 rows' codes, scales and biases:
//   three contiguous ranges) into an S-stage ring in shared memory by cp.async.bulk, a full mbarrier counting the
//   bytes; it refills a stage once its consumers have arrived at the stage's empty mbarrier. It reads only weights,
//   so it starts before the kernel ahead has finished (no pdl_wait).
//   Warps 0–15, the consumers: after pdl_wait they make or stage x's records (as matvec_mlx4_smem_kernel does), then
//   in two groups of 8 warps take the block's tiles in turn (group q the tiles i ≡ q mod 2 of the block's list).
//   In a tile, chunk c (32 weights) belongs to contract lane c % 32; a step is chunks 4s … 4s + 3; warp w takes the
//   steps s ≡ w (mod 8) in increasing order, so every chunk of contract lane l passes through warp l / 4 in order and
//   its accumulator chain is mlx4_chunk's. Thread (g, t) = (lane / 4, lane % 4) closes chunk 4s + t of rows g and
//   g + 8: T, qx = float(T)·unit, acc = fma(s, qx, fma(b, xsum, acc)).
//   T by mma.sync.m16n8k32 (A = the codes as u8 bytes, rows g and g + 8; B = byte planes of X; s32 sums). Product j
//   of a step takes code word j of each thread's chunk: its low nibbles in the k slots of a0/a1, its high nibbles in
//   a2/a3, as the records' word 8p + 2j + h holds byte p of elements 8j + h + 2i. B is block diagonal: column n
//   belongs to chunk 4s + n/2, so only the lanes whose column's chunk is the chunk their k slots carry hold record
//   words, the rest zeros. Tile 01 (u8·u8): column 2t + p is plane p of chunk 4s + t; tile 2 (u8·s8): column 2t is
//   plane 2. After a step's 4 products thread (g, t) holds P0, P1, P2 of its two (row, chunk) pairs and
//   T = P0 + (P1 << 8) + (P2 << 16), exact (|T| < 2^31), as the dp4a chains give it.
//   A tile's end: the 16 rows' 32 contract-lane sums meet in shared memory; warp w of the group takes rows w and
//   w + 8, lane l holding contract lane l's sum, and runs lane_tree32 as the xor butterfly; lane 0 stores (with the
//   residual add when the task has it).
// Where it runs (imma_eligible): one input, the dependent launch, every task's rows a multiple of 16, and a ring of at
// least 2 stages beside the records in shared memory (so not the 27B down_proj, whose 16 rows take 139 KB). Mode 1
// also asks that the tiles fall evenly on the multiprocessors (the 5,120-row launches have 2.4 a multiprocessor).
// Probe and measurements: tests/probe_mlx4_imma.cu.

constexpr int kImmaConsumers = 16, kImmaThreads = 32 * (kImmaConsumers + 1);
// the dynamic shared memory a launch may take: the 227 KB a block may have, less 1 KB for the static (make_records'
// r_s)
constexpr size_t kImmaSmemMax = 226 * 1024;

__device__ __forceinline__ uint32_t imma_word(const uint4& v, int j) {
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}
// d = a·b + d, m16n8k32, s32 sums: d0, d1 columns 2t, 2t + 1 of row g; d2, d3 of row g + 8.
template <bool SIGNED>
__device__ __forceinline__ void imma16832(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (SIGNED)
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// mbarriers and bulk copies (sm_90): an mbarrier counts arrivals and the bytes of copies in flight; its phase completes
// when both reach zero, and waiters poll the parity of the phase they wait for.
__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(smem_addr(bar)), "r"(parity)
                 : "memory");
}
// `bytes` (a multiple of 16, both addresses 16-aligned) from global to shared memory by the copy engine, counted off
// bar's bytes when they land.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}
// bar.sync on a named barrier for n threads (the consumers, or one group of them)
__device__ __forceinline__ void named_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
struct ConsumerSync {  // make_records' barrier among the 512 consumer threads
  __device__ void operator()() const { named_sync(3, 32 * kImmaConsumers); }
};

// The shared memory of a launch: records (nch·128 bytes and 32 zero bytes), then, when the launch makes its records,
// hs (cols floats, the norm only) and vt (32·(nch + 1) floats), then the ring of S stages, its 2S mbarriers and the
// two groups' tree buffers.
struct ImmaLayout {
  size_t rec = 0, made = 0, ring = 0, stage = 0, bars = 0, total = 0;
  int stages = 0;
};
__host__ __device__ inline ImmaLayout imma_layout(int64_t cols, int group, bool made, bool norm, int stages) {
  ImmaLayout l;
  l.rec = size_t(cols / 32) * 128 + 32;
  l.made = made ? (norm ? size_t(cols) * 4 : 0) + size_t(32) * size_t(cols / 32 + 1) * 4 : 0;
  l.made = (l.made + 15) & ~size_t(15);
  l.ring = l.rec + l.made;
  l.stage = 16 * size_t(cols / 2) + 64 * size_t(cols / group);  // codes, scales, biases of 16 rows
  l.stages = stages;
  l.bars = l.ring + size_t(stages) * l.stage;
  l.total = l.bars + 16 * size_t(stages) + 2 * 16 * 32 * 4;
  return l;
}

template <bool PDL>
__global__ void __launch_bounds__(kImmaThreads, 1)
    matvec_mlx4_imma_kernel(Tasks ts, const uint32_t* xq, XSource src, unsigned opt, int S) {
  extern __shared__ __align__(128) uint8_t smem[];
  constexpr int T = 32 * kImmaConsumers, P = (kNormPreload + T - 1) / T;
  const int cols = int(ts.t[0].W.cols), nch = cols / 32, gpr = cols / ts.t[0].W.group;
  const int gsh = ts.t[0].W.group == 32 ? 0 : ts.t[0].W.group == 64 ? 1 : 2;
  const ImmaLayout L = imma_layout(cols, ts.t[0].W.group, src.x != nullptr, src.norm_w != nullptr, S);
  const uint32_t rb = uint32_t(cols / 2), cbytes = 16 * rb, sbytes = 32 * uint32_t(gpr), stage = uint32_t(L.stage);
  uint4* xs4 = reinterpret_cast<uint4*>(smem);  // [nch][8] records, swizzled as in matvec_mlx4_smem_kernel
  uint8_t* ring = smem + L.ring;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + L.bars);
  uint64_t* empty = full + S;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t total = ts.block_start[ts.n];
  if constexpr (PDL) {
    if (opt & kOptTrigger) pdl_trigger();
  }
  if (threadIdx.x == 0) {
    for (int i = 0; i < S; i++) mbar_init(&full[i], 1), mbar_init(&empty[i], 1);
    mbar_init_fence();
  }
  __syncthreads();               // the last barrier of the whole block: the producer leaves the others below
  if (warp == kImmaConsumers) {  // the producer
    if (lane == 0)
      for (int64_t tile = blockIdx.x, i = 0; tile < total; tile += gridDim.x, i++) {
        const int st = int(i % S);
        if (i >= S) mbar_wait(&empty[st], uint32_t((i / S - 1) & 1));
        int64_t local;
        const DMat& W = ts.t[find_task(ts, tile, local)].W;
        uint8_t* d = ring + size_t(st) * stage;
        mbar_arrive_expect(&full[st], stage);
        bulk_copy(d, static_cast<const uint8_t*>(W.data) + local * cbytes, cbytes, &full[st]);
        bulk_copy(d + cbytes, reinterpret_cast<const uint8_t*>(W.scales) + local * sbytes, sbytes, &full[st]);
        bulk_copy(d + cbytes + sbytes, reinterpret_cast<const uint8_t*>(W.biases) + local * sbytes, sbytes, &full[st]);
      }
    return;
  }
  // ---- the consumers: x's records (the norm's weights read before pdl_wait, as the smem kernel does) ----
  float wpre[P];
  const bool pre = src.x && src.norm_w && (opt & kOptNormW);
  if (pre) {
#pragma unroll
    for (int k = 0; k < P; k++) wpre[k] = threadIdx.x + k * T < cols ? __ldg(src.norm_w + threadIdx.x + k * T) : 0.0f;
  }
  if constexpr (PDL) pdl_wait();
  if (src.x) {
    float* hs = reinterpret_cast<float*>(smem + L.rec);
    make_records<1, T>(src, cols, xs4, hs, hs + (src.norm_w ? cols : 0), wpre, pre, ConsumerSync{});
  } else {
    const uint4* x4 = reinterpret_cast<const uint4*>(xq);
    const int units = nch * 8;
    for (int i0 = threadIdx.x; i0 < units; i0 += 8 * T) {
      uint4 u[8];
#pragma unroll
      for (int j = 0; j < 8; j++)
        if (i0 + j * T < units) u[j] = __ldg(x4 + i0 + j * T);
#pragma unroll
      for (int j = 0; j < 8; j++) {
        const int i = i0 + j * T;
        if (i < units) xs4[8 * (i >> 3) + ((i & 7) ^ ((i >> 3) & 7))] = u[j];
      }
    }
  }
  if (threadIdx.x < 2) xs4[nch * 8 + threadIdx.x] = make_uint4(0, 0, 0, 0);
  named_sync(3, T);
  // ---- the tiles ----
  const int q = warp / 8, w = warp % 8;  // group, warp in it
  float(*part)[32] = reinterpret_cast<float(*)[32]>(smem + L.bars + 16 * size_t(S)) + 16 * q;
  const int nsteps = cols / 128;
  const bool on01 = (g >> 1) == t, on2 = g == 2 * t;
  const uint4* zero = xs4 + nch * 8;
  for (int64_t i = q, tile = blockIdx.x + q * int64_t(gridDim.x); tile < total;
       i += 2, tile += 2 * int64_t(gridDim.x)) {
    const int st = int(i % S);
    mbar_wait(&full[st], uint32_t((i / S) & 1));
    const uint8_t* d = ring + size_t(st) * stage;
    const uint4* qa = reinterpret_cast<const uint4*>(d + size_t(g) * rb);
    const uint4* qb = reinterpret_cast<const uint4*>(d + size_t(g + 8) * rb);
    const uint16_t* s16 = reinterpret_cast<const uint16_t*>(d + cbytes);
    const uint16_t* b16 = reinterpret_cast<const uint16_t*>(d + cbytes + sbytes);
    float acc_a = 0.0f, acc_b = 0.0f;   // contract lane 4w + t of rows g and g + 8
    auto steps = [&](int s0, auto v) {  // V steps s0, s0 + 8, …: all shared-memory loads first
      constexpr int V = decltype(v)::value;
      uint4 ca[V], cb[V], b01[V][2], b2[V][2];
      uint2 xu[V];
      float sa[V], ba[V], sb[V], bb[V];
#pragma unroll
      for (int u = 0; u < V; u++) {
        const int c = 4 * (s0 + 8 * u) + t, gi = c >> gsh, sw = c & 7;
        const uint4* rec = xs4 + 8 * c;
        ca[u] = qa[c], cb[u] = qb[c];
        const int u01 = 2 * (g & 1);
        b01[u][0] = on01 ? rec[u01 ^ sw] : zero[0], b01[u][1] = on01 ? rec[(u01 + 1) ^ sw] : zero[1];
        b2[u][0] = on2 ? rec[4 ^ sw] : zero[0], b2[u][1] = on2 ? rec[5 ^ sw] : zero[1];
        const uint4 r6 = rec[6 ^ sw];
        xu[u] = make_uint2(r6.x, r6.y);  // the chunk sum and the unit
        sa[u] = hkv::f32_from_bf16(s16[g * gpr + gi]), ba[u] = hkv::f32_from_bf16(b16[g * gpr + gi]);
        sb[u] = hkv::f32_from_bf16(s16[(g + 8) * gpr + gi]), bb[u] = hkv::f32_from_bf16(b16[(g + 8) * gpr + gi]);
      }
#pragma unroll
      for (int u = 0; u < V; u++) {
        int d01[4] = {0, 0, 0, 0}, d2[4] = {0, 0, 0, 0};
#pragma unroll
        for (int j = 0; j < 4; j++) {
          const uint32_t wa = imma_word(ca[u], j), wb = imma_word(cb[u], j);
          const uint32_t a[4] = {wa & 0x0f0f0f0fu, wb & 0x0f0f0f0fu, (wa >> 4) & 0x0f0f0f0fu, (wb >> 4) & 0x0f0f0f0fu};
          imma16832<false>(d01, a, imma_word(b01[u][j / 2], 2 * (j % 2)), imma_word(b01[u][j / 2], 2 * (j % 2) + 1));
          imma16832<true>(d2, a, imma_word(b2[u][j / 2], 2 * (j % 2)), imma_word(b2[u][j / 2], 2 * (j % 2) + 1));
        }
        const int ta = int((uint32_t(d2[0]) << 16) + (uint32_t(d01[1]) << 8) + uint32_t(d01[0]));
        const int tb = int((uint32_t(d2[2]) << 16) + (uint32_t(d01[3]) << 8) + uint32_t(d01[2]));
        const float xs = __uint_as_float(xu[u].x), unit = __uint_as_float(xu[u].y);
        acc_a = hkv::fma_rn(sa[u], __int2float_rn(ta) * unit, hkv::fma_rn(ba[u], xs, acc_a));
        acc_b = hkv::fma_rn(sb[u], __int2float_rn(tb) * unit, hkv::fma_rn(bb[u], xs, acc_b));
      }
    };
    const int mine = (nsteps - w + 7) / 8;
    int m = 0;
    for (; m + 2 <= mine; m += 2) steps(w + 8 * m, std::integral_constant<int, 2>{});
    if (m < mine) steps(w + 8 * m, std::integral_constant<int, 1>{});
    part[g][4 * w + t] = acc_a;
    part[g + 8][4 * w + t] = acc_b;
    named_sync(1 + q, 256);  // the stage is read and part written by the group's 8 warps
    if (w == 0 && lane == 0) mbar_arrive(&empty[st]);
    int64_t local;
    const MatTask& task = ts.t[find_task(ts, tile, local)];
    for (int r = w; r < 16; r += 8) {
      const float v = warp_tree_sum(part[r][lane]);
      if (lane == 0) {
        float* y = task.y + local * 16 + r;
        *y = task.add ? *y + v : v;  // the residual add h = h + y, one fp32 addition
      }
    }
    named_sync(1 + q, 256);  // part is read before the group's next tile writes it
  }
}
