#!/usr/bin/env bash
# 2026-12-03-a run 3 (H200): the decode matvec prefetching its first row group's second round into L2 once x has been
# read in its prologue (HKV_MV_PF2, an experiment, off by default; 2026-11-30-m's HKV_MV_PFPRO issued such prefetches
# right after pdl_wait, ahead of x's loads, and lost). The suites under it (a prefetch moves no byte), then the token
# A-B and the chain's phases under each setting.
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
s=$OUT/summary-all.txt
HKV_MV_PF2=1 cuda/run_gpu_suite.sh ops engine
cp "$OUT/summary.txt" "$s"
HKV_AB="default;HKV_MV_PF2=1" HKV_BENCH_LIMIT=200 \
  HKV_BENCH_ARGS="--depths 1024,32768,131072 --kv-cache q4h,bf16 --tokens 8 --rounds 5" cuda/run_gpu_suite.sh bench-ab
cat "$OUT/summary.txt" >> "$s"
HKV_VARIANTS="default HKV_MV_PF2=1" HKV_BENCH_OPS_ARGS="--chain --phases --as-token" cuda/run_gpu_suite.sh bench-ops
grep -E "^\| all |ms a token's matvecs|^\| default" "$OUT"/bench-ops*.log | tee -a "$s"
rm -f "$OUT/summary.txt" "$OUT/configure.log"
cd "$OUT" && tar czf all.tgz --exclude=all.tgz --exclude=build.log ./* && find . -type f ! -name all.tgz ! -name summary-all.txt -delete
