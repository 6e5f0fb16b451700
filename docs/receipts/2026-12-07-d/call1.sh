#!/usr/bin/env bash
# Call 1 on the lent card: a q4h token with the scores on the tensor cores, and the recall fixture trained at its
# whole window.
#   1. training: 262,144 tokens x 1 row from the committed bf16 export (data seed 12), HKV_TRAIN_S seconds (default
#      220), learning rate 1.5e-4 to 7.5e-5 on a cosine, 4 warm-up steps; the engine builds meanwhile;
#   2. `hkv bench` q4h at 1K, 32K, 128K and 256K, 16 tokens, one process with HKV_ATTN_Q4H_FORM=8 and one with 10;
#   3. the gate at 256K in q4h on the new export (bf16's recall is its own column).
# Back: the logs, state.json and the two exported model files.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-d/call1.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
s="$back/call1-summary.txt"
mkdir -p "$back" /tmp/deps /tmp/state1
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; date -u +%FT%TZ; } > "$s"
for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
{ cmake -S . -B build-gpu -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_STANDARD=17 \
    -DHKV_DEPS_PREFIX=/tmp/deps/usr && nice cmake --build build-gpu -j12 --target hkv; } > "$back/call1-build.log" 2>&1 &
build=$!
t=${HKV_TRAIN_S:-220}
PYTHONUNBUFFERED=1 timeout $((t + 90)) python3 fixtures/recall/train_recall.py --init fixtures/recall/hf --no-fla \
  --phases 262144x1:1 --seed 12 --out /tmp/state1 --export-dir fixtures/recall \
  --deadline-s $((t + 60)) --post-reserve-s 30 --plan-s "$t" --lr 1.5e-4 --min-lr-frac 0.5 --warmup 4 \
  --check-every-s 0 --end-eval-depths "" > "$back/call1-train-log.txt" 2>&1
echo "training: rc=$?" | tee -a "$s"
grep -E "step |trained|exported|rror" "$back/call1-train-log.txt" | tail -6 | tee -a "$s"
cp /tmp/state1/state.json "$back/call1-state.json" 2> /dev/null
cp fixtures/recall/hf/model.safetensors "$back/call1-hf-model.safetensors"
cp fixtures/recall/mlx/model.safetensors "$back/call1-mlx-model.safetensors"
wait $build
echo "build: rc=$?" | tee -a "$s"
for form in 8 10; do
  echo "== HKV_ATTN_Q4H_FORM=$form" >> "$back/call1-bench.txt"
  HKV_ATTN_Q4H_FORM=$form timeout 60 build-gpu/hkv bench --depths 1K,32K,128K,256K --kv-cache q4h --tokens 16 \
    >> "$back/call1-bench.txt" 2>&1
  echo "bench q4h, form $form: rc=$?" | tee -a "$s"
done
grep -E "^==|^\| " "$back/call1-bench.txt" | tee -a "$s"
timeout 150 build-gpu/hkv gate --fixture fixtures/recall-gate.json --backend cuda --no-floor --formats q4h \
  --depths 256K --json "$back/call1-gate.json" > "$back/call1-gate.txt" 2>&1
echo "gate at 262K: rc=$?" | tee -a "$s"
grep -E "^q4h|recalled|gate:" "$back/call1-gate.txt" | tee -a "$s"
xz -9 "$back/call1-gate.json"
