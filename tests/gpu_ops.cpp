// The engine's kernel-internal checks: what the differential table (compare/diff_engine.cpp, run by tests/gpu_diff.cpp
// and `hkv diff`) cannot express as one engine op against one oracle function. One engine path against another (fused
// launches against the launches they replace, the split DeltaNet recurrence against the one-block kernel), the engine's
// own data (x's records), diagnostic counters (phase stamps and counts), and refusals. Each test case says why it is
// not an oracle case. One line per check, as llama.cpp's test-backend-ops.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "compare/diff_engine.h"
#include "cuda/kernels.h"
#include "reference/kvformat.h"
#include "reference/model.h"
#include "reference/scalar.h"
#include "reference/weights.h"
#include "tests/gpu_util.h"

using namespace hkv;
using namespace hkv::gputest;
using namespace hkv::opcase;

TEST_CASE("xq_records: the MLX4 products' block fixed point of x, byte for byte with x_chunks") {
  // Not an oracle case: the records are the engine's own layout of x_chunks (the oracle has no such output); the MLX4
  // product over these chunks is the table's matvec(...,x=every-chunk-kind). Chunks of every kind, the inf and NaN ones
  // included.
  const std::vector<float> x = every_chunk_kind_x();
  const int64_t n = int64_t(x.size());
  DBuf<float> dx(x);
  DBuf<uint32_t> dq(size_t((n / 32) * cuda::kXqWords));
  dq.poison();
  cuda::xq_records(dx.p, n, 1, n, dq.p, nullptr);
  const std::string d = record_diff(dq.get(), expected_records(x.data(), 1, n));
  std::printf("xq_records(12 chunks of every kind): %s\n", d.empty() ? "OK" : ("FAIL " + d).c_str());
  CHECK_MESSAGE(d.empty(), d);
}

TEST_CASE("exp_c_flat on the device: exp_c's bits for every float") {
  // Not an oracle case: exp_c_flat is the engine's own form of exp_c (the attention's weights in bulk.cu's form 19);
  // the oracle has exp_c alone. Every one of the 2^32 bit patterns, both functions on the device (whose exp_c gives the
  // host's bits on every input: docs/RESULTS.md §5), compared as bits. Under compute-sanitizer (HKV_SANITIZER, set by
  // cuda/run_gpu_suite.sh) the 2^24 patterns of the floats from −32 to −128 alone, the lower bounds among them, so that
  // the sanitizers' runs stay within their time limits.
  const bool sanitized = std::getenv("HKV_SANITIZER") != nullptr;
  const uint64_t begin = sanitized ? 0xc2000000u : 0, end = sanitized ? 0xc3000000u : uint64_t(1) << 32;
  const cuda::BitsCheck r = cuda::exp_flat_check(begin, end);
  char first[16];
  std::snprintf(first, sizeof first, "0x%08x", r.first);
  std::printf(
      "exp_c_flat against exp_c (%llu bit patterns): %s\n", (unsigned long long)r.checked,
      r.differing == 0 ? "OK" : ("FAIL " + std::to_string(r.differing) + " differ, the first " + first).c_str());
  CHECK(r.checked == end - begin);
  CHECK_MESSAGE(r.differing == 0, r.differing << " differ, the first " << first);
}

TEST_CASE("matvec_multi refuses XSource where its records do not fit or the matrices are not MLX4") {
  // Not an oracle case: which launches take XSource is the engine's policy (matvec_fuses_records); the table's
  // matvec_multi_xsource cases check the bytes where it does.
  DeviceKeep keep;
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
  src.x = static_cast<const float*>(keep.back().get());
  CHECK_THROWS_AS(cuda::matvec_multi(&td, 1, nullptr, 0, 1, nullptr, nullptr, cuda::Tuning{}, &src),
                  std::runtime_error);
}

