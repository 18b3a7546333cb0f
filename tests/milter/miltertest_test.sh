#!/usr/bin/env bash
# miltertest_test.sh -- protocol-level test of the built retryguard-milter with
# Debian's miltertest (tests/milter/protocol.lua) and a real SQLite ledger,
# which `retryguard import` feeds from a Postfix log (the real parser and
# ingest). Starts and stops the milter itself (by pid).
set -euo pipefail
if ! command -v miltertest >/dev/null; then
    [ "${CI:-}" = true ] && { echo "FAIL: miltertest is not installed" >&2; exit 1; }
    echo "SKIP: miltertest is not installed" >&2
    exit 77
fi
dir=$(mktemp -d /tmp/retryguard-miltertest.XXXXXX)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
chmod 755 "$dir"
# The programs and the files they read are staged in $dir, readable by the
# unprivileged user they run as, wherever the source tree is (lib.sh).
# shellcheck source=../e2e/lib.sh
. "$(dirname "$0")/../e2e/lib.sh"
E2E_DIR=$dir
e2e_stage_programs
cp "$(dirname "$0")/../../conf/retryguard.yaml" "$dir/retryguard.yaml"
chmod 644 "$dir/retryguard.yaml"
run_as=()
user=$(id -un) group=$(id -gn)
if [ "$(id -u)" = 0 ]; then
    user=nobody group=nogroup
    chown nobody "$dir"
    run_as=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
fi
# The shipped configuration with this test's settings as -o overrides (milter.user
# and milter.group apply when started as root).
milter_conf=(-c "$dir/retryguard.yaml" -o milter.socket_mode=0600 -o "milter.user=$user" -o "milter.group=$group"
    -o log.target=stderr)
# Starts a milter with these settings and ARGS on unix:$dir/NAME.sock, its
# standard error in $dir/NAME.stderr, and waits for its socket.
start_milter() {
    local name=$1
    shift
    "$RETRYGUARD_MILTER" "${milter_conf[@]}" -o "milter.socket=unix:$dir/$name.sock" "$@" 2>"$dir/$name.stderr" &
    pid=$!
    for _ in $(seq 100); do [ -S "$dir/$name.sock" ] && break; sleep 0.05; done
}
# Stops the milter started last; its counters line is then in its log.
stop_milter() {
    kill "$pid"
    wait "$pid" || true
    pid=
}
start_milter milter -o "ledger.sqlite.path=$dir/ledger.db" -o milter.filter_rescan=1s \
    -o 'destinations=[{domain: hold.example, reinjection: {action: hold}}, {domain: tag.example, reinjection: {action: tag}},
        {domain: drop.example, reinjection: {action: drop_duplicates}}, {domain: quiet.example, reinjection: {action: log_only}},
        {domain: trial.example, dry_run: true}]'
conf=$dir/retryguard.yaml
# protocol.lua runs: $RG_FEED LEDGER LOG
export RG_SOCKET=$dir/milter.sock RG_LEDGER=ledger.sqlite.path=$dir/ledger.db RG_LOG=$dir/postfix.log \
    RG_FEED="${run_as[*]} $RETRYGUARD_CLI import -q -c $conf -o"
