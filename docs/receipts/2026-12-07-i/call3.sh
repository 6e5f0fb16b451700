#!/usr/bin/env bash
# Call 3 on a lent card: the wide merge (attn_merge_wide_kernel, HKV_MERGE_WIDE=1: a block a (row, head, 32
# elements), a tile's partials in flight at once) against the merge a block a (row, head), with form 19 the default.
# In order of what matters if the call is cut short: the ops stage (builds; the diff table byte for byte with the
# oracle, every attention case under both merges); the attention alone at 1K, 128K and 262K, a process a merge, two
# rounds; a q4h token at 1K and 262K, both merges in one process; gpu_engine at the defaults (form 19 among them);
# memcheck and racecheck over the q4h slim cases (both merges); the wide merge in the whole engine (generate against
# the oracle, hkv diff --op model); ncu over the two merges at 262K. Everything but the ops stage's two files comes
# back in one archive.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-i/call3.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
s="$back/call3-summary.txt"
w=/tmp/call3
mkdir -p "$back" "$w"
pack() { tar czf "$back/call3-misc.tgz" -C /tmp call3; }
OUT=$back bash docs/receipts/2026-12-06-a/run.sh call3 ops
grep -E "merge-wide" /tmp/hkv-out/gpu_ops.log | head -2 | tee -a "$s"
grep -cE "merge-wide" /tmp/hkv-out/gpu_ops.log | sed 's/^/ops lines naming merge-wide: /' | tee -a "$s"
# past a stage's start time (seconds into the script; CALL3_SCALE multiplies them), the stages after it do not run:
# a lent card's budget may be shorter than its per-call limit
late() {
  local at=$(( $1 * ${CALL3_SCALE:-1} ))
  [ "$SECONDS" -lt "$at" ] && return 1
  echo "stopped at ${SECONDS} s (past ${at} s): $2 and what follows not run" | tee -a "$s"
  pack
  exit 0
}
attn=$w/bench-attn.txt
for round in 1 2; do
  for mw in 0 1; do
    echo "== HKV_MERGE_WIDE=$mw (round $round)" >> "$attn"
    HKV_MERGE_WIDE=$mw timeout 60 build-gpu/hkv bench --attention-only --kv-cache q4h --reps 10 \
      --depths 1024,131072,262144 >> "$attn" 2>&1
    echo "bench --attention-only, HKV_MERGE_WIDE=$mw: rc=$?" >> "$s"
  done
done
grep -E "^\| q4h|^==" "$attn" | tee -a "$s"
pack
late 240 "the token's variants"
tok=$w/bench-ab.txt
timeout 150 build-gpu/hkv bench --variants "default;HKV_MERGE_WIDE=1" --rounds 3 --depths 1K,256K \
  --kv-cache q4h --tokens 8 > "$tok" 2>&1
echo "bench --variants default;HKV_MERGE_WIDE=1: rc=$?" | tee -a "$s"
grep -E "variants|^\|" "$tok" | tee -a "$s"
pack
late 300 "gpu_engine"
OUT=$w/engine cuda/run_gpu_suite.sh engine > /dev/null 2>&1
grep -hE "^gpu_engine" $w/engine/summary.txt | tee -a "$s"
late 330 "memcheck"
HKV_DIFF_FILTER='attention\(cache=q4h,head_dim=256.*shape=slim' HKV_SAN_RUNS=memcheck:ops HKV_SAN_LIMIT=60 \
  OUT=$w/memcheck cuda/run_gpu_suite.sh sanitize > /dev/null 2>&1
HKV_DIFF_FILTER='attention\(cache=q4h,head_dim=256,heads=2.*shape=slim' HKV_SAN_RUNS=racecheck:ops HKV_SAN_LIMIT=110 \
  OUT=$w/racecheck cuda/run_gpu_suite.sh sanitize > /dev/null 2>&1
grep -hE "memcheck|racecheck" $w/memcheck/summary.txt $w/racecheck/summary.txt | tee -a "$s"
pack
late 380 "generate"
HKV_MERGE_WIDE=1 OUT=$w/wide cuda/run_gpu_suite.sh generate > /dev/null 2>&1
grep -hE "^generate" $w/wide/summary.txt | tee -a "$s"
t=$SECONDS
HKV_MERGE_WIDE=1 timeout 150 build-gpu/hkv diff --op model > "$w/diff-model.log" 2>&1
echo "HKV_MERGE_WIDE=1 hkv diff --op model: rc=$?, $(tail -1 "$w/diff-model.log"), $((SECONDS - t)) s" | tee -a "$s"
pack
late 450 "ncu"
for mw in 0 1; do
  d=$w/ncu-merge$mw
  mkdir -p "$d"
  HKV_MERGE_WIDE=$mw HKV_STALLS_PARTS=attn HKV_STALLS_ATTN="--depths 262144 --kv-cache q4h" OUT="$d" \
    timeout 100 cuda/profile_stalls.sh build-gpu/hkv > "$d/stalls.txt" 2>&1
  echo "profile_stalls attn 262K, HKV_MERGE_WIDE=$mw: rc=$?" | tee -a "$s"
  grep -E "attn_merge" "$d/stalls.txt" | sort | uniq -c | sort -rn | head -2 | tee -a "$s"
done
pack
