# Shared by scripts/run and scripts/test: install what is missing, configure, build incrementally.
# Options (both scripts): --deps PREFIX   use unpacked headers under PREFIX (no packages installed)
#                         --build DIR     build folder (default: build)
#                         --sanitize      build with ASan + UBSan (in build-asan unless --build is given)
# Environment: HKV_DEPS_PREFIX (same as --deps), HKV_CUDA=AUTO|ON|OFF, HKV_JOBS (default: nproc).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps_prefix="${HKV_DEPS_PREFIX:-}"
build_dir=""
sanitize=OFF
rest=()
while [ $# -gt 0 ]; do
  case "$1" in
    --deps) deps_prefix="$2"; shift 2 ;;
    --build) build_dir="$2"; shift 2 ;;
    --sanitize) sanitize=ON; shift ;;
    *) rest+=("$1"); shift ;;
  esac
done
[ -n "$build_dir" ] || { [ "$sanitize" = ON ] && build_dir="$root/build-asan" || build_dir="$root/build"; }
set -- "${rest[@]+"${rest[@]}"}"

# Debian packages the build needs, by the header each provides.
need_pkgs=()
have_header() {  # header, relative include path
  [ -n "$deps_prefix" ] && { [ -e "$deps_prefix/include/$1" ] || [ -e "$deps_prefix/include/eigen3/$1" ]; } && return 0
  [ -e "/usr/include/$1" ] || [ -e "/usr/include/eigen3/$1" ]
}
have_header Eigen/Core || need_pkgs+=(libeigen3-dev)
have_header doctest/doctest.h || need_pkgs+=(doctest-dev)
have_header xxhash.h || need_pkgs+=(libxxhash-dev)
have_header nlohmann/json.hpp || need_pkgs+=(nlohmann-json3-dev)
have_header CLI/CLI.hpp || need_pkgs+=(libcli11-dev)
command -v cmake >/dev/null || need_pkgs+=(cmake)
command -v g++ >/dev/null || need_pkgs+=(g++)
echo 'int main(){}' | g++ -fopenmp -x c++ - -o /dev/null 2>/dev/null || need_pkgs+=(libgomp1)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null; then
    echo "hkv: missing packages ${need_pkgs[*]}; install them, or pass --deps PREFIX with their headers" >&2
    exit 2
  fi
  sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd=sudo
  echo "hkv: installing ${need_pkgs[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

jobs="${HKV_JOBS:-$(nproc)}"
cmake_args=(-S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DHKV_CUDA="${HKV_CUDA:-AUTO}" -DHKV_SANITIZE="$sanitize")
[ -n "$deps_prefix" ] && cmake_args+=(-DHKV_DEPS_PREFIX="$deps_prefix")
# The CUDA architecture: HKV_CUDA_ARCH, else this machine's card (nvidia-smi's compute capability; 9.0 builds
# 90a, Hopper's own instructions, which the fast prefill's attention uses; another card its own number), else
# CMake's default (90a, CMakeLists.txt). A build for the wrong card would not load its kernels.
cuda_arch="${HKV_CUDA_ARCH:-}"
if [ -z "$cuda_arch" ] && command -v nvidia-smi >/dev/null; then
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .' || true)
  case "$cc" in
    90) cuda_arch=90a ;;
    [1-9][0-9] | [1-9][0-9][0-9]) cuda_arch=$cc ;;
  esac
fi
[ -n "$cuda_arch" ] && cmake_args+=(-DCMAKE_CUDA_ARCHITECTURES="$cuda_arch")
if [ ! -f "$build_dir/CMakeCache.txt" ] || [ -n "$deps_prefix" ] ||
  { [ -n "$cuda_arch" ] && ! grep -q "^CMAKE_CUDA_ARCHITECTURES:.*=$cuda_arch\$" "$build_dir/CMakeCache.txt"; }; then
  cmake "${cmake_args[@]}" >/dev/null
fi
cmake --build "$build_dir" -j "$jobs"

# Is there a GPU this build can use?
have_gpu() { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU && [ -e "$build_dir/tests/hkv_gpu_tests" ]; }
