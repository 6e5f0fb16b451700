#!/usr/bin/env bash
# usage: tests/cuda_portable_build.sh NVCC SOURCE_DIR OUT_DIR FILE.cu...
# Compiles each CUDA file's device code for sm_80 (a card before Hopper); exits 1 naming every file that fails.
set -uo pipefail
nvcc=$1 src=$2 out=$3
shift 3
mkdir -p "$out"
failed=()
for f in "$@"; do
  if ! "$nvcc" -std=c++17 -arch=sm_80 -I"$src" -DHKV_HAVE_CUDA=1 -cubin -o "$out/$(basename "$f" .cu).cubin" "$f"; then
    failed+=("$(basename "$f")")
  fi
done
if ((${#failed[@]})); then
  echo "cuda_portable_build: sm_80 build failed for: ${failed[*]}"
  exit 1
fi
echo "cuda_portable_build: $# files built for sm_80"
