#!/usr/bin/env bash
# Call 6, written for the next card: the bulk kernel with each key's weight made ready once a chunk
# (HKV_ATTN_Q4H_FORM=11, attn_bulk_ready_kernel) against form 10, the default.
#   1. the ops stage (cuda/run_gpu_suite.sh ops, which builds): the diff table's q4h attention cases run form 11
#      (`bulk-ready`) against the oracle, byte for byte, beside forms 8 and 10;
#   2. the attention alone at 128K and 262K, forms 10 and 11, a process a form, two rounds;
#   3. a q4h token at 1K to 262K, forms 10 and 11, a process a form;
#   4. ncu's issue activity, occupancy, DRAM throughput and stalls of the attention launches at 262K, forms 10 and 11.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-d/call6.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
s="$back/call6-summary.txt"
OUT=/tmp/hkv-ops bash docs/receipts/2026-12-06-a/run.sh call6 ops
cp /tmp/hkv-ops/call6-logs.tgz "$back/"
cat /tmp/hkv-ops/call6-summary.txt > "$s"
grep -E "bulk-ready" /tmp/hkv-out/gpu_ops.log | head -3 | tee -a "$s"
for round in 1 2; do
  for form in 10 11; do
    echo "== HKV_ATTN_Q4H_FORM=$form (round $round)" >> "$back/call6-bench-attn.txt"
    HKV_ATTN_Q4H_FORM=$form timeout 60 build-gpu/hkv bench --attention-only --kv-cache q4h --reps 10 \
      --depths 131072,262144 >> "$back/call6-bench-attn.txt" 2>&1
    echo "bench --attention-only, form $form: rc=$?" >> "$s"
  done
done
grep -E "^\| q4h|^==" "$back/call6-bench-attn.txt" | tee -a "$s"
for form in 10 11; do
  echo "== HKV_ATTN_Q4H_FORM=$form" >> "$back/call6-bench.txt"
  HKV_ATTN_Q4H_FORM=$form timeout 60 build-gpu/hkv bench --depths 1K,32K,128K,256K --kv-cache q4h --tokens 16 \
    >> "$back/call6-bench.txt" 2>&1
  echo "bench q4h, form $form: rc=$?" | tee -a "$s"
done
grep -E "^==|^\| q4h" "$back/call6-bench.txt" | tee -a "$s"
for form in 10 11; do
  mkdir -p "$back/form$form"
  HKV_ATTN_Q4H_FORM=$form HKV_STALLS_PARTS=attn HKV_STALLS_ATTN="--depths 262144 --kv-cache q4h" \
    OUT="$back/form$form" timeout 100 cuda/profile_stalls.sh build-gpu/hkv > "$back/form$form/stalls.txt" 2>&1
  echo "stalls, HKV_ATTN_Q4H_FORM=$form: rc=$?" | tee -a "$s"
  grep -E "^\||error" "$back/form$form/stalls.txt" | tee -a "$s"
done
