#!/usr/bin/env bash
# Call 1: forms 14, 15 and 16 against form 11, the default. 14: attn_bulk_lc_kernel (the weights' zeros made with the
# weights, lc summed by a ninth warp); 15 and 16: forms 11 and 14 with V's codes read in place by ldmatrix
# (attn_bulk_place_kernel, attn_bulk_lc_place_kernel).
#   1. the ops stage (cuda/run_gpu_suite.sh ops, which builds): the diff table's q4h slim-shape cases run every form
#      against the oracle, byte for byte;
#   2. the attention alone at 1K, 128K and 262K, a process a form, two rounds;
#   3. a q4h token at 1K to 262K, a process a form.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-f/call1.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
s="$back/call1-summary.txt"
forms="11 14 15 16"
OUT=$back bash docs/receipts/2026-12-06-a/run.sh call1 ops
grep -E "bulk-lc-place" /tmp/hkv-out/gpu_ops.log | head -2 | tee -a "$s"
attn=$back/call1-bench-attn.txt
for round in 1 2; do
  for form in $forms; do
    echo "== HKV_ATTN_Q4H_FORM=$form (round $round)" >> "$attn"
    HKV_ATTN_Q4H_FORM=$form timeout 40 build-gpu/hkv bench --attention-only --kv-cache q4h --reps 10 \
      --depths 1024,131072,262144 >> "$attn" 2>&1
    echo "bench --attention-only, form $form: rc=$?" >> "$s"
  done
done
grep -E "^\| q4h|^==" "$attn" | tee -a "$s"
tok=$back/call1-bench.txt
for form in $forms; do
  echo "== HKV_ATTN_Q4H_FORM=$form" >> "$tok"
  HKV_ATTN_Q4H_FORM=$form timeout 60 build-gpu/hkv bench --depths 1K,32K,128K,256K --kv-cache q4h --tokens 16 \
    >> "$tok" 2>&1
  echo "bench q4h, form $form: rc=$?" | tee -a "$s"
done
grep -E "^==|^\| q4h" "$tok" | tee -a "$s"
