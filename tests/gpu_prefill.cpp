// The fast prefill path (cuda/prefill.h): NOT exact, so compared within stated tolerances, each
// with its reason next to it:
//   dequant_rows_bf16 against the oracle's Matrix::at rounded to bf16: exact (byte for byte);
//   the chunked gated delta rule against deltanet_step, step by step, in and out of a carried state;
//   the tensor-core attention against the exact attention kernel, all three cache formats;
//   the whole model: fast prefill against exact prefill by KL (builtin tiny and tiny-mlx4, one and two
//   passes, and the transformers fixtures), then exact decode after it.
// Under compute-sanitizer (HKV_SANITIZER, set by cuda/run_gpu_suite.sh) the whole-model cases take shorter
// prompts: their exact reference prefill costs the square of the prompt's length in shared-memory accesses,
// which racecheck tracks one by one (at full length they ran past 420 s; H200, 2026-11-30). The same kernels
// run; the two-pass case (over 4,096 rows, so long by design) is left to the plain run.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "compare/stats.h"
#include "cuda/engine.h"
#include "cuda/prefill.h"
#include "reference/model.h"
#include "reference/scalar.h"
#include "reference/synthetic.h"
#include "reference/tokens.h"
#include "tests/gpu_util.h"

using namespace hkv;
using namespace hkv::gputest;

