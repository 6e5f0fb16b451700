#!/usr/bin/env bash
# Call 3 on the lent card: the tree with the bulk kernel's scores on the tensor cores (form 10) as the default and the
# ring kernel removed. Builds it (run_gpu_suite.sh's build-gpu) and runs its exactness suites (ops: the diff table's
# op and attention cases and gpu_ops' kernel-internal checks; engine; generate: greedy decode against the oracle),
# then the table's whole-model cases through `hkv diff --op model`, then a token in bf16 and q4h at 1K to 262K.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-d/call3.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
OUT=$back bash docs/receipts/2026-12-06-a/run.sh call3 ops engine generate
t=$SECONDS
timeout 200 build-gpu/hkv diff --op model > "$back/call3-diff-model.log" 2>&1
echo "hkv diff --op model: rc=$?, $(tail -1 "$back/call3-diff-model.log"), $((SECONDS - t)) s" | tee -a "$back/call3-summary.txt"
timeout 150 build-gpu/hkv bench --depths 1K,32K,128K,256K --kv-cache bf16,q4h --tokens 16 > "$back/call3-bench.txt" 2>&1
echo "bench bf16, q4h: rc=$?" | tee -a "$back/call3-summary.txt"
grep -E "^\| " "$back/call3-bench.txt" | tee -a "$back/call3-summary.txt"
xz -9 "$back/call3-diff-model.log"
cat "$back/call3-summary.txt"
