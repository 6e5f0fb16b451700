#include "compare/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace hkv {

static std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}
static std::string sci(double x) { return x == 0 ? "0" : fmt("%.2e", x); }
// Probes recalled by one side, "4/5"; "-" without probes.
static std::string recalled(const DepthResult& r, bool fmt_side) {
  if (r.probes.empty()) return "-";
  return std::to_string(fmt_side ? r.recalled_fmt : r.recalled_ref) + "/" + std::to_string(r.probes.size());
}
static std::string share(double at) {  // a probe's place: 1/8, 1/2, 7/8, or the share
  for (int den : {2, 4, 8, 16})
    for (int num = 1; num < den; num++)
      if (std::fabs(at * den - num) < 1e-9) return std::to_string(num) + "/" + std::to_string(den);
  return fmt("%g", at);
}
static std::string depth_name(int64_t d) { return d % 1024 == 0 ? std::to_string(d / 1024) + "K" : std::to_string(d); }

// A line for each fixture depth that ran shallower so that its scored rows fit the model's window.
static std::string fitted_note(const GateReport& g) {
  std::set<std::pair<int64_t, int64_t>> seen;
  std::string s;
  for (const auto& r : g.results)
    if (!r.skipped && r.requested_depth && r.requested_depth != r.depth &&
        seen.insert({r.requested_depth, r.depth}).second)
      s += "depth " + std::to_string(r.depth) + " stands for the fixture's " + std::to_string(r.requested_depth) +
           ": its " + std::to_string(r.rows) +
           " scored rows end at the model's last position (max_position_embeddings)\n";
  return s;
}

static bool has_probes(const GateReport& g) {
  for (const auto& r : g.results)
    if (!r.probes.empty()) return true;
  return false;
}

// A line for each result where a side missed a probe: which probes, where, and whether the recall bar failed.
static std::string recall_note(const GateReport& g) {
  std::string s;
  for (const auto& r : g.results) {
    if (r.skipped || r.recalled_ref + r.recalled_fmt == 2 * int(r.probes.size())) continue;
    s += r.format + " at " + depth_name(r.depth) + ": bf16 recalled " + std::to_string(r.recalled_ref) + ", " +
         r.format + " " + std::to_string(r.recalled_fmt) + " of " + std::to_string(r.probes.size()) + " probes" +
         (r.recall_pass ? "" : ", fewer than bf16: FAILS the recall bar") + "; missed:";
    for (const auto& p : r.probes)
      if (!p.ref || !p.fmt)
        s += std::string(" ") + share(p.at) + " (plant " + std::to_string(p.plant) + ", answer " +
             std::to_string(p.answer) + ", by " +
             (!p.ref && !p.fmt ? "both"
              : !p.ref         ? "bf16"
                               : r.format) +
             ")";
    s += "\n";
  }
  return s;
}

std::pair<int64_t, int64_t> gate_scored_skipped(const GateReport& g) {
  int64_t scored = 0, skipped = 0;
  for (const auto& r : g.results) (r.skipped ? skipped : scored)++;
  return {scored, skipped};
}

std::string gate_counts(const GateReport& g) {
  const auto [scored, skipped] = gate_scored_skipped(g);
  return std::to_string(scored) + " format-depth result" + (scored == 1 ? "" : "s") + " scored, " +
         std::to_string(skipped) + " skipped";
}

