#!/usr/bin/env bash
# 2026-12-04-a run 1 (H200): the q4h scores in integers (ARITHMETIC.md §6, patches/q4h-int-scores.patch).
# 1. The engine against the oracle, byte for byte: gpu_ops (every attention shape), gpu_engine (the whole model, every
#    cache format), hkv diff.
# 2. The tree with the patch reversed (main before it) built beside, in build-old/src, for run 2's benches.
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
s=$OUT/summary-all.txt
root=$PWD
mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
# the old tree in build-old/ (ignored, so kept on a warm machine for run 2): this tree less its build folders
rm -rf build-old/src && mkdir -p build-old/src && tar --exclude='./build*' --exclude=./.git -cf - . | tar -xf - -C build-old/src
(cd build-old/src && patch -R -p1 -s < "$root/docs/receipts/2026-12-04-a/patches/q4h-int-scores.patch" && echo "old tree: patch reversed") \
  > "$OUT/old-tree.log" 2>&1
(cd build-old/src && cmake -S . -B build -DHKV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DHKV_DEPS_PREFIX=/tmp/deps/usr > "$OUT/old-configure.log" 2>&1 && cmake --build build -j8 --target hkv \
  > "$OUT/old-build.log" 2>&1; echo "old build rc=$?" >> "$OUT/old-tree.log") &
oldpid=$!
cuda/run_gpu_suite.sh ops engine diff
cp "$OUT/summary.txt" "$s"
wait $oldpid
cat "$OUT/old-tree.log" | tee -a "$s"
rm -f "$OUT/summary.txt" "$OUT/configure.log" "$OUT/build.log"
tail -30 "$s"
