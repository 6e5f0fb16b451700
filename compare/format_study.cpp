#include "compare/format_study.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

#include "reference/synthetic.h"

namespace hkv {

const char* row_kind_name(RowKind k) {
  switch (k) {
    case RowKind::Gaussian:
      return "gaussian";
    case RowKind::Outliers:
      return "outliers";
    case RowKind::NearDuplicate:
      return "near-duplicate";
  }
  return "?";
}

// Box–Muller over the counter-based generator (double precision; the study is not an exact path).
static double gauss(uint64_t seed, uint64_t stream, uint64_t i) {
  uint64_t a = synth_bits(seed, stream, 2 * i), b = synth_bits(seed, stream, 2 * i + 1);
  double u1 = (double(a >> 11) + 0.5) / 9007199254740992.0, u2 = double(b >> 11) / 9007199254740992.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

std::vector<float> seeded_row(RowKind kind, uint64_t seed, int head_dim) {
  std::vector<float> x(static_cast<size_t>(head_dim));
  for (int d = 0; d < head_dim; d++) x[size_t(d)] = float(gauss(seed, 1, uint64_t(d)));
  if (kind == RowKind::Outliers)
    for (int i = 0; i < 4; i++) x[size_t((i * 37 + 5) % head_dim)] *= 20.0f;
  if (kind == RowKind::NearDuplicate) {
    // a base key shared by all seeds, plus small per-seed noise
    for (int d = 0; d < head_dim; d++) x[size_t(d)] = float(gauss(7, 2, uint64_t(d)) + 0.05 * double(x[size_t(d)]));
  }
  return x;
}

CacheRows model_cache_rows(const Model& m, const std::vector<int32_t>& tokens) {
  SequenceState s = new_sequence(m.config, KvFormat::f32(), int64_t(tokens.size()));
  ForwardOptions opt;
  opt.want_logits = false;
  forward(m, s, tokens, opt);
  CacheRows r;
  r.head_dim = m.config.head_dim;
  const size_t n = tokens.size() * size_t(m.config.num_key_value_heads) * size_t(r.head_dim);  // values a layer
  r.k.resize(n * s.k_cache.size());
  r.v.resize(n * s.v_cache.size());
  for (size_t l = 0; l < s.k_cache.size(); l++) {  // an f32 row is its head_dim values as they are
    std::memcpy(r.k.data() + l * n, s.k_cache[l].data(), n * 4);
    std::memcpy(r.v.data() + l * n, s.v_cache[l].data(), n * 4);
  }
  return r;
}

// The error of packing and unpacking each row, over all of them (RoundTripError's definitions).
static RoundTripError round_trip(const KvFormat& f, int rows, int head_dim,
                                 const std::function<std::vector<float>(int)>& row) {
  std::vector<uint8_t> packed(kv_row_bytes(f, head_dim));
  std::vector<float> back(static_cast<size_t>(head_dim));
  double err2 = 0, sig2 = 0, worst = 0;
  for (int r = 0; r < rows; r++) {
    const std::vector<float> x = row(r);
    kv_pack_row(f, x.data(), head_dim, packed.data());
    kv_unpack_row(f, packed.data(), head_dim, back.data());
    double rs = 0, rw = 0;
    for (int d = 0; d < head_dim; d++) {
      double e = double(back[size_t(d)]) - double(x[size_t(d)]);
      err2 += e * e;
      rs += double(x[size_t(d)]) * double(x[size_t(d)]);
      rw = std::max(rw, std::fabs(e));
    }
    sig2 += rs;
    if (rs > 0) worst = std::max(worst, rw / std::sqrt(rs / head_dim));
  }
  return {sig2 > 0 ? std::sqrt(err2 / sig2) : 0.0, worst};
}

RoundTripError measure_round_trip(const KvFormat& f, RowKind kind, int rows, int head_dim, uint64_t seed) {
  return round_trip(f, rows, head_dim,
                    [&](int r) { return seeded_row(kind, seed * 1000003u + uint64_t(r), head_dim); });
}

RoundTripError measure_round_trip_rows(const KvFormat& f, const std::vector<float>& rows, int head_dim) {
  return round_trip(f, int(rows.size() / size_t(head_dim)), head_dim, [&](int r) {
    return std::vector<float>(rows.begin() + ptrdiff_t(r) * head_dim, rows.begin() + ptrdiff_t(r + 1) * head_dim);
  });
}

std::string grid_study_markdown(int rows, int head_dim, uint64_t seed, const CacheRows* model) {
  std::string out =
      "| grid | rotation | gaussian RMS | gaussian worst | outliers RMS | outliers worst | near-dup RMS | near-dup "
      "worst |";
  out += model
             ? " model K RMS | model K worst | model V RMS | model V worst |\n|---|---|---|---|---|---|---|---|---|---|"
               "---|---|\n"
             : "\n|---|---|---|---|---|---|---|---|\n";
  const char* grids[3][2] = {
      {"", "q4_0-style −8..7 (q4h)"}, {"-sym", "symmetric absmax −7..7"}, {"-mid", "midpoint, 16 levels, no zero"}};
  // one table row: a format's error on each kind of row
  auto row = [&](const KvFormat& f, const std::string& label, const char* rotation, const char* cell) {
    char line[256];
    std::snprintf(line, sizeof line, "| %s | %s |", label.c_str(), rotation);
    out += line;
    for (RowKind k : {RowKind::Gaussian, RowKind::Outliers, RowKind::NearDuplicate}) {
      RoundTripError e = measure_round_trip(f, k, rows, head_dim, seed);
      std::snprintf(line, sizeof line, cell, e.rms, e.worst);
      out += line;
    }
    for (const std::vector<float>* m : {model ? &model->k : nullptr, model ? &model->v : nullptr})
      if (m) {
        RoundTripError e = measure_round_trip_rows(f, *m, head_dim);
        std::snprintf(line, sizeof line, cell, e.rms, e.worst);
        out += line;
      }
    out += "\n";
  };
  for (auto& g : grids)
    for (int rot = 1; rot >= 0; rot--)
      row(KvFormat::parse(std::string("q4h") + (rot ? "" : "-norot") + g[0]), g[1], rot ? "Hadamard-32" : "none",
          " %.4f | %.3f |");
  // the oracle's ablations at q4h's bytes (kvformat.h)
  const char* ablations[][3] = {{"q4h-max", "q4_0-style, the scale from the extreme (q4h-max)", "Hadamard-32"},
                                {"q4h-nf", "Normal, 16 Lloyd–Max levels (q4h-nf)", "Hadamard-32"},
                                {"q4h-nf-max", "Normal, the scale from the extreme (q4h-nf-max)", "Hadamard-32"},
                                {"q4h-seed", "q4_0-style, seeded signs (q4h-seed)", "S·H·S"}};
  for (auto& a : ablations) row(KvFormat::parse(a[0]), a[1], a[2], " %.4f | %.3f |");
  for (const char* other : {"fp8", "bf16"})
    row(KvFormat::parse(other), std::string(other) + " (reference)", "none", " %.5f | %.4f |");
  return out;
}

}  // namespace hkv
