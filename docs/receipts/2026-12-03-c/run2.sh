#!/usr/bin/env bash
# 2026-12-03-c run 2 (H200): issue #6's 262K prefill goal (under 60 s) on main's engine, last measured in 2026-11-30-e
# (RESULTS §13: 45.82 s on the whole card, 56.82 s in 20 GiB): only the hkv target built, then the fast prefill of a
# 262,140-token prompt with the q4h cache and 4 exact decode tokens after it, on the whole card and, in a process of
# its own, within 20 GiB (the rest of the card held as ballast).
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
git rev-parse --short HEAD | tee -a "$s"
t=$SECONDS
build/hkv bench-prefill --tokens 262140 --kv-cache q4h --decode 4 > "$OUT/prefill-262k.log" 2>&1
echo "bench-prefill 262140: rc=$?, $((SECONDS - t)) s" | tee -a "$s"
tail -8 "$OUT/prefill-262k.log" | tee -a "$s"
t=$SECONDS
build/hkv bench-prefill --tokens 262140 --kv-cache q4h --decode 4 --limit-gib 20 > "$OUT/prefill-262k-20gib.log" 2>&1
echo "bench-prefill 262140 --limit-gib 20: rc=$?, $((SECONDS - t)) s" | tee -a "$s"
tail -8 "$OUT/prefill-262k-20gib.log" | tee -a "$s"
date -u +%FT%TZ | tee -a "$s"