namespace {

// ---- dequantization: exact ------------------------------------------------------------------------

TEST_CASE("fast prefill: silu_mul_bf16 equals bf16(silu_c(g) · u) on the host, both launches") {
  // widths a multiple of 4 with aligned rows (four columns a thread), then odd ones (one a thread)
  for (auto [rows, cols, ld, ldo] : {std::array<int64_t, 4>{7, 96, 100, 104}, std::array<int64_t, 4>{5, 33, 35, 37}}) {
    CAPTURE(cols);
    std::vector<float> gv = gaussian(size_t(rows * ld), 41, 4.0f), uv = gaussian(size_t(rows * ld), 42);
    gv[3] = 90.0f, gv[5] = -90.0f, gv[7] = 0.0f;  // saturating and zero arguments of silu_c
    DBuf<float> dg(gv), du(uv);
    DBuf<uint16_t> out(size_t(rows * ldo));
    out.poison();
    cuda::silu_mul_bf16(dg.p, du.p, ld, rows, cols, out.p, ldo, nullptr);
    std::vector<uint16_t> got = out.get();
    int64_t bad = -1;
    for (int64_t r = 0; r < rows && bad < 0; r++)
      for (int64_t c = 0; c < ldo; c++) {
        const uint16_t want = c < cols ? bf16_from_f32(silu_c(gv[size_t(r * ld + c)]) * uv[size_t(r * ld + c)])
                                       : uint16_t(0xa5a5);  // the padding keeps its poison
        if (got[size_t(r * ldo + c)] != want) {
          bad = r * ldo + c;
          break;
        }
      }
    CHECK_MESSAGE(bad < 0, "first differing element " << bad);
  }
}

TEST_CASE("fast prefill: dequant_rows_bf16 equals the oracle's Matrix::at rounded to bf16") {
  // 256 columns in groups of 32, 64 and 128 (and the other types); 264 in groups of 8 (33 code words a row)
  for (auto [cols, mlx_group] : {std::array<int64_t, 2>{256, 0}, std::array<int64_t, 2>{264, 8}}) {
    const int64_t rows = 37;
    CAPTURE(cols);
    std::mt19937_64 g(5);
    std::vector<uint32_t> q(size_t(rows * cols / 8));
    for (auto& w : q) w = uint32_t(g());
    std::vector<float> f32 = gaussian(size_t(rows * cols), 6);
    std::vector<uint16_t> f16(f32.size()), bf(f32.size());
    for (size_t i = 0; i < f32.size(); i++) f16[i] = f16_from_f32(f32[i]), bf[i] = bf16_from_f32(f32[i]);
    for (int group : {32, 64, 128, 8})
      for (WType t : {WType::MLX4, WType::F32, WType::F16, WType::BF16}) {
        if (mlx_group ? (t != WType::MLX4 || group != mlx_group) : (group == 8 || (t != WType::MLX4 && group != 64)))
          continue;
        CAPTURE(wtype_name(t));
        CAPTURE(group);
        const int64_t ng = rows * (cols / group);
        std::vector<uint16_t> sc(static_cast<size_t>(ng)), bi(static_cast<size_t>(ng));
        for (int64_t i = 0; i < ng; i++)
          sc[size_t(i)] = bf16_from_f32(0.01f * float(i % 13 + 1)),
          bi[size_t(i)] = bf16_from_f32(-0.05f * float(i % 7));
        Matrix W;
        W.type = t, W.rows = rows, W.cols = cols, W.group = t == WType::MLX4 ? group : 0;
        W.data = t == WType::MLX4  ? static_cast<const void*>(q.data())
                 : t == WType::F32 ? static_cast<const void*>(f32.data())
                 : t == WType::F16 ? static_cast<const void*>(f16.data())
                                   : static_cast<const void*>(bf.data());
        W.scales = sc.data(), W.biases = bi.data();
        DBuf<uint8_t> dw(W.nbytes());
        HKV_CUDA_CHECK(cudaMemcpy(dw.p, W.data, t == WType::MLX4 ? q.size() * 4 : W.nbytes(), cudaMemcpyHostToDevice));
        DBuf<uint16_t> ds(sc), db(bi);
        cuda::DMat D;
        D.type = t, D.rows = rows, D.cols = cols, D.group = W.group, D.data = dw.p, D.scales = ds.p, D.biases = db.p;
        const int64_t r0 = 3, n = 30;
        // into a 16-byte aligned buffer (MLX4: the code-word kernel), then one element past it (the element kernel)
        for (int64_t off : {0, 1}) {
          CAPTURE(off);
          DBuf<uint16_t> out(size_t(n * cols + 1));
          out.poison();
          cuda::dequant_rows_bf16(D, r0, n, out.p + off, nullptr);
          std::vector<uint16_t> got = out.get();
          int64_t bad = -1;
          for (int64_t r = 0; r < n && bad < 0; r++)
            for (int64_t c = 0; c < cols; c++)
              if (got[size_t(off + r * cols + c)] != bf16_from_f32(W.at(r0 + r, c))) {
                bad = r * cols + c;
                break;
              }
          CHECK_MESSAGE(bad < 0, "first differing element " << bad);
        }
      }
  }
}

// ---- the chunked gated delta rule against the recurrence -----------------------------------------------

// Tolerance: fp32 with another summation order. Every output and state entry is a sum of at most
// dk·64 + 64 products of values bounded by the largest magnitude M (|k| = 1, β ≤ 1, decays ≤ 1), so its
// rounding differs by about (dk + 64)·2^-24·M ≈ 1e-5·M per chunk, growing slowly over chunks; 2e-4·M (plus
// 1e-6 absolute) leaves a margin of about 10 over 300 tokens. A wrong decay, β or mask is off by O(M).
double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double m = 0, e = 0;
  for (size_t i = 0; i < want.size(); i++) {
    m = std::max(m, double(std::fabs(want[i])));
    e = std::max(e, double(std::fabs(got[i] - want[i])));
  }
  return e / (m + 1e-6);
}

