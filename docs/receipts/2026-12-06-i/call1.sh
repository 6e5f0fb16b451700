#!/usr/bin/env bash
# Call 1 on the lent card: q4h with its scale searched (FORMAT.md "Scale") and q4h-max (the scale from the extreme)
# checked and timed, and the chain's step forms stamped. This tree built; its op cases (the diff table's kv_pack cases
# in both, gpu_ops' fused prep-and-pack in both, the stamped chain forms); gpu_engine; `hkv diff --op model --filter
# q4h-max`; a token's speed in q4h and q4h-max at 1K and 256K in one process; `hkv bench-ops --chain --persistent
# --phases` (where a step's time goes); then, in the time left, the engine's gate on the recall fixture at every depth
# in fp8 and q4h (q4h-max's gate is call 2 of docs/receipts/2026-12-06-h: the gate's figures are deterministic).
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-i/call1.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh run1 ops engine
cp /tmp/hkv-back/run1-summary.txt "$back/call1-summary.txt"
bin=build-gpu/hkv
t=$SECONDS
timeout 100 $bin diff --op model --filter q4h-max > /tmp/diff-mse.log 2>&1
echo "hkv diff --op model --filter q4h-max: rc=$?, $(tail -1 /tmp/diff-mse.log), $((SECONDS - t)) s" \
  | tee -a "$back/call1-summary.txt"
timeout 90 $bin bench --depths 1K,256K --kv-cache q4h,q4h-max --tokens 16 > "$back/call1-bench-mse.txt" 2>&1
echo "bench q4h, q4h-max: rc=$?" | tee -a "$back/call1-summary.txt"
timeout 60 $bin bench-ops --chain --persistent --phases --reps 20 > "$back/call1-bench-ops-phases.txt" 2>&1
echo "bench-ops --chain --persistent --phases: rc=$?" | tee -a "$back/call1-summary.txt"
left=$((575 - SECONDS))
t=$SECONDS
timeout $left $bin gate --fixture fixtures/recall-gate.json --backend cuda --no-floor --formats fp8,q4h \
  --depths 1K,8K,32K,64K,128K,256K --json /tmp/gate.json > "$back/call1-gate-recall.txt" 2>&1
echo "gate fp8,q4h at every depth: rc=$?, $((SECONDS - t)) s of $left" | tee -a "$back/call1-summary.txt"
xz -c /tmp/gate.json > "$back/call1-gate-recall.json.xz"
tar czf "$back/call1-logs.tgz" -C /tmp hkv-back diff-mse.log 2> /dev/null
cat "$back/call1-summary.txt"
grep -E "^\| " "$back/call1-bench-mse.txt" | tail -6
tail -12 "$back/call1-bench-ops-phases.txt"
grep -E "^(format|fp8|q4h|recall|\|)" "$back/call1-gate-recall.txt" | tail -30
