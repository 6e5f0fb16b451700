#!/usr/bin/env bash
# Session 33's plan, the second call (the machine of run1.sh, still warm, its build-gpu kept): the fidelity gate on
# the engine at every depth of the default fixture, exact prefill (what scripts/run runs on a GPU; 202 s in session
# 30), on session 32's q4h arithmetic; then hkv generate on the engine against the oracle's tokens (plain, --draft,
# --batch, three caches, both trained checkpoints). About 5 minutes.
# usage: bash docs/receipts/s33/run2.sh
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
s=$OUT/summary-all.txt
HKV_GATE_LIMIT=300 HKV_GATE_ARGS="--depths 1024,8192,32768,65536,131072,262144" cuda/run_gpu_suite.sh gate generate
cp "$OUT/summary.txt" "$s"
rm -f "$OUT/summary.txt" "$OUT/configure.log" "$OUT/build.log"
tail -30 "$s"
