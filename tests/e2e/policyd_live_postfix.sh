#!/usr/bin/env bash
# policyd_live_postfix.sh -- end-to-end with the real state: a private,
# loopback-only sending Postfix (tests/e2e/lib.sh) sends to lib.sh's receiver,
# which answers "451 4.3.5" for one domain. retryguard-policyd follows the
# sender's maillog_file, and the sender's smtpd asks the daemon about every
# recipient. After the repeated deferrals escalate the domain, new mail to it
# gets the configured WARN and Postfix's own log shows it; unrelated mail
# passes; verdicts reach Postfix's log through the postlogd socket; with the
# daemon stopped Postfix applies default_action=DUNNO.
#
#   tests/e2e/policyd_live_postfix.sh /path/to/retryguard-policyd
#
# Needs root, Debian's postfix package and swaks; exit 77 (skipped) without
# them (a failure under CI=true). Everything lives in lib.sh's temporary
# directory and listens on 127.0.0.1.
RETRYGUARD_POLICYD=${1:?usage: $0 /path/to/retryguard-policyd}
export RETRYGUARD_POLICYD
E2E_DEFER_DOMAINS=cfgerr.e2e.test
E2E_OK_DOMAINS=other.test
E2E_DEFER_REPLY="451 4.3.5 Server configuration problem"
. "$(dirname "$0")/lib.sh"
set +e  # every check below is counted, not fatal
command -v swaks >/dev/null || e2e_skip "swaks is not installed"
e2e_begin policyd-live-postfix 170

FAILS=0
ok() { echo "ok   - $*"; }
not_ok() { echo "FAIL - $*"; FAILS=$((FAILS + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else not_ok "$what"; fi; }
LOG=$(e2e_logfile sender)
POLICYD_LOG=$E2E_DIR/log/policyd.stderr
wait_log() {  # wait_log PATTERN [tenths]
    local i
    for i in $(seq "${2:-50}"); do grep -qE "$1" "$LOG" 2>/dev/null && return 0; sleep 0.1; done
    return 1
}

# ----------------------------------------------------- postfix, then daemon
# The verdict log is the sender's postlogd socket: Postfix starts first, and
# its smtpd asks the daemon once the daemon listens.
e2e_start_receiver
e2e_start_sender ""
for _ in $(seq 100); do [ -S "$E2E_DIR/sender/spool/public/postlog" ] && break; sleep 0.1; done
e2e_start_policyd 'categories: {receiver_config: {watch_after_deferrals: 1, escalate_after: 1m}}
actions:
  escalated: "WARN retryguard: {domain} escalated ({category}) since {since}"' -o log.target=stderr
e2e_postconf sender "smtpd_recipient_restrictions = check_policy_service { inet:127.0.0.1:$POLICY_PORT, timeout=10s, default_action=DUNNO }, permit_mynetworks, reject_unauth_destination"

rcpt() {  # rcpt ADDRESS -> swaks's transcript up to RCPT
    swaks --server "127.0.0.1:$E2E_SENDER_PORT" --from sender@e2e.test --to "$1" --helo client.e2e.test \
        --quit-after RCPT --timeout 20 2>&1
}

# ------------------------------------------------------------------- cases
out=$(rcpt first@cfgerr.e2e.test)
check "before any deferral the destination passes without a warning" grep -q "<-  250 2.1.5 Ok" <<<"$out"

swaks --server "127.0.0.1:$E2E_SENDER_PORT" --from sender@e2e.test --to queued@cfgerr.e2e.test \
    --helo client.e2e.test --timeout 20 >"$E2E_DIR/submit.log" 2>&1
check "a message to the deferring domain is queued" grep -q "<-  250 2.0.0 Ok: queued" "$E2E_DIR/submit.log"
check "the receiver defers it with 451 4.3.5" \
    wait_log "to=<queued@cfgerr.e2e.test>.*status=deferred .*451 4.3.5" 100
# More retries (postqueue -f retries deferred mail at once); escalate_after
# (1m, its smallest value) counts from the first deferral.
for _ in 1 2 3; do sleep 1.2; postqueue -c "$(e2e_etc sender)" -f >/dev/null 2>&1; done
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

e2e_stop_daemon policyd
check "SIGTERM: the daemon stopped cleanly" grep -q "stopped$" "$POLICYD_LOG"
check "SIGTERM: the engine state was saved" grep -q "engine state saved" "$POLICYD_LOG"
out=$(rcpt after@cfgerr.e2e.test)
check "daemon stopped: Postfix falls back to default_action=DUNNO" grep -q "<-  250 2.1.5 Ok" <<<"$out"
check "daemon stopped: no warning for the recipient" bash -c "! grep -q 'warn: RCPT.*to=<after@cfgerr.e2e.test>' '$LOG'"

[ "$FAILS" -eq 0 ] && echo "PASS: all checks" || echo "FAILED: $FAILS check(s)"
exit "$FAILS"
