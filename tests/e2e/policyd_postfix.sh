#!/usr/bin/env bash
# policyd_postfix.sh -- end-to-end: a private, loopback-only sending Postfix
# (tests/e2e/lib.sh) whose smtpd asks retryguard-policyd
# (check_policy_service inet:127.0.0.1:PORT) about every recipient. Checks that
# a flagged destination gets its configured action and that Postfix's own log
# shows it, that unrelated mail passes, that a SIGHUP-reloaded table applies,
# and that with the daemon stopped Postfix applies default_action=DUNNO.
#
#   tests/e2e/policyd_postfix.sh /path/to/retryguard-policyd
#
# Needs root, Debian's postfix package and swaks; exit 77 (skipped) without
# them (a failure under CI=true). Everything lives in lib.sh's temporary
# directory and listens on 127.0.0.1 only; the system instance is never used.
RETRYGUARD_POLICYD=${1:?usage: $0 /path/to/retryguard-policyd}
export RETRYGUARD_POLICYD
# The test's destinations route to lib.sh's receiver (the mail stops at RCPT).
E2E_OK_DOMAINS="flagged.test warned.test other.test"
. "$(dirname "$0")/lib.sh"
set +e  # every check below is counted, not fatal
command -v swaks >/dev/null || e2e_skip "swaks is not installed"
e2e_begin policyd-postfix 110

FAILS=0
ok() { echo "ok   - $*"; }
not_ok() { echo "FAIL - $*"; FAILS=$((FAILS + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else not_ok "$what"; fi; }
LOG=$(e2e_logfile sender)
# wait_log PATTERN: Postfix logs through postlogd, a moment after the reply.
wait_log() {
    local i
    for i in $(seq 50); do grep -qE "$1" "$LOG" 2>/dev/null && return 0; sleep 0.1; done
    return 1
}

# ------------------------------------------------------------------ daemon
# Started as root, the daemon drops to policy.user (nobody): its ready file
# lives in a directory of its own. Its pid file is lib.sh's, so the harness
# stops it on every way out; `wait` gives its exit code.
mkdir -p "$E2E_DIR/state"
chown nobody "$E2E_DIR/state"
cat >"$E2E_DIR/flagged" <<'EOF'
flagged.test  REJECT 5.7.1 destination flagged by retryguard
warned.test   WARN retryguard: destination flagged
EOF
POLICYD_LOG=$E2E_DIR/log/policyd.stderr
"$RETRYGUARD_POLICYD" --foreground -c /dev/null -o "policy.socket=inet:0@127.0.0.1" \
    -o policy.user=nobody -o policy.group=nogroup -o metrics.enabled=false -o log.target=stderr \
    --flagged "$E2E_DIR/flagged" --ready-file "$E2E_DIR/state/ready" >>"$POLICYD_LOG" 2>&1 &
DPID=$!
echo "$DPID" >"$E2E_DIR/run/policyd.pid"
E2E_DAEMONS+=("$E2E_DIR/run/policyd.pid")
for _ in $(seq 100); do [ -s "$E2E_DIR/state/ready" ] && break; sleep 0.1; done
[ -s "$E2E_DIR/state/ready" ] || e2e_daemon_failed policyd "did not start"
POLICY_PORT=$(sed -n 's/^policy tcp:127.0.0.1://p' "$E2E_DIR/state/ready")

# ----------------------------------------------------------------- postfix
E2E_SENDER_MAIN_CF="smtpd_recipient_restrictions =
    check_policy_service { inet:127.0.0.1:$POLICY_PORT, timeout=10s, default_action=DUNNO },
    permit_mynetworks, reject_unauth_destination"
e2e_start_receiver
e2e_start_sender ""

send() {  # send RCPT -> prints swaks's transcript
    swaks --server "127.0.0.1:$E2E_SENDER_PORT" --from sender@e2e.test --to "$1" --helo client.e2e.test \
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
echo "other.test DEFER_IF_PERMIT 4.7.1 destination is deferring, try later" >>"$E2E_DIR/flagged"
kill -HUP "$DPID"
for _ in $(seq 50); do grep -q "reload done" "$POLICYD_LOG" && break; sleep 0.1; done
out=$(send user@other.test)
check "after SIGHUP the new table applies through Postfix" \
    grep -q "<\*\* 450 4.7.1 <user@other.test>: Recipient address rejected: destination is deferring" <<<"$out"

check "retryguard-policyd logged its verdicts" grep -q "NOQUEUE: verdict=policy_reject action=\"REJECT 5.7.1 destination flagged by retryguard\" recipient=user@flagged.test destination=flagged.test" "$POLICYD_LOG"

# Daemon stopped: Postfix applies default_action=DUNNO.
kill -TERM "$DPID"
for _ in $(seq 50); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
wait "$DPID" 2>/dev/null
check "SIGTERM: the daemon exited 0" test $? -eq 0
rm -f "$E2E_DIR/run/policyd.pid"
out=$(send user@flagged.test)
check "daemon stopped: Postfix falls back to default_action=DUNNO" grep -q "<-  250 2.1.5 Ok" <<<"$out"
check "daemon stopped: Postfix logs the policy service problem" \
    wait_log "warning: connect to 127.0.0.1:$POLICY_PORT: Connection refused|problem talking to server 127.0.0.1:$POLICY_PORT"

[ "$FAILS" -eq 0 ] && echo "PASS: all checks" || echo "FAILED: $FAILS check(s)"
exit "$FAILS"
