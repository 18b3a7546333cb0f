# shellcheck shell=bash disable=SC2154 # work, policyd: set by the caller
# follow-lib.sh -- shell functions shared by the benchmarks that time the policy
# daemon's log follower (bench/import-curve.sh --follow, bench/history-cost.sh),
# and their plots.
# Sourced, not run. The caller sets `work` (a scratch directory, removed by the
# caller) and `policyd` (the daemon's binary) and kills "$dpid" on exit.

# User+system CPU seconds of process $1 so far.
proc_cpu() {
  awk '{printf "%.2f\n", ($14 + $15) / '"$(getconf CLK_TCK)"'}' "/proc/$1/stat"
}

# Starts the daemon as shipped but for its endpoints (loopback, ports of the
# kernel's choosing), its own log (stderr) and verdicts (a file), following
# "$work/mail.log" from its beginning into the SQLite ledger $1. As root it
# would switch to policy.user: it runs as nobody from the start instead.
# $2, optional: more keys of the ledger's map, e.g. "retention: {events: 3650d}".
# Sets dpid and mport.
start_follower() {
  local ledger=$1 more=${2:-}
  : > "$work/mail.log"
  rm -f "$work/ready"
  cat > "$work/follow.yaml" << YAML
sources: [{type: file, path: $work/mail.log, start: beginning}]
log: {target: stderr, verdicts: "file:$work/verdicts.log"}
metrics: {enabled: true, listen: "127.0.0.1:0"}
policy: {socket: "inet:0@127.0.0.1"}
ledger: {sqlite: {path: $ledger}${more:+, $more}}
YAML
  local as_user=()
  if [ "$(id -u)" = 0 ]; then
    chown -R nobody "$work"
    as_user=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
  fi
  TZ=UTC "${as_user[@]}" "$policyd" --foreground -c "$work/follow.yaml" --ready-file "$work/ready" \
    > "$work/policyd.log" 2>&1 &
  dpid=$!
  for _ in $(seq 200); do [ -s "$work/ready" ] && break; sleep 0.05; done
  mport=$(awk '$1 == "metrics" { n = split($2, a, ":"); print a[n] }' "$work/ready" 2> /dev/null)
  [ -n "$mport" ] || { echo "retryguard-policyd did not start" >&2; cat "$work/policyd.log" >&2; return 1; }
}

# Stops the daemon started by start_follower.
stop_follower() {
  [ -n "${dpid:-}" ] || return 0
  kill "$dpid" 2> /dev/null && wait "$dpid" 2> /dev/null
  dpid=""
}

# The lines the daemon's follower has recorded so far.
followed_lines() {
  curl -fsS "http://127.0.0.1:$mport/metrics" | awk '$1 == "retryguard_ingest_lines_total" { print $2 }'
}

# Appends file $1 to the followed log and waits until the daemon has recorded
# $2 lines in all; prints "wall_s cpu_s peak_rss_kib".
follow_chunk() {
  local want=$2 c0 t0 got
  c0=$(proc_cpu "$dpid")
  t0=$(date +%s.%N)
  cat "$1" >> "$work/mail.log"
  while :; do
    got=$(followed_lines) || { echo "metrics endpoint gone" >&2; cat "$work/policyd.log" >&2; return 1; }
    [ "${got:-0}" -ge "$want" ] && break
    kill -0 "$dpid" 2> /dev/null || { echo "retryguard-policyd exited" >&2; cat "$work/policyd.log" >&2; return 1; }
    sleep 0.05
  done
  awk -v t0="$t0" -v t1="$(date +%s.%N)" -v c0="$c0" -v c1="$(proc_cpu "$dpid")" \
    -v rss="$(awk '/^VmHWM:/ { print $2 }' "/proc/$dpid/status")" 'BEGIN { printf "%.2f %.2f %d\n", t1 - t0, c1 - c0, rss }'
}

# Whether a plot can be drawn into $1: gnuplot is there (else a note, and
# false) and the file's directory exists.
plot_ready() {
  if ! command -v gnuplot > /dev/null; then
    echo "gnuplot not installed (scripts/install-deps.sh --bench): no plot" >&2
    return 1
  fi
  mkdir -p "$(dirname "$1")"
}

# gnuplot's opening lines for the plot file $1 ($2 pixels high): an SVG, or a
# PNG for a name ending in .png; tab-separated data, the key below, a grid.
gnuplot_head() {
  local term="svg size 900,$2 dynamic font \"sans,12\" background rgb \"white\""
  case "$1" in *.png) term="pngcairo size 900,$2 font \"sans,11\"" ;; esac
  printf '%s\n' "set terminal $term" "set output \"$1\"" "set termoption noenhanced" \
    'set datafile separator "\t"' "set key below horizontal" "set grid"
}
