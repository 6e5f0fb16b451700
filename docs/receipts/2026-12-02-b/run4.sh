#!/usr/bin/env bash
# 2026-12-02-b run 4 (H200): the tree with Auto's new slim rule (slim from one chunk block a multiprocessor, q4h keeping
# narrow-v2 for 1.85P <= b <= 2P; HKV_ATTN_SLIM_FROM=3 the rule before) and the record of the shape taken, checked by
# gpu_ops' attention case for every Auto row. The suites; the A-B of the rule against the old one, against slim below
# one wave too (HKV_ATTN_SLIM_FROM=0, an experiment) and against fp8's rolled loop (FROLL=2) where slim is new; the
# bench table.
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
s=$OUT/summary-suites.txt
cuda/run_gpu_suite.sh ops engine
cp "$OUT/summary.txt" "$s"
echo "--- attention lines not OK: $(grep '^attention(' "$OUT/gpu_ops.log" | grep -vc ': OK$') of $(grep -c '^attention(' "$OUT/gpu_ops.log")" | tee -a "$s"
grep '^attention(' "$OUT/gpu_ops.log" | grep -v ': OK$' | head -10 | tee -a "$s"
HKV_AB="default;HKV_ATTN_SLIM_FROM=3;HKV_ATTN_SLIM_FROM=0;HKV_ATTN_SLIM_FROLL=2" HKV_BENCH_LIMIT=240 \
  HKV_BENCH_ARGS="--depths 8192,12288,16384,16896,24576,32768,34816,40960,49152 --kv-cache q4h,fp8 --tokens 8 --rounds 5" \
  cuda/run_gpu_suite.sh bench-ab
cat "$OUT/summary.txt" >> "$s"
HKV_BENCH_ARGS="--depths 1024,8192,16384,32768,49152,65536,131072,262144 --kv-cache bf16,fp8,q4h --tokens 8" \
  HKV_BENCH_LIMIT=240 cuda/run_gpu_suite.sh bench
cat "$OUT/summary.txt" >> "$s"
rm -f "$OUT/summary.txt" "$OUT/configure.log"
cd "$OUT" && tar czf all.tgz --exclude=all.tgz --exclude=build.log ./* && find . -type f ! -name all.tgz ! -name summary-suites.txt -delete
