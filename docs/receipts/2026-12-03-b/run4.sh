#!/usr/bin/env bash
# 2026-12-03-b runs 4 and 5 (H200, not run: see README.md) and run 6 (`run4.sh 65536`, run): the engine's gate at one depth, with this session's engine
# (main's kernels): only the hkv target built, then the GPU half of scripts/run at that depth. usage: run4.sh [DEPTH]
# (default 262144, the window's end, run at 261,889; run 5 was 131072). Its rows should equal 2026-11-30-g's (RESULTS §3).
set -u
depth=${1:-262144}
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
build/hkv gate --fixture fixtures/trained-gate.json --backend cuda --no-floor --depths "$depth" \
  --json "$OUT/gate-$depth.json" --md "$OUT/gate-$depth.md" > "$OUT/gate.log" 2>&1
echo "gate at $depth: rc=$?, $((SECONDS - t)) s" | tee -a "$s"
grep -v "rows [0-9]*/" "$OUT/gate.log" | tail -14 | tee -a "$s"
