#!/usr/bin/env bash
# 2026-12-04-a run 3 (H200): the landing tree, with slim's q4h scores on the tensor cores (q4h_imma_scores, the default;
# HKV_ATTN_Q4H_IMMA=0 the dp4a scores of runs 1-2).
# 1. gpu_ops (every attention shape and switch, the dp4a rows among them) and gpu_engine, byte for byte.
# 2. The token, IMMA against dp4a in one process (interleaved rounds), q4h from 64K, where Auto takes slim.
# 3. The attention kernels alone, each form.
# 4. The fidelity gate on the engine at every depth of the default fixture (what scripts/run runs on a GPU).
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
s=$OUT/summary-all.txt
cuda/run_gpu_suite.sh ops engine
cp "$OUT/summary.txt" "$s"
HKV_AB="default;HKV_ATTN_Q4H_IMMA=0" HKV_BENCH_LIMIT=150 \
  HKV_BENCH_ARGS="--depths 65536,131072,262144 --kv-cache q4h --tokens 8 --rounds 4" cuda/run_gpu_suite.sh bench-ab
cat "$OUT/summary.txt" >> "$s"
for v in 1 0; do
  HKV_ATTN_Q4H_IMMA=$v timeout 100 build-gpu/hkv bench --attention-only --depths 131072,262144 --kv-cache q4h \
    > "$OUT/attn-imma$v.log" 2>&1
  echo "attn HKV_ATTN_Q4H_IMMA=$v rc=$?" >> "$s"
  grep -E "^\|" "$OUT/attn-imma$v.log" >> "$s"
done
t=$SECONDS
timeout 250 build-gpu/hkv gate --fixture fixtures/trained-gate.json --backend cuda --no-floor \
  --json "$OUT/gate-cuda.json" --md "$OUT/gate-cuda.md" > "$OUT/gate.log" 2>&1
echo "gate (engine, every depth): rc=$?, $((SECONDS - t)) s" >> "$s"
grep -E "^(format|fp8|q4h) |gate:" "$OUT/gate.log" >> "$s"
rm -f "$OUT/summary.txt" "$OUT/configure.log" "$OUT/build.log"
tail -45 "$s"
