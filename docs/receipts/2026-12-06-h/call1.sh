#!/usr/bin/env bash
# Call 1 on the lent card: this tree built; its op cases (the chain kernels' shared entry and the bulk kernel's
# recorded form checked on the card); `hkv bench-ops --chain --persistent` with both persistent forms (items, steps)
# against the graph of launches; memcheck over the chain's test case; gpu_engine.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-h/call1.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh run1 ops
cp /tmp/hkv-back/run1-summary.txt "$back/call1-summary.txt"
timeout 200 build-gpu/hkv bench-ops --chain --persistent --reps 20 > "$back/call1-bench-ops-persistent.txt" 2>&1
echo "bench-ops --chain --persistent: rc=$?" | tee -a "$back/call1-summary.txt"
HKV_SAN_RUNS="memcheck:ops:*persistent*" OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh run2 sanitize
grep -E "memcheck|Version" /tmp/hkv-back/run2-summary.txt >> "$back/call1-summary.txt"
OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh run3 engine
grep -E "gpu_engine|test cases" /tmp/hkv-back/run3-summary.txt | head -3 >> "$back/call1-summary.txt"
tar czf "$back/call1-logs.tgz" -C /tmp hkv-back 2> /dev/null
cat "$back/call1-summary.txt"
tail -14 "$back/call1-bench-ops-persistent.txt"
