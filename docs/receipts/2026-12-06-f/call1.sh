#!/usr/bin/env bash
# Call 1 on the lent card. Two jobs share it:
# - the recall fixture's training (fixtures/recall/train_recall.py, fla from the carried wheels), in the background,
#   its state (two weight shards and state.json) into $OUT/state and its log into $OUT/train_log.txt;
# - the device cache in blocks of 512 positions (kv_row_offset): this tree is built (run_gpu_suite.sh's build-gpu) and
#   its exactness suites run (ops: the diff table's op and attention cases and gpu_ops; engine), then the table's
#   whole-model cases (`hkv diff --op model`), then the fast prefill (gpu_prefill, `hkv diff --op fast_prefill`);
#   meanwhile the base tree (the position-order cache: .carry/base-files.tgz over this tree) is built into build-base/ for timing.
# Exactness does not depend on what else runs on the card; nothing here is timed against anything.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-f/call1.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back/state" build-base/src /tmp/deps
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
(
  PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 575 python3 fixtures/recall/train_recall.py --out "$back/state" \
    --export-dir /tmp/export --deadline-s 550 --post-reserve-s 90 --end-eval-depths 65536,261889 \
    --end-eval-trials 2 > "$back/train_log.txt" 2>&1
  echo "training: rc=$?" >> "$back/train_log.txt"
) &
trainpid=$!
# the base tree: this tree with the code files the layout change touched at their base versions (.carry/base-files.tgz)
tar cf - --exclude=./build-gpu --exclude=./build-base --exclude=./.carry --exclude=./.whl . | tar xf - -C build-base/src
tar xzf .carry/base-files.tgz -C build-base/src
for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
here=$(pwd)
(
  while [[ ! -x build-gpu/hkv || -n $(pgrep -f "cmake --build build-gpu") ]]; do sleep 2; done
  t=$SECONDS
  cmake -S build-base/src -B build-base/build -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DHKV_DEPS_PREFIX=/tmp/deps/usr > /tmp/base-configure.log 2>&1 &&
    cmake --build build-base/build -j16 --target hkv > /tmp/base-build.log 2>&1
  echo "base build: rc=$?, $((SECONDS - t)) s" > /tmp/base-build.txt
) &
basepid=$!
OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh run1 ops engine
cd "$here" || exit 1
t=$SECONDS
timeout 150 build-gpu/hkv diff --op model > /tmp/hkv-back/diff-model.log 2>&1
echo "hkv diff --op model: rc=$?, $(tail -1 /tmp/hkv-back/diff-model.log), $((SECONDS - t)) s" | tee -a /tmp/run-summary.txt
HKV_PREFILL_BENCH_ARGS="--tokens 4096 --kv-cache q4h" HKV_PREFILL_BENCH_LIMIT=40 HKV_PREFILL_DIFF_LIMIT=100 \
  OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh run2 prefill
wait $basepid
{
  cat /tmp/hkv-back/run1-summary.txt /tmp/hkv-back/run2-summary.txt /tmp/run-summary.txt /tmp/base-build.txt
} > "$back/call1-summary.txt" 2>&1
wait $trainpid
tail -40 "$back/train_log.txt"
tar czf "$back/call1-logs.tgz" -C /tmp hkv-back base-build.log 2>/dev/null
echo "== summary"
cat "$back/call1-summary.txt"
