// The engine's kernels against the oracle's functions, op by op, byte for byte, on seeded random inputs
// including odd shapes: matvec (f32, bf16, f16, MLX4 with groups 32/64/128; 1..11 input rows), RMSNorm,
// l2norm, cache row packing (bf16, fp8, q4h), attention over the cache (chunks of 512 crossed), and the
// DeltaNet step. One line per case, as llama.cpp's test-backend-ops.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>

#include "cuda/kernels.h"
#include "reference/kvformat.h"
#include "reference/model.h"
#include "reference/scalar.h"
#include "reference/weights.h"
#include "tests/gpu_util.h"

using namespace hkv;
using namespace hkv::gputest;

namespace {

struct HostMatrix {
  Matrix m;
  std::vector<float> f32;
  std::vector<uint16_t> h16, sb;
  std::vector<uint32_t> q;
};

std::unique_ptr<HostMatrix> random_matrix(WType t, int64_t rows, int64_t cols, int group, uint64_t seed) {
  auto hm = std::make_unique<HostMatrix>();
  hm->m.type = t;
  hm->m.rows = rows;
  hm->m.cols = cols;
  std::vector<float> g = gaussian(size_t(rows * cols), seed, 0.5f);
  if (t == WType::F32) {
    hm->f32 = g;
    hm->m.data = hm->f32.data();
  } else if (t == WType::BF16 || t == WType::F16) {
    for (float v : g) hm->h16.push_back(t == WType::BF16 ? bf16_from_f32(v) : f16_from_f32(v));
    hm->m.data = hm->h16.data();
  } else {
    std::mt19937_64 r(seed);
    hm->q.resize(size_t(rows * cols / 8));
    for (auto& w : hm->q) w = uint32_t(r());
    const size_t ng = size_t(rows * (cols / group));
    hm->sb.resize(2 * ng);
    std::vector<float> s = gaussian(2 * ng, seed + 1, 0.05f);
    for (size_t i = 0; i < ng; i++) {
      hm->sb[i] = bf16_from_f32(std::fabs(s[i]) + 0.01f);
      hm->sb[ng + i] = bf16_from_f32(-8.0f * std::fabs(s[ng + i]));
    }
    hm->m.data = hm->q.data();
    hm->m.scales = hm->sb.data();
    hm->m.biases = hm->sb.data() + ng;
    hm->m.group = group;
  }
  return hm;
}

cuda::DMat to_device(const Matrix& m, std::vector<std::unique_ptr<DBuf<uint8_t>>>& keep) {
  cuda::DMat d;
  d.type = m.type, d.rows = m.rows, d.cols = m.cols, d.group = m.group;
  auto up = [&](const void* p, size_t n) {
    keep.push_back(std::make_unique<DBuf<uint8_t>>(n));
    HKV_CUDA_CHECK(cudaMemcpy(keep.back()->p, p, n, cudaMemcpyHostToDevice));
    return keep.back()->p;
  };
  if (m.type == WType::MLX4) {
    const size_t ng = size_t(m.rows * (m.cols / m.group));
    d.data = up(m.data, size_t(m.rows * m.cols / 2));
    d.scales = reinterpret_cast<const uint16_t*>(up(m.scales, ng * 2));
    d.biases = reinterpret_cast<const uint16_t*>(up(m.biases, ng * 2));
  } else {
    d.data = up(m.data, m.nbytes());
  }
  return d;
}

// The matrices of a fused launch: host copies (for the oracle's matmul) and their device images; matrix m has
// rows[m] rows and seed seed + m.
struct MatSet {
  std::vector<std::unique_ptr<HostMatrix>> host;
  std::vector<std::unique_ptr<DBuf<uint8_t>>> keep;
  std::vector<cuda::DMat> dev;
};
MatSet random_matrices(WType t, const std::vector<int64_t>& rows, int64_t cols, int group, uint64_t seed) {
  MatSet ms;
  for (size_t m = 0; m < rows.size(); m++) {
    ms.host.push_back(random_matrix(t, rows[m], cols, group, seed + m));
    ms.dev.push_back(to_device(ms.host.back()->m, ms.keep));
  }
  return ms;
}

// The records (cuda::kXqWords words a 32-element chunk; xq_chunk in cuda/device.cuh) that the engine must
// make of x [rows][n], built here from the oracle's x_chunks.
std::vector<uint32_t> expected_records(const float* x, int64_t rows, int64_t n) {
  std::vector<uint32_t> rec(size_t(rows * (n / 32) * cuda::kXqWords), 0u);
  for (int64_t r = 0; r < rows; r++) {
    const XChunks xc = x_chunks(x + r * n, n);
    for (int64_t c = 0; c < n / 32; c++) {
      uint32_t* w = rec.data() + (r * (n / 32) + c) * cuda::kXqWords;
      for (int j = 0; j < 32; j++)
        for (int p = 0; p < 3; p++)  // byte p of X_j, in word 8p + 2k + h at byte b, for j = 8k + h + 2b
          w[8 * p + 2 * (j / 8) + j % 2] |= ((uint32_t(xc.X[size_t(c * 32 + j)]) >> (8 * p)) & 0xffu)
                                            << (8 * ((j % 8) / 2));
      w[24] = f32_bits(xc.sum[size_t(c)]);
      w[25] = f32_bits(xc.unit[size_t(c)]);
    }
  }
  return rec;
}

// "" if got (at least want.size() words) starts with want's words, else where the first one differs.
std::string record_diff(const std::vector<uint32_t>& got, const std::vector<uint32_t>& want) {
  for (size_t i = 0; i < want.size(); i++)
    if (got[i] != want[i]) {
      char b[160];
      std::snprintf(b, sizeof b, "record word %zu (chunk %zu, word %zu): got %08x, want %08x", i, i / cuda::kXqWords,
                    i % cuda::kXqWords, got[i], want[i]);
      return b;
    }
  return "";
}

}  // namespace

TEST_CASE("xq_records: the MLX4 products' block fixed point of x, byte for byte with x_chunks") {
  // chunks of one scale each (subnormal, tiny, ordinary, huge), a chunk of zeros, one with an element 2^-40
  // of its largest, values just under a power of two (X rounds to 2^22), one inf and one NaN chunk
  const int64_t n = 32 * 12;
  std::vector<float> x = gaussian(size_t(n), 5, 1.0f);
  const float scale[8] = {1e-41f, 1e-38f, 3e-20f, 1.0f, 7.5e5f, 1e30f, 0.0f, 1.0f};
  for (int c = 0; c < 8; c++)
    for (int j = 0; j < 32; j++) x[size_t(32 * c + j)] *= scale[c];
  x[32 * 7 + 3] = std::ldexp(x[32 * 7 + 3], -40);
  for (int j = 0; j < 32; j++) x[size_t(32 * 8 + j)] = (j % 2 ? -1.0f : 1.0f) * std::nextafter(2.0f, 0.0f);
  x[32 * 9 + 4] = INFINITY;
  x[32 * 10 + 30] = NAN;
  DBuf<float> dx(x);
  DBuf<uint32_t> dq(size_t((n / 32) * cuda::kXqWords));
  dq.poison();
  cuda::xq_records(dx.p, n, 1, n, dq.p, nullptr);
  std::string d = record_diff(dq.get(), expected_records(x.data(), 1, n));
  std::printf("xq_records(12 chunks of every kind): %s\n", d.empty() ? "OK" : ("FAIL " + d).c_str());
  CHECK_MESSAGE(d.empty(), d);
  // and the MLX4 product over those chunks (the inf and NaN ones left out: their results are NaN either way)
  const int64_t cols = 32 * 9, rows = 70;
  std::vector<float> xf(x.begin(), x.begin() + cols);
  auto hm = random_matrix(WType::MLX4, rows, cols, 32, 17);
  std::vector<std::unique_ptr<DBuf<uint8_t>>> keep;
  cuda::DMat W = to_device(hm->m, keep);
  std::vector<float> ref(static_cast<size_t>(rows));
  matmul(hm->m, xf.data(), 1, ref.data());
  DBuf<float> dxf(xf), dy(static_cast<size_t>(rows));
  DBuf<uint32_t> dq2(size_t((cols / 32) * cuda::kXqWords));
  dy.poison();
  cuda::matvec(W, dxf.p, cols, 1, dy.p, rows, dq2.p, nullptr);
  d = first_diff(dy.get(), ref);
  std::printf("matvec over those chunks: %s\n", d.empty() ? "OK" : ("FAIL " + d).c_str());
  CHECK_MESSAGE(d.empty(), d);
}

