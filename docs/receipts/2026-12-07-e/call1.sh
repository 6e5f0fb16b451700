#!/usr/bin/env bash
# Call 1: the bulk kernel with each key's weight made ready once a chunk (HKV_ATTN_Q4H_FORM=11) and the same in
# quarters, three blocks a multiprocessor (12), against form 10, the default; and the merge split over 1, 4 and 8
# blocks a head (HKV_MERGE_SPLIT); 2026-12-07-d/call6.sh with form 12 and the merge added.
#   1. the ops stage (cuda/run_gpu_suite.sh ops, which builds): the diff table's attention cases run forms 11 and 12
#      (`bulk-ready`, `bulk-quarter`) and the merge split 2, 4 and 8 ways (`merge-split`) against the oracle, byte for
#      byte;
#   2. the attention alone at 128K and 262K, each (form, split), a process a setting, two rounds;
#   3. a q4h token at 1K to 262K for four settings, a process a setting;
#   4. ncu's issue activity, occupancy, DRAM throughput and stalls of the attention launches at 262K, form 10 with
#      the merge whole and form 12 with it split 4 ways.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-e/call1.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
s="$back/call1-summary.txt"
OUT=/tmp/hkv-ops bash docs/receipts/2026-12-06-a/run.sh call1 ops
cp /tmp/hkv-ops/call1-logs.tgz "$back/"
cat /tmp/hkv-ops/call1-summary.txt > "$s"
grep -E "bulk-quarter" /tmp/hkv-out/gpu_ops.log | head -2 | tee -a "$s"
grep -cE "merge-split" /tmp/hkv-out/gpu_ops.log | sed 's/^/cases with merge-split: /' | tee -a "$s"
attn=$back/call1-bench-attn.txt
for round in 1 2; do
  for set in "10 1" "11 1" "12 1" "10 4" "12 4" "12 8"; do
    read -r form split <<< "$set"
    echo "== HKV_ATTN_Q4H_FORM=$form HKV_MERGE_SPLIT=$split (round $round)" >> "$attn"
    HKV_ATTN_Q4H_FORM=$form HKV_MERGE_SPLIT=$split timeout 60 build-gpu/hkv bench --attention-only --kv-cache q4h \
      --reps 10 --depths 131072,262144 >> "$attn" 2>&1
    echo "bench --attention-only, form $form, split $split: rc=$?" >> "$s"
  done
done
grep -E "^\| q4h|^==" "$attn" | tee -a "$s"
tok=$back/call1-bench.txt
for set in "10 1" "11 1" "12 1" "12 4"; do
  read -r form split <<< "$set"
  echo "== HKV_ATTN_Q4H_FORM=$form HKV_MERGE_SPLIT=$split" >> "$tok"
  HKV_ATTN_Q4H_FORM=$form HKV_MERGE_SPLIT=$split timeout 70 build-gpu/hkv bench --depths 1K,32K,128K,256K \
    --kv-cache q4h --tokens 16 >> "$tok" 2>&1
  echo "bench q4h, form $form, split $split: rc=$?" | tee -a "$s"
done
grep -E "^==|^\| q4h" "$tok" | tee -a "$s"
for set in "10 1" "12 4"; do
  read -r form split <<< "$set"
  d="$back/form$form-split$split"
  mkdir -p "$d"
  HKV_ATTN_Q4H_FORM=$form HKV_MERGE_SPLIT=$split HKV_STALLS_PARTS=attn \
    HKV_STALLS_ATTN="--depths 262144 --kv-cache q4h" OUT="$d" timeout 100 cuda/profile_stalls.sh build-gpu/hkv \
    > "$d/stalls.txt" 2>&1
  echo "stalls, form $form, split $split: rc=$?" | tee -a "$s"
  grep -E "^\||error" "$d/stalls.txt" | tee -a "$s"
done
