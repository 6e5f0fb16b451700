#!/usr/bin/env bash
# 2026-12-02-a run 5 (H200): the landing tree with fp8's score loop rolled at the 27B's layout where the grid is more
# than one wave (HKV_ATTN_SLIM_FROLL=1, the default; run 4 had it always under =1, now =2): gpu_ops (the attention
# case with fp8 rolled always, one more switch setting), the A-B against never (0) and always (2), gpu_engine, and
# the sanitizers over the slim case.
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
s=$OUT/summary-suites.txt
HKV_AB="default;HKV_ATTN_SLIM_FROLL=0;HKV_ATTN_SLIM_FROLL=2" \
  HKV_BENCH_ARGS="--depths 65536,131072,262144 --kv-cache fp8,q4h --tokens 8 --rounds 5" \
  cuda/run_gpu_suite.sh ops bench-ab engine
cp "$OUT/summary.txt" "$s"
echo "--- attention lines not OK: $(grep '^attention(' "$OUT/gpu_ops.log" | grep -vc ': OK$') of $(grep -c '^attention(' "$OUT/gpu_ops.log")" | tee -a "$s"
grep '^attention(' "$OUT/gpu_ops.log" | grep -v ': OK$' | head -10 | tee -a "$s"
HKV_TEST_ATTN_SHAPES=slim HKV_SAN_PARALLEL=1 \
  HKV_SAN_RUNS="memcheck:ops:*512-key* racecheck:ops:*512-key* initcheck:ops:*512-key*" \
  timeout 130 cuda/run_gpu_suite.sh sanitize
echo "sanitize rc=$?" | tee -a "$s"
cat "$OUT/summary.txt" >> "$s"
rm -f "$OUT/summary.txt" "$OUT/configure.log"
cd "$OUT" && tar czf all.tgz --exclude=all.tgz --exclude=build.log ./* && find . -type f ! -name all.tgz ! -name summary-suites.txt -delete
