// `hkv bench-ops`: the engine's exact matrix–vector products alone, at the 27B shape's decode launches
// (N = 1, MLX 4-bit weights, group 64, fused as the engine fuses them), each against the copy bandwidth
// measured in the same run. The weights are random nibbles (the time does not depend on their values).
// Built only with the CUDA engine (HKV_HAVE_CUDA).
#if defined(HKV_HAVE_CUDA)

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "compare/cli.h"
#include "compare/gpu_bench.h"
#include "cuda/check.h"
#include "cuda/kernels.h"

namespace hkv {

int cmd_bench_ops(const Args& a);

namespace {

struct DeviceMatrix {
  cuda::DMat d;
  void* mem = nullptr;
  DeviceMatrix(int64_t rows, int64_t cols, int group, uint64_t tensor) {
    d.type = WType::MLX4, d.rows = rows, d.cols = cols, d.group = group;
    const size_t words = size_t(rows * cols / 8), groups = size_t(rows * (cols / group));
    HKV_CUDA_CHECK(cudaMalloc(&mem, words * 4 + groups * 4));
    auto* w = static_cast<uint32_t*>(mem);
    auto* s = reinterpret_cast<uint16_t*>(w + words);
    d.data = w, d.scales = s, d.biases = s + groups;
    cuda::synth_mlx4_fill(w, s, s + groups, int64_t(words), int64_t(groups), 7, tensor, -6, nullptr);
    HKV_CUDA_CHECK(cudaDeviceSynchronize());
  }
  ~DeviceMatrix() { cudaFree(mem); }
  DeviceMatrix(const DeviceMatrix&) = delete;
  DeviceMatrix& operator=(const DeviceMatrix&) = delete;
};

// An input x of `cols` ordinary values (the kernels' time does not depend on them) and its MLX4 records.
struct DeviceX {
  float* x = nullptr;
  uint32_t* rec = nullptr;
  explicit DeviceX(int64_t cols) {
    HKV_CUDA_CHECK(cudaMalloc(&x, size_t(cols) * 4));
    HKV_CUDA_CHECK(cudaMalloc(&rec, size_t(cols / 32) * cuda::kXqWords * 4));
    std::vector<float> hx(static_cast<size_t>(cols));
    for (size_t i = 0; i < hx.size(); i++) hx[i] = float(int(i % 97) - 48) * 0.03125f;
    HKV_CUDA_CHECK(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
    cuda::xq_records(x, cols, 1, cols, rec, nullptr);
  }
  ~DeviceX() { cudaFree(x), cudaFree(rec); }
  DeviceX(const DeviceX&) = delete;
  DeviceX& operator=(const DeviceX&) = delete;
};

// --chain: a 27B decode token's 257 matvec launches in the engine's order (16 times 3 DeltaNet layers and a
// full-attention layer, each: the projections in, the projection out, gate|up, down; then lm_head), each launch with
// its own matrices (14.4 GB, what a token reads), captured in one CUDA graph on a stream, the dependent launches
// chained as the engine chains them, and replayed: a token's matvecs without the other kernels, against the sum of
// the launches timed alone. Under --variants (hkv bench's syntax) the graph is captured anew for each variant, under
// the switches tuning_from_env() reads in it, in `rounds` rounds interleaving the variants.
// --phases (with --chain): the chain captured once more with the decode launches stamping their phases
// (cuda::mlx4_stamps_begin) and replayed once; per launch kind, the mean over its launches of: the spread of its
// blocks' starts, the wait in pdl_wait, the prologue (until the last block has x's records staged), the stream
// (until the first warp ends), the tail (until the last warp ends), and the gap from its last warp's end to the
// next launch's first block (%globaltimer, ns).
void print_phases(const std::vector<std::string>& names, const std::vector<cuda::MatvecStamps>& st) {
  struct Acc {
    double n = 0, spread = 0, wait = 0, prologue = 0, stream = 0, tail = 0, total = 0, gap = 0, gaps = 0;
  };
  std::vector<std::string> order;
  std::map<std::string, Acc> acc;
  Acc all;
  for (size_t i = 0; i < st.size() && i < names.size(); i++) {
    const cuda::MatvecStamps& s = st[i];
    auto d = [](uint64_t a, uint64_t b) { return (double(int64_t(a - b))) / 1e3; };  // µs
    if (!acc.count(names[i])) order.push_back(names[i]);
    for (Acc* a : {&acc[names[i]], &all}) {
      a->n += 1;
      a->spread += d(s.start[1], s.start[0]);
      a->wait += d(s.waited[0], s.start[0]);
      a->prologue += d(s.records[1], s.waited[0]);
      a->stream += d(s.end[0], s.records[1]);
      a->tail += d(s.end[1], s.end[0]);
      a->total += d(s.end[1], s.start[0]);
      if (i + 1 < st.size()) a->gap += d(st[i + 1].start[0], s.end[1]), a->gaps += 1;
    }
  }
  std::printf("\nphases of each launch in the chain (--phases; µs, the mean over a kind's launches; %%globaltimer)\n");
  std::printf(
      "| launch | a token | block starts spread | pdl_wait | prologue | stream | tail | launch | gap to the next |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  auto row = [](const std::string& name, const Acc& a) {
    std::printf("| %s | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", name.c_str(), a.n, a.spread / a.n,
                a.wait / a.n, a.prologue / a.n, a.stream / a.n, a.tail / a.n, a.total / a.n,
                a.gaps ? a.gap / a.gaps : 0.0);
  };
  for (const std::string& n : order) row(n, acc[n]);
  row("all", all);
  std::printf("a token: launches %.3f ms from first start to last end, of which gaps %.3f ms\n",
              (all.total + all.gap) / 1e3, all.gap / 1e3);
}

// Pearson's correlation of two equal-length series (0 when either is constant or has fewer than 2 values)
double correlation(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n = std::min(a.size(), b.size());
  if (n < 2) return 0.0;
  double ma = 0, mb = 0;
  for (size_t i = 0; i < n; i++) ma += a[i], mb += b[i];
  ma /= double(n), mb /= double(n);
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < n; i++)
    sab += (a[i] - ma) * (b[i] - mb), saa += (a[i] - ma) * (a[i] - ma), sbb += (b[i] - mb) * (b[i] - mb);
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0.0;
}

// Whether the tail is the same multiprocessors each time (--phases): per launch, each multiprocessor's lateness, its
// last warp's end less the launch's earliest multiprocessor's last warp's end; per launch kind, the mean lateness of
// each multiprocessor over the kind's even launches and over its odd ones, and the correlation of the two (near 1:
// the same multiprocessors end late every time; near 0: the order is new each launch); the mean and largest
// lateness, and the latest multiprocessors. Then the correlation of each kind's per-multiprocessor lateness with the
// first kind's.
void print_sm_spread(const std::vector<std::string>& names, const std::vector<cuda::MatvecStamps>& st) {
  std::vector<std::string> order;
  struct Acc {
    std::vector<double> late[2];
    std::vector<int> n[2];
    std::vector<double> all_late, all_rec;  // every (launch, multiprocessor): its lateness, its records' lateness
    double sum = 0, max = 0, count = 0;
    double within = 0, within_max = 0;  // its first warp's end to its last's, summed over (launch, multiprocessor)
    int launches = 0;
  };
  std::map<std::string, Acc> acc;
  for (size_t i = 0; i < st.size() && i < names.size(); i++) {
    const std::vector<uint64_t>&e = st[i].sm_end, &r = st[i].sm_records, &f = st[i].sm_first_end;
    uint64_t e0 = ~0ull, r0 = ~0ull;
    for (size_t sm = 0; sm < e.size(); sm++)
      if (e[sm]) e0 = std::min(e0, e[sm]), r0 = std::min(r0, r[sm]);
    if (e0 == ~0ull) continue;
    if (!acc.count(names[i])) order.push_back(names[i]);
    Acc& a = acc[names[i]];
    const int half = a.launches++ % 2;
    for (int h = 0; h < 2; h++) a.late[h].resize(e.size(), 0.0), a.n[h].resize(e.size(), 0);
    for (size_t sm = 0; sm < e.size(); sm++)
      if (e[sm]) {
        const double late = double(e[sm] - e0) / 1e3;
        a.late[half][sm] += late, a.n[half][sm] += 1;
        a.sum += late, a.count += 1, a.max = std::max(a.max, late);
        a.all_late.push_back(late), a.all_rec.push_back(double(r[sm] - r0) / 1e3);
        const double in = sm < f.size() && f[sm] ? double(e[sm] - f[sm]) / 1e3 : 0.0;
        a.within += in, a.within_max = std::max(a.within_max, in);
      }
  }
  std::printf(
      "\nthe tail by multiprocessor (--phases; µs a multiprocessor's last warp ends after the launch's first "
      "multiprocessor's; halves: its even and odd launches; records: the correlation with the lateness of the "
      "multiprocessor's records being staged; within: a multiprocessor's first warp's end to its last's)\n");
  std::printf(
      "| launch | launches | mean | largest | sd of the multiprocessors' means | halves' correlation | records | "
      "within: mean | within: largest | latest multiprocessors (mean µs) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<std::pair<std::string, std::vector<double>>> means;  // NaN where no block of the kind ran
  for (const std::string& name : order) {
    Acc& a = acc[name];
    std::vector<double> m(a.late[0].size(), 0.0), h0, h1;
    std::vector<int> used;
    for (size_t sm = 0; sm < m.size(); sm++) {
      const int n = a.n[0][sm] + a.n[1][sm];
      if (!n) continue;
      used.push_back(int(sm));
      m[sm] = (a.late[0][sm] + a.late[1][sm]) / n;
      if (a.n[0][sm] && a.n[1][sm]) h0.push_back(a.late[0][sm] / a.n[0][sm]), h1.push_back(a.late[1][sm] / a.n[1][sm]);
    }
    double mm = 0, sd = 0;  // the mean and standard deviation of the multiprocessors' mean lateness
    for (int sm : used) mm += m[size_t(sm)];
    if (!used.empty()) mm /= double(used.size());
    for (int sm : used) sd += (m[size_t(sm)] - mm) * (m[size_t(sm)] - mm);
    if (!used.empty()) sd = std::sqrt(sd / double(used.size()));
    std::sort(used.begin(), used.end(), [&](int x, int y) { return m[size_t(x)] > m[size_t(y)]; });
    std::string latest;
    for (size_t k = 0; k < used.size() && k < 8; k++) {
      char b[32];
      std::snprintf(b, sizeof b, "%s%d: %.2f", k ? ", " : "", used[k], m[size_t(used[k])]);
      latest += b;
    }
    std::printf("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s |\n", name.c_str(), a.launches,
                a.count ? a.sum / a.count : 0.0, a.max, sd, correlation(h0, h1), correlation(a.all_late, a.all_rec),
                a.count ? a.within / a.count : 0.0, a.within_max, latest.c_str());
    std::vector<double> mk(m.size(), std::nan(""));
    for (int sm : used) mk[size_t(sm)] = m[size_t(sm)];
    means.emplace_back(name, mk);
  }
  if (means.size() > 1) {  // over the multiprocessors both kinds ran on
    std::printf("per-multiprocessor lateness against %s's:", means[0].first.c_str());
    for (size_t k = 1; k < means.size(); k++) {
      std::vector<double> a, b;
      for (size_t sm = 0; sm < means[0].second.size() && sm < means[k].second.size(); sm++)
        if (!std::isnan(means[0].second[sm]) && !std::isnan(means[k].second[sm]))
          a.push_back(means[0].second[sm]), b.push_back(means[k].second[sm]);
      std::printf(" %s %.2f%s", means[k].first.c_str(), correlation(a, b), k + 1 < means.size() ? "," : "\n");
    }
  }
}

const char* chain_form_name(cuda::ChainForm form) {
  return form == cuda::ChainForm::Items       ? "items"
         : form == cuda::ChainForm::Steps     ? "steps"
         : form == cuda::ChainForm::StepsWide ? "steps, 20 warps a block"
                                              : "slices";
}

// --persistent --phases: a step form run once more with its stamps (cuda::ChainPlan::run), and where a step's time
// goes, summed over the token's steps in µs: "release", from the last block of the step ahead storing its rows to the
// first block of this step past its wait (the count, its fence and the poll); "staging", the records staged (the
// median block); "rows", the row groups (the median block); "tail", the last block's rows stored after the median
// block's; and the token from the first stamp to the last.
void print_step_phases(const cuda::ChainPlan& plan, cuda::ChainForm form, cudaStream_t st, const char* name) {
  const size_t words = plan.stamp_words(form);
  unsigned long long* d = nullptr;
  HKV_CUDA_CHECK(cudaMalloc(&d, words * 8));
  HKV_CUDA_CHECK(cudaMemsetAsync(d, 0, words * 8, st));
  plan.run(st, form, d);
  std::vector<unsigned long long> h(words);
  HKV_CUDA_CHECK(cudaStreamSynchronize(st));
  HKV_CUDA_CHECK(cudaMemcpy(h.data(), d, words * 8, cudaMemcpyDeviceToHost));
  cudaFree(d);
  const int grid = plan.grid(form);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  double release = 0, staging = 0, rows = 0, tail = 0, last_done = 0;
  unsigned long long t0 = ~0ull, t1 = 0;
  for (int k = 0; k < plan.steps(); k++) {
    std::vector<double> stage, row, done;
    double first_past = 1e300;
    for (int b = 0; b < grid; b++) {
      const unsigned long long* w = h.data() + (size_t(k) * size_t(grid) + size_t(b)) * 4;
      if (w[0] == 0) continue;  // no group of this step in block b
      t0 = std::min(t0, w[0]), t1 = std::max(t1, w[3]);
      first_past = std::min(first_past, double(w[1]));
      stage.push_back(double(w[2] - w[1])), row.push_back(double(w[3] - w[2])), done.push_back(double(w[3]));
    }
    if (done.empty()) continue;
    if (k > 0) release += first_past - last_done;
    staging += median(stage), rows += median(row);
    last_done = *std::max_element(done.begin(), done.end());
    tail += last_done - median(done);
  }
  std::printf(
      "| persistent, a barrier a step (%s), stamped: µs a token | release %.1f | staging %.1f | rows %.1f | tail %.1f "
      "| token %.1f |\n",
      name, release * 1e-3, staging * 1e-3, rows * 1e-3, tail * 1e-3, double(t1 - t0) * 1e-3);
}

// --persistent: the chain's steps (each reading its fixed records) as one persistent launch (cuda::ChainPlan), first
// run once each way into outputs of their own, the launches one after another on the stream (matvec_multi) and the
// persistent launch, and the bytes compared (a difference names the step, matrix and row, and fails the command);
// then the persistent launch timed as the graph was. first: the graph's first variant's median, for the comparison.
template <class StepT, class XsT>
void bench_persistent(const std::vector<StepT>& steps, XsT& xs, cudaStream_t st, int reps, double bw, double bytes,
                      double first, bool phases) {
  size_t total = 0;
  for (const StepT& s : steps)
    for (const cuda::MatTask& t : s.tasks) total += size_t(t.W.rows);
  float *yl = nullptr, *yp = nullptr;
  HKV_CUDA_CHECK(cudaMalloc(&yl, total * 4));
  HKV_CUDA_CHECK(cudaMalloc(&yp, total * 4));
  HKV_CUDA_CHECK(cudaMemset(yl, 0xff, total * 4));  // (yp is poisoned before each form's run)
  std::vector<cuda::ChainStep> chain;
  size_t off = 0;
  for (const StepT& s : steps) {
    std::vector<cuda::MatTask> lt;
    cuda::ChainStep cs;
    cs.xq = xs[s.cols]->rec;
    for (cuda::MatTask t : s.tasks) {
      t.add = false, t.ldy = t.W.rows;
      t.y = yl + off, lt.push_back(t);
      t.y = yp + off, cs.tasks.push_back(t);
      off += size_t(t.W.rows);
    }
    cuda::matvec_multi(lt.data(), int(lt.size()), xs[s.cols]->x, s.cols, 1, xs[s.cols]->rec, st);
    chain.push_back(std::move(cs));
  }
  const cuda::ChainPlan plan(chain);
  std::vector<uint32_t> hl(total), hp(total);
  HKV_CUDA_CHECK(cudaStreamSynchronize(st));
  HKV_CUDA_CHECK(cudaMemcpy(hl.data(), yl, total * 4, cudaMemcpyDeviceToHost));
  for (const cuda::ChainForm form : cuda::kChainForms) {
    const std::string name = chain_form_name(form);
    if (form == cuda::ChainForm::Slices && !plan.slices_why_not().empty()) {
      std::printf("| persistent, counters a slice of x: not run (%s) | | | | | |\n", plan.slices_why_not().c_str());
      continue;
    }
    HKV_CUDA_CHECK(cudaMemset(yp, 0xee, total * 4));
    plan.run(st, form);
    HKV_CUDA_CHECK(cudaStreamSynchronize(st));
    HKV_CUDA_CHECK(cudaMemcpy(hp.data(), yp, total * 4, cudaMemcpyDeviceToHost));
    off = 0;
    for (size_t k = 0; k < steps.size(); k++)
      for (size_t m = 0; m < steps[k].tasks.size(); m++) {
        const size_t rows = size_t(steps[k].tasks[m].W.rows);
        for (size_t r = 0; r < rows; r++)
          if (hl[off + r] != hp[off + r])
            throw std::runtime_error("bench-ops --persistent (" + name + "): step " + std::to_string(k) + " (" +
                                     steps[k].name + "), matrix " + std::to_string(m) + ", row " + std::to_string(r) +
                                     ": the persistent launch's bytes differ from the launches'");
        off += rows;
      }
    const Timing t = time_ms(st, 3, reps, [&] { plan.run(st, form); });  // (the plan writes into yp)
    const std::string per = form == cuda::ChainForm::Items
                                ? "a barrier an item (" + std::to_string(plan.items()) + " items)"
                            : form == cuda::ChainForm::Slices ? "counters a slice of x, no barrier (20 warps a block)"
                                                              : "a barrier a step (" + name + ")";
    std::printf(
        "| persistent, %s: one launch on %d blocks (bytes = the launches', %zu rows) | %.3f | "
        "%+.2f%% | %.3f–%.3f | %.0f%% | |\n",
        per.c_str(), plan.grid(form), total, t.median, 100.0 * (t.median / first - 1.0), t.min, t.max,
        100.0 * bytes / (t.median * 1e-3) / bw);
  }
  if (phases)
    for (const cuda::ChainForm form : {cuda::ChainForm::Steps, cuda::ChainForm::StepsWide})
      print_step_phases(plan, form, st, chain_form_name(form));
  cudaFree(yl), cudaFree(yp);
}

// as_token (--as-token): each launch as the engine's decode token launches it (the decode fusion): the launches
// after a norm make x = rmsnorm(h) and its records in their prologue, the o and out launches make their x's records
// and add their products into h, down adds into h from the records SwiGLU made; else every launch reads x's
// records from memory.
void bench_chain(int reps, const std::vector<EnvVariant>& variants, int rounds, double bw, double alone_ms, bool phases,
                 bool as_token, bool persistent, const cuda::Tuning& tuning) {
  const int64_t E = 5120, I = 17408, G = 64;
  enum class Src { Records, Norm, Plain };
  struct Step {
    std::vector<cuda::MatTask> tasks;
    int64_t cols;
    std::string name;
    Src src;
  };
  float *h = nullptr, *w = nullptr;  // the residual stream and a norm weight (--as-token)
  HKV_CUDA_CHECK(cudaMalloc(&h, size_t(E) * 4));
  HKV_CUDA_CHECK(cudaMalloc(&w, size_t(E) * 4));
  {
    std::vector<float> hh(static_cast<size_t>(E)), hw(static_cast<size_t>(E));
    for (size_t i = 0; i < hh.size(); i++) hh[i] = float(int(i % 89) - 44) * 0.02f, hw[i] = float(int(i % 13)) * 0.01f;
    HKV_CUDA_CHECK(cudaMemcpy(h, hh.data(), hh.size() * 4, cudaMemcpyHostToDevice));
    HKV_CUDA_CHECK(cudaMemcpy(w, hw.data(), hw.size() * 4, cudaMemcpyHostToDevice));
  }
  std::vector<std::unique_ptr<DeviceMatrix>> mats;
  std::vector<Step> steps;
  float* y = nullptr;  // every launch's outputs (their values are not read)
  HKV_CUDA_CHECK(cudaMalloc(&y, size_t(248320) * 4));
  uint64_t tensor = 1000;
  double bytes = 0;
  // src: where the launch's x comes from under --as-token; residual: it adds its product into h
  auto step = [&](std::vector<int64_t> rows, int64_t cols, const char* name, Src src, bool residual) {
    Step s{{}, cols, name, as_token ? src : Src::Records};
    int64_t off = 0;
    for (int64_t r : rows) {
      mats.push_back(std::make_unique<DeviceMatrix>(r, cols, int(G), tensor++));
      if (as_token && residual)
        s.tasks.push_back({mats.back()->d, h, E, true});
      else
        s.tasks.push_back({mats.back()->d, y + off, r});
      off += r;
      bytes += double(mats.back()->d.nbytes());
    }
    steps.push_back(std::move(s));
  };
  for (int l = 0; l < 64; l++) {
    if (l % 4 == 3) {  // full attention
      step({12288, 1024, 1024}, E, "full-attn q|k|v", Src::Norm, false);
      step({E}, 6144, "full-attn o", Src::Plain, true);
    } else {
      step({10240, 6144, 48, 48}, E, "deltanet qkv|z|b|a", Src::Norm, false);
      step({E}, 6144, "deltanet out", Src::Plain, true);
    }
    step({I, I}, E, "mlp gate|up", Src::Norm, false);
    step({E}, I, "mlp down", Src::Records, true);
  }
  step({248320}, E, "lm_head", Src::Records, false);
  std::map<int64_t, std::unique_ptr<DeviceX>> xs;  // x and its records, by width
  for (int64_t cols : {E, int64_t(6144), I}) xs[cols] = std::make_unique<DeviceX>(cols);
  HKV_CUDA_CHECK(cudaDeviceSynchronize());
  cudaStream_t st;
  HKV_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cuda::Tuning tu = tuning;  // the switches the next capture takes
  auto capture = [&] {
    cudaGraph_t g;
    HKV_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
    for (const Step& s : steps) {
      if (s.src == Src::Records) {
        cuda::matvec_multi(s.tasks.data(), int(s.tasks.size()), xs[s.cols]->x, s.cols, 1, xs[s.cols]->rec, st, tu);
        continue;
      }
      cuda::XSource src;  // the launch makes x's records: from rmsnorm(h) (1 + w), or from x as it is
      if (s.src == Src::Norm)
        src.x = h, src.ldx = E, src.norm_w = w, src.eps = 1e-6f;
      else
        src.x = xs[s.cols]->x, src.ldx = s.cols;
      cuda::matvec_multi(s.tasks.data(), int(s.tasks.size()), nullptr, 0, 1, nullptr, st, tu, &src);
    }
    HKV_CUDA_CHECK(cudaStreamEndCapture(st, &g));
    cudaGraphExec_t ge;
    HKV_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
    HKV_CUDA_CHECK(cudaGraphDestroy(g));
    return ge;
  };
  const int nvar = variants.empty() ? 1 : int(variants.size());
  EnvVariants env(variants, [&] { tu = cuda::tuning_from_env(); });  // the graph is captured anew for each variant
  std::vector<std::vector<double>> round_ms(static_cast<size_t>(nvar));
  for (int r = 0; r < rounds; r++)
    for (int v = 0; v < nvar; v++) {
      if (!variants.empty()) env.apply(size_t(v));
      cudaGraphExec_t ge = capture();
      round_ms[size_t(v)].push_back(time_ms(st, 3, reps, [&] { HKV_CUDA_CHECK(cudaGraphLaunch(ge, st)); }).median);
      HKV_CUDA_CHECK(cudaGraphExecDestroy(ge));
    }
  env.restore();
  if (phases) {
    cuda::mlx4_stamps_begin(int(steps.size()));
    cudaGraphExec_t ge = capture();
    HKV_CUDA_CHECK(cudaGraphLaunch(ge, st));
    HKV_CUDA_CHECK(cudaStreamSynchronize(st));
    HKV_CUDA_CHECK(cudaGraphExecDestroy(ge));
    const std::vector<cuda::MatvecStamps> stamps = cuda::mlx4_stamps_end();
    if (stamps.size() != steps.size())
      throw std::runtime_error("bench-ops --phases: " + std::to_string(stamps.size()) + " launches stamped of " +
                               std::to_string(steps.size()));
    std::vector<std::string> names;
    for (const Step& s : steps) names.push_back(s.name);
    print_phases(names, stamps);
    print_sm_spread(names, stamps);
  }
  std::printf(
      "\n%zu launches a token in one graph (--chain), %.2f GB, floor %.3f ms; median of %d replays a round, "
      "%d round(s)\n",
      steps.size(), bytes / 1e9, bytes / bw * 1e3, reps, rounds);
  std::printf("| variant | ms a token's matvecs | vs first | rounds ms | %% of copy bw | launches alone, summed |\n");
  std::printf("|---|---|---|---|---|---|\n");
  double first = 0;
  for (int v = 0; v < nvar; v++) {
    std::vector<double> rm = round_ms[size_t(v)];
    std::sort(rm.begin(), rm.end());
    const double med = rm[rm.size() / 2];
    if (v == 0) first = med;
    std::printf("| %s | %.3f | %+.2f%% | %.3f–%.3f | %.0f%% | %.3f |\n",
                variants.empty() ? "default" : variants[size_t(v)].text.c_str(), med, 100.0 * (med / first - 1.0),
                rm.front(), rm.back(), 100.0 * bytes / (med * 1e-3) / bw, alone_ms);
  }
  if (persistent) bench_persistent(steps, xs, st, reps, bw, bytes, first, phases);
  HKV_CUDA_CHECK(cudaStreamDestroy(st));
  cudaFree(y), cudaFree(h), cudaFree(w);
}

}  // namespace

// hkv bench-ops [--reps 50] [--chain [--variants "A;B" [--rounds 4]] [--phases] [--as-token | --persistent]]
int cmd_bench_ops(const Args& a) {
  const int reps = int(a.get_int("reps", 50));
  if (reps < 1) throw UsageError("hkv bench-ops: --reps must be at least 1");
  const bool chain = a.has("chain");
  if (a.has("variants") && !chain) throw UsageError("hkv bench-ops: --variants compares the --chain graph");
  if (a.has("phases") && !chain)
    throw UsageError("hkv bench-ops: --phases stamps the --chain graph's launches (and with --persistent its steps)");
  if (a.has("as-token") && !chain) throw UsageError("hkv bench-ops: --as-token shapes the --chain graph's launches");
  if (a.has("persistent") && (!chain || a.has("as-token")))
    throw UsageError(
        "hkv bench-ops: --persistent runs the --chain graph's launches, each from its records (no --as-token)");
  const VariantsOption vo = variants_option(a, "hkv bench-ops");
  require_gpu("hkv bench-ops");
  const cuda::Tuning tuning = cuda::tuning_from_env();

  const int64_t E = 5120, I = 17408, G = 64;
  struct Launch {
    const char* name;
    std::vector<int64_t> rows;
    int64_t cols;
    int per_token;  // launches of this shape in one 27B decode token
  };
  const std::vector<Launch> launches = {{"full-attn q|k|v", {12288, 1024, 1024}, E, 16},
                                        {"full-attn o", {E}, 6144, 16},
                                        {"deltanet qkv|z|b|a", {10240, 6144, 48, 48}, E, 48},
                                        {"deltanet out", {E}, 6144, 48},
                                        {"mlp gate|up", {I, I}, E, 64},
                                        {"mlp down", {E}, I, 64},
                                        {"lm_head", {248320}, E, 1}};
  cudaDeviceProp prop;
  HKV_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double bw = copy_bandwidth(nullptr);
  std::printf("hkv bench-ops: exact MLX4 matvec (N = 1, group 64) on %s; copy bandwidth %.3f TB/s\n", prop.name,
              bw / 1e12);
  std::printf("switches: %s\n", cuda::tuning_text(tuning).c_str());
  for (size_t v = 0; v < vo.list.size(); v++)
    std::printf("variant %s: %s\n", vo.list[v].text.c_str(), cuda::tuning_text(vo.tunings[v]).c_str());
  std::printf("| launch | rows x cols | MB | us (median of %d) | TB/s | %% of copy bw | per token | ms a token |\n",
              reps);
  std::printf("|---|---|---|---|---|---|---|---|\n");
  double total_ms = 0, total_bytes = 0;
  uint64_t tensor = 1;
  for (const Launch& l : launches) {
    std::vector<std::unique_ptr<DeviceMatrix>> mats;
    std::vector<std::unique_ptr<float, void (*)(float*)>> outs;
    std::vector<cuda::MatTask> tasks;
    int64_t rows = 0;
    double bytes = 0;
    for (int64_t r : l.rows) {
      mats.push_back(std::make_unique<DeviceMatrix>(r, l.cols, int(G), tensor++));
      float* y = nullptr;
      HKV_CUDA_CHECK(cudaMalloc(&y, size_t(r) * 4));
      outs.emplace_back(y, [](float* p) { cudaFree(p); });
      tasks.push_back({mats.back()->d, y, r});
      rows += r;
      bytes += double(mats.back()->d.nbytes());
    }
    const DeviceX dx(l.cols);
    const double ms = time_ms(nullptr, 5, reps, [&] {
                        cuda::matvec_multi(tasks.data(), int(tasks.size()), dx.x, l.cols, 1, dx.rec, nullptr, tuning);
                      }).median;
    total_ms += ms * l.per_token;
    total_bytes += bytes * l.per_token;
    std::printf("| %s | %lld x %lld | %.1f | %.1f | %.2f | %.0f%% | %d | %.3f |\n", l.name, (long long)rows,
                (long long)l.cols, bytes / 1e6, ms * 1e3, bytes / (ms * 1e-3) / 1e12, 100.0 * bytes / (ms * 1e-3) / bw,
                l.per_token, ms * l.per_token);
  }
  std::printf("all matvecs of a token: %.2f GB in %.3f ms = %.2f TB/s, %.0f%% of copy bandwidth (floor %.3f ms)\n",
              total_bytes / 1e9, total_ms, total_bytes / (total_ms * 1e-3) / 1e12,
              100.0 * total_bytes / (total_ms * 1e-3) / bw, total_bytes / bw * 1e3);
  if (chain)
    bench_chain(reps, vo.list, vo.rounds, bw, total_ms, a.has("phases"), a.has("as-token"), a.has("persistent"),
                tuning);
  return 0;
}

}  // namespace hkv

#endif  // HKV_HAVE_CUDA
