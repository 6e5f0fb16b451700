#!/usr/bin/env bash
# Call 3 on the lent card: the tree with form 18 the default (attn_bulk_lc_rec_kernel), form 16 retired, and Auto's
# q4h one-wave exception dropped (q4h takes slim from one chunk block a multiprocessor, as fp8). Runs the ops stage
# (which builds; the diff table byte for byte with the oracle), racecheck over the q4h slim cases at 2 heads (form 18
# has not had it), then the whole engine (gpu_engine, hkv generate against the oracle).
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
OUT=/tmp/eng cuda/run_gpu_suite.sh engine generate > /dev/null 2>&1
grep -hE "^(gpu_engine|generate)" /tmp/eng/summary.txt | tee -a "$s"
tar czf "$back/call3-misc.tgz" -C /tmp san-r eng