rc=0
out=$(timeout -k 5 60 miltertest -s "$(dirname "$0")/protocol.lua" 2>&1) || rc=$?
stop_milter
log=$(cat "$dir/milter.stderr")
printf '%s\n%s\n' "$out" "$log"
[ "$rc" = 0 ] || { echo "FAIL: miltertest exited $rc" >&2; exit 1; }
check() { grep -qE -- "$1" <<<"$log" || { echo "FAIL: no /$1/ in the milter's log" >&2; exit 1; }; }
grep -q "protocol: all checks passed" <<<"$out"
# the verdict lines say what happened to each message and why
check 'BBB0000001: verdict=reject path=smtp original=AAA0000001 original_host=sender duplicates=bob@defer.example matched=message-id destination=defer.example .* reply="451 4.3.5 System config error" response="550 5.7.1"'
check 'BBB0000002: verdict=reject .*matched=fingerprint'
check 'BBB0000003: verdict=drop_duplicates .*duplicates=bob@defer.example new=carol@new.example'
check 'BBB0000004: verdict=hold .*original=AAA0000002'
check 'BBB0000005: verdict=tag '
check 'BBB0000006: verdict=drop_duplicates '
check 'BBB0000007: verdict=log_only '
check 'BBB0000014: verdict=reject path=smtp original=AAA0000007 .* dry_run=yes '
check 'BBB0000008: verdict=accept '
check 'BBB0000011: verdict=reject .*original=CCC0000001 .*matched=message-id'
check 'BBB0000012: verdict=accept '
check 'stopping: counters: messages=21 accepted=16 refused=3 held=1 discarded=1 tagged=1 recorded=16 failopen_ledger=0 failopen_timeout=0 failopen_internal=0 failopen_input=0 tempfailed=0 record_errors=0 reloads=0 reload_errors=0 lookups_filtered=11 filter_errors=0 exceptions=0 dry_run=1'
# 9 of the 18 lookups were answered by the identity filter: the six originals (the ledger had
# none of their keys) and the three unrelated messages; every resend reached the ledger,
# BBB0000012 too, although its original's key was still waiting for the writer's batch
check 'identity filter: 0 keys read in [0-9]+ ms'

# Second milter: its ledger (Redis) does not answer. Every message is accepted
# and each fail-open is logged and counted; its identity filter is not used
# (its change stream cannot be read), which is one filter error, logged once.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start_milter failopen -o ledger.backend=redis -o "ledger.redis.address=127.0.0.1:$port"
rc=0
out=$(RG_SOCKET=$dir/failopen.sock timeout -k 5 60 miltertest -s "$(dirname "$0")/failopen.lua" 2>&1) || rc=$?
stop_milter
log=$(cat "$dir/failopen.stderr")
printf '%s\n%s\n' "$out" "$log"
[ "$rc" = 0 ] || { echo "FAIL: miltertest (fail open) exited $rc" >&2; exit 1; }
grep -q "failopen: all checks passed" <<<"$out"
check 'retryguard/milter\[[0-9]+\]: FO0000001: verdict=accept path=smtp failopen=ledger-error detail='
check 'stopping: counters: messages=3 accepted=3 refused=0 .* failopen_ledger=3 .* lookups_filtered=0 filter_errors=1 '
[ "$(grep -c 'identity filter: change stream failed' <<<"$log")" = 1 ] ||
    { echo "FAIL: the stream failure is not logged exactly once" >&2; exit 1; }

# Third milter, on the first one's ledger, with settings other than the
# shipped ones; each is shown by what the milter does (settings.lua, lock.lua).
start_milter settings -o "ledger.sqlite.path=$dir/ledger.db" -o milter.filter_rescan=0s \
    -o ledger.sqlite.busy_timeout=1m \
    -o milter.reject_code=450 -o milter.reject_xcode=4.7.1 -o 'reinjection.fingerprint.parts=[sender, body]' \
    -o reinjection.fingerprint.body_limit=2KiB -o milter.deadline=3s -o milter.record_queue=1 \
    -o milter.timeout=1s -o log.ident=edge-guard -o errors.bad_input=tempfail
rc=0
out=$(RG_SOCKET=$dir/settings.sock RG_LOG=$dir/settings.log timeout -k 5 60 miltertest -s "$(dirname "$0")/settings.lua" 2>&1) ||
    rc=$?
