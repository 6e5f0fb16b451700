#!/usr/bin/env bash
# 2026-12-07-d (CPU): the logits that kl.py compares, for the study "a rotation seed per head". headseed.patch makes
# the oracle, with HKV_STUDY_HEADSEED set, draw a seeded q4h format's ±1 diagonal per attention layer and KV head
# (seed N·4096 + layer·64 + head) instead of one for every head. STUDY is hkv built (CPU only) from the tree of
# 0fc0e96 with the patch; MAIN that tree's own build (bf16 and q4h, the references). The oracle, fixtures/trained/mlx,
# the first 2,048 and 8,192 tokens of its held-out text; seeds 1 to 4 each way (the 8,192-token runs were stopped
# during the first: over 10 minutes a run on 2 cores; logits-log.txt has what ran).
# usage: MAIN=/path/to/main/hkv STUDY=/path/to/study/hkv bash logits.sh (in a scratch folder; then python3 kl.py there)
set -eu
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)
m=$root/fixtures/trained/mlx
head -c 8192 "$root/fixtures/trained/heldout.u32" > t2k.u32
head -c 32768 "$root/fixtures/trained/heldout.u32" > t8k.u32
for n in 2k 8k; do
  for c in bf16 q4h; do "$MAIN" logits --model "$m" --tokens t$n.u32 --out main_${c}_$n.f32 --kv-cache $c; done
  for k in 1 2 3 4; do
    "$STUDY" logits --model "$m" --tokens t$n.u32 --out shared${k}_$n.f32 --kv-cache q4h-seed$k
    HKV_STUDY_HEADSEED=1 "$STUDY" logits --model "$m" --tokens t$n.u32 --out head${k}_$n.f32 --kv-cache q4h-seed$k
  done
done
