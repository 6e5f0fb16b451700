#!/usr/bin/env bash
# 2026-12-04-d's plan, the second call (the machine of run1.sh, still warm, its build-gpu kept; about 7 minutes):
# 1. compute-sanitizer memcheck, racecheck and initcheck over the attention case (q4h_int_values' shared scratch, its
#    __syncwarp pairs and ldmatrix reads are new), in the slim and narrow-v2 shapes, the three at once.
# 2. the fidelity gate on the engine at every depth of the default fixture, exact prefill (what scripts/run runs on a
#    GPU; 202 s in 2026-12-04-a), on 2026-12-04-c's q4h arithmetic;
# 3. hkv generate on the engine against the oracle's tokens (plain, --draft, --batch, three caches, both checkpoints).
# usage: bash docs/receipts/2026-12-04-d/run2.sh
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
s=$OUT/summary-all.txt
HKV_TEST_ATTN_SHAPES=slim,narrow-v2 HKV_SAN_PARALLEL=1 HKV_SAN_LIMIT=150 \
  HKV_SAN_RUNS="memcheck:ops:*512-key* racecheck:ops:*512-key* initcheck:ops:*512-key*" cuda/run_gpu_suite.sh sanitize
cp "$OUT/summary.txt" "$s"
HKV_GATE_LIMIT=300 HKV_GATE_ARGS="--depths 1024,8192,32768,65536,131072,262144" cuda/run_gpu_suite.sh gate generate
grep -vE "^(NVIDIA|date|build)" "$OUT/summary.txt" >> "$s"
rm -f "$OUT/summary.txt" "$OUT/configure.log" "$OUT/build.log"
tail -40 "$s"
