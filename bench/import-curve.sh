#!/usr/bin/env bash
# import-curve.sh -- the cost of `retryguard import` against the size of the
# ledger it writes into: one month log (gen_month_log, seed 1) cut into
# consecutive chunks of equal line count (line order kept) and imported chunk
# after chunk into ONE ledger, each chunk timed on its own. Only the first chunk
# goes into an empty ledger (bulk mode: secondary indexes deferred); every later
# one is what a log follower does against a ledger that keeps growing, so the
# cost per line of chunk N against the ledger's size after it is the curve.
#
# Per chunk: wall and CPU (user+system) seconds of the import (GNU time), then
# the ledger's messages and destinations (`retryguard status --json`), its size
# on disk (SQLite: database + WAL files; Redis: used_memory and DBSIZE keys),
# and optionally a lookup probe: `retryguard explain --json` of N queue ids of
# the chunk, timed together (each run is a whole process: start, configuration,
# ledger open, the lookups, output). For Redis the server's own CPU per chunk
# comes from /proc (it does most of the work).
#
# With --follow the chunks are not imports: the policy daemon
# (retryguard-policyd, the shipped defaults for its follower: transactions of
# at most ingest.batch_max_events lines, a 16 MiB page cache, a WAL checkpoint
# every 1,000 pages)
# follows one log file, each chunk is appended to it in turn, and the
# daemon's CPU per chunk is read from /proc between the moment the chunk is
# appended and the moment its metrics endpoint counts the chunk's last line.
# That is a log follower catching up, the case the plain curve stands in for.
#
# usage: bench/import-curve.sh [--scale X] [--days N] [--chunk LINES] [--probe N]
#                              [--redis] [--follow] [--svg FILE] [--data FILE]
#                              [--replot TSV] [BUILD_DIR]
#   --scale X      gen_month_log --scale (default 10: about 8.4M lines,
#                  1.3M messages, 197k recipient domains)
#   --days N       gen_month_log --days (default 30); more days, more messages
#   --chunk LINES  lines per chunk (default 500000)
#   --probe N      queue ids looked up with `explain` after each chunk (default
#                  20; 0: no probe)
#   --redis        a private redis-server on 127.0.0.1 (no persistence) instead
#                  of a SQLite file
#   --follow       the policy daemon's log follower instead of `retryguard
#                  import` per chunk (SQLite only; "fixed s" is left empty:
#                  the daemon starts once)
#   --svg FILE     the plot (default docs/images/import-cost-curve.svg, with
#                  --redis docs/images/import-cost-curve-redis.svg; a name ending
#                  in .png gives a PNG); needs gnuplot, skipped with a warning
#                  without it
#   --data FILE    also keep the table as tab-separated values
#   --replot TSV   no run: the summary and the plot of a table kept with --data
#                  (give the same --scale, --days, --chunk and --redis)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=follow-lib.sh
. bench/follow-lib.sh
scale=10 days="" chunk=500000 probe=20 redis=0 follow=0 build=build svg="" data="" replot=""
usage() {
  echo "usage: $0 [--scale X] [--days N] [--chunk LINES] [--probe N] [--redis] [--follow] [--svg FILE] [--data FILE] [--replot TSV] [BUILD_DIR]" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --scale) scale=$2; shift ;;
    --days) days=$2; shift ;;
    --chunk) chunk=$2; shift ;;
    --probe) probe=$2; shift ;;
    --redis) redis=1 ;;
    --follow) follow=1 ;;
    --svg) svg=$2; shift ;;
    --data) data=$2; shift ;;
    --replot) replot=$2; shift ;;
    -*) usage ;;
    *) build=$1 ;;
  esac
  shift
done
[ "$chunk" -gt 0 ] 2> /dev/null || usage
[ "$probe" -ge 0 ] 2> /dev/null || usage
[ "$follow" = 1 ] && [ "$redis" = 1 ] && { echo "--follow is for the SQLite ledger" >&2; exit 2; }
if [ -z "$svg" ]; then
  svg=docs/images/import-cost-curve.svg
  [ "$redis" = 1 ] && svg=docs/images/import-cost-curve-redis.svg
  [ "$follow" = 1 ] && svg=docs/images/follow-cost-curve.svg
