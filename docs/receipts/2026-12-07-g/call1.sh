#!/usr/bin/env bash
# Call 1 on the lent card: form 18 (attn_bulk_lc_rec_kernel: form 17 with the weights' zeros made by the weights' pass
# and lc summed by a ninth warp, 288 threads) against form 17, the default. Runs the ops stage (which builds; the diff
# table, byte for byte with the oracle: every q4h slim case runs every form, `bulk-lc-rec` among them); memcheck and
# racecheck over the q4h slim cases; the attention alone at 1K, 128K and 262K (forms 17 and 18, a process each, two
# rounds); a q4h token at 1K to 262K (17, 18); Auto's shapes for q4h measured again now that slim's shape runs the
# bulk kernels (the attention alone in every shape at 1K to 48K; a token at 8K to 32K with slim taken earlier:
# HKV_ATTN_SLIM=3, HKV_ATTN_SLIM_FROM=5 and 8); then form 18 in the whole engine (HKV_ATTN_Q4H_FORM=18: gpu_engine,
# hkv generate against the oracle, hkv diff --op model).
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-g/call1.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
s="$back/call1-summary.txt"
mkdir -p "$back"
OUT=$back bash docs/receipts/2026-12-06-a/run.sh call1 ops
grep -E "bulk-lc-rec" /tmp/hkv-out/gpu_ops.log | head -1 | tee -a "$s"
HKV_DIFF_FILTER='attention\(cache=q4h,head_dim=256.*shape=slim' HKV_SAN_RUNS=memcheck:ops HKV_SAN_LIMIT=60 \
  OUT=$back bash docs/receipts/2026-12-06-a/run.sh call1-memcheck sanitize
HKV_DIFF_FILTER='attention\(cache=q4h,head_dim=256,heads=2.*shape=slim' HKV_SAN_RUNS=racecheck:ops HKV_SAN_LIMIT=110 \
  OUT=$back bash docs/receipts/2026-12-06-a/run.sh call1-racecheck sanitize
grep -hE "memcheck|racecheck" "$back/call1-memcheck-summary.txt" "$back/call1-racecheck-summary.txt" | tee -a "$s"
attn=$back/call1-bench-attn.txt
for round in 1 2; do
  for form in 17 18; do
    echo "== HKV_ATTN_Q4H_FORM=$form (round $round)" >> "$attn"
    HKV_ATTN_Q4H_FORM=$form timeout 40 build-gpu/hkv bench --attention-only --kv-cache q4h --reps 10 \
      --depths 1024,131072,262144 >> "$attn" 2>&1
    echo "bench --attention-only, form $form: rc=$?" >> "$s"
  done
done
grep -E "^\| q4h|^==" "$attn" | tee -a "$s"
tok=$back/call1-bench.txt
for form in 17 18; do
  echo "== HKV_ATTN_Q4H_FORM=$form" >> "$tok"
  HKV_ATTN_Q4H_FORM=$form timeout 60 build-gpu/hkv bench --depths 1K,32K,128K,256K --kv-cache q4h --tokens 16 \
    >> "$tok" 2>&1
  echo "bench q4h, form $form: rc=$?" | tee -a "$s"
done
grep -E "^==|^\| q4h" "$tok" | tee -a "$s"
shapes=$back/call1-bench-shapes.txt
for form in 17 18; do
  echo "== HKV_ATTN_Q4H_FORM=$form" >> "$shapes"
  HKV_ATTN_Q4H_FORM=$form timeout 90 build-gpu/hkv bench --attention-only --kv-cache q4h --reps 10 \
    --attn-shape auto,slim,v-staged-x2,kv-staged,kv-staged-h2,kv-staged-h1 \
    --depths 1024,4096,8192,12288,16384,24576,32768,49152 >> "$shapes" 2>&1
  echo "bench --attention-only, every shape, form $form: rc=$?" | tee -a "$s"
done
grep -E "^\| q4h|^==" "$shapes" | tee -a "$s"
for v in "HKV_ATTN_SLIM=1" "HKV_ATTN_SLIM=3" "HKV_ATTN_SLIM=3 HKV_ATTN_SLIM_FROM=8" "HKV_ATTN_SLIM=3 HKV_ATTN_SLIM_FROM=5" \
  "HKV_ATTN_SLIM=1"; do
  echo "== $v" >> "$tok"
  env $v timeout 60 build-gpu/hkv bench --depths 8K,16K,32K --kv-cache q4h --tokens 16 >> "$tok" 2>&1
  echo "bench q4h 8K-32K, $v: rc=$?" | tee -a "$s"
done
grep -E "^==|^\| q4h" "$tok" | tee -a "$s"
# form 18 in the whole engine: the switch from the environment, as if it were the default
HKV_ATTN_Q4H_FORM=18 OUT=$back bash docs/receipts/2026-12-06-a/run.sh call1-form18 engine generate
grep -E "engine|generate" "$back/call1-form18-summary.txt" | tee -a "$s"
t=$SECONDS
HKV_ATTN_Q4H_FORM=18 timeout 150 build-gpu/hkv diff --op model > "$back/call1-diff-model.log" 2>&1
echo "HKV_ATTN_Q4H_FORM=18 hkv diff --op model: rc=$?, $(tail -1 "$back/call1-diff-model.log"), $((SECONDS - t)) s" | tee -a "$s"
