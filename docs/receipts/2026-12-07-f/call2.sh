#!/usr/bin/env bash
# Call 2, on the machine call 1 built on: compute-sanitizer's memcheck and racecheck over the q4h slim-shape cases of
# the diff table (each runs every form: 8, 10, 11, 14, 15, 16), then ncu's issue activity, occupancy and stalls of the
# attention launches at 262K for the forms named (default: 11 and the fastest of call 1).
# usage (on the device, from the repository root): [FORMS="11 15"] bash docs/receipts/2026-12-07-f/call2.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
s="$back/call2-summary.txt"
HKV_DIFF_FILTER='attention\(cache=q4h,head_dim=256.*shape=slim' HKV_SAN_RUNS="memcheck:ops racecheck:ops" \
  OUT=$back bash docs/receipts/2026-12-06-a/run.sh call2-san sanitize
grep -E "sanitize|memcheck|racecheck|Race" "$back/call2-san-summary.txt" | tee -a "$s"
for form in ${FORMS:-11 15}; do
  mkdir -p "$back/form$form"
  HKV_ATTN_Q4H_FORM=$form HKV_STALLS_PARTS=attn HKV_STALLS_ATTN="--depths 262144 --kv-cache q4h" \
    OUT="$back/form$form" timeout 90 cuda/profile_stalls.sh build-gpu/hkv > "$back/form$form/stalls.txt" 2>&1
  echo "stalls, form $form: rc=$?" | tee -a "$s"
  grep -E "^\||error" "$back/form$form/stalls.txt" | tee -a "$s"
done
