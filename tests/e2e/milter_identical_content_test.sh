#!/usr/bin/env bash
# milter_identical_content_test.sh -- identical content is ordinary traffic
# (docs/milter.md, "Identical content"): a second identical alert
# (Auto-Submitted) and a newsletter issue (List-Id) are delivered even while an
# identical copy is still being retried; identical content after the original
# was delivered is a new message; identical content to another recipient is a
# new message for that recipient; the same alert under the SAME Message-ID is
# still a resend, and a person's identical resend under a new Message-ID is
# refused. Every verdict is read from the sending Postfix's log.
. "$(dirname "$0")/milter_lib.sh"
milter_e2e_begin milter-identical 180

# message FILE MESSAGE-ID FROM TO SUBJECT BODY [EXTRA-HEADER...]
message() {
    local f=$1 mid=$2 from=$3 to=$4 subject=$5 body=$6 h
    shift 6
    {
        printf 'From: <%s>\r\nTo: <%s>\r\nSubject: %s\r\nDate: %s\r\nMessage-ID: <%s>\r\n' \
            "$from" "$to" "$subject" "$(date -R)" "$mid"
        for h in "$@"; do printf '%s\r\n' "$h"; done
        printf 'MIME-Version: 1.0\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n%s\r\n' "$body"
    } >"$f"
}
MON=monitor@ok.e2e.test
ALERT_BODY="CRITICAL: disk /var is 97% full on db1"

e2e_log "an alert (Auto-Submitted) to a deferring destination"
message "$E2E_DIR/alert1" "alert-1-$$@monitor.e2e.test" "$MON" bob@defer.e2e.test "[ALERT] db1 disk" \
    "$ALERT_BODY" "Auto-Submitted: auto-generated"
e2e_submit_sendmail "$E2E_DIR/alert1" "$MON" bob@defer.e2e.test
qa=$(e2e_qid_for_mid sender "alert-1-$$@monitor.e2e.test")
assert_field "$(verdict_for "$qa")" verdict accept
wait_deferred "$qa" bob@defer.e2e.test

e2e_log "the same alert again, new Message-ID, while the first is retrying: a new message"
off=$(e2e_log_size sender)
message "$E2E_DIR/alert2" "alert-2-$$@monitor.e2e.test" "$MON" bob@defer.e2e.test "[ALERT] db1 disk" \
    "$ALERT_BODY" "Auto-Submitted: auto-generated"
e2e_submit_sendmail "$E2E_DIR/alert2" "$MON" bob@defer.e2e.test
qa2=$(e2e_qid_for_mid sender "alert-2-$$@monitor.e2e.test" "$off")
v=$(verdict_for "$qa2")
assert_field "$v" verdict accept
e2e_wait_log sender "$qa2: to=<bob@defer.e2e.test>,.* status=deferred" 30

e2e_log "the first alert under its own Message-ID again: a resend"
off=$(e2e_log_size sender)
if e2e_submit_smtp "$E2E_DIR/alert1" "$MON" bob@defer.e2e.test; then e2e_fail "same-Message-ID alert was accepted"; fi
v=$(last_verdict_since "$off")
assert_field "$v" verdict reject
assert_field "$v" matched message-id
assert_field "$v" original "$qa"

e2e_log "a person's mail with the alert's content, new Message-ID: identical content, a resend"
off=$(e2e_log_size sender)
message "$E2E_DIR/person1" "person-1-$$@client.e2e.test" "$FROM" carol@defer.e2e.test "Minutes" "The minutes of Monday."
e2e_submit_smtp "$E2E_DIR/person1" "$FROM" carol@defer.e2e.test || e2e_fail "person's first message refused"
qp=$(e2e_qid_for_mid sender "person-1-$$@client.e2e.test" "$off")
wait_deferred "$qp" carol@defer.e2e.test
off=$(e2e_log_size sender)
message "$E2E_DIR/person2" "person-2-$$@client.e2e.test" "$FROM" carol@defer.e2e.test "Minutes" "The minutes of Monday."
if e2e_submit_smtp "$E2E_DIR/person2" "$FROM" carol@defer.e2e.test; then e2e_fail "a person's identical resend was accepted"; fi
v=$(last_verdict_since "$off")
assert_field "$v" verdict reject
assert_field "$v" matched fingerprint
assert_field "$v" original "$qp"

e2e_log "the same identical content to another recipient: new for that recipient"
off=$(e2e_log_size sender)
message "$E2E_DIR/person3" "person-3-$$@client.e2e.test" "$FROM" erin@defer.e2e.test "Minutes" "The minutes of Monday."
e2e_submit_smtp "$E2E_DIR/person3" "$FROM" erin@defer.e2e.test || e2e_fail "identical content to a new recipient refused"
assert_field "$(last_verdict_since "$off")" verdict accept

e2e_log "a newsletter (List-Id) issue twice to a deferring subscriber, then to another"
NL_BODY="This month: retries, queues and patience."
for i in 1 2; do
    off=$(e2e_log_size sender)
    message "$E2E_DIR/nl$i" "nl-$i-$$@lists.e2e.test" news@ok.e2e.test frank@defer.e2e.test "News 12/2026" \
        "$NL_BODY" "List-Id: News <news.lists.e2e.test>" "Precedence: list"
    e2e_submit_smtp "$E2E_DIR/nl$i" news@ok.e2e.test frank@defer.e2e.test || e2e_fail "newsletter copy $i refused"
    qn=$(e2e_qid_for_mid sender "nl-$i-$$@lists.e2e.test" "$off")
    assert_field "$(verdict_for "$qn")" verdict accept
    wait_deferred "$qn" frank@defer.e2e.test
done

e2e_log "identical content after the original was delivered: a new message"
off=$(e2e_log_size sender)
message "$E2E_DIR/ok1" "ok-1-$$@client.e2e.test" "$FROM" dave@ok.e2e.test "Lunch" "Lunch at noon?"
e2e_submit_smtp "$E2E_DIR/ok1" "$FROM" dave@ok.e2e.test || e2e_fail "first lunch mail refused"
qo=$(e2e_qid_for_mid sender "ok-1-$$@client.e2e.test" "$off")
e2e_wait_ingested sender "$qo: to=<dave@ok.e2e.test>,.* status=sent" 30
off=$(e2e_log_size sender)
message "$E2E_DIR/ok2" "ok-2-$$@client.e2e.test" "$FROM" dave@ok.e2e.test "Lunch" "Lunch at noon?"
e2e_submit_smtp "$E2E_DIR/ok2" "$FROM" dave@ok.e2e.test || e2e_fail "identical content after delivery refused"
qo2=$(e2e_qid_for_mid sender "ok-2-$$@client.e2e.test" "$off")
assert_field "$(verdict_for "$qo2")" verdict accept
e2e_wait_log sender "$qo2: to=<dave@ok.e2e.test>,.* status=sent" 30
