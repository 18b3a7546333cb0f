#!/usr/bin/env bash
# kill_loop.sh -- exactly-once engine state across kill -9 (docs/reliability.md
# "Crashes"). Runs the same generated log twice into two ledgers: once cleanly,
# once killed with SIGKILL five times at pseudo-random points and resumed, then
# asserts that the two end states are identical: saved engine state, verdict
# high-water mark and counts, flag rows, destination states (state_dump) and
# the verdict lines written, which must be identical (the verdict outbox).
# KILL_LOOP_SEED picks other kill points.
#
#   kill_loop.sh import|policyd sqlite|redis RETRYGUARD POLICYD STATE_DUMP
#
# import:  `retryguard import` of the whole log; its verdict lines go to a file
#          (--verdicts file:...).
# policyd: retryguard-policyd following a log file that grows while it runs;
#          its verdict lines go to a file (log.verdicts: file:...).
# Redis: a private redis-server on a free loopback port (databases 1 and 2).
# Every process it starts is stopped by pid on exit; nothing binds beyond 127.0.0.1.
set -euo pipefail

MODE=${1:?usage: $0 import|policyd sqlite|redis RETRYGUARD POLICYD STATE_DUMP}
BACKEND=${2:?}
RG=${3:?}
POLICYD=${4:?}
DUMP=${5:?}
HERE=$(cd "$(dirname "$0")" && pwd)
LINES=${KILL_LOOP_LINES:-4000}
KILLS=5
RANDOM=$((${KILL_LOOP_SEED:-4242} + ${#MODE} * 7 + ${#BACKEND}))  # pseudo-random, the same every run

DIR=$(mktemp -d "${TMPDIR:-/tmp}/rg-kill-loop.XXXXXX")
AS_USER=()
if [ "$(id -u)" = 0 ]; then
    chown nobody "$DIR" && chmod 755 "$DIR"
    AS_USER=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
    # nobody runs a copy with the shipped rules beside it: the build tree may
    # sit where nobody cannot reach (a clone in /root). The e2e harness stages it.
    # shellcheck source=../e2e/lib.sh
    . "$HERE/../e2e/lib.sh"
    E2E_DIR=$DIR RETRYGUARD_POLICYD=$POLICYD
    e2e_stage_programs
    POLICYD=$RETRYGUARD_POLICYD
fi
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ "${KEEP:-0}" = 1 ] || rm -rf "$DIR"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

if [ "$BACKEND" = redis ]; then
    command -v redis-server >/dev/null || { echo "redis-server not installed"; exit 1; }
    RPORT=$(free_port)
    redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR" \
        --daemonize no > "$DIR/redis.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 100); do redis-cli -p "$RPORT" ping > /dev/null 2>&1 && break; sleep 0.05; done
    SPEC_CLEAN="redis://127.0.0.1:$RPORT/1"
    SPEC_KILLED="redis://127.0.0.1:$RPORT/2"
else
    SPEC_CLEAN="sqlite:$DIR/clean.db"
    SPEC_KILLED="sqlite:$DIR/killed.db"
fi

python3 "$HERE/gen_log.py" "$LINES" 7 > "$DIR/full.log"
grep -q $'\xc3\x28' "$DIR/full.log" || { echo "generator lost its invalid UTF-8 line"; exit 1; }

# Fast ladder and flags so a few thousand lines escalate, flag, and expire flags.
rules() {
    cat <<EOF
categories: {receiver_config: {watch_after_deferrals: 2, escalate_after: 20m}}
flags: {episodes: 2, period: 1d, ttl: 3h}
metrics: {enabled: false}
ingest: {batch_max_delay: 20ms, batch_max_events: 150}
EOF
}

kills_done=0
report=""

# The -o options that select the ledger a SPEC names (sqlite:/path or
# redis://host:port/db), in the global array LEDGER_OPTS.
ledger_opts() {  # ledger_opts SPEC
    case $1 in
        sqlite:*) LEDGER_OPTS=(-o "ledger.sqlite.path=${1#sqlite:}") ;;
        redis://*)
            local rest=${1#redis://}
            LEDGER_OPTS=(-o ledger.backend=redis -o "ledger.redis.address=${rest%%/*}" -o "ledger.redis.database=${rest##*/}") ;;
        *) echo "unknown ledger spec $1"; exit 1 ;;
    esac
}