std::string gate_table(const GateReport& g) {
  std::string s = "gate: fixture " + g.fixture + ", model " + g.model + ", backend " + g.backend + " on " + g.machine +
                  ", hkv " + g.commit + "\n";
  s += "bar: KL mean <= " + fmt("%g", g.bar_kl_mean) + " and worst <= " + fmt("%g", g.bar_kl_max) +
       " at every depth (KL of the bf16 cache's next-token distribution to the format's)\n\n";
  char line[512];
  int w = 8;  // the format column: 8 wide, wider for a longer name
  for (const auto& r : g.results) w = std::max(w, int(r.format.size()));
  std::snprintf(line, sizeof line, "%-*s %6s %5s %10s %10s %10s %10s %10s %10s %7s %9s %9s %8s %7s %6s\n", w, "format",
                "depth", "rows", "KL mean", "KL max", "p99.9", "p99", "p90", "median", "top1", "ppl bf16", "ppl fmt",
                "rec bf16", "rec fmt", "result");
  s += line;
  auto row = [&](const DepthResult& r, bool floor) {
    if (r.skipped) {
      std::snprintf(line, sizeof line, "%-*s %6s  skipped: %s\n", w, r.format.c_str(), depth_name(r.depth).c_str(),
                    r.skip_reason.c_str());
      s += line;
      return;
    }
    std::snprintf(line, sizeof line, "%-*s %6s %5lld %10s %10s %10s %10s %10s %10s %6.2f%% %9.3f %9.3f %8s %7s %6s\n",
                  w, floor ? "floor" : r.format.c_str(), depth_name(r.depth).c_str(), static_cast<long long>(r.rows),
                  sci(r.kl_mean).c_str(), sci(r.kl_max).c_str(), sci(r.p999).c_str(), sci(r.p99).c_str(),
                  sci(r.p90).c_str(), sci(r.p50).c_str(), 100 * r.top1_agree, r.ppl_ref, r.ppl_fmt,
                  recalled(r, false).c_str(), recalled(r, true).c_str(), floor ? "" : (r.pass ? "PASS" : "FAIL"));
    s += line;
  };
  for (const auto& r : g.results) row(r, false);
  for (const auto& r : g.floor) row(r, true);
  const std::string note = fitted_note(g);
  if (!note.empty()) s += "\n" + note;
  if (has_probes(g))
    s += "\nrecall: probes recalled (every answer token the top token, teacher-forced), bf16 and the format; a format\n"
         "        that recalls fewer than bf16 at a depth fails it.\n" +
         recall_note(g);
  s += "\nfloor: the bf16 cache with the contract's fp32 arithmetic against the same with float64 accumulation:\n"
       "       KL below it is rounding, not the cache format.\n";
  size_t ndiff = 0;
  for (const auto& r : g.results) ndiff += r.diffs.size();
  if (ndiff) {
    s += "\ntop-token differences (row: bf16 top / format top, margin in bf16 / margin in format, nats):\n";
    for (const auto& r : g.results)
      for (const auto& d : r.diffs) {
        std::snprintf(line, sizeof line, "  %s depth %s row %lld: %d / %d, %.4f / %.4f\n", r.format.c_str(),
                      depth_name(r.depth).c_str(), static_cast<long long>(d.row), d.ref_top, d.fmt_top, d.ref_margin,
                      d.fmt_margin);
        s += line;
      }
  }
  const char* verdict = gate_scored_skipped(g).first == 0 ? "NO VERDICT" : g.pass ? "PASS" : "FAIL";
  s += std::string("\ngate: ") + verdict + " (" + gate_counts(g) + ")\n";
  return s;
}

