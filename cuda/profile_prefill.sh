#!/usr/bin/env bash
# Where the fast prefill path's time goes: every kernel of `hkv bench-prefill` (27B MLX4 shape, q4h cache,
# one prompt) timed by ncu (gpu__time_duration, clocks left alone, kernels serialized), summed by kernel.
# The weight generator's kernels are left out. usage: cuda/profile_prefill.sh [HKV_BINARY] [TOKENS]
# (writes $OUT/ncu-prefill.csv; ncu replays every kernel, so keep TOKENS small: 4096, one pass, is about 2,000 kernels with the decode step)
set -euo pipefail
bin=${1:-build-gpu/hkv}
tokens=${2:-4096}
out=${OUT:-/tmp}/ncu-prefill.csv
ncu --clock-control none --metrics gpu__time_duration.sum --csv -k 'regex:^(?!bf16_kernel|mlx4_kernel)' \
  "$bin" bench-prefill --tokens "$tokens" --kv-cache q4h --decode 1 \
  > "$out" 2> "${out%.csv}.err" || { tail -5 "${out%.csv}.err"; exit 1; }
python3 "$(dirname "$0")/../scripts/ncu_by_kernel.py" "$out" --what "fast prefill of $tokens tokens (and 1 decode step)"
