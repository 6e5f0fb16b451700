#!/usr/bin/env bash
# 2026-12-01-g run 3 (H200): slim's weights 8 floats a key (HKV_ATTN_SLIM_E8, an experiment) byte for byte and timed;
# ncu's stall reasons of the chunk and merge kernels at 262K (q4h, fp8: slim now); a token's timeline at 1K and 262K.
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
HKV_AB="default;HKV_ATTN_SLIM_E8=1" \
  HKV_BENCH_ARGS="--depths 65536,131072,262144 --kv-cache q4h,fp8 --tokens 8 --rounds 5" \
  HKV_TIMELINE_ARGS="--depths 1024,262144 --kv-cache q4h --tokens 8" \
  cuda/run_gpu_suite.sh bench-ab timeline
s=$OUT/summary.txt
HKV_ATTN_SLIM_E8=1 timeout 60 build-gpu/tests/hkv_gpu_tests --source-file='*gpu_ops*' --test-case='*512-key*' \
  > "$OUT/gpu_ops-e8.log" 2>&1
echo "gpu_ops attention HKV_ATTN_SLIM_E8=1 rc=$? $(grep -c ': OK' "$OUT/gpu_ops-e8.log") OK $(grep -c ': FAIL' "$OUT/gpu_ops-e8.log") FAIL" | tee -a "$s"
HKV_STALLS_PARTS=attn HKV_STALLS_ATTN="--depths 262144 --kv-cache q4h,fp8" timeout 240 cuda/profile_stalls.sh \
  > "$OUT/stalls.log" 2>&1
echo "stalls rc=$?" | tee -a "$s"
tee -a "$s" < "$OUT/stalls.log"
# (at most 8 files come back from the lent card: everything in one archive, the summary beside it)
cd "$OUT" && tar czf all.tgz --exclude=all.tgz --exclude=build.log ./* && find . -type f ! -name all.tgz ! -name summary.txt -delete
