#!/usr/bin/env bash
# Builds the libFuzzer targets under tests/fuzz with clang (ASan + UBSan + libFuzzer) and runs each for a
# few seconds from the committed seeds; exits non-zero when any target crashes, leaks, hangs or trips a
# sanitizer. docs/FUZZING.md says how to run longer and how a crash becomes a regression test.
#
# usage: tests/fuzz/run.sh [--seconds N] [--build DIR] [--build-only] [--jobs N] [TARGET...]
#   TARGET: safetensors, config, tokens, fixture (default: all that can be built here)
#   --seconds N   fuzzing time per target (default: $HKV_FUZZ_SECONDS or 5)
#   --build DIR   build folder (default: build-fuzz)
#   --build-only  compile, replay the seeds and the regression inputs once, do not fuzz
#   --jobs N      parallel compiles (default 2)
# Extra libFuzzer flags can be passed in HKV_FUZZ_FLAGS (e.g. "-max_len=65536 -jobs=2").
#
# Inputs: tests/fuzz/corpus/<target>/ (committed seeds, never written to),
#         tests/fuzz/<target>.dict + json_common.dict (libFuzzer dictionaries) and
#         tests/fuzz/regressions/<target>/ (inputs that once crashed; each must now pass).
# New inputs the run finds go to <build>/corpus/<target>/; crashes to <build>/artifacts/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
seconds="${HKV_FUZZ_SECONDS:-5}"
build="$root/build-fuzz"
build_only=0
jobs=2
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --build) build="$(mkdir -p "$2" && cd "$2" && pwd)"; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --jobs) jobs="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done

CXX="${HKV_FUZZ_CXX:-}"
if [ -z "$CXX" ]; then
  for c in clang++ clang++-18 clang++-17 clang++-16 clang++-15 clang++-14; do
    command -v "$c" >/dev/null && { CXX="$c"; break; }
  done
fi
[ -n "$CXX" ] || { echo "run.sh: clang++ not found (libFuzzer needs clang)" >&2; exit 2; }

san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cxxflags=(-std=c++20 -O1 -g $san -fsanitize=fuzzer-no-link -I"$root" -Wno-unknown-pragmas
          -ffp-contract=off -fno-fast-math ${HKV_FUZZ_CXXFLAGS:-})
for inc in /usr/include/eigen3 ${HKV_DEPS_PREFIX:+$HKV_DEPS_PREFIX/include $HKV_DEPS_PREFIX/include/eigen3}; do
  [ -d "$inc" ] && cxxflags+=(-isystem "$inc")
done

# Does this clang have libFuzzer? (Debian: it ships with clang's compiler-rt; some need libclang-rt-N-dev.)
mkdir -p "$build/obj" "$build/bin"
probe="$build/obj/probe.cpp"
printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' >"$probe"
if ! "$CXX" -fsanitize=fuzzer,address,undefined "$probe" -o "$build/obj/probe" 2>"$build/obj/probe.log"; then
  echo "run.sh: $CXX cannot link -fsanitize=fuzzer (install libclang-rt-dev or compiler-rt):" >&2
  cat "$build/obj/probe.log" >&2
  exit 2
fi

# What each target links, from reference/ and compare/.
declare -A sources=(
  [safetensors]="reference/safetensors.cpp reference/checkpoint.cpp reference/config.cpp reference/weights.cpp"
  [config]="reference/config.cpp reference/synthetic.cpp reference/checkpoint.cpp reference/safetensors.cpp reference/weights.cpp"
  [tokens]="reference/tokens.cpp"
  [fixture]="compare/fixture.cpp reference/tokens.cpp reference/kvformat.cpp"
)
all=(safetensors config tokens)
# The fixture reader (compare/fixture.cpp) is fuzzed once both it and its target exist.
[ -f "$root/compare/fixture.cpp" ] && [ -f "$root/tests/fuzz/fuzz_fixture.cpp" ] && all+=(fixture)
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

# ---- compile: each source once into an object, rebuilt when it or any header it may include is newer ----
newest_header="$(ls -t "$root"/reference/*.h "$root"/compare/*.h "$root"/tests/fuzz/*.h 2>/dev/null | head -1)"
needed=()
for t in "${targets[@]}"; do
  [ -n "${sources[$t]:-}" ] || { echo "run.sh: unknown target '$t' (${all[*]})" >&2; exit 2; }
  needed+=(tests/fuzz/fuzz_$t.cpp ${sources[$t]})
