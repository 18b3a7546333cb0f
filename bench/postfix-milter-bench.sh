#!/usr/bin/env bash
# postfix-milter-bench.sh -- retryguard-milter's cost measured through Postfix
# itself: a private sending Postfix on 127.0.0.1 relays everything to
# smtp-sink; mail is submitted over SMTP with no milter, with the no-op
# libmilter milter (bench/noop_milter.c) and with retryguard-milter (SQLite
# ledger), the three alternated round by round in one run, for:
#   - identical content (smtp-source: same sender, subject and body every time)
#   - unique content (every message its own subject and body)
#   - 8 sessions and 1 session,
# with the ledger prefilled with each of LEDGER_SIZES messages. Prints
# messages/s per variant and round, and retryguard's ratio to the no-op milter.
#
#   sudo bench/postfix-milter-bench.sh                  # build/ programs
#   MESSAGES=1500 ROUNDS=3 LEDGER_SIZES="100000 1000000" sudo bench/postfix-milter-bench.sh
#
# The prefill writes rows as the milter records them (state incoming, a
# Message-ID and a fingerprint each) straight into the ledger with sqlite3:
# the ledger's size, not how it got there, is what the lookups see.
# RG_OPTIONS="-o key=value ...": more settings for retryguard-milter (to see
# what a setting costs). Needs root (Postfix's master), postfix (smtp-source,
# smtp-sink), sqlite3, python3.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${RETRYGUARD_BUILD:-$src/build}
MESSAGES=${MESSAGES:-1000}
ROUNDS=${ROUNDS:-2}
LEDGER_SIZES=${LEDGER_SIZES:-"100000 1000000"}
SESSIONS=${SESSIONS:-"8 1"}
CONTENTS=${CONTENTS:-"identical unique"}
export RETRYGUARD_MILTER=$build/milter/retryguard-milter
noop_src=$build/milter/retryguard-bench-noop-milter
for p in "$RETRYGUARD_MILTER" "$noop_src"; do [ -x "$p" ] || { echo "missing $p: build first" >&2; exit 2; }; done
for t in smtp-source smtp-sink sqlite3 python3; do command -v "$t" >/dev/null || { echo "missing $t" >&2; exit 2; }; done

. "$src/tests/e2e/lib.sh"
e2e_begin postfix-milter-bench 7200
cp "$noop_src" "$E2E_DIR/prog/bin/"
NOOP=$E2E_DIR/prog/bin/$(basename "$noop_src")

# The receiver: smtp-sink accepts everything and keeps nothing.
E2E_RCV_PORT=$(e2e_free_port)
e2e_start_daemon sink smtp-sink -u nobody -c "127.0.0.1:$E2E_RCV_PORT" 512
mkdir -p "$E2E_DIR/milter" "$E2E_DIR/ledger"
chmod 755 "$E2E_DIR/milter"
chown nobody:nogroup "$E2E_DIR/ledger"
e2e_start_sender ""
etc=$(e2e_etc sender)
postconf -c "$etc" -e 'smtpd_client_connection_count_limit = 0' 'smtpd_client_message_rate_limit = 0' \
    'default_process_limit = 100' 'in_flow_delay = 0'
postfix -c "$etc" reload >/dev/null 2>&1

RG_SOCK=$E2E_DIR/milter/rg.sock
DB=$E2E_DIR/ledger/ledger.db
# The no-op milter runs as nobody:postfix and creates its socket itself, in a
# directory of its own (the shared one is root's). Without its socket every
# "noop" round would measure Postfix failing to reach a milter instead.
mkdir -p "$E2E_DIR/milter/noop"
chown nobody:postfix "$E2E_DIR/milter/noop"
NOOP_SOCK=$E2E_DIR/milter/noop/noop.sock
e2e_start_daemon noop setpriv --reuid nobody --regid postfix --clear-groups "$NOOP" "unix:$NOOP_SOCK"
for _ in $(seq 100); do [ -S "$NOOP_SOCK" ] && break; sleep 0.1; done
[ -S "$NOOP_SOCK" ] || e2e_daemon_failed noop "socket $NOOP_SOCK did not appear"
chmod 0660 "$NOOP_SOCK"  # as retryguard-milter's milter.socket_mode: Postfix connects as group postfix

