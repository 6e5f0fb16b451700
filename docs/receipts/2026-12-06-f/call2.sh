#!/usr/bin/env bash
# Call 2 on the lent card (warm after call1.sh, or fresh: then both trees are built here first):
# - the recall fixture: fixtures/recall/hf and mlx exported from the training state carried in .carry/state
#   (train_recall.py --export-only; they come back as $OUT/recall/), then the engine's fidelity gate on it
#   (fixtures/recall-gate.json) with the recall row, at the depths in HKV_GATE_DEPTHS;
# - decode speed of this tree (the device cache in blocks of 512 positions) against the base tree (position order,
#   build-base/), the two in turn, two rounds: q4h at 1K and 256K with the attention kernels alone, bf16 at 1K.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-f/call2.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back/recall" build-base/src /tmp/deps
for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
t=$SECONDS
python3 fixtures/recall/train_recall.py --resume .carry/state --export-only --out fixtures/recall > /tmp/export.log 2>&1
echo "export: rc=$?, $((SECONDS - t)) s" | tee "$back/call2-summary.txt"
tail -3 /tmp/export.log | tee -a "$back/call2-summary.txt"
cp -r fixtures/recall/hf fixtures/recall/mlx "$back/recall/" 2>/dev/null
if [[ ! -x build-base/build/hkv ]]; then
  tar cf - --exclude=./build-gpu --exclude=./build-base --exclude=./.carry --exclude=./.whl . | tar xf - -C build-base/src
  tar xzf .carry/base-files.tgz -C build-base/src
  (cmake -S build-base/src -B build-base/build -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DHKV_DEPS_PREFIX=/tmp/deps/usr > /tmp/base-configure.log 2>&1 &&
    cmake --build build-base/build -j8 --target hkv > /tmp/base-build.log 2>&1) &
fi
t=$SECONDS
cmake -S . -B build-gpu -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_STANDARD=17 -DCMAKE_CUDA_FLAGS=-lineinfo \
  -DHKV_DEPS_PREFIX=/tmp/deps/usr > /tmp/configure.log 2>&1 && cmake --build build-gpu -j16 --target hkv > /tmp/build.log 2>&1
echo "build: rc=$?, $((SECONDS - t)) s" | tee -a "$back/call2-summary.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$back/call2-summary.txt"
t=$SECONDS
timeout "${HKV_GATE_LIMIT:-240}" build-gpu/hkv gate --fixture fixtures/recall-gate.json --backend cuda --no-floor \
  --depths "${HKV_GATE_DEPTHS:-1K,8K,32K,64K,128K,256K}" --json "$back/gate-recall-cuda.json" \
  > /tmp/gate.log 2>&1
echo "gate: rc=$?, $((SECONDS - t)) s" | tee -a "$back/call2-summary.txt"
grep -E "^(fp8|q4h|recall|gate)" /tmp/gate.log | tee -a "$back/call2-summary.txt"
wait
[[ -x build-base/build/hkv ]] || { echo "no base build"; tail -20 /tmp/base-build.log; }
bin_of() { if [[ $1 == base ]]; then echo build-base/build/hkv; else echo build-gpu/hkv; fi; }
for round in 1 2; do
  for tree in new base; do
    for args in "--depths 1K,256K --kv-cache q4h --attention" "--depths 1K --kv-cache bf16"; do
      # shellcheck disable=SC2086
      "$(bin_of $tree)" bench $args --tokens 16 > /tmp/ab.log 2>&1
      echo "== $tree round $round: $args (exit $?)"
      grep -E "^\| (bf16|q4h)|copy bandwidth|on NVIDIA" /tmp/ab.log
      cat /tmp/ab.log >> "/tmp/ab-$tree.log"
    done
  done
done 2>&1 | tee "$back/ab-summary.txt"
tar czf "$back/call2-logs.tgz" -C /tmp gate.log ab-new.log ab-base.log export.log build.log 2>/dev/null
