#!/usr/bin/env bash
# milter_failopen_test.sh -- with the milter process killed, mail still flows
# over SMTP and through sendmail (milter_default_action = accept, as the
# documented snippet says); a restarted milter takes over again.
. "$(dirname "$0")/milter_lib.sh"
milter_e2e_begin milter-failopen 120

e2e_message "$E2E_DIR/m1" "fo1-$$@client.e2e.test" "$FROM" carol@ok.e2e.test "Before"
e2e_submit_smtp "$E2E_DIR/m1" "$FROM" carol@ok.e2e.test || e2e_fail "refused with the milter up"
q1=$(e2e_qid_for_mid sender "fo1-$$@client.e2e.test")
assert_field "$(verdict_for "$q1")" verdict accept

e2e_log "kill -9 the milter"
e2e_kill_daemon milter
off=$(e2e_log_size sender)
e2e_message "$E2E_DIR/m2" "fo2-$$@client.e2e.test" "$FROM" carol@ok.e2e.test "While down (smtp)"
e2e_submit_smtp "$E2E_DIR/m2" "$FROM" carol@ok.e2e.test || e2e_fail "SMTP mail refused with the milter down"
q2=$(e2e_qid_for_mid sender "fo2-$$@client.e2e.test" "$off")
e2e_wait_log sender "$q2: to=<carol@ok.e2e.test>,.* status=sent" 30
e2e_message "$E2E_DIR/m3" "fo3-$$@client.e2e.test" "$FROM" carol@ok.e2e.test "While down (sendmail)"
e2e_submit_sendmail "$E2E_DIR/m3" "$FROM" carol@ok.e2e.test
q3=$(e2e_qid_for_mid sender "fo3-$$@client.e2e.test" "$off")
e2e_wait_log sender "$q3: to=<carol@ok.e2e.test>,.* status=sent" 30
e2e_assert_log sender "warning: connect to Milter service unix:$MILTER_SOCK: " "$off" \
    "Postfix did not notice the dead milter"
e2e_assert_no_log sender "retryguard/milter\[[0-9]+\]: ($q2|$q3): verdict=" "$off"

e2e_log "restart the milter"
rm -f "$MILTER_SOCK"
off=$(e2e_log_size sender)
milter_start
e2e_message "$E2E_DIR/m4" "fo4-$$@client.e2e.test" "$FROM" carol@ok.e2e.test "After"
e2e_submit_smtp "$E2E_DIR/m4" "$FROM" carol@ok.e2e.test || e2e_fail "refused after restart"
q4=$(e2e_qid_for_mid sender "fo4-$$@client.e2e.test" "$off")
assert_field "$(verdict_for "$q4")" verdict accept
e2e_wait_log sender "$q4: to=<carol@ok.e2e.test>,.* status=sent" 30
