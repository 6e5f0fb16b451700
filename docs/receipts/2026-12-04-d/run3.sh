#!/usr/bin/env bash
# Session 33's plan, the third call (after run1.sh and run2.sh pass): ncu over the q4h decode attention at 262K on
# session 32's tree (the slim kernel with q4h's integer scores and integer values, and the merge): issue activity,
# occupancy, DRAM and the largest stalls (cuda/profile_stalls.sh), the step PERFORMANCE.md names next for #6's
# attention goal. Compare with session 30's run 5 (docs/receipts/s30/run5-stalls.log: 252.5 µs, issue active 64%,
# not_selected 1.17, long_scoreboard 1.13). usage: bash docs/receipts/s33/run3.sh
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
HKV_STALLS_PARTS=attn HKV_STALLS_ATTN="--depths 262144 --kv-cache q4h" HKV_STALLS_LIMIT=200 cuda/run_gpu_suite.sh stalls
rm -f "$OUT/configure.log" "$OUT/build.log"
