#!/usr/bin/env bash
# 2026-12-04-b run 1 (H200): HEAD d74b522 as it is, gpu_ops and gpu_engine byte for byte (the first card to run 2026-12-04-a's review mend 17898c3).
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
cuda/run_gpu_suite.sh ops engine
rc=$?
echo "suite rc=$rc" >> "$OUT/summary.txt"
cp "$OUT/summary.txt" "$OUT/summary-all.txt"
tail -40 "$OUT/gpu_ops.log" > "$OUT/gpu_ops-tail.log" 2>/dev/null
rm -f "$OUT/configure.log" "$OUT/build.log"
tail -30 "$OUT/summary-all.txt"
exit $rc
