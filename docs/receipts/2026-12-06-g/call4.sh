#!/usr/bin/env bash
# Call 4 on the lent card, with HKV_ATTN_Q4H_FORM=8 (attn_bulk_kernel) the default: this tree built, its op cases,
# memcheck and racecheck over the q4h slim-shape cases, whole decode tokens with forms 8 and 0 as --variants of one
# process at 1K to 256K, ncu's warp states of one bulk launch at 256K, then gpu_engine and `hkv diff --op fast_prefill`
# (the fast prefill's wg2 form takes its mbarrier and bulk-copy helpers from device.cuh now).
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-g/call4.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back" /tmp/deps
OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh run5 ops
cp /tmp/hkv-back/run5-summary.txt "$back/call4-summary.txt"
HKV_DIFF_FILTER='attention\(cache=q4h,head_dim=256.*shape=slim' HKV_SAN_RUNS="memcheck:ops racecheck:ops" \
  OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh run6 sanitize
grep -E "sanitize|memcheck|racecheck|Race|Version" /tmp/hkv-back/run6-summary.txt >> "$back/call4-summary.txt"
bin=build-gpu/hkv
$bin bench --depths 1K,32K,128K,256K --kv-cache q4h --variants "default;HKV_ATTN_Q4H_FORM=0" --rounds 2 --tokens 16 \
  > /tmp/tok4.log 2>&1
echo "token variants: exit $?" | tee "$back/token-forms4.txt"
grep -E "^\| " /tmp/tok4.log | tail -10 >> "$back/token-forms4.txt"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2> /dev/null | head -1)
[[ -n $ncu ]] && timeout 90 "$ncu" --kernel-name regex:attn_bulk --launch-skip 32 --launch-count 1 \
  --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
  $bin bench --attention-only --depths 256K --kv-cache q4h --reps 3 > "$back/ncu-bulk-stalls.txt" 2>&1
OUT=/tmp/hkv-back bash docs/receipts/2026-12-06-a/run.sh run7 engine
grep -E "gpu_engine|test cases" /tmp/hkv-back/run7-summary.txt | head -3 >> "$back/call4-summary.txt"
t=$SECONDS
timeout "${HKV_DIFF_LIMIT:-140}" $bin diff --op fast_prefill > /tmp/diff-model4.log 2>&1
echo "hkv diff --op fast_prefill: rc=$?, $(tail -1 /tmp/diff-model4.log), $((SECONDS - t)) s" | tee -a "$back/call4-summary.txt"
tar czf "$back/call4-logs.tgz" -C /tmp hkv-back tok4.log diff-model4.log 2> /dev/null
cat "$back/call4-summary.txt" "$back/token-forms4.txt"