TEST_CASE(
    "fast prefill: the chunked gated delta rule equals deltanet_step within 2e-4 (relative to the largest value)") {
  for (int dk : {32, 128}) {
    const int nk = 2, nv = 4, dv = 64;
    const int64_t C = 2 * nk * dk + nv * dv;
    for (int64_t n : {int64_t(1), int64_t(64), int64_t(200)}) {
      CAPTURE(dk);
      CAPTURE(n);
      std::vector<float> qkv = gaussian(size_t(n * C), 11 + uint64_t(n));
      for (int64_t t = 0; t < n; t++)  // q and k as the layer has them: l2-normed, q scaled
        for (int hh = 0; hh < 2 * nk; hh++) {
          float* x = qkv.data() + t * C + hh * dk;
          l2norm_inplace(x, dk);
          if (hh < nk)
            for (int i = 0; i < dk; i++) x[i] *= float(1.0 / std::sqrt(double(dk)));
        }
      std::vector<float> gv(size_t(n * nv)), bv(size_t(n * nv));
      std::mt19937_64 rg(3);
      std::uniform_real_distribution<float> u(0.0f, 1.0f);
      for (size_t i = 0; i < gv.size(); i++) gv[i] = -2.0f * u(rg) * u(rg), bv[i] = u(rg);  // decays to exp(-2)
      std::vector<float> S0 = gaussian(size_t(nv * dk * dv), 9, 0.3f), S = S0;
      std::vector<float> want(size_t(n * nv * dv));
      const int ratio = nv / nk;
      for (int64_t t = 0; t < n; t++)
        for (int h = 0; h < nv; h++) {
          const float* row = qkv.data() + t * C;
          deltanet_step(S.data() + size_t(h) * dk * dv, row + (h / ratio) * dk, row + nk * dk + (h / ratio) * dk,
                        row + 2 * nk * dk + h * dv, bv[size_t(t * nv + h)], gv[size_t(t * nv + h)], dk, dv,
                        want.data() + (t * nv + h) * dv);
        }
      DBuf<float> dqkv(qkv), dg(gv), db(bv), dS(S0), dout(want.size());
      DBuf<float> dscr(cuda::gated_delta_chunked_scratch_floats(n, nv, dk));
      dout.poison();
      dscr.poison(0xff);  // NaN: a scratch entry read before it is written shows
      // in two calls (the state carried between them) when n allows it
      const int64_t n1 = n > 100 ? 77 : n;
      cuda::gated_delta_chunked(nk, nv, dk, dv, n1, dqkv.p, C, dg.p, db.p, dS.p, dout.p, dscr.p, nullptr);
      if (n1 < n)
        cuda::gated_delta_chunked(nk, nv, dk, dv, n - n1, dqkv.p + n1 * C, C, dg.p + n1 * nv, db.p + n1 * nv, dS.p,
                                  dout.p + n1 * nv * dv, dscr.p, nullptr);
      const double eo = rel_err(dout.get(), want), es = rel_err(dS.get(), S);
      CHECK_MESSAGE(eo <= 2e-4, "outputs: relative error " << eo);
      CHECK_MESSAGE(es <= 2e-4, "state: relative error " << es);
    }
  }
}

// ---- attention against the exact kernel --------------------------------------------------------------

