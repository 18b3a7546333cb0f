#!/usr/bin/env bash
# milter_ledger_down_test.sh -- the milter's ledger (Redis here) does not
# answer: by default every message is accepted and the verdict line says
# failopen=ledger-error; with errors.ledger_unavailable: tempfail (reloaded
# with SIGUSR1) an SMTP submission gets 451 4.3.0 and may retry, while the
# sendmail path is still accepted (a tempfail there would make pickup retry
# forever). Every verdict is read from the sending Postfix's log.
. "$(dirname "$0")/milter_lib.sh"
dead_port=$(e2e_free_port)  # nothing listens there
MILTER_REDIS_ADDRESS="127.0.0.1:$dead_port"
MILTER_CONFIG_TEXT=$'errors:\n  ledger_unavailable: accept'
milter_e2e_begin milter-ledger-down 150

e2e_log "ledger down, errors.ledger_unavailable: accept"
e2e_message "$E2E_DIR/m1" "ld1-$$@client.e2e.test" "$FROM" carol@ok.e2e.test "Ledger down (smtp)"
e2e_submit_smtp "$E2E_DIR/m1" "$FROM" carol@ok.e2e.test || e2e_fail "refused while the ledger is down"
q1=$(e2e_qid_for_mid sender "ld1-$$@client.e2e.test")
v=$(verdict_for "$q1")
assert_field "$v" verdict accept
assert_field "$v" failopen ledger-error
e2e_wait_log sender "$q1: to=<carol@ok.e2e.test>,.* status=sent" 30

e2e_log "errors.ledger_unavailable: tempfail, reloaded"
off=$(e2e_log_size sender)
printf 'errors:\n  ledger_unavailable: tempfail\n' >"$MILTER_CONFIG"
kill -USR1 "$(e2e_daemon_pid milter)" || e2e_fail "cannot signal the milter"
e2e_wait_log sender "retryguard/milter\[[0-9]+\]: reloaded " 10 1 "$off"

off=$(e2e_log_size sender)
e2e_message "$E2E_DIR/m2" "ld2-$$@client.e2e.test" "$FROM" carol@ok.e2e.test "Ledger down, tempfail (smtp)"
if e2e_submit_smtp "$E2E_DIR/m2" "$FROM" carol@ok.e2e.test; then e2e_fail "SMTP submission accepted despite tempfail"; fi
grep -q '<\*\* *451 4.3.0 retryguard: cannot check this message now (ledger-error), try again later' \
    <<<"$E2E_LAST_SWAKS" || e2e_fail "the client did not get 451 4.3.0: $E2E_LAST_SWAKS"
v=$(last_verdict_since "$off")
assert_field "$v" verdict tempfail
assert_field "$v" path smtp
assert_field "$v" failopen ledger-error

e2e_log "the sendmail path is never tempfailed"
off=$(e2e_log_size sender)
e2e_message "$E2E_DIR/m3" "ld3-$$@client.e2e.test" "$FROM" carol@ok.e2e.test "Ledger down (sendmail)"
e2e_submit_sendmail "$E2E_DIR/m3" "$FROM" carol@ok.e2e.test
q3=$(e2e_qid_for_mid sender "ld3-$$@client.e2e.test" "$off")
v=$(verdict_for "$q3")
assert_field "$v" verdict accept
assert_field "$v" path sendmail
assert_field "$v" failopen ledger-error
e2e_wait_log sender "$q3: to=<carol@ok.e2e.test>,.* status=sent" 30
