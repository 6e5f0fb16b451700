#!/usr/bin/env bash
# Call 3 on the lent card: this tree built (the MLX4 row group split into Mlx4Rows, the chain's forms StepsWide and
# Overlap added); its op cases; `hkv bench-ops --chain --persistent` with the four persistent forms against the graph
# of launches, twice; memcheck and racecheck over the chain's test case.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-h/call3.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh run4 ops
cp /tmp/hkv-back/run4-summary.txt "$back/call3-summary.txt"
for round in 1 2; do
  timeout 200 build-gpu/hkv bench-ops --chain --persistent --reps 20 > "$back/call3-bench-ops-persistent-$round.txt" 2>&1
  echo "bench-ops --chain --persistent, round $round: rc=$?" | tee -a "$back/call3-summary.txt"
done
HKV_SAN_RUNS="memcheck:ops:*persistent* racecheck:ops:*persistent*" OUT=/tmp/hkv-back \
  bash docs/receipts/2026-12-06-a/run.sh run5 sanitize
grep -E "memcheck|racecheck|Version" /tmp/hkv-back/run5-summary.txt >> "$back/call3-summary.txt"
tar czf "$back/call3-logs.tgz" -C /tmp hkv-back 2> /dev/null
cat "$back/call3-summary.txt"
for round in 1 2; do tail -7 "$back/call3-bench-ops-persistent-$round.txt"; done
