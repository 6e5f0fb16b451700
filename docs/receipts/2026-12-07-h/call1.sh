#!/usr/bin/env bash
# Call 1 on a lent card: form 19 (attn_bulk_lc_key_kernel: form 18 with its weights made a key a thread, each
# exponential as exp_c_flat) against form 18, the default. Runs the ops stage (which builds; the diff table byte for
# byte with the oracle: every q4h slim case runs every form, `bulk-lc-key` among them); memcheck and racecheck over the
# q4h slim cases (forms 18 and 19 have not had racecheck on a card); the attention alone at 1K, 128K and 262K (forms
# 18 and 19, a process each, two rounds); a q4h token at 1K to 262K (18 and 19 in one process, interleaved); then form
# 19 in the whole engine (HKV_ATTN_Q4H_FORM=19: gpu_engine, hkv generate against the oracle, hkv diff --op model).
# Everything but the ops stage's two files comes back in one archive (the device returns at most 8 files a call).
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-h/call1.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
s="$back/call1-summary.txt"
w=/tmp/call1
mkdir -p "$back" "$w"
OUT=$back bash docs/receipts/2026-12-06-a/run.sh call1 ops
grep -E "bulk-lc-key" /tmp/hkv-out/gpu_ops.log | head -1 | tee -a "$s"
grep -E "^exp_c_flat against exp_c" /tmp/hkv-out/gpu_ops.log | tee -a "$s"
HKV_DIFF_FILTER='attention\(cache=q4h,head_dim=256.*shape=slim' HKV_SAN_RUNS=memcheck:ops HKV_SAN_LIMIT=60 \
  OUT=$w/memcheck cuda/run_gpu_suite.sh sanitize > /dev/null 2>&1
HKV_DIFF_FILTER='attention\(cache=q4h,head_dim=256,heads=2.*shape=slim' HKV_SAN_RUNS=racecheck:ops HKV_SAN_LIMIT=110 \
  OUT=$w/racecheck cuda/run_gpu_suite.sh sanitize > /dev/null 2>&1
grep -hE "memcheck|racecheck" $w/memcheck/summary.txt $w/racecheck/summary.txt | tee -a "$s"
attn=$w/bench-attn.txt
for round in 1 2; do
  for form in 18 19; do
    echo "== HKV_ATTN_Q4H_FORM=$form (round $round)" >> "$attn"
    HKV_ATTN_Q4H_FORM=$form timeout 40 build-gpu/hkv bench --attention-only --kv-cache q4h --reps 10 \
      --depths 1024,131072,262144 >> "$attn" 2>&1
    echo "bench --attention-only, form $form: rc=$?" >> "$s"
  done
done
grep -E "^\| q4h|^==" "$attn" | tee -a "$s"
tok=$w/bench-ab.txt
timeout 150 build-gpu/hkv bench --variants "default;HKV_ATTN_Q4H_FORM=19" --rounds 4 --depths 1K,32K,128K,256K \
  --kv-cache q4h --tokens 8 > "$tok" 2>&1
echo "bench --variants default;HKV_ATTN_Q4H_FORM=19: rc=$?" | tee -a "$s"
grep -E "variants|^\|" "$tok" | tee -a "$s"
# form 19 in the whole engine: the switch from the environment, as if it were the default
HKV_ATTN_Q4H_FORM=19 OUT=$w/form19 cuda/run_gpu_suite.sh engine generate > /dev/null 2>&1
grep -hE "^(gpu_engine|generate)" $w/form19/summary.txt | tee -a "$s"
t=$SECONDS
HKV_ATTN_Q4H_FORM=19 timeout 150 build-gpu/hkv diff --op model > "$w/diff-model.log" 2>&1
echo "HKV_ATTN_Q4H_FORM=19 hkv diff --op model: rc=$?, $(tail -1 "$w/diff-model.log"), $((SECONDS - t)) s" | tee -a "$s"
tar czf "$back/call1-misc.tgz" -C /tmp call1
