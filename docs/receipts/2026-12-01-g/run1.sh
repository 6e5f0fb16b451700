#!/usr/bin/env bash
# 2026-12-01-g run 1 (H200): the landing tree's suites, then slim's K scales staged (HKV_ATTN_SLIM_KS) and slim for q4h
# (HKV_ATTN_SLIM=2) against the defaults: tokens interleaved in one process, the attention alone, ncu's bytes.
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
HKV_AB="default;HKV_ATTN_SLIM_KS=1;HKV_ATTN_SLIM=2;HKV_ATTN_SLIM=2,HKV_ATTN_SLIM_KS=1" \
  HKV_BENCH_ARGS="--depths 65536,131072,262144 --kv-cache q4h,fp8 --tokens 8 --rounds 5" \
  cuda/run_gpu_suite.sh ops engine bench-ab
s=$OUT/summary.txt
for ks in 0 1; do
  HKV_ATTN_SLIM_KS=$ks timeout 120 build-gpu/hkv bench --attention-only --depths 65536,262144 --kv-cache q4h,fp8 \
    --attn-shape slim,narrow-v2 --reps 5 > "$OUT/attn-ks$ks.log" 2>&1
  echo "attention alone HKV_ATTN_SLIM_KS=$ks rc=$?" | tee -a "$s"
  grep -E '^\|' "$OUT/attn-ks$ks.log" | tee -a "$s"
done
m=dram__bytes_read.sum,gpu__time_duration.sum,l1tex__t_sector_hit_rate.pct
m+=,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,lts__t_sectors_srcunit_tex_op_read.sum
for f in fp8 q4h; do
  for ks in 0 1; do
    HKV_ATTN_SLIM_KS=$ks timeout 120 ncu --clock-control none --cache-control none --metrics "$m" -k regex:attn_slim -c 2 \
      build-gpu/hkv bench --attention-only --depths 262144 --kv-cache $f --attn-shape slim --reps 1 \
      > "$OUT/ncu-slim-$f-ks$ks.txt" 2>&1
    echo "ncu slim $f 262K HKV_ATTN_SLIM_KS=$ks rc=$?" | tee -a "$s"
    grep -E 'dram__bytes|gpu__time|hit_rate|sectors' "$OUT/ncu-slim-$f-ks$ks.txt" | tee -a "$s"
  done
done
