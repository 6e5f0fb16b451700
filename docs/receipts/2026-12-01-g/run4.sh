#!/usr/bin/env bash
# 2026-12-01-g run 4 (H200): the landing tree (q4h's slim weights 8 floats a key) and the rolled slim score loop
# (HKV_ATTN_SLIM_ROLL, an experiment): the suites, the rolled loop timed, ncu's stalls with and without it, the table.
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
HKV_AB="default;HKV_ATTN_SLIM_ROLL=1" \
  HKV_BENCH_ARGS="--depths 65536,131072,262144 --kv-cache q4h,fp8 --tokens 8 --rounds 5" \
  cuda/run_gpu_suite.sh ops engine bench-ab
s=$OUT/summary-suites.txt
cp "$OUT/summary.txt" "$s"
HKV_BENCH_ARGS="--depths 1024,8192,32768,131072,262144 --kv-cache bf16,fp8,q4h --tokens 8" \
  cuda/run_gpu_suite.sh bench
cat "$OUT/summary.txt" >> "$s"
for roll in 0 1; do
  HKV_ATTN_SLIM_ROLL=$roll HKV_STALLS_PARTS=attn HKV_STALLS_ATTN="--depths 262144 --kv-cache q4h,fp8" timeout 150 \
    cuda/profile_stalls.sh > "$OUT/stalls-roll$roll.log" 2>&1
  echo "stalls HKV_ATTN_SLIM_ROLL=$roll rc=$?" | tee -a "$s"
  tee -a "$s" < "$OUT/stalls-roll$roll.log"
  mv "$OUT/ncu-stalls-attn.csv" "$OUT/ncu-stalls-attn-roll$roll.csv"
done
rm -f "$OUT/summary.txt" "$OUT/configure.log"
# (at most 8 files come back from the lent card: everything in one archive, the summary beside it)
cd "$OUT" && tar czf all.tgz --exclude=all.tgz --exclude=build.log ./* && find . -type f ! -name all.tgz ! -name summary-suites.txt -delete
