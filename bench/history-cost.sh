#!/usr/bin/env bash
# history-cost.sh -- does the log follower's cost per line depend on how much
# history the ledger holds? The same window of log (the last --window lines of a
# month log, gen_month_log seed 1) is followed by the policy daemon against
# ledgers that hold more and more of the history before it: for each size H in
# --history, a fresh SQLite ledger gets the H lines just before the window with
# `retryguard import`, then the daemon (the shipped follower defaults) starts on
# it, the window is appended to the file it follows, and its CPU is read from
# /proc between the append and the moment its metrics endpoint counts the
# window's last line. The daemon's start and engine-state restore are outside,
# and so is the window's first batch (2,000 lines, timed apart: the first
# ingest reads the queue ids the ledger holds, once per start).
# Unlike bench/import-curve.sh, whose chunks are different days of the month,
# every row here does the same work; only the history differs. With a small
# history some of the window's lines are about messages the ledger never saw
# (their rows are made instead of found): the work is the same log, not quite
# the same writes.
#
# Retention: by default nothing is pruned (the daemon runs with ten years of
# retention for events and finished messages, and its prune at start removes
# nothing), so the ledger holds the whole history: the cost against the
# history's size alone. With --prune the history ledger is pruned as of the
# window's first line with the shipped retention (`retryguard prune --now`), the
# steady state of a relay whose daemon has followed it all along, and the daemon
# keeps the shipped retention.
#
# usage: bench/history-cost.sh [--scale X] [--window LINES] [--history "H1 H2 ..."]
#                              [--rounds N] [--prune] [--data FILE] [--svg FILE]
#                              [--replot TSV] [BUILD_DIR]
#   --scale X       gen_month_log --scale (default 10)
#   --window LINES  lines followed in each run (default 300000)
#   --history LIST  history sizes in lines, "all" for every line before the
#                   window (default "0 30000 100000 300000 1000000 3000000 all")
#   --rounds N      runs of each size, the sizes alternated in each round
#                   (default 1)
#   --prune         the shipped retention (above) instead of keeping everything
#   --data FILE     also keep the table as tab-separated values
#   --svg FILE      the plot (default docs/images/history-cost.svg; a name
#                   ending in .png gives a PNG); needs gnuplot, skipped with a
#                   warning without it
#   --replot TSV    no run: the summary and the plot of a table kept with --data
#                   (give the same --window)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=follow-lib.sh
. bench/follow-lib.sh
scale=10 window=300000 history="0 30000 100000 300000 1000000 3000000 all" rounds=1 prune=0 data="" svg=docs/images/history-cost.svg replot="" build=build
usage() {
  echo "usage: $0 [--scale X] [--window LINES] [--history \"H1 H2 ...\"] [--rounds N] [--prune] [--data FILE] [--svg FILE] [--replot TSV] [BUILD_DIR]" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --scale) scale=$2; shift ;;
    --window) window=$2; shift ;;
    --history) history=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --prune) prune=1 ;;
    --data) data=$2; shift ;;
    --svg) svg=$2; shift ;;
    --replot) replot=$2; shift ;;
    -*) usage ;;
    *) build=$1 ;;
  esac
  shift
done
{ [ "$window" -gt 10000 ] && [ "$rounds" -gt 0 ]; } 2> /dev/null || usage

# Mean CPU per size, and each against the smallest history.
summary() {
  awk -F'\t' 'NR > 1 { s[$2] += $5; n[$2]++; if (!($2 in o)) { o[$2] = ++k; h[k] = $2 } }
    END { for (i = 1; i <= k; i++) { m = s[h[i]] / n[h[i]]; if (i == 1) b = m
        printf "history %s lines: %.2f CPU us/line (%+.0f %% against %s lines)\n", h[i], m, (m / b - 1) * 100, h[1] } }' "$1"
}

