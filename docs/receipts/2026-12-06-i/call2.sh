#!/usr/bin/env bash
# Call 2 on the lent card: the chain's step forms with each warp's first row groups prefetched whole into L2 while the
# block waits on the step ahead (`ChainPlan::run`'s prefetch_groups). This tree built; gpu_ops' chain test (every form,
# prefetched and stamped, against the oracle); `hkv bench-ops --chain --persistent --phases --reps 20` (every form's
# bytes against the launches', then timed; StepsWide at 1, 2, 4 and 8 groups a warp prefetched; the stamps).
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-i/call2.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
t=$SECONDS
OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh run2 build > /dev/null 2>&1
echo "build: $((SECONDS - t)) s" | tee "$back/call2-summary.txt"
timeout 60 build-gpu/tests/hkv_gpu_tests -tc='*persistent launch*' > /tmp/chain-test.log 2>&1
echo "gpu_ops chain test: rc=$?, $(grep -E 'matvec chain persistent' /tmp/chain-test.log)" | tee -a "$back/call2-summary.txt"
timeout 120 build-gpu/hkv bench-ops --chain --persistent --phases --reps 20 > "$back/call2-bench-ops-prefetch.txt" 2>&1
echo "bench-ops --chain --persistent --phases: rc=$?" | tee -a "$back/call2-summary.txt"
grep -E "^\| (default|persistent)" "$back/call2-bench-ops-prefetch.txt" | cut -c1-230