static nlohmann::json depth_json(const DepthResult& r) {
  nlohmann::json j = {{"depth", r.depth}, {"format", r.format}, {"skipped", r.skipped}};
  if (r.requested_depth && r.requested_depth != r.depth) j["requested_depth"] = r.requested_depth;
  if (r.skipped) {
    j["skip_reason"] = r.skip_reason;
    return j;
  }
  j["rows"] = r.rows;
  j["kl"] = {{"mean", r.kl_mean}, {"max", r.kl_max}, {"p99_9", r.p999},
             {"p99", r.p99},      {"p90", r.p90},    {"median", r.p50}};
  j["top1_agreement"] = r.top1_agree;
  j["perplexity"] = {{"bf16", r.ppl_ref}, {"format", r.ppl_fmt}};
  j["passphrase_recalled"] = {{"bf16", r.recall_ref < 0 ? nlohmann::json() : nlohmann::json(r.recall_ref == 1)},
                              {"format", r.recall_fmt < 0 ? nlohmann::json() : nlohmann::json(r.recall_fmt == 1)}};
  nlohmann::json probes = nlohmann::json::array();
  for (const auto& p : r.probes)
    probes.push_back({{"at", p.at}, {"plant", p.plant}, {"answer", p.answer}, {"bf16", p.ref}, {"format", p.fmt}});
  j["recall"] = {{"probes", r.probes.size()},
                 {"bf16", r.recalled_ref},
                 {"format", r.recalled_fmt},
                 {"pass", r.recall_pass},
                 {"each", probes}};
  nlohmann::json diffs = nlohmann::json::array();
  for (const auto& d : r.diffs)
    diffs.push_back({{"row", d.row},
                     {"bf16_top", d.ref_top},
                     {"format_top", d.fmt_top},
                     {"bf16_margin", d.ref_margin},
                     {"format_margin", d.fmt_margin}});
  j["top1_differences"] = diffs;
  nlohmann::json hist = nlohmann::json::array();
  for (const auto& [edge, n] : r.histogram) hist.push_back({edge, n});
  j["kl_histogram"] = hist;
  j["pass"] = r.pass;
  j["seconds"] = r.seconds;
  return j;
}

std::string gate_json(const GateReport& g) {
  nlohmann::json j;
  j["schema"] = "hkv-gate-1";
  j["fixture"] = g.fixture;
  j["model"] = g.model;
  j["backend"] = g.backend;
  j["machine"] = g.machine;
  j["commit"] = g.commit;
  j["date"] = g.date;
  j["bars"] = {{"kl_mean", g.bar_kl_mean}, {"kl_max", g.bar_kl_max}};
  j["results"] = nlohmann::json::array();
  for (const auto& r : g.results) j["results"].push_back(depth_json(r));
  j["noise_floor"] = nlohmann::json::array();
  for (const auto& r : g.floor) j["noise_floor"].push_back(depth_json(r));
  const auto [scored, skipped] = gate_scored_skipped(g);
  j["rows_scored"] = scored;
  j["rows_skipped"] = skipped;
  j["pass"] = g.pass;
  return j.dump(2) + "\n";
}

std::string gate_markdown(const GateReport& g) {
  std::string s = "### hkv gate: " + std::string(g.pass ? "PASS" : "FAIL") + "\n\n";
  s += "Fixture `" + g.fixture + "`, model `" + g.model + "`, backend " + g.backend + " on " + g.machine + ", hkv " +
       g.commit + ", " + g.date + ". Bar: KL mean ≤ " + fmt("%g", g.bar_kl_mean) + ", worst ≤ " +
       fmt("%g", g.bar_kl_max) + ".\n\n";
  s += "| format | depth | rows | KL mean | KL max | p99.9 | p99 | p90 | median | top-1 agree | ppl bf16 | ppl fmt | "
       "recalled bf16 | recalled fmt | result |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  auto row = [&](const DepthResult& r, const std::string& name, bool floor) {
    if (r.skipped) {
      s += "| " + name + " | " + depth_name(r.depth) + " | skipped: " + r.skip_reason + " ||||||||||||\n";
      return;
    }
    s += "| " + name + " | " + depth_name(r.depth) + " | " + std::to_string(r.rows) + " | " + sci(r.kl_mean) + " | " +
         sci(r.kl_max) + " | " + sci(r.p999) + " | " + sci(r.p99) + " | " + sci(r.p90) + " | " + sci(r.p50) + " | " +
         fmt("%.2f%%", 100 * r.top1_agree) + " | " + fmt("%.3f", r.ppl_ref) + " | " + fmt("%.3f", r.ppl_fmt) + " | " +
         recalled(r, false) + " | " + recalled(r, true) + " | " +
         (floor    ? "noise floor"
          : r.pass ? "PASS"
                   : "**FAIL**") +
         " |\n";
  };
  for (const auto& r : g.results) row(r, r.format, false);
  for (const auto& r : g.floor) row(r, "fp32 vs f64", true);
  const std::string note = fitted_note(g);
  if (!note.empty()) s += "\n" + note;
  if (has_probes(g))
    s += "\nRecall: probes recalled (every answer token the top token, teacher-forced); a format that recalls fewer "
         "than bf16 at a depth fails it.\n";
  const std::string missed = recall_note(g);
  if (!missed.empty()) s += "\n" + missed;
  size_t ndiff = 0;
  for (const auto& r : g.results) ndiff += r.diffs.size();
  s += "\nTop-token differences: " + std::to_string(ndiff) + ".\n";
  if (ndiff) {
    s += "\n| format | depth | row | bf16 top | format top | bf16 margin | format margin "
         "|\n|---|---|---|---|---|---|---|\n";
    for (const auto& r : g.results)
      for (const auto& d : r.diffs)
        s += "| " + r.format + " | " + depth_name(r.depth) + " | " + std::to_string(d.row) + " | " +
             std::to_string(d.ref_top) + " | " + std::to_string(d.fmt_top) + " | " + fmt("%.4f", d.ref_margin) + " | " +
             fmt("%.4f", d.fmt_margin) + " |\n";
  }
  return s;
}

