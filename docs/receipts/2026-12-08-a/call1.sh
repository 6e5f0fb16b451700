#!/usr/bin/env bash
# Call 1 on a lent card: the wide merge (attn_merge_wide_kernel, HKV_MERGE_WIDE=1) and form 20
# (attn_bulk_max_key_kernel, HKV_ATTN_Q4H_FORM=20: the weights' max taken once a key) against the defaults (form 19, the
# merge a block a (row, head)); bf16's rows staged half a chunk at a time (HKV_ATTN_BF16_HALVES=1); the matvec chain's
# slice form. In order of what matters if the call is cut short: the ops stage (builds; the diff table byte for byte
# with the oracle, every attention case under both merges and every form, bf16's under both stagings; the chain's forms
# against the oracle's rows); the attention alone at 1K, 128K and 262K, a process a setting, two rounds, and bf16's at
# 1K, 8K, 32K and 128K both ways in its staged shapes; the matvec chain's persistent forms beside the graph of
# launches (bench-ops --chain --persistent); a q4h token at 1K and 256K, the four settings in one process, and a bf16
# token at 1K and 32K both ways; gpu_engine at the defaults; memcheck and racecheck over the q4h slim cases and
# bf16's kv-staged ones, memcheck over the chain's forms; the wide merge and form 20 in the whole engine (generate
# against the oracle, hkv diff --op model). Everything but the ops stage's two files comes back in one archive.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-08-a/call1.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
s="$back/call1-summary.txt"
w=/tmp/call1
mkdir -p "$back" "$w"
pack() { tar czf "$back/call1-misc.tgz" -C /tmp call1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$s"
OUT=$back bash docs/receipts/2026-12-06-a/run.sh call1 ops
grep -cE "merge-wide" /tmp/hkv-out/gpu_ops.log | sed 's/^/ops lines naming merge-wide: /' | tee -a "$s"
grep -cE "bulk-max-key" /tmp/hkv-out/gpu_ops.log | sed 's/^/ops lines naming form 20: /' | tee -a "$s"
# past a stage's start time (seconds into the script; CALL_SCALE multiplies them), the stages after it do not run
late() {
  local at=$(($1 * ${CALL_SCALE:-1}))
  [ "$SECONDS" -lt "$at" ] && return 1
  echo "stopped at ${SECONDS} s (past ${at} s): $2 and what follows not run" | tee -a "$s"
  pack
  exit 0
}
attn=$w/bench-attn.txt
for round in 1 2; do
  for v in "HKV_MERGE_WIDE=0" "HKV_MERGE_WIDE=1" "HKV_ATTN_Q4H_FORM=20" "HKV_ATTN_Q4H_FORM=20 HKV_MERGE_WIDE=1"; do
    echo "== $v (round $round)" >> "$attn"
    env $v timeout 60 build-gpu/hkv bench --attention-only --kv-cache q4h --reps 10 \
      --depths 1024,131072,262144 >> "$attn" 2>&1
    echo "bench --attention-only, $v: rc=$?" >> "$s"
  done
done
grep -E "^\| q4h|^==" "$attn" | tee -a "$s"
# q4h's shapes at short contexts, where Auto takes kv-staged-h1 (1K) to kv-staged, beside slim's bulk kernels
timeout 60 build-gpu/hkv bench --attention-only --kv-cache q4h --reps 10 \
  --attn-shape auto,kv-staged,kv-staged-h2,kv-staged-h1,slim --depths 1024,8192 > "$w/bench-attn-q4h-shapes.txt" 2>&1
echo "bench --attention-only q4h shapes: rc=$?" | tee -a "$s"
grep -E "^\| q4h" "$w/bench-attn-q4h-shapes.txt" | tee -a "$s"
bf=$w/bench-attn-bf16.txt
for round in 1 2; do
  for v in 0 1; do
    echo "== HKV_ATTN_BF16_HALVES=$v (round $round)" >> "$bf"
    HKV_ATTN_BF16_HALVES=$v timeout 60 build-gpu/hkv bench --attention-only --kv-cache bf16 --reps 10 \
      --attn-shape auto,kv-staged,kv-staged-h2,kv-staged-h1 --depths 1024,8192,32768,131072 >> "$bf" 2>&1
    echo "bench --attention-only bf16, HKV_ATTN_BF16_HALVES=$v: rc=$?" >> "$s"
  done
done
grep -E "^\| bf16|^==" "$bf" | tee -a "$s"
# where a staged chunk block's cycles go at 1K and 32K: bf16 with its halves, q4h (slim's bulk kernels count none)
HKV_ATTN_BF16_HALVES=1 timeout 60 build-gpu/hkv bench --attention-only --kv-cache bf16,q4h --reps 5 --phases \
  --attn-shape kv-staged,kv-staged-h1 --depths 1024,32768 > "$w/bench-attn-phases.txt" 2>&1
echo "bench --attention-only --phases: rc=$?" | tee -a "$s"
grep -E "phases" "$w/bench-attn-phases.txt" | tee -a "$s"
pack
late 260 "the chain's slice form"
timeout 120 build-gpu/hkv bench-ops --chain --persistent --reps 20 > "$w/bench-ops-persistent.txt" 2>&1
echo "bench-ops --chain --persistent: rc=$?" | tee -a "$s"
grep -E "^\|" "$w/bench-ops-persistent.txt" | tee -a "$s"
pack
late 330 "the token's variants"
tok=$w/bench-ab.txt
timeout 150 build-gpu/hkv bench \
  --variants "default;HKV_MERGE_WIDE=1;HKV_ATTN_Q4H_FORM=20;HKV_ATTN_Q4H_FORM=20 HKV_MERGE_WIDE=1" --rounds 3 \
  --depths 1K,256K --kv-cache q4h --tokens 8 > "$tok" 2>&1
echo "bench --variants: rc=$?" | tee -a "$s"
grep -E "variants|^\|" "$tok" | tee -a "$s"
timeout 90 build-gpu/hkv bench --variants "default;HKV_ATTN_BF16_HALVES=1" --rounds 3 --depths 1K,32K \
  --kv-cache bf16 --tokens 8 > "$w/bench-ab-bf16.txt" 2>&1
echo "bench --variants bf16 halves: rc=$?" | tee -a "$s"
grep -E "variants|^\|" "$w/bench-ab-bf16.txt" | tee -a "$s"
pack
late 470 "gpu_engine"
OUT=$w/engine cuda/run_gpu_suite.sh engine > /dev/null 2>&1
grep -hE "^gpu_engine" $w/engine/summary.txt | tee -a "$s"
late 490 "memcheck"
HKV_DIFF_FILTER='attention\(cache=q4h,head_dim=256.*shape=slim' HKV_SAN_RUNS=memcheck:ops HKV_SAN_LIMIT=60 \
  OUT=$w/memcheck cuda/run_gpu_suite.sh sanitize > /dev/null 2>&1
HKV_DIFF_FILTER='attention\(cache=q4h,head_dim=256,heads=2.*shape=slim' HKV_SAN_RUNS=racecheck:ops HKV_SAN_LIMIT=110 \
  OUT=$w/racecheck cuda/run_gpu_suite.sh sanitize > /dev/null 2>&1
HKV_SAN_RUNS="memcheck:ops:*persistent*" OUT=$w/memcheck-chain cuda/run_gpu_suite.sh sanitize > /dev/null 2>&1
HKV_DIFF_FILTER='attention\(cache=bf16,head_dim=256,heads=2.*shape=kv-staged' HKV_SAN_RUNS="memcheck:ops racecheck:ops" \
  HKV_SAN_LIMIT=80 OUT=$w/san-bf16 cuda/run_gpu_suite.sh sanitize > /dev/null 2>&1
grep -hE "memcheck|racecheck" $w/memcheck/summary.txt $w/racecheck/summary.txt $w/memcheck-chain/summary.txt \
  $w/san-bf16/summary.txt | tee -a "$s"
pack
late 540 "generate"
HKV_MERGE_WIDE=1 HKV_ATTN_Q4H_FORM=20 OUT=$w/both cuda/run_gpu_suite.sh generate > /dev/null 2>&1
grep -hE "^generate" $w/both/summary.txt | tee -a "$s"
late 555 "hkv diff --op model"
t=$SECONDS
HKV_MERGE_WIDE=1 HKV_ATTN_Q4H_FORM=20 timeout 100 build-gpu/hkv diff --op model > "$w/diff-model.log" 2>&1
echo "HKV_MERGE_WIDE=1 HKV_ATTN_Q4H_FORM=20 hkv diff --op model: rc=$?, $(tail -1 "$w/diff-model.log"), $((SECONDS - t)) s" |
  tee -a "$s"
pack
