// Measurements of the cache formats: the grid study behind docs/FORMAT.md, and seeded test rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/kvformat.h"

namespace hkv {

enum class RowKind { Gaussian, Outliers, NearDuplicate };
const char* row_kind_name(RowKind k);

// A seeded row of head_dim values: Gaussian (std 1); Gaussian with 4 outlier channels at fixed indices
// (×20, as K rows after a k_norm with large weights); or a near-duplicate of a base key (base + 0.05·noise).
std::vector<float> seeded_row(RowKind kind, uint64_t seed, int head_dim);

struct RoundTripError {
  double rms = 0;    // sqrt(mean((x̂ − x)²)) / sqrt(mean(x²)): relative RMS error
  double worst = 0;  // max |x̂ − x| / sqrt(mean(x²)): worst element, relative to the row's RMS
};

// Packs and unpacks `rows` seeded rows, returns the error over all of them.
RoundTripError measure_round_trip(const KvFormat& f, RowKind kind, int rows, int head_dim, uint64_t seed);

// The table of docs/FORMAT.md: each grid × rotation × row kind, as Markdown.
std::string grid_study_markdown(int rows, int head_dim, uint64_t seed);

}  // namespace hkv
