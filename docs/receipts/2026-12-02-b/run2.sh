#!/usr/bin/env bash
# 2026-12-02-b run 2 (H200, warm after run 1, same build: tree 0446242): slim from one chunk block a multiprocessor
# (HKV_ATTN_SLIM_MIN=1, an experiment then) against the rule of the time (3), around 2P at batch 1.
mkdir -p $OUT; timeout 400 build-gpu/hkv bench --variants "default;HKV_ATTN_SLIM_MIN=1" --depths 20480,24576,28672,32768,36864,40960,45056,49152 --kv-cache q4h,fp8 --tokens 8 --rounds 5 --json $OUT/run2-bench-ab-min.json > $OUT/run2-bench-ab-min.log 2>&1