// Tolerance: the fast attention rounds q (after rotation), K, V, the probabilities and the output to bf16
// (2^-9 relative each) and accumulates in fp32. A score s computed from bf16 q and k is off by about
// |s|·2^-8, which moves exp(s − max) by that much relative: for the sharpest rows here (scores of tens) a few
// percent of the output's scale. Measured on the H200 (2026-11-29, the cuBLAS form this kernel replaced):
// worst 4.1% (q4h), 2.4% (bf16, fp8). Bar: |fast − exact| <= 0.06·max|exact of that row and head| + 1e-3. A
// wrong mask, GQA mapping, tile edge, rotation or gate is off by O(1). The model-level KL tests below are the
// real bar. Shapes: every head_dim the fused kernel is built for; query rows (n·G) not a multiple of its
// 128-row tiles; p0 not a multiple of its 64-key tiles; the 27B layout (G = 6, D = 256).
TEST_CASE("fast prefill: the tensor-core attention equals the exact attention within 6% of the output's scale") {
  struct Shape {
    int H, KV, D;
    int64_t p0, n;
  };
  for (const Shape& sh : {Shape{4, 2, 128, 300, 400}, Shape{12, 2, 256, 100, 150}, Shape{2, 1, 64, 0, 77}})
    for (const char* fname : {"bf16", "fp8", "q4h"}) {
      const int H = sh.H, KV = sh.KV, D = sh.D;
      const int64_t p0 = sh.p0, n = sh.n, npos = p0 + n;
      CAPTURE(D);
      CAPTURE(fname);
      const KvFormat f = KvFormat::parse(fname);
      const size_t rb = kv_row_bytes(f, D);
      std::vector<float> k = gaussian(size_t(npos * KV * D), 21), v = gaussian(size_t(npos * KV * D), 22);
      for (size_t i = 0; i < k.size(); i += 41) k[i] *= 6.0f;  // a few outliers
      std::vector<uint8_t> kc(size_t(npos) * KV * rb), vc(kc.size());
      for (int64_t p = 0; p < npos; p++)
        for (int h = 0; h < KV; h++) {
          kv_pack_row(f, k.data() + (p * KV + h) * D, D, kc.data() + (size_t(p) * KV + h) * rb);
          kv_pack_row(f, v.data() + (p * KV + h) * D, D, vc.data() + (size_t(p) * KV + h) * rb);
        }
      std::vector<float> q = gaussian(size_t(n * H * D), 23, 2.0f), gate = gaussian(size_t(n * H * D), 24);
      DBuf<uint8_t> dk(cuda::kv_rows_to_blocks(kc.data(), npos, KV, rb, cuda::kv_block(f.kind))),  // the device layout
          dv(cuda::kv_rows_to_blocks(vc.data(), npos, KV, rb, cuda::kv_block(f.kind)));
      DBuf<float> dq(q), dgate(gate), dexact(size_t(n * H * D));
      std::vector<int> nkeys(static_cast<size_t>(n));
      for (int64_t t = 0; t < n; t++) nkeys[size_t(t)] = int(p0 + t + 1);
      std::vector<const uint8_t*> kr(size_t(n), dk.p), vr(size_t(n), dv.p);
      DBuf<int> dn(nkeys);
      DBuf<const uint8_t*> dkr(kr), dvr(vr);
      DBuf<float> part(cuda::attn_part_floats(n, H, D, int(npos)));
      cuda::AttnArgs a;
      a.kind = f.kind, a.D = D, a.H = H, a.KV = KV, a.row_bytes = rb;
      a.q = dq.p, a.ldq = H * D, a.gate = dgate.p, a.ldg = H * D, a.gate_stride = D;
      a.n_keys = dn.p, a.k_rows = dkr.p, a.v_rows = dvr.p, a.out = dexact.p, a.ldo = H * D, a.N = n;
      a.max_keys = int(npos), a.part = part.p;
      cuda::attention(a, nullptr);
      std::vector<float> want = dexact.get();
      // the scratch sized exactly and for more keys; each tile's keys in the ranges chosen (0), in one range, in 3;
      // every form: 8x2 (mma.sync, 8 warps, 2 stages), 4x1 (4 warps, 1 stage) and, where the build has wgmma,
      // wg and wg2. wg2 computes wg's operations in wg's order, so its output must be wg's, byte for byte.
      struct Run {
        int64_t spare;
        int splits;
        int cfg;  // cfg_name's index
      };
      const char* cfg_name[] = {"8x2", "4x1", "wg", "wg2"};
      std::vector<uint16_t> wg_out[4];  // wg's output for each split count (0, 1, 3)
      for (const Run& run :
           {Run{0, 0, 0}, Run{333, 0, 0}, Run{0, 1, 0}, Run{0, 3, 0}, Run{0, 0, 1}, Run{0, 1, 1}, Run{0, 3, 1},
            Run{0, 0, 2}, Run{0, 1, 2}, Run{0, 3, 2}, Run{0, 0, 3}, Run{333, 0, 3}, Run{0, 1, 3}, Run{0, 3, 3}}) {
        const cuda::FlashCfg forms[] = {cuda::FlashCfg::F8x2, cuda::FlashCfg::F4x1, cuda::FlashCfg::Wg,
                                        cuda::FlashCfg::Wg2};
        if (run.cfg >= 2 && !cuda::fast_attn_wgmma_built()) {
          MESSAGE("the wgmma forms are not in this build (sm_90a): not checked");
          continue;
        }
        const int64_t spare = run.spare;
        const int splits = run.splits;
        CAPTURE(spare);
        CAPTURE(splits);
        CAPTURE(run.cfg);
        DBuf<uint8_t> scratch(cuda::fast_attn_scratch_bytes(npos + spare, D));
        scratch.poison(0xff);  // NaN: a decoded row read before it is written makes the output NaN
        DBuf<uint16_t> out(size_t(n * H * D));
        out.poison();
        cuda::FastAttnArgs fa;
        fa.kind = f.kind, fa.D = D, fa.H = H, fa.KV = KV, fa.row_bytes = rb;
        fa.q = dq.p, fa.ldq = H * D, fa.gate = dgate.p, fa.ldg = H * D, fa.gate_stride = D;
        fa.k_cache = dk.p, fa.v_cache = dv.p, fa.p0 = p0, fa.n = n, fa.out = out.p, fa.ldo = H * D;
        fa.max_keys = npos + spare, fa.scratch = scratch.p;
        cuda::fast_attention(fa, nullptr, forms[run.cfg], splits);
        std::vector<uint16_t> got = out.get();
        if (run.cfg == 2) wg_out[splits] = got;
        if (run.cfg == 3) {
          REQUIRE(wg_out[splits].size() == got.size());
          CHECK_MESSAGE(std::memcmp(wg_out[splits].data(), got.data(), got.size() * 2) == 0,
                        "wg2's output differs from wg's");
        }
        double worst = 0;
        int64_t worst_at = -1;
        for (int64_t t = 0; t < n; t++)
          for (int h = 0; h < H; h++) {
            const size_t base = size_t((t * H + h) * D);
            double m = 0;
            for (int d = 0; d < D; d++) m = std::max(m, double(std::fabs(want[base + size_t(d)])));
            for (int d = 0; d < D; d++) {
              const double e =
                  std::fabs(double(f32_from_bf16(got[base + size_t(d)])) - want[base + size_t(d)]) / (0.06 * m + 1e-3);
              if (!(e <= worst)) worst = e, worst_at = int64_t(base) + d;  // NaN lands here too
            }
          }
        MESSAGE("fast attention D=" << D << " G=" << H / KV << " " << std::string(fname) << " splits " << splits << " "
                                    << std::string(cfg_name[run.cfg]) << ": worst error / bar " << worst);
        CHECK_MESSAGE(worst <= 1.0, "worst error / bar " << worst << " at element " << worst_at);
      }
    }
}

