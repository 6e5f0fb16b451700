#!/usr/bin/env bash
# 2026-12-04-d (CPU): the logits that kl.py compares. OLD is hkv built from main before 2026-12-04-c's values change
# (8ac7614), NEW from main after it; both on the oracle, the trained model, the first 2,048 and 8,192 tokens of its
# held-out text, q4h and bf16 caches. usage: OLD=/path/to/old/hkv NEW=/path/to/new/hkv bash logits.sh (in a scratch
# folder; then python3 kl.py there).
set -eu
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
head -c 8192 "$root/fixtures/trained/heldout.u32" > t2k.u32
head -c 32768 "$root/fixtures/trained/heldout.u32" > t8k.u32
for n in 2k 8k; do
  for side in old new; do
    bin=$NEW
    [ $side = old ] && bin=$OLD
    for c in q4h bf16; do
      "$bin" logits --model "$root/fixtures/trained/hf" --tokens t$n.u32 --out ${side}_${c}_$n.f32 --kv-cache $c --backend cpu
    done
  done
  cmp old_bf16_$n.f32 new_bf16_$n.f32 && echo "$n: bf16 logits equal, byte for byte"
done
