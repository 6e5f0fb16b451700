#!/usr/bin/env bash
# usage: tests/cuda_portable_build.sh NVCC SOURCE_DIR OUT_DIR FILE.cu...
# Compiles each CUDA file's device code for sm_80 (a card before Hopper); exits 1 naming every file that fails.
# The files compile side by side, HKV_JOBS at a time (default: the machine's cores). What this test catches is code
# the front end or ptxas refuses for sm_80 (a cluster type, a Hopper instruction), which neither optimizer decides, so
# both run at -O0 (attention/chunk.cu: 26 s on 2 cores, 164 s optimized); a guard removed from an mbarrier wait in
# device.cuh, or from deltanet.cu's clusters, still fails it.
set -uo pipefail
nvcc=$1 src=$2 out=$3
shift 3
mkdir -p "$out"
rm -f "$out"/*.failed
export nvcc src out
printf '%s\n' "$@" | xargs -P "${HKV_JOBS:-$(nproc)}" -I{} bash -c '
  f={} name=$(basename {} .cu)
  "$nvcc" -std=c++17 -arch=sm_80 -I"$src" -DHKV_HAVE_CUDA=1 -cubin -Xcicc -O0 -Xptxas -O0 -o "$out/$name.cubin" "$f" > "$out/$name.log" 2>&1 ||
    { cat "$out/$name.log"; touch "$out/$name.failed"; }'
failed=$(cd "$out" && ls -- *.failed 2> /dev/null | sed 's/\.failed$/.cu/' | tr '\n' ' ')
if [ -n "$failed" ]; then
  echo "cuda_portable_build: sm_80 build failed for: $failed"
  exit 1
fi
echo "cuda_portable_build: $# files built for sm_80"