# CPU per line of every run and the mean of each size against the messages in
# the ledger before the window (log scale; the empty ledger drawn at 300), and
# the daemon's peak memory.
plot_svg() {
  local tsv=$1
  plot_ready "$svg" || return 0
  awk -F'\t' 'NR > 1 { x = $3 > 0 ? $3 : 300; s[x] += $5; n[x]++; r[x] = $7 / 1024 }
    END { for (x in s) printf "%s\t%.3f\t%.1f\n", x, s[x] / n[x], r[x] }' "$tsv" | sort -n > "$tsv.means"
  gnuplot << GNUPLOT
$(gnuplot_head "$svg" 700)
set logscale x
set xrange [200:3000000]
set xtics ("empty" 300, "1k" 1000, "10k" 10000, "100k" 100000, "1M" 1000000)
set multiplot layout 2,1 title "the same $window lines followed by retryguard-policyd, against the ledger's history"
set ylabel "CPU µs per line"
set yrange [0:*]
plot "$tsv" skip 1 using (\$3 > 0 ? \$3 : 300):5 with points pt 7 ps 0.8 lc rgb "#9aa7b8" title "each run", \
     "$tsv.means" using 1:2 with linespoints pt 5 lw 2 lc rgb "#1f5fa8" title "mean of the runs"
set ylabel "peak RSS, MiB"
set xlabel "messages in the ledger before the window"
plot "$tsv.means" using 1:3 with linespoints pt 7 lw 2 lc rgb "#d06000" title "policy daemon peak resident memory"
unset multiplot
GNUPLOT
  rm -f "$tsv.means"
  echo "plot: $svg"
}

if [ -n "$replot" ]; then
  summary "$replot"
  plot_svg "$replot"
  exit 0
fi
cli=$build/tools/retryguard
gen=$build/gen_month_log
policyd=$build/policyd/retryguard-policyd
for b in "$cli" "$gen" "$policyd"; do [ -x "$b" ] || { echo "no $b: run scripts/build.sh first" >&2; exit 2; }; done
command -v curl > /dev/null || { echo "curl missing (scripts/install-deps.sh --bench)" >&2; exit 2; }
export RETRYGUARD_DATADIR=${RETRYGUARD_DATADIR:-$build/share/retryguard}

work=$(mktemp -d)
dpid=""
cleanup() {
  stop_follower
  rm -rf "$work"
}
trap cleanup EXIT
echo 'metrics: {enabled: false}' > "$work/rg.yaml"

# The window's first day is tomorrow (UTC): the follower takes the year that
# puts a syslog time nearest now, and a quiet daemon moves its rules engine to
# the clock, so the log stays ahead of the clock as on a relay catching up.
days=30
first=$(date -u -d "tomorrow -$((days - 1)) days" +%F)
log=$work/month.log
"$gen" --scale "$scale" --days "$days" --start "$first" --seed 1 --out "$log" 2> "$work/gen.txt"
total=$(wc -l < "$log")
[ "$total" -gt "$window" ] || { echo "the log ($total lines) is not longer than the window" >&2; exit 2; }
before=$((total - window))
tail -n "$window" "$log" > "$work/window.log"
prime=2000  # ingest.batch_max_events, the follower's default transaction
head -n "$prime" "$work/window.log" > "$work/prime.log"
tail -n +"$((prime + 1))" "$work/window.log" > "$work/rest.log"
echo "gen_month_log --scale $scale --days $days --start $first --seed 1: $(sed 's/^gen_month_log: //' "$work/gen.txt")"
echo "window: the last $window lines ($(head -c 15 "$work/window.log") to $(tail -n 1 "$work/window.log" | head -c 15)), $before lines before it"
keep="retention: {events: 3650d, finished_messages: 3650d}"
[ "$prune" = 1 ] && keep=""
# The window's first line as RFC 3339 (gen_month_log writes UTC times).
window_start=$(date -u -d "$(head -c 15 "$work/window.log") ${first%%-*}" +%FT%TZ)
echo "retention: $([ "$prune" = 1 ] && echo "shipped, history pruned as of $window_start" || echo "none (everything kept)")"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

