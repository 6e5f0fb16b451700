#!/usr/bin/env bash
# Where a decode token's time goes: every kernel of `hkv bench` (27B MLX4 shape, batch 1, no graphs) timed
# by ncu (gpu__time_duration, clocks left alone), summed by kernel and divided by the tokens profiled.
# usage: cuda/profile_token.sh [HKV_BINARY] [CACHE_FORMAT] [DEPTH]   (writes $OUT/ncu-token.csv)
set -euo pipefail
bin=${1:-build-gpu/hkv}
kv=${2:-bf16}
depth=${3:-1024}
out=${OUT:-/tmp}/ncu-token.csv
# Skip the weight generator and the cache filler, then about one warm-up token; profile about two tokens.
ncu --clock-control none --metrics gpu__time_duration.sum --csv -k 'regex:^(?!bf16_kernel|mlx4_kernel|kv_fill)' \
  --launch-skip 700 --launch-count 1400 "$bin" bench --depths "$depth" --kv-cache "$kv" --tokens 2 --graphs off \
  > "$out" 2> "${out%.csv}.err" || { tail -5 "${out%.csv}.err"; exit 1; }
python3 - "$out" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; rows = rows[1:]
name_i, val_i, unit_i = head.index("Kernel Name"), head.index("Metric Value"), head.index("Metric Unit")
scale = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0}
t, n = collections.defaultdict(float), collections.Counter()
for r in rows:
    k = r[name_i].split("(")[0].split("<")[0]
    t[k] += float(r[val_i].replace(",", "")) * scale[r[unit_i]]
    n[k] += 1
tokens = max(1, n.get("embed_kernel", 0))
total = sum(t.values()) / tokens
print(f"per decode token ({tokens} tokens profiled): {total:.3f} ms of kernel time in {sum(n.values()) // tokens} launches")
print("| kernel | launches a token | ms a token | share |\n|---|---|---|---|")
for k, v in sorted(t.items(), key=lambda kv: -kv[1]):
    print(f"| {k} | {n[k] / tokens:.0f} | {v / tokens:.3f} | {100 * v / tokens / total:.1f}% |")
PY
