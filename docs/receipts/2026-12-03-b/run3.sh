#!/usr/bin/env bash
# 2026-12-03-b run 3 (H200): scripts/run, the main job, on a fresh machine with the headers from .deps: the gate on the
# oracle at 1K and on the engine at every depth of the default fixture (1K to 261,889), exact prefill. The engine's
# rows should equal 2026-11-30-g's (RESULTS §3) to every digit: the engine is exact, and its kernels have changed since.
set -u
OUT=${OUT:-/tmp/hkv-out}
mkdir -p "$OUT" /tmp/deps
s=$OUT/summary-all.txt
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; nproc; date -u +%FT%TZ; } | tee "$s"
for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
t=$SECONDS
timeout 440 scripts/run --deps /tmp/deps/usr > "$OUT/run.log" 2>&1
echo "scripts/run: rc=$?, $((SECONDS - t)) s" | tee -a "$s"
grep -v "^\[\|Building\|Linking\|Built target\|rows [0-9]*/" "$OUT/run.log" | tail -40 | tee -a "$s"
cp out/gate-*.json out/gate-*.md "$OUT/" 2>/dev/null
