#!/usr/bin/env bash
# Call 2: the tree with form 11 the default (attn_bulk_ready_kernel), form 13 (attn_bulk_zero_kernel) and the staged
# merge behind switches.
#   1. the exactness suites (ops, with form 13 and the staged merge in the diff table's attention cases; engine;
#      generate), the defaults;
#   2. the attention alone at 1K, 128K and 262K: form 11, form 13, form 11 with the merge staged; two rounds;
#   3. a q4h token at 1K to 262K, forms 11 and 13;
#   4. `hkv diff --op model`, the defaults.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-e/call2.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
s="$back/call2-summary.txt"
OUT=$back bash docs/receipts/2026-12-06-a/run.sh call2 ops engine generate
grep -E "bulk-zero" /tmp/hkv-out/gpu_ops.log | head -2 | tee -a "$s"
attn=$back/call2-bench-attn.txt
for round in 1 2; do
  for set in "11 0" "13 0" "11 1"; do
    read -r form stage <<< "$set"
    echo "== HKV_ATTN_Q4H_FORM=$form HKV_MERGE_STAGE=$stage (round $round)" >> "$attn"
    HKV_ATTN_Q4H_FORM=$form HKV_MERGE_STAGE=$stage timeout 40 build-gpu/hkv bench --attention-only --kv-cache q4h \
      --reps 10 --depths 1024,131072,262144 >> "$attn" 2>&1
    echo "bench --attention-only, form $form, merge stage $stage: rc=$?" >> "$s"
  done
done
grep -E "^\| q4h|^==" "$attn" | tee -a "$s"
tok=$back/call2-bench.txt
for set in "11 0" "13 0"; do
  read -r form stage <<< "$set"
  echo "== HKV_ATTN_Q4H_FORM=$form HKV_MERGE_STAGE=$stage" >> "$tok"
  HKV_ATTN_Q4H_FORM=$form HKV_MERGE_STAGE=$stage timeout 60 build-gpu/hkv bench --depths 1K,32K,128K,256K \
    --kv-cache q4h --tokens 16 >> "$tok" 2>&1
  echo "bench q4h, form $form, merge stage $stage: rc=$?" | tee -a "$s"
done
grep -E "^==|^\| q4h" "$tok" | tee -a "$s"
t=$SECONDS
timeout 150 build-gpu/hkv diff --op model > "$back/call2-diff-model.log" 2>&1
echo "hkv diff --op model: rc=$?, $(tail -1 "$back/call2-diff-model.log"), $((SECONDS - t)) s" | tee -a "$s"
xz -9 "$back/call2-diff-model.log"
