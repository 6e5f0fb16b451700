#!/usr/bin/env bash
# One call on the lent card: unpack the header packages carried in .deps, run cuda/run_gpu_suite.sh's stages
# (the arguments) with its logs in /tmp/hkv-out, and bring back the summary and every log as one archive.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-06-a/run.sh NAME STAGE...
# Environment passes through to the suite (HKV_BENCH_ARGS, HKV_GATE_ARGS, HKV_GATE_LIMIT, ...).
set -uo pipefail
name=$1
shift
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
export OUT=/tmp/hkv-out
cuda/run_gpu_suite.sh "$@"
rc=$?
cp "$OUT/summary.txt" "$back/$name-summary.txt"
tar czf "$back/$name-logs.tgz" -C "$OUT" --exclude='*.ncu-rep' .
exit $rc
