#!/usr/bin/env bash
# milter_reload_test.sh -- reloading the milter's configuration with real
# Postfix: started with -c and reinjection.action log_only, a resend of a
# deferred message is accepted and logged; after the file says reject and the
# milter gets SIGUSR1 (the unit's ExecReload), the next resend is refused; a
# broken file on the next reload is refused with its position and the running
# settings stay. Every verdict is read from the sending Postfix's log.
. "$(dirname "$0")/milter_lib.sh"
MILTER_CONFIG_TEXT=$'reinjection:\n  action: log_only'
milter_e2e_begin milter-reload 150
CONF_FILE=$MILTER_CONFIG

mid="reload-$$@client.e2e.test"
e2e_message "$E2E_DIR/orig" "$mid" "$FROM" bob@defer.e2e.test "Invoice"
e2e_submit_smtp "$E2E_DIR/orig" "$FROM" bob@defer.e2e.test || e2e_fail "original not accepted"
q1=$(e2e_qid_for_mid sender "$mid")
wait_deferred "$q1" bob@defer.e2e.test

resend_verdict() {
    local off
    off=$(e2e_log_size sender)
    e2e_submit_smtp "$E2E_DIR/orig" "$FROM" bob@defer.e2e.test || true
    last_verdict_since "$off"
}
reload_milter() {  # PATTERN expected in the log after SIGUSR1
    local off
    off=$(e2e_log_size sender)
    kill -USR1 "$(e2e_daemon_pid milter)" || e2e_fail "cannot signal the milter"
    e2e_wait_log sender "retryguard/milter\[[0-9]+\]: .*$1" 10 1 "$off"
}

e2e_log "log_only from the file: the resend is accepted and logged"
v=$(resend_verdict)
assert_field "$v" verdict log_only
assert_field "$v" original "$q1"

e2e_log "the file now says reject; SIGUSR1"
printf 'reinjection:\n  action: reject\n' >"$CONF_FILE"
reload_milter "reloaded $CONF_FILE: action=reject"
v=$(resend_verdict)
assert_field "$v" verdict reject
assert_field "$v" original "$q1"

e2e_log "a broken file is refused and the running settings stay"
printf 'reinjection:\n  action: [unclosed\n' >"$CONF_FILE"
reload_milter "reload failed, keeping the running settings: .*retryguard.yaml:[0-9]+:[0-9]+: error"
v=$(resend_verdict)
assert_field "$v" verdict reject
kill -0 "$(e2e_daemon_pid milter)" || e2e_fail "the milter stopped"
