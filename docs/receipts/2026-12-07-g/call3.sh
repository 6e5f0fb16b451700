#!/usr/bin/env bash
# Call 3 on the lent card: the tree with form 18 the default (attn_bulk_lc_rec_kernel), form 16 retired, and Auto's
# q4h one-wave exception dropped (q4h takes slim from one chunk block a multiprocessor, as fp8). Runs the ops stage
# (which builds; the diff table byte for byte with the oracle), racecheck and memcheck over the q4h slim cases, the
# whole engine (gpu_engine, hkv generate against the oracle), a q4h token at 1K to 262K (the defaults; form 17 beside
# it), the attention alone at 128K and 262K (18; 17), then hkv diff --op model.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-g/call3.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
s="$back/call3-summary.txt"
mkdir -p "$back"
OUT=$back bash docs/receipts/2026-12-06-a/run.sh call3 ops
grep -E "bulk-lc-rec" /tmp/hkv-out/gpu_ops.log | head -1 | tee -a "$s"
HKV_DIFF_FILTER='attention\(cache=q4h,head_dim=256,heads=2.*shape=slim' HKV_SAN_RUNS=racecheck:ops HKV_SAN_LIMIT=110 \
  OUT=/tmp/san-r cuda/run_gpu_suite.sh sanitize > /dev/null 2>&1
grep -hE "racecheck" /tmp/san-r/summary.txt | tee -a "$s"
HKV_DIFF_FILTER='attention\(cache=q4h,head_dim=256.*shape=slim' HKV_SAN_RUNS=memcheck:ops HKV_SAN_LIMIT=60 \
  OUT=/tmp/san-m cuda/run_gpu_suite.sh sanitize > /dev/null 2>&1
grep -hE "memcheck" /tmp/san-m/summary.txt | tee -a "$s"
OUT=/tmp/eng cuda/run_gpu_suite.sh engine generate > /dev/null 2>&1
grep -hE "^(gpu_engine|generate)" /tmp/eng/summary.txt | tee -a "$s"
tok=$back/call3-bench.txt
for v in "HKV_ATTN_Q4H_FORM=18" "HKV_ATTN_Q4H_FORM=17"; do
  echo "== $v" >> "$tok"
  env $v timeout 60 build-gpu/hkv bench --depths 1K,32K,128K,256K --kv-cache q4h --tokens 16 >> "$tok" 2>&1
  echo "bench q4h, $v: rc=$?" | tee -a "$s"
done
grep -E "^==|^\| q4h" "$tok" | tee -a "$s"
attn=$back/call3-bench-attn.txt
for form in 18 17; do
  echo "== HKV_ATTN_Q4H_FORM=$form" >> "$attn"
  HKV_ATTN_Q4H_FORM=$form timeout 40 build-gpu/hkv bench --attention-only --kv-cache q4h --reps 10 \
    --depths 32768,131072,262144 >> "$attn" 2>&1
  echo "bench --attention-only, form $form: rc=$?" >> "$s"
done
grep -E "^\| q4h|^==" "$attn" | tee -a "$s"
t=$SECONDS
timeout 150 build-gpu/hkv diff --op model > /tmp/diff-model.log 2>&1
echo "hkv diff --op model: rc=$?, $(tail -1 /tmp/diff-model.log), $((SECONDS - t)) s" | tee -a "$s"
tar czf "$back/call3-misc.tgz" -C /tmp san-r san-m eng diff-model.log
