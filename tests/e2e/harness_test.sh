#!/usr/bin/env bash
# harness_test.sh -- the e2e harness itself, without any retryguard program:
# a deferral with the receiver's 451 4.3.5, a delivery through sendmail, and the
# receiver's recovery delivering the deferred message. Other e2e tests rely on it.
. "$(dirname "$0")/lib.sh"
e2e_begin harness 90
e2e_start_receiver
e2e_start_sender ""

e2e_message "$E2E_DIR/m1" "h1-$$@client.e2e.test" alice@ok.e2e.test bob@defer.e2e.test "harness deferred"
e2e_submit_smtp "$E2E_DIR/m1" alice@ok.e2e.test bob@defer.e2e.test || e2e_fail "smtp submission failed"
q1=$(e2e_qid_for_mid sender "h1-$$@client.e2e.test")
e2e_wait_log sender "$q1: to=<bob@defer.e2e.test>,.* status=deferred .*451 4\.3\.5 .*System config error" 30

e2e_message "$E2E_DIR/m2" "h2-$$@client.e2e.test" alice@ok.e2e.test carol@ok.e2e.test "harness sendmail"
e2e_submit_sendmail "$E2E_DIR/m2" alice@ok.e2e.test carol@ok.e2e.test
q2=$(e2e_qid_for_mid sender "h2-$$@client.e2e.test")
e2e_assert_log sender "postfix/pickup\[[0-9]+\]: $q2: uid=0 from=<alice@ok.e2e.test>"
e2e_wait_log sender "$q2: to=<carol@ok.e2e.test>,.* status=sent" 30

e2e_receiver_accept
postqueue -c "$(e2e_etc sender)" -f
e2e_wait_log sender "$q1: to=<bob@defer.e2e.test>,.* status=sent" 30
e2e_wait_log sender "$q1: removed" 10
