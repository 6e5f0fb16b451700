#!/usr/bin/env bash
# The oracle's q4h prefill, three builds without CUDA (Release, 2 threads), one after another, the machine otherwise idle:
# before = 8ac7614 (before 2026-12-04-c's values change), head = f9c8ea1 (main at 2026-12-04-d's start), after = a799e30.
M=${M:-/work/main/fixtures/trained/hf}
declare -A bin=([before]=/tmp/old/build/hkv [head]=/tmp/head/build/hkv [after]=/work/main/build-cpu/hkv)
for n in 2k 8k; do
  for b in before head after; do
    /usr/bin/time -f "$b q4h $n %e s" ${bin[$b]} logits --model $M --tokens t$n.u32 --out T_${b}_$n.f32 --kv-cache q4h --backend cpu 2>&1 | tail -1
  done
  cmp T_head_$n.f32 T_after_$n.f32 && echo "$n head = after, byte for byte"
done
for b in before head after; do
  /usr/bin/time -f "$b gate 1K %e s" ${bin[$b]} gate --fixture /work/main/fixtures/trained-gate.json --backend cpu --depths 1024 --json G_$b.json > G_$b.log 2>&1; tail -1 G_$b.log
done
