#!/usr/bin/env bash
# Call 2 on the lent card, on the machine call 1 left warm: the engine's gate at every depth (HKV_GATE_FORMATS, by
# default fp8,q4h) on the recall fixture that call 1 trained (build-gpu/recall-export, copied into fixtures/recall);
# then a q4h token at 1K, 32K, 128K and 262K with attention forms 8 and 9 (`hkv bench --variants`).
# usage (on the device, from the repository root): bash docs/receipts/2026-12-07-b/call2.sh
set -uo pipefail
back=${OUT:-/tmp/hkv-back}
mkdir -p "$back"
if [[ -d build-gpu/recall-export/hf ]]; then
  cp build-gpu/recall-export/hf/* fixtures/recall/hf/ && cp build-gpu/recall-export/mlx/* fixtures/recall/mlx/
fi
sha256sum fixtures/recall/hf/model.safetensors fixtures/recall/mlx/model.safetensors | tee "$back/call2-models.txt"
if [[ ! -x build-gpu/hkv ]]; then
  for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
  cmake -S . -B build-gpu -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_STANDARD=17 \
    -DCMAKE_CUDA_FLAGS=-lineinfo -DHKV_DEPS_PREFIX=/tmp/deps/usr > /dev/null && cmake --build build-gpu -j16 --target hkv > /dev/null
fi
t=$SECONDS
timeout 400 build-gpu/hkv gate --fixture fixtures/recall-gate.json --backend cuda --no-floor \
  --formats "${HKV_GATE_FORMATS:-fp8,q4h}" --depths 1K,8K,32K,64K,128K,256K --json "$back/call2-gate-recall-cuda.json" \
  > "$back/call2-gate-recall-cuda.txt" 2>&1
echo "gate: rc=$?, $((SECONDS - t)) s" | tee -a "$back/call2-gate-recall-cuda.txt"
tail -40 "$back/call2-gate-recall-cuda.txt"
# then a q4h token with the bulk kernel (the default) and the ring kernel (HKV_ATTN_Q4H_FORM=9), in one process
t=$SECONDS
timeout 150 build-gpu/hkv bench --depths 1K,32K,128K,256K --kv-cache q4h --variants "default;HKV_ATTN_Q4H_FORM=9" \
  --rounds 2 --tokens 16 > /tmp/tok.log 2>&1
echo "token variants: rc=$?, $((SECONDS - t)) s" | tee "$back/call2-token-forms.txt"
grep -vE "^\s*$" /tmp/tok.log | tail -24 >> "$back/call2-token-forms.txt"
tail -12 "$back/call2-token-forms.txt"
