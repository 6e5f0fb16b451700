#!/usr/bin/env python3
"""Sums ncu's gpu__time_duration by kernel from its CSV (details page, one row per launch and metric).

usage: scripts/ncu_by_kernel.py FILE.csv [--per KERNEL] [--what WORDS]
  --per KERNEL  divide by the number of launches of KERNEL (e.g. embed_kernel: one a decode token)
  --what WORDS  how the total is named in the first line (default "the profiled run")
Prints the total, then a table: kernel, launches, ms, share. Used by cuda/profile_token.sh and
cuda/profile_prefill.sh.
"""
import argparse
import collections
import csv
import sys

SCALE_MS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0, "second": 1e3}


def base_name(full):
    """'void hkv::cuda::<unnamed>::matvec_kernel<1, 4>(hkv::cuda::Tasks, …)' -> 'matvec_kernel'; ncu also
    prints the namespace as 'void unnamed>::attn_chunk_kernel<2, 6, 256, 1, 1>(AttnArgs, …)'."""
    s = full.replace("(anonymous namespace)", "").replace("<unnamed>", "").replace("unnamed>", "")
    out, depth = [], 0
    for ch in s:  # drop template arguments and the parameter list
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out).split()[-1].split("::")[-1] if "".join(out).split() else full


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--per", default=None)
    ap.add_argument("--what", default="the profiled run")
    a = ap.parse_args()
    rows = [r for r in csv.reader(open(a.csv, encoding="utf-8", errors="replace")) if len(r) > 10]
    if not rows:
        sys.exit(f"{a.csv}: no ncu rows")
    head, rows = rows[0], rows[1:]
    name_i, val_i, unit_i = head.index("Kernel Name"), head.index("Metric Value"), head.index("Metric Unit")
    t, n = collections.defaultdict(float), collections.Counter()
    for r in rows:
        k = base_name(r[name_i])
        t[k] += float(r[val_i].replace(",", "")) * SCALE_MS[r[unit_i]]
        n[k] += 1
    per = max(1, n.get(a.per, 0)) if a.per else 1
    total = sum(t.values()) / per
    unit = f"a {a.what}" if a.per else a.what
    print(f"{unit}: {total:.3f} ms of kernel time in {sum(n.values()) // per} launches"
          + (f" ({per} profiled)" if a.per else ""))
    print("| kernel | launches | ms | share |\n|---|---|---|---|")
    for k, v in sorted(t.items(), key=lambda kv: -kv[1]):
        print(f"| {k} | {n[k] / per:.0f} | {v / per:.3f} | {100 * v / per / total:.1f}% |")


if __name__ == "__main__":
    main()