// ---- HTML with inline SVG --------------------------------------------------------------------------

namespace {

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};

struct Plot {
  double w = 640, h = 320, left = 70, right = 20, top = 20, bottom = 50;
  double x0, x1, y0, y1;  // data ranges (log10 where log is used)
  std::string svg;
  double X(double x) const { return left + (x - x0) / (x1 - x0) * (w - left - right); }
  double Y(double y) const { return h - bottom - (y - y0) / (y1 - y0) * (h - top - bottom); }
  void begin(const std::string& xlabel, const std::string& ylabel) {
    svg = "<svg xmlns='http://www.w3.org/2000/svg' width='" + fmt("%.0f", w) + "' height='" + fmt("%.0f", h) +
          "' font-family='sans-serif' font-size='12'>";
    svg += "<rect x='" + fmt("%.0f", left) + "' y='" + fmt("%.0f", top) + "' width='" + fmt("%.0f", w - left - right) +
           "' height='" + fmt("%.0f", h - top - bottom) + "' fill='#fafafa' stroke='#999'/>";
    svg += "<text x='" + fmt("%.0f", (w + left) / 2) + "' y='" + fmt("%.0f", h - 8) + "' text-anchor='middle'>" +
           xlabel + "</text>";
    svg += "<text transform='translate(14," + fmt("%.0f", (h - bottom + top) / 2) +
           ") rotate(-90)' text-anchor='middle'>" + ylabel + "</text>";
  }
  void line(double xa, double ya, double xb, double yb, const std::string& style) {
    svg += "<line x1='" + fmt("%.1f", X(xa)) + "' y1='" + fmt("%.1f", Y(ya)) + "' x2='" + fmt("%.1f", X(xb)) +
           "' y2='" + fmt("%.1f", Y(yb)) + "' " + style + "/>";
  }
  void text(double px, double py, const std::string& t, const std::string& anchor = "middle") {
    svg +=
        "<text x='" + fmt("%.1f", px) + "' y='" + fmt("%.1f", py) + "' text-anchor='" + anchor + "'>" + t + "</text>";
  }
  void yticks_log() {
    for (int e = int(std::ceil(y0)); e <= int(std::floor(y1)); e++) {
      line(x0, e, x1, e, "stroke='#ddd'");
      text(left - 6, Y(e) + 4, "1e" + std::to_string(e), "end");
    }
  }
};

