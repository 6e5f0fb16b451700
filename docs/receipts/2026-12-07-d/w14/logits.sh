#!/usr/bin/env bash
# 2026-12-07-d (CPU): the logits that kl.py compares, for the study "q4h's value weights W in fewer bits".
# study-wbits.patch makes reference/model.cpp's q4h_chunk_values hold W as round_even(e·s·2^(K−E)) with K from
# HKV_STUDY_WBITS (21 without it: the contract before the change). STUDY is hkv built (CPU only) from the tree before
# the change with that patch; MAIN the same tree's own build. The oracle, fixtures/trained/mlx, the first 2,048 and
# 8,192 tokens of its held-out text.
# usage: MAIN=/path/to/main/hkv STUDY=/path/to/study/hkv bash logits.sh (in a scratch folder; then python3 kl.py there)
set -eu
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)
m=$root/fixtures/trained/mlx
head -c 8192 "$root/fixtures/trained/heldout.u32" > t2k.u32
head -c 32768 "$root/fixtures/trained/heldout.u32" > t8k.u32
for n in 2k 8k; do
  for c in bf16 q4h; do "$MAIN" logits --model "$m" --tokens t$n.u32 --out main_${c}_$n.f32 --kv-cache $c; done
  "$STUDY" logits --model "$m" --tokens t$n.u32 --out w21_$n.f32 --kv-cache q4h
  cmp main_q4h_$n.f32 w21_$n.f32 && echo "$n: the study build at 21 bits = main's q4h, byte for byte"
  for k in 13 9; do HKV_STUDY_WBITS=$k "$STUDY" logits --model "$m" --tokens t$n.u32 --out w${k}_$n.f32 --kv-cache q4h; done
done