TEST_CASE("matvec: every weight type, odd shapes, 1..11 input rows, byte for byte") {
  struct Case {
    WType t;
    int64_t rows, cols;
    int group;
  };
  std::vector<Case> cases;
  for (WType t : {WType::F32, WType::BF16, WType::F16})
    for (auto [r, c] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 8}, {7, 40}, {33, 256}, {300, 1000}, {5, 1}, {17, 13}, {9, 5120}})
      cases.push_back({t, r, c, 0});
  for (int g : {32, 64, 128})
    for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{1, 128}, {13, 256}, {257, 1024}, {40, 5120}})
      cases.push_back({WType::MLX4, r, c, g});
  int passed = 0;
  for (size_t ci = 0; ci < cases.size(); ci++) {
    const Case& k = cases[ci];
    auto hm = random_matrix(k.t, k.rows, k.cols, k.group, 100 + ci);
    std::vector<std::unique_ptr<DBuf<uint8_t>>> keep;
    cuda::DMat W = to_device(hm->m, keep);
    for (int64_t N : {1, 3, 8, 11}) {
      std::vector<float> X = gaussian(size_t(N * k.cols), 7 + ci * 31 + size_t(N), 1.0f);
      std::vector<float> ref(size_t(N * k.rows));
      matmul(hm->m, X.data(), N, ref.data());
      DBuf<float> dx(X), dy(size_t(N * k.rows));
      DBuf<uint32_t> xs(size_t(N * (k.cols / 32 + 1) * cuda::kXqWords));
      dy.poison();
      cuda::matvec(W, dx.p, k.cols, N, dy.p, k.rows, xs.p, nullptr);
      std::string d = first_diff(dy.get(), ref);
      std::printf("matvec(type=%s,rows=%lld,cols=%lld,group=%d,N=%lld): %s\n", wtype_name(k.t), (long long)k.rows,
                  (long long)k.cols, k.group, (long long)N, d.empty() ? "OK" : ("FAIL " + d).c_str());
      CHECK_MESSAGE(d.empty(), d);
      passed += d.empty();
    }
  }
  std::printf("matvec: %d/%zu cases passed\n", passed, cases.size() * 4);
}

namespace {
// The decode MLX4 kernel's launch configurations (cuda::Tuning), by index: (1) the programmatic dependent launch (the
// default), (0) the ordinary one (HKV_PDL=0); (2) the default with the records staged one load at a time and the norm
// weights read after pdl_wait (HKV_MV_STAGE=0, HKV_MV_NORMW=0) and no prefetch into L2 (HKV_MV_PF=0); (3) the default
// with three rounds prefetched (HKV_MV_PF=9).
const char* const kLaunch[] = {"plain", "pdl", "pdl,prologue-unbatched,no-prefetch", "pdl,prefetch-3-rounds"};
const int kLaunches[] = {1, 0, 2, 3};
cuda::Tuning launch_tuning(int cfg) {
  cuda::Tuning t;
  t.pdl = cfg != 0;
  t.mv_stage = t.mv_normw = cfg != 2;
  t.mv_prefetch = cfg == 2 ? 0 : cfg == 3 ? 9 : 3;
  return t;
}
}  // namespace

TEST_CASE("matvec_multi: fused launches of several matrices, the wide-row paths, byte for byte") {
  // Row counts ≥ 8192 take the two-rows-a-warp MLX4 path; odd counts leave a warp with one row. Widths
  // 1024 / 2048 / 5120 / 17408 take 2, 4 and 6 chunks in flight a lane (17408: three rounds, the last short).
  struct Shape {
    WType t;
    std::vector<int64_t> rows;
    int64_t cols;
    int group;
  };
  const std::vector<Shape> shapes = {{WType::MLX4, {8195, 33, 1}, 1024, 64},
                                     {WType::MLX4, {8193, 7}, 2048, 32},
                                     {WType::MLX4, {9001}, 5120, 64},
                                     {WType::MLX4, {40, 8200}, 17408, 128},
                                     {WType::MLX4, {48, 48, 3000, 5}, 5120, 64},
                                     {WType::BF16, {300, 17, 1}, 1000, 0},
                                     {WType::F32, {9, 70}, 256, 0}};
  int passed = 0, total = 0;
  for (size_t si = 0; si < shapes.size(); si++) {
    const Shape& sh = shapes[si];
    const MatSet ms = random_matrices(sh.t, sh.rows, sh.cols, sh.group, 900 + si * 10);
    const std::vector<std::unique_ptr<HostMatrix>>& hms = ms.host;
    const std::vector<cuda::DMat>& dms = ms.dev;
    for (int64_t N : {1, 2, 5, 9}) {
      std::vector<float> X = gaussian(size_t(N * sh.cols), 77 + si * 13 + size_t(N), 1.0f);
      DBuf<float> dx(X);
      DBuf<uint32_t> xs(size_t(N * (sh.cols / 32 + 1) * cuda::kXqWords));
      cuda::xq_records(dx.p, sh.cols, N, sh.cols, xs.p, nullptr);
      std::vector<std::unique_ptr<DBuf<float>>> outs;
      std::vector<cuda::MatTask> tasks;
      for (size_t m = 0; m < dms.size(); m++) {
        const int64_t ldy = sh.rows[m] + 3;  // a padded output row
        outs.push_back(std::make_unique<DBuf<float>>(size_t(N * ldy)));
        outs.back()->poison();
        tasks.push_back({dms[m], outs.back()->p, ldy});
      }
      // every launch configuration of the decode MLX4 kernel (kLaunch); other types and widths have one launch
      for (int cfg : kLaunches) {
        if (cfg != 1 && (sh.t != WType::MLX4 || N > 2)) continue;
        for (auto& o : outs) o->poison();
        cuda::matvec_multi(tasks.data(), int(tasks.size()), dx.p, sh.cols, N, xs.p, nullptr, launch_tuning(cfg));
        for (size_t m = 0; m < dms.size(); m++) {
          const int64_t R = sh.rows[m], ldy = R + 3;
          std::vector<float> ref(size_t(N * R)), got = outs[m]->get(), gotc(size_t(N * R));
          matmul(hms[m]->m, X.data(), N, ref.data());
          for (int64_t n = 0; n < N; n++)
            for (int64_t r = 0; r < R; r++) gotc[size_t(n * R + r)] = got[size_t(n * ldy + r)];
          std::string d = first_diff(gotc, ref);
          // Rows past R (the last warp's missing rows) are read but never stored: the padding keeps its poison.
          for (int64_t n = 0; n < N && d.empty(); n++)
            for (int64_t r = R; r < ldy; r++) {
              uint32_t bits;
              std::memcpy(&bits, &got[size_t(n * ldy + r)], 4);
              if (bits != 0xa5a5a5a5u) {
                d = "padding element " + std::to_string(r) + " of output row " + std::to_string(n) + " was written";
                break;
              }
            }
          std::printf("matvec_multi(type=%s,cols=%lld,group=%d,matrix %zu of %zu,rows=%lld,N=%lld,launch=%s): %s\n",
                      wtype_name(sh.t), (long long)sh.cols, sh.group, m + 1, dms.size(), (long long)R, (long long)N,
                      kLaunch[cfg], d.empty() ? "OK" : ("FAIL " + d).c_str());
          CHECK_MESSAGE(d.empty(), d);
          passed += d.empty();
          total++;
        }
      }
    }
  }
  std::printf("matvec_multi: %d/%d cases passed\n", passed, total);
}

