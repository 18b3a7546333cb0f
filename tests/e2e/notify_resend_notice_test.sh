#!/usr/bin/env bash
# notify_resend_notice_test.sh -- the "do not resend" notice with real Postfix:
# a message submitted with the sender instance's sendmail is deferred by the
# receiver (451 4.3.5); retryguard-policyd, following the sender's log with
# notify.enabled, sends the submitter exactly one notice through the sender's
# own sendmail (null envelope sender), which Postfix delivers into the
# submitter's local mailbox. The test reads that mailbox: the reply text, the
# headers, the null sender. Later deferrals of the same message, and a message
# relayed for an unauthenticated SMTP client, produce no notice.
. "$(dirname "$0")/lib.sh"

e2e_begin notify_resend_notice 200
[ -x "${RETRYGUARD_POLICYD:-}" ] || e2e_fail "RETRYGUARD_POLICYD is not set to the built retryguard-policyd"
command -v swaks >/dev/null || e2e_skip "swaks is not installed"
id nobody >/dev/null 2>&1 || e2e_skip "no user nobody"

e2e_start_receiver
e2e_start_sender ""
e2e_local_mailboxes sender alice dave
e2e_start_command_proxy

e2e_start_policyd "notify: {enabled: true}
postfix:
  sendmail_path: $E2E_PROXY_DIR/bin/sendmail
  postqueue_path: $E2E_PROXY_DIR/bin/postqueue
  config_directory: $(e2e_etc sender)" -o log.target=stderr

# 1. A local submission (sendmail) deferred with 451 4.3.5: one notice.
e2e_message "$E2E_DIR/m1.eml" "m1.notify@sender.e2e.test" alice@sender.e2e.test bob@defer.e2e.test "Quarterly report"
e2e_submit_sendmail "$E2E_DIR/m1.eml" alice@sender.e2e.test bob@defer.e2e.test
Q1=$(e2e_qid_for_mid sender m1.notify@sender.e2e.test)
e2e_wait_log sender "$Q1: to=<bob@defer.e2e.test>,.* status=deferred .*451 4.3.5 .*System config error" 30
e2e_wait_log sender "retryguard/policyd\[[0-9]+\]: $Q1: verdict=notified sender=alice@sender.e2e.test destination=defer.e2e.test recipients=1 category=receiver-config" 30
e2e_wait_log sender "to=<alice@sender.e2e.test>, relay=virtual,.* status=sent" 30
BOX=$(e2e_mailbox sender alice)
[ -s "$BOX" ] || e2e_fail "no mailbox $BOX"
grep -q '^Return-Path: <>$' "$BOX" || e2e_fail "the notice's envelope sender is not the null sender: $(head -5 "$BOX")"
grep -q '^Auto-Submitted: auto-generated$' "$BOX" || e2e_fail "no Auto-Submitted header"
grep -q '^Precedence: bulk$' "$BOX" || e2e_fail "no Precedence: bulk header"
grep -q '^To: <alice@sender.e2e.test>$' "$BOX" || e2e_fail "notice not addressed to the submitter"
grep -q '^Subject: Delayed, do not resend: your message to defer.e2e.test is queued' "$BOX" || e2e_fail "subject"
# The reply is wrapped in the body: read it with the lines joined.
tr '\n' ' ' <"$BOX" | tr -s ' ' | grep -qF "said: 451 4.3.5 <bob@defer.e2e.test>: Recipient address rejected: System config error" ||
    e2e_fail "the receiving server's reply is not in the notice: $(cat "$BOX")"
grep -q "^    bob@defer.e2e.test$" "$BOX" || e2e_fail "the delayed recipient is not listed"
grep -q "$Q1" "$BOX" || e2e_fail "the queue id is not in the notice"
grep -q "do not send it" "$BOX" || e2e_fail "the notice does not say not to resend"
grep -q "postmaster" "$BOX" || e2e_fail "the notice does not say when it is escalated"
grep -qE "^sendmail -C .*/sender/etc -f '' -t -i $" "$E2E_PROXY_DIR/calls.log" ||
    e2e_fail "sendmail not run as sendmail -C DIR -f '' -t -i: $(cat "$E2E_PROXY_DIR/calls.log")"

# 2. Further deferrals of the same message (retries every few seconds): no second notice.
e2e_wait_log sender "$Q1: to=<bob@defer.e2e.test>,.* status=deferred" 40 3

# 3. A message relayed for an SMTP client without authentication: no notice,
#    although its sender has a local mailbox too.
e2e_message "$E2E_DIR/m2.eml" "m2.notify@sender.e2e.test" dave@sender.e2e.test carol@defer.e2e.test "Relayed"
e2e_submit_smtp "$E2E_DIR/m2.eml" dave@sender.e2e.test carol@defer.e2e.test || e2e_fail "swaks failed"
Q2=$(e2e_qid_for_mid sender m2.notify@sender.e2e.test)
e2e_assert_log sender "$Q2: client=" 0 "the relayed message has no client= line"
e2e_wait_log sender "$Q2: to=<carol@defer.e2e.test>,.* status=deferred" 30 2
# The follower has seen both messages' deferrals well past batch_max_delay.
sleep 2
n=$(grep -c '^Subject: Delayed' "$BOX")
[ "$n" = 1 ] || e2e_fail "expected exactly one notice in $BOX, found $n"
[ ! -s "$(e2e_mailbox sender dave)" ] || e2e_fail "the remote client's sender got a notice"
e2e_assert_no_log sender "$Q2: verdict=notified" 0 "a notice for a message relayed for a remote client"
n=$(e2e_log_since sender | grep -c "verdict=notified" || true)
[ "$n" = 1 ] || e2e_fail "expected one verdict=notified line, found $n"
n=$(grep -c "sendmail" "$E2E_PROXY_DIR/calls.log" || true)
[ "$n" = 1 ] || e2e_fail "sendmail was run $n times"

# 4. explain shows the notice for the message.
out=$("$RETRYGUARD_CLI" explain "$Q1" -c "$E2E_DIR/retryguard.yaml" 2>&1) || true
grep -q "notified $Q1: notice to alice@sender.e2e.test" <<<"$out" || e2e_fail "explain does not show the notice: $out"
exit 0
