#!/usr/bin/env bash
# Call 2 on the lent card: why the ring attention kernel (HKV_ATTN_Q4H_FORM=9) is slower than the bulk kernel (8).
# Builds hkv alone, then: the attention alone at 128K and 262K, form 8 and form 9 on its own grid (0: two blocks a
# multiprocessor, 264) and on grids of 528, 1,024 and 2,048 blocks (2,048: one chunk a block at 262K, as form 8 takes
# them), which tells what the ring's code costs apart from its persistence; then ncu's issue activity, occupancy,
# DRAM throughput and stall reasons of the attention launches at 262K (cuda/profile_stalls.sh's attn part), one
# process a form.
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-c/call2.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back" /tmp/deps
s="$back/call2-summary.txt"
for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$s"
t=$SECONDS
{ cmake -S . -B build-gpu -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_STANDARD=17 \
    -DCMAKE_CUDA_FLAGS=-lineinfo -DHKV_DEPS_PREFIX=/tmp/deps/usr && cmake --build build-gpu -j16 --target hkv; } \
  > "$back/call2-build.log" 2>&1
echo "build: rc=$?, $((SECONDS - t)) s" | tee -a "$s"
for setting in 8:0 9:0 9:528 9:1024 9:2048; do
  form=${setting%:*} blocks=${setting#*:}
  echo "== HKV_ATTN_Q4H_FORM=$form HKV_ATTN_RING_BLOCKS=$blocks" >> "$back/call2-bench-attn.txt"
  HKV_ATTN_Q4H_FORM=$form HKV_ATTN_RING_BLOCKS=$blocks timeout 60 build-gpu/hkv bench --attention-only \
    --kv-cache q4h --reps 10 --depths 131072,262144 >> "$back/call2-bench-attn.txt" 2>&1
  echo "bench --attention-only, form $form, ring blocks $blocks: rc=$?" >> "$s"
done
grep -E "^\| q4h|^==" "$back/call2-bench-attn.txt" | tee -a "$s"
for form in 8 9; do
  mkdir -p "$back/form$form"
  HKV_ATTN_Q4H_FORM=$form HKV_STALLS_PARTS=attn HKV_STALLS_ATTN="--depths 262144 --kv-cache q4h" \
    OUT="$back/form$form" timeout 100 cuda/profile_stalls.sh build-gpu/hkv > "$back/form$form/stalls.txt" 2>&1
  echo "stalls, HKV_ATTN_Q4H_FORM=$form: rc=$?" | tee -a "$s"
  grep -E "^\||error" "$back/form$form/stalls.txt" | tee -a "$s"
done