TEST_CASE("matvec_multi making its own records (XSource): from x, from rmsnorm(x), with the residual add") {
  // The decode launch that makes x's records in its prologue (and, with norm_w, x itself as rmsnorm) must give
  // the bytes of add_rmsnorm_rows / xq_records followed by the launch that reads them: the oracle's norm, then
  // matmul, then (add) y + product. x has chunks of every kind the norm lets through: a subnormal one, one whose
  // squares are subnormal, tiny and huge ones, zeros, an element 2^-40 of its chunk, values just under a power of
  // two.
  struct Shape {
    std::vector<int64_t> rows;
    int64_t cols;
    int group;
  };
  // (17408 + 17408 rows: the gate|up shape, which the 3-chunk launch takes on the H200's 132 multiprocessors, where it
  // leaves each warp less to carry; 16537 rows take 4 rows a warp there)
  const std::vector<Shape> shapes = {
      {{5120}, 6144, 64}, {{16500, 37}, 5120, 64}, {{70, 9, 1}, 1024, 32}, {{17408, 17408}, 1024, 64}};
  int passed = 0, total = 0;
  for (size_t si = 0; si < shapes.size(); si++) {
    const Shape& sh = shapes[si];
    const MatSet ms = random_matrices(WType::MLX4, sh.rows, sh.cols, sh.group, 1700 + si * 10);
    const std::vector<std::unique_ptr<HostMatrix>>& hms = ms.host;
    const std::vector<cuda::DMat>& dms = ms.dev;
    const std::vector<float> w = gaussian(size_t(sh.cols), 41 + si, 0.3f);
    DBuf<float> dw(w);
    for (int64_t N : {1, 2}) {
      std::vector<float> X = gaussian(size_t(N * sh.cols), 51 + si * 7 + size_t(N), 1.5f);
      // 1e-41: subnormal, its largest below 2^-106, so that X_j takes the two-step scaling (× 2^127 first)
      const float scale[8] = {1e-41f, 1e-25f, 1e-3f, 0.0f, 1.0f, 40.0f, 1e3f, 1.0f};
      for (int64_t n = 0; n < N; n++) {
        float* x = X.data() + n * sh.cols;
        for (int c = 0; c < 8; c++)
          for (int j = 0; j < 32; j++) x[32 * c + j] *= scale[c];
        x[32 * 7 + 5] = std::ldexp(x[32 * 7 + 5], -40);
        for (int j = 0; j < 32; j++) x[32 * 8 + j] = (j % 3 ? -1.0f : 1.0f) * std::nextafter(4.0f, 0.0f);
      }
      DBuf<float> dx(X);
      // mode 0: x as it is; 1: rmsnorm (1 + w); 2: rmsnorm plain (w)
      for (int mode = 0; mode < 3; mode++) {
        std::vector<float> xin(X.size());
        for (int64_t n = 0; n < N; n++) {
          const float* x = X.data() + n * sh.cols;
          float* o = xin.data() + n * sh.cols;
          if (mode == 0) std::copy(x, x + sh.cols, o);
          if (mode == 1) rmsnorm_1pw(x, w.data(), sh.cols, 1e-6f, o);
          if (mode == 2) rmsnorm_plain(x, w.data(), sh.cols, 1e-6f, o);
        }
        cuda::XSource src;
        src.x = dx.p, src.ldx = sh.cols, src.eps = 1e-6f;
        src.norm_w = mode ? dw.p : nullptr, src.plain = mode == 2;
        for (int add = 0; add < 2; add++)
          for (int cfg : kLaunches) {  // every launch configuration (kLaunch)
            std::vector<std::unique_ptr<DBuf<float>>> outs;
            std::vector<std::vector<float>> y0;
            std::vector<cuda::MatTask> tasks;
            for (size_t m = 0; m < dms.size(); m++) {
              const int64_t ldy = sh.rows[m] + 3;
              y0.push_back(gaussian(size_t(N * ldy), 61 + m, 1.0f));
              outs.push_back(std::make_unique<DBuf<float>>(y0.back()));
              tasks.push_back({dms[m], outs.back()->p, ldy, add == 1});
            }
            REQUIRE(cuda::matvec_fuses_records(tasks.data(), int(tasks.size()), N, mode != 0));
            cuda::matvec_multi(tasks.data(), int(tasks.size()), nullptr, 0, N, nullptr, nullptr, launch_tuning(cfg),
                               &src);
            for (size_t m = 0; m < dms.size(); m++) {
              const int64_t R = sh.rows[m], ldy = R + 3;
              std::vector<float> prod(size_t(N * R)), want = y0[m];
              matmul(hms[m]->m, xin.data(), N, prod.data());
              for (int64_t n = 0; n < N; n++)
                for (int64_t r = 0; r < R; r++) {
                  float& t = want[size_t(n * ldy + r)];
                  t = add ? t + prod[size_t(n * R + r)] : prod[size_t(n * R + r)];
                }
              const std::string d = first_diff(outs[m]->get(), want);  // the padding too: never written
              std::printf(
                  "matvec_multi+records(cols=%lld,group=%d,matrix %zu of %zu,rows=%lld,N=%lld,x=%s,add=%d,"
                  "launch=%s): %s\n",
                  (long long)sh.cols, sh.group, m + 1, dms.size(), (long long)R, (long long)N,
                  mode == 0   ? "as-is"
                  : mode == 1 ? "rmsnorm"
                              : "rmsnorm-plain",
                  add, kLaunch[cfg], d.empty() ? "OK" : ("FAIL " + d).c_str());
              CHECK_MESSAGE(d.empty(), d);
              passed += d.empty();
              total++;
            }
          }
      }
    }
  }
  std::printf("matvec_multi+records: %d/%d cases passed\n", passed, total);
  // where the records do not fit the decode kernel's shared memory, or the matrices are not all MLX4, the
  // launch refuses the source
  std::vector<std::unique_ptr<DBuf<uint8_t>>> keep;
  auto wide = random_matrix(WType::MLX4, 8, 17408, 64, 1790);
  auto dense = random_matrix(WType::BF16, 8, 1024, 0, 1791);
  const cuda::MatTask tw{to_device(wide->m, keep), nullptr, 8}, td{to_device(dense->m, keep), nullptr, 8};
  CHECK_FALSE(cuda::matvec_fuses_records(&tw, 1, 2, true));
  CHECK_FALSE(cuda::matvec_fuses_records(&td, 1, 1, false));
  // one 17408-column input: records 69,632 bytes and their transpose 69,760, past the 139,264 the kernel takes
  CHECK_FALSE(cuda::matvec_fuses_records(&tw, 1, 1, false));
  CHECK_FALSE(cuda::matvec_fuses_records(&tw, 1, 2, false));
  const cuda::MatTask t5{to_device(random_matrix(WType::MLX4, 8, 5120, 64, 1792)->m, keep), nullptr, 8};
  CHECK(cuda::matvec_fuses_records(&t5, 1, 2, true));        // the decode shapes fit: 2 inputs of 5120 with the norm
  CHECK_FALSE(cuda::matvec_fuses_records(&t5, 1, 3, true));  // rounds of more than 2 rows take the records launch
  cuda::XSource src;
  src.x = reinterpret_cast<const float*>(keep.back()->p);
  CHECK_THROWS_AS(cuda::matvec_multi(&td, 1, nullptr, 0, 1, nullptr, nullptr, cuda::Tuning{}, &src),
                  std::runtime_error);
}

TEST_CASE("matvec phase stamps (bench-ops --phases): the same bytes, one record a launch, phases in order") {
  // Two dependent decode launches with the stamping instantiation: their outputs as the oracle's, one record each,
  // and in each record start <= after pdl_wait <= records staged <= end, min <= max.
  const MatSet ms = random_matrices(WType::MLX4, {5000, 20000}, 1024, 64, 2100);
  const std::vector<float> X = gaussian(1024, 2101, 1.0f);
  DBuf<float> dx(X);
  DBuf<uint32_t> xs(size_t((1024 / 32 + 1) * cuda::kXqWords));
  cuda::xq_records(dx.p, 1024, 1, 1024, xs.p, nullptr);
  std::string d;
  // on a stream of its own, where the dependent launches may overlap (the decode launches let the next in at their
  // start, which would let the second launch's blocks start before the first has ended; the stamped launches must not)
  cudaStream_t stream;
  HKV_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cuda::mlx4_stamps_begin(4);
  std::vector<std::unique_ptr<DBuf<float>>> outs;
  for (size_t m = 0; m < 2; m++) {
    outs.push_back(std::make_unique<DBuf<float>>(size_t(ms.dev[m].rows)));
    outs.back()->poison();
    const cuda::MatTask t{ms.dev[m], outs.back()->p, ms.dev[m].rows};
    cuda::matvec_multi(&t, 1, dx.p, 1024, 1, xs.p, stream);
  }
  HKV_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<cuda::MatvecStamps> st = cuda::mlx4_stamps_end();
  HKV_CUDA_CHECK(cudaStreamDestroy(stream));
  for (size_t m = 0; m < 2 && d.empty(); m++) {
    std::vector<float> ref(size_t(ms.dev[m].rows));
    matmul(ms.host[m]->m, X.data(), 1, ref.data());
    d = first_diff(outs[m]->get(), ref);
  }
  if (d.empty() && st.size() != 2) d = std::to_string(st.size()) + " launches stamped of 2";
  for (size_t i = 0; i < st.size() && d.empty(); i++) {
    const cuda::MatvecStamps& s = st[i];
    const bool ordered = s.start[0] <= s.start[1] && s.waited[0] <= s.waited[1] && s.records[0] <= s.records[1] &&
                         s.end[0] <= s.end[1] && s.start[0] <= s.waited[0] && s.waited[1] <= s.records[1] &&
                         s.records[0] <= s.end[1] && s.end[1] - s.start[0] < 1000000000ull;
    if (!ordered) d = "launch " + std::to_string(i) + ": phases out of order";
    // by multiprocessor: a block that staged records there also had warps end there; each stamp lies inside its
    // launch's range, a multiprocessor's earliest warp end before its latest, and the latest (earliest) over the
    // multiprocessors is the launch's latest (earliest): the same %globaltimer values
    uint64_t rmax = 0, emax = 0;
    for (size_t sm = 0; sm < s.sm_end.size() && d.empty(); sm++) {
      const uint64_t r = s.sm_records[sm], e = s.sm_end[sm], f = sm < s.sm_first_end.size() ? s.sm_first_end[sm] : 0;
      if ((r == 0) != (e == 0) || (e == 0) != (f == 0) || (r && (r < s.records[0] || r > s.records[1])) ||
          (e && (e < s.end[0] || e > s.end[1])) || (f && (f < s.end[0] || f > e)))
        d = "launch " + std::to_string(i) + ": multiprocessor " + std::to_string(sm) + "'s stamps outside the launch's";
      rmax = std::max(rmax, r), emax = std::max(emax, e);
    }
    uint64_t fmin = ~0ull;  // the multiprocessors' earliest warp end is the launch's earliest
    for (uint64_t f : s.sm_first_end)
      if (f) fmin = std::min(fmin, f);
    if (d.empty() && (rmax != s.records[1] || emax != s.end[1] || fmin != s.end[0]))
      d = "launch " + std::to_string(i) + ": the multiprocessors' stamps are not the launch's earliest and latest";
  }
  if (d.empty() && st.size() == 2 && st[1].start[0] < st[0].end[1])
    d = "the second launch began before the first ended";
  std::printf("matvec phase stamps(2 launches): %s\n", d.empty() ? "OK" : ("FAIL " + d).c_str());
  CHECK_MESSAGE(d.empty(), d);
}

