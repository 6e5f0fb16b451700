#!/usr/bin/env bash
# 2026-12-03-a run 2 (H200): the phase stamps with each multiprocessor's earliest warp end as well, so that bench-ops
# --phases splits the tail into the part within a multiprocessor and the part across them. gpu_ops (its stamps case
# checks the new word), then the chain's phases, default settings.
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
s=$OUT/summary-all.txt
cuda/run_gpu_suite.sh ops
cp "$OUT/summary.txt" "$s"
grep -E "^matvec phase stamps" "$OUT/gpu_ops.log" | tee -a "$s"
HKV_BENCH_OPS_ARGS="--chain --phases --as-token" cuda/run_gpu_suite.sh bench-ops
cat "$OUT/summary.txt" >> "$s"
grep -A12 "the tail by multiprocessor" "$OUT/bench-ops.log" | tee -a "$s"
rm -f "$OUT/summary.txt" "$OUT/configure.log"
cd "$OUT" && tar czf all.tgz --exclude=all.tgz --exclude=build.log ./* && find . -type f ! -name all.tgz ! -name summary-all.txt -delete
