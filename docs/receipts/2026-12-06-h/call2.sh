#!/usr/bin/env bash
# Call 2 on the lent card: the recall fixture trained further from the state of this session's first training call
# (carried in .carry/state), at 65,536 contexts, its learning rate on a fresh cosine (--plan-s 1180 over the 880 s
# already trained) with 8 warm-up steps; exported into fixtures/recall while the engine builds on the CPU; then the
# engine's gate on the new exports at every depth.
# Back: the state shards and the two model files, and misc.tgz (state.json, configs, the training log, the gate's
# report and log).
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-h/call2.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back" /tmp/deps /tmp/state /tmp/misc
(
  for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
  cmake -S . -B build-gpu -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_STANDARD=17 \
    -DHKV_DEPS_PREFIX=/tmp/deps/usr && nice cmake --build build-gpu -j12 --target hkv
) > /tmp/misc/build.log 2>&1 &
build=$!
PYTHONUNBUFFERED=1 timeout 330 python3 fixtures/recall/train_recall.py --resume .carry/state --out /tmp/state \
  --export-dir fixtures/recall --no-fla --deadline-s "${HKV_TRAIN_S:-300}" --post-reserve-s 25 --plan-s 1180 \
  --warmup 8 --phases "65536x4:1" --check-every-s 0 --end-eval-depths "" > /tmp/misc/train_log.txt 2>&1
echo "training: rc=$?" | tee -a /tmp/misc/train_log.txt
tail -8 /tmp/misc/train_log.txt
wait $build
echo "build: rc=$?"
t=$SECONDS
timeout 250 build-gpu/hkv gate --fixture fixtures/recall-gate.json --backend cuda --no-floor \
  --depths 1K,8K,32K,64K,128K,256K --json /tmp/misc/gate-recall-cuda.json > /tmp/misc/gate-recall-cuda.txt 2>&1
echo "gate: rc=$?, $((SECONDS - t)) s" | tee -a /tmp/misc/gate-recall-cuda.txt
cp /tmp/state/state-0*.safetensors fixtures/recall/hf/model.safetensors "$back/"
cp fixtures/recall/mlx/model.safetensors "$back/mlx-model.safetensors"
cp /tmp/state/state.json /tmp/misc/
cp fixtures/recall/hf/config.json /tmp/misc/hf-config.json
cp fixtures/recall/mlx/config.json /tmp/misc/mlx-config.json
tar czf "$back/misc.tgz" -C /tmp misc
tail -30 /tmp/misc/gate-recall-cuda.txt
