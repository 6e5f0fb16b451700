#!/usr/bin/env bash
# 2026-12-02-a run 4 (H200): two experiments on the slim kernel at the 27B's layout, each byte for byte before it is
# timed: five blocks a multiprocessor (HKV_ATTN_SLIM_B5=1: __launch_bounds__(128, 5), 96 registers, some spills in
# the score loop), and fp8's score loop rolled (HKV_ATTN_SLIM_FROLL=1). The suites on the defaults first (the
# dispatcher's constant-stride forms now compiled for 6 heads alone).
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
cuda/run_gpu_suite.sh ops engine
s=$OUT/summary-suites.txt
cp "$OUT/summary.txt" "$s"
for v in HKV_ATTN_SLIM_B5=1 HKV_ATTN_SLIM_FROLL=1; do
  env "$v" timeout 60 build-gpu/tests/hkv_gpu_tests --test-case='*512-key*' > "$OUT/attn-$v.log" 2>&1
  echo "attention case under $v: rc=$?, $(grep '^attention(' "$OUT/attn-$v.log" | grep -c ': OK$') OK of $(grep -c '^attention(' "$OUT/attn-$v.log")" | tee -a "$s"
  grep '^attention(' "$OUT/attn-$v.log" | grep -v ': OK$' | head -5 | tee -a "$s"
done
HKV_AB="default;HKV_ATTN_SLIM_B5=1;HKV_ATTN_SLIM_FROLL=1;default" \
  HKV_BENCH_ARGS="--depths 65536,131072,262144 --kv-cache q4h,fp8 --tokens 8 --rounds 5" \
  cuda/run_gpu_suite.sh bench-ab
cat "$OUT/summary.txt" >> "$s"
HKV_ATTN_SLIM_B5=1 HKV_STALLS_PARTS=attn HKV_STALLS_ATTN="--depths 262144 --kv-cache q4h,fp8" timeout 100 \
  cuda/profile_stalls.sh > "$OUT/stalls-b5.log" 2>&1
echo "stalls (B5) rc=$?" | tee -a "$s"
tee -a "$s" < "$OUT/stalls-b5.log" > /dev/null
rm -f "$OUT/summary.txt" "$OUT/configure.log"
cd "$OUT" && tar czf all.tgz --exclude=all.tgz --exclude=build.log ./* && find . -type f ! -name all.tgz ! -name summary-suites.txt -delete
