#!/usr/bin/env bash
# Call 4 on the lent card: q4h's value weights W held in 14 bits (two signed bytes, one mma.sync a tile) instead of 22
# (three, two mma.sync a tile), a study of ARITHMETIC.md §6 step 3 (w14/w14.patch: the oracle, the engine and their
# tests). Applies the patch to this tree and builds it (run_gpu_suite.sh's build-gpu), runs the ops stage (the diff
# table's attention cases against the patched oracle); meanwhile builds the base tree (.carry/base.tgz: this tree
# without the patch). Then the attention alone and a q4h token at 128K and 262K, base and w14 in turn, two rounds.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-d/call4.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back" /tmp/base /tmp/deps
tar xzf .carry/base.tgz -C /tmp/base
for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
git apply docs/receipts/2026-12-07-d/w14/w14.patch || { echo "w14.patch does not apply" | tee "$back/call4-summary.txt"; exit 1; }
(
  t=$SECONDS
  cmake -S /tmp/base -B /tmp/base/build-gpu -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_STANDARD=17 \
    -DHKV_DEPS_PREFIX=/tmp/deps/usr > "$back/base-configure.log" 2>&1 &&
    nice cmake --build /tmp/base/build-gpu -j8 --target hkv > "$back/base-build.log" 2>&1
  echo "base build: rc=$?, $((SECONDS - t)) s" > "$back/base-build.txt"
) &
basepid=$!
OUT=$back bash docs/receipts/2026-12-06-a/run.sh call4 ops
wait $basepid
cat "$back/base-build.txt" | tee -a "$back/call4-summary.txt"
for round in 1 2; do
  for tree in base w14; do
    bin=build-gpu/hkv
    [[ $tree == base ]] && bin=/tmp/base/build-gpu/hkv
    echo "== $tree, round $round" >> "$back/call4-bench.txt"
    timeout 60 $bin bench --attention-only --kv-cache q4h --reps 10 --depths 131072,262144 >> "$back/call4-bench.txt" 2>&1
    timeout 60 $bin bench --depths 128K,256K --kv-cache q4h --tokens 16 >> "$back/call4-bench.txt" 2>&1
    echo "bench $tree, round $round: rc=$?" | tee -a "$back/call4-summary.txt"
  done
done
grep -E "^==|^\| q4h" "$back/call4-bench.txt" | tee -a "$back/call4-summary.txt"
