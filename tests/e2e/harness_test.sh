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

# A daemon that cannot start is reported with its own words, not only as a port
# that did not come up (run in a subshell: e2e_fail exits it).
e2e_start_daemon broken bash -c 'echo "broken: /x/classifier.yaml: cannot read: Permission denied for user nobody (uid 65534)" >&2; exit 1'
out=$( (e2e_wait_port "$(e2e_free_port)" 5 broken) 2>&1) && e2e_fail "waiting for a dead daemon's port succeeded"
grep -q "broken said:" <<<"$out" || e2e_fail "no daemon words in: $out"
grep -q "cannot read: Permission denied for user nobody" <<<"$out" || e2e_fail "the daemon's reason is missing: $out"
grep -q "broken: exited before 127.0.0.1:" <<<"$out" || e2e_fail "the failure does not say the daemon exited: $out"
# the programs under test run from a copy every user can read (e2e_stage_programs)
[ "$(stat -c %a "$E2E_DIR/prog")" = 755 ] || e2e_fail "$E2E_DIR/prog is not world-readable"
