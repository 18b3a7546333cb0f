#!/usr/bin/env bash
# check-format.sh -- every C and C++ file the repository tracks is formatted as
# .clang-format says (clang-format from Debian 12). Prints the files that are not
# and exits 1; `scripts/check-format.sh --fix` rewrites them instead.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check-format: clang-format not installed (scripts/install-deps.sh)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp')
if [ "${1:-}" = --fix ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f (scripts/check-format.sh --fix)"
    bad=1
  fi
done
[ "$bad" = 0 ] && echo "check-format: ${#files[@]} files formatted"
exit "$bad"
