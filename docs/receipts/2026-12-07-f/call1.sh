#!/usr/bin/env bash
# Call 1 on the lent card: the bulk kernel's Lean forms against form 11, the default (whose machine code is 6a4511c's:
# sass_equal). Lean: the scores on the tensor cores with one code word a lane and the records' planes in pairs (one
# 16-byte load of A); the values with V's codes read in place by ldmatrix, the whole code bytes as tiles, W's bytes
# from the fma's bits. Form 15 is form 11 Lean, 16 form 14 Lean, 17 form 15 with the query's records made once a row
# and head. Runs the ops stage (which builds; the diff table, byte for byte with the oracle: every q4h shape and form),
# then the attention alone at 1K, 128K and 262K (forms 11, 15, 16, 17), a process each, two rounds; then a q4h token
# at 1K to 262K (11; 15); then form 15 in the whole engine (HKV_ATTN_Q4H_FORM=15: gpu_engine, hkv generate against
# the oracle, hkv diff --op model).
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-f/call1.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
s="$back/call1-summary.txt"
mkdir -p "$back"
OUT=$back bash docs/receipts/2026-12-06-a/run.sh call1 ops
grep -E "bulk-rec" /tmp/hkv-out/gpu_ops.log | head -1 | tee -a "$s"
attn=$back/call1-bench-attn.txt
for round in 1 2; do
  for form in 11 15 16 17; do
    echo "== HKV_ATTN_Q4H_FORM=$form (round $round)" >> "$attn"
    HKV_ATTN_Q4H_FORM=$form timeout 40 build-gpu/hkv bench --attention-only --kv-cache q4h --reps 10 \
      --depths 1024,131072,262144 >> "$attn" 2>&1
    echo "bench --attention-only, form $form: rc=$?" >> "$s"
  done
done
grep -E "^\| q4h|^==" "$attn" | tee -a "$s"
tok=$back/call1-bench.txt
for form in 11 15; do
  echo "== HKV_ATTN_Q4H_FORM=$form" >> "$tok"
  HKV_ATTN_Q4H_FORM=$form timeout 60 build-gpu/hkv bench --depths 1K,32K,128K,256K --kv-cache q4h --tokens 16 \
    >> "$tok" 2>&1
  echo "bench q4h, form $form: rc=$?" | tee -a "$s"
done
grep -E "^==|^\| q4h" "$tok" | tee -a "$s"
# form 15 in the whole engine: the switch from the environment, as if it were the default
HKV_ATTN_Q4H_FORM=15 OUT=$back bash docs/receipts/2026-12-06-a/run.sh call1-form15 engine generate
grep -E "engine|generate" "$back/call1-form15-summary.txt" | tee -a "$s"
t=$SECONDS
HKV_ATTN_Q4H_FORM=15 timeout 150 build-gpu/hkv diff --op model > "$back/call1-diff-model.log" 2>&1
echo "HKV_ATTN_Q4H_FORM=15 hkv diff --op model: rc=$?, $(tail -1 "$back/call1-diff-model.log"), $((SECONDS - t)) s" | tee -a "$s"
