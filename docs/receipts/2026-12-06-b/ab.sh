#!/usr/bin/env bash
# The engine before and after its tuning moved into one Tuning value, timed on one card in one call: builds the base
# tree (62ace42, sent as .carry/base.tgz) beside this one's build-gpu, then decodes with each binary in turn, two
# rounds, q4h and bf16 at 1K and q4h at 256K; the tables and the JSON into $back.
# usage (on the device, in the unpacked tree, after run.sh has built build-gpu): bash docs/receipts/2026-12-06-b/ab.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back" /tmp/base
tar xzf ../.carry/base.tgz -C /tmp/base
t=$SECONDS
cmake -S /tmp/base -B /tmp/base/build-gpu -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DHKV_DEPS_PREFIX=/tmp/deps/usr \
  > "$back/ab-configure.log" 2>&1 && cmake --build /tmp/base/build-gpu -j16 --target hkv > "$back/ab-build.log" 2>&1 \
  || { tail -20 "$back/ab-build.log"; exit 1; }
echo "base build: $((SECONDS - t)) s"
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
