#!/usr/bin/env bash
# build.sh -- configure and build retryguard.
#   scripts/build.sh                 release build in build/
#   scripts/build.sh --sanitize      ASan+UBSan build in build-asan/ (no benchmarks: no test
#                                    runs them; they measure the release build)
#   scripts/build.sh --tsan          ThreadSanitizer build in build-tsan/ (no benchmarks)
#   scripts/build.sh --fuzz          libFuzzer targets with clang in build-fuzz/
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build flags=(-DRETRYGUARD_WERROR=ON)
mode=${1:-}
[ $# -gt 0 ] && shift
targets=("$@")  # only these targets (default: all)
case "$mode" in
  --sanitize) dir=build-asan flags+=(-DRETRYGUARD_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DRETRYGUARD_BENCH=OFF) ;;
  --tsan) dir=build-tsan flags+=(-DRETRYGUARD_TSAN=ON -DRETRYGUARD_BENCH=OFF) ;;
  --fuzz) dir=build-fuzz flags+=(-DRETRYGUARD_FUZZ=ON -DRETRYGUARD_SANITIZE=ON -DRETRYGUARD_BENCH=OFF
                                -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++) ;;
  "") ;;
  *) echo "usage: $0 [--sanitize|--tsan|--fuzz] [TARGET...]" >&2; exit 2 ;;
esac
# ccache, when installed (scripts/install-deps.sh installs it), makes a rebuild
# in another clone of the same sources (CI's fresh clone, a second work tree)
# reuse the objects already compiled: paths below the project are hashed
# relative to it, and the build directory is not hashed. The objects are the
# compiler's own output for the same input, so nothing tested changes; set
# CCACHE_DISABLE=1 to compile everything afresh.
if command -v ccache >/dev/null 2>&1 && [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
fi
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
[ -f "$dir/CMakeCache.txt" ] && gen=()
cmake -S . -B "$dir" "${gen[@]}" "${flags[@]}" >/dev/null
cmake --build "$dir" -j "$(nproc)" ${targets[@]:+--target "${targets[@]}"}
echo "build: $dir"
