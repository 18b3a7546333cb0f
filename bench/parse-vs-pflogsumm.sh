#!/usr/bin/env bash
# parse-vs-pflogsumm.sh -- times the log parser against pflogsumm on the same
# large log in the same run, and prints the ratio.
#
# The log is every line of the Postfix 3.7 lab logs (tests/fixtures/postfix-3.7)
# repeated up to SIZE_MB (default 200). Measured, each on the same file:
#   retryguard events --json > /dev/null   parse + reply parsing + JSON output
#   retryguard events --quiet              parse only (no replies, no output)
#   pflogsumm > /dev/null                  the Debian package, default report
# Times are user+system CPU seconds (the machine is shared; wall time is shown too).
#
# usage: bench/parse-vs-pflogsumm.sh [BUILD_DIR] [SIZE_MB]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
size_mb=${2:-${SIZE_MB:-200}}
cli=$build/tools/retryguard
[ -x "$cli" ] || { echo "no $cli: run scripts/build.sh first" >&2; exit 2; }
command -v pflogsumm >/dev/null || { echo "pflogsumm not installed (apt-get install pflogsumm)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log=$work/mail.log
grep -hv '^#' tests/fixtures/postfix-3.7/*.log > "$work/one.log"
target=$((size_mb * 1024 * 1024))
: > "$log"
# Doubling keeps the build of a 200 MB file to a few seconds.
cp "$work/one.log" "$work/chunk.log"
while [ "$(stat -c %s "$log")" -lt "$target" ]; do
  cat "$work/chunk.log" >> "$log"
  if [ "$(stat -c %s "$work/chunk.log")" -lt $((target / 4)) ]; then
    cat "$work/chunk.log" "$work/chunk.log" > "$work/chunk2.log" && mv "$work/chunk2.log" "$work/chunk.log"
  fi
done
bytes=$(stat -c %s "$log")
lines=$(wc -l < "$log")
echo "log: $lines lines, $((bytes / 1048576)) MiB"

# Prints "cpu_seconds wall_seconds" of a command whose output is discarded.
measure() {
  local t=$work/time
  /usr/bin/time -f '%U %S %e' -o "$t" "$@" > /dev/null 2> "$work/stderr" || { cat "$work/stderr" >&2; return 1; }
  awk '{printf "%.2f %.2f\n", $1 + $2, $3}' "$t"
}

# Warm the page cache so the first tool measured is not charged for the disk.
cat "$log" > /dev/null
read -r json_cpu json_wall < <(measure "$cli" events --json --utc "$log")
read -r quiet_cpu quiet_wall < <(measure "$cli" events --quiet --utc "$log")
read -r pfl_cpu pfl_wall < <(measure pflogsumm "$log")

rate() { awk -v l="$lines" -v s="$1" 'BEGIN { if (s > 0) printf "%.0f", l / s; else print "inf" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "inf" }'; }
printf '%-40s %8s %8s %14s %10s\n' "command" "cpu s" "wall s" "lines/cpu s" "vs pflogsumm"
printf '%-40s %8s %8s %14s %10s\n' "retryguard events --json > /dev/null" "$json_cpu" "$json_wall" "$(rate "$json_cpu")" "$(ratio "$pfl_cpu" "$json_cpu")x"
printf '%-40s %8s %8s %14s %10s\n' "retryguard events --quiet (parse only)" "$quiet_cpu" "$quiet_wall" "$(rate "$quiet_cpu")" "$(ratio "$pfl_cpu" "$quiet_cpu")x"
printf '%-40s %8s %8s %14s %10s\n' "pflogsumm > /dev/null" "$pfl_cpu" "$pfl_wall" "$(rate "$pfl_cpu")" "1.0x"
echo "ratio = pflogsumm CPU time / retryguard CPU time on the same file (higher: retryguard faster)"
