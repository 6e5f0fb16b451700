#!/usr/bin/env bash
# 2026-12-04-a run 4 (H200): the landing tree as it is (q4h's integer scores by dp4a in every shape): gpu_ops and
# gpu_engine byte for byte, then hkv bench's table, bf16 and q4h at 1K-262K.
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
s=$OUT/summary-all.txt
cuda/run_gpu_suite.sh ops engine
cp "$OUT/summary.txt" "$s"
timeout 200 build-gpu/hkv bench --depths 1024,8192,32768,131072,262144 --kv-cache bf16,q4h --tokens 8 \
  --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
echo "bench rc=$?" >> "$s"
grep -E "^\||copy bandwidth" "$OUT/bench.log" >> "$s"
rm -f "$OUT/summary.txt" "$OUT/configure.log" "$OUT/build.log" "$OUT/gpu_ops.log"
tail -25 "$s"
