#!/usr/bin/env bash
# Call 5 on the lent card: the tree with q4h's value weights in 14 bits (ARITHMETIC.md §6 step 3) and form 10 the
# default. Builds it (run_gpu_suite.sh's build-gpu) and runs its exactness suites (ops: the diff table's op and
# attention cases and gpu_ops' kernel-internal checks; engine; generate: greedy decode against the oracle), then the
# table's whole-model cases through `hkv diff --op model`, then a q4h token at 1K to 262K.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-d/call5.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
OUT=$back bash docs/receipts/2026-12-06-a/run.sh call5 ops engine generate
t=$SECONDS
timeout 200 build-gpu/hkv diff --op model > "$back/call5-diff-model.log" 2>&1
echo "hkv diff --op model: rc=$?, $(tail -1 "$back/call5-diff-model.log"), $((SECONDS - t)) s" | tee -a "$back/call5-summary.txt"
timeout 150 build-gpu/hkv bench --depths 1K,32K,128K,256K --kv-cache q4h --tokens 16 > "$back/call5-bench.txt" 2>&1
echo "bench q4h: rc=$?" | tee -a "$back/call5-summary.txt"
grep -E "^\| " "$back/call5-bench.txt" | tee -a "$back/call5-summary.txt"
xz -9 "$back/call5-diff-model.log"
cat "$back/call5-summary.txt"