std::string kl_by_depth(const GateReport& g) {
  std::map<std::string, std::vector<const DepthResult*>> by_fmt;
  std::set<int64_t> depths;
  for (const auto& r : g.results)
    if (!r.skipped) by_fmt[r.format].push_back(&r), depths.insert(r.depth);
  for (const auto& r : g.floor) by_fmt["noise floor"].push_back(&r), depths.insert(r.depth);
  if (depths.empty()) return "<p>No depth ran.</p>";
  Plot p;
  p.x0 = std::log2(double(*depths.begin())) - 0.5;
  p.x1 = std::log2(double(*depths.rbegin())) + 0.5;
  double lo = std::log10(g.bar_kl_mean), hi = std::log10(g.bar_kl_max);
  for (auto& [f, v] : by_fmt)
    for (auto* r : v) {
      if (r->kl_mean > 0) lo = std::min(lo, std::log10(r->kl_mean));
      if (r->kl_max > 0) hi = std::max(hi, std::log10(r->kl_max));
    }
  p.y0 = std::floor(lo) - 0.2;
  p.y1 = std::ceil(hi) + 0.2;
  p.begin("depth (tokens, log scale)", "KL divergence (log scale)");
  p.yticks_log();
  for (int64_t d : depths) p.text(p.X(std::log2(double(d))), p.h - p.bottom + 16, depth_name(d));
  p.line(p.x0, std::log10(g.bar_kl_mean), p.x1, std::log10(g.bar_kl_mean), "stroke='#555' stroke-dasharray='6,4'");
  p.line(p.x0, std::log10(g.bar_kl_max), p.x1, std::log10(g.bar_kl_max), "stroke='#555' stroke-dasharray='2,3'");
  p.text(p.X(p.x1) - 4, p.Y(std::log10(g.bar_kl_mean)) - 4, "bar: mean", "end");
  p.text(p.X(p.x1) - 4, p.Y(std::log10(g.bar_kl_max)) - 4, "bar: worst", "end");
  int ci = 0;
  std::string legend;
  for (auto& [f, v] : by_fmt) {
    const std::string c = kColors[ci++ % 6];
    for (int which = 0; which < 2; which++) {
      std::string pts;
      for (auto* r : v) {
        double y = which == 0 ? r->kl_mean : r->kl_max;
        if (y <= 0) continue;
        double px = p.X(std::log2(double(r->depth))), py = p.Y(std::log10(y));
        pts += fmt("%.1f,", px) + fmt("%.1f ", py);
        p.svg += "<circle cx='" + fmt("%.1f", px) + "' cy='" + fmt("%.1f", py) + "' r='3.5' fill='" +
                 (which == 0 ? c : std::string("white")) + "' stroke='" + c + "'><title>" + f + " depth " +
                 depth_name(r->depth) + (which == 0 ? " mean " : " max ") + sci(y) + "</title></circle>";
      }
      p.svg += "<polyline points='" + pts + "' fill='none' stroke='" + c + "'" +
               (which == 1 ? " stroke-dasharray='3,3'" : "") + "/>";
    }
    legend += "<span style='color:" + c + "'>&#9679; " + f + "</span> ";
  }
  p.svg += "</svg>";
  return p.svg + "<p class='legend'>" + legend + " — filled: mean, hollow and dashed: worst row.</p>";
}

