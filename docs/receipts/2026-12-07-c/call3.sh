#!/usr/bin/env bash
# Call 3 on the lent card: the recall fixture trained at its whole window, 262,144 tokens × 1 row, so that a lookup
# 131K back (the passphrase planted at 130,944 and asked for at 261,889, which every model so far has missed) is
# among what it trains on. First `--probe` of that shape (4 steps: ms a step and peak memory, nothing saved); then, if
# it fits, HKV_TRAIN_S seconds (default 300) from the committed bf16 export, learning rate 1.5e-4 to 7.5e-5 on a
# cosine, 4 warm-up steps, data seed 12, while the engine builds; then the gate at 128K and 262K in q4h on the
# export (bf16's recall is its own column). Back: the logs, state.json and the two exported model files.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-c/call3.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back" /tmp/deps /tmp/state3
for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
{ cmake -S . -B build-gpu -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_STANDARD=17 \
    -DHKV_DEPS_PREFIX=/tmp/deps/usr && nice cmake --build build-gpu -j12 --target hkv; } > "$back/call3-build.log" 2>&1 &
build=$!
train=(python3 fixtures/recall/train_recall.py --init fixtures/recall/hf --no-fla --phases 262144x1:1 --seed 12)
PYTHONUNBUFFERED=1 timeout 150 "${train[@]}" --out /tmp/state3 --probe > "$back/call3-probe.txt" 2>&1
echo "the probe: rc=$?" | tee -a "$back/call3-probe.txt"
grep -E "probe |rror" "$back/call3-probe.txt" | tail -4
s=${HKV_TRAIN_S:-300}
if grep -qE "probe 262144x1: [0-9]+ ms" "$back/call3-probe.txt"; then
  PYTHONUNBUFFERED=1 timeout $((s + 90)) "${train[@]}" --out /tmp/state3 --export-dir fixtures/recall \
    --deadline-s $((s + 60)) --post-reserve-s 30 --plan-s "$s" --lr 1.5e-4 --min-lr-frac 0.5 --warmup 4 \
    --check-every-s 0 --end-eval-depths "" > "$back/call3-train-log.txt" 2>&1
  echo "training: rc=$?" | tee -a "$back/call3-train-log.txt"
  grep -E "step |trained|exported|rror" "$back/call3-train-log.txt" | tail -8
  cp /tmp/state3/state.json "$back/call3-state.json"
  cp fixtures/recall/hf/model.safetensors "$back/call3-hf-model.safetensors"
  cp fixtures/recall/mlx/model.safetensors "$back/call3-mlx-model.safetensors"
fi
wait $build
echo "build: rc=$?"
timeout 200 build-gpu/hkv gate --fixture fixtures/recall-gate.json --backend cuda --no-floor --formats q4h \
  --depths 128K,256K --json "$back/call3-gate.json" > "$back/call3-gate.txt" 2>&1
echo "gate at 128K and 262K: rc=$?" | tee -a "$back/call3-gate.txt"
grep -E "^q4h|recalled|gate:" "$back/call3-gate.txt"
