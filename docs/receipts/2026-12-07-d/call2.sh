#!/usr/bin/env bash
# Call 2 on the lent card: the bulk kernel with its scores on the tensor cores (HKV_ATTN_Q4H_FORM=10), and why the ring
# kernel (9) is slower than the bulk kernel (8).
#   1. the ops stage (cuda/run_gpu_suite.sh ops, which builds): the diff table's attention cases run form 10 against
#      the oracle, byte for byte, beside forms 8 and 9;
#   2. the attention alone at 128K and 262K: form 8, form 10, and form 9 on its own grid (0: two blocks a
#      multiprocessor, 264) and on 528, 1,024 and 2,048 blocks (2,048: one chunk a block at 262K, as form 8 takes
#      them), which tells what the ring's code costs apart from its persistence; a process a setting, two rounds;
#   3. ncu's issue activity, occupancy, DRAM throughput and stall reasons of the attention launches at 262K
#      (cuda/profile_stalls.sh's attn part), a process a form (8, 10, 9).
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-c/call2.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
s="$back/call2-summary.txt"
OUT=/tmp/hkv-ops bash docs/receipts/2026-12-06-a/run.sh call2 ops
cp /tmp/hkv-ops/call2-logs.tgz "$back/"
cat /tmp/hkv-ops/call2-summary.txt > "$s"
grep -E "attention\(cache=q4h" /tmp/hkv-out/gpu_ops.log | head -3 | tee -a "$s"
for round in 1 2; do
  for setting in 8:0 10:0 9:0 9:528 9:1024 9:2048; do
    form=${setting%:*} blocks=${setting#*:}
    echo "== HKV_ATTN_Q4H_FORM=$form HKV_ATTN_RING_BLOCKS=$blocks (round $round)" >> "$back/call2-bench-attn.txt"
    HKV_ATTN_Q4H_FORM=$form HKV_ATTN_RING_BLOCKS=$blocks timeout 60 build-gpu/hkv bench --attention-only \
      --kv-cache q4h --reps 10 --depths 131072,262144 >> "$back/call2-bench-attn.txt" 2>&1
    echo "bench --attention-only, form $form, ring blocks $blocks: rc=$?" >> "$s"
  done
done
grep -E "^\| q4h|^==" "$back/call2-bench-attn.txt" | tee -a "$s"
for form in 8 10 9; do
  mkdir -p "$back/form$form"
  HKV_ATTN_Q4H_FORM=$form HKV_STALLS_PARTS=attn HKV_STALLS_ATTN="--depths 262144 --kv-cache q4h" \
    OUT="$back/form$form" timeout 100 cuda/profile_stalls.sh build-gpu/hkv > "$back/form$form/stalls.txt" 2>&1
  echo "stalls, HKV_ATTN_Q4H_FORM=$form: rc=$?" | tee -a "$s"
  grep -E "^\||error" "$back/form$form/stalls.txt" | tee -a "$s"
done