std::string kl_distribution(const GateReport& g) {
  // The summary's bins are 1/64 of a decade; plotted in eighths of a decade so that 256 rows show a shape.
  const int per_decade = 8;
  std::string out;
  for (const auto& r : g.results) {
    if (r.skipped || r.histogram.empty()) continue;
    std::map<int, int64_t> bins;  // floor(log10(edge) · 8) -> rows
    int64_t zeros = 0;
    for (auto& [e, n] : r.histogram) {
      if (e <= 0)
        zeros += n;
      else
        bins[int(std::floor(std::log10(e) * per_decade + 1e-9))] += n;
    }
    if (bins.empty()) continue;
    Plot p;
    p.h = 200;
    int64_t top = 1;
    for (auto& [b, n] : bins) top = std::max(top, n);
    p.x0 = std::floor(double(bins.begin()->first) / per_decade);
    p.x1 = std::ceil(double(bins.rbegin()->first + 1) / per_decade);
    p.y0 = 0;
    p.y1 = double(top) * 1.1;
    p.begin("KL of a row (log scale)", "rows");
    for (int e = int(p.x0); e <= int(p.x1); e++) p.text(p.X(e), p.h - p.bottom + 16, "1e" + std::to_string(e));
    for (int i = 0; i <= 2; i++)
      p.text(p.left - 6, p.Y(p.y1 * i / 2.2) + 4, std::to_string(int64_t(p.y1 * i / 2.2)), "end");
    for (auto& [b, n] : bins) {
      double xa = p.X(double(b) / per_decade), xb = p.X(double(b + 1) / per_decade);
      p.svg += "<rect x='" + fmt("%.1f", xa + 0.5) + "' y='" + fmt("%.1f", p.Y(double(n))) + "' width='" +
               fmt("%.1f", std::max(1.0, xb - xa - 1)) + "' height='" + fmt("%.1f", p.Y(0) - p.Y(double(n))) +
               "' fill='#1f77b4'><title>" + sci(std::pow(10.0, double(b) / per_decade)) + "–" +
               sci(std::pow(10.0, double(b + 1) / per_decade)) + ": " + std::to_string(n) + " rows</title></rect>";
    }
    p.svg += "</svg>";
    out += "<h3>" + r.format + " at depth " + depth_name(r.depth) + "</h3>" + p.svg +
           (zeros ? "<p>" + std::to_string(zeros) + " rows with KL below 1e-12.</p>" : "");
  }
  return out.empty() ? "<p>No KL values.</p>" : out;
}

std::string top_diffs(const GateReport& g) {
  std::vector<std::pair<const DepthResult*, const TopDiff*>> all;
  for (const auto& r : g.results)
    for (const auto& d : r.diffs) all.emplace_back(&r, &d);
  if (all.empty()) return "<p>None: every scored row has the same top token with each cache.</p>";
  Plot p;
  p.h = 360;
  double m = 1e-6;
  for (auto& [r, d] : all) m = std::max({m, d->ref_margin, d->fmt_margin});
  p.x0 = 0;
  p.x1 = m * 1.1;
  p.y0 = 0;
  p.y1 = m * 1.1;
  p.begin("margin of the bf16 top token in the bf16 run (nats)", "margin of the format's top token (nats)");
  for (int i = 0; i <= 4; i++) {
    double v = p.x1 * i / 4;
    p.text(p.X(v), p.h - p.bottom + 16, fmt("%.3g", v));
    p.text(p.left - 6, p.Y(v) + 4, fmt("%.3g", v), "end");
  }
  std::string rows;
  for (auto& [r, d] : all) {
    p.svg += "<circle cx='" + fmt("%.1f", p.X(d->ref_margin)) + "' cy='" + fmt("%.1f", p.Y(d->fmt_margin)) +
             "' r='4' fill='#d62728' fill-opacity='0.6'><title>" + r->format + " depth " + depth_name(r->depth) +
             " row " + std::to_string(d->row) + "</title></circle>";
    rows += "<tr><td>" + r->format + "</td><td>" + depth_name(r->depth) + "</td><td>" + std::to_string(d->row) +
            "</td><td>" + std::to_string(d->ref_top) + "</td><td>" + std::to_string(d->fmt_top) + "</td><td>" +
            fmt("%.4f", d->ref_margin) + "</td><td>" + fmt("%.4f", d->fmt_margin) + "</td></tr>";
  }
  p.svg += "</svg>";
  return p.svg +
         "<p>Each point is a row whose top token differs. Points near the origin are near-ties; a point far "
         "from it is a real disagreement.</p><table><tr><th>format</th><th>depth</th><th>row</th><th>bf16 top</th>"
         "<th>format top</th><th>bf16 margin</th><th>format margin</th></tr>" +
         rows + "</table>";
}

}  // namespace