TEST_CASE("add_rmsnorm_rows and silu_mul_xq: the fused decode steps and their records, byte for byte") {
  for (int64_t n : {5120, 256, 96, 40}) {
    const int64_t rows = 3;
    std::vector<float> h = gaussian(size_t(rows * n), 21 + size_t(n), 2.0f), y = gaussian(size_t(rows * n), 22, 1.0f),
                       w = gaussian(size_t(n), 23, 0.3f);
    for (int with_y = 0; with_y < 2; with_y++) {
      std::vector<float> hr = h, ref(size_t(rows * n));
      for (int64_t r = 0; r < rows; r++) {
        if (with_y)
          for (int64_t i = 0; i < n; i++) hr[size_t(r * n + i)] = hr[size_t(r * n + i)] + y[size_t(r * n + i)];
        rmsnorm_1pw(hr.data() + r * n, w.data(), n, 1e-6f, ref.data() + r * n);
      }
      DBuf<float> dh(h), dy(y), dw(w), dout(size_t(rows * n));
      DBuf<uint32_t> ds(size_t((rows * (n / 32) + 1) * cuda::kXqWords));
      dout.poison();
      ds.poison();  // the spare record is never written (initcheck reads every copied byte)
      const bool sums = n % 32 == 0;
      cuda::add_rmsnorm_rows(dh.p, with_y ? dy.p : nullptr, dw.p, n, 1e-6f, rows, dout.p, sums ? ds.p : nullptr,
                             nullptr);
      std::string d = first_diff(dout.get(), ref) + first_diff(dh.get(), hr);
      if (sums) d += record_diff(ds.get(), expected_records(ref.data(), rows, n));
      std::printf("add_rmsnorm_rows(n=%lld,y=%d): %s\n", (long long)n, with_y,
                  d.empty() ? "OK" : ("FAIL " + d).c_str());
      CHECK_MESSAGE(d.empty(), d);
    }
  }
  const int64_t n = 3 * 17408;
  std::vector<float> a = gaussian(size_t(n), 31, 3.0f), b = gaussian(size_t(n), 32, 1.0f), ref(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) ref[size_t(i)] = silu_c(a[size_t(i)]) * b[size_t(i)];
  DBuf<float> da(a), db(b);
  DBuf<uint32_t> ds(size_t((n / 32) * cuda::kXqWords));
  ds.poison();
  cuda::silu_mul_xq(da.p, db.p, n, ds.p, nullptr);
  std::string d = first_diff(da.get(), ref) + record_diff(ds.get(), expected_records(ref.data(), 1, n));
  std::printf("silu_mul_xq(n=%lld): %s\n", (long long)n, d.empty() ? "OK" : ("FAIL " + d).c_str());
  CHECK_MESSAGE(d.empty(), d);
}

TEST_CASE("argmax_rows: reference argmax() of each row, ties, NaN and infinities included") {
  // Rows made to catch a reduction that is not the sequential scan's: the largest value twice (the first wins),
  // +0 and -0 as the largest (equal: the first), NaN at index 0 (the answer is 0), NaNs elsewhere (never taken),
  // every value NaN, every value -inf, the largest last, in the first and in the last part of the split.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(1000), int64_t(65536 + 3), int64_t(248320)}) {
    std::vector<std::vector<float>> rows;
    auto base = [&](uint64_t seed) { return gaussian(size_t(n), seed, 3.0f); };
    rows.push_back(base(1));
    {
      std::vector<float> r = base(2);
      const float top = 50.0f;
      r[size_t(n / 3)] = top, r[size_t(n - 1)] = top;
      rows.push_back(r);
    }
    {
      std::vector<float> r(size_t(n), -1.0f);
      r[size_t(n / 2)] = -0.0f, r[size_t(n - 1)] = 0.0f;
      rows.push_back(r);
    }
    {
      std::vector<float> r = base(3);
      r[0] = nan;
      r[size_t(n - 1)] = 99.0f;
      rows.push_back(r);
    }
    {
      std::vector<float> r = base(4);
      for (int64_t i = 1; i < n; i += 5) r[size_t(i)] = nan;
      rows.push_back(r);
    }
    rows.push_back(std::vector<float>(size_t(n), nan));
    rows.push_back(std::vector<float>(size_t(n), -inf));
    {
      std::vector<float> r = base(5);
      r[size_t(n - 1)] = inf;
      rows.push_back(r);
    }
    {
      std::vector<float> r = base(6);
      r[0] = 1e30f;
      rows.push_back(r);
    }
    std::vector<float> flat;
    for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    DBuf<float> dx(flat);
    DBuf<int32_t> dout(rows.size());
    const int64_t R = int64_t(rows.size());
    DBuf<float> pv(size_t(R * cuda::kArgmaxParts));
    DBuf<int> pi(size_t(R * cuda::kArgmaxParts));
    cuda::argmax_rows(dx.p, R, n, dout.p, pv.p, pi.p, nullptr);
    const std::vector<int32_t> got = dout.get();
    std::string d;
    for (int64_t r = 0; r < R; r++) {
      const int32_t want = argmax(rows[size_t(r)].data(), n);
      if (got[size_t(r)] != want && d.empty())
        d = "row " + std::to_string(r) + ": " + std::to_string(got[size_t(r)]) + " against " + std::to_string(want);
    }
    std::printf("argmax_rows(n=%lld,rows=%lld): %s\n", (long long)n, (long long)R,
                d.empty() ? "OK" : ("FAIL " + d).c_str());
    CHECK_MESSAGE(d.empty(), d);
  }
}

TEST_CASE("rmsnorm and l2norm: byte for byte") {
  for (int64_t n : {5120, 256, 100, 77, 3}) {
    const int64_t rows = 3;
    std::vector<float> x = gaussian(size_t(rows * n), 11 + size_t(n), 2.0f), w = gaussian(size_t(n), 12, 0.3f);
    DBuf<float> dx(x), dw(w), dout(size_t(rows * n));
    for (int mode = 0; mode < 3; mode++) {  // 1+w, plain w, no weight
      std::vector<float> ref(size_t(rows * n));
      for (int64_t r = 0; r < rows; r++) {
        if (mode == 1)
          rmsnorm_plain(x.data() + r * n, w.data(), n, 1e-6f, ref.data() + r * n);
        else
          rmsnorm_1pw(x.data() + r * n, mode == 0 ? w.data() : nullptr, n, 1e-6f, ref.data() + r * n);
      }
      dout.poison();
      cuda::rmsnorm_rows(dx.p, n, mode == 2 ? nullptr : dw.p, mode == 1, n, 1e-6f, rows, dout.p, n, nullptr);
      std::string d = first_diff(dout.get(), ref);
      std::printf("rmsnorm(n=%lld,mode=%d): %s\n", (long long)n, mode, d.empty() ? "OK" : d.c_str());
      CHECK_MESSAGE(d.empty(), d);
    }
  }
  for (int dim : {32, 64, 128}) {
    const int heads = 6, nscaled = 3;
    const float scale = float(1.0 / std::sqrt(double(dim)));
    std::vector<float> x = gaussian(size_t(2 * heads * dim), 5 + size_t(dim), 1.5f), ref = x;
    for (int r = 0; r < 2; r++)
      for (int h = 0; h < heads; h++) {
        float* v = ref.data() + (r * heads + h) * dim;
        l2norm_inplace(v, dim);
        if (h < nscaled)
          for (int i = 0; i < dim; i++) v[i] = v[i] * scale;
      }
    DBuf<float> dx(x);
    cuda::l2norm_heads(dx.p, int64_t(heads) * dim, 2, heads, dim, nscaled, scale, nullptr);
    std::string d = first_diff(dx.get(), ref);
    std::printf("l2norm(dim=%d): %s\n", dim, d.empty() ? "OK" : d.c_str());
    CHECK_MESSAGE(d.empty(), d);
  }
}

