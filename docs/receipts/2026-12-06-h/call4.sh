#!/usr/bin/env bash
# Call 4 on the lent card (written for the next card run; it has not run): q4h-mse in the engine's packing kernels
# checked and measured. This tree built; its op cases (the diff table's kv_pack cases in q4h-mse, gpu_ops' fused
# prep-and-pack in q4h-mse); gpu_engine; `hkv diff --op model --filter q4h-mse` (the model cases in q4h-mse); a token's
# speed in q4h and q4h-mse at 1K and 256K in one process; then the engine's gate on the recall fixture at every depth
# with q4h-mse beside fp8 and q4h. Between them, the chain's step forms stamped (`hkv bench-ops --chain --persistent
# --phases`): where a step's time goes.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-h/call4.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh run6 ops engine
cp /tmp/hkv-back/run6-summary.txt "$back/call4-summary.txt"
bin=build-gpu/hkv
t=$SECONDS
timeout 200 $bin diff --op model --filter q4h-mse > /tmp/diff-mse.log 2>&1
echo "hkv diff --op model --filter q4h-mse: rc=$?, $(tail -1 /tmp/diff-mse.log), $((SECONDS - t)) s" \
  | tee -a "$back/call4-summary.txt"
timeout 200 $bin bench --depths 1K,256K --kv-cache q4h,q4h-mse --tokens 16 > "$back/call4-bench-mse.txt" 2>&1
echo "bench q4h, q4h-mse: rc=$?" | tee -a "$back/call4-summary.txt"
timeout 120 $bin bench-ops --chain --persistent --phases --reps 20 > "$back/call4-bench-ops-phases.txt" 2>&1
echo "bench-ops --chain --persistent --phases: rc=$?" | tee -a "$back/call4-summary.txt"
t=$SECONDS
timeout 330 $bin gate --fixture fixtures/recall-gate.json --backend cuda --no-floor --formats fp8,q4h,q4h-mse \
  --depths 1K,8K,32K,64K,128K,256K --json /tmp/gate-mse.json > "$back/call4-gate-recall-mse.txt" 2>&1
echo "gate with q4h-mse: rc=$?, $((SECONDS - t)) s" | tee -a "$back/call4-summary.txt"
xz -c /tmp/gate-mse.json > "$back/call4-gate-recall-mse.json.xz"
tar czf "$back/call4-logs.tgz" -C /tmp hkv-back diff-mse.log 2> /dev/null
cat "$back/call4-summary.txt"
grep -E "^\| " "$back/call4-bench-mse.txt" | tail -6
grep -E "stamped|persistent" "$back/call4-bench-ops-phases.txt"
grep -E "^(format|fp8|q4h)" "$back/call4-gate-recall-mse.txt"