# ------------------------------------------------------------------ import
clean_ms=0
run_import() {  # run_import SPEC OUT [kill]
    local spec=$1 out=$2 kill=${3:-}
    rules > "$DIR/import.yaml"
    ledger_opts "$spec"
    local args=(import -c "$DIR/import.yaml" "${LEDGER_OPTS[@]}" --utc --batch 50 -q --verdicts "file:$out"
        "$DIR/full.log")
    if [ -z "$kill" ]; then
        local t0
        t0=$(date +%s%N)
        "$RG" "${args[@]}" 2>> "$DIR/import.err"
        clean_ms=$((($(date +%s%N) - t0) / 1000000))
        return
    fi
    # Kill points are drawn from the clean run's duration, so they land inside
    # the import on a fast machine and a slow one alike. A resumed import skips
    # what the ledger has, so it is shorter: when one finishes before its kill,
    # the next draw is from a shorter span.
    local attempt=0 span=$(( clean_ms * 8 / 10 ))
    [ "$span" -ge 4 ] || span=4
    while [ "$kills_done" -lt "$KILLS" ]; do
        attempt=$((attempt + 1))
        [ "$attempt" -le 200 ] || { echo "could not kill the import $KILLS times (clean run: ${clean_ms} ms)"; exit 1; }
        "$RG" "${args[@]}" 2>> "$DIR/import.err" &
        local pid=$! delay_ms=$((1 + RANDOM % span))
        sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
        if kill -9 "$pid" 2> /dev/null; then
            wait "$pid" 2> /dev/null || true
            kills_done=$((kills_done + 1))
            report+="kill $kills_done: after ${delay_ms} ms, $(wc -l < "$out" 2>/dev/null || echo 0) verdict lines so far"$'\n'
        else
            wait "$pid" 2> /dev/null || true  # finished before the kill: start again, sooner
            span=$(( span * 2 / 3 ))
            [ "$span" -ge 2 ] || span=2
        fi
    done
    "$RG" "${args[@]}" 2>> "$DIR/import.err"
}

# ----------------------------------------------------------------- policyd
start_policyd() {  # start_policyd CONF LOGFILE SPEC
    rm -f "$DIR/ready"
    ledger_opts "$3"
    # As root the daemon would drop to policy.user: run it as nobody from the start.
    "${AS_USER[@]}" "$POLICYD" --foreground -c "$1" "${LEDGER_OPTS[@]}" -o policy.socket=inet:0@127.0.0.1 \
        -o log.target=stderr --ready-file "$DIR/ready" >> "$2" 2>&1 &
    DPID=$!
    PIDS+=("$DPID")
    for _ in $(seq 200); do [ -s "$DIR/ready" ] && return 0; sleep 0.05; done
    echo "policyd did not start"; cat "$2"; exit 1
}

# Offset the follower recorded in the ledger for the log (python reads the JSON).
ledger_offset() {  # ledger_offset CONF SPEC
    local json
    ledger_opts "$2"
    json=$("$RG" status --json -c "$1" "${LEDGER_OPTS[@]}" 2> /dev/null || true)  # 1: needs attention
    python3 -c 'import json,sys
try:
    d = json.loads(sys.argv[1])
    print(max([f.get("offset") or 0 for f in d.get("followers", [])] or [0]))
except Exception:
    print(0)' "$json"
}

run_policyd() {  # run_policyd SPEC VERDICTS NAME [kill]
    local spec=$1 verdicts=$2 name=$3 kill=${4:-}
    local log="$DIR/$name.mail.log" conf="$DIR/$name.yaml"
    : > "$log"
    {
        echo "sources: [{type: file, path: $log, start: beginning}]"
        echo "log: {verdicts: \"file:$verdicts\"}"
        rules
    } > "$conf"
    # The log grows while the daemon follows it: 50 lines every 60 ms.
    (
        total=$(wc -l < "$DIR/full.log")
        for ((from = 1; from <= total; from += 50)); do
            sed -n "${from},$((from + 49))p" "$DIR/full.log" >> "$log"
            sleep 0.06
        done
    ) &
    local feeder=$!
    PIDS+=("$feeder")
    start_policyd "$conf" "$DIR/$name.policyd.log" "$spec"
    if [ -n "$kill" ]; then
        while [ "$kills_done" -lt "$KILLS" ]; do
            local delay_ms=$((100 + RANDOM % 400))
            sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
            kill -9 "$DPID"
            wait "$DPID" 2> /dev/null || true
            kills_done=$((kills_done + 1))
            report+="kill $kills_done: after ${delay_ms} ms, log at $(wc -c < "$log") bytes, $(wc -l < "$verdicts" 2>/dev/null || echo 0) verdict lines so far"$'\n'
            start_policyd "$conf" "$DIR/$name.policyd.log" "$spec"
        done
    fi
    wait "$feeder"
    local size
    size=$(wc -c < "$log")
    for _ in $(seq 300); do
        [ "$(ledger_offset "$conf" "$spec")" -ge "$size" ] && break
        sleep 0.1
    done
    [ "$(ledger_offset "$conf" "$spec")" -ge "$size" ] || { echo "$name: policyd did not catch up"; exit 1; }
    sleep 0.5
    kill -TERM "$DPID"
    wait "$DPID" 2> /dev/null || true
}

