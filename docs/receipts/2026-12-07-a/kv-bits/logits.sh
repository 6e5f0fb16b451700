#!/usr/bin/env bash
# 2026-12-07-a (CPU): the logits that kl.py compares, for the study "K and V at other bit widths in the same bytes"
# (kv-bits.patch: HKV_STUDY_KBITS / HKV_STUDY_VBITS round each K / V row to b-bit codes at q4h's group, rotation and
# searched fp16 scale, 32·b + 16 bytes a row, read back through the bf16 cache). STUDY is hkv built from main with
# the patch (CPU only); MAIN is main's own build (its bf16 and q4h caches, the references). The oracle,
# fixtures/trained/mlx, the first 2,048 and 8,192 tokens of its held-out text.
# usage: MAIN=/path/to/main/hkv STUDY=/path/to/study/hkv bash logits.sh (in a scratch folder; then python3 kl.py there)
set -eu
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)
m=$root/fixtures/trained/mlx
head -c 8192 "$root/fixtures/trained/heldout.u32" > t2k.u32
head -c 32768 "$root/fixtures/trained/heldout.u32" > t8k.u32
for n in 2k 8k; do
  for c in bf16 q4h; do "$MAIN" logits --model "$m" --tokens t$n.u32 --out main_${c}_$n.f32 --kv-cache $c; done
  "$STUDY" logits --model "$m" --tokens t$n.u32 --out k0v0_$n.f32
  cmp main_bf16_$n.f32 k0v0_$n.f32 && echo "$n: the study build with no bits set = main's bf16 cache, byte for byte"
  for kv in "4 4" "4 0" "0 4" "5 3" "6 2" "3 5"; do
    set -- $kv
    HKV_STUDY_KBITS=$1 HKV_STUDY_VBITS=$2 "$STUDY" logits --model "$m" --tokens t$n.u32 --out k$1v$2_$n.f32
  done
done
