#!/usr/bin/env bash
# 2026-12-04-d's plan, the third call (after run1.sh and run2.sh pass): ncu over the q4h decode attention at 262K on
# 2026-12-04-c's tree (the slim kernel with q4h's integer scores and integer values, and the merge): issue activity,
# occupancy, DRAM and the largest stalls (cuda/profile_stalls.sh), the step PERFORMANCE.md names next for #6's
# attention goal. Compare with 2026-12-04-a's run 5 (docs/receipts/2026-12-04-a/run5-stalls.log: 252.5 µs, issue active 64%,
# not_selected 1.17, long_scoreboard 1.13). usage: bash docs/receipts/2026-12-04-d/run3.sh
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
HKV_STALLS_PARTS=attn HKV_STALLS_ATTN="--depths 262144 --kv-cache q4h" HKV_STALLS_LIMIT=200 cuda/run_gpu_suite.sh stalls
rm -f "$OUT/configure.log" "$OUT/build.log"
