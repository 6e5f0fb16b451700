#!/usr/bin/env bash
# 2026-12-02-b run 1 (H200): the suites on the tree with two experiments behind switches, each byte for byte before it
# is timed: the rolled slim score loop two words an inner iteration (HKV_ATTN_SLIM_W2=1, 2026-12-02-a's patch), and
# Auto's slim shape from fewer chunk blocks (HKV_ATTN_SLIM_MIN=1|2: b >= 1 or 2 waves, against 3). gpu_ops first: its
# attention case gained, after 2026-12-02-a's last run, the 27B shape over one row more than the multiprocessors.
# (HKV_ATTN_SLIM_MIN changes Auto's choice alone; the slim kernel's bytes at these shapes are the case's Slim rows.)
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
s=$OUT/summary-suites.txt
cuda/run_gpu_suite.sh ops engine
cp "$OUT/summary.txt" "$s"
echo "--- attention lines not OK: $(grep '^attention(' "$OUT/gpu_ops.log" | grep -vc ': OK$') of $(grep -c '^attention(' "$OUT/gpu_ops.log")" | tee -a "$s"
grep '^attention(' "$OUT/gpu_ops.log" | grep -v ': OK$' | head -10 | tee -a "$s"
for v in HKV_ATTN_SLIM_W2=1 "HKV_ATTN_SLIM_W2=1 HKV_ATTN_SLIM_FROLL=2"; do
  env $v timeout 60 build-gpu/tests/hkv_gpu_tests --test-case='*512-key*' > "$OUT/attn-w2.log" 2>&1
  echo "attention case under $v: rc=$?, $(grep '^attention(' "$OUT/attn-w2.log" | grep -c ': OK$') OK of $(grep -c '^attention(' "$OUT/attn-w2.log")" | tee -a "$s"
  grep '^attention(' "$OUT/attn-w2.log" | grep -v ': OK$' | head -5 | tee -a "$s"
done
timeout 120 build-gpu/hkv bench --attention-only --attn-shape auto,narrow-v2,slim --depths 24576,32768,49152,65536 \
  --kv-cache q4h,fp8 > "$OUT/attn-shapes.log" 2>&1
echo "attention-only shapes: rc=$?" | tee -a "$s"
grep -E "^\|" "$OUT/attn-shapes.log" | tee -a "$s"
HKV_AB="default;HKV_ATTN_SLIM_W2=1;HKV_ATTN_SLIM_W2=1,HKV_ATTN_SLIM_FROLL=2" \
  HKV_BENCH_ARGS="--depths 65536,131072,262144 --kv-cache q4h,fp8 --tokens 8 --rounds 5" \
  cuda/run_gpu_suite.sh bench-ab
cat "$OUT/summary.txt" >> "$s"
timeout 170 build-gpu/hkv bench --variants "default;HKV_ATTN_SLIM_MIN=1;HKV_ATTN_SLIM_MIN=2" \
  --depths 24576,32768,49152 --kv-cache q4h,fp8 --tokens 8 --rounds 5 --json "$OUT/bench-ab-min.json" \
  > "$OUT/bench-ab-min.log" 2>&1
echo "bench-ab (slim min): rc=$?" | tee -a "$s"
grep -E "^\||copy bandwidth" "$OUT/bench-ab-min.log" | tee -a "$s"
rm -f "$OUT/summary.txt" "$OUT/configure.log"
cd "$OUT" && tar czf all.tgz --exclude=all.tgz --exclude=build.log ./* && find . -type f ! -name all.tgz ! -name summary-suites.txt -delete