# ------------------------------------------------------------------- runs
if [ "$MODE" = import ]; then
    run_import "$SPEC_CLEAN" "$DIR/clean.verdicts"
    run_import "$SPEC_KILLED" "$DIR/killed.verdicts" kill
else
    run_policyd "$SPEC_CLEAN" "$DIR/clean.verdicts" clean
    run_policyd "$SPEC_KILLED" "$DIR/killed.verdicts" killed kill
fi
# The file target's syslog-like prefix carries the wall clock and the pid.
strip() { sed 's/^[^]]*\]: //' "$1"; }
printf '%s' "$report"
# What the restarts found in the verdict outbox (lines of a commit the kill may have cut off).
grep -h "verdict outbox:" "$DIR"/*.err "$DIR"/*.policyd.log 2>/dev/null | sed 's/^.*verdict outbox: /outbox at a restart: /' || true
echo "kills: $kills_done ($MODE, $BACKEND, $LINES lines)"

"$DUMP" "$SPEC_CLEAN" > "$DIR/clean.dump"
"$DUMP" "$SPEC_KILLED" > "$DIR/killed.dump"
strip "$DIR/clean.verdicts" > "$DIR/clean.lines"
strip "$DIR/killed.verdicts" > "$DIR/killed.lines"

fail=0
[ "$kills_done" -eq "$KILLS" ] || { echo "FAIL: $kills_done kills, wanted $KILLS"; fail=1; }
grep -q '^state version 2' "$DIR/clean.dump" || { echo "FAIL: no saved state"; fail=1; }
grep -q '^flag ' "$DIR/clean.dump" || { echo "FAIL: the log raised no flag"; fail=1; }
grep -q 'verdict=escalate' "$DIR/clean.lines" || { echo "FAIL: the log escalated nothing"; fail=1; }
if ! diff -q "$DIR/clean.dump" "$DIR/killed.dump" > /dev/null; then
    echo "FAIL: ledger and engine state differ after kill -9:"
    diff "$DIR/clean.dump" "$DIR/killed.dump" | cut -c1-300 | head -20
    fail=1
fi
# Verdict lines: exactly those of the clean run, in the same order. A kill
# between an effects commit and the line writes leaves the lines in the ledger's
# outbox; the restart finds which of them the file already ends with and writes
# the rest (docs/reliability.md "Crashes").
if ! python3 - "$DIR/clean.lines" "$DIR/killed.lines" <<'PY'
import sys
clean = open(sys.argv[1], "rb").read().splitlines()
killed = open(sys.argv[2], "rb").read().splitlines()
if clean == killed:
    print("verdict lines: %d clean, %d killed, identical" % (len(clean), len(killed)))
    sys.exit(0)
n = next((i for i, (a, b) in enumerate(zip(clean, killed)) if a != b), min(len(clean), len(killed)))
print("FAIL: verdict lines differ (%d clean, %d killed), first at line %d:" % (len(clean), len(killed), n + 1))
for name, lines in (("clean ", clean), ("killed", killed)):
    for line in lines[n:n + 3]:
        print("  %s %s" % (name, line[:300].decode(errors="replace")))
sys.exit(1)
PY
then
    fail=1
fi
echo "compared: $(wc -l < "$DIR/clean.dump") state lines, $(wc -l < "$DIR/clean.lines") verdict lines"
[ "$fail" = 0 ] && echo "PASS"
exit "$fail"
