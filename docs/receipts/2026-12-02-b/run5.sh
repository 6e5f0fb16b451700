#!/usr/bin/env bash
# 2026-12-02-b run 5 (H200): the landing tree: Auto's slim from 1.2 chunk blocks a multiprocessor (HKV_ATTN_SLIM_FROM=12;
# run 4 had fp8 3.9% slower under slim at exactly one block a multiprocessor). The suites, then the A-B at the lower
# boundary (b = 132 to 160 at batch 1) against slim from one block (10) and the rule before (30).
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
s=$OUT/summary-suites.txt
cuda/run_gpu_suite.sh ops engine
cp "$OUT/summary.txt" "$s"
echo "--- attention lines not OK: $(grep '^attention(' "$OUT/gpu_ops.log" | grep -vc ': OK$') of $(grep -c '^attention(' "$OUT/gpu_ops.log")" | tee -a "$s"
grep '^attention(' "$OUT/gpu_ops.log" | grep -v ': OK$' | head -10 | tee -a "$s"
HKV_AB="default;HKV_ATTN_SLIM_FROM=10;HKV_ATTN_SLIM_FROM=30" HKV_BENCH_LIMIT=240 \
  HKV_BENCH_ARGS="--depths 16896,17408,17920,18944,19968,20480,24576,40960 --kv-cache q4h,fp8 --tokens 8 --rounds 5" \
  cuda/run_gpu_suite.sh bench-ab
cat "$OUT/summary.txt" >> "$s"
rm -f "$OUT/summary.txt" "$OUT/configure.log"
cd "$OUT" && tar czf all.tgz --exclude=all.tgz --exclude=build.log ./* && find . -type f ! -name all.tgz ! -name summary-suites.txt -delete
