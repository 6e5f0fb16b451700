#!/usr/bin/env bash
# Call 4 on the lent card: the tree with the whole-group prefetch removed from the chain's step kernels (f4e8c45 and
# after): the build, the ops stage (gpu_ops, the chain's forms and stamps against the oracle among them), then
# `hkv bench-ops --chain --persistent --reps 20` (every form's bytes against the launches', then timed).
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-a/call4.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh call4 ops
timeout 90 build-gpu/hkv bench-ops --chain --persistent --reps 20 > "$back/call4-bench-ops-persistent.txt" 2>&1
echo "bench-ops --chain --persistent: rc=$?" | tee -a "$back/call4-summary.txt"
cat "$back/call4-summary.txt"
grep -E "^\| (default|persistent)" "$back/call4-bench-ops-persistent.txt" | cut -c1-200