printf '%s\n' "$out"
[ "$rc" = 0 ] || { cat "$dir/settings.stderr"; echo "FAIL: miltertest (settings) exited $rc" >&2; exit 1; }
grep -q "settings: all checks passed" <<<"$out"
# milter.timeout=1s: a command that stops half-way (its header announces 12
# bytes that never come) has its connection closed after a second (the shipped
# 30 s would outlast this client's 10 s)
idle=$(python3 - "$dir/settings.sock" <<'EOF_PY'
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.settimeout(10)
s.sendall(b"\x00\x00\x00\x0dO")
t = time.monotonic()
try:
    data = s.recv(1)
    print("closed after %.1f s" % (time.monotonic() - t) if data == b"" else "answered")
except socket.timeout:
    print("open after 10 s")
EOF_PY
)
echo "stalled command: connection $idle"
[[ "$idle" =~ ^closed\ after\ [0-3]\. ]] || { echo "FAIL: milter.timeout=1s: stalled connection $idle" >&2; exit 1; }
# Another process holds the ledger's write lock while lock.lua sends mail.
"${run_as[@]}" python3 - "$dir/ledger.db" "$dir/locked" "$dir/release" <<'EOF_PY' &
import os, sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
con.execute("BEGIN IMMEDIATE")
open(sys.argv[2], "w").close()
t = time.monotonic()
while not os.path.exists(sys.argv[3]) and time.monotonic() - t < 60:
    time.sleep(0.05)
con.execute("ROLLBACK")
EOF_PY
holder=$!
for _ in $(seq 100); do [ -e "$dir/locked" ] && break; sleep 0.05; done
[ -e "$dir/locked" ] || { echo "FAIL: the ledger could not be locked" >&2; exit 1; }
rc=0
out=$(RG_SOCKET=$dir/settings.sock timeout -k 5 60 miltertest -s "$(dirname "$0")/lock.lua" 2>&1) || rc=$?
: >"$dir/release"
wait "$holder" || true
stop_milter
log=$(cat "$dir/settings.stderr")
printf '%s\n%s\n' "$out" "$log"
[ "$rc" = 0 ] || { echo "FAIL: miltertest (lock) exited $rc" >&2; exit 1; }
grep -q "lock: all checks passed" <<<"$out"
# milter.reject_code and milter.reject_xcode are the reply to a refused resend,
# found by reinjection.fingerprint.parts=[sender, body] under another subject,
# its body the same up to reinjection.fingerprint.body_limit=2KiB
check 'EEE0000001: verdict=reject path=smtp original=DDD0000001 .*matched=fingerprint .*response="450 4.7.1"'
check 'EEE0000002: verdict=accept '
# log.ident=edge-guard names the milter's lines
check '^edge-guard/milter\[[0-9]+\]: starting: '
# milter.deadline=3s: the resend waited for its original's record and was
# answered by the ledger, not failed open; milter.record_queue=1: with the
# writer waiting for the lock, the records of FFF0000003 and FFF0000004 found
# the queue full and were dropped (counted, logged)
check 'FFF0000002: verdict=accept '
check 'FFF0000003: could not record the message identity: record queue full'
# (each dropped record counted once)
# errors.bad_input=tempfail: the message past the input limits is tempfailed
check 'GGG0000001: verdict=tempfail path=smtp failopen=input-limit detail="more than 1000 headers"'
check 'stopping: counters: messages=8 accepted=6 refused=1 .* recorded=4 failopen_ledger=0 failopen_timeout=0 failopen_internal=0 failopen_input=1 tempfailed=1 record_errors=2 '

# A start that fails after the socket exists (here the ledger cannot be
# opened: read-only, or below a regular file, where its directory cannot be
# created) exits non-zero and leaves no stale socket behind.
: >"$dir/readonly.db"
chmod 0444 "$dir/readonly.db"
: >"$dir/notadir"
for ledger in "$dir/readonly.db" "$dir/notadir/ledger.db"; do
    rc=0
    timeout -k 5 30 "$RETRYGUARD_MILTER" "${milter_conf[@]}" -o "milter.socket=unix:$dir/stale.sock" \
        -o "ledger.sqlite.path=$ledger" 2>"$dir/stale.stderr" || rc=$?
    cat "$dir/stale.stderr"
    [ "$rc" != 0 ] || { echo "FAIL: the milter started with ledger $ledger" >&2; exit 1; }
    grep -q "retryguard/milter.*error" "$dir/stale.stderr" || grep -q "retryguard-milter: " "$dir/stale.stderr" ||
        { echo "FAIL: no error logged for ledger $ledger" >&2; exit 1; }
    [ ! -e "$dir/stale.sock" ] || { echo "FAIL: stale socket left after a failed start ($ledger)" >&2; exit 1; }
done
echo "miltertest: PASS"
