#!/usr/bin/env bash
# Call 1 on the lent card. Training of the recall fixture, warm-started from its committed bf16 export (the 183-step
# model; the fp32 state it was rounded from is not kept between sessions), at 65,536 contexts x 4 rows, learning rate
# on a cosine from 1.9e-4 to 1e-4 over this call's HKV_TRAIN_S seconds (default 270; 0: no training, export or gate),
# 8 warm-up steps, data seed 11 (the seed 8 stream is the one call 1 of 2026-12-06 trained on). The engine builds
# meanwhile. After training: the ops
# stage (gpu_ops and the diff table's cases against the oracle: the chain's forms, and the ring attention kernel,
# HKV_ATTN_Q4H_FORM=9, among them), the q4h decode attention alone with the bulk kernel (form 8, the default) and the
# ring kernel (form 9), one process a form, twice each, interleaved (HKV_FORMS, HKV_ATTN_DEPTHS: other forms and
# depths); last the new model's gate at 262K in q4h.
# The exports are written into fixtures/recall here and kept in build-gpu/recall-export for call 2 (the gate).
# Back: the state shards, the two model files, misc.tgz (state.json, configs, the logs), the ops summary and the bench.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-b/call1.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back" /tmp/deps /tmp/state /tmp/misc
(
  for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
  cmake -S . -B build-gpu -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_STANDARD=17 \
    -DCMAKE_CUDA_FLAGS=-lineinfo -DHKV_DEPS_PREFIX=/tmp/deps/usr && nice cmake --build build-gpu -j12 --target hkv hkv_gpu_tests
) > /tmp/misc/build.log 2>&1 &
build=$!
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee /tmp/misc/card.txt
train_s=${HKV_TRAIN_S:-270}
t=$SECONDS
if ((train_s > 0)); then
  PYTHONUNBUFFERED=1 timeout $((train_s + 60)) python3 fixtures/recall/train_recall.py --init fixtures/recall/hf \
    --out /tmp/state --export-dir fixtures/recall --no-fla --deadline-s $((train_s + 45)) --post-reserve-s 25 \
    --plan-s "$train_s" --lr 1.9e-4 --min-lr-frac 0.5263 --warmup 8 --seed 11 --phases 65536x4:1 --check-every-s 0 \
    --end-eval-depths "" > /tmp/misc/train_log.txt 2>&1
  echo "training: rc=$?, $((SECONDS - t)) s" | tee -a /tmp/misc/train_log.txt
  grep -E "step |trained|exported|rror" /tmp/misc/train_log.txt | tail -14
fi
wait $build
echo "build: rc=$?, done at $((SECONDS - t)) s"
if ((train_s > 0)); then
  mkdir -p build-gpu/recall-export
  cp -r fixtures/recall/hf fixtures/recall/mlx build-gpu/recall-export/
  cp /tmp/state/state-0*.safetensors fixtures/recall/hf/model.safetensors "$back/"
  cp fixtures/recall/mlx/model.safetensors "$back/mlx-model.safetensors"
  cp /tmp/state/state.json /tmp/misc/
  tar czf "$back/misc.tgz" -C /tmp misc
fi
OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh call1 ops
cp /tmp/hkv-back/call1-summary.txt /tmp/hkv-back/call1-logs.tgz "$back/" 2> /dev/null
cat "$back/call1-summary.txt"
for form in ${HKV_FORMS:-8 9 8 9}; do  # (hkv bench takes no --variants with --attention-only: a process a form)
  echo "== HKV_ATTN_Q4H_FORM=$form" >> "$back/call1-bench-attn.txt"
  HKV_ATTN_Q4H_FORM=$form timeout 60 build-gpu/hkv bench --attention-only --kv-cache q4h --reps 10 \
    --depths "${HKV_ATTN_DEPTHS:-32K,128K,256K}" >> "$back/call1-bench-attn.txt" 2>&1
  echo "bench --attention-only, HKV_ATTN_Q4H_FORM=$form: rc=$?" | tee -a "$back/call1-summary.txt"
done
grep -E "^\| q4h|^==" "$back/call1-bench-attn.txt"
if ((train_s > 0)); then
  # the new model's gate at 262K alone (bf16's recall there is what the training is for; call 2 runs every depth)
  t=$SECONDS
  timeout 120 build-gpu/hkv gate --fixture fixtures/recall-gate.json --backend cuda --no-floor --formats q4h \
    --depths 256K --json "$back/call1-gate-256k.json" > "$back/call1-gate-256k.txt" 2>&1
  echo "gate at 262K: rc=$?, $((SECONDS - t)) s" | tee -a "$back/call1-gate-256k.txt"
  tail -20 "$back/call1-gate-256k.txt"
fi
