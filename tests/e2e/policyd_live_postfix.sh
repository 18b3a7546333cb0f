#!/usr/bin/env bash
# policyd_live_postfix.sh -- end-to-end with the real state: a private,
# loopback-only Postfix instance sends to a receiver (a second smtpd of the same
# instance, on its own port) that answers "451 4.3.5" for one domain. The
# sender logs to a maillog_file that retryguard-policyd follows (-c config),
# and its smtpd asks the daemon about every recipient. After the repeated
# deferrals escalate the domain, new mail to it gets the configured WARN and
# Postfix's own log shows it; unrelated mail passes; verdicts reach Postfix's
# log through the postlogd socket; with the daemon stopped Postfix applies
# default_action=DUNNO.
#
#   tests/e2e/policyd_live_postfix.sh /path/to/retryguard-policyd
#
# Needs root, Debian's postfix package and swaks; exit 77 (skipped) without
# them. Everything lives in a temporary directory and listens on 127.0.0.1.
set -uo pipefail
POLICYD=${1:?usage: $0 /path/to/retryguard-policyd}
PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (Postfix's master runs as root)"
command -v postfix >/dev/null || skip "postfix is not installed"
command -v swaks >/dev/null || skip "swaks is not installed"
getent passwd postfix >/dev/null || skip "no postfix user"

ROOT=$(mktemp -d /var/tmp/rg-policyd-live-e2e.XXXXXX)
chmod 0755 "$ROOT"
ETC=$ROOT/etc LOG=$ROOT/postfix.log
mkdir -p "$ETC" "$ROOT/spool" "$ROOT/data" "$ROOT/state"
chown postfix: "$ROOT/data"
# Started as root, the daemon drops to policy.user (nobody; group postdrop for
# the postlog socket): its ledger and ready file live in a directory of its own.
chown nobody:postdrop "$ROOT/state"
FAILS=0
DPID=""

cleanup() {
    postfix -c "$ETC" stop >/dev/null 2>&1
    local i pid
    pid=$(head -1 "$ROOT/spool/pid/master.pid" 2>/dev/null | tr -d ' ')
    for i in $(seq 50); do [ -n "$pid" ] && [ -d "/proc/$pid" ] || break; sleep 0.1; done
    [ -n "$pid" ] && [ -d "/proc/$pid" ] && postfix -c "$ETC" abort >/dev/null 2>&1
    [ -n "$DPID" ] && kill -TERM "$DPID" 2>/dev/null
    if [ "$FAILS" -ne 0 ]; then
        echo "---- postfix log"; cat "$LOG" 2>/dev/null
        echo "---- policyd log"; cat "$ROOT/policyd.log" 2>/dev/null
    fi
    rm -rf "$ROOT"
}
trap cleanup EXIT

port_in_use() { ss -Htan "( sport = :$1 )" 2>/dev/null | grep -q .; }
free_port() {
    local p
    for p in $(shuf -i 30000-39999 -n 200); do port_in_use "$p" || { echo "$p"; return 0; }; done
    return 1
}
ok() { echo "ok   - $*"; }
not_ok() { echo "FAIL - $*"; FAILS=$((FAILS + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else not_ok "$what"; fi; }
wait_log() {  # wait_log PATTERN [tenths]
    local i
    for i in $(seq "${2:-50}"); do grep -qE "$1" "$LOG" 2>/dev/null && return 0; sleep 0.1; done
    return 1
}

SMTPD_PORT=$(free_port) || skip "no free port"
RECV_PORT=$(free_port) || skip "no free port"
[ "$SMTPD_PORT" != "$RECV_PORT" ] || skip "no two free ports"
touch "$LOG"
chmod 0644 "$LOG"

# ------------------------------------------------------------------ daemon
cat > "$ROOT/retryguard.yaml" <<EOF
policy: {user: nobody, group: postdrop}
ledger: {backend: sqlite, sqlite: {path: $ROOT/state/ledger.db}}
sources:
  - {type: file, path: $LOG, start: beginning}
ingest: {batch_max_delay: 50ms}
categories: {receiver_config: {watch_after_deferrals: 1, escalate_after: 1m}}
actions:
  escalated: "WARN retryguard: {domain} escalated ({category}) since {since}"
metrics: {enabled: false}
log: {verdicts: "postlog:$ROOT/spool/public/postlog"}
EOF
start_policyd() {
    rm -f "$ROOT/state/ready"
    "$POLICYD" --foreground -c "$ROOT/retryguard.yaml" -l "tcp:127.0.0.1:${POLICY_PORT:-0}" \
        --ready-file "$ROOT/state/ready" >> "$ROOT/policyd.log" 2>&1 &
    DPID=$!
    local i
    for i in $(seq 100); do [ -s "$ROOT/state/ready" ] && break; sleep 0.1; done
    [ -s "$ROOT/state/ready" ] || { FAILS=1; echo "policyd did not start"; exit 1; }
    grep -q "^policy tcp:127.0.0.1:$POLICY_PORT\$" "$ROOT/state/ready" || { FAILS=1; echo "policyd port?"; exit 1; }
}
# The verdict log is Postfix's postlogd socket: Postfix starts first.
POLICY_PORT=$(free_port) || skip "no free port"

# ----------------------------------------------------------------- postfix
echo "cfgerr.e2e.test 451 4.3.5 Server configuration problem" > "$ETC/receiver_access"
printf 'cfgerr.e2e.test smtp:[127.0.0.1]:%s\nother.test discard:e2e\n' "$RECV_PORT" > "$ETC/transport"
cat > "$ETC/main.cf" <<EOF
compatibility_level = 3.6
queue_directory = $ROOT/spool
data_directory = $ROOT/data
mail_owner = postfix
setgid_group = postdrop
maillog_file = $LOG
maillog_file_prefixes = /var
myhostname = sender.e2e.test
mydomain = e2e.test
mydestination =
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
smtp_dns_support_level = disabled
alias_maps =
alias_database =
biff = no
mynetworks = 127.0.0.0/8
relay_domains = cfgerr.e2e.test other.test
transport_maps = texthash:$ETC/transport
minimal_backoff_time = 1s
maximal_backoff_time = 2s
queue_run_delay = 1s
smtpd_recipient_restrictions =
    check_policy_service { inet:127.0.0.1:$POLICY_PORT, timeout=10s, default_action=DUNNO },
    permit_mynetworks, reject_unauth_destination
EOF
cat > "$ETC/master.cf" <<EOF
127.0.0.1:$SMTPD_PORT inet n - n - - smtpd
127.0.0.1:$RECV_PORT inet n - n - - smtpd
  -o myhostname=receiver.e2e.test
  -o smtpd_recipient_restrictions=check_recipient_access,texthash:$ETC/receiver_access,permit_mynetworks
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
smtp      unix  -       -       n       -       -       smtp
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
EOF
postfix -c "$ETC" check >"$ROOT/check.log" 2>&1 || { cat "$ROOT/check.log"; FAILS=1; exit 1; }
postfix -c "$ETC" start >"$ROOT/start.log" 2>&1 || { cat "$ROOT/start.log"; FAILS=1; exit 1; }
for i in $(seq 100); do port_in_use "$SMTPD_PORT" && port_in_use "$RECV_PORT" && break; sleep 0.1; done
for i in $(seq 100); do [ -S "$ROOT/spool/public/postlog" ] && break; sleep 0.1; done
start_policyd

rcpt() {  # rcpt ADDRESS -> swaks's transcript up to RCPT
    swaks --server "127.0.0.1:$SMTPD_PORT" --from sender@e2e.test --to "$1" --helo client.e2e.test \
        --quit-after RCPT --timeout 20 2>&1
}

# ------------------------------------------------------------------- cases
out=$(rcpt first@cfgerr.e2e.test)
check "before any deferral the destination passes without a warning" grep -q "<-  250 2.1.5 Ok" <<<"$out"

swaks --server "127.0.0.1:$SMTPD_PORT" --from sender@e2e.test --to queued@cfgerr.e2e.test \
    --helo client.e2e.test --timeout 20 >"$ROOT/submit.log" 2>&1
check "a message to the deferring domain is queued" grep -q "<-  250 2.0.0 Ok: queued" "$ROOT/submit.log"
check "the receiver defers it with 451 4.3.5" \
    wait_log "to=<queued@cfgerr.e2e.test>.*status=deferred .*451 4.3.5" 100
# More retries (minimal_backoff_time 1s); escalate_after (1m, its smallest
# value) counts from the first deferral.
for i in 1 2 3; do sleep 1.2; postqueue -c "$ETC" -f >/dev/null 2>&1; done
n=$(grep -c "to=<queued@cfgerr.e2e.test>.*status=deferred" "$LOG")
check "several deferrals logged ($n)" test "$n" -ge 2

escalated=0
for i in $(seq 60); do
    out=$(rcpt "new$i@cfgerr.e2e.test")
    if wait_log "NOQUEUE: warn: RCPT from .*: retryguard: cfgerr.e2e.test escalated \\(receiver-config\\) since .*to=<new$i@cfgerr.e2e.test>" 10; then
        escalated=1; break
    fi
    sleep 0.5
done
check "escalated destination: Postfix's log shows the configured WARN" test "$escalated" = 1
check "escalated destination: WARN still accepts the recipient" grep -q "<-  250 2.1.5 Ok" <<<"$out"
check "retryguard's escalation verdict reached Postfix's log through postlogd" \
    wait_log "retryguard/policyd.*verdict=escalate"

out=$(rcpt user@other.test)
check "unrelated destination passes" grep -q "<-  250 2.1.5 Ok" <<<"$out"
check "unrelated destination: no warning" bash -c "! grep -q 'warn: RCPT.*to=<user@other.test>' '$LOG'"

kill -TERM "$DPID"
for i in $(seq 100); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
wait "$DPID" 2>/dev/null
check "SIGTERM: the daemon exited 0" test $? -eq 0
DPID=""
check "SIGTERM: the engine state was saved" grep -q "engine state saved" "$ROOT/policyd.log"
out=$(rcpt after@cfgerr.e2e.test)
check "daemon stopped: Postfix falls back to default_action=DUNNO" grep -q "<-  250 2.1.5 Ok" <<<"$out"
check "daemon stopped: no warning for the recipient" bash -c "! grep -q 'warn: RCPT.*to=<after@cfgerr.e2e.test>' '$LOG'"

[ "$FAILS" -eq 0 ] && echo "PASS: all checks" || echo "FAILED: $FAILS check(s)"
exit "$FAILS"
