#!/usr/bin/env bash
# 2026-12-03-c run 3 (H200): SwiGLU and its records made by the MLP's gate|up launch (HKV_MV_SWIGLU, an experiment, off
# by default), so that silu_mul_xq's 64 launches a token go: gpu_engine (the whole model against the oracle, byte for
# byte) under the switch, then the token A-B in one process.
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
s=$OUT/summary-all.txt
HKV_MV_SWIGLU=1 cuda/run_gpu_suite.sh engine
cp "$OUT/summary.txt" "$s"
HKV_AB="default;HKV_MV_SWIGLU=1" HKV_BENCH_LIMIT=220 \
  HKV_BENCH_ARGS="--depths 1024,32768 --kv-cache q4h --tokens 8 --rounds 5" cuda/run_gpu_suite.sh bench-ab
cat "$OUT/summary.txt" >> "$s"
rm -f "$OUT/summary.txt" "$OUT/configure.log" "$OUT/build.log"