// HKV_FLASH_CFG: each name picks its form (wg and wg2 only where the build has wgmma), auto the default (the parsing
// and its refusals are tests/test_tuning.cpp's); the wgmma forms refused where the build has none.
TEST_CASE("fast prefill: HKV_FLASH_CFG's forms") {
  const bool wg = cuda::fast_attn_wgmma_built();
  CHECK(std::string(cuda::fast_attn_form(cuda::FlashCfg::Auto)) == (wg ? "wg2" : "8x2"));
  for (cuda::FlashCfg c : {cuda::FlashCfg::F8x2, cuda::FlashCfg::F4x1, cuda::FlashCfg::Wg, cuda::FlashCfg::Wg2})
    CHECK(std::string(cuda::fast_attn_form(c)) == cuda::flash_cfg_name(c));
  if (!wg) {
    cuda::FastAttnArgs fa;
    fa.D = 128, fa.H = 2, fa.KV = 1, fa.n = 1, fa.max_keys = 1, fa.scratch = &fa;  // refused before any launch
    CHECK_THROWS_AS(cuda::fast_attention(fa, nullptr, cuda::FlashCfg::Wg), std::runtime_error);
  }
}

// ---- the whole model: fast prefill against exact prefill, then decode ------------------------------------

const bool kSanitizer = !sanitizer_tool().empty();
// n tokens, or at most 128 under a sanitizer (still past kAutoFastPrefillTokens, the fast path's threshold)
int64_t prompt_len(int64_t n) { return kSanitizer ? std::min<int64_t>(n, 128) : n; }

