#!/usr/bin/env bash
# milter_resend_test.sh -- a message deferred with 451 4.3.5 is not accepted
# again: not over SMTP, not through sendmail, not as the same content under a
# new Message-ID; a resend with an extra recipient reaches only that recipient;
# unrelated mail flows. Every verdict is read from the sending Postfix's log.
. "$(dirname "$0")/milter_lib.sh"
milter_e2e_begin milter-resend 150

mid="orig-$$@client.e2e.test"
e2e_message "$E2E_DIR/orig" "$mid" "$FROM" bob@defer.e2e.test "Quarterly report"
e2e_submit_smtp "$E2E_DIR/orig" "$FROM" bob@defer.e2e.test || e2e_fail "original not accepted"
q1=$(e2e_qid_for_mid sender "$mid")
v=$(verdict_for "$q1")
assert_field "$v" verdict accept
assert_field "$v" path smtp
wait_deferred "$q1" bob@defer.e2e.test

e2e_log "resend with the same Message-ID over SMTP"
off=$(e2e_log_size sender)
if e2e_submit_smtp "$E2E_DIR/orig" "$FROM" bob@defer.e2e.test; then e2e_fail "SMTP resend was accepted"; fi
grep -q "<\*\* *550 5.7.1 Not accepted again: a copy for <bob@defer.e2e.test> is already queued as $q1" \
    <<<"$E2E_LAST_SWAKS" || e2e_fail "the submitter did not see the explanation: $E2E_LAST_SWAKS"
v=$(last_verdict_since "$off")
assert_field "$v" verdict reject
assert_field "$v" path smtp
assert_field "$v" original "$q1"
assert_field "$v" matched message-id
assert_field "$v" destination defer.e2e.test
case $v in *' reply="451 4.3.5 <bob@defer.e2e.test>: Recipient address rejected: System config error" '*) ;;
    *) e2e_fail "no literal remote reply in: $v" ;; esac
e2e_assert_log sender "postfix/cleanup\[[0-9]+\]: [0-9A-Za-z]+: milter-reject: END-OF-MESSAGE from .*5\.7\.1 Not accepted again" "$off"

e2e_log "resend with the same Message-ID through sendmail"
off=$(e2e_log_size sender)
e2e_submit_sendmail "$E2E_DIR/orig" "$FROM" bob@defer.e2e.test
v=$(last_verdict_since "$off")
assert_field "$v" verdict reject
assert_field "$v" path sendmail
assert_field "$v" original "$q1"
assert_field "$v" response '"550 5.7.1"'
# cleanup bounces the refused submission to its sender with the explanation;
# a tempfail would have left it in maildrop for pickup to retry forever
e2e_wait_log sender "postfix/cleanup\[[0-9]+\]: [0-9A-Za-z]+: milter-reject: END-OF-MESSAGE from localhost\[127.0.0.1\]: 5\.7\.1 Not accepted again" 10 1 "$off"
e2e_wait_log sender "postfix/bounce\[[0-9]+\]: [0-9A-Za-z]+: sender non-delivery notification" 20 1 "$off"
[ -z "$(ls -A "$E2E_DIR/sender/spool/maildrop")" ] || e2e_fail "the refused submission stayed in maildrop"

e2e_log "same content, new Message-ID and Date (a client's resend)"
sleep 1
e2e_message "$E2E_DIR/again" "again-$$@client.e2e.test" "$FROM" bob@defer.e2e.test "Quarterly report"
off=$(e2e_log_size sender)
if e2e_submit_smtp "$E2E_DIR/again" "$FROM" bob@defer.e2e.test; then e2e_fail "content resend was accepted"; fi
v=$(last_verdict_since "$off")
assert_field "$v" verdict reject
assert_field "$v" matched fingerprint
assert_field "$v" original "$q1"

e2e_log "resend with one extra recipient"
off=$(e2e_log_size sender)
e2e_submit_smtp "$E2E_DIR/orig" "$FROM" bob@defer.e2e.test carol@ok.e2e.test || e2e_fail "extra-recipient resend refused"
v=$(last_verdict_since "$off")
assert_field "$v" verdict drop_duplicates
assert_field "$v" duplicates bob@defer.e2e.test
assert_field "$v" new carol@ok.e2e.test
q3=$(sed -n 's/.*retryguard\/milter\[[0-9]*\]: \([0-9A-Za-z]*\): verdict=.*/\1/p' <<<"$v")
e2e_wait_log sender "$q3: to=<carol@ok.e2e.test>,.* status=sent" 30
e2e_wait_log sender "$q3: removed" 10
e2e_assert_no_log sender "$q3: to=<bob@defer.e2e.test>" 0 "the duplicate recipient was not dropped from $q3"

e2e_log "unrelated mail flows, also to the deferring destination"
off=$(e2e_log_size sender)
e2e_message "$E2E_DIR/other" "other-$$@client.e2e.test" "$FROM" dave@ok.e2e.test "Lunch" "Lunch at noon?"
e2e_submit_smtp "$E2E_DIR/other" "$FROM" dave@ok.e2e.test || e2e_fail "unrelated mail refused"
q4=$(e2e_qid_for_mid sender "other-$$@client.e2e.test" "$off")
assert_field "$(verdict_for "$q4")" verdict accept
e2e_wait_log sender "$q4: to=<dave@ok.e2e.test>,.* status=sent" 30
e2e_message "$E2E_DIR/other2" "other2-$$@client.e2e.test" "$FROM" bob@defer.e2e.test "Another topic" "Something else."
e2e_submit_sendmail "$E2E_DIR/other2" "$FROM" bob@defer.e2e.test
q5=$(e2e_qid_for_mid sender "other2-$$@client.e2e.test" "$off")
v=$(verdict_for "$q5")
assert_field "$v" verdict accept
assert_field "$v" path sendmail
e2e_wait_log sender "$q5: to=<bob@defer.e2e.test>,.* status=deferred" 30
