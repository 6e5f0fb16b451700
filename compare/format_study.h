// Measurements of the cache formats: the grid study behind docs/FORMAT.md, and seeded test rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/kvformat.h"
#include "reference/model.h"

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

// Realistic rows: the K and V rows a model's full-attention layers store for some tokens, taken from an f32 cache
// (the values before any format), every layer, position and KV head in that order: [rows][head_dim] each.
struct CacheRows {
  int head_dim = 0;
  std::vector<float> k, v;
};
CacheRows model_cache_rows(const Model& m, const std::vector<int32_t>& tokens);
// Packs and unpacks each of the rows ([n][head_dim]), returns the error over all of them.
RoundTripError measure_round_trip_rows(const KvFormat& f, const std::vector<float>& rows, int head_dim);

// The table of docs/FORMAT.md: each grid × rotation × row kind, then the ablations at q4h's bytes (the searched
// scale, the Normal grid, seeded signs), as Markdown. With `model` rows, two more columns each: their K and V rows.
std::string grid_study_markdown(int rows, int head_dim, uint64_t seed, const CacheRows* model = nullptr);

}  // namespace hkv
