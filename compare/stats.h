// Statistics of next-token distributions: log-softmax, KL divergence, streaming percentiles.
#pragma once

#include <cstdint>
#include <vector>

namespace hkv {

// log-softmax of one logits row, in float64.
void log_softmax(const float* logits, int64_t n, std::vector<double>& out);

// KL(P || Q) = Σ p_i (log p_i − log q_i), in float64, from two rows of logits.
double kl_divergence(const float* p_logits, const float* q_logits, int64_t n);

// A streaming summary of non-negative values (KL divergences): exact count, mean and max; percentiles
// from a fixed log-spaced histogram, 64 bins a decade from 1e-12 to 1e4 (relative resolution 3.7%), so
// memory does not grow with the number of rows. Values below 1e-12 fall in an underflow bin read as 0.
class StreamingSummary {
 public:
  void add(double x);
  int64_t count() const { return n_; }
  double mean() const { return n_ ? sum_ / double(n_) : 0.0; }
  double max() const { return max_; }
  // The p-quantile (0 <= p <= 1): the geometric centre of the bin holding the ceil(p·n)-th smallest value,
  // clamped to the exact maximum; the n-th smallest is the exact maximum.
  double quantile(double p) const;
  // Histogram for plots: (bin lower edge, count) of the non-empty bins.
  std::vector<std::pair<double, int64_t>> bins() const;

  static constexpr int kPerDecade = 64;
  static constexpr double kLo = 1e-12;
  static constexpr int kDecades = 16;

 private:
  std::vector<int64_t> hist_ = std::vector<int64_t>(kPerDecade * kDecades + 1, 0);  // [0] underflow
  int64_t n_ = 0;
  double sum_ = 0, max_ = 0;
};

}  // namespace hkv
