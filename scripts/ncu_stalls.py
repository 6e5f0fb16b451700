#!/usr/bin/env python3
"""Summarises ncu CSV output (details page, one row per metric and launch) as one line per kernel and grid:
time, issue activity, occupancy, DRAM throughput and the largest warp stall reasons. Used by
cuda/profile_stalls.sh; launches of the same kernel and grid are averaged.

usage: scripts/ncu_stalls.py FILE.csv [FILE.csv ...]
"""
import collections
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_by_kernel import base_name  # noqa: E402


def with_args(full):
    """The kernel's name with its template arguments: one template serves several shapes (the matvec's rows
    a warp and chunks a round, the attention's format, heads and staging), and they stall differently."""
    s = full.replace("(anonymous namespace)", "").replace("<unnamed>", "").replace("unnamed>", "")
    name = base_name(full)
    i = s.find(name + "<")
    if i < 0:
        return name
    depth = 0
    for j in range(i + len(name), len(s)):
        depth += {"<": 1, ">": -1}.get(s[j], 0)
        if depth == 0:
            return s[i:j + 1]
    return name

STALL = "smsp__average_warps_issue_stalled_"
SCALE_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}


def number(text):
    return float(text.replace(",", "")) if text not in ("", "n/a") else float("nan")


def launches(path):
    """{launch id: (kernel, grid, {metric: value})} from one ncu --csv file."""
    rows = [r for r in csv.reader(open(path, encoding="utf-8", errors="replace")) if len(r) > 5]
    if not rows:
        return {}
    head = rows[0]
    col = {name: head.index(name) for name in head}
    need = ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")
    missing = [n for n in need if n not in col]
    if missing:
        sys.exit(f"{path}: no column {missing[0]!r} in the ncu CSV header")
    out = {}
    for r in rows[1:]:
        kernel = with_args(r[col["Kernel Name"]])
        grid = r[col["Grid Size"]] if "Grid Size" in col else "?"
        name, unit, value = r[col["Metric Name"]], r[col["Metric Unit"]], number(r[col["Metric Value"]])
        if name == "gpu__time_duration.sum":
            value *= SCALE_US.get(unit, float("nan"))
        out.setdefault(r[col["ID"]], (kernel, grid, {}))[2][name] = value
    return out


def main(paths):
    groups = collections.OrderedDict()
    for path in paths:
        for kernel, grid, m in launches(path).values():
            groups.setdefault((kernel, grid), []).append(m)
    print("| kernel | grid | launches | us | issue active % | warps active % | DRAM % | top stalls (warps per issue) |")
    print("|---|---|---|---|---|---|---|---|")
    for (kernel, grid), ms in groups.items():
        keys = {k for m in ms for k in m}
        mean = {k: sum(m[k] for m in ms if k in m) / sum(1 for m in ms if k in m) for k in keys}
        stalls = sorted(((v, k[len(STALL):].replace("_per_issue_active.ratio", ""))
                         for k, v in mean.items() if k.startswith(STALL)), reverse=True)[:4]
        print(f"| {kernel[-60:]} | {grid} | {len(ms)} | {mean.get('gpu__time_duration.sum', float('nan')):.1f} | "
              f"{mean.get('smsp__issue_active.avg.pct_of_peak_sustained_active', float('nan')):.0f} | "
              f"{mean.get('sm__warps_active.avg.pct_of_peak_sustained_active', float('nan')):.0f} | "
              f"{mean.get('dram__throughput.avg.pct_of_peak_sustained_elapsed', float('nan')):.0f} | "
              + ", ".join(f"{name} {v:.2f}" for v, name in stalls) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