fi
who="import" prog="retryguard import"
[ "$follow" = 1 ] && who="follower" prog="retryguard-policyd following the log"
summary() {
  # First (bulk into an empty ledger) against the steady state of the rest; a
  # short last chunk is left out of the comparison (the per-process start, the
  # engine state's load and save, weigh more on fewer lines).
  awk -F'\t' -v redis="$redis" -v full="$chunk" 'NR > 1 && $2 == full { c[++n] = $5; s[n] = $7 }
    END {
      if (n < 3) exit
      printf "CPU us/line (full chunks): chunk 1 (empty ledger) %s; chunk 2 %s; last full chunk %s (%+.0f %% against chunk 2)\n", c[1], c[2], c[n], (c[n] / c[2] - 1) * 100
      if (redis == 1) printf "server CPU us/line: chunk 1 %s; chunk 2 %s; last full chunk %s (%+.0f %% against chunk 2)\n", s[1], s[2], s[n], (s[n] / s[2] - 1) * 100
    }' "$tsv"
}

plot_svg() {
  plot_ready "$svg" || return 0
  what="SQLite ledger" first="chunk 1: into an empty ledger (bulk mode)"
  [ "$redis" = 1 ] && what="Redis ledger" first="chunk 1: into an empty ledger"
  [ "$follow" = 1 ] && first="chunk 1: into an empty ledger"
  # Two panels against the same chunks: cost per line against the messages in the
  # ledger, and against the destinations it tracks. Chunk 1 (bulk mode into an
  # empty ledger) is drawn apart from the steady state of the later chunks.
  # x in thousands; a short last chunk is left out (see above).
  # shellcheck disable=SC2016 # $2, $5, $7: gnuplot's columns, not the shell's
  plotcmd() { # $1: the column of x
    local x="column($1) / 1000"
    printf 'plot "%s" skip 1 every ::1 using ($2 == full ? %s : NaN):5 with linespoints pt 7 lc rgb "#1f5fa8" title "%s CPU (user+system)"' "$tsv" "$x" "$who"
    printf ', "" skip 1 every ::0::0 using (%s):5 with points pt 5 ps 1.4 lc rgb "#d06000" title "%s"' "$x" "$first"
    [ "$redis" = 1 ] &&
      printf ', "" skip 1 using ($2 == full ? %s : NaN):7 with linespoints pt 9 lc rgb "#a01010" title "redis-server CPU"' "$x"
    [ "$redis" = 1 ] &&
      printf ', "" skip 1 using ($2 == full ? %s : NaN):($5 + $7) with linespoints pt 13 lc rgb "#404040" title "import + redis-server CPU"' "$x"
    echo
}
gnuplot << EOF
$(gnuplot_head "$svg" 760)
set yrange [0:*]
set xrange [0:*]
full = $chunk
set multiplot layout 2,1 title "$prog, $what, chunks of $chunk lines (gen_month_log --scale $scale${days:+ --days $days} --seed 1)"
set ylabel "µs per log line"
set xlabel "thousand messages in the ledger after the chunk"
$(plotcmd 3)
set xlabel "thousand destinations in the ledger after the chunk"
$(plotcmd 4)
unset multiplot
EOF
echo "plot: $svg"
}

if [ -n "$replot" ]; then
  tsv=$replot
  summary
  plot_svg
  exit 0
fi
cli=$build/tools/retryguard
gen=$build/gen_month_log
policyd=$build/policyd/retryguard-policyd
[ -x "$cli" ] && [ -x "$gen" ] || { echo "no $cli or $gen: run scripts/build.sh first" >&2; exit 2; }
[ "$follow" = 0 ] || [ -x "$policyd" ] || { echo "no $policyd: run scripts/build.sh first" >&2; exit 2; }
command -v curl > /dev/null || [ "$follow" = 0 ] || { echo "--follow needs curl" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "GNU time not installed (apt-get install time)" >&2; exit 2; }
if [ "$redis" = 1 ]; then
  command -v redis-server > /dev/null || { echo "redis-server not installed" >&2; exit 2; }
fi
export RETRYGUARD_DATADIR=${RETRYGUARD_DATADIR:-$build/share/retryguard}