// Bars (as compare/diff_engine.cpp's fast_prefill cases, with the reason there): mean KL <= 1e-3, worst
// <= 1e-2, top-1 agreement >= 0.97, over every prompt row and the decode rows.
struct KlStats {
  double mean = 0, worst = 0, top1 = 0, top1_raw = 0;  // top1: flips inside a 0.05 gap not counted
};
// A top-1 flip counts only when a's logits of the two tokens are more than 0.05 apart, the rule of hkv
// diff's fast_prefill cases (compare/diff_engine.cpp, kFastTie: a gap under 0.05 is a tie that the fast
// path's rounding may break either way). Raw agreement failed the bar on 130 rows of causal_f32_sharded_hd256
// (5 flips; H200, 2026-11-30, the short prompts of a sanitizer run).
KlStats compare_rows(const std::vector<float>& a, const std::vector<float>& b, int64_t V) {
  KlStats s;
  const int64_t rows = int64_t(a.size()) / V;
  for (int64_t r = 0; r < rows; r++) {
    const float* la = a.data() + r * V;
    const double kl = kl_divergence(la, b.data() + r * V, V);
    s.mean += kl;
    s.worst = std::max(s.worst, std::isfinite(kl) ? kl : 1e30);
    const int32_t ta = argmax(la, V), tb = argmax(b.data() + r * V, V);
    s.top1 += ta == tb || double(la[ta]) - double(la[tb]) < 0.05;
    s.top1_raw += ta == tb;
  }
  s.mean /= double(rows);
  s.top1 /= double(rows);
  s.top1_raw /= double(rows);
  return s;
}

void fast_vs_exact(const std::string& label, const Model& m, cuda::Engine& eng, const KvFormat& f,
                   const std::vector<int32_t>& prompt, int n_decode) {
  CAPTURE(label);
  CAPTURE(f.name());
  const int64_t cap = int64_t(prompt.size()) + n_decode;
  auto se = eng.new_sequence(f, cap), sf = eng.new_sequence(f, cap);
  ForwardOptions exact, fast;
  fast.prefill = Prefill::Fast;
  std::vector<float> le = eng.forward(*se, prompt, exact), lf = eng.forward(*sf, prompt, fast);
  REQUIRE(lf.size() == le.size());
  CHECK(sf->pos() == int64_t(prompt.size()));
  // decode after the fast prefill runs on the exact path: the exact engine's argmax fed to both
  const int64_t V = m.config.vocab_size;
  for (int i = 0; i < n_decode; i++) {
    const int32_t tok = argmax(le.data() + le.size() - size_t(V), V);
    std::vector<float> de = eng.forward(*se, {tok}, exact), df = eng.forward(*sf, {tok}, exact);
    le.insert(le.end(), de.begin(), de.end());
    lf.insert(lf.end(), df.begin(), df.end());
  }
  CHECK(sf->pos() == cap);
  const KlStats s = compare_rows(le, lf, V);
  MESSAGE(label << " " << f.name() << ": KL mean " << s.mean << ", worst " << s.worst << ", top-1 " << s.top1
                << " (raw " << s.top1_raw << ")");
  CHECK(s.mean <= 1e-3);
  CHECK(s.worst <= 1e-2);
  CHECK(s.top1 >= 0.97);
  // the raw agreement too, on the full prompts (under a sanitizer's 128-token prompts a few near-tie flips
  // are more than 3% of the rows)
  if (!kSanitizer) CHECK(s.top1_raw >= 0.97);
}