start_rg() {
    e2e_start_daemon rg "$RETRYGUARD_MILTER" -c /dev/null -o "milter.socket=unix:$RG_SOCK" -o milter.user=nobody \
        -o milter.group=postfix -o milter.socket_mode=0660 -o "ledger.sqlite.path=$DB" \
        -o "log.verdicts=postlog:$E2E_DIR/sender/spool/public/postlog" -o log.target=stderr ${RG_OPTIONS:-}
    for _ in $(seq 600); do [ -S "$RG_SOCK" ] && break; sleep 0.1; done
    [ -S "$RG_SOCK" ] || e2e_daemon_failed rg "socket $RG_SOCK did not appear"
}
# PREFILL_STATE: what the prefilled messages are. "gone" (default): history, as
# a ledger that has followed the log holds it (delivered and removed, one in
# 1000 still queued as 'deferred'); "incoming": every one still open, as if no
# follower ever ran (the worst case for the milter's identity filter, which
# holds the keys of every open message).
PREFILL_STATE=${PREFILL_STATE:-gone}
prefill() {  # N: the ledger holds N recorded messages (plus what earlier rounds recorded)
    local have state finished
    have=$(sqlite3 "$DB" "SELECT COUNT(*) FROM messages WHERE queue_id LIKE 'P%'")
    [ "$have" -ge "$1" ] && return 0
    if [ "$PREFILL_STATE" = incoming ]; then
        state="'incoming'" finished=NULL
    else
        state="CASE WHEN i % 1000 = 0 THEN 'deferred' ELSE 'gone' END"
        finished="CASE WHEN i % 1000 = 0 THEN NULL ELSE 1764547200000000 + i END"
    fi
    sqlite3 "$DB" "PRAGMA journal_mode=WAL; BEGIN;
      WITH RECURSIVE c(i) AS (SELECT $have + 1 UNION ALL SELECT i + 1 FROM c WHERE i < $1)
      INSERT INTO messages(queue_id, first_queue_id, message_id, fingerprint, sender, arrival, state, updated,
                           finished)
      SELECT printf('P%09d', i), printf('P%09d', i), printf('prefill-%d@bench.example', i),
             lower(hex(randomblob(20))), 'someone@bench.example', 1764547200000000 + i, $state,
             1764547200000000 + i, $finished FROM c;
      COMMIT;" >/dev/null
    chown nobody:nogroup "$DB" "$DB"-* 2>/dev/null || true
}
use_milter() {  # SOCKET or "": what the sender's smtpd asks
    local spec=
    [ -n "$1" ] && spec="unix:$1"
    postconf -c "$etc" -e "smtpd_milters = $spec"
    postfix -c "$etc" reload >/dev/null 2>&1
    sleep 1
}
drain() {  # the queue empty, so one run's deliveries do not load the next
    for _ in $(seq 600); do
        [ -z "$(find "$E2E_DIR/sender/spool/incoming" "$E2E_DIR/sender/spool/active" "$E2E_DIR/sender/spool/deferred" -type f 2>/dev/null | head -1)" ] && return 0
        sleep 0.1
    done
}
cat >"$E2E_DIR/unique.py" <<'PY'
import smtplib, sys, threading, time, uuid
port, sessions, total = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def run(n, k):
    with smtplib.SMTP("127.0.0.1", port, timeout=60) as s:
        for i in range(n):
            u = uuid.uuid4().hex
            msg = (f"From: bench@ok.e2e.test\r\nTo: user@ok.e2e.test\r\nSubject: report {u}\r\n"
                   f"Message-ID: <{u}@bench.example>\r\n\r\n" + (f"line {u} {k} {i}\r\n" * 24))
            s.sendmail("bench@ok.e2e.test", ["user@ok.e2e.test"], msg)
per = total // sessions
ts = [threading.Thread(target=run, args=(per, k)) for k in range(sessions)]
for t in ts: t.start()
for t in ts: t.join()
PY
# CPU_BY_PROCESS=1: after each variant, the CPU time per message of every
# process name that used any (from /proc; a process that exits between two
# snapshots is counted in its parent's reaped-children time, "name+children").
cat >"$E2E_DIR/cpu.py" <<'PY'
import json, os, sys
def snap():
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit(): continue
        try:
            with open(f"/proc/{pid}/stat") as f: st = f.read()
        except OSError: continue
        comm = st[st.index("(") + 1:st.rindex(")")]
        f = st[st.rindex(")") + 2:].split()
        out[pid] = (comm, int(f[11]) + int(f[12]), int(f[13]) + int(f[14]))
    return out
