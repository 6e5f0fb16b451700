#include "compare/stats.h"

#include <algorithm>
#include <cmath>

namespace hkv {

void log_softmax(const float* logits, int64_t n, std::vector<double>& out) {
  out.resize(size_t(n));
  double m = -INFINITY;
  for (int64_t i = 0; i < n; i++) m = std::max(m, double(logits[i]));
  double z = 0;
  for (int64_t i = 0; i < n; i++) z += std::exp(double(logits[i]) - m);
  const double lz = m + std::log(z);
  for (int64_t i = 0; i < n; i++) out[size_t(i)] = double(logits[i]) - lz;
}

double kl_divergence(const float* p_logits, const float* q_logits, int64_t n) {
  std::vector<double> lp, lq;
  log_softmax(p_logits, n, lp);
  log_softmax(q_logits, n, lq);
  double kl = 0;
  for (int64_t i = 0; i < n; i++) kl += std::exp(lp[size_t(i)]) * (lp[size_t(i)] - lq[size_t(i)]);
  return std::max(kl, 0.0);  // rounding can leave a tiny negative for identical rows
}

void StreamingSummary::add(double x) {
  n_++;
  sum_ += x;
  max_ = std::max(max_, x);
  int bin = 0;
  if (x >= kLo) {
    bin = 1 + int(std::floor(std::log10(x / kLo) * kPerDecade));
    bin = std::min(bin, int(hist_.size()) - 1);
  }
  hist_[size_t(bin)]++;
}

double StreamingSummary::quantile(double p) const {
  if (n_ == 0) return 0.0;
  int64_t rank = std::max<int64_t>(1, int64_t(std::ceil(p * double(n_))));
  if (rank >= n_) return max_;  // the largest value is known exactly
  int64_t seen = 0;
  for (size_t b = 0; b < hist_.size(); b++) {
    seen += hist_[b];
    if (seen >= rank) {
      if (b == 0) return 0.0;
      double centre = kLo * std::pow(10.0, (double(b) - 0.5) / kPerDecade);
      return std::min(centre, max_);
    }
  }
  return max_;
}

std::vector<std::pair<double, int64_t>> StreamingSummary::bins() const {
  std::vector<std::pair<double, int64_t>> out;
  for (size_t b = 0; b < hist_.size(); b++)
    if (hist_[b]) out.emplace_back(b == 0 ? 0.0 : kLo * std::pow(10.0, double(b - 1) / kPerDecade), hist_[b]);
  return out;
}

}  // namespace hkv
