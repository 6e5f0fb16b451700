#!/usr/bin/env bash
# Call 3 on the lent card: the recall fixture trained further from the state of 2026-12-06-f (carried in .carry/state),
# at 32K and 64K contexts, with transformers' torch fallback (fla 0.6.0 refuses this card's triton), then exported.
# Back: the state (two shards, state.json) in $OUT/state, the bf16 and MLX exports in $OUT/recall/{hf,mlx}, the log.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-g/call3.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back/state" "$back/recall"
PYTHONUNBUFFERED=1 timeout 580 python3 fixtures/recall/train_recall.py --resume .carry/state --out "$back/state" \
  --export-dir "$back/recall" --no-fla --deadline-s "${HKV_TRAIN_S:-560}" --post-reserve-s 70 \
  --phases "32768x8:0.3,65536x4:0.7" --check-every-s 0 --end-eval-depths 65536,261889 --end-eval-trials 2 \
  > "$back/train_log.txt" 2>&1
echo "training: rc=$?" | tee -a "$back/train_log.txt"
tail -25 "$back/train_log.txt"
