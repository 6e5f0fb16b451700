#!/usr/bin/env bash
# Call 2 on a lent card, after call 1 (its build): ncu's issue activity, occupancy, DRAM throughput and stalls of the
# q4h attention at 262K (cuda/profile_stalls.sh's attn part: the chunk and merge launches), forms 18 and 19, a process
# each, so that the time form 19 saves (or not) is placed: the weights' pass sits between the scores and the values
# while V's copies land. Then a q4h token's timeline at 262K (CUPTI, `hkv bench --timeline`), forms 18 and 19, a
# process each: the chunk launch, the merge and the rest of the token beside them. Everything comes back in one
# archive with the summary.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-h/call2.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
s="$back/call2-summary.txt"
w=/tmp/call2
mkdir -p "$back" "$w"
for form in 18 19; do
  d=$w/form$form
  mkdir -p "$d"
  HKV_ATTN_Q4H_FORM=$form HKV_STALLS_PARTS=attn HKV_STALLS_ATTN="--depths 262144 --kv-cache q4h" OUT="$d" \
    timeout 100 cuda/profile_stalls.sh build-gpu/hkv > "$d/stalls.txt" 2>&1
  echo "profile_stalls attn 262K, form $form: rc=$?" | tee -a "$s"
  grep -E "attn_" "$d/stalls.txt" | sort | uniq -c | sort -rn | head -4 | tee -a "$s"
done
for form in 18 19; do
  HKV_ATTN_Q4H_FORM=$form timeout 90 build-gpu/hkv bench --timeline --depths 256K --kv-cache q4h --tokens 4 \
    > "$w/timeline-form$form.txt" 2>&1
  echo "bench --timeline 256K, form $form: rc=$?" | tee -a "$s"
  grep -E "attn_|span|token" "$w/timeline-form$form.txt" | head -12 | tee -a "$s"
done
tar czf "$back/call2-misc.tgz" -C /tmp call2
