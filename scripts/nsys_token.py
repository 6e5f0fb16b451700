#!/usr/bin/env python3
"""Where a decode token's time goes on the device's own timeline (nsys, CUDA graphs traced node by node):
kernels overlap under programmatic dependent launch, so ncu's one-kernel-at-a-time durations overstate them.

usage: scripts/nsys_token.py FILE.sqlite [--tokens N] [--first KERNEL]
  FILE.sqlite   `nsys export --type sqlite` of `nsys profile --cuda-graph-trace=node hkv bench …`
  --first       the kernel that starts a token (default embed_kernel, one launch a token)
  --tokens      the last N whole tokens are measured (default 8)
Prints, per token: the span (one token's first kernel start to the next's), the time some kernel runs (the
union of the kernels' intervals), the idle rest; then each kernel by base name: launches, the sum of its
durations, and the time only it runs (its intervals less every other kernel's).
"""
import argparse
import collections
import sqlite3
import sys


def base_name(s):
    out, depth = [], 0
    for ch in s.replace("(anonymous namespace)", ""):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    words = "".join(out).split()
    return words[-1].split("::")[-1] if words else s


def union_len(iv):
    total, end = 0, None
    for s, e in sorted(iv):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("db")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--first", default="embed_kernel")
    a = ap.parse_args()
    con = sqlite3.connect(a.db)
    rows = con.execute(
        "SELECT k.start, k.end, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName ORDER BY k.start").fetchall()
    ks = [(st, en, base_name(name)) for st, en, name in rows]
    starts = [i for i, k in enumerate(ks) if k[2] == a.first]
    if len(starts) < a.tokens + 1:
        sys.exit(f"nsys_token: {len(starts)} launches of {a.first}, need {a.tokens + 1}")
    lo, hi = starts[-a.tokens - 1], starts[-1]
    sel = ks[lo:hi]
    span = ks[hi][0] - ks[lo][0]
    busy = union_len([(s, e) for s, e, _ in sel])
    n = a.tokens
    print(f"{n} tokens: {span / n / 1e6:.3f} ms a token, kernels running {busy / n / 1e6:.3f} ms, "
          f"nothing running {(span - busy) / n / 1e6:.3f} ms; {len(sel) / n:.0f} launches a token")
    by = collections.defaultdict(list)
    for s, e, name in sel:
        by[name].append((s, e))
    print("| kernel | launches a token | sum of durations ms | ms only it runs |")
    print("|---|---|---|---|")
    for name, iv in sorted(by.items(), key=lambda kv: -sum(e - s for s, e in kv[1])):
        others = [(s, e) for s2, iv2 in by.items() if s2 != name for s, e in iv2]
        only = union_len(iv + others) - union_len(others)
        print(f"| {name} | {len(iv) / n:.0f} | {sum(e - s for s, e in iv) / n / 1e6:.3f} | {only / n / 1e6:.3f} |")


if __name__ == "__main__":
    main()
