#!/usr/bin/env bash
# Call 5 on the lent card: hkv built alone, then `hkv bench-ops --chain --persistent`: a 27B token's 257 MLX4 decode
# launches as one CUDA graph, and the same steps as one persistent launch (cuda::ChainPlan), its bytes compared with
# the launches' and then timed the same way.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-g/call5.sh
# (The tree of call 5 had the item form alone; the bench now also prints the step form, ChainForm::Steps.)
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back" /tmp/deps
for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
t=$SECONDS
cmake -S . -B build-gpu -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_STANDARD=17 -DCMAKE_CUDA_FLAGS=-lineinfo \
  -DHKV_DEPS_PREFIX=/tmp/deps/usr > /tmp/configure.log 2>&1 && cmake --build build-gpu -j16 --target hkv > /tmp/build.log 2>&1
echo "build: rc=$?, $((SECONDS - t)) s" | tee "$back/call5-summary.txt"
grep -E "error" -A3 /tmp/build.log | head -20
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$back/call5-summary.txt"
timeout 200 build-gpu/hkv bench-ops --chain --persistent --reps 20 > "$back/bench-ops-persistent.txt" 2>&1
echo "bench-ops --chain --persistent: rc=$?" | tee -a "$back/call5-summary.txt"
tail -12 "$back/bench-ops-persistent.txt"
