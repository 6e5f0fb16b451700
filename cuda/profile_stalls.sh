#!/usr/bin/env bash
# Why a kernel runs below the floor: ncu's issue activity, occupancy, DRAM throughput and warp stall reasons
# for the exact MLX4 matvec (every 27B decode shape, from `hkv bench-ops`) and the decode attention's chunk
# and merge kernels (q4h and bf16, Auto's shape, 1K and 32K, or HKV_STALLS_ATTN's rows, from `hkv bench
# --attention-only`), and the small kernels of a 1K q4h decode token (`hkv bench`, no graphs). One line per launch
# shape:
#   kernel, grid, µs, issue active % (of peak, per active cycle), warps active % (achieved occupancy),
#   DRAM % (of peak), then the four largest stall reasons in warps per issued instruction.
# usage: cuda/profile_stalls.sh [HKV_BINARY]   (writes $OUT/ncu-stalls-*.csv)
set -euo pipefail
bin=${1:-build-gpu/hkv}
out=${OUT:-/tmp}
metrics="gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active"
metrics+=",sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed"
metrics+=",regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
# --clock-control none: the clocks the benches run at
ncu --clock-control none --metrics "$metrics" --csv -k 'regex:matvec_mlx4' "$bin" bench-ops --reps 1 \
  > "$out/ncu-stalls-matvec.csv" 2> "$out/ncu-stalls-matvec.err" || { tail -5 "$out/ncu-stalls-matvec.err"; exit 1; }
# HKV_STALLS_ATTN="--depths 262144 --kv-cache q4h" picks other rows (one run is 16 layers' chunk and merge launches)
# shellcheck disable=SC2086
ncu --clock-control none --metrics "$metrics" --csv -k 'regex:attn_' "$bin" bench --attention-only \
  ${HKV_STALLS_ATTN:---depths 1024,32768 --kv-cache q4h,bf16} --attn-shape auto --reps 1 \
  > "$out/ncu-stalls-attn.csv" 2> "$out/ncu-stalls-attn.err" || { tail -5 "$out/ncu-stalls-attn.err"; exit 1; }
# The matvec and attention table first, so that it is printed even if the next part runs past the caller's limit.
python3 "$(dirname "$0")/../scripts/ncu_stalls.py" "$out/ncu-stalls-matvec.csv" "$out/ncu-stalls-attn.csv"
# the small kernels of a decode token (1K, q4h): the DeltaNet, SwiGLU and its records, packing (each 1.5–10 µs a
# launch under ncu, 1.6 ms of a token together; docs/RESULTS.md §2); 120 launches, about half a token's (240 ran
# past 3 minutes, after the two parts above had taken one, H200, 2026-11-30). Its own limit (HKV_STALLS_SMALL_LIMIT,
# 150 s): in session 13 run 2 it was still running when the suite's 240-second limit stopped the script.
if timeout "${HKV_STALLS_SMALL_LIMIT:-150}" ncu --clock-control none --metrics "$metrics" --csv \
  -k 'regex:add_rmsnorm|recurrence|conv_kernel|silu_mul_xq|xq_records|l2norm_heads|kv_pack|attn_prep|prep_pack' \
  --launch-skip 400 --launch-count 120 "$bin" bench --depths 1024 --kv-cache q4h --tokens 2 --graphs off \
  > "$out/ncu-stalls-small.csv" 2> "$out/ncu-stalls-small.err"; then
  python3 "$(dirname "$0")/../scripts/ncu_stalls.py" "$out/ncu-stalls-small.csv"
else
  echo "error: the small kernels' part did not finish (HKV_STALLS_SMALL_LIMIT=${HKV_STALLS_SMALL_LIMIT:-150} s)"
  tail -5 "$out/ncu-stalls-small.err"
fi
