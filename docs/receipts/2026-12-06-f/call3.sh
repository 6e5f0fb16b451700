#!/usr/bin/env bash
# Call 3 on the lent card: the cache in blocks for q4h alone (kv_block: bf16 and fp8 back in position order, where
# call 2 measured them faster). Builds this tree and the base tree (position order for every format: the files the
# layout change touched, .carry/base-files.tgz, over this tree) at once, runs the op cases (ops), times both trees in
# turn, two rounds (q4h at 1K and 256K with attention alone, bf16 and fp8 at 1K), then gpu_engine and the whole-model
# diff cases as time allows (HKV_CALL3_ENGINE=0: not these; HKV_CALL3_ROUNDS: the rounds, 2).
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-f/call3.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back" build-base/src /tmp/deps
for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
rm -rf build-base/src && mkdir -p build-base/src
tar cf - --exclude=./build-gpu --exclude=./build-base --exclude=./.carry --exclude=./.whl . | tar xf - -C build-base/src
tar xzf .carry/base-files.tgz -C build-base/src
(cmake -S build-base/src -B build-base/build -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DHKV_DEPS_PREFIX=/tmp/deps/usr > /tmp/base-configure.log 2>&1 &&
  cmake --build build-base/build -j6 --target hkv > /tmp/base-build.log 2>&1; echo "base build: rc=$?" > /tmp/base.txt) &
OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh run3 ops
cp /tmp/hkv-back/run3-summary.txt "$back/call3-summary.txt"
wait
cat /tmp/base.txt >> "$back/call3-summary.txt"
bin_of() { if [[ $1 == base ]]; then echo build-base/build/hkv; else echo build-gpu/hkv; fi; }
for round in $(seq 1 "${HKV_CALL3_ROUNDS:-2}"); do
  for tree in new base; do
    for args in "--depths 1K,256K --kv-cache q4h --attention" "--depths 1K --kv-cache bf16,fp8 --attention"; do
      # shellcheck disable=SC2086
      "$(bin_of $tree)" bench $args --tokens 16 > /tmp/ab.log 2>&1
      echo "== $tree round $round: $args (exit $?)"
      grep -E "^\| (bf16|fp8|q4h)|copy bandwidth|on NVIDIA" /tmp/ab.log
      cat /tmp/ab.log >> "/tmp/ab-$tree.log"
    done
  done
done 2>&1 | tee "$back/ab-summary.txt"
if [[ ${HKV_CALL3_ENGINE:-1} != 0 ]]; then  # else the op cases and the times alone
  OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh run4 engine
  cat /tmp/hkv-back/run4-summary.txt >> "$back/call3-summary.txt"
  t=$SECONDS
  timeout "${HKV_DIFF_LIMIT:-140}" build-gpu/hkv diff --op model > /tmp/diff-model.log 2>&1
  echo "hkv diff --op model: rc=$?, $(tail -1 /tmp/diff-model.log), $((SECONDS - t)) s" | tee -a "$back/call3-summary.txt"
fi
tar czf "$back/call3-logs.tgz" -C /tmp hkv-back ab-new.log ab-base.log diff-model.log base-build.log 2>/dev/null
cat "$back/call3-summary.txt"
