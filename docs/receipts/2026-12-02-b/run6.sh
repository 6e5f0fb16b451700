#!/usr/bin/env bash
# 2026-12-02-b run 6 (H200): the landing tree (7352680's code): gpu_ops, and the rule at its boundary against the old.
cuda/run_gpu_suite.sh ops > /dev/null 2>&1; grep -E "build|gpu_ops" $OUT/summary.txt; echo "attention not OK: $(grep '^attention(' $OUT/gpu_ops.log | grep -vc ': OK$') of $(grep -c '^attention(' $OUT/gpu_ops.log)"; timeout 100 build-gpu/hkv bench --variants "default;HKV_ATTN_SLIM_FROM=30" --depths 16896,17408,34816 --kv-cache q4h,fp8 --tokens 8 --rounds 5 2>&1 | grep -E "^\|"
