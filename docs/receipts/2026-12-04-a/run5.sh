#!/usr/bin/env bash
# 2026-12-04-a run 5 (H200): ncu over the q4h decode attention at 262K on the landing tree (the slim kernel with q4h's
# integer scores, and the merge): issue activity, occupancy, DRAM and the largest stalls (cuda/profile_stalls.sh).
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
HKV_STALLS_PARTS=attn HKV_STALLS_ATTN="--depths 262144 --kv-cache q4h" HKV_STALLS_LIMIT=200 cuda/run_gpu_suite.sh stalls
rm -f "$OUT/configure.log" "$OUT/build.log"
