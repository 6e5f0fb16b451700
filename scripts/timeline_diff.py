#!/usr/bin/env python3
"""Two `hkv bench --timeline --json` runs side by side: for each (cache, depth) row in both, the token's span on
the card and each kernel's µs a token, before and after, largest change first. For a kernel change: which kernels
moved, and by how much of the token.

usage: scripts/timeline_diff.py BEFORE.json AFTER.json [--top N]
Kernels are matched by name (hkv's short names, template arguments included); one that is in only one run shows
the other side as 0 with its launches. Exits 1 when the files hold no row with a timeline in common.
"""
import argparse
import json
import sys


def rows(path):
    with open(path) as f:
        j = json.load(f)
    if j.get("schema") != "hkv-bench-1":
        sys.exit(f"{path}: not an hkv bench JSON (schema {j.get('schema')!r})")
    out = {}
    for r in j.get("decode", []):
        if "timeline" in r:
            out[(r["cache"], r["depth"])] = r["timeline"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--top", type=int, default=12, help="kernels a row, by the size of their change (default 12)")
    a = ap.parse_args()
    b, c = rows(a.before), rows(a.after)
    common = [k for k in b if k in c]
    if not common:
        print(f"no (cache, depth) row has a timeline in both {a.before} and {a.after}", file=sys.stderr)
        return 1
    for key in sorted(common, key=lambda k: (k[0], k[1])):
        tb, tc = b[key], c[key]
        print(f"{key[0]} depth {key[1]}: span {tb['span_ms']:.3f} -> {tc['span_ms']:.3f} ms "
              f"({tc['span_ms'] - tb['span_ms']:+.3f}), no kernel running {tb['span_ms'] - tb['busy_ms']:.3f} -> "
              f"{tc['span_ms'] - tc['busy_ms']:.3f} ms")
        kb = {k["kernel"]: k for k in tb["kernels"]}
        kc = {k["kernel"]: k for k in tc["kernels"]}
        names = set(kb) | set(kc)
        none = {"us_per_token": 0.0, "launches_per_token": 0.0}
        lines = []
        for n in names:
            x, y = kb.get(n, none), kc.get(n, none)
            lines.append((y["us_per_token"] - x["us_per_token"], n, x, y))
        lines.sort(key=lambda t: -abs(t[0]))
        print("| kernel | launches | µs a token before | after | change µs | change, % of the token before |")
        print("|---|---|---|---|---|---|")
        for d, n, x, y in lines[: a.top]:
            launches = f"{x['launches_per_token']:.0f} -> {y['launches_per_token']:.0f}"
            if x["launches_per_token"] == y["launches_per_token"]:
                launches = f"{x['launches_per_token']:.0f}"
            print(f"| {n} | {launches} | {x['us_per_token']:.1f} | {y['us_per_token']:.1f} | {d:+.1f} | "
                  f"{100.0 * d / (tb['span_ms'] * 1e3):+.2f}% |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
