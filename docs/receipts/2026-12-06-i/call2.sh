#!/usr/bin/env bash
# Call 2 on the lent card (after call 1, on the same warm machine and build): the engine's gate on the recall fixture
# at every depth, q4h-max beside fp8 and q4h.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-i/call2.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
bin=build-gpu/hkv
t=$SECONDS
timeout 560 $bin gate --fixture fixtures/recall-gate.json --backend cuda --no-floor --formats fp8,q4h,q4h-max \
  --depths 1K,8K,32K,64K,128K,256K --json /tmp/gate-mse.json > "$back/call2-gate-recall-mse.txt" 2>&1
echo "gate with q4h-max: rc=$?, $((SECONDS - t)) s" | tee "$back/call2-summary.txt"
xz -c /tmp/gate-mse.json > "$back/call2-gate-recall-mse.json.xz"
grep -E "^(format|fp8|q4h|recall)" "$back/call2-gate-recall-mse.txt" | head -60
