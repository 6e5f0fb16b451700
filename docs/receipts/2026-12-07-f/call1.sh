#!/usr/bin/env bash
# Call 1 on the lent card: the bulk kernel's Lean forms against form 11, the default, and against the base tree
# (.carry/base.tgz: 6a4511c, whose form 11 has the same machine code as this tree's: sass_equal). Lean: the scores on
# the tensor cores with one code word a lane and the records' planes in pairs (one 16-byte load of A); the values with
# V's codes read in place by ldmatrix, the whole code bytes as tiles, W's bytes from the fma's bits. Form 15 is form
# 11 Lean, 16 form 14 Lean, 17 form 15 with the query's records made once a row and head. Builds both trees (the base
# in the background), runs the ops stage (the diff table, byte for byte with the oracle: every q4h shape and form),
# then the attention alone at 1K, 128K and 262K (base form 11; forms 11, 15, 16, 17), a process each, two rounds; then
# a q4h token at 1K to 262K (base 11; 15); then form 15 in the whole engine (HKV_ATTN_Q4H_FORM=15: gpu_engine,
# hkv generate against the oracle, hkv diff --op model).
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-f/call1.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
s="$back/call1-summary.txt"
mkdir -p "$back" /tmp/base /tmp/deps
tar xzf .carry/base.tgz -C /tmp/base
for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
(
  t=$SECONDS
  cmake -S /tmp/base -B /tmp/base/build-gpu -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_STANDARD=17 \
    -DHKV_DEPS_PREFIX=/tmp/deps/usr > "$back/base-configure.log" 2>&1 &&
    nice cmake --build /tmp/base/build-gpu -j8 --target hkv > "$back/base-build.log" 2>&1
  echo "base build: rc=$?, $((SECONDS - t)) s" > "$back/base-build.txt"
) &
basepid=$!
OUT=$back bash docs/receipts/2026-12-06-a/run.sh call1 ops
grep -E "bulk-lc-place" /tmp/hkv-out/gpu_ops.log | head -1 | tee -a "$s"
wait $basepid
cat "$back/base-build.txt" | tee -a "$s"
attn=$back/call1-bench-attn.txt
for round in 1 2; do
  for run in base:11 new:11 new:15 new:16 new:17; do
    tree=${run%%:*} form=${run##*:} bin=build-gpu/hkv
    [[ $tree == base ]] && bin=/tmp/base/build-gpu/hkv
    echo "== $tree HKV_ATTN_Q4H_FORM=$form (round $round)" >> "$attn"
    HKV_ATTN_Q4H_FORM=$form timeout 40 $bin bench --attention-only --kv-cache q4h --reps 10 \
      --depths 1024,131072,262144 >> "$attn" 2>&1
    echo "bench --attention-only, $tree form $form: rc=$?" >> "$s"
  done
done
grep -E "^\| q4h|^==" "$attn" | tee -a "$s"
tok=$back/call1-bench.txt
for run in base:11 new:15; do
  tree=${run%%:*} form=${run##*:} bin=build-gpu/hkv
  [[ $tree == base ]] && bin=/tmp/base/build-gpu/hkv
  echo "== $tree HKV_ATTN_Q4H_FORM=$form" >> "$tok"
  HKV_ATTN_Q4H_FORM=$form timeout 60 $bin bench --depths 1K,32K,128K,256K --kv-cache q4h --tokens 16 >> "$tok" 2>&1
  echo "bench q4h, $tree form $form: rc=$?" | tee -a "$s"
done
grep -E "^==|^\| q4h" "$tok" | tee -a "$s"
# form 15 in the whole engine: the switch from the environment, as if it were the default
HKV_ATTN_Q4H_FORM=15 OUT=$back bash docs/receipts/2026-12-06-a/run.sh call1-form15 engine generate
grep -E "engine|generate" "$back/call1-form15-summary.txt" | tee -a "$s"
t=$SECONDS
HKV_ATTN_Q4H_FORM=15 timeout 150 build-gpu/hkv diff --op model > "$back/call1-diff-model.log" 2>&1
echo "HKV_ATTN_Q4H_FORM=15 hkv diff --op model: rc=$?, $(tail -1 "$back/call1-diff-model.log"), $((SECONDS - t)) s" | tee -a "$s"
