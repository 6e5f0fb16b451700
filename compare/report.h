// The gate's reports: a terminal table, JSON for machines, Markdown for issues, an HTML page with plots.
#pragma once

#include <string>

#include "compare/gate.h"

namespace hkv {

std::string gate_table(const GateReport& g);  // for the terminal
// The (format, depth) rows that were scored and those skipped, and the two as a phrase ("4 ... scored, 8 skipped").
std::pair<int64_t, int64_t> gate_scored_skipped(const GateReport& g);
std::string gate_counts(const GateReport& g);
std::string gate_json(const GateReport& g);  // schema: docs/GATE.md
std::string gate_markdown(const GateReport& g);
std::string gate_html(const GateReport& g);  // self-contained, inline SVG plots

}  // namespace hkv
