#!/usr/bin/env bash
# 2026-12-02-b run 3 (H200, warm after run 2, same build: tree 0446242): slim from one chunk block a multiprocessor
# (HKV_ATTN_SLIM_MIN=1, an experiment then) against the rule of the time (3), closer to 2P, and 16K and 56K.
mkdir -p $OUT; timeout 400 build-gpu/hkv bench --variants "default;HKV_ATTN_SLIM_MIN=1" --depths 16384,30720,31744,32767,32768,33792,34816,57344 --kv-cache q4h,fp8 --tokens 8 --rounds 5 --json $OUT/run3-bench-ab-min.json > $OUT/run3-bench-ab-min.log 2>&1
