#!/usr/bin/env bash
# Session 28 run 5 (H200): the engine's gate at 128K (run 4, at 262K, did not fit the device time left),
# with this session's engine (main's kernels): only the hkv target built (the device time left held no more than
# that), then the GPU half of scripts/run at --depths 131072. Its rows should equal session 9's (RESULTS §3).
set -u
OUT=${OUT:-/tmp/hkv-out}
mkdir -p "$OUT" /tmp/deps
s=$OUT/summary-all.txt
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; date -u +%FT%TZ; } | tee "$s"
for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
t=$SECONDS
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DHKV_DEPS_PREFIX=/tmp/deps/usr -DCMAKE_CUDA_ARCHITECTURES=90a > "$OUT/configure.log" 2>&1
cmake --build build -j 16 --target hkv > "$OUT/build.log" 2>&1
echo "build: rc=$?, $((SECONDS - t)) s" | tee -a "$s"
t=$SECONDS
build/hkv gate --fixture fixtures/trained-gate.json --backend cuda --no-floor --depths 131072 \
  --json "$OUT/gate-128k.json" --md "$OUT/gate-128k.md" > "$OUT/gate.log" 2>&1
echo "gate: rc=$?, $((SECONDS - t)) s" | tee -a "$s"
grep -v "rows [0-9]*/" "$OUT/gate.log" | tail -14 | tee -a "$s"
