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
"$RETRYGUARD_MILTER" "${milter_conf[@]}" -o "milter.socket=unix:$dir/milter.sock" \
    -o "ledger.sqlite.path=$dir/ledger.db" -o milter.filter_rescan=1s \
    -o 'destinations=[{domain: hold.example, reinjection: {action: hold}}, {domain: tag.example, reinjection: {action: tag}},
        {domain: drop.example, reinjection: {action: drop_duplicates}}, {domain: quiet.example, reinjection: {action: log_only}},
        {domain: trial.example, dry_run: true}]' \
    2>"$dir/milter.stderr" &
pid=$!
for _ in $(seq 100); do [ -S "$dir/milter.sock" ] && break; sleep 0.05; done
conf=$dir/retryguard.yaml
# protocol.lua runs: $RG_FEED LEDGER LOG
export RG_SOCKET=$dir/milter.sock RG_LEDGER=ledger.sqlite.path=$dir/ledger.db RG_LOG=$dir/postfix.log \
    RG_FEED="${run_as[*]} $RETRYGUARD_CLI import -q -c $conf -o"
rc=0
out=$(timeout -k 5 60 miltertest -s "$(dirname "$0")/protocol.lua" 2>&1) || rc=$?
kill "$pid"
wait "$pid" || true
pid=
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
"$RETRYGUARD_MILTER" "${milter_conf[@]}" -o "milter.socket=unix:$dir/failopen.sock" \
    -o ledger.backend=redis -o "ledger.redis.address=127.0.0.1:$port" 2>"$dir/failopen.stderr" &
pid=$!
for _ in $(seq 100); do [ -S "$dir/failopen.sock" ] && break; sleep 0.05; done
rc=0
out=$(RG_SOCKET=$dir/failopen.sock timeout -k 5 60 miltertest -s "$(dirname "$0")/failopen.lua" 2>&1) || rc=$?
kill "$pid"
wait "$pid" || true
pid=
log=$(cat "$dir/failopen.stderr")
printf '%s\n%s\n' "$out" "$log"
[ "$rc" = 0 ] || { echo "FAIL: miltertest (fail open) exited $rc" >&2; exit 1; }
grep -q "failopen: all checks passed" <<<"$out"
check 'retryguard/milter\[[0-9]+\]: FO0000001: verdict=accept path=smtp failopen=ledger-error detail='
check 'stopping: counters: messages=3 accepted=3 refused=0 .* failopen_ledger=3 .* lookups_filtered=0 filter_errors=1 '
[ "$(grep -c 'identity filter: change stream failed' <<<"$log")" = 1 ] ||
    { echo "FAIL: the stream failure is not logged exactly once" >&2; exit 1; }

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
