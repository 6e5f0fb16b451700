#!/usr/bin/env bash
# 2026-12-02-a run 1 (H200): slim's V scales in fp32 and its value loop of whole batches (HKV_ATTN_SLIM_SVF), the 27B's
# constant row stride (HKV_ATTN_SLIM_KVC): the suites, the A-B against 2026-12-01-g's value loop, the sanitizers over
# the slim case (2026-12-01-g's runs 3-4 and this run's kernels), the bench table.
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
HKV_AB="default;HKV_ATTN_SLIM_KVC=0;HKV_ATTN_SLIM_SVF=0" \
  HKV_BENCH_ARGS="--depths 65536,131072,262144 --kv-cache q4h,fp8 --tokens 8 --rounds 5" \
  cuda/run_gpu_suite.sh ops engine bench-ab
s=$OUT/summary-suites.txt
cp "$OUT/summary.txt" "$s"
HKV_BENCH_ARGS="--depths 1024,8192,32768,131072,262144 --kv-cache bf16,fp8,q4h --tokens 8" \
  cuda/run_gpu_suite.sh bench
cat "$OUT/summary.txt" >> "$s"
HKV_STALLS_PARTS=attn HKV_STALLS_ATTN="--depths 262144 --kv-cache q4h,fp8" timeout 120 \
  cuda/profile_stalls.sh > "$OUT/stalls.log" 2>&1
echo "stalls rc=$?" | tee -a "$s"
tee -a "$s" < "$OUT/stalls.log"
HKV_TEST_ATTN_SHAPES=slim HKV_SAN_PARALLEL=1 \
  HKV_SAN_RUNS="memcheck:ops:*512-key* racecheck:ops:*512-key* initcheck:ops:*512-key*" \
  timeout 150 cuda/run_gpu_suite.sh sanitize
echo "sanitize rc=$?" | tee -a "$s"
cat "$OUT/summary.txt" >> "$s"
rm -f "$OUT/summary.txt" "$OUT/configure.log"
# (at most 8 files come back from the lent card: everything in one archive, the summary beside it)
cd "$OUT" && tar czf all.tgz --exclude=all.tgz --exclude=build.log ./* && find . -type f ! -name all.tgz ! -name summary-suites.txt -delete
