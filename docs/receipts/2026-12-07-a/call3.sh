#!/usr/bin/env bash
# Call 3 on the lent card: call 2 again, from the state that the committed exports come from (2026-12-06-h's call 2:
# 183 steps, 1,143 s; call 2 had been carried the 158-step state by mistake), at 65,536 contexts x 4 rows, the shape
# that state was trained at; the learning rate on a cosine over 1,450 s in all (about 1.9e-4 falling to 1e-4 in this
# call), 8 warm-up steps. Exported into fixtures/recall; then the engine's gate at every depth (HKV_GATE_FORMATS, by
# default fp8,q4h; HKV_TRAIN_S, the seconds of training, by default 300).
# Back: the state shards and the two model files, and misc.tgz (state.json, configs, the training log, the gate's
# report and log).
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-a/call3.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back" /tmp/deps /tmp/state /tmp/misc
build=
if [[ ! -x build-gpu/hkv ]]; then
  (
    for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
    cmake -S . -B build-gpu -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_STANDARD=17 \
      -DCMAKE_CUDA_FLAGS=-lineinfo -DHKV_DEPS_PREFIX=/tmp/deps/usr && nice cmake --build build-gpu -j12 --target hkv
  ) > /tmp/misc/build.log 2>&1 &
  build=$!
fi
train() {
  PYTHONUNBUFFERED=1 timeout "$1" python3 fixtures/recall/train_recall.py --resume .carry/state --out /tmp/state \
    --export-dir fixtures/recall --no-fla --deadline-s "$2" --post-reserve-s 25 --plan-s 1450 \
    --warmup 8 --phases "$3:1" --check-every-s 0 --end-eval-depths "" >> /tmp/misc/train_log.txt 2>&1
}
t=$SECONDS
train 330 "${HKV_TRAIN_S:-300}" 65536x4
rc=$?
echo "training: rc=$rc, $((SECONDS - t)) s" | tee -a /tmp/misc/train_log.txt
grep -E "step |trained|exported|error|Error" /tmp/misc/train_log.txt | tail -12
[[ -n $build ]] && { wait $build; echo "build: rc=$?"; }
t=$SECONDS
timeout 250 build-gpu/hkv gate --fixture fixtures/recall-gate.json --backend cuda --no-floor \
  --formats "${HKV_GATE_FORMATS:-fp8,q4h}" --depths 1K,8K,32K,64K,128K,256K --json /tmp/misc/gate-recall-cuda.json > /tmp/misc/gate-recall-cuda.txt 2>&1
echo "gate: rc=$?, $((SECONDS - t)) s" | tee -a /tmp/misc/gate-recall-cuda.txt
cp /tmp/state/state-0*.safetensors fixtures/recall/hf/model.safetensors "$back/"
cp fixtures/recall/mlx/model.safetensors "$back/mlx-model.safetensors"
cp /tmp/state/state.json /tmp/misc/
cp fixtures/recall/hf/config.json /tmp/misc/hf-config.json
cp fixtures/recall/mlx/config.json /tmp/misc/mlx-config.json
tar czf "$back/misc.tgz" -C /tmp misc
tail -30 /tmp/misc/gate-recall-cuda.txt
