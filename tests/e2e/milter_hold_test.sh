#!/usr/bin/env bash
# milter_hold_test.sh -- the hold and tag actions with real Postfix: a resend to
# a destination configured "hold" lands in the hold queue (smfi_quarantine),
# one configured "tag" is delivered with the X-Retryguard-Resend header, through
# sendmail too; Postfix's own log shows the hold.
E2E_DEFER_DOMAINS="hold.e2e.test tag.e2e.test"
. "$(dirname "$0")/milter_lib.sh"
milter_e2e_begin milter-hold 150 \
    -o 'destinations=[{domain: hold.e2e.test, reinjection: {action: hold}}, {domain: tag.e2e.test, reinjection: {action: tag}}]'

for d in hold tag; do
    e2e_message "$E2E_DIR/$d" "$d-$$@client.e2e.test" "$FROM" "bob@$d.e2e.test" "Status $d"
    e2e_submit_smtp "$E2E_DIR/$d" "$FROM" "bob@$d.e2e.test" || e2e_fail "original to $d not accepted"
    q=$(e2e_qid_for_mid sender "$d-$$@client.e2e.test")
    wait_deferred "$q" "bob@$d.e2e.test"
    eval "orig_$d=$q"
done

e2e_log "resend to the hold destination over SMTP"
off=$(e2e_log_size sender)
e2e_submit_smtp "$E2E_DIR/hold" "$FROM" bob@hold.e2e.test || e2e_fail "hold: the submitter was refused"
v=$(last_verdict_since "$off")
assert_field "$v" verdict hold
assert_field "$v" original "$orig_hold"
qh=$(sed -n 's/.*retryguard\/milter\[[0-9]*\]: \([0-9A-Za-z]*\): verdict=.*/\1/p' <<<"$v")
e2e_wait_log sender "postfix/cleanup\[[0-9]+\]: $qh: milter-hold: END-OF-MESSAGE from .*milter triggers HOLD action" 10 1 "$off"
postqueue -c "$(e2e_etc sender)" -j | grep -F "\"queue_id\": \"$qh\"" | grep -qF '"queue_name": "hold"' ||
    e2e_fail "$qh is not in the hold queue"

e2e_log "resend to the tag destination through sendmail"
off=$(e2e_log_size sender)
e2e_submit_sendmail "$E2E_DIR/tag" "$FROM" bob@tag.e2e.test
v=$(last_verdict_since "$off")
assert_field "$v" verdict tag
assert_field "$v" path sendmail
assert_field "$v" original "$orig_tag"
qt=$(sed -n 's/.*retryguard\/milter\[[0-9]*\]: \([0-9A-Za-z]*\): verdict=.*/\1/p' <<<"$v")
e2e_wait_log sender "$qt: to=<bob@tag.e2e.test>,.* status=deferred" 30 1 "$off"
postcat -c "$(e2e_etc sender)" -hq "$qt" | grep -qF "X-Retryguard-Resend: bob@tag.e2e.test queued as $orig_tag" ||
    e2e_fail "$qt carries no X-Retryguard-Resend header"
