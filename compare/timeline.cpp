// The kernel timeline of `hkv bench --timeline` (timeline.h). The summary is plain C++ (tests/test_timeline.cpp);
// the trace is CUPTI's activity API, built where CMake found CUPTI (HKV_HAVE_CUPTI).
#include "compare/timeline.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <regex>
#include <stdexcept>

#if defined(HKV_HAVE_CUPTI)
#include <cuda_runtime.h>
#include <cupti.h>

#include <mutex>
#endif

namespace hkv {

std::string short_kernel_name(const std::string& mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  if (status != 0 || d == nullptr) return mangled;
  std::string s(d);
  std::free(d);
  static const std::regex noise(R"(\(anonymous namespace\)::|hkv::cuda::|hkv::|\([A-Za-z_:]+\)(?=-?\d))");
  s = std::regex_replace(s, noise, "");
  int depth = 0;  // the parameter list: the first '(' outside the template arguments
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '<') depth++;
    if (s[i] == '>') depth--;
    if (s[i] == '(' && depth == 0) {
      s.resize(i);
      break;
    }
  }
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  return s;
}

TokenTimeline summarize_tokens(std::vector<KernelSpan> spans, const std::string& first, int skip) {
  std::stable_sort(spans.begin(), spans.end(),
                   [](const KernelSpan& a, const KernelSpan& b) { return a.start < b.start; });
  size_t i0 = 0;  // the first kernel of the first token kept
  for (int starts = 0; i0 < spans.size(); i0++)
    if (spans[i0].name == first && starts++ == skip) break;
  if (i0 == spans.size())
    throw std::runtime_error("timeline: no token starting with " + first + " after the " + std::to_string(skip) +
                             " left out");
  struct Acc {
    double n = 0, busy_ns = 0, gap_ns = 0, gaps = 0;
  };
  std::map<std::string, Acc> acc;
  TokenTimeline t;
  double span_ns = 0, busy_ns = 0, sum_ns = 0;
  for (size_t i = i0; i < spans.size();) {
    size_t j = i + 1;  // the token: spans i … j − 1
    while (j < spans.size() && spans[j].name != first) j++;
    t.tokens++;
    uint64_t latest = spans[i].end, cur_lo = spans[i].start, cur_hi = spans[i].end;
    for (size_t k = i; k < j; k++) {
      const KernelSpan& s = spans[k];
      Acc& a = acc[s.name];
      a.n += 1;
      a.busy_ns += double(s.end - s.start);
      sum_ns += double(s.end - s.start);
      if (k > i) {
        a.gap_ns += double(int64_t(s.start) - int64_t(latest));
        a.gaps += 1;
      }
      latest = std::max(latest, s.end);
      if (s.start > cur_hi) {  // the union of the spans: a new busy stretch
        busy_ns += double(cur_hi - cur_lo);
        cur_lo = s.start, cur_hi = s.end;
      } else {
        cur_hi = std::max(cur_hi, s.end);
      }
    }
    busy_ns += double(cur_hi - cur_lo);
    span_ns += double(latest - spans[i].start);
    i = j;
  }
  const double nt = t.tokens;
  t.span_ms = span_ns / nt / 1e6, t.busy_ms = busy_ns / nt / 1e6, t.sum_ms = sum_ns / nt / 1e6;
  for (const auto& [name, a] : acc)
    t.rows.push_back(
        {name, a.n / nt, a.busy_ns / nt / 1e3, a.busy_ns / a.n / 1e3, a.gaps ? a.gap_ns / a.gaps / 1e3 : 0});
  std::stable_sort(t.rows.begin(), t.rows.end(),
                   [](const TimelineRow& a, const TimelineRow& b) { return a.busy_us > b.busy_us; });
  return t;
}

#if defined(HKV_HAVE_CUPTI)

namespace {

std::mutex g_mu;
std::vector<KernelSpan> g_spans;
bool g_active = false;

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  throw std::runtime_error(std::string("timeline: ") + what + ": " + (msg ? msg : "CUPTI error"));
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = size_t(8) << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS)
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      g_spans.push_back({short_kernel_name(k->name ? k->name : "?"), k->start, k->end});
    }
  std::free(buffer);
}

}  // namespace

bool KernelTrace::available() { return true; }

void KernelTrace::begin() {
  if (g_active) throw std::logic_error("timeline: a trace is already running");
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_spans.clear();
  }
  static bool registered = false;
  if (!registered) {
    check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
    registered = true;
  }
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable");
  g_active = true;
}

std::vector<KernelSpan> KernelTrace::end() {
  if (!g_active) throw std::logic_error("timeline: no trace is running");
  cudaDeviceSynchronize();
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  check(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityDisable");
  g_active = false;
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<KernelSpan> out;
  out.swap(g_spans);
  return out;
}

#else

bool KernelTrace::available() { return false; }
void KernelTrace::begin() { throw std::runtime_error("timeline: this hkv was built without CUPTI"); }
std::vector<KernelSpan> KernelTrace::end() { return {}; }

#endif

}  // namespace hkv