namespace {
// Rows that exercise the packers: gaussian, outliers, zeros, ± ties of the extreme, tiny, mixed scales.
std::vector<float> test_row(int kind, int D, uint64_t seed) {
  std::vector<float> x = gaussian(size_t(D), seed, 1.0f);
  switch (kind) {
    case 1:
      for (int i = 0; i < D; i += 37) x[size_t(i)] *= 40.0f;
      break;
    case 2:
      for (auto& v : x) v = 0.0f;
      x[3] = -0.0f;
      break;
    case 3:
      for (int i = 0; i < D; i++) x[size_t(i)] = (i % 5 == 0) ? 3.0f : ((i % 5 == 1) ? -3.0f : 0.5f);
      break;
    case 4:
      for (auto& v : x) v *= 1e-7f;
      break;
    case 5:
      for (int i = 0; i < D; i++) x[size_t(i)] *= float(1 << (i % 8));
      break;
    default:
      break;
  }
  return x;
}
}  // namespace

TEST_CASE("cache row packing: bf16, fp8, q4h bytes equal kv_pack_row") {
  for (KvFormat f : {KvFormat::bf16(), KvFormat::fp8(), KvFormat::q4h()})
    for (int D : {32, 64, 128, 256}) {
      const size_t rb = kv_row_bytes(f, D);
      const int KV = 2, N = 6;  // rows are the six test kinds; K and V from different seeds
      std::vector<float> k, v;
      for (int r = 0; r < N; r++)
        for (int h = 0; h < KV; h++) {
          auto a = test_row(r, D, 1000 + uint64_t(r * 7 + h)), b = test_row((r + 3) % 6, D, 2000 + uint64_t(r * 7 + h));
          k.insert(k.end(), a.begin(), a.end());
          v.insert(v.end(), b.begin(), b.end());
        }
      std::vector<uint8_t> kref(size_t(N * KV) * rb), vref(size_t(N * KV) * rb);
      for (int r = 0; r < N; r++)
        for (int h = 0; h < KV; h++) {
          kv_pack_row(f, k.data() + (r * KV + h) * D, D, kref.data() + size_t(r * KV + h) * rb);
          kv_pack_row(f, v.data() + (r * KV + h) * D, D, vref.data() + size_t(r * KV + h) * rb);
        }
      DBuf<float> dk(k), dv(v);
      DBuf<uint8_t> kc(kref.size()), vc(vref.size());
      kc.poison();
      vc.poison();
      std::vector<uint8_t*> kp(size_t(N), kc.p), vp(size_t(N), vc.p);
      std::vector<int> pos(static_cast<size_t>(N));
      for (int r = 0; r < N; r++) pos[size_t(r)] = r;
      DBuf<uint8_t*> dkp(kp), dvp(vp);
      DBuf<int> dpos(pos), err(std::vector<int>{0});
      cuda::kv_pack(f.kind, dk.p, int64_t(KV) * D, dv.p, int64_t(KV) * D, dkp.p, dvp.p, dpos.p, N, KV, D, err.p,
                    nullptr);
      std::vector<uint8_t> kg = kc.get(), vg = vc.get();
      std::string d = first_diff_bytes(kg.data(), kref.data(), kref.size());
      if (d.empty()) d = first_diff_bytes(vg.data(), vref.data(), vref.size());
      std::printf("kv_pack(format=%s,D=%d): %s\n", f.name().c_str(), D, d.empty() ? "OK" : d.c_str());
      CHECK_MESSAGE(d.empty(), d);
      CHECK(err.get()[0] == 0);
      // a non-finite element sets the error flag (the oracle throws std::domain_error)
      k[5] = std::nanf("");
      CHECK_THROWS_AS(kv_pack_row(f, k.data(), D, kref.data()), std::domain_error);
      dk.put(k);
      cuda::kv_pack(f.kind, dk.p, int64_t(KV) * D, dv.p, int64_t(KV) * D, dkp.p, dvp.p, dpos.p, N, KV, D, err.p,
                    nullptr);
      CHECK((err.get()[0] & 1) == 1);
      if (f.kind != KvKind::BF16 && D >= 128) {
        // a scale past fp16 in the last group: the flag's bit 2, and not one byte of the row written
        std::vector<float> big = k;
        big[5] = 1.0f;
        for (int j = 0; j < 32; j++) big[size_t(D - 32 + j)] = 1e9f;  // row 0, K, head 0: its last group
        dk.put(big);
        err.put({0});
        kc.poison();
        const std::vector<uint8_t> before = kc.get();
        cuda::kv_pack(f.kind, dk.p, int64_t(KV) * D, dv.p, int64_t(KV) * D, dkp.p, dvp.p, dpos.p, N, KV, D, err.p,
                      nullptr);
        CHECK((err.get()[0] & 2) == 2);
        const std::vector<uint8_t> after = kc.get();
        CHECK(first_diff_bytes(after.data(), before.data(), rb).empty());  // row 0 of K, head 0, as poisoned
      }
    }
  // head dims kv_pack does not take are refused before anything runs
  CHECK_THROWS_AS(
      cuda::kv_pack(KvKind::Q4H, nullptr, 48, nullptr, 48, nullptr, nullptr, nullptr, 1, 1, 48, nullptr, nullptr),
      std::runtime_error);
}

TEST_CASE("attn_prep and kv_pack in one launch (attn_prep_pack): the two launches' bytes") {
  // q, k (normed and roped in place), the cache rows and the error word of attn_prep followed by kv_pack, against the
  // one launch; rows at odd positions of a batch, every format, head_dim 256 (the 27B shape), 128 and 64 with partial
  // RoPE; a row with a NaN in v (nothing of it written, bit 1) and, for fp8 and q4h, a v row whose scale overflows fp16
  // (bit 2). The caches start from a pattern, so that rows written where they should not be show.
  struct Shape {
    int H, KV, D, rd;
  };
  for (const Shape sh : {Shape{24, 4, 256, 64}, Shape{6, 2, 128, 128}, Shape{4, 1, 64, 32}})
    for (KvFormat f : {KvFormat::bf16(), KvFormat::fp8(), KvFormat::q4h()}) {
      const int64_t N = 3, cap = 9;
      const int H = sh.H, KV = sh.KV, D = sh.D, rd = sh.rd;
      const size_t rb = kv_row_bytes(f, D);
      std::vector<float> qg = gaussian(size_t(N * H * 2 * D), 81 + size_t(D), 2.0f),
                         k = gaussian(size_t(N * KV * D), 82 + size_t(D), 2.0f),
                         v = gaussian(size_t(N * KV * D), 83 + size_t(D), 1.0f), qn = gaussian(size_t(D), 84, 0.3f),
                         kn = gaussian(size_t(D), 85, 0.3f), rope(size_t(N * rd));
      for (int64_t r = 0; r < N; r++)
        for (int i = 0; i < rd / 2; i++) {
          const double ang = double(r * 7 + 3) / std::pow(10000.0, 2.0 * i / rd);
          rope[size_t(r * rd + i)] = float(std::cos(ang)), rope[size_t(r * rd + rd / 2 + i)] = float(std::sin(ang));
        }
      v[size_t(1 * KV * D + 5)] = std::numeric_limits<float>::quiet_NaN();  // row 1, head 0: not written
      if (f.kind != KvKind::BF16)
        for (int i = 0; i < D; i++)  // row 2, last head: its scales (amax/448 for fp8, amax/8 for q4h) past fp16
          v[size_t(2 * KV * D + (KV - 1) * D + i)] *= 1e9f;
      const std::vector<int> pos = {4, 0, 8};
      std::vector<uint8_t> cache0(size_t(cap * KV) * rb);
      for (size_t i = 0; i < cache0.size(); i++) cache0[i] = uint8_t(i * 131 + 7);
      struct Run {
        std::vector<float> q, k;
        std::vector<uint8_t> kc, vc;
        int err = 0;
      };
      auto run = [&](bool fused) {
        DBuf<float> dqg(qg), dq(size_t(N * H * D)), dk(k), dv(v), dqn(qn), dkn(kn), drope(rope);
        DBuf<uint8_t> dkc(cache0), dvc(cache0);
        DBuf<int> dpos(pos), derr(std::vector<int>{0});
        std::vector<uint8_t*> kp(size_t(N), dkc.p), vp(size_t(N), dvc.p);
        DBuf<uint8_t*> dkp(kp), dvp(vp);
        dq.poison();
        if (fused) {
          cuda::attn_prep_pack(dqg.p, dq.p, dk.p, dv.p, int64_t(KV) * D, dqn.p, dkn.p, drope.p, N, H, KV, D, rd, 1e-6f,
                               f.kind, dkp.p, dvp.p, dpos.p, derr.p, nullptr);
        } else {
          cuda::attn_prep(dqg.p, dq.p, dk.p, dqn.p, dkn.p, drope.p, N, H, KV, D, rd, 1e-6f, nullptr);
          cuda::kv_pack(f.kind, dk.p, int64_t(KV) * D, dv.p, int64_t(KV) * D, dkp.p, dvp.p, dpos.p, N, KV, D, derr.p,
                        nullptr);
        }
        return Run{dq.get(), dk.get(), dkc.get(), dvc.get(), derr.get()[0]};
      };
      const Run two = run(false), one = run(true);
      std::string d = first_diff(one.q, two.q);
      if (d.empty()) d = first_diff(one.k, two.k);
      if (d.empty() && one.kc != two.kc) d = "the K cache bytes differ";
      if (d.empty() && one.vc != two.vc) d = "the V cache bytes differ";
      if (d.empty() && one.err != two.err)
        d = "error word " + std::to_string(one.err) + " against " + std::to_string(two.err);
      const int want_err = f.kind == KvKind::BF16 ? 1 : 3;
      if (d.empty() && two.err != want_err) d = "the two launches' error word " + std::to_string(two.err);
      if (d.empty() && one.kc == cache0) d = "nothing packed";
      std::printf("attn_prep_pack(format=%s,H=%d,KV=%d,D=%d,rd=%d): %s\n", f.name().c_str(), H, KV, D, rd,
                  d.empty() ? "OK" : ("FAIL " + d).c_str());
      CHECK_MESSAGE(d.empty(), d);
    }
}

