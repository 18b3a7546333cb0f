#!/usr/bin/env bash
# import-vs-pflogsumm.sh -- times `retryguard import` of a month of a relay's
# log into a fresh SQLite ledger and into a fresh Redis ledger against
# pflogsumm on the same file, in one run, and prints the ratios.
#
# The log comes from gen_month_log (bench/gen_month_log.cpp): scale 1 is about
# 840k lines, 131k messages, 19.7k recipient domains over 30 days; --big adds
# scale 10 (about 8M lines). Measured, each on the same file:
#   retryguard import -q into a fresh SQLite ledger (file in a temporary directory)
#   retryguard import -q into a fresh Redis ledger (a private redis-server on
#                        127.0.0.1, no persistence): the bulk load of an empty
#                        ledger (ledger.redis.bulk_load, the default), and with
#                        --redis-batch also batch by batch (bulk_load=false)
#   pflogsumm > /dev/null   the Debian package, default report
# Times are wall seconds and user+system CPU seconds (the machine may be
# shared); peak memory is GNU time's maximum resident set size. For Redis the
# server's own CPU is shown too (it runs alongside the import).
#
# usage: bench/import-vs-pflogsumm.sh [--big] [--scales "0.1 1 3"] [--before CLI] [--rounds N] [--no-redis]
#                                     [--redis-batch] [BUILD_DIR]
#   --big          also scale 10
#   --scales LIST  the scales to run (default "1"; --big appends 10); with
#                  several, the SQLite lines/s per scale is the flat-cost check
#   --before CLI   also time another retryguard binary (e.g. a build of main)
#                  on the same file, for before/after figures from one run
#   --rounds N     measure each scale N times (default 1), pflogsumm, before and
#                  after in turn each round, so that a shared machine's load
#                  falls on all of them alike
#   --no-redis     skip the Redis ledger
#   --redis-batch  also time the Redis import batch by batch (the ingest script)
set -euo pipefail
cd "$(dirname "$0")/.."
scales="1" big=0 redis=1 redis_batch=0 build=build before="" rounds=1
while [ $# -gt 0 ]; do
  case "$1" in
    --big) big=1 ;;
    --scales) scales=$2; shift ;;
    --before) before=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --no-redis) redis=0 ;;
    --redis-batch) redis_batch=1 ;;
    -*) echo "usage: $0 [--big] [--scales LIST] [--before CLI] [--rounds N] [--no-redis] [--redis-batch] [BUILD_DIR]" >&2; exit 2 ;;
    *) build=$1 ;;
  esac
  shift
