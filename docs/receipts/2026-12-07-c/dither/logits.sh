#!/usr/bin/env bash
# 2026-12-07-c (CPU): the logits that kl.py compares, for the study "q4h's rounding with a subtractive dither"
# (dither.patch: HKV_STUDY_DITHER=1 dithers K and V, 2 V alone, 3 K alone, 4 neither, each at q4h's group, rotation and
# searched fp16 scale, read back through the bf16 cache). STUDY is hkv built from main with the patch (CPU only); MAIN
# is main's own build (its bf16 and q4h caches, the references). The oracle, fixtures/trained/mlx, the first 2,048 and
# 8,192 tokens of its held-out text.
# usage: MAIN=/path/to/main/hkv STUDY=/path/to/study/hkv bash logits.sh (in a scratch folder; then python3 kl.py there)
set -eu
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)
m=$root/fixtures/trained/mlx
head -c 8192 "$root/fixtures/trained/heldout.u32" > t2k.u32
head -c 32768 "$root/fixtures/trained/heldout.u32" > t8k.u32
for n in 2k 8k; do
  for c in bf16 q4h; do "$MAIN" logits --model "$m" --tokens t$n.u32 --out main_${c}_$n.f32 --kv-cache $c; done
  "$STUDY" logits --model "$m" --tokens t$n.u32 --out d0_$n.f32
  cmp main_bf16_$n.f32 d0_$n.f32 && echo "$n: the study build with HKV_STUDY_DITHER unset = main's bf16 cache, byte for byte"
  for d in 4 1 2 3; do HKV_STUDY_DITHER=$d "$STUDY" logits --model "$m" --tokens t$n.u32 --out d${d}_$n.f32; done
done
