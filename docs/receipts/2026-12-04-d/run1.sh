#!/usr/bin/env bash
# 2026-12-04-d's plan for the next card (none was lent in 2026-12-04-d), the first call: the checks that 2026-12-04-c's
# contract change (q4h's values in integers, ARITHMETIC.md §6 step 3) has not yet had on a GPU. About 6–7 minutes on
# a fresh H200 (the build 187 s, gpu_ops 33 s, gpu_engine 18 s, hkv diff 85 s, the long cases 61 s in 2026-12-04-a).
# 1. gpu_ops and gpu_engine, byte for byte with the oracle (every attention shape, every cache format).
# 2. hkv diff whole, then the exact path's long q4h cases (8K and 32K on builtin:tiny, logits equal).
# usage (the device tool, .deps carried): bash docs/receipts/2026-12-04-d/run1.sh
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
s=$OUT/summary-all.txt
cuda/run_gpu_suite.sh ops engine diff
cp "$OUT/summary.txt" "$s"
t=$SECONDS
timeout 150 build-gpu/hkv diff --long --filter '^model\(model=builtin:tiny,cache=q4h,ctx=(8192|32768)' \
  > "$OUT/diff-long.log" 2>&1
echo "diff long: rc=$?, $((SECONDS - t)) s: $(grep -E '^[0-9]+ passed' "$OUT/diff-long.log")" >> "$s"
grep -E "OK|FAIL" "$OUT/diff-long.log" | head -8 >> "$s"
tail -40 "$OUT/gpu_ops.log" > "$OUT/gpu_ops-tail.log" 2>/dev/null
rm -f "$OUT/summary.txt" "$OUT/configure.log" "$OUT/build.log"
tail -40 "$s"
