#!/usr/bin/env bash
# Builds the CUDA engine and runs, on the GPU machine, the GPU suite and the bench; full logs under $OUT,
# a short table last. usage: cuda/run_gpu_suite.sh [ops] [engine] [alloc] [diff] [gate] [bench] [attn] [sanitize]
# [peer] [bench-ops] [bench-ab] [timeline] [profile] [profile-prefill] [profile-flash] [prefill-attn] [probe] [probe-imma]
# [probe-q4h-int] [probe-q4h-int-values] [probe-mlx4-imma] [stalls] [prefill] [generate] [sass]
# (default: ops engine bench)
#   ops       the ops: the diff table's op and attention cases (tests/gpu_diff.cpp, all of engine_diff_cases() but
#             the whole model's) and gpu_ops' kernel-internal checks; HKV_DIFF_FILTER=REGEX keeps the table's cases
#             whose name matches, as hkv diff --filter
#   alloc     tests/gpu_alloc.cpp: every device allocation of the engine made to fail in turn
#   sanitize  compute-sanitizer memcheck (with the leak check), racecheck and initcheck over the ops (as the ops
#             stage) and over gpu_engine with short contexts (HKV_GPU_SMALL=1), gpu_alloc and gpu_prefill; each run's
#             log is $OUT/<tool>-<suite>.log. HKV_SAN_RUNS picks runs ("memcheck:ops racecheck:engine ..."; default
#             all eleven; "racecheck:engine:*resumed*" takes one test case, "racecheck:ops:*512-key*" the table's
#             attention cases), HKV_SAN_LIMIT overrides each run's limit (60 s; 150 s for racecheck:ops and the
#             engine), HKV_SAN_PARALLEL=1 runs them at once; HKV_DIFF_FILTER='shape=(slim|v-staged-x2)\)' keeps the
#             attention cases to those shapes (racecheck over all of them takes minutes)
#   bench, bench-ops: HKV_VARIANTS="default HKV_PDL=0" runs each under those variables (HKV_PDL=0: no PDL)
#   peer      scripts/peer_torch.py: PyTorch's decode attention and bf16 matrix-vector products on the same
#             card, against its copy bandwidth; $OUT/peer.json
# Headers missing there (doctest, xxhash, nlohmann-json) travel as .deb files in .deps (shared/device.md).
set -uo pipefail
OUT=${OUT:-/tmp/hkv-out}
mkdir -p "$OUT"
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
stages="${*:-ops engine bench}"
if [[ -n ${HKV_TEST_ATTN_SHAPES:-} ]]; then  # the attention cases are the diff table's now, picked by name
  echo "HKV_TEST_ATTN_SHAPES is no longer read: HKV_DIFF_FILTER='shape=(slim|v-staged-x2)\)' picks attention shapes" >&2
  exit 2
fi
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
# -lineinfo: compute-sanitizer's reports name the source line; it changes no generated instruction.
cmake -S . -B build-gpu -DHKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=${HKV_CUDA_ARCH:-90a} -DCMAKE_CUDA_STANDARD=17 -DCMAKE_CUDA_FLAGS=-lineinfo "${deps[@]}" > "$OUT/configure.log" 2>&1 \
  || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build build-gpu -j16 --target hkv_gpu_tests hkv > "$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -40; exit 1; }