TEST_CASE("fast prefill: the whole model against exact prefill by KL, then exact decode (builtin tiny)") {
  for (const char* name : {"builtin:tiny", "builtin:tiny-mlx4"}) {
    Model m = load_any_model(name);
    cuda::Engine eng(m);
    const std::vector<int32_t> p = random_tokens(prompt_len(700), m.config.vocab_size, 31);
    for (const char* fmt : {"bf16", "fp8", "q4h"}) fast_vs_exact(name, m, eng, KvFormat::parse(fmt), p, 3);
    // Auto picks the fast path from kAutoFastPrefillTokens tokens on, never with a tap
    ForwardOptions o;
    o.prefill = Prefill::Auto;
    CHECK(eng.uses_fast_prefill(cuda::kAutoFastPrefillTokens, o));
    CHECK_FALSE(eng.uses_fast_prefill(cuda::kAutoFastPrefillTokens - 1, o));
    Tap tap = [](int, const char*, int64_t, const float*, int64_t) {};
    o.tap = &tap;
    CHECK_FALSE(eng.uses_fast_prefill(cuda::kAutoFastPrefillTokens, o));
  }
  // two passes (4096 rows a pass), in two calls (the second continues the first's states)
  Model m = load_any_model("builtin:tiny");
  cuda::Engine eng(m);
  if (!kSanitizer)
    fast_vs_exact("tiny, 5000 tokens (two passes)", m, eng, KvFormat::q4h(),
                  random_tokens(5000, m.config.vocab_size, 32), 2);
  const int64_t n1 = prompt_len(700), n = n1 + prompt_len(800);
  const std::vector<int32_t> p = random_tokens(n, m.config.vocab_size, 33);
  auto se = eng.new_sequence(KvFormat::q4h(), n), sf = eng.new_sequence(KvFormat::q4h(), n);
  ForwardOptions fast;
  fast.prefill = Prefill::Fast;
  std::vector<float> le = eng.forward(*se, p);
  std::vector<float> lf = eng.forward(*sf, std::vector<int32_t>(p.begin(), p.begin() + n1), fast);
  std::vector<float> l2 = eng.forward(*sf, std::vector<int32_t>(p.begin() + n1, p.end()), fast);
  lf.insert(lf.end(), l2.begin(), l2.end());
  const KlStats s = compare_rows(le, lf, m.config.vocab_size);
  MESSAGE("tiny, " << n1 << " + " << n - n1 << " tokens in two fast calls: KL mean " << s.mean << ", worst "
                   << s.worst);
  CHECK(s.mean <= 1e-3);
  CHECK(s.worst <= 1e-2);
  // a fast prefill with a tap is refused (the fast path reports no taps)
  Tap tap = [](int, const char*, int64_t, const float*, int64_t) {};
  fast.tap = &tap;
  auto s3 = eng.new_sequence(KvFormat::bf16(), 10);
  CHECK_THROWS(eng.forward(*s3, {1, 2, 3}, fast));
}

// The 27B shape's larger products go through several tiles of the bf16 weight tile, evenly sized and rounded to
// 128 rows (Engine::fast_gemm); the small models' fit one. Capped at 200 rows of 128 columns here: the 1024-row
// q projection of tiny-mlx4 takes 8 tiles of 128 rows, the 256-column products tiles of fewer than 128 rows
// (2 × 64 for the down projection), each tile's output at its own offset. A tile skipped or misplaced leaves
// rows of the products stale, far outside the KL bars.
TEST_CASE("fast prefill: weight products in several row tiles against exact prefill by KL (tiny-mlx4)") {
  Model m = load_any_model("builtin:tiny-mlx4");
  cuda::Engine eng(m);
  eng.set_fast_weight_tile_cap(200 * 128);
  const std::vector<int32_t> p = random_tokens(prompt_len(300), m.config.vocab_size, 37);
  fast_vs_exact("tiny-mlx4, 200-row weight tiles", m, eng, KvFormat::parse("q4h"), p, 2);
}

TEST_CASE("fast prefill: the transformers fixtures (fixtures/hf) against exact prefill by KL") {
  const auto dirs = hf_fixture_dirs();
  for (const auto& dir : dirs) {
    Model m = load_any_model(dir.string());
    std::vector<int32_t> tokens = read_tokens((dir / "tokens.json").string(), m.config.vocab_size);
    tokens.resize(size_t(prompt_len(int64_t(tokens.size()))));
    cuda::Engine eng(m);
    for (const char* fmt : {"bf16", "q4h"})
      fast_vs_exact(dir.filename().string(), m, eng, KvFormat::parse(fmt), tokens, 2);
  }
  CHECK(!dirs.empty());
}

}  // namespace
