#!/usr/bin/env bash
# One call on the lent card for the engine's new structure (cuda/attention/ a kernel a file, one table of op cases,
# reference/sequence.cpp): builds this tree (run_gpu_suite.sh's build-gpu) and runs its exactness suites (ops: the
# diff table's op and attention cases and gpu_ops' kernel-internal checks; engine; alloc), then the table's
# whole-model cases through `hkv diff`; meanwhile builds the base tree (1eecf4c, .carry/base.tgz); then times both
# trees' decode in turn, two rounds (ab.sh).
# usage (on the device, in the unpacked tree): bash docs/receipts/2026-12-06-e/call1.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back" /tmp/base /tmp/deps
tar xzf ../.carry/base.tgz -C /tmp/base
for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
here=$(pwd)
# the suite builds first; the base tree's build starts once build-gpu/hkv exists, beside the tests
(
  while [[ ! -x build-gpu/hkv || -n $(pgrep -f "cmake --build build-gpu") ]]; do sleep 2; done
  t=$SECONDS
  cmake -S /tmp/base -B /tmp/base/build-gpu -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DHKV_DEPS_PREFIX=/tmp/deps/usr > "$back/base-configure.log" 2>&1 &&
    cmake --build /tmp/base/build-gpu -j16 --target hkv > "$back/base-build.log" 2>&1
  echo "base build: rc=$?, $((SECONDS - t)) s" > "$back/base-build.txt"
) &
basepid=$!
OUT=$back bash docs/receipts/2026-12-06-a/run.sh run1 ops engine alloc
cd "$here" || exit 1
t=$SECONDS
for op in model fast_prefill; do
  timeout 240 build-gpu/hkv diff --op "$op" > "$back/diff-$op.log" 2>&1
  echo "hkv diff --op $op: rc=$?, $(tail -1 "$back/diff-$op.log"), $((SECONDS - t)) s" | tee -a "$back/run1-summary.txt"
done
wait $basepid
cat "$back/base-build.txt"
[[ -x /tmp/base/build-gpu/hkv ]] || { tail -20 "$back/base-build.log"; exit 1; }
for round in 1 2; do
  for tree in new base; do
    bin=build-gpu/hkv
    [[ $tree == base ]] && bin=/tmp/base/build-gpu/hkv
    for args in "--depths 1K --kv-cache bf16,q4h" "--depths 256K --kv-cache q4h"; do
      # shellcheck disable=SC2086
      $bin bench $args --tokens 16 > /tmp/ab.log 2>&1
      echo "== $tree round $round: $args (exit $?)"
      grep -E "^\| (bf16|q4h)|copy bandwidth|on NVIDIA" /tmp/ab.log
      cat /tmp/ab.log >> "$back/ab-$tree.log"
    done
  done
done 2>&1 | tee "$back/ab-summary.txt"
echo "== summary"
cat "$back/run1-summary.txt"
