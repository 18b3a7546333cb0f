#!/usr/bin/env bash
# test.sh -- install what is needed, build, and run the whole test suite.
#   scripts/test.sh               release build, every test (unit, fuzz replay, redis, e2e, slow)
#   scripts/test.sh --sanitize    the same under ASan+UBSan
#   scripts/test.sh --tsan        the unit and daemon tests (labels unit, policyd, milter)
#                                 under ThreadSanitizer: the milter and the policy daemon
#                                 run several threads each
#   scripts/test.sh --fast        skip the e2e and slow labels
set -euo pipefail
cd "$(dirname "$0")/.."
mode=() ctest_args=()
for a in "$@"; do
  case "$a" in
    --sanitize) mode=(--sanitize) ;;
    --tsan) mode=(--tsan) ctest_args+=(-L "^(unit|policyd|milter)$") ;;
    --fast) ctest_args+=(-LE "e2e|slow") ;;
    *) echo "usage: $0 [--sanitize|--tsan] [--fast]" >&2; exit 2 ;;
  esac
done
# The package test (label packaging) needs the .deb tools: install them too,
# so that nothing is skipped.
scripts/install-deps.sh --package
targets=()
# ThreadSanitizer: only what the unit, policyd and milter labels run (the
# other tests' binaries are not built; ctest lists them as *_NOT_BUILT, unlabelled)
[ "${mode[*]:-}" = --tsan ] && targets=(retryguard_unit_tests gen_month_log retryguard retryguard-milter
                                        retryguard-policyd policyd_daemon_tests)
scripts/build.sh "${mode[@]}" "${targets[@]}"
dir=build
[ "${mode[*]:-}" = --sanitize ] && dir=build-asan
[ "${mode[*]:-}" = --tsan ] && dir=build-tsan
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp}
cd "$dir"
ctest --output-on-failure --timeout 600 -j "$(nproc)" "${ctest_args[@]}"
