#!/usr/bin/env bash
# Where a decode token's time goes: every kernel of `hkv bench` (27B MLX4 shape, batch 1, no graphs) timed
# by ncu (gpu__time_duration, clocks left alone), summed by kernel and divided by the tokens profiled.
# usage: cuda/profile_token.sh [HKV_BINARY] [CACHE_FORMAT] [DEPTH]   (writes $OUT/ncu-token.csv)
set -euo pipefail
bin=${1:-build-gpu/hkv}
kv=${2:-bf16}
depth=${3:-1024}
out=${OUT:-/tmp}/ncu-token.csv
# Every launch of the bench's tokens (its warm-up ones too) but the weight generator's and the cache filler's,
# divided by the tokens (embed_kernel launches): whole tokens, whatever a token's launch count (a window of
# launches cut tokens short once the decode fusion changed it).
ncu --clock-control none --metrics gpu__time_duration.sum --csv -k 'regex:^(?!bf16_kernel|mlx4_kernel|kv_fill)' \
  "$bin" bench --depths "$depth" --kv-cache "$kv" --tokens 2 --graphs off \
  > "$out" 2> "${out%.csv}.err" || { tail -5 "${out%.csv}.err"; exit 1; }
python3 "$(dirname "$0")/../scripts/ncu_by_kernel.py" "$out" --per embed_kernel --what "decode token"