if sys.argv[1] == "snap":
    json.dump(snap(), open(sys.argv[2], "w"))
else:
    before, after, n = json.load(open(sys.argv[2])), snap(), int(sys.argv[3])
    hz, by = os.sysconf("SC_CLK_TCK"), {}
    for pid, (comm, own, kids) in after.items():
        b = before.get(pid)
        d_own = own - (b[1] if b and b[0] == comm else 0)
        d_kids = kids - (b[2] if b and b[0] == comm else 0)
        if d_own: by[comm] = by.get(comm, 0) + d_own
        if d_kids: by[comm + "+children"] = by.get(comm + "+children", 0) + d_kids
    top = sorted(by.items(), key=lambda kv: -kv[1])[:int(os.environ.get("CPU_TOP", "10"))]
    print("    cpu us/msg: " + ", ".join(f"{c} {t * 1e6 / hz / n:.0f}" for c, t in top))
PY
send() {  # CONTENT SESSIONS: prints messages per second
    local content=$1 s=$2 t0 t1
    t0=$(date +%s.%N)
    if [ "$content" = identical ]; then
        smtp-source -s "$s" -m "$MESSAGES" -l 1024 -f bench@ok.e2e.test -t user@ok.e2e.test \
            "127.0.0.1:$E2E_SENDER_PORT" >/dev/null
    else
        python3 "$E2E_DIR/unique.py" "$E2E_SENDER_PORT" "$s" "$MESSAGES"
    fi
    t1=$(date +%s.%N)
    python3 -c "print(f'{$MESSAGES / ($t1 - $t0):.1f}')"
}

start_rg  # creates the schema
results=$E2E_DIR/results.txt
printf '%-9s %-9s %-8s %-5s %10s %10s %10s %9s\n' ledger content sessions round none noop retryguard rg/noop | tee "$results"
for size in $LEDGER_SIZES; do
    e2e_stop_daemon rg
    prefill "$size"
    start_rg
    for content in $CONTENTS; do
        for s in $SESSIONS; do
            for r in $(seq "$ROUNDS"); do
                declare -A rate=()
                for v in none noop rg; do
                    case $v in none) use_milter "" ;; noop) use_milter "$NOOP_SOCK" ;; rg) use_milter "$RG_SOCK" ;; esac
                    drain
                    [ "${CPU_BY_PROCESS:-0}" = 1 ] && python3 "$E2E_DIR/cpu.py" snap "$E2E_DIR/cpu.json"
                    rate[$v]=$(send "$content" "$s")
                    if [ "${CPU_BY_PROCESS:-0}" = 1 ]; then
                        drain
                        echo "  $v:" >>"$E2E_DIR/cpu.txt"
                        python3 "$E2E_DIR/cpu.py" diff "$E2E_DIR/cpu.json" "$MESSAGES" >>"$E2E_DIR/cpu.txt"
                    fi
                done
                ratio=$(python3 -c "print(f'{${rate[rg]} / ${rate[noop]}:.2f}')")
                printf '%-9s %-9s %-8s %-5s %10s %10s %10s %9s\n' "$size" "$content" "$s" "$r" \
                    "${rate[none]}" "${rate[noop]}" "${rate[rg]}" "$ratio" | tee -a "$results"
                if [ "${CPU_BY_PROCESS:-0}" = 1 ]; then cat "$E2E_DIR/cpu.txt"; rm -f "$E2E_DIR/cpu.txt"; fi
            done
        done
    done
    grep -o 'lookups_filtered=[0-9]*' "$E2E_DIR/log/rg.stderr" | tail -1 || true
done
e2e_log "ledger: $(sqlite3 "$DB" 'SELECT COUNT(*) FROM messages') messages at the end"
# Every milter round must have gone through its milter: a milter Postfix could
# not reach would make that round measure Postfix alone.
if grep -q "warning: connect to Milter service" "$(e2e_logfile sender)"; then
    grep "warning: connect to Milter service" "$(e2e_logfile sender)" | head -3 >&2
    e2e_fail "Postfix could not reach a milter during the run: the figures above are not valid"
fi
