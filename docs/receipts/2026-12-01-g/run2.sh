#!/usr/bin/env bash
# 2026-12-01-g run 2 (H200): the landing tree (slim's K scales staged, Auto's slim for q4h too): its suites, its defaults
# against 2026-12-01-f's in one process, the bench table, ncu's bytes of the slim kernel, the sanitizers over the
# attention case in the slim shape.
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
HKV_AB="default;HKV_ATTN_SLIM=2,HKV_ATTN_SLIM_KS=0;HKV_ATTN_SLIM=2;default" \
  HKV_BENCH_ARGS="--depths 65536,131072,262144 --kv-cache q4h,fp8 --tokens 8 --rounds 5" \
  cuda/run_gpu_suite.sh ops engine bench-ab
s=$OUT/summary.txt
cp "$s" "$OUT/summary-suites.txt"
HKV_BENCH_ARGS="--depths 1024,8192,32768,131072,262144 --kv-cache bf16,fp8,q4h --tokens 8" \
  cuda/run_gpu_suite.sh bench
cat "$OUT/summary.txt" >> "$OUT/summary-suites.txt"
s=$OUT/summary-suites.txt
m=dram__bytes_read.sum,gpu__time_duration.sum,l1tex__t_sector_hit_rate.pct
m+=,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,lts__t_sectors_srcunit_tex_op_read.sum
for f in fp8 q4h; do
  for ks in 0 1; do
    HKV_ATTN_SLIM_KS=$ks timeout 120 ncu --clock-control none --cache-control none --metrics "$m" -k regex:attn_slim -c 2 \
      build-gpu/hkv bench --attention-only --depths 262144 --kv-cache $f --attn-shape slim --reps 1 \
      > "$OUT/ncu-slim-$f-ks$ks.txt" 2>&1
    echo "ncu slim $f 262K HKV_ATTN_SLIM_KS=$ks rc=$?" | tee -a "$s"
    grep -E '^ +(dram__bytes|gpu__time|l1tex|lts)' "$OUT/ncu-slim-$f-ks$ks.txt" | sed 's/^ */  /' | tee -a "$s"
  done
done
HKV_TEST_ATTN_SHAPES=slim HKV_SAN_PARALLEL=1 \
  HKV_SAN_RUNS="memcheck:ops:*512-key* racecheck:ops:*512-key* initcheck:ops:*512-key*" \
  cuda/run_gpu_suite.sh sanitize
cat "$OUT/summary.txt" >> "$s"
rm -f "$OUT/summary.txt" "$OUT/configure.log"
# (at most 8 files come back from the lent card: everything in one archive, the summary beside it)
cd "$OUT" && tar czf all.tgz --exclude=all.tgz --exclude=build.log ./* && find . -type f ! -name all.tgz ! -name summary-suites.txt -delete