done
mapfile -t needed < <(printf '%s\n' "${needed[@]}" | sort -u)
obj_of() { local s="${1//\//_}"; echo "$build/obj/${s%.cpp}.o"; }
stale=()
for s in "${needed[@]}"; do
  o="$(obj_of "$s")"
  if [ ! -f "$o" ] || [ "$root/$s" -nt "$o" ] || [ "$newest_header" -nt "$o" ]; then stale+=("$s"); fi
done
if [ ${#stale[@]} -gt 0 ]; then
  echo "run.sh: compiling ${#stale[@]} source(s) with $CXX (-j$jobs)"
  export CXX build root
  export cxxflags_str="${cxxflags[*]}"
  printf '%s\n' "${stale[@]}" | xargs -P "$jobs" -I{} bash -c '
    s="{}"; o="$build/obj/${s//\//_}"; o="${o%.cpp}.o"
    $CXX $cxxflags_str -c "$root/$s" -o "$o.part" && mv "$o.part" "$o" || { echo "run.sh: compiling $s failed" >&2; exit 255; }'
fi
for t in "${targets[@]}"; do
  objs=()
  for s in tests/fuzz/fuzz_$t.cpp ${sources[$t]}; do objs+=("$(obj_of "$s")"); done
  "$CXX" $san -fsanitize=fuzzer "${objs[@]}" -o "$build/bin/fuzz_$t"
done

# ---- run ----------------------------------------------------------------------------------------
export HKV_FUZZ_TMP="$(mktemp -d "${TMPDIR:-/tmp}/hkv-fuzz.XXXXXX")"
[ -w /dev/shm ] && { rmdir "$HKV_FUZZ_TMP"; HKV_FUZZ_TMP="$(mktemp -d /dev/shm/hkv-fuzz.XXXXXX)"; }
trap 'rm -rf "$HKV_FUZZ_TMP"' EXIT
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
failed=()
mkdir -p "$build/artifacts"
for t in "${targets[@]}"; do
  seeds="$root/tests/fuzz/corpus/$t"
  regress="$root/tests/fuzz/regressions/$t"
  bin="$build/bin/fuzz_$t"
  log="$build/fuzz_$t.log"
  inputs=()
  [ -d "$seeds" ] && inputs+=("$seeds")
  [ -d "$regress" ] && inputs+=("$regress")
  # one dictionary a target (libFuzzer takes one): the JSON tokens, then the target's own keys
  dict="$build/$t.dict"
  cat "$root/tests/fuzz/json_common.dict" "$root/tests/fuzz/$t.dict" >"$dict" 2>/dev/null || true
  common=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -dict="$dict" -artifact_prefix="$build/artifacts/$t-"
          ${HKV_FUZZ_FLAGS:-})
  if [ "$build_only" = 1 ]; then
    # replay every committed input once
    files=()
    for d in "${inputs[@]}"; do for f in "$d"/*; do [ -f "$f" ] && files+=("$f"); done; done
    echo "run.sh: fuzz_$t: replaying ${#files[@]} committed input(s)"
    "$bin" "${common[@]}" "${files[@]}" >"$log" 2>&1 || failed+=("$t")
  else
    work="$build/corpus/$t"
    mkdir -p "$work"
    echo "run.sh: fuzz_$t: ${seconds}s from ${inputs[*]#$root/}"
    "$bin" "${common[@]}" -max_total_time="$seconds" -print_final_stats=1 "$work" "${inputs[@]}" >"$log" 2>&1 ||
      failed+=("$t")
    grep -E '^(stat::number_of_executed_units|Done )' "$log" | sed "s/^/  /" || true
  fi
  if [[ " ${failed[*]:-} " == *" $t "* ]]; then
    echo "run.sh: fuzz_$t FAILED; the end of $log:" >&2
    tail -40 "$log" >&2
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "run.sh: crashes in: ${failed[*]} (inputs under $build/artifacts/; see docs/FUZZING.md)" >&2
  exit 1
fi
echo "run.sh: all fuzz targets passed (${targets[*]})"
