#!/usr/bin/env bash
# 2026-12-03-a run 1 (H200): the decode matvec's last row groups shared between a block's warps (HKV_MV_STEAL, an
# experiment, off by default). The suites (gpu_ops runs the steal launch in its matvec cases and checks that rounds
# changed warps); gpu_engine under HKV_MV_STEAL=1; memcheck and racecheck over the matvec_multi case under it; the
# chain's phases under each; the token A-B.
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
s=$OUT/summary-all.txt
cuda/run_gpu_suite.sh ops engine
cp "$OUT/summary.txt" "$s"
grep -E "rounds taken by a warp|launch=pdl,steal\): FAIL" "$OUT/gpu_ops.log" | head -5 | tee -a "$s"
echo "--- matvec lines under steal: $(grep -c 'launch=pdl,steal): OK' "$OUT/gpu_ops.log") OK, $(grep -c 'launch=pdl,steal): FAIL' "$OUT/gpu_ops.log") FAIL" | tee -a "$s"
bin=build-gpu/tests/hkv_gpu_tests
HKV_MV_STEAL=1 timeout 170 $bin --source-file='*gpu_engine*' > "$OUT/gpu_engine-steal.log" 2>&1
echo "gpu_engine HKV_MV_STEAL=1: rc=$?, $(grep -c ': OK' "$OUT/gpu_engine-steal.log") OK, $(grep -c ': FAIL' "$OUT/gpu_engine-steal.log") FAIL" | tee -a "$s"
grep -E "test cases:|: FAIL" "$OUT/gpu_engine-steal.log" | head -5 | tee -a "$s"
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  HKV_SANITIZER=$tool timeout 200 "$san" --tool $tool --error-exitcode 1 --target-processes application-only \
    $bin --test-case='matvec_multi: fused*' > "$OUT/$tool-steal.log" 2>&1
  echo "$tool matvec_multi (steal launch among them): rc=$?; $(grep -c ': OK' "$OUT/$tool-steal.log") OK; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool-steal.log" | head -2 | tr '\n' ' ')" | tee -a "$s"
done
HKV_VARIANTS="default HKV_MV_STEAL=1" HKV_BENCH_OPS_ARGS="--chain --phases --as-token" cuda/run_gpu_suite.sh bench-ops
cat "$OUT/summary.txt" >> "$s"
for f in "$OUT"/bench-ops*.log; do echo "== $f"; grep -A12 "phases" "$f" | head -24; done >> "$s"
HKV_AB="default;HKV_MV_STEAL=1" HKV_BENCH_LIMIT=200 \
  HKV_BENCH_ARGS="--depths 1024,32768,131072 --kv-cache q4h,bf16 --tokens 8 --rounds 5" cuda/run_gpu_suite.sh bench-ab
cat "$OUT/summary.txt" >> "$s"
rm -f "$OUT/summary.txt" "$OUT/configure.log"
cd "$OUT" && tar czf all.tgz --exclude=all.tgz --exclude=build.log ./* && find . -type f ! -name all.tgz ! -name summary-all.txt -delete
