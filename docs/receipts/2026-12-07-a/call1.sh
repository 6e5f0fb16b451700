#!/usr/bin/env bash
# Call 1 on the lent card: the chain's step forms with each warp's first row groups prefetched whole into L2 while
# the block waits on the step ahead (`ChainPlan::run`'s prefetch_groups), as written in
# docs/receipts/2026-12-06-i/call2.sh: the build; the ops stage; memcheck over the chain test; then
# `hkv bench-ops --chain --persistent --phases --reps 20`.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-a/call1.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
HKV_SAN_RUNS="memcheck:ops:*persistent*" OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh call1 ops sanitize
cp /tmp/hkv-back/call1-summary.txt "$back/call1-summary.txt" 2> /dev/null
cp /tmp/hkv-back/call1-logs.tgz "$back/call1-logs.tgz" 2> /dev/null
timeout 120 build-gpu/hkv bench-ops --chain --persistent --phases --reps 20 > "$back/call1-bench-ops-prefetch.txt" 2>&1
echo "bench-ops --chain --persistent --phases: rc=$?" | tee -a "$back/call1-summary.txt"
cat "$back/call1-summary.txt"
grep -E "^\| (default|persistent)" "$back/call1-bench-ops-prefetch.txt" | cut -c1-230