std::string gate_html(const GateReport& g) {
  std::string md = gate_markdown(g);
  std::string table;
  table +=
      "<table><tr><th>format</th><th>depth</th><th>rows</th><th>KL mean</th><th>KL max</th><th>p99.9</th><th>p99</th>"
      "<th>p90</th><th>median</th><th>top-1 agree</th><th>ppl bf16</th><th>ppl "
      "fmt</th><th>recalled bf16 / fmt</th><th>result</th></tr>";
  auto row = [&](const DepthResult& r, const std::string& name, bool floor) {
    if (r.skipped) {
      table += "<tr><td>" + name + "</td><td>" + depth_name(r.depth) +
               "</td><td colspan='12'>skipped: " + r.skip_reason + "</td></tr>";
      return;
    }
    std::string res = floor ? "noise floor" : r.pass ? "<b class='pass'>PASS</b>" : "<b class='fail'>FAIL</b>";
    table += "<tr><td>" + name + "</td><td>" + depth_name(r.depth) + "</td><td>" + std::to_string(r.rows) +
             "</td><td>" + sci(r.kl_mean) + "</td><td>" + sci(r.kl_max) + "</td><td>" + sci(r.p999) + "</td><td>" +
             sci(r.p99) + "</td><td>" + sci(r.p90) + "</td><td>" + sci(r.p50) + "</td><td>" +
             fmt("%.2f%%", 100 * r.top1_agree) + "</td><td>" + fmt("%.3f", r.ppl_ref) + "</td><td>" +
             fmt("%.3f", r.ppl_fmt) + "</td><td>" + recalled(r, false) + " / " + recalled(r, true) + "</td><td>" + res +
             "</td></tr>";
  };
  for (const auto& r : g.results) row(r, r.format, false);
  for (const auto& r : g.floor) row(r, "fp32 vs f64 (bf16)", true);
  table += "</table>";
  const std::string note = fitted_note(g) + recall_note(g);
  if (!note.empty()) table += "<p class='legend'>" + note + "</p>";
  (void)md;
  return std::string("<!doctype html><html><head><meta charset='utf-8'><title>hkv gate: ") + g.fixture +
         "</title><style>body{font-family:sans-serif;max-width:980px;margin:2em auto;color:#222}"
         "table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px "
         "7px;text-align:right}"
         "th{background:#f0f0f0}.pass{color:#2a7d2a}.fail{color:#c0392b}.legend{font-size:13px}h1 "
         "small{font-weight:normal;color:#666}"
         "</style></head><body><h1>hkv gate: " +
         (g.pass ? "<span class='pass'>PASS</span>" : "<span class='fail'>FAIL</span>") + " <small>" + g.fixture +
         "</small></h1>" + "<p>Model <code>" + g.model + "</code>, backend " + g.backend + " on " + g.machine +
         ", hkv " + g.commit + ", " + g.date +
         ". Each cache format against the bf16 cache, teacher-forced; rows scored from each depth. Bar: KL mean &le; " +
         fmt("%g", g.bar_kl_mean) + " and worst row &le; " + fmt("%g", g.bar_kl_max) +
         ". The noise floor is the bf16 cache with the contract's fp32 arithmetic against float64 accumulation: KL "
         "at that level is rounding, not the format.</p>" +
         table + "<h2>KL by depth</h2>" + kl_by_depth(g) + "<h2>Distribution of KL over the scored rows</h2>" +
         kl_distribution(g) + "<h2>Top-token differences</h2>" + top_diffs(g) + "</body></html>\n";
}

}  // namespace hkv
