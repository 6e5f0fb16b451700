#!/usr/bin/env bash
# 2026-12-03-b run 1 (H200): the GPU runner's path as the README gives it, on a fresh machine that reaches no
# package registry: the header packages unpacked from .deps, then scripts/gpu-ci --deps (build, every CTest test
# over the machine's GPUs through CTest's resource spec, JUnit report, then `hkv diff --long --filter long`, the
# long-context cases against the oracle, with the oracle's attention of this session).
set -u
OUT=${OUT:-/tmp/hkv-out}
mkdir -p "$OUT" /tmp/deps
s=$OUT/summary-all.txt
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; nproc; date -u +%FT%TZ; } | tee "$s"
for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
t=$SECONDS
timeout 570 scripts/gpu-ci --deps /tmp/deps/usr > "$OUT/gpu-ci.log" 2>&1
echo "gpu-ci: rc=$?, $((SECONDS - t)) s" | tee -a "$s"
grep -E "tests passed|tests failed|Test +#|Skipped|Passed|\*\*\*" "$OUT/gpu-ci.log" | tail -30 | tee -a "$s"
grep -E "long|passed, |FAIL" out/diff-long.txt 2>/dev/null | tee -a "$s"
cp out/junit.xml out/diff-long.txt "$OUT/" 2>/dev/null
grep -c "<testcase" "$OUT/junit.xml" 2>/dev/null | sed 's/^/junit testcases: /' | tee -a "$s"
