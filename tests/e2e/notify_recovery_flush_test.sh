#!/usr/bin/env bash
# notify_recovery_flush_test.sh -- the recovery fast path with real Postfix:
# the sender retries only every 300 s (minimal_backoff_time, queue_run_delay),
# two messages are deferred by the receiver (451 4.3.5) and the destination
# reaches `watch`; then the receiver recovers and a new message is delivered
# at once. retryguard-policyd, following the sender's log, sees that success
# end the episode and flushes the deferred messages (postqueue -i QUEUE_ID):
# the log shows them delivered within seconds of the first success, not at
# their next retry 300 s later, and one verdict=flushed line with count=2.
. "$(dirname "$0")/lib.sh"

e2e_begin notify_recovery_flush 200
[ -x "${RETRYGUARD_POLICYD:-}" ] || e2e_fail "RETRYGUARD_POLICYD is not set to the built retryguard-policyd"
id nobody >/dev/null 2>&1 || e2e_skip "no user nobody"

e2e_start_receiver
e2e_start_sender ""
# No cached SMTP session: after the receiver recovers, the next delivery meets
# a receiver smtpd with the new (empty) access map.
e2e_postconf sender minimal_backoff_time=300s maximal_backoff_time=600s queue_run_delay=300s \
    smtp_connection_cache_on_demand=no
e2e_start_command_proxy

e2e_start_policyd "categories: {receiver_config: {watch_after_deferrals: 2}}
postfix:
  sendmail_path: $E2E_PROXY_DIR/bin/sendmail
  postqueue_path: $E2E_PROXY_DIR/bin/postqueue
  config_directory: $(e2e_etc sender)" -o log.target=stderr

# Two messages deferred: the destination goes to `watch`.
for i in 1 2; do
    e2e_message "$E2E_DIR/m$i.eml" "m$i.flush@sender.e2e.test" alice@sender.e2e.test "bob$i@defer.e2e.test" "Message $i"
    e2e_submit_sendmail "$E2E_DIR/m$i.eml" alice@sender.e2e.test "bob$i@defer.e2e.test"
done
Q1=$(e2e_qid_for_mid sender m1.flush@sender.e2e.test)
Q2=$(e2e_qid_for_mid sender m2.flush@sender.e2e.test)
e2e_wait_log sender "$Q1: to=<bob1@defer.e2e.test>,.* status=deferred .*451 4.3.5" 30
e2e_wait_log sender "$Q2: to=<bob2@defer.e2e.test>,.* status=deferred .*451 4.3.5" 30
e2e_wait_log sender "retryguard/policyd\[[0-9]+\]: defer.e2e.test: verdict=watch " 20

# The receiver recovers; a new message goes out at once.
e2e_receiver_accept
sleep 1
e2e_message "$E2E_DIR/m3.eml" "m3.flush@sender.e2e.test" alice@sender.e2e.test bob3@defer.e2e.test "Message 3"
e2e_submit_sendmail "$E2E_DIR/m3.eml" alice@sender.e2e.test bob3@defer.e2e.test
Q3=$(e2e_qid_for_mid sender m3.flush@sender.e2e.test)
e2e_wait_log sender "$Q3: to=<bob3@defer.e2e.test>,.* status=sent" 30
e2e_wait_log sender "retryguard/policyd\[[0-9]+\]: defer.e2e.test: verdict=recovered .*previous=watch" 20
e2e_wait_log sender "retryguard/policyd\[[0-9]+\]: defer.e2e.test: verdict=flushed destination=defer.e2e.test type=domain count=2" 30
e2e_wait_log sender "$Q1: to=<bob1@defer.e2e.test>,.* status=sent" 30
e2e_wait_log sender "$Q2: to=<bob2@defer.e2e.test>,.* status=sent" 30

first=$(e2e_log_since sender | grep -E "$Q3: to=<bob3@defer.e2e.test>,.* status=sent" | head -1)
t0=$(e2e_log_epoch "$first")
for q in "$Q1" "$Q2"; do
    line=$(e2e_log_since sender | grep -E "$q: to=<bob[12]@defer.e2e.test>,.* status=sent" | head -1)
    t=$(e2e_log_epoch "$line")
    deferred=$(e2e_log_since sender | grep -E "$q: to=<bob[12]@defer.e2e.test>,.* status=deferred" | tail -1)
    td=$(e2e_log_epoch "$deferred")
    e2e_log "$q: deferred at $td, first success at $t0, delivered at $t"
    [ $((t - t0)) -le 60 ] || e2e_fail "$q delivered $((t - t0)) s after the first success: not flushed"
    # Its next retry would have been 300 s after its deferral.
    [ $((t - td)) -lt 300 ] || e2e_fail "$q waited for its normal retry"
done
grep -qE "^postqueue -c .*/sender/etc -i $Q1 $" "$E2E_PROXY_DIR/calls.log" || e2e_fail "no postqueue -i $Q1: $(cat "$E2E_PROXY_DIR/calls.log")"
grep -qE "^postqueue -c .*/sender/etc -i $Q2 $" "$E2E_PROXY_DIR/calls.log" || e2e_fail "no postqueue -i $Q2"
n=$(grep -c "^postqueue" "$E2E_PROXY_DIR/calls.log" || true)
[ "$n" = 2 ] || e2e_fail "postqueue was run $n times: $(cat "$E2E_PROXY_DIR/calls.log")"
n=$(e2e_log_since sender | grep -c "verdict=flushed" || true)
[ "$n" = 1 ] || e2e_fail "expected one verdict=flushed line, found $n"
exit 0
