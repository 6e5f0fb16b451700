#!/usr/bin/env bash
# Call 1 on the lent card for the device cache in blocks of 512 positions (kv_row_offset): builds this tree
# (run_gpu_suite.sh's build-gpu) and runs its exactness suites (ops: the diff table's op and attention cases and
# gpu_ops; engine; alloc; prefill: gpu_prefill and `hkv diff --op fast_prefill`), then the table's whole-model cases
# through `hkv diff --op model`; meanwhile it builds the base tree (the position-order cache, .carry/base.tgz) into
# build-base/, which call2.sh times against this tree on the same warm machine.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-f/call1.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back" build-base/src /tmp/deps
tar xzf .carry/base.tgz -C build-base/src
for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
here=$(pwd)
(
  while [[ ! -x build-gpu/hkv || -n $(pgrep -f "cmake --build build-gpu") ]]; do sleep 2; done
  t=$SECONDS
  cmake -S build-base/src -B build-base/build -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DHKV_DEPS_PREFIX=/tmp/deps/usr > "$back/base-configure.log" 2>&1 &&
    cmake --build build-base/build -j16 --target hkv > "$back/base-build.log" 2>&1
  echo "base build: rc=$?, $((SECONDS - t)) s" > "$back/base-build.txt"
) &
basepid=$!
HKV_PREFILL_BENCH_ARGS="--tokens 4096 --kv-cache q4h" OUT=$back \
  bash docs/receipts/2026-12-06-a/run.sh run1 ops engine alloc prefill
cd "$here" || exit 1
t=$SECONDS
timeout 200 build-gpu/hkv diff --op model > "$back/diff-model.log" 2>&1
echo "hkv diff --op model: rc=$?, $(tail -1 "$back/diff-model.log"), $((SECONDS - t)) s" | tee -a "$back/run1-summary.txt"
wait $basepid
cat "$back/base-build.txt" | tee -a "$back/run1-summary.txt"
echo "== summary"
cat "$back/run1-summary.txt"