TEST_CASE("matvec phase stamps (bench-ops --phases): the same bytes, one record a launch, phases in order") {
  // Not an oracle case: the stamps are a diagnostic instantiation's counters; its products are checked against the
  // oracle here only to show that stamping changed no byte.
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

// A chain of `shapes` (each step's matrices' rows and its width) as one ChainPlan, run in each of `forms` twice (the
// counters reset) and then stamped in each of `stamped` (bench-ops --persistent --phases), every row checked against
// the oracle's matmul (x: gaussian of each width, its records made by xq_records) and each stamped (step, block)'s four
// stamps in order. Returns the first difference ("" when none); `plan_out` keeps the plan for the caller's refusals.
struct ChainShape {
  std::vector<int64_t> rows;
  int64_t cols;
};
struct ChainCheck {
  std::unique_ptr<cuda::ChainPlan> plan;
  std::map<int64_t, std::unique_ptr<DBuf<uint32_t>>> recs;
  std::vector<MatSet> sets;
  std::vector<std::unique_ptr<DBuf<float>>> outs;
  std::string diff;
};
ChainCheck check_chain(const std::vector<ChainShape>& shapes, const std::vector<cuda::ChainForm>& forms,
                       const std::vector<cuda::ChainForm>& stamped_forms, uint64_t seed) {
  ChainCheck c;
  std::map<int64_t, std::vector<float>> xs;
  std::map<int64_t, std::unique_ptr<DBuf<float>>> dxs;
  for (const ChainShape& sh : shapes) {
    if (xs.count(sh.cols)) continue;
    xs[sh.cols] = gaussian(size_t(sh.cols), seed + uint64_t(sh.cols), 1.0f);
    dxs[sh.cols] = std::make_unique<DBuf<float>>(xs[sh.cols]);
    c.recs[sh.cols] = std::make_unique<DBuf<uint32_t>>(size_t(sh.cols / 32) * cuda::kXqWords);
    cuda::xq_records(dxs[sh.cols]->p, sh.cols, 1, sh.cols, c.recs[sh.cols]->p, nullptr);
  }
  std::vector<cuda::ChainStep> steps;
  for (size_t k = 0; k < shapes.size(); k++) {
    c.sets.push_back(random_matrices(WType::MLX4, shapes[k].rows, shapes[k].cols, 64, seed + 100 + 10 * k));
    cuda::ChainStep st;
    st.xq = c.recs[shapes[k].cols]->p;
    for (size_t m = 0; m < shapes[k].rows.size(); m++) {
      c.outs.push_back(std::make_unique<DBuf<float>>(size_t(shapes[k].rows[m])));
      st.tasks.push_back({c.sets[k].dev[m], c.outs.back()->p, shapes[k].rows[m]});
    }
    steps.push_back(std::move(st));
  }
  c.plan = std::make_unique<cuda::ChainPlan>(steps);
  const cuda::ChainPlan& plan = *c.plan;
  struct Run {
    cuda::ChainForm form;
    bool stamped;
  };
  std::vector<Run> runs;
  for (int r = 0; r < 2; r++)
    for (cuda::ChainForm f : forms) runs.push_back({f, false});
  for (cuda::ChainForm f : stamped_forms) runs.push_back({f, true});
  std::string& d = c.diff;
  for (size_t run = 0; run < runs.size() && d.empty(); run++) {
    for (auto& o : c.outs) o->poison();
    const auto [form, stamped] = runs[run];
    std::unique_ptr<DBuf<unsigned long long>> stamps;
    if (stamped)
      stamps = std::make_unique<DBuf<unsigned long long>>(std::vector<unsigned long long>(plan.stamp_words(form), 0));
    plan.run(nullptr, form, stamped ? stamps->p : nullptr);
    HKV_CUDA_CHECK(cudaDeviceSynchronize());
    if (stamped) {
      const std::vector<unsigned long long> w = stamps->get();
      const size_t grid = size_t(plan.grid(form));
      for (size_t k = 0; k < shapes.size() && d.empty(); k++) {
        int written = 0;
        for (size_t b = 0; b < grid && d.empty(); b++) {
          const unsigned long long* s4 = w.data() + (k * grid + b) * 4;
          written += s4[0] != 0;
          if (s4[0] != 0 && !(s4[0] <= s4[1] && s4[1] <= s4[2] && s4[2] <= s4[3]))
            d = "step " + std::to_string(k) + ", block " + std::to_string(b) + ": stamps out of order";
        }
        if (d.empty() && written == 0) d = "step " + std::to_string(k) + ": no block stamped";
      }
    }
    size_t o = 0;
    for (size_t k = 0; k < shapes.size() && d.empty(); k++)
      for (size_t m = 0; m < shapes[k].rows.size() && d.empty(); m++, o++) {
        std::vector<float> ref(size_t(shapes[k].rows[m]));
        matmul(c.sets[k].host[m]->m, xs[shapes[k].cols].data(), 1, ref.data());
        d = first_diff(c.outs[o]->get(), ref);
        if (!d.empty())
          d = "form " + std::to_string(int(form)) + (stamped ? ", stamped" : "") + ", run " + std::to_string(run) +
              ", step " + std::to_string(k) + ", matrix " + std::to_string(m) + ": " + d;
      }
  }
  return c;
}

TEST_CASE(
    "a chain of matvec launches as one persistent launch (bench-ops --persistent): the oracle's rows, every form") {
  // Not an oracle op: cuda::ChainPlan is a schedule of matvec_multi's products (resident blocks over items in order,
  // per-step or per-slice counters); its rows are checked against the oracle's matmul here to show that the schedule
  // changes no byte, over steps of one to three matrices, several widths, steps smaller than a block's item and larger
  // than the grid, in every form (cuda::kChainForms: a barrier an item, a barrier a step with 16 or 20 warps a block,
  // counters a slice of x), each run twice (the counters reset), and the step forms stamped. The slice form takes
  // widths of whole slices (1024 columns) alone, so it runs on a chain of its own: of 1 to 3 slices, a step of one row
  // group (fewer groups than the next step's slices: a slice that waits for none), the widest step between narrower
  // ones (both of its buffers' turns). Then the refusals. The order between steps is not observable here (each step
  // reads fixed records): these checks are of the bytes.
  using F = cuda::ChainForm;
  const ChainCheck a = check_chain(
      {{{300, 1000}, 512}, {{5000}, 1024}, {{48, 48, 77}, 512}, {{2000}, 256}, {{7000, 33}, 1024}, {{1}, 256}},
      {F::Items, F::Steps, F::StepsWide}, {F::Steps, F::StepsWide}, 3100);
  std::printf("matvec chain persistent(6 steps, %d items on %d blocks, the barrier forms): %s\n", a.plan->items(),
              a.plan->grid(), a.diff.empty() ? "OK" : ("FAIL " + a.diff).c_str());
  CHECK_MESSAGE(a.diff.empty(), a.diff);
  const ChainCheck b = check_chain({{{5000}, 1024},
                                    {{300, 1000}, 2048},
                                    {{1}, 1024},
                                    {{7000, 33}, 3072},
                                    {{48, 48, 77}, 1024},
                                    {{2000}, 3072},
                                    {{600}, 2048}},
                                   {F::Slices, F::StepsWide}, {}, 3300);
  REQUIRE(b.plan->slices_why_not() == "");
  std::printf("matvec chain persistent(7 steps of whole slices on %d blocks, the slice form): %s\n",
              b.plan->grid(F::Slices), b.diff.empty() ? "OK" : ("FAIL " + b.diff).c_str());
  CHECK_MESSAGE(b.diff.empty(), b.diff);
  // refusals: stamps in the item and slice forms; the slice form on widths that are not whole slices; a residual add,
  // more than kMaxTasks matrices, mixed widths
  const cuda::ChainPlan& plan = *a.plan;
  {
    DBuf<unsigned long long> stamps(plan.stamp_words(F::Items));
    CHECK_THROWS_AS(plan.run(nullptr, F::Items, stamps.p), std::invalid_argument);
    CHECK_THROWS_AS(b.plan->run(nullptr, F::Slices, stamps.p), std::invalid_argument);
  }
  CHECK(plan.slices_why_not().find("step 0's width 512") != std::string::npos);
  CHECK_THROWS_AS(plan.run(nullptr, F::Slices), std::invalid_argument);
  const auto& recs = a.recs;
  const auto& sets = a.sets;
  const auto& outs = a.outs;
  std::vector<cuda::ChainStep> bad(1);
  bad[0].xq = recs.at(512)->p;
  bad[0].tasks.push_back({sets[0].dev[0], outs[0]->p, 300, true});
  CHECK_THROWS_AS(cuda::ChainPlan{bad}, std::invalid_argument);
  bad[0].tasks.assign(5, {sets[0].dev[0], outs[0]->p, 300});
  CHECK_THROWS_AS(cuda::ChainPlan{bad}, std::invalid_argument);
  bad[0].tasks = {{sets[0].dev[0], outs[0]->p, 300}, {sets[1].dev[0], outs[2]->p, 5000}};
  CHECK_THROWS_AS(cuda::ChainPlan{bad}, std::invalid_argument);
}

TEST_CASE("kv_pack refuses head dims and formats it does not take") {
  // Not an oracle case: a refusal before anything runs (the table's kv_pack cases check the bytes and the error word).
  CHECK_THROWS_AS(
      cuda::kv_pack(KvFormat::q4h(), nullptr, 48, nullptr, 48, nullptr, nullptr, nullptr, 1, 1, 48, nullptr, nullptr),
      std::runtime_error);
  // and the oracle-only ablations but q4h-max
  for (const char* n : {"q4h-nf", "q4h-seed", "q4h-nf-max", "f32"})
    CHECK_THROWS_WITH_AS(cuda::kv_pack(KvFormat::parse(n), nullptr, 256, nullptr, 256, nullptr, nullptr, nullptr, 1, 1,
                                       256, nullptr, nullptr),
                         doctest::Contains("oracle-only ablation"), std::runtime_error);
}

TEST_CASE("attn_prep and kv_pack in one launch (attn_prep_pack): the two launches' bytes") {
  // Not an oracle case: one engine path against another (the fused launch against the two it replaces; kv_pack is the
  // table's kv_pack cases, attn_prep's q and k are the q and k taps of gpu_engine and the table's model cases).
  // q, k (normed and roped in place), the cache rows and the error word of attn_prep followed by kv_pack, against the
  // one launch; rows at odd positions of a batch, every format, head_dim 256 (the 27B shape), 128 and 64 with partial
  // RoPE; a row with a NaN in v (nothing of it written, bit 1) and, for fp8 and q4h, a v row whose scale overflows fp16
  // (bit 2). The caches start from a pattern, so that rows written where they should not be show.
  struct Shape {
    int H, KV, D, rd;
  };
  for (const Shape sh : {Shape{24, 4, 256, 64}, Shape{6, 2, 128, 128}, Shape{4, 1, 64, 32}})
    for (KvFormat f : {KvFormat::bf16(), KvFormat::fp8(), KvFormat::q4h(), KvFormat::parse("q4h-max")}) {
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
      std::vector<uint8_t> cache0(
          cuda::kv_cache_bytes(cap, KV, rb, cuda::kv_block(f.kind)));  // the device layout's bytes for cap positions
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
                               f, dkp.p, dvp.p, dpos.p, derr.p, nullptr);
        } else {
          cuda::attn_prep(dqg.p, dq.p, dk.p, dqn.p, dkn.p, drope.p, N, H, KV, D, rd, 1e-6f, nullptr);
          cuda::kv_pack(f, dk.p, int64_t(KV) * D, dv.p, int64_t(KV) * D, dkp.p, dvp.p, dpos.p, N, KV, D, derr.p,
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

TEST_CASE("attention phase counts (hkv bench --attention-only --phases): the same bytes, every staged block counted") {
  // Not an oracle case: the counts are a diagnostic instantiation's; its output is checked against attend() here only
  // to show that counting changed no byte. The 27B shape (head_dim 256, 24 query heads over 4 KV heads) over 1,100 keys
  // (3 chunks), q4h and fp8: between attn_phases_begin and attn_phases_end the staged shapes take their counting
  // instantiation. Their output must equal attend()'s, every chunk block must be counted once (KV heads · blocks a KV
  // head · chunks · the blocks a chunk's values are split over, attn_dsplit) and every phase must hold cycles; slim and
  // wide count none.
  const int D = 256, H = 24, KV = 4, n = 1100, maxch = 3;
  for (KvFormat f : {KvFormat::q4h(), KvFormat::fp8()}) {
    const size_t rb = kv_row_bytes(f, D), stride = size_t(KV) * rb;
    std::vector<uint8_t> kc(size_t(n) * stride), vc(size_t(n) * stride);
    for (int p = 0; p < n; p++)
      for (int h = 0; h < KV; h++) {
        kv_pack_row(f, cache_test_row((p + h) % 6, D, 7000 + uint64_t(p * 8 + h)).data(), D,
                    kc.data() + p * stride + h * rb);
        kv_pack_row(f, cache_test_row((p + 2 * h) % 6, D, 9000 + uint64_t(p * 8 + h)).data(), D,
                    vc.data() + p * stride + h * rb);
      }
    std::vector<float> q = gaussian(size_t(H * D), 91, 3.0f), ref(q.size());
    for (int h = 0; h < H; h++)
      attend(f, q.data() + h * D, D, kc.data() + size_t(h / (H / KV)) * rb, vc.data() + size_t(h / (H / KV)) * rb,
             stride, n, ref.data() + h * D);
    const int B = cuda::kv_block(f.kind);
    DBuf<uint8_t> dkc(cuda::kv_rows_to_blocks(kc.data(), n, KV, rb, B)),
        dvc(cuda::kv_rows_to_blocks(vc.data(), n, KV, rb, B));
    DBuf<float> dq(q), out(q.size()), part(cuda::attn_part_floats(1, H, D, n));
    DBuf<int> dn(std::vector<int>{n});
    DBuf<const uint8_t*> dkp(std::vector<const uint8_t*>{dkc.p}), dvp(std::vector<const uint8_t*>{dvc.p});
    const std::pair<cuda::AttnShape, int> shapes[] = {
        {cuda::AttnShape::KvStagedH1, 6}, {cuda::AttnShape::KvStagedH2, 3}, {cuda::AttnShape::KvStaged, 1},
        {cuda::AttnShape::VStagedX2, 1},  {cuda::AttnShape::Slim, 0},       {cuda::AttnShape::UnstagedX8, 0}};
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
  // Not an oracle case: one engine path against another (the split and fused recurrences against the one-block kernel,
  // which gpu_engine and the table's model cases check against the oracle), and core's records (the engine's layout).
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
