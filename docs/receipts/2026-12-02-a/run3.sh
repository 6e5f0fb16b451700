#!/usr/bin/env bash
# 2026-12-02-a run 3 (H200): the landing tree (the slim kernel's fp32 V scales and whole-batch value loop the only form,
# the attention launch record filled by name): the suites, the bench table, the sanitizers over the slim case, ncu's
# stalls of the attention kernels at 262K, the card's SASS.
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
cuda/run_gpu_suite.sh ops engine sass
s=$OUT/summary-suites.txt
cp "$OUT/summary.txt" "$s"
echo "--- attention lines not OK: $(grep '^attention(' "$OUT/gpu_ops.log" | grep -vc ': OK$') of $(grep -c '^attention(' "$OUT/gpu_ops.log")" | tee -a "$s"
grep '^attention(' "$OUT/gpu_ops.log" | grep -v ': OK$' | head -20 | tee -a "$s"
HKV_BENCH_ARGS="--depths 1024,8192,32768,131072,262144 --kv-cache bf16,fp8,q4h --tokens 8" \
  cuda/run_gpu_suite.sh bench
cat "$OUT/summary.txt" >> "$s"
HKV_TEST_ATTN_SHAPES=slim HKV_SAN_PARALLEL=1 \
  HKV_SAN_RUNS="memcheck:ops:*512-key* racecheck:ops:*512-key* initcheck:ops:*512-key*" \
  timeout 150 cuda/run_gpu_suite.sh sanitize
echo "sanitize rc=$?" | tee -a "$s"
cat "$OUT/summary.txt" >> "$s"
HKV_STALLS_PARTS=attn HKV_STALLS_ATTN="--depths 262144 --kv-cache q4h,fp8" timeout 100 \
  cuda/profile_stalls.sh > "$OUT/stalls.log" 2>&1
echo "stalls rc=$?" | tee -a "$s"
tee -a "$s" < "$OUT/stalls.log" > /dev/null
rm -f "$OUT/summary.txt" "$OUT/configure.log"
cd "$OUT" && tar czf all.tgz --exclude=all.tgz --exclude=build.log ./* && find . -type f ! -name all.tgz ! -name summary-suites.txt -delete