work=$(mktemp -d)
rpid="" dpid=""
cleanup() {
  [ -n "$rpid" ] && kill "$rpid" 2> /dev/null && wait "$rpid" 2> /dev/null
  [ -n "$dpid" ] && kill "$dpid" 2> /dev/null && wait "$dpid" 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# A minimal configuration: defaults, no metrics endpoint.
cat > "$work/rg.yaml" << 'EOF'
metrics: {enabled: false}
EOF
ledger_opts=(-c "$work/rg.yaml" -o "ledger.sqlite.path=$work/ledger.db")

if [ "$redis" = 1 ]; then
  rport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
    --daemonize no > "$work/redis.log" 2>&1 &
  rpid=$!
  for _ in $(seq 100); do redis-cli -p "$rport" ping > /dev/null 2>&1 && break; sleep 0.05; done
  redis-cli -p "$rport" ping > /dev/null || { echo "redis-server did not start" >&2; cat "$work/redis.log" >&2; exit 1; }
  ledger_opts=(-c "$work/rg.yaml" -o ledger.backend=redis -o "ledger.redis.address=127.0.0.1:$rport"
    -o ledger.redis.timeout=10s)
fi

redis_cpu() { proc_cpu "$rpid"; }

# Prints "wall_s cpu_s max_rss_kib" of a command whose output is discarded.
measure() {
  local t=$work/time
  /usr/bin/time -f '%e %U %S %M' -o "$t" "$@" > /dev/null 2> "$work/stderr" || { cat "$work/stderr" >&2; return 1; }
  awk '{printf "%.2f %.2f %d\n", $1, $2 + $3, $4}' "$t"
}

log=$work/month.log
# The follower reads syslog times without a year and takes the year that puts
# the first line nearest now, and a quiet daemon moves its rules engine to the
# clock: its log starts today (UTC), so that between chunks the engine's time,
# the log's, stays ahead of the clock as on a live relay that is catching up.
start=()
[ "$follow" = 1 ] && start=(--start "$(date -u +%F)")
"$gen" --scale "$scale" ${days:+--days "$days"} "${start[@]}" --seed 1 --out "$log" 2> "$work/gen.txt"
total=$(wc -l < "$log")
echo "gen_month_log --scale $scale${days:+ --days $days}${start[*]:+ ${start[*]}} --seed 1: $(sed 's/^gen_month_log: //' "$work/gen.txt")," \
  "$(($(stat -c %s "$log") / 1048576)) MiB, $(((total + chunk - 1) / chunk)) chunks of $chunk lines"
echo "ledger: $([ "$redis" = 1 ] && echo "Redis (private redis-server on 127.0.0.1:$rport)" || echo "SQLite file")$([ "$follow" = 1 ] && echo ", written by the policy daemon's follower")," \
  "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
split -l "$chunk" -d -a 4 "$log" "$work/chunk."
: > "$work/empty.log"
rm -f "$log"

if [ "$redis" = 1 ]; then
  printf '%5s %9s %9s %8s %9s %9s %9s %9s %9s %9s %9s %9s\n' chunk lines messages dests \
    "cpu us/l" "wall us/l" "srv us/l" "used MiB" "B/msg" keys "probe ms" "fixed s"
else
  printf '%5s %9s %9s %8s %9s %9s %9s %9s %9s %9s %9s\n' chunk lines messages dests \
    "cpu us/l" "wall us/l" "rss MiB" "file MiB" "B/msg" "probe ms" "fixed s"
fi
[ "$follow" = 1 ] && start_follower "$work/ledger.db"
followed=0

tsv=$work/curve.tsv
echo -e "chunk\tlines\tmessages\tdestinations\tcpu_us_per_line\twall_us_per_line\tserver_us_per_line\tledger_bytes\tbytes_per_message\tkeys\tprobe_ms\tpeak_rss_kib\tload1\tfixed_cpu_s" > "$tsv"
n=0
for c in "$work"/chunk.*; do
  n=$((n + 1))
  lines=$(wc -l < "$c")
  [ "$redis" = 1 ] && r0=$(redis_cpu)
  if [ "$follow" = 1 ]; then
    followed=$((followed + lines))
    read -r wall cpu rss < <(follow_chunk "$c" "$followed")
    [ -n "$rss" ] || exit 1
  else
    read -r wall cpu rss < <(measure "$cli" import -q --utc --year 2026 "${ledger_opts[@]}" "$c")
  fi
  srv_us="" keys=""
  if [ "$redis" = 1 ]; then
    srv_us=$(awk -v a="$(redis_cpu)" -v b="$r0" -v l="$lines" 'BEGIN { printf "%.1f", (a - b) * 1e6 / l }')
    keys=$(redis-cli -p "$rport" dbsize)
    # %.0f: mawk's %d stops at 2^31 - 1 (2 GiB)
    bytes=$(redis-cli -p "$rport" info memory | awk -F: '/^used_memory:/ { printf "%.0f", $2 }')
  else
    bytes=$(du -cb "$work"/ledger.db* | tail -1 | cut -f1)
  fi
  # The same process on no lines: opening the ledger, restoring and saving the
  # engine state. A log follower pays this once, not per chunk.
  fixed_cpu=""
  [ "$follow" = 0 ] &&
    read -r _ fixed_cpu _ < <(measure "$cli" import -q --utc --year 2026 "${ledger_opts[@]}" "$work/empty.log")
  # status exits 1 when a destination is at "escalate": that is data, not an error.
  "$cli" status --json "${ledger_opts[@]}" > "$work/status.json" || [ $? = 1 ] ||
    { echo "retryguard status failed" >&2; exit 1; }
  read -r messages dests < <(python3 -c 'import json, sys; l = json.load(open(sys.argv[1]))["ledger"]
print(l["messages"], l["destinations"])' "$work/status.json")
  probe_ms=""
  if [ "$probe" -gt 0 ]; then
    # N queue ids spread over the chunk's messages (qmgr's from= line of each).
    grep -o 'postfix/qmgr\[[0-9]*\]: [0-9A-F]*: from=' "$c" | awk '{ sub(/:$/, "", $2); print $2 }' > "$work/qids"
    awk -v n="$probe" -v t="$(wc -l < "$work/qids")" 't > 0 && (NR - 1) % int((t + n - 1) / n) == 0' \
      "$work/qids" | head -n "$probe" > "$work/probe"
    np=$(wc -l < "$work/probe")
    if [ "$np" -gt 0 ]; then
      cat > "$work/probe.sh" << EOF
while read -r q; do "$cli" explain --json $(printf '%q ' "${ledger_opts[@]}") "\$q" > /dev/null || exit 1; done < "$work/probe"
EOF
      read -r pwall _ _ < <(measure bash "$work/probe.sh")
      probe_ms=$(awk -v w="$pwall" -v n="$np" 'BEGIN { printf "%.1f", w * 1000 / n }')
    fi
  fi
  cpu_us=$(awk -v s="$cpu" -v l="$lines" 'BEGIN { printf "%.2f", s * 1e6 / l }')
  wall_us=$(awk -v s="$wall" -v l="$lines" 'BEGIN { printf "%.2f", s * 1e6 / l }')
  bpm=$(awk -v b="$bytes" -v m="$messages" 'BEGIN { if (m > 0) printf "%.0f", b / m; else print 0 }')
  mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
  if [ "$redis" = 1 ]; then
    printf '%5s %9s %9s %8s %9s %9s %9s %9s %9s %9s %9s %9s\n' "$n" "$lines" "$messages" "$dests" \
      "$cpu_us" "$wall_us" "$srv_us" "$mib" "$bpm" "$keys" "${probe_ms:--}" "${fixed_cpu:--}"
  else
    printf '%5s %9s %9s %8s %9s %9s %9s %9s %9s %9s %9s\n' "$n" "$lines" "$messages" "$dests" \
      "$cpu_us" "$wall_us" "$((rss / 1024))" "$mib" "$bpm" "${probe_ms:--}" "${fixed_cpu:--}"
  fi
  echo -e "$n\t$lines\t$messages\t$dests\t$cpu_us\t$wall_us\t${srv_us:-NaN}\t$bytes\t$bpm\t${keys:-NaN}\t${probe_ms:-NaN}\t$rss\t$(cut -d' ' -f1 /proc/loadavg)\t${fixed_cpu:-NaN}" >> "$tsv"
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "cpu/wall us/l: the $who's user+system CPU and wall time per line of the chunk;" \
  "probe ms: wall ms per \`retryguard explain --json\` process (start, ledger open, lookup);" \
  "fixed s: CPU s of an import of no lines (ledger open, engine state restored and saved), included in each chunk's (none with --follow: the daemon starts once)"

summary
[ -n "$data" ] && cp "$tsv" "$data"

plot_svg
