#!/usr/bin/env bash
# Call 4, written for the next card: form 14 (attn_bulk_lc_kernel: the weights' zeros made with the weights, lc summed
# by a ninth warp of its own) against form 11, the default.
#   1. the ops stage (cuda/run_gpu_suite.sh ops, which builds): the diff table's q4h slim-shape cases run form 14
#      (`bulk-lc`) against the oracle, byte for byte; then memcheck and racecheck over those cases;
#   2. the attention alone at 1K, 128K and 262K, forms 11 and 14, a process a form, two rounds;
#   3. a q4h token at 1K to 262K, forms 11 and 14;
#   4. ncu's issue activity, occupancy and stalls of the attention launches at 262K, forms 11 and 14.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-e/call4.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
s="$back/call4-summary.txt"
OUT=$back bash docs/receipts/2026-12-06-a/run.sh call4 ops
grep -E "bulk-lc" /tmp/hkv-out/gpu_ops.log | head -2 | tee -a "$s"
# compute-sanitizer's memcheck and racecheck over the q4h slim-shape cases (each runs every form, 14 among them)
HKV_DIFF_FILTER='attention\(cache=q4h,head_dim=256.*shape=slim' HKV_SAN_RUNS="memcheck:ops racecheck:ops" \
  OUT=$back bash docs/receipts/2026-12-06-a/run.sh call4-san sanitize
grep -E "sanitize|memcheck|racecheck|Race" "$back/call4-san-summary.txt" | tee -a "$s"
attn=$back/call4-bench-attn.txt
for round in 1 2; do
  for form in 11 14; do
    echo "== HKV_ATTN_Q4H_FORM=$form (round $round)" >> "$attn"
    HKV_ATTN_Q4H_FORM=$form timeout 40 build-gpu/hkv bench --attention-only --kv-cache q4h --reps 10 \
      --depths 1024,131072,262144 >> "$attn" 2>&1
    echo "bench --attention-only, form $form: rc=$?" >> "$s"
  done
done
grep -E "^\| q4h|^==" "$attn" | tee -a "$s"
tok=$back/call4-bench.txt
for form in 11 14; do
  echo "== HKV_ATTN_Q4H_FORM=$form" >> "$tok"
  HKV_ATTN_Q4H_FORM=$form timeout 60 build-gpu/hkv bench --depths 1K,32K,128K,256K --kv-cache q4h --tokens 16 \
    >> "$tok" 2>&1
  echo "bench q4h, form $form: rc=$?" | tee -a "$s"
done
grep -E "^==|^\| q4h" "$tok" | tee -a "$s"
for form in 11 14; do
  mkdir -p "$back/form$form"
  HKV_ATTN_Q4H_FORM=$form HKV_STALLS_PARTS=attn HKV_STALLS_ATTN="--depths 262144 --kv-cache q4h" \
    OUT="$back/form$form" timeout 90 cuda/profile_stalls.sh build-gpu/hkv > "$back/form$form/stalls.txt" 2>&1
  echo "stalls, form $form: rc=$?" | tee -a "$s"
  grep -E "^\||error" "$back/form$form/stalls.txt" | tee -a "$s"
done
