#!/usr/bin/env bash
# 2026-12-04-a run 2 (H200, after run 1 on the same machine): a q4h token before and after the integer scores. hkv bench
# of main before the patch (build-old/src, run 1) and after it (build-gpu) in turn, two rounds each, q4h at 1K–262K;
# then the attention kernels alone (--attention-only) at 128K and 262K. Then hkv diff whole (run 1's stopped at its
# 70 s limit after 132 cases, all OK) and the exact path's long q4h cases (8K and 32K, byte for byte).
set -u
OUT=${OUT:-/tmp/hkv-out}
s=$OUT/summary-all.txt
: > "$s"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader >> "$s"
date -u +"date %Y-%m-%dT%H:%M:%SZ" >> "$s"
bench() {  # name binary
  timeout 150 "$2" bench --depths 1024,32768,131072,262144 --kv-cache q4h --tokens 8 >> "$OUT/bench-$1.log" 2>&1
  echo "bench $1 rc=$?" >> "$s"
}
for r in 1 2; do
  bench old build-old/src/build/hkv
  bench new build-gpu/hkv
done
for b in old new; do
  grep -E "^\||copy bandwidth" "$OUT/bench-$b.log" | sed "s/^/$b /" >> "$s"
done
for b in old new; do
  bin=build-gpu/hkv
  [[ $b == old ]] && bin=build-old/src/build/hkv
  timeout 100 "$bin" bench --attention-only --depths 131072,262144 --kv-cache q4h > "$OUT/attn-$b.log" 2>&1
  echo "attn $b rc=$?" >> "$s"
  grep -E "^\|" "$OUT/attn-$b.log" | sed "s/^/$b /" >> "$s"
done
t=$SECONDS
timeout 200 build-gpu/hkv diff > "$OUT/diff.log" 2>&1
echo "diff: rc=$?, $((SECONDS - t)) s: $(grep -E '^[0-9]+ passed' "$OUT/diff.log")" >> "$s"
grep -E ": FAIL" "$OUT/diff.log" | head -8 >> "$s"
t=$SECONDS
timeout 200 build-gpu/hkv diff --long --filter '^model\(model=builtin:tiny,cache=q4h,ctx=(8192|32768)' > "$OUT/diff-long.log" 2>&1
echo "diff long: rc=$?, $((SECONDS - t)) s: $(grep -E '^[0-9]+ passed' "$OUT/diff-long.log")" >> "$s"
grep -E "OK|FAIL" "$OUT/diff-long.log" | head -8 >> "$s"
tail -60 "$s"
