#include "compare/format_study.h"

#include <cmath>
#include <cstdio>

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

RoundTripError measure_round_trip(const KvFormat& f, RowKind kind, int rows, int head_dim, uint64_t seed) {
  std::vector<uint8_t> packed(kv_row_bytes(f, head_dim));
  std::vector<float> back(static_cast<size_t>(head_dim));
  double err2 = 0, sig2 = 0, worst = 0;
  std::vector<double> row_worst;
  for (int r = 0; r < rows; r++) {
    std::vector<float> x = seeded_row(kind, seed * 1000003u + uint64_t(r), head_dim);
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
    worst = std::max(worst, rw / std::sqrt(rs / head_dim));
  }
  return {std::sqrt(err2 / sig2), worst};
}

std::string grid_study_markdown(int rows, int head_dim, uint64_t seed) {
  std::string out =
      "| grid | rotation | gaussian RMS | gaussian worst | outliers RMS | outliers worst | near-dup RMS | near-dup "
      "worst |\n"
      "|---|---|---|---|---|---|---|---|\n";
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
    out += "\n";
  };
  for (auto& g : grids)
    for (int rot = 1; rot >= 0; rot--)
      row(KvFormat::parse(std::string("q4h") + (rot ? "" : "-norot") + g[0]), g[1], rot ? "Hadamard-32" : "none",
          " %.4f | %.3f |");
  for (const char* other : {"fp8", "bf16"})
    row(KvFormat::parse(other), std::string(other) + " (reference)", "none", " %.5f | %.4f |");
  return out;
}

}  // namespace hkv
