#!/usr/bin/env bash
# Call 2 on the lent card (written for the next card run; it has not run): the chain's step forms with each warp's
# first row groups prefetched whole into L2 while the block waits on the step ahead (`ChainPlan::run`'s
# prefetch_groups). This tree built; the ops stage (gpu_ops' chain test: every form, with 1 and 3 groups prefetched,
# and stamped, against the oracle); memcheck over the chain test; `hkv bench-ops --chain --persistent --phases --reps
# 20` (every form's bytes against the launches', then timed; StepsWide at 1, 2, 4 and 8 groups a warp prefetched;
# the stamps, also at 4 groups).
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-i/call2.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
HKV_SAN_RUNS="memcheck:ops:*persistent*" OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh run2 ops sanitize
cp /tmp/hkv-back/run2-summary.txt "$back/call2-summary.txt"
timeout 120 build-gpu/hkv bench-ops --chain --persistent --phases --reps 20 > "$back/call2-bench-ops-prefetch.txt" 2>&1
echo "bench-ops --chain --persistent --phases: rc=$?" | tee -a "$back/call2-summary.txt"
tar czf "$back/call2-logs.tgz" -C /tmp hkv-back 2> /dev/null
cat "$back/call2-summary.txt"
grep -E "^\| (default|persistent)" "$back/call2-bench-ops-prefetch.txt" | cut -c1-230
