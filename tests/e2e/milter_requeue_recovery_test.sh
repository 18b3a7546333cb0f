#!/usr/bin/env bash
# milter_requeue_recovery_test.sh -- postsuper -r is not a re-injection: the
# requeued message goes through untouched (no milter verdict) and stays the
# pending copy under its new queue id; once the receiver recovers and the
# original is delivered, the same message is accepted again.
. "$(dirname "$0")/milter_lib.sh"
milter_e2e_begin milter-requeue 150

mid="req-$$@client.e2e.test"
e2e_message "$E2E_DIR/orig" "$mid" "$FROM" bob@defer.e2e.test "Invoice 42"
e2e_submit_smtp "$E2E_DIR/orig" "$FROM" bob@defer.e2e.test || e2e_fail "original not accepted"
q1=$(e2e_qid_for_mid sender "$mid")
assert_field "$(verdict_for "$q1")" verdict accept
wait_deferred "$q1" bob@defer.e2e.test

e2e_log "postsuper -r $q1"
off=$(e2e_log_size sender)
postsuper -c "$(e2e_etc sender)" -r "$q1"
# the requeued file waits in maildrop until pickup's next wakeup: wake it now
postkick -c "$(e2e_etc sender)" public pickup W
e2e_wait_log sender "postfix/pickup\[[0-9]+\]: [0-9A-Za-z]+: uid=[0-9]+ from=<$FROM> orig_id=$q1" 20 1 "$off"
q2=$(e2e_log_since sender "$off" | sed -n "s/.*postfix\/pickup\[[0-9]*\]: \([0-9A-Za-z]*\): .*orig_id=$q1.*/\1/p" | tail -1)
e2e_wait_ingested sender "$q2: to=<bob@defer.e2e.test>,.* status=deferred" 30 "$off"
e2e_assert_no_log sender "retryguard/milter\[[0-9]+\]: $q2: verdict=" 0 "the milter saw the requeued message $q2"
e2e_assert_no_log sender "$q2: milter-" 0 "a milter acted on the requeued message $q2"

e2e_log "resend after the requeue: the pending copy is now $q2"
off=$(e2e_log_size sender)
if e2e_submit_smtp "$E2E_DIR/orig" "$FROM" bob@defer.e2e.test; then e2e_fail "resend after requeue accepted"; fi
v=$(last_verdict_since "$off")
assert_field "$v" verdict reject
assert_field "$v" original "$q2"

e2e_log "the receiver recovers; the queued copy is delivered"
e2e_receiver_accept
postqueue -c "$(e2e_etc sender)" -f
e2e_wait_log sender "$q2: to=<bob@defer.e2e.test>,.* status=sent" 30
e2e_wait_ingested sender "$q2: removed" 10

e2e_log "a new send of the same message is accepted and delivered"
off=$(e2e_log_size sender)
e2e_submit_smtp "$E2E_DIR/orig" "$FROM" bob@defer.e2e.test || e2e_fail "send after recovery refused"
v=$(last_verdict_since "$off")
assert_field "$v" verdict accept
q3=$(sed -n 's/.*retryguard\/milter\[[0-9]*\]: \([0-9A-Za-z]*\): verdict=.*/\1/p' <<<"$v")
e2e_wait_log sender "$q3: to=<bob@defer.e2e.test>,.* status=sent" 30