done
[ "$big" = 1 ] && scales="$scales 10"
cli=$build/tools/retryguard
gen=$build/gen_month_log
[ -x "$cli" ] && [ -x "$gen" ] || { echo "no $cli or $gen: run scripts/build.sh first" >&2; exit 2; }
command -v pflogsumm >/dev/null || { echo "pflogsumm not installed (scripts/install-deps.sh --bench)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "GNU time not installed (apt-get install time)" >&2; exit 2; }
if [ "$redis" = 1 ] && ! command -v redis-server >/dev/null; then
  echo "redis-server not installed: skipping the Redis ledger" >&2
  redis=0
fi

work=$(mktemp -d)
rpid=""
cleanup() {
  [ -n "$rpid" ] && kill "$rpid" 2>/dev/null && wait "$rpid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# A minimal configuration: defaults, no metrics endpoint.
cat > "$work/rg.yaml" <<'EOF'
metrics: {enabled: false}
EOF

# Prints "wall_s cpu_s max_rss_kib" of a command whose output is discarded.
measure() {
  local t=$work/time
  /usr/bin/time -f '%e %U %S %M' -o "$t" "$@" > /dev/null 2> "$work/stderr" || { cat "$work/stderr" >&2; return 1; }
  awk '{printf "%.2f %.2f %d\n", $1, $2 + $3, $4}' "$t"
}

start_redis() {
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
    --daemonize no > "$work/redis.log" 2>&1 &
  rpid=$!
  for _ in $(seq 100); do redis-cli -p "$port" ping > /dev/null 2>&1 && break; sleep 0.05; done
  redis-cli -p "$port" ping > /dev/null || { echo "redis-server did not start" >&2; cat "$work/redis.log" >&2; exit 1; }
  rport=$port
}

redis_cpu() {  # user+sys seconds of the running redis-server
  awk '{printf "%.2f\n", ($14 + $15) / '"$(getconf CLK_TCK)"'}' "/proc/$rpid/stat"
}

rate() { awk -v l="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.0f", l / s; else print "inf" }'; }
us_per_line() { awk -v l="$1" -v s="$2" 'BEGIN { printf "%.1f", s * 1e6 / l }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "inf" }'; }
row() { printf '%-30s %9s %9s %12s %12s %10s %14s\n' "$@"; }

for scale in $scales; do
  log=$work/month.log
  "$gen" --scale "$scale" --seed 1 --out "$log" 2> "$work/gen.txt"
  lines=$(wc -l < "$log")
  echo
  echo "scale $scale: $(cat "$work/gen.txt" | sed 's/^gen_month_log: //'), $(($(stat -c %s "$log") / 1048576)) MiB"
  cat "$log" > /dev/null  # page cache warm for every tool alike
  : > "$work/walls"  # "round<TAB>command<TAB>wall s" of this scale, for the summary

  for round in $(seq "$rounds"); do
  [ "$rounds" -gt 1 ] && echo "round $round of $rounds"
  read -r p_wall p_cpu p_rss < <(measure pflogsumm "$log")
  row "command" "wall s" "cpu s" "lines/s wall" "peak RSS KiB" "vs pflog" "note"
  row "pflogsumm > /dev/null" "$p_wall" "$p_cpu" "$(rate "$lines" "$p_wall")" "$p_rss" "1.00" "$(us_per_line "$lines" "$p_cpu") cpu us/line"
  printf '%s\t%s\t%s\n' "$round" "pflogsumm" "$p_wall" >> "$work/walls"
  for which in ${before:+before} after; do
    bin=$cli label="import"
    [ "$which" = before ] && bin=$before label="import (before)"
    rm -f "$work/ledger.db"*
    read -r s_wall s_cpu s_rss < <(measure "$bin" import -q --utc --year 2026 -c "$work/rg.yaml" \
      -o "ledger.sqlite.path=$work/ledger.db" "$log")
    db_bytes=$(du -cb "$work"/ledger.db* | tail -1 | cut -f1)
    # Pages in use (the file also holds free pages the engine journal left, reused later).
    used_bytes=$db_bytes
    if command -v sqlite3 > /dev/null; then
      used_bytes=$(sqlite3 "$work/ledger.db" 'PRAGMA page_count; PRAGMA freelist_count; PRAGMA page_size;' |
        paste -sd' ' | awk '{ printf "%d", ($1 - $2) * $3 }')
    fi
    printf '%s\t%s\t%s\n' "$round" "$label, SQLite" "$s_wall" >> "$work/walls"
    row "$label, SQLite" "$s_wall" "$s_cpu" "$(rate "$lines" "$s_wall")" "$s_rss" \
      "$(ratio "$p_wall" "$s_wall")" "ledger $((db_bytes / 1048576)) MiB, $((used_bytes / 1048576)) in use, $(us_per_line "$lines" "$s_cpu") cpu us/line"
    # Redis: the bulk load into the empty ledger (the default; its temporary
    # SQLite ledger in $work), and with --redis-batch also batch by batch.
    modes=""
    [ "$redis" = 1 ] && modes="true"
    [ "$redis" = 1 ] && [ "$redis_batch" = 1 ] && modes="$modes false"
    for bulk in $modes; do
      start_redis
      r0=$(redis_cpu)
      read -r r_wall r_cpu r_rss < <(TMPDIR=$work measure "$bin" import -q --utc --year 2026 -c "$work/rg.yaml" \
        -o ledger.backend=redis -o "ledger.redis.address=127.0.0.1:$rport" -o ledger.redis.timeout=10s \
        -o "ledger.redis.bulk_load=$bulk" "$log")
      r_srv=$(awk -v a="$(redis_cpu)" -v b="$r0" 'BEGIN { printf "%.2f", a - b }')
      r_mem=$(redis-cli -p "$rport" info memory | awk -F: '/^used_memory:/ { printf "%d", $2 / 1024 }')
      kill "$rpid"; wait "$rpid" 2>/dev/null || true; rpid=""
      mode="bulk load"
      [ "$bulk" = false ] && mode="batch by batch"
      printf '%s\t%s\t%s\n' "$round" "$label, Redis ($mode)" "$r_wall" >> "$work/walls"
      row "$label, Redis ($mode)" "$r_wall" "$r_cpu" "$(rate "$lines" "$r_wall")" "$r_rss" \
        "$(ratio "$p_wall" "$r_wall")" "server ${r_srv} cpu s, $((r_mem / 1024)) MiB"
    done
  done
  done
  if [ "$rounds" -gt 1 ]; then
    # Over the rounds: each command's wall times, the median of its same-round
    # ratios to pflogsumm, and best of N (each command's shortest run against
    # pflogsumm's shortest). pflogsumm's own spread is the machine's.
    echo "over $rounds rounds (wall s: min-max; vs pflog: median of the rounds' ratios, and best of $rounds against best of $rounds):"
    awk -F'\t' '
      { wall[$2 SUBSEP $1] = $3; if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
      END {
        for (i = 1; i <= n; i++) {
          c = order[i]; m = 0; lo = ""; hi = ""
          for (r = 1; (c SUBSEP r) in wall; r++) {
            w = wall[c SUBSEP r]; lo = (lo == "" || w < lo) ? w : lo; hi = (hi == "" || w > hi) ? w : hi
            if ((("pflogsumm" SUBSEP r) in wall) && w > 0) q[++m] = wall["pflogsumm" SUBSEP r] / w
          }
          if (c == "pflogsumm") best_p = lo
          for (a = 1; a <= m; a++) for (b = a + 1; b <= m; b++) if (q[b] < q[a]) { t = q[a]; q[a] = q[b]; q[b] = t }
          med = (m % 2) ? q[(m + 1) / 2] : (q[m / 2] + q[m / 2 + 1]) / 2
          if (c == "pflogsumm") printf "  %-30s wall %s-%s s\n", c, lo, hi
          else printf "  %-30s wall %s-%s s, vs pflog median %.2f, best of %d %.2f\n", c, lo, hi, med, m, best_p / lo
        }
      }' "$work/walls"
  fi
  messages=$(sed -n 's/.* lines, \([0-9]*\) messages.*/\1/p' "$work/gen.txt")
  echo "SQLite ledger: $(awk -v b="$db_bytes" -v m="$messages" 'BEGIN { printf "%.0f", b / m }') bytes per message" \
    "(file), $(awk -v b="$used_bytes" -v m="$messages" 'BEGIN { printf "%.0f", b / m }') in use"
done
echo
echo "vs pflog = pflogsumm wall time / this command's wall time on the same file (higher: faster than pflogsumm)"
