#!/usr/bin/env bash
# 2026-12-04-c run 2 (H200): run 1's q4h integer values with each lane's V codes loaded two blocks of 32 keys ahead (ARITHMETIC.md §6 step 3,
# patches/q4h-int-values.patch (run 1, commit fcc7a78) + patches/q4h-values-prefetch.patch).
# 1. The engine against the oracle, byte for byte: gpu_ops (every attention shape), gpu_engine (every cache format).
# 2. main before the patch (the patch reversed) built beside in build-old/src; hkv bench of both in turn, q4h at
#    1K–262K, then the attention kernels alone at 32K, 128K and 262K.
set -u
OUT=${OUT:-/tmp/hkv-out}
export OUT
s=$OUT/summary-all.txt
root=$PWD
mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
rm -rf build-old/src && mkdir -p build-old/src && tar --exclude='./build*' --exclude=./.git -cf - . | tar -xf - -C build-old/src
(cd build-old/src && patch -R -p1 -s < "$root/docs/receipts/2026-12-04-c/patches/q4h-values-prefetch.patch" && patch -R -p1 -s < "$root/docs/receipts/2026-12-04-c/patches/q4h-int-values.patch" && echo "old tree: both patches reversed") \
  > "$OUT/old-tree.log" 2>&1
(cd build-old/src && cmake -S . -B build -DHKV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DHKV_DEPS_PREFIX=/tmp/deps/usr > "$OUT/old-configure.log" 2>&1 && cmake --build build -j8 --target hkv \
  > "$OUT/old-build.log" 2>&1; echo "old build rc=$?" >> "$OUT/old-tree.log") &
oldpid=$!
cuda/run_gpu_suite.sh ops engine
cp "$OUT/summary.txt" "$s"
wait $oldpid
cat "$OUT/old-tree.log" >> "$s"
tail -40 "$OUT/gpu_ops.log" > "$OUT/gpu_ops-tail.log" 2>/dev/null
if ! grep -q "gpu_ops: rc=0" "$s" || ! grep -q "gpu_engine: rc=0" "$s"; then
  echo "not byte-equal: no bench" >> "$s"; rm -f "$OUT/summary.txt" "$OUT/configure.log" "$OUT/build.log"; cat "$s"; exit 1
fi
bench() {  # name binary
  local t=$SECONDS
  timeout 120 "$2" bench --depths 1024,32768,131072,262144 --kv-cache q4h --tokens 8 >> "$OUT/bench-$1.log" 2>&1
  echo "bench $1 rc=$? $((SECONDS - t)) s" >> "$s"
}
bench old build-old/src/build/hkv
bench new build-gpu/hkv
bench old build-old/src/build/hkv
bench new build-gpu/hkv
for b in old new; do grep -E "^\||copy bandwidth" "$OUT/bench-$b.log" | sed "s/^/$b /" >> "$s"; done
for b in old new old new; do
  bin=build-gpu/hkv
  [[ $b == old ]] && bin=build-old/src/build/hkv
  t=$SECONDS
  timeout 80 "$bin" bench --attention-only --depths 32768,131072,262144 --kv-cache q4h > "$OUT/attn-$b.log" 2>&1
  echo "attn $b rc=$? $((SECONDS - t)) s" >> "$s"
  grep -E "^\|" "$OUT/attn-$b.log" | sed "s/^/$b /" >> "$s"
done
rm -f "$OUT/summary.txt" "$OUT/configure.log" "$OUT/build.log"
tail -60 "$s"
