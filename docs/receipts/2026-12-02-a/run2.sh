#!/usr/bin/env bash
# 2026-12-02-a run 2 (H200): run 1's logs did not come back to a later checkout; the suites again with the attention
# case's lines that are not OK printed, the A-B against 2026-12-01-g's value loop (HKV_ATTN_SLIM_SVF=0) and the
# runtime row stride (HKV_ATTN_SLIM_KVC=0).
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
HKV_AB="default;HKV_ATTN_SLIM_KVC=0;HKV_ATTN_SLIM_SVF=0" \
  HKV_BENCH_ARGS="--depths 65536,131072,262144 --kv-cache q4h,fp8 --tokens 8 --rounds 5" \
  cuda/run_gpu_suite.sh ops engine bench-ab
s=$OUT/summary-suites.txt
cp "$OUT/summary.txt" "$s"
echo "--- attention lines not OK (first 40 of $(grep '^attention(' "$OUT/ops.log" | grep -vc ': OK$'))" | tee -a "$s"
grep '^attention(' "$OUT/ops.log" | grep -v ': OK$' | head -40 | tee -a "$s"
grep -B2 -A8 "gpu_ops.cpp:9[0-9][0-9]" "$OUT/ops.log" | head -40 | tee -a "$s"
rm -f "$OUT/summary.txt" "$OUT/configure.log"
cd "$OUT" && tar czf all.tgz --exclude=all.tgz --exclude=build.log ./* && find . -type f ! -name all.tgz ! -name summary-suites.txt -delete