// The shapes the attention case runs: all of them, or the comma-separated names in HKV_TEST_ATTN_SHAPES.
static std::vector<cuda::AttnShape> test_attn_shapes() {
  const char* e = std::getenv("HKV_TEST_ATTN_SHAPES");
  if (!e || !*e)
    return {cuda::AttnShape::Auto,     cuda::AttnShape::Narrow,   cuda::AttnShape::Wide,     cuda::AttnShape::NarrowV,
            cuda::AttnShape::NarrowH2, cuda::AttnShape::NarrowV2, cuda::AttnShape::NarrowH1, cuda::AttnShape::Slim};
  std::vector<cuda::AttnShape> v;
  std::stringstream ss(e);
  for (std::string name; std::getline(ss, name, ',');) v.push_back(cuda::parse_attn_shape(name));
  return v;
}

TEST_CASE("attention over the cache: 512-key chunks, every format, byte for byte with attend()") {
  struct Case {
    int D, H, KV;
    std::vector<int> n;  // keys per query row
  };
  // The 27B shape (head_dim 256, 24 query heads over 4 KV heads, 6:1) at 1, 511, 512, 513 keys and across two
  // chunk boundaries in one batch of rows with different n_keys; odd head counts (5:1, 3:1 are padded to the
  // kernel's 6 and 4), 16:1 (two blocks of 8 heads), rows not a multiple of 16 bytes (head_dim 32, 64), more
  // chunks than the merge loads at once.
  std::vector<Case> cases = {{256, 2, 1, {1, 7, 512, 513, 1100}},
                             {128, 4, 1, {300, 1024, 1025}},
                             {256, 24, 4, {1, 511, 512, 513, 1537, 2}},
                             {256, 6, 1, {1, 511, 512, 513, 1030}},
                             {256, 5, 1, {513, 40}},
                             {96, 3, 1, {700}},
                             {64, 16, 1, {520}},
                             {64, 7, 1, {515}},
                             {32, 2, 2, {33}},
                             // 65 chunks at head_dim 256 (the merge's constant-stride instantiation): its batches
                             // of 32 chunks' loads, two whole ones (one in each buffer) and a partial one
                             {256, 2, 1, {33000, 40}},
                             // 202 chunks: the merge's batches of 32 loads, six past the first, the last one partial
                             {32, 2, 1, {103000, 700}}};
  // The 27B shape over more rows than multiprocessors, each of 1 to 64 keys (one chunk): the slim grid (4 KV heads ×
  // 1 chunk × rows) is more than one wave of 4 blocks a multiprocessor, where fp8 takes its rolled score loop
  // (attn_slim_fp8_rolled), and the staged shapes' grids more than fits one wave doubled, where they keep one block a
  // chunk (attn_dsplit). Not under racecheck: this case's 500-odd blocks a launch would take racecheck minutes.
  if (sanitizer_tool() != "racecheck") {
    std::vector<int> n(size_t(cuda::sm_count()) + 1);
    for (size_t i = 0; i < n.size(); i++) n[i] = 1 + int(i * 53 % 64);
    cases.push_back({256, 24, 4, n});
  }
  for (KvFormat f : {KvFormat::bf16(), KvFormat::fp8(), KvFormat::q4h()})
    for (const Case& k : cases) {
      const size_t rb = kv_row_bytes(f, k.D);
      int cap = 0;
      for (int n : k.n) cap = std::max(cap, n);
      const size_t stride = size_t(k.KV) * rb;
      std::vector<uint8_t> kc(size_t(cap) * stride), vc(size_t(cap) * stride);
      for (int p = 0; p < cap; p++)
        for (int h = 0; h < k.KV; h++) {
          auto a = test_row((p + h) % 6 == 2 ? 0 : (p + h) % 6, k.D, 50000 + uint64_t(p * 8 + h));
          auto b = test_row((p * 3 + h) % 6, k.D, 90000 + uint64_t(p * 8 + h));
          kv_pack_row(f, a.data(), k.D, kc.data() + size_t(p) * stride + size_t(h) * rb);
          kv_pack_row(f, b.data(), k.D, vc.data() + size_t(p) * stride + size_t(h) * rb);
        }
      const int64_t N = int64_t(k.n.size());
      std::vector<float> q = gaussian(size_t(N * k.H * k.D), 77 + size_t(k.D), 3.0f), ref(q.size());
      // the output gate as the engine lays it out (each head's gate after its query: [N][H][2·D], gate at D), applied
      // as the engine applies it: out · sigmoid_c(gate)
      const std::vector<float> gate = gaussian(size_t(N * k.H * 2 * k.D), 78 + size_t(k.D), 2.0f);
      for (int64_t r = 0; r < N; r++)
        for (int h = 0; h < k.H; h++) {
          const int kvh = h / (k.H / k.KV);
          float* o = ref.data() + (r * k.H + h) * k.D;
          attend(f, q.data() + (r * k.H + h) * k.D, k.D, kc.data() + size_t(kvh) * rb, vc.data() + size_t(kvh) * rb,
                 stride, k.n[size_t(r)], o);
          for (int d = 0; d < k.D; d++) o[d] = o[d] * sigmoid_c(gate[size_t(((r * k.H + h) * 2 + 1) * k.D + d)]);
        }
      DBuf<uint8_t> dkc(kc), dvc(vc);
      DBuf<float> dq(q), dgate(gate), out(q.size()), part(cuda::attn_part_floats(N, k.H, k.D, cap));
      DBuf<uint32_t> dxq(size_t(N) * size_t(k.H * k.D / 32) * cuda::kXqWords);  // the merge's records (xq_out)
      DBuf<int> dn(k.n);
      std::vector<const uint8_t*> kp(size_t(N), dkc.p), vp(size_t(N), dvc.p);
      DBuf<const uint8_t*> dkp(kp), dvp(vp);
      // every kernel shape and the automatic choice, or the shapes HKV_TEST_ATTN_SHAPES names ("slim,narrow-v2"):
      // compute-sanitizer's racecheck takes minutes over all of them (cuda/run_gpu_suite.sh sanitize)
      for (cuda::AttnShape shape : test_attn_shapes()) {
        out.poison();
        part.poison();
        cuda::AttnArgs a;
        a.kind = f.kind, a.D = k.D, a.H = k.H, a.KV = k.KV, a.row_bytes = rb;
        a.q = dq.p, a.ldq = int64_t(k.H) * k.D;
        a.gate = dgate.p + k.D, a.ldg = int64_t(k.H) * 2 * k.D, a.gate_stride = 2 * k.D;
        a.n_keys = dn.p, a.k_rows = dkp.p, a.v_rows = dvp.p;
        a.out = out.p, a.ldo = int64_t(k.H) * k.D;
        a.N = N, a.max_keys = cap, a.part = part.p, a.shape = shape;
        // the value loop's unrolled keys (HKV_ATTN_VU; 32 the default); with the caller's leave (pre_ok) the
        // staged shapes' rows below n − N copied before pdl_wait, the rest after: rows of 1 to 1100 keys in one batch,
        // so the split falls before, inside and past a chunk; the merge's whole batches by the tested path too
        // (HKV_MERGE_FAST=0); the merge and the chunk kernels without letting their dependents in early
        // (HKV_OUT_TRIGGER=0, HKV_PDL_ALL=0)
        struct Switches {
          int vu;
          bool pre, mfast = true, pdl = true;
        };
        for (auto [vu, pre, mfast, pdl] : std::vector<Switches>{{32, false},
                                                                {4, false},
                                                                {8, false},
                                                                {16, false},
                                                                {32, true},
                                                                {16, true},
                                                                {32, false, false},
                                                                {32, true, true, false}}) {
          out.poison();
          part.poison();
          dxq.poison();
          a.xq_out = dxq.p;
          a.pre_ok = pre;
          cuda::Tuning tu;
          tu.attn_value_unroll = vu;
          tu.merge_fast = mfast;
          tu.out_trigger = tu.pdl_all = pdl;
          cuda::attention(a, nullptr, tu);
          std::string d = first_diff(out.get(), ref);
          if (d.empty()) d = record_diff(dxq.get(), expected_records(ref.data(), N, int64_t(k.H) * k.D));
          // the shape and the switch reached their kernels (else a case would run another form twice): slim's kernel
          // is for fp8 and q4h at head_dim 256, its score loop for fp8 (q4h's scores have one form); elsewhere Slim
          // takes narrow-v2's path and fast scores are off
          const cuda::AttnLaunch launched = cuda::attn_last_launch();
          const bool slim_ok = f.kind != KvKind::BF16 && k.D == 256, slim_sc = f.kind == KvKind::FP8 && k.D == 256;
          // Auto's choice by its rule over this launch's chunk blocks (KV heads × chunks × rows), the rule's own
          // boundaries being tests/test_attn_policy.cpp's
          const cuda::AttnShape want =
              shape != cuda::AttnShape::Auto
                  ? shape
                  : cuda::auto_attn_shape(f.kind, int64_t(k.KV) * ((cap + 511) / 512) * N, k.H / k.KV, cuda::sm_count(),
                                          tu.attn_slim, tu.attn_slim_from);
          if (d.empty() && launched.shape != want)
            d = std::string("shape ") + cuda::attn_shape_name(launched.shape) + " taken, " +
                cuda::attn_shape_name(want) + " expected";
          if (d.empty() && launched.slim_kernel != (slim_ok && want == cuda::AttnShape::Slim))
            d = std::string("the slim kernel ") + (launched.slim_kernel ? "launched" : "not launched");
          // (fp8 rolled where the grid, KV heads × chunks × rows at 6 heads a block, is more than one wave of 4 slim
          // blocks a multiprocessor: the last case)
          const int64_t chunk_blocks = int64_t(k.KV) * ((cap + 511) / 512) * N;
          const bool kvc27 = launched.slim_kernel && k.KV == 4 && k.H == 24;
          const bool rolled =
              f.kind == KvKind::FP8 && kvc27 && cuda::attn_slim_fp8_rolled(chunk_blocks, cuda::sm_count());
          if (d.empty() && launched.slim_roll != rolled)
            d = std::string("slim's rolled score loop ") + (launched.slim_roll ? "taken" : "not taken");
          if (d.empty() && launched.slim_kvc != kvc27)
            d = std::string("slim's constant stride ") + (launched.slim_kvc ? "taken" : "not taken");
          if (d.empty() && launched.slim_scores != slim_sc)
            d = std::string("slim's score loop ") + (launched.slim_scores ? "taken" : "not taken");
          // the split values: never in the shapes with two elements a thread or nothing staged (bf16; fp8 and q4h rows
          // not a multiple of 16 bytes); in the staged shapes with one element a thread where attn_dsplit says, over
          // the chunk kernel's grid (KV heads × head blocks × chunks × rows)
          const bool staged1 = want == cuda::AttnShape::Narrow || want == cuda::AttnShape::NarrowH1 ||
                               want == cuda::AttnShape::NarrowH2 || want == cuda::AttnShape::NarrowV;
          const int qpk = k.H / k.KV, hpb = std::min(qpk, want == cuda::AttnShape::NarrowH1   ? 1
                                                          : want == cuda::AttnShape::NarrowH2 ? 2
                                                                                              : 8);
          const int64_t grid = chunk_blocks * ((qpk + hpb - 1) / hpb);
          const bool split =
              staged1 && f.kind != KvKind::BF16 && rb % 16 == 0 && cuda::attn_dsplit(k.D, grid, cuda::sm_count()) == 2;
          if (d.empty() && launched.dsplit != (split ? 2 : 1))
            d = "the values split over " + std::to_string(launched.dsplit) + " blocks, " + (split ? "2" : "1") +
                " expected";
          std::printf("attention(format=%s,D=%d,H=%d,KV=%d,max_keys=%d,shape=%s,unroll=%d%s%s%s%s%s%s): %s\n",
                      f.name().c_str(), k.D, k.H, k.KV, cap, cuda::attn_shape_name(shape), vu, pre ? ",pre" : "",
                      launched.dsplit > 1 ? ",dsplit" : "", mfast ? "" : ",merge-tested", pdl ? "" : ",no-pdl",
                      launched.slim_roll ? ",slim-rolled" : "", launched.slim_kvc ? ",slim-kvc" : "",
                      d.empty() ? "OK" : d.c_str());
          CHECK_MESSAGE(d.empty(), d);
        }
      }
    }
}

