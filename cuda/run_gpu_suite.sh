#!/usr/bin/env bash
# Builds the CUDA engine and runs, on the GPU machine, the GPU suite and the bench; full logs under $OUT,
# a short table last. usage: cuda/run_gpu_suite.sh [ops] [engine] [diff] [gate] [bench] [sanitize] [prefill]
# (default: ops engine bench)
# Headers missing there (doctest, xxhash, nlohmann-json) travel as .deb files in .deps (shared/device.md).
set -uo pipefail
OUT=${OUT:-/tmp/hkv-out}
mkdir -p "$OUT"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
stages="${*:-ops engine bench}"
deps=()
if ls .deps/*.deb > /dev/null 2>&1; then
  for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
  deps=(-DHKV_DEPS_PREFIX=/tmp/deps/usr)
fi
summary="$OUT/summary.txt"
: > "$summary"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$summary"
date -u +"date %Y-%m-%dT%H:%M:%SZ" | tee -a "$summary"
t0=$SECONDS
cmake -S . -B build-gpu -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_STANDARD=17 "${deps[@]}" > "$OUT/configure.log" 2>&1 \
  || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build build-gpu -j16 --target hkv_gpu_tests hkv > "$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -40; exit 1; }
echo "build: $((SECONDS - t0)) s" | tee -a "$summary"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-16}
bin=build-gpu/tests/hkv_gpu_tests
run() {  # name timeout args...
  local name=$1 limit=$2
  shift 2
  local t=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local fails
  fails=$(grep -c ": FAIL" "$OUT/$name.log")
  echo "$name: rc=$rc, $(grep -c ': OK' "$OUT/$name.log") OK lines, $fails FAIL lines, $((SECONDS - t)) s" | tee -a "$summary"
  grep -E ": FAIL|ERROR|exception|test cases:" "$OUT/$name.log" | head -12 | tee -a "$summary"
}
for s in $stages; do
  case $s in
    ops) run gpu_ops 45 $bin --source-file='*gpu_ops*' ;;
    engine) run gpu_engine 170 $bin --source-file='*gpu_engine*' ;;
    sanitize)
      run memcheck 300 compute-sanitizer --tool memcheck $bin --source-file='*gpu_ops*'
      run racecheck 300 compute-sanitizer --tool racecheck $bin --source-file='*gpu_ops*' ;;
    diff)  # the table-driven differential suite (hkv diff), engine against oracle
      t=$SECONDS
      timeout "${HKV_DIFF_LIMIT:-70}" build-gpu/hkv diff ${HKV_DIFF_ARGS:-} > "$OUT/diff.log" 2>&1
      echo "diff: rc=$?, $((SECONDS - t)) s: $(grep -E '^[0-9]+ passed' "$OUT/diff.log")" | tee -a "$summary"
      grep -E ": FAIL" "$OUT/diff.log" | head -8 | tee -a "$summary" ;;
    gate)  # the fidelity gate on the engine, trained model
      t=$SECONDS
      timeout "${HKV_GATE_LIMIT:-70}" build-gpu/hkv gate --fixture fixtures/trained-gate.json --backend cuda --no-floor \
        ${HKV_GATE_ARGS:---depths 1024,8192,32768} --json "$OUT/gate-trained-cuda.json" --md "$OUT/gate-trained-cuda.md" \
        > "$OUT/gate.log" 2>&1
      echo "gate: rc=$?, $((SECONDS - t)) s" | tee -a "$summary"
      grep -E "^(fp8|q4h) " "$OUT/gate.log" | tee -a "$summary" ;;
    prefill)  # issue #6, the fast prefill path: its GPU tests, its diff cases (KL against the oracle), time and memory
      run gpu_prefill 240 $bin --source-file='*gpu_prefill*'
      t=$SECONDS
      timeout "${HKV_PREFILL_DIFF_LIMIT:-240}" build-gpu/hkv diff --op fast_prefill --long \
        --filter "${HKV_PREFILL_FILTER:-^((?!ctx=32768).)*\$}" > "$OUT/prefill-diff.log" 2>&1
      echo "prefill diff: rc=$?, $((SECONDS - t)) s: $(grep -E '^[0-9]+ passed' "$OUT/prefill-diff.log")" | tee -a "$summary"
      grep -E "^fast_prefill" "$OUT/prefill-diff.log" | head -40 | tee -a "$summary"
      t=$SECONDS
      timeout "${HKV_PREFILL_BENCH_LIMIT:-240}" build-gpu/hkv bench-prefill \
        ${HKV_PREFILL_BENCH_ARGS:---tokens 4096,32768 --kv-cache q4h} > "$OUT/prefill-bench.log" 2>&1
      echo "prefill bench: rc=$?, $((SECONDS - t)) s" | tee -a "$summary"
      grep -E "hkv bench-prefill|device limited|^\||error" "$OUT/prefill-bench.log" | tee -a "$summary" ;;
    bench)
      timeout 80 build-gpu/hkv bench ${HKV_BENCH_ARGS:---depths 1024,32768 --kv-cache bf16,q4h --tokens 8} > "$OUT/bench.log" 2>&1
      echo "bench: rc=$?" | tee -a "$summary"
      grep -E "hkv bench|copy bandwidth|peak device|^\||median" "$OUT/bench.log" | tee -a "$summary" ;;
  esac
done
echo "==== summary ===="
cat "$summary"
