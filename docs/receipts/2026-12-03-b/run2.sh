#!/usr/bin/env bash
# 2026-12-03-b run 2 (H200, the machine of run 1 still warm, its build kept): the long-context diff cases alone, all 7
# in one process, since run 1 stopped inside the fifth at its 570 s limit.
OUT=${OUT:-/tmp/hkv-out}; s=$OUT/summary-all.txt; t=$SECONDS
timeout 560 build/hkv diff --long --filter long > $OUT/diff-long-full.txt 2>&1; echo "diff --long --filter long: rc=$?, $((SECONDS - t)) s" | tee $s; cat $OUT/diff-long-full.txt | tee -a $s
