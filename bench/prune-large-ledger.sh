#!/usr/bin/env bash
# prune-large-ledger.sh -- `retryguard prune` on a large SQLite ledger: a
# generated relay log (gen_month_log) imported into a fresh ledger, then
# pruned by this build's CLI and, with --before, by another build's on a copy
# of the same file. For each: the prune alone (wall seconds, rows removed),
# then again on a fresh copy under bench/prune-lock-wait.py (how long a second
# connection waits for BEGIN IMMEDIATE meanwhile), and the file's size, pages
# and free pages with the messages left (a prune frees pages for reuse; the
# file does not shrink).
#
# The log starts --start (default 2026-09-01) and lasts --days (default 60),
# so that with the default retention (finished messages 14 days, events 30
# days) every finished message, recipient and replay key is older than the
# cut: the rows removed do not depend on the minute the prune runs.
#
# usage: bench/prune-large-ledger.sh [--scale X] [--days N] [--start DATE] [--before CLI] [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
scale=1 days=60 start=2026-09-01 before="" build=build
while [ $# -gt 0 ]; do
  case "$1" in
    --scale) scale=$2; shift 2 ;;
    --days) days=$2; shift 2 ;;
    --start) start=$2; shift 2 ;;
    --before) before=$2; shift 2 ;;
    *) build=$1; shift ;;
  esac
done
cli=$PWD/$build/tools/retryguard
probe=$PWD/bench/prune-lock-wait.py
export RETRYGUARD_DATADIR=$PWD/$build/share/retryguard
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'metrics: {enabled: false}\n' >"$work/cfg.yaml"
"$build/gen_month_log" --scale "$scale" --days "$days" --start "$start" --out "$work/month.log"
year=${start%%-*}
"$cli" import -q --utc --year "$year" -c "$work/cfg.yaml" -o ledger.sqlite.path="$work/base.sqlite" "$work/month.log"

shape() {  # file bytes, pages, free pages, messages
  sqlite3 "$1" "SELECT (SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()),
    (SELECT page_count FROM pragma_page_count()), (SELECT freelist_count FROM pragma_freelist_count()),
    (SELECT COUNT(*) FROM messages)" | awk -F'|' '{
      used = ($2 - $3) * ($1 / $2)
      printf "bytes %d  pages %d  free pages %d  used bytes %d  messages %d", $1, $2, $3, used, $4
      if ($4 > 0) printf "  bytes/message %.0f  used bytes/message %.0f", $1 / $4, used / $4
      printf "\n" }'
}
echo "before: $(shape "$work/base.sqlite")"
fresh() { rm -f "$1" "$1-wal" "$1-shm"; cp "$work/base.sqlite" "$1"; }
run() {  # label cli
  local db=$work/$1.sqlite
  fresh "$db"
  local t0 t1
  t0=$(date +%s.%N)
  "$2" prune -c "$work/cfg.yaml" -o ledger.sqlite.path="$db"
  t1=$(date +%s.%N)
  echo "$1: prune alone $(echo "$t1 - $t0" | bc) s"
  echo "$1 after: $(shape "$db")"
  fresh "$db"
  echo "$1 under the probe:"
  python3 "$probe" "$db" -- "$2" prune -c "$work/cfg.yaml" -o ledger.sqlite.path="$db" | sed 's/^/  /'
  rm -f "$db" "$db-wal" "$db-shm"
}
[ -n "$before" ] && run before "$before"
run this "$cli"
