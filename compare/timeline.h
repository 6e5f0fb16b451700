// Where a decode token's time goes on the card: every kernel's start and end as the card stamped them (CUPTI's
// activity records, the timestamps a timeline profiler shows), grouped by token, with the idle time between
// kernels. `hkv bench --timeline` prints it for each row; nsys is not needed (the lent H200 has none).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hkv {

struct KernelSpan {
  std::string name;     // demangled and shortened (short_kernel_name)
  uint64_t start, end;  // ns, the card's clock
};

// The kernels launched between begin() and end(), from CUPTI's concurrent-kernel activity records (kernels in
// CUDA graphs included). One trace at a time in a process. available() is false where hkv was built without
// CUPTI; begin() then throws.
class KernelTrace {
 public:
  static bool available();
  void begin();
  std::vector<KernelSpan> end();  // synchronizes the device; the spans in start order
};

struct TimelineRow {
  std::string kernel;
  double launches;  // a token
  double busy_us;   // its durations summed, a token
  double mean_us;   // a launch
  double gap_us;    // a launch, on average: its start less the latest end of the token's kernels before it
                    // (negative: it started before they had all ended, as a programmatic dependent launch can)
};

struct TokenTimeline {
  int tokens = 0;
  double span_ms = 0;             // a token: its last kernel's end less its first kernel's start, on average
  double busy_ms = 0;             // a token: the time some kernel of it ran (the union of its kernels' spans)
  double sum_ms = 0;              // a token: its kernels' durations summed (overlaps counted twice)
  std::vector<TimelineRow> rows;  // by busy_us, largest first
};

// Splits spans (in any order) into tokens, each starting where a kernel named `first` starts (a decode token
// starts with the embedding); kernels before the first such start are left out, and so are the first `skip`
// tokens. Throws when no token is left.
TokenTimeline summarize_tokens(std::vector<KernelSpan> spans, const std::string& first, int skip = 0);

// "void hkv::cuda::(anonymous namespace)::attn_chunk_kernel<(hkv::KvKind)2, 6>(hkv::cuda::AttnArgs, int)" ->
// "attn_chunk_kernel<2, 6>"; a name that does not demangle is kept as it is.
std::string short_kernel_name(const std::string& mangled);

}  // namespace hkv