TEST_CASE("attention phase counts (hkv bench --attention-only --phases): the same bytes, every staged block counted") {
  // The 27B shape (head_dim 256, 24 query heads over 4 KV heads) over 1,100 keys (3 chunks), q4h and fp8: between
  // attn_phases_begin and attn_phases_end the staged shapes take their counting instantiation. Their output must equal
  // attend()'s, every chunk block must be counted once (KV heads · blocks a KV head · chunks · the blocks a chunk's
  // values are split over, attn_dsplit) and every phase must hold cycles; slim and wide count none.
  const int D = 256, H = 24, KV = 4, n = 1100, maxch = 3;
  for (KvFormat f : {KvFormat::q4h(), KvFormat::fp8()}) {
    const size_t rb = kv_row_bytes(f, D), stride = size_t(KV) * rb;
    std::vector<uint8_t> kc(size_t(n) * stride), vc(size_t(n) * stride);
    for (int p = 0; p < n; p++)
      for (int h = 0; h < KV; h++) {
        kv_pack_row(f, test_row((p + h) % 6, D, 7000 + uint64_t(p * 8 + h)).data(), D, kc.data() + p * stride + h * rb);
        kv_pack_row(f, test_row((p + 2 * h) % 6, D, 9000 + uint64_t(p * 8 + h)).data(), D,
                    vc.data() + p * stride + h * rb);
      }
    std::vector<float> q = gaussian(size_t(H * D), 91, 3.0f), ref(q.size());
    for (int h = 0; h < H; h++)
      attend(f, q.data() + h * D, D, kc.data() + size_t(h / (H / KV)) * rb, vc.data() + size_t(h / (H / KV)) * rb,
             stride, n, ref.data() + h * D);
    DBuf<uint8_t> dkc(kc), dvc(vc);
    DBuf<float> dq(q), out(q.size()), part(cuda::attn_part_floats(1, H, D, n));
    DBuf<int> dn(std::vector<int>{n});
    DBuf<const uint8_t*> dkp(std::vector<const uint8_t*>{dkc.p}), dvp(std::vector<const uint8_t*>{dvc.p});
    const std::pair<cuda::AttnShape, int> shapes[] = {{cuda::AttnShape::NarrowH1, 6}, {cuda::AttnShape::NarrowH2, 3},
                                                      {cuda::AttnShape::Narrow, 1},   {cuda::AttnShape::NarrowV, 1},
                                                      {cuda::AttnShape::NarrowV2, 1}, {cuda::AttnShape::Slim, 0},
                                                      {cuda::AttnShape::Wide, 0}};
    for (auto [shape, per_kv] : shapes) {
      out.poison();
      cuda::AttnArgs a;
      a.kind = f.kind, a.D = D, a.H = H, a.KV = KV, a.row_bytes = rb;
      a.q = dq.p, a.ldq = int64_t(H) * D, a.n_keys = dn.p, a.k_rows = dkp.p, a.v_rows = dvp.p;
      a.out = out.p, a.ldo = int64_t(H) * D, a.N = 1, a.max_keys = n, a.part = part.p, a.shape = shape;
      cuda::attn_phases_begin();
      cuda::attention(a, nullptr);
      const cuda::AttnPhases ph = cuda::attn_phases_end();
      std::string d = first_diff(out.get(), ref);
      const double want = double(KV * per_kv * maxch * cuda::attn_last_launch().dsplit);
      if (d.empty() && ph.blocks != want)
        d = "blocks counted " + std::to_string(ph.blocks) + ", expected " + std::to_string(want);
      if (d.empty() && per_kv > 0 &&
          !(ph.wait_cycles > 0 && ph.q_cycles > 0 && ph.score_cycles > 0 && ph.weight_cycles > 0 &&
            ph.value_cycles > 0))
        d = "a phase without cycles";
      std::printf("attention phases(format=%s,shape=%s,blocks=%.0f): %s\n", f.name().c_str(),
                  cuda::attn_shape_name(shape), ph.blocks, d.empty() ? "OK" : d.c_str());
      CHECK_MESSAGE(d.empty(), d);
    }
  }
}

