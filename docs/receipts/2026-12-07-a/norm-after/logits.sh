#!/usr/bin/env bash
# 2026-12-07-a (CPU): the logits that kl.py compares, for the study "the norm's scale after the product" (norm-after.patch:
# the products that read a normed x read x' = h·(1 + w), and each of their outputs is multiplied by the token's
# r = rsqrt(mean(h²) + eps); on with HKV_STUDY_NORM_AFTER set, else the oracle as in main). STUDY is hkv built from
# main with the patch (CPU only); MAIN is main's own build. The oracle, the trained model (hf: bf16 weights; mlx: MLX
# 4-bit), the first 2,048 and 8,192 tokens of its held-out text, bf16 and q4h caches.
# usage: MAIN=/path/to/main/hkv STUDY=/path/to/study/hkv bash logits.sh (in a scratch folder; then python3 kl.py there)
set -eu
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)
head -c 8192 "$root/fixtures/trained/heldout.u32" > t2k.u32
head -c 32768 "$root/fixtures/trained/heldout.u32" > t8k.u32
for n in 2k 8k; do
  for w in mlx hf; do
    for c in bf16 q4h; do
      "$MAIN" logits --model "$root/fixtures/trained/$w" --tokens t$n.u32 --out main_${w}_${c}_$n.f32 --kv-cache $c
      "$STUDY" logits --model "$root/fixtures/trained/$w" --tokens t$n.u32 --out off_${w}_${c}_$n.f32 --kv-cache $c
      HKV_STUDY_NORM_AFTER=1 "$STUDY" logits --model "$root/fixtures/trained/$w" --tokens t$n.u32 \
        --out after_${w}_${c}_$n.f32 --kv-cache $c
      cmp main_${w}_${c}_$n.f32 off_${w}_${c}_$n.f32 && echo "$n $w $c: the study build with the switch off = main, byte for byte"
    done
  done
done
