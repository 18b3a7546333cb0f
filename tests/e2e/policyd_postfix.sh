#!/usr/bin/env bash
# policyd_postfix.sh -- end-to-end: a private, loopback-only Postfix instance
# whose smtpd asks retryguard-policyd (check_policy_service inet:127.0.0.1:PORT)
# about every recipient. Checks that a flagged destination gets its configured
# action and that Postfix's own log shows it, that unrelated mail passes, that
# a SIGHUP-reloaded table applies, and that with the daemon stopped Postfix
# applies default_action=DUNNO.
#
#   tests/e2e/policyd_postfix.sh /path/to/retryguard-policyd
#
# Needs root, Debian's postfix package and swaks. Exit 77 (skipped) when they
# are missing. Everything lives in its own temporary directory and listens on
# 127.0.0.1 only; the system Postfix instance is never used or touched.
set -uo pipefail
POLICYD=${1:?usage: $0 /path/to/retryguard-policyd}
PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (Postfix's master runs as root)"
command -v postfix >/dev/null || skip "postfix is not installed"
command -v swaks >/dev/null || skip "swaks is not installed"
getent passwd postfix >/dev/null || skip "no postfix user"

ROOT=$(mktemp -d /var/tmp/rg-policyd-e2e.XXXXXX)
chmod 0755 "$ROOT"
ETC=$ROOT/etc LOG=$ROOT/postfix.log
mkdir -p "$ETC" "$ROOT/spool" "$ROOT/data" "$ROOT/state"
chown postfix: "$ROOT/data"
# Started as root, the daemon drops to policy.user (nobody): its ready file
# lives in a directory of its own.
chown nobody "$ROOT/state"
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
# wait_log PATTERN: Postfix logs through postlogd, a moment after the reply.
wait_log() {
    local i
    for i in $(seq 50); do grep -qE "$1" "$LOG" 2>/dev/null && return 0; sleep 0.1; done
    return 1
}

SMTPD_PORT=$(free_port) || skip "no free port"

# ------------------------------------------------------------------ daemon
cat > "$ROOT/flagged" <<'EOF'
flagged.test  REJECT 5.7.1 destination flagged by retryguard
warned.test   WARN retryguard: destination flagged
EOF
start_policyd() {
    rm -f "$ROOT/state/ready"
    "$POLICYD" --foreground -c /dev/null -o "policy.socket=inet:${POLICY_PORT:-0}@127.0.0.1" \
        -o policy.user=nobody -o policy.group=nogroup -o metrics.enabled=false -o log.target=stderr --flagged "$ROOT/flagged" \
        --ready-file "$ROOT/state/ready" >> "$ROOT/policyd.log" 2>&1 &
    DPID=$!
    local i
    for i in $(seq 100); do [ -s "$ROOT/state/ready" ] && break; sleep 0.1; done
    [ -s "$ROOT/state/ready" ] || { FAILS=1; echo "policyd did not start"; exit 1; }
    POLICY_PORT=$(sed -n 's/^policy tcp:127.0.0.1://p' "$ROOT/state/ready")
}
start_policyd

# ----------------------------------------------------------------- postfix
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
relay_domains = flagged.test warned.test other.test
# accepted mail goes nowhere: this test is about the RCPT stage
default_transport = discard:e2e
relay_transport = discard:e2e
smtpd_recipient_restrictions =
    check_policy_service { inet:127.0.0.1:$POLICY_PORT, timeout=10s, default_action=DUNNO },
    permit_mynetworks, reject_unauth_destination
EOF
cat > "$ETC/master.cf" <<EOF
127.0.0.1:$SMTPD_PORT inet n - n - - smtpd
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
for i in $(seq 100); do port_in_use "$SMTPD_PORT" && break; sleep 0.1; done

send() {  # send RCPT -> prints swaks's transcript
    swaks --server "127.0.0.1:$SMTPD_PORT" --from sender@e2e.test --to "$1" --helo client.e2e.test \
        --quit-after RCPT --timeout 20 2>&1
}

# ------------------------------------------------------------------- cases
out=$(send user@flagged.test)
check "flagged destination: smtpd answers the configured REJECT" \
    grep -q "<\*\* 554 5.7.1 <user@flagged.test>: Recipient address rejected: destination flagged by retryguard" <<<"$out"
check "flagged destination: Postfix's log shows the reject" \
    wait_log "NOQUEUE: reject: RCPT from .*554 5.7.1 <user@flagged.test>: Recipient address rejected: destination flagged by retryguard"

out=$(send user@warned.test)
check "WARN destination: recipient accepted" grep -q "<-  250 2.1.5 Ok" <<<"$out"
check "WARN destination: the verdict lands in Postfix's log" \
    wait_log "NOQUEUE: warn: RCPT from .*: retryguard: destination flagged; from=<sender@e2e.test> to=<user@warned.test>"

out=$(send user@other.test)
check "unrelated destination passes" grep -q "<-  250 2.1.5 Ok" <<<"$out"

# SIGHUP: other.test becomes flagged; smtpd keeps its policy connection.
echo "other.test DEFER_IF_PERMIT 4.7.1 destination is deferring, try later" >> "$ROOT/flagged"
kill -HUP "$DPID"
for i in $(seq 50); do grep -q "reload done" "$ROOT/policyd.log" && break; sleep 0.1; done
out=$(send user@other.test)
check "after SIGHUP the new table applies through Postfix" \
    grep -q "<\*\* 450 4.7.1 <user@other.test>: Recipient address rejected: destination is deferring" <<<"$out"

check "retryguard-policyd logged its verdicts" grep -q "NOQUEUE: verdict=policy_reject action=\"REJECT 5.7.1 destination flagged by retryguard\" recipient=user@flagged.test destination=flagged.test" "$ROOT/policyd.log"

# Daemon stopped: Postfix applies default_action=DUNNO.
kill -TERM "$DPID"
for i in $(seq 50); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
wait "$DPID" 2>/dev/null
check "SIGTERM: the daemon exited 0" test $? -eq 0
DPID=""
out=$(send user@flagged.test)
check "daemon stopped: Postfix falls back to default_action=DUNNO" grep -q "<-  250 2.1.5 Ok" <<<"$out"
check "daemon stopped: Postfix logs the policy service problem" \
    wait_log "warning: connect to 127.0.0.1:$POLICY_PORT: Connection refused|problem talking to server 127.0.0.1:$POLICY_PORT"

[ "$FAILS" -eq 0 ] && echo "PASS: all checks" || echo "FAILED: $FAILS check(s)"
exit "$FAILS"