TEST_CASE("DeltaNet recurrence over a cluster of blocks and over threads a column: byte for byte with one block") {
  // deltanet() (conv, l2norm, recurrence with its gated norm) for 2 sequences of 1 and 3 rows, with every
  // (blocks a head, threads a column) of the split recurrence, and the conv, l2norm and split recurrence in one
  // launch (the decode default), against the three launches with the one-block kernel, which gpu_engine checks
  // against the oracle: the output, S, the conv state and conv_out, byte for byte.
  for (auto [dk, dv] : std::vector<std::pair<int, int>>{{128, 128}, {64, 64}, {128, 64}}) {
    const int nk = 2, nv = 6, K = 4, B = 2;
    const int64_t C = 2 * int64_t(nk) * dk + int64_t(nv) * dv, N = 4;
    const std::vector<int> first = {0, 1}, nrows = {1, 3};
    std::vector<float> qkv = gaussian(size_t(N * C), 81 + dk, 1.0f), convw = gaussian(size_t(C * K), 82, 0.5f);
    std::vector<float> alog = gaussian(size_t(nv), 83, 0.5f), dtb = gaussian(size_t(nv), 84, 0.5f);
    std::vector<float> normw = gaussian(size_t(dv), 85, 0.3f), z = gaussian(size_t(N * nv * dv), 86, 1.0f);
    std::vector<float> bb = gaussian(size_t(N * nv), 87, 1.0f), aa = gaussian(size_t(N * nv), 88, 1.0f);
    std::vector<float> conv0 = gaussian(size_t(B * C * (K - 1)), 89, 1.0f);
    std::vector<float> S0 = gaussian(size_t(B) * nv * dk * dv, 90, 0.05f);
    DBuf<float> dqkv(qkv), dconvw(convw), dalog(alog), ddtb(dtb), dnormw(normw), dz(z), db(bb), da(aa);
    DBuf<float> dconv(conv0), dS(S0), dconvout(size_t(N * C)), dcore(size_t(N * nv * dv));
    DBuf<int> dfirst(first), drows(nrows);
    std::vector<float*> convp = {dconv.p, dconv.p + C * (K - 1)}, Sp = {dS.p, dS.p + int64_t(nv) * dk * dv};
    DBuf<float*> dconvp(convp), dSp(Sp);
    cuda::DeltaArgs a;
    a.nk = nk, a.nv = nv, a.dk = dk, a.dv = dv, a.K = K, a.C = C, a.eps = 1e-6f;
    a.q_scale = float(1.0 / std::sqrt(double(dk)));
    a.B = B, a.seq_first = dfirst.p, a.seq_rows = drows.p, a.conv_state = dconvp.p, a.S = dSp.p;
    a.conv_w = dconvw.p, a.A_log = dalog.p, a.dt_bias = ddtb.p, a.norm_w = dnormw.p;
    a.qkv = dqkv.p, a.conv_out = dconvout.p, a.z = dz.p, a.b = db.p, a.a = da.p, a.core = dcore.p, a.N = N;
    // the records of core (xq_out), made by the split recurrence where a block holds whole 32-column chunks
    DBuf<uint32_t> dxq(size_t(N * (nv * dv / 32) * cuda::kXqWords));
    bool made = false;
    std::string rec_diff;
    // the tuning of (blocks, threads a column) = (cl, tpc), the one launch (fused) or three; early: HKV_DN_EARLY,
    // preload: HKV_DN_PRELOAD
    auto tuning = [](int cl, int tpc, bool fused, bool early = true, bool preload = true) {
      cuda::Tuning t;
      t.dn_split = cl, t.dn_tpc = tpc, t.dn_fused = fused, t.dn_early = early, t.dn_preload = preload;
      return t;
    };
    auto run = [&](const cuda::Tuning& tu) {
      dconv.put(conv0);
      dS.put(S0);
      dcore.poison();
      dconvout.poison();
      dxq.poison();
      a.xq_out = dxq.p;
      made = cuda::deltanet(a, nullptr, tu);
      a.xq_out = nullptr;
      std::vector<float> out = dcore.get(), st = dS.get(), cs = dconv.get(), co = dconvout.get();
      rec_diff = made ? record_diff(dxq.get(), expected_records(out.data(), N, int64_t(nv) * dv)) : "";
      out.insert(out.end(), st.begin(), st.end());
      out.insert(out.end(), cs.begin(), cs.end());
      out.insert(out.end(), co.begin(), co.end());  // q and k normalized, v as the conv made it
      return out;
    };
    const std::vector<float> want = run(tuning(1, 1, false));
    for (auto [cl, tpc] : std::vector<std::pair<int, int>>{{1, 2}, {2, 1}, {2, 2}, {4, 1}, {4, 2}}) {
      if (dv > 128 || dv % (4 * cl) != 0 || (dv / cl * tpc) % 32 != 0) continue;  // the one-block kernel's shapes
      const std::pair<int, int> form = cuda::recurrence_form(a, tuning(cl, tpc, false));
      // the split kernel must be the one that runs (else this compares the one-block kernel with itself); a card
      // without thread-block clusters runs the one-block kernel, and there is nothing to compare
      if (!cuda::clusters_supported()) {
        CHECK(form == std::make_pair(1, 1));
        std::printf("deltanet recurrence(blocks=%d): not run, this card has no thread-block clusters\n", cl);
        continue;
      }
      CHECK(form == std::make_pair(cl, tpc));
      std::string d = first_diff(run(tuning(cl, tpc, false)), want);
      if (made != ((dv / cl) % 32 == 0)) d += " records of core made: " + std::to_string(made);
      d += rec_diff;
      std::printf("deltanet recurrence(dk=%d,dv=%d,blocks=%d,threads a column=%d): %s\n", dk, dv, cl, tpc,
                  d.empty() ? "OK" : ("FAIL " + d).c_str());
      CHECK_MESSAGE(d.empty(), d);
    }
    // the conv, the l2norm and the split recurrence in one launch, where the shape takes it: (blocks, threads a
    // column) with dv/blocks·threads = dk
    for (auto [cl, tpc] : std::vector<std::pair<int, int>>{{1, 1}, {1, 2}, {2, 2}}) {
      if (dv / cl * tpc != dk) continue;
      const bool taken = cuda::deltanet_fused_form(a, tuning(cl, tpc, true));
      if (!cuda::clusters_supported()) {  // the fused form needs clusters; without them the three launches run
        CHECK(!taken);
        std::printf("deltanet fused(blocks=%d): not run, this card has no thread-block clusters\n", cl);
        continue;
      }
      CHECK(taken);  // else this compares the three launches with themselves
      // S and the conv state read before pdl_wait (HKV_DN_EARLY) or after; b, a, z loaded with qkv (HKV_DN_PRELOAD)
      // or where they are used (the 27B form, dk = dv = 128 over 2 blocks of 2 threads a column, stores its state and
      // conv windows early)
      for (auto [early, preload] : std::vector<std::pair<bool, bool>>{{true, true}, {false, true}, {true, false}}) {
        std::string d = first_diff(run(tuning(cl, tpc, true, early, preload)), want);
        if (made != ((dv / cl) % 32 == 0)) d += " records of core made: " + std::to_string(made);
        d += rec_diff;
        std::printf(
            "deltanet conv+l2norm+recurrence in one launch(dk=%d,dv=%d,blocks=%d,threads a column=%d%s%s): %s\n", dk,
            dv, cl, tpc, early ? "" : ",late", preload ? "" : ",no preload", d.empty() ? "OK" : ("FAIL " + d).c_str());
        CHECK_MESSAGE(d.empty(), d);
      }
    }
  }
}

TEST_CASE("DeltaNet step: byte for byte with deltanet_step over several tokens") {
  for (auto [dk, dv] : std::vector<std::pair<int, int>>{{32, 32}, {64, 64}, {128, 128}, {32, 64}, {128, 32}}) {
    const int nv = 3, steps = 5;
    std::vector<float> S(size_t(nv * dk * dv), 0.0f);
    DBuf<float> dS(S);
    bool ok = true;
    std::string d;
    for (int t = 0; t < steps && ok; t++) {
      std::vector<float> q = gaussian(size_t(nv * dk), 300 + size_t(t), 0.2f),
                         k = gaussian(size_t(nv * dk), 400 + size_t(t), 0.2f),
                         v = gaussian(size_t(nv * dv), 500 + size_t(t)), beta = {0.3f, 0.9f, 0.01f},
                         g = {-0.1f, -2.0f, -0.0001f};
      std::vector<float> o(size_t(nv * dv));
      for (int h = 0; h < nv; h++)
        deltanet_step(S.data() + size_t(h * dk * dv), q.data() + h * dk, k.data() + h * dk, v.data() + h * dv,
                      beta[size_t(h)], g[size_t(h)], dk, dv, o.data() + h * dv);
      DBuf<float> dq(q), dkk(k), dvv(v), db(beta), dg(g), dout(o.size());
      cuda::deltanet_step_heads(dS.p, dq.p, dkk.p, dvv.p, db.p, dg.p, nv, dk, dv, dout.p, nullptr);
      d = first_diff(dout.get(), o);
      if (d.empty()) d = first_diff(dS.get(), S);
      ok = d.empty();
    }
    std::printf("deltanet_step(dk=%d,dv=%d): %s\n", dk, dv, ok ? "OK" : d.c_str());
    CHECK_MESSAGE(ok, d);
  }
}
