#!/usr/bin/env bash
# Call 2 on the lent card: the chain's step forms with each warp's first row groups prefetched whole into L2 while the
# block waits on the step ahead (`ChainPlan::run`'s prefetch_groups). The command line built (only it: the device time
# left is short); `hkv bench-ops --chain --persistent --phases --reps 20`: every form's bytes against the launches' (a
# difference fails the command), then timed, StepsWide at 1, 2, 4 and 8 groups a warp prefetched, and the stamps.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-i/call2.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
t=$SECONDS
mkdir -p /tmp/deps
for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
cmake -S . -B build-gpu -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_STANDARD=17 \
  -DHKV_DEPS_PREFIX=/tmp/deps/usr > /tmp/configure.log 2>&1
cmake --build build-gpu -j16 --target hkv > /tmp/build.log 2>&1 || tail -20 /tmp/build.log
echo "build: $((SECONDS - t)) s" | tee "$back/call2-summary.txt"
timeout 120 build-gpu/hkv bench-ops --chain --persistent --phases --reps 20 > "$back/call2-bench-ops-prefetch.txt" 2>&1
echo "bench-ops --chain --persistent --phases: rc=$?" | tee -a "$back/call2-summary.txt"
grep -E "^\| (default|persistent)" "$back/call2-bench-ops-prefetch.txt" | cut -c1-230
