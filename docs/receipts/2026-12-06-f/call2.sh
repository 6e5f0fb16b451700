#!/usr/bin/env bash
# Call 2, on the machine call1.sh left warm (build-gpu/ and build-base/ built there): for this tree and the base tree,
# ncu's DRAM bytes read by one token's q4h decode attention at 256K (attention alone), then decode tokens/s
# (hkv bench), the two trees in turn, two rounds.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-f/call2.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
bin_of() { if [[ $1 == base ]]; then echo build-base/build/hkv; else echo build-gpu/hkv; fi; }
{
  for tree in new base; do
    echo "== $tree: ncu, q4h decode attention at 256K (attention alone), one token's 16 slim launches"
    timeout 150 ncu --kernel-name regex:attn_slim --launch-skip 32 --launch-count 16 --csv \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
      "$(bin_of $tree)" bench --attention-only --depths 256K --kv-cache q4h --reps 3 > "$back/ncu-$tree.csv" 2>&1
    python3 - "$tree" "$back/ncu-$tree.csv" <<'EOF'
import csv, sys
rows = list(csv.reader(l for l in open(sys.argv[2]) if l.startswith('"')))
m = {}
for r in rows[1:]:
    d = dict(zip(rows[0], r))
    m.setdefault(d["Metric Name"], []).append(float(d["Metric Value"].replace(",", "")))
t, b = m.get("gpu__time_duration.sum", []), m.get("dram__bytes_read.sum", [])
p = m.get("dram__throughput.avg.pct_of_peak_sustained_elapsed", [])
rows_bytes = 2 * 262144 * 4 * 144  # K and V rows of one layer at 256K, 4 KV heads, 144 bytes a row
if t and b:
    print(f"{sys.argv[1]}: {len(t)} launches, mean {sum(t)/len(t)/1e3:.1f} us a layer, DRAM read "
          f"{sum(b)/len(b)/1e6:.1f} MB a layer against the rows' {rows_bytes/1e6:.1f} MB "
          f"({sum(b)/len(b)/rows_bytes:.2f}x), DRAM throughput {sum(p)/len(p):.1f}% of peak")
else:
    print(sys.argv[1], "ncu: no metrics read")
EOF
  done
} 2>&1 | tee "$back/ncu-summary.txt"
for round in 1 2; do
  for tree in new base; do
    for args in "--depths 1K,32K,128K,256K --kv-cache q4h --attention" "--depths 1K,128K --kv-cache bf16"; do
      # shellcheck disable=SC2086
      "$(bin_of $tree)" bench $args --tokens 16 > /tmp/ab.log 2>&1
      echo "== $tree round $round: $args (exit $?)"
      grep -E "^\| (bf16|q4h)|copy bandwidth|on NVIDIA" /tmp/ab.log
      cat /tmp/ab.log >> "$back/ab-$tree.log"
    done
  done
done 2>&1 | tee "$back/ab-summary.txt"