echo "build: $((SECONDS - t0)) s" | tee -a "$summary"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-16}
bin=build-gpu/tests/hkv_gpu_tests
# The ops: gpu_ops' kernel-internal checks and the diff table's cases but the whole model's (hkv diff, the diff stage,
# runs those; gpu_engine has the model's own contracts)
ops_args=(--source-file='*gpu_ops*,*gpu_diff*' --test-case-exclude='*whole model*')
run() {  # name timeout args...
  local name=$1 limit=$2
  shift 2
  local t=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local fails
  fails=$(grep -c ": FAIL" "$OUT/$name.log")
  echo "$name: rc=$rc, $(grep -c ': OK' "$OUT/$name.log") OK lines, $fails FAIL lines, $((SECONDS - t)) s" | tee -a "$summary"
  # (compute-sanitizer's own lines start with "=========": sanitized() reports those)
  grep -E ": FAIL|ERROR|exception|test cases:" "$OUT/$name.log" | grep -v "^=========" | head -12 | tee -a "$summary"
}
sanitized() {  # tool name timeout args...: run() under compute-sanitizer, then its summary and first reports
  local tool=$1 name=$2 limit=$3
  shift 3
  local opts=(--tool "$tool" --error-exitcode 1 --target-processes application-only)
  [[ $tool == memcheck ]] && opts+=(--leak-check full)
  HKV_SANITIZER=$tool run "$name" "$limit" "$sanitizer" "${opts[@]}" "$@"
  local line
  if [[ $tool == racecheck ]]; then
    line=$(grep -oE "RACECHECK SUMMARY: .*" "$OUT/$name.log" | tail -1)
  else
    line=$(grep -oE "ERROR SUMMARY: .*" "$OUT/$name.log" | tail -1)
  fi
  echo "$name: ${line:-no sanitizer summary (killed by the time limit?)}" | tee -a "$summary"
  grep -E "^========= +(Invalid|Uninitialized|Leaked|Error|Race|Program hit|Warning|ERROR:)" "$OUT/$name.log" \
    | sort | uniq -c | sort -rn | head -6 | tee -a "$summary"
}
# A probe of the card (tests/probe_*.cu, not built by default): stage target limit meaning-of-0 [args...]: build it,
# run it, its exit status and output into the summary.
probe_stage() {
  local name=$1 target=$2 limit=$3 ok=$4
  shift 4
  cmake --build build-gpu --target "$target" > "$OUT/$name-build.log" 2>&1 || tail -20 "$OUT/$name-build.log"
  timeout "$limit" "build-gpu/tests/$target" "$@" > "$OUT/$name.log" 2>&1
  echo "$name: rc=$? (0: $ok)" | tee -a "$summary"
  tee -a "$summary" < "$OUT/$name.log"
}
# An HKV_VARIANTS entry ("default" or VAR=VALUE[,VAR=VALUE]): its log suffix, and its variables for env.
variant_suffix() { [[ $1 == default ]] || echo "-${1//[^A-Za-z0-9]/_}"; }
variant_env() { [[ $1 == default ]] || echo "${1//,/ }"; }
for s in $stages; do
  case $s in
    ops) run gpu_ops 90 $bin "${ops_args[@]}" ;;
    engine) run gpu_engine 170 $bin --source-file='*gpu_engine*' ;;
    alloc) run gpu_alloc 120 $bin --source-file='*gpu_alloc*' ;;
    sanitize)
      sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
        /usr/local/cuda/compute-sanitizer/compute-sanitizer 2> /dev/null | head -1)
      if [[ -z $sanitizer ]]; then
        echo "sanitize: compute-sanitizer not found" | tee -a "$summary"
        continue
      fi
      "$sanitizer" --version | tail -1 | tee -a "$summary"
      # HKV_SAN_RUNS: which tool over which suite (default: all of them), each entry tool:suite or
      # tool:suite:CASE (only the doctest test cases matching CASE, e.g. "racecheck:engine:*resumed*"); each
      # run's own limit, or HKV_SAN_LIMIT. HKV_SAN_PARALLEL=1: the runs at once, as separate processes (racecheck
      # is slow and leaves the card's 16 cores mostly idle), their summaries printed in order when all end.
      san_names=()
      for r in ${HKV_SAN_RUNS:-memcheck:ops memcheck:engine memcheck:alloc memcheck:prefill racecheck:ops \
        racecheck:engine racecheck:prefill initcheck:ops initcheck:engine initcheck:alloc initcheck:prefill}; do
        IFS=: read -r tool suite tcase <<< "$r"
        name="$tool-$suite${tcase:+-${tcase//[^A-Za-z0-9]/}}"
        # racecheck is the slow one: 55 s over gpu_ops, and more than 150 s for half the small engine suite
        # (H200, 2026-11-30)
        case $tool:$suite in
          racecheck:ops) limit=150 ;;
          *:engine) limit=150 ;;
          *) limit=60 ;;
        esac
        args=(--source-file="*gpu_${suite}*")
        [[ $suite == ops ]] && args=("${ops_args[@]}")
        [[ -n $tcase ]] && args+=(--test-case="$tcase")
        # shellcheck disable=SC2206  # HKV_SAN_ENGINE_ARGS: doctest filters for the engine suite's runs
        [[ $suite == engine ]] && args+=(${HKV_SAN_ENGINE_ARGS:-})
        small=$([[ $suite == engine ]] && echo 1)  # short contexts (tests/gpu_engine.cpp)
        if [[ ${HKV_SAN_PARALLEL:-0} == 1 ]]; then
          (summary="$OUT/$name.summary" && : > "$summary" &&
            HKV_GPU_SMALL=$small sanitized "$tool" "$name" "${HKV_SAN_LIMIT:-$limit}" $bin "${args[@]}" > /dev/null) &
          san_names+=("$name")
        else
          HKV_GPU_SMALL=$small sanitized "$tool" "$name" "${HKV_SAN_LIMIT:-$limit}" $bin "${args[@]}"
        fi
      done
      wait
      for name in "${san_names[@]}"; do cat "$OUT/$name.summary" | tee -a "$summary"; done ;;
    diff)  # the table-driven differential suite (hkv diff), engine against oracle
      t=$SECONDS
      timeout "${HKV_DIFF_LIMIT:-150}" build-gpu/hkv diff ${HKV_DIFF_ARGS:-} > "$OUT/diff.log" 2>&1
      echo "diff: rc=$?, $((SECONDS - t)) s: $(grep -E '^[0-9]+ passed' "$OUT/diff.log")" | tee -a "$summary"
      grep -E ": FAIL" "$OUT/diff.log" | head -8 | tee -a "$summary" ;;
    gate)  # the fidelity gate on the engine, trained model
      t=$SECONDS
      timeout "${HKV_GATE_LIMIT:-70}" build-gpu/hkv gate --fixture fixtures/trained-gate.json --backend cuda --no-floor \
        ${HKV_GATE_ARGS:---depths 1024,8192,32768} --json "$OUT/gate-trained-cuda.json" --md "$OUT/gate-trained-cuda.md" \
        > "$OUT/gate.log" 2>&1
      echo "gate: rc=$?, $((SECONDS - t)) s" | tee -a "$summary"
      grep -E "^(fp8|q4h) " "$OUT/gate.log" | tee -a "$summary" ;;
    generate)  # hkv generate on the engine: plain, --draft and --batch against the oracle's output
      t=$SECONDS
      gen_fail=0
      gen_n=0
      prompt="The quick brown fox jumps over the lazy dog. The quick brown"
      for model in fixtures/trained/hf fixtures/trained/mlx; do
        for cache in bf16 fp8 q4h; do
          common=(generate --model "$model" --prompt "$prompt" --n 24 --kv-cache "$cache" --ids)
          build-gpu/hkv "${common[@]}" --backend cpu --batch 3 > "$OUT/gen-cpu.txt" 2>> "$OUT/gen-err.txt"
          cpu_rc=$?
          for extra in "" "--draft 4" "--batch 3"; do
            # shellcheck disable=SC2086
            build-gpu/hkv "${common[@]}" --backend cuda $extra > "$OUT/gen-cuda.txt" 2>> "$OUT/gen-err.txt"
            cuda_rc=$?
            gen_n=$((gen_n + 1))
            # the oracle's first line is the full prompt's sequence; --batch prints one line a sequence.
            # Both runs must succeed and print the tokens (three lines from the oracle): two empty outputs
            # are not a match.
            same=1
            if [[ $cpu_rc != 0 || $cuda_rc != 0 || $(wc -l < "$OUT/gen-cpu.txt") != 3 ]]; then same=0
            elif [[ $extra == *batch* ]]; then cmp -s "$OUT/gen-cpu.txt" "$OUT/gen-cuda.txt" || same=0
            else cmp -s <(head -1 "$OUT/gen-cpu.txt") "$OUT/gen-cuda.txt" || same=0; fi
            if [[ $same != 1 ]]; then
              gen_fail=$((gen_fail + 1))
              echo "generate $model $cache [$extra]: FAIL (exit codes cpu $cpu_rc, cuda $cuda_rc)" | tee -a "$summary"
              head -3 "$OUT/gen-cpu.txt" "$OUT/gen-cuda.txt" | tee -a "$summary"
            fi
          done
        done
      done
      echo "generate: $((gen_n - gen_fail)) of $gen_n engine runs equal to the oracle's tokens, $((SECONDS - t)) s" | tee -a "$summary" ;;
    bench)  # decode tokens/s against the floor; the table and $OUT/bench[-variant].json (schema hkv-bench-1)
      for v in ${HKV_VARIANTS:-default}; do  # each variant: "default" or VAR=VALUE[,VAR=VALUE] for that run
        sfx=$(variant_suffix "$v")
        t=$SECONDS
        # shellcheck disable=SC2086,SC2046
        env $(variant_env "$v") timeout "${HKV_BENCH_LIMIT:-170}" build-gpu/hkv bench \
          ${HKV_BENCH_ARGS:---depths 1024,32768 --kv-cache bf16,q4h --tokens 8} --json "$OUT/bench$sfx.json" \
          > "$OUT/bench$sfx.log" 2>&1
        echo "bench [$v]: rc=$?, $((SECONDS - t)) s" | tee -a "$summary"
        grep -E "hkv bench|copy bandwidth|weights|peak device|^\||attention alone|phases|error|exception" "$OUT/bench$sfx.log" \
          | tee -a "$summary"
      done ;;
    bench-ab)  # hkv bench --variants: HKV_AB's variants ("default;HKV_DN_SPLIT=1,HKV_DN_TPC=1") in one process,
      # their tokens interleaved in rounds; $OUT/bench-ab.json
      t=$SECONDS
      # shellcheck disable=SC2086
      timeout "${HKV_BENCH_LIMIT:-170}" build-gpu/hkv bench --variants "${HKV_AB:-default;HKV_DECODE_FUSE=0}" \
        ${HKV_BENCH_ARGS:---depths 1024,32768 --kv-cache q4h --tokens 8} --json "$OUT/bench-ab.json" > "$OUT/bench-ab.log" 2>&1
      echo "bench-ab: rc=$?, $((SECONDS - t)) s" | tee -a "$summary"
      grep -E "hkv bench|copy bandwidth|variants|^\||error|exception" "$OUT/bench-ab.log" | tee -a "$summary" ;;
    timeline)  # hkv bench --timeline: a token's kernels as the card timed them (CUPTI), summed by kernel;
      # HKV_TIMELINE_ARGS picks the rows; $OUT/timeline.json
      t=$SECONDS
      # shellcheck disable=SC2086
      timeout "${HKV_BENCH_LIMIT:-170}" build-gpu/hkv bench --timeline \
        ${HKV_TIMELINE_ARGS:---depths 1024,131072 --kv-cache q4h --tokens 8} --json "$OUT/timeline.json" \
        > "$OUT/timeline.log" 2>&1
      echo "timeline: rc=$?, $((SECONDS - t)) s" | tee -a "$summary"
      grep -E "timeline |median|^  \||error|exception" "$OUT/timeline.log" | tee -a "$summary" ;;
    attn)  # the decode attention kernels alone, every shape; $OUT/attn.json
      t=$SECONDS
      timeout "${HKV_ATTN_LIMIT:-170}" build-gpu/hkv bench --attention-only \
        ${HKV_ATTN_ARGS:---depths 1024,8192,32768,131072,262144 --kv-cache q4h,bf16,fp8 --attn-shape auto,kv-staged,unstaged-x8} \
        --json "$OUT/attn.json" > "$OUT/attn.log" 2>&1
      echo "attn: rc=$?, $((SECONDS - t)) s" | tee -a "$summary"
      grep -E "copy bandwidth|attention alone|^\||phases|error|exception" "$OUT/attn.log" | tee -a "$summary" ;;
    peer)  # PyTorch on the same card: decode attention and the 27B matrix-vector shapes
      t=$SECONDS
      timeout "${HKV_PEER_LIMIT:-240}" python3 scripts/peer_torch.py --json "$OUT/peer.json" ${HKV_PEER_ARGS:-} \
        > "$OUT/peer.log" 2>&1
      echo "peer: rc=$?, $((SECONDS - t)) s" | tee -a "$summary"
      sed -n '/^== peer_torch table/,$p' "$OUT/peer.log" | tee -a "$summary"
      grep -E "Error|error:" "$OUT/peer.log" | head -5 | tee -a "$summary" ;;
    bench-ops)  # the exact MLX4 matvecs of a 27B decode token alone, against copy bandwidth (HKV_VARIANTS as bench)
      for v in ${HKV_VARIANTS:-default}; do
        sfx=$(variant_suffix "$v")
        # shellcheck disable=SC2086,SC2046
        env $(variant_env "$v") timeout 120 build-gpu/hkv bench-ops ${HKV_BENCH_OPS_ARGS:-} \
          > "$OUT/bench-ops$sfx.log" 2>&1
        echo "bench-ops [$v]: rc=$?" | tee -a "$summary"
        grep -E "^\||all matvecs" "$OUT/bench-ops$sfx.log" | tee -a "$summary"
      done ;;
    profile-prefill)  # ncu: the fast prefill's kernel time by kernel (the goal: a 262K prompt in 60 s)
      timeout "${HKV_PROFILE_LIMIT:-300}" cuda/profile_prefill.sh build-gpu/hkv "${HKV_PROFILE_TOKENS:-4096}" \
        > "$OUT/profile-prefill.log" 2>&1
      echo "profile-prefill: rc=$?" | tee -a "$summary"
      head -24 "$OUT/profile-prefill.log" | tee -a "$summary" ;;
    probe)  # tests/probe_wgmma.cu: which wgmma shared-memory descriptor encodings give the right products (sm_90a)
      probe_stage probe hkv_wgmma_probe 60 "the attention's descriptor constants give the right products" ;;
    probe-imma)  # tests/probe_imma.cu: IMMA (mma.sync int8), IDP4A and FFMA warp instructions a cycle a multiprocessor
      probe_stage probe-imma hkv_imma_probe 120 "one IMMA's sums exact" ;;
    probe-q4h-int)  # tests/probe_q4h_int_scores.cu: q4h scores under a proposed integer contract on the tensor cores
      probe_stage probe-q4h-int hkv_q4h_int_probe 120 "every sampled score equal to the host's" \
        "${HKV_PROBE_KEYS:-262144}" ;;
    probe-q4h-int-values)  # tests/probe_q4h_int_values.cu: the value phase under that contract on the tensor cores
      probe_stage probe-q4h-int-values hkv_q4h_int_values_probe 120 "every sampled output equal to the host's" \
        "${HKV_PROBE_KEYS:-262144}" ;;
    probe-mlx4-imma)  # tests/probe_mlx4_imma.cu: the exact MLX4 product's integer sums on the tensor cores, against the engine
      probe_stage probe-mlx4-imma hkv_mlx4_imma_probe 300 "every row equal to the oracle's, as bytes" ;;
    prefill-attn)  # the fast prefill's attention alone, last pass of each length, TFLOP/s (HKV_VARIANTS as bench)
      for v in ${HKV_VARIANTS:-default}; do
        sfx=$(variant_suffix "$v")
        # shellcheck disable=SC2086,SC2046
        env $(variant_env "$v") timeout "${HKV_PREFILL_ATTN_LIMIT:-120}" build-gpu/hkv bench-prefill --attention-only \
          ${HKV_PREFILL_ATTN_ARGS:---tokens 4096,32768,131072,262144} > "$OUT/prefill-attn$sfx.log" 2>&1
        echo "prefill-attn [$v]: rc=$?" | tee -a "$summary"
        grep -E "^\||error" "$OUT/prefill-attn$sfx.log" | tee -a "$summary"
      done ;;
    profile-flash)  # ncu: one fused prefill attention launch of a long prompt (its last pass), stalls and pipes
      # bench-prefill of HKV_FLASH_TOKENS (32768) tokens: 16 full-attention layers x KV heads launches a
      # pass; skip to the last pass's first layer
      ftok=${HKV_FLASH_TOKENS:-32768}
      timeout "${HKV_PROFILE_LIMIT:-300}" ncu --clock-control none -k regex:flash_attn \
        --launch-skip $(( (ftok / 4096 - 1) * 64 )) --launch-count 1 \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
        --section WarpStateStats --section Occupancy --section LaunchStats \
        build-gpu/hkv bench-prefill --tokens "$ftok" --kv-cache q4h --decode 0 > "$OUT/profile-flash.log" 2>&1
      echo "profile-flash: rc=$?" | tee -a "$summary"
      grep -E "Duration|Throughput|Pipe|Stall|Warp Cycles|Issued|Eligible|Achieved Occupancy|Registers|Bank" \
        "$OUT/profile-flash.log" | head -40 | tee -a "$summary" ;;
    stalls)  # ncu: issue activity, occupancy, DRAM and stall reasons of the matvec and attention kernels
      timeout "${HKV_STALLS_LIMIT:-300}" cuda/profile_stalls.sh build-gpu/hkv > "$OUT/stalls.log" 2>&1
      echo "stalls: rc=$?" | tee -a "$summary"
      grep -E "^\||error|ERROR" "$OUT/stalls.log" | head -40 | tee -a "$summary" ;;
    sass)  # the machine code of the matvec and attention kernels, and the loops of the hot ones (scripts/sass_loops.py)
      cuobjdump -sass build-gpu/CMakeFiles/hkv_cuda.dir/cuda/matvec.cu.o > "$OUT/matvec.sass" 2>&1
      for f in chunk slim merge; do  # cuda/attention/'s kernels, into one file
        cuobjdump -sass "build-gpu/CMakeFiles/hkv_cuda.dir/cuda/attention/$f.cu.o"
      done > "$OUT/attention.sass" 2>&1
      {
        python3 scripts/sass_loops.py "$OUT/matvec.sass" matvec_mlx4_smem_kernelILi1ELi2ELi4ELb1E --min 200
        python3 scripts/sass_loops.py "$OUT/attention.sass" attn_chunk_kernelILNS_6KvKindE2ELi6ELi256ELi1ELi1E --min 60
      } > "$OUT/sass-loops.txt" 2>&1
      echo "sass: $OUT/matvec.sass, $OUT/attention.sass" | tee -a "$summary"
      cut -c1-200 "$OUT/sass-loops.txt" | tee -a "$summary" ;;
    profile)  # ncu: a decode token's kernel time by kernel
      timeout "${HKV_PROFILE_LIMIT:-200}" cuda/profile_token.sh build-gpu/hkv > "$OUT/profile.log" 2>&1
      echo "profile: rc=$?" | tee -a "$summary"
      head -24 "$OUT/profile.log" | tee -a "$summary" ;;
    prefill)  # the fast prefill path: its GPU tests, its diff cases (KL against the oracle), time and memory
      run gpu_prefill 120 $bin --source-file='*gpu_prefill*'
      t=$SECONDS
      timeout "${HKV_PREFILL_DIFF_LIMIT:-120}" build-gpu/hkv diff --op fast_prefill ${HKV_PREFILL_DIFF_ARGS:-} \
        > "$OUT/prefill-diff.log" 2>&1
      echo "prefill diff: rc=$?, $((SECONDS - t)) s: $(grep -E '^[0-9]+ passed' "$OUT/prefill-diff.log")" | tee -a "$summary"
      grep -E "fast_prefill.*(FAIL|OK)" "$OUT/prefill-diff.log" | head -40 | tee -a "$summary"
      t=$SECONDS
      timeout "${HKV_PREFILL_BENCH_LIMIT:-240}" build-gpu/hkv bench-prefill \
        ${HKV_PREFILL_BENCH_ARGS:---tokens 4096,32768 --kv-cache q4h} > "$OUT/prefill-bench.log" 2>&1
      echo "prefill bench: rc=$?, $((SECONDS - t)) s" | tee -a "$summary"
      grep -E "hkv bench-prefill|device limited|^\||error" "$OUT/prefill-bench.log" | tee -a "$summary" ;;
  esac
done
echo "==== summary ===="
cat "$summary"