sizes=()
for h in $history; do
  [ "$h" = all ] && h=$before
  [ "$h" -le "$before" ] 2> /dev/null || { echo "history $h: not a size up to $before" >&2; exit 2; }
  sizes+=("$h")
done
# Each size's history ledger once; a run copies it, so every round starts alike.
for h in "${sizes[@]}"; do
  mkdir -p "$work/h$h"
  if [ "$h" -gt 0 ]; then
    head -n "$before" "$log" | tail -n "$h" > "$work/history.log"
    "$cli" import -q --utc --year "${first%%-*}" -c "$work/rg.yaml" -o "ledger.sqlite.path=$work/h$h/ledger.db" \
      "$work/history.log" > "$work/import.txt" 2>&1 || { cat "$work/import.txt" >&2; exit 1; }
    if [ "$prune" = 1 ]; then
      "$cli" prune --now "$window_start" -c "$work/rg.yaml" -o "ledger.sqlite.path=$work/h$h/ledger.db" \
        > "$work/prune.txt" 2>&1 || { cat "$work/prune.txt" >&2; exit 1; }
    fi
    "$cli" status --json -c "$work/rg.yaml" -o "ledger.sqlite.path=$work/h$h/ledger.db" > "$work/status.json" ||
      [ $? = 1 ] || { echo "retryguard status failed" >&2; exit 1; }
    python3 -c 'import json, sys; l = json.load(open(sys.argv[1]))["ledger"]
print(l["messages"], l["destinations"])' "$work/status.json" > "$work/h$h/size"
  else
    echo "0 0" > "$work/h$h/size"
  fi
done
rm -f "$log" "$work/history.log"

tsv=$work/history.tsv
echo -e "round\thistory_lines\tmessages\tdestinations\tcpu_us_per_line\twall_us_per_line\tpeak_rss_kib\tload1\tfirst_batch_cpu_s" > "$tsv"
printf '%5s %9s %9s %8s %9s %9s %9s %9s\n' round history messages dests "cpu us/l" "wall us/l" "rss MiB" "first s"
for r in $(seq "$rounds"); do
  for h in "${sizes[@]}"; do
    rm -rf "$work/run" && mkdir "$work/run"
    [ "$h" -gt 0 ] && cp "$work/h$h"/ledger.db* "$work/run/"
    start_follower "$work/run/ledger.db" "$keep"
    # The first batch's lines apart: the daemon's first ingest reads what it
    # keeps of the ledger (the queue ids it holds), a cost per start.
    read -r _ pcpu _ < <(follow_chunk "$work/prime.log" "$prime")
    [ -n "$pcpu" ] || exit 1
    read -r wall cpu rss < <(follow_chunk "$work/rest.log" "$window")
    [ -n "$rss" ] || exit 1
    stop_follower
    read -r messages dests < "$work/h$h/size"
    cpu_us=$(awk -v s="$cpu" -v l="$((window - prime))" 'BEGIN { printf "%.2f", s * 1e6 / l }')
    wall_us=$(awk -v s="$wall" -v l="$((window - prime))" 'BEGIN { printf "%.2f", s * 1e6 / l }')
    printf '%5s %9s %9s %8s %9s %9s %9s %9s\n' "$r" "$h" "$messages" "$dests" "$cpu_us" "$wall_us" "$((rss / 1024))" "$pcpu"
    echo -e "$r\t$h\t$messages\t$dests\t$cpu_us\t$wall_us\t$rss\t$(cut -d' ' -f1 /proc/loadavg)\t$pcpu" >> "$tsv"
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "history: lines imported before the window (messages and destinations in the ledger before it);" \
  "cpu/wall us/l: the follower's user+system CPU and wall time per line of the window after its first $prime lines;" \
  "first s: CPU s of those first lines (the first ingest reads the ledger's queue ids)"
summary "$tsv"
[ -n "$data" ] && cp "$tsv" "$data"
plot_svg "$tsv"
exit 0
