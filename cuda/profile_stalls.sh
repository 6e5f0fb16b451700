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
# HKV_STALLS_PARTS: which parts run, "matvec attn small" by default (the small kernels' part alone takes under a minute
# on the H200)
parts=" ${HKV_STALLS_PARTS:-matvec attn small} "
# --clock-control none: the clocks the benches run at
if [[ $parts == *" matvec "* ]]; then
ncu --clock-control none --metrics "$metrics" --csv -k 'regex:matvec_mlx4' "$bin" bench-ops --reps 1 \
  > "$out/ncu-stalls-matvec.csv" 2> "$out/ncu-stalls-matvec.err" || { tail -5 "$out/ncu-stalls-matvec.err"; exit 1; }
python3 "$(dirname "$0")/../scripts/ncu_stalls.py" "$out/ncu-stalls-matvec.csv"
fi
if [[ $parts == *" attn "* ]]; then
# HKV_STALLS_ATTN="--depths 262144 --kv-cache q4h" picks other rows (one run is 16 layers' chunk and merge launches)
# shellcheck disable=SC2086
ncu --clock-control none --metrics "$metrics" --csv -k 'regex:attn_' "$bin" bench --attention-only \
  ${HKV_STALLS_ATTN:---depths 1024,32768 --kv-cache q4h,bf16} --attn-shape auto --reps 1 \
  > "$out/ncu-stalls-attn.csv" 2> "$out/ncu-stalls-attn.err" || { tail -5 "$out/ncu-stalls-attn.err"; exit 1; }
# Each part's table as it ends, so that it is printed even if a later part runs past the caller's limit.
python3 "$(dirname "$0")/../scripts/ncu_stalls.py" "$out/ncu-stalls-attn.csv"
fi
# the small kernels of a decode token (1K, q4h) that the fused default path launches: the DeltaNet recurrence (conv
# and norms inside), SwiGLU and its records, the attention's prep-and-pack (each 2–9 µs a launch, about 0.7 ms of a
# token together; docs/RESULTS.md §2); 30 launches past the first 200. With these metrics (several replay passes a
# launch) 120 launches past 400 write nothing within 240 s, while 30 past 200 finish. Its own limit
# (HKV_STALLS_SMALL_LIMIT, 150 s); ncu writes the CSV only at the end.
if [[ $parts != *" small "* ]]; then
  :
elif timeout "${HKV_STALLS_SMALL_LIMIT:-150}" ncu --clock-control none --metrics "$metrics" --csv \
  -k 'regex:recurrence_split|silu_mul_xq|prep_pack' \
  --launch-skip 200 --launch-count 30 "$bin" bench --depths 1024 --kv-cache q4h --tokens 1 --graphs off \
  > "$out/ncu-stalls-small.csv" 2> "$out/ncu-stalls-small.err"; then
  python3 "$(dirname "$0")/../scripts/ncu_stalls.py" "$out/ncu-stalls-small.csv"
else
  echo "error: the small kernels' part did not finish (HKV_STALLS_SMALL_LIMIT=${HKV_STALLS_SMALL_LIMIT:-150} s)"
  tail -5 "$out/ncu-stalls-small.err"
fi
