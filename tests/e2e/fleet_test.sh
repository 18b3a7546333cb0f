#!/usr/bin/env bash
# fleet_test.sh -- two sending Postfix hosts ("sender" and "senderb", as behind
# one submission name) share one Redis ledger. Each has its own milter and its
# own policy daemon following its own log; Redis runs with the committed
# tests/e2e/fleet-redis.conf (the block docs/ledger.md "Running a fleet" shows,
# compared byte for byte), an ACL user limited to the fleet's key prefix and
# retryguard's commands, and each host reads the password from its own file.
# Asserted: a message deferred on one host and resent through the other (SMTP
# and sendmail) is refused there, naming the first host's queue id; deferrals
# from both hosts count into one destination episode, which both hosts'
# `retryguard destinations --json` show identically; the watch verdict fires
# once for the fleet; each host's deferral is recorded under its own queue id
# and both hosts explain it identically. Then: a milter with a wrong password
# fails open (mail flows) and refuses resends again with the right one; Redis
# killed (SIGKILL) mid-traffic and restarted from its append-only file: mail
# flows meanwhile, no deferral is lost or counted twice (the episode's attempts
# equal the deferral lines of both logs), resends are refused again.
# Each message records the host that holds it (the host field of its log
# lines): the refusal on B names A, and `retryguard explain` on either host says
# which host holds each queue id.
. "$(dirname "$0")/lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
FROM=alice@ok.e2e.test
PREFIX=rg:fleet1:
RG_USER=rg-fleet1
HOSTS=(sender senderb)

e2e_begin fleet 240
for var in RETRYGUARD_CLI RETRYGUARD_MILTER RETRYGUARD_POLICYD; do
    [ -x "${!var:-}" ] || e2e_fail "$var is not set to the built program"
done
command -v redis-server >/dev/null || e2e_skip "redis-server is not installed"
command -v redis-cli >/dev/null || e2e_skip "redis-cli is not installed"
id nobody >/dev/null 2>&1 || e2e_skip "no user nobody"

# ------------------------------------------------------------ the docs' config
CONF=$HERE/fleet-redis.conf
DOC=$HERE/../../docs/ledger.md
# The block in docs/ledger.md that starts with the file's first line must be
# the file itself: what the docs recommend is what this test runs.
awk -v first="$(head -1 "$CONF")" '
    inblock && /^```/ { exit }
    inblock { print }
    !inblock && $0 == first { inblock = 1; print }' "$DOC" >"$E2E_DIR/doc-redis.conf"
cmp -s "$CONF" "$E2E_DIR/doc-redis.conf" || {
    diff -u "$CONF" "$E2E_DIR/doc-redis.conf" >&2 || true
    e2e_fail "docs/ledger.md's redis.conf block differs from tests/e2e/fleet-redis.conf"
}

# -------------------------------------------------------------------- Redis
# The committed file with this run's password, port and directory; redis-server
# runs unprivileged (nobody) in a directory of its own.
PASSWORD=$(head -c 24 /dev/urandom | base64 | tr -dc A-Za-z0-9)
REDIS_PORT=$(e2e_free_port)
mkdir -p "$E2E_DIR/redis"
ADMIN_PASSWORD=$(head -c 24 /dev/urandom | base64 | tr -dc A-Za-z0-9)
sed -e "s/>change-this-password/>$PASSWORD/" -e "s/^port 6379\$/port $REDIS_PORT/" \
    -e "s/^requirepass change-this-admin-password\$/requirepass $ADMIN_PASSWORD/" "$CONF" >"$E2E_DIR/redis/redis.conf"
grep -q "^port $REDIS_PORT\$" "$E2E_DIR/redis/redis.conf" || e2e_fail "no port line in $CONF"
grep -q ">$PASSWORD " "$E2E_DIR/redis/redis.conf" || e2e_fail "no >change-this-password in $CONF"
grep -q "^requirepass $ADMIN_PASSWORD\$" "$E2E_DIR/redis/redis.conf" || e2e_fail "no requirepass line in $CONF"
echo "dir $E2E_DIR/redis" >>"$E2E_DIR/redis/redis.conf"
chown -R nobody:nogroup "$E2E_DIR/redis"
chmod 700 "$E2E_DIR/redis"
redis_start() {
    e2e_start_daemon redis setpriv --reuid=nobody --regid=nogroup --clear-groups \
        redis-server "$E2E_DIR/redis/redis.conf"
    e2e_wait_port "$REDIS_PORT" 10 redis
}
redis_start
rcli() { REDISCLI_AUTH=$PASSWORD redis-cli --no-auth-warning -h 127.0.0.1 -p "$REDIS_PORT" --user "$RG_USER" "$@"; }
[ "$(rcli HSET "${PREFIX}probe" x 1)" = 1 ] || e2e_fail "the fleet user cannot write its own keys"
rcli DEL "${PREFIX}probe" >/dev/null
case $(rcli SET other:key 1 2>&1) in *NOPERM*) ;; *) e2e_fail "the fleet user may write outside its prefix" ;; esac
case $(rcli FLUSHALL 2>&1) in *NOPERM*) ;; *) e2e_fail "the fleet user may run FLUSHALL" ;; esac
case $(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" GET x 2>&1) in *NOAUTH*) ;;
    *) e2e_fail "Redis answers without a password" ;; esac
e2e_log "redis on 127.0.0.1:$REDIS_PORT (user $RG_USER, prefix $PREFIX)"

# ------------------------------------------------------------------ the hosts
e2e_start_receiver
for h in "${HOSTS[@]}"; do
    mkdir -p "$E2E_DIR/$h-rg"
    chmod 755 "$E2E_DIR/$h-rg"
    # one password file per host, root:<service group> 0640 as docs/ledger.md
    # says (the milter's group here; the policy daemon runs with it too)
    printf '%s:%s\n' "$RG_USER" "$PASSWORD" >"$E2E_DIR/$h-rg/redis.pw"
    chown root:postfix "$E2E_DIR/$h-rg/redis.pw"
    chmod 640 "$E2E_DIR/$h-rg/redis.pw"
    e2e_start_sender "unix:$E2E_DIR/$h-rg/milter.sock" "$h"
done

# host_config HOST: the host's retryguard.yaml (milter and policy daemon).
host_config() {
    local h=$1
    cat >"$E2E_DIR/$h-rg/retryguard.yaml" <<EOF
ledger:
  backend: redis
  redis: {address: "127.0.0.1:$REDIS_PORT", key_prefix: "$PREFIX", password_file: "$E2E_DIR/$h-rg/redis.pw",
          reconnect_max_backoff: 2s}
sources:
  - {type: file, name: "$h:maillog", path: "$(e2e_logfile "$h")", start: beginning}
ingest: {batch_max_delay: 50ms}
categories: {receiver_config: {watch_after_deferrals: 3}}
metrics: {enabled: false}
log: {verdicts: "postlog:$E2E_DIR/$h/spool/public/postlog", hostname: "$h"}
milter:
  socket: "unix:$E2E_DIR/$h-rg/milter.sock"
  user: nobody
  group: postfix
  socket_mode: "0660"
  minimal_backoff: 3s
  maximal_backoff: 6s
EOF
    chmod 644 "$E2E_DIR/$h-rg/retryguard.yaml"
}

start_milter() {  # HOST
    local h=$1 off
    off=$(e2e_log_size "$h")
    rm -f "$E2E_DIR/$h-rg/milter.sock"
    e2e_start_daemon "$h-milter" "$RETRYGUARD_MILTER" -c "$E2E_DIR/$h-rg/retryguard.yaml"
    for _ in $(seq 100); do [ -S "$E2E_DIR/$h-rg/milter.sock" ] && break; sleep 0.05; done
    [ -S "$E2E_DIR/$h-rg/milter.sock" ] || e2e_daemon_failed "$h-milter" "its socket did not appear"
    e2e_wait_log "$h" "retryguard/milter\[[0-9]+\]: starting: " 10 1 "$off"
}

start_host_daemons() {  # HOST
    local h=$1 port
    start_milter "$h"
    port=$(e2e_free_port)
    printf -v "POLICY_PORT_$h" '%s' "$port"
    e2e_start_daemon "$h-policyd" setpriv --reuid=nobody --regid=postdrop --groups=postfix \
        "$RETRYGUARD_POLICYD" -c "$E2E_DIR/$h-rg/retryguard.yaml" --foreground \
        -o "policy.socket=inet:$port@127.0.0.1"
    e2e_wait_port "$port" 10 "$h-policyd"
}

for h in "${HOSTS[@]}"; do
    host_config "$h"
    start_host_daemons "$h"
done

rg() {  # HOST ARGS...: the CLI with the host's configuration
    local h=$1
    shift
    "$RETRYGUARD_CLI" "$@" -c "$E2E_DIR/$h-rg/retryguard.yaml"
}

verdict_for() {  # HOST QID
    e2e_wait_log "$1" "retryguard/milter\[[0-9]+\]: $2: verdict=" 20
    e2e_log_since "$1" | grep -E "retryguard/milter\[[0-9]+\]: $2: verdict=" | tail -1
}
last_verdict_since() {  # HOST OFFSET
    e2e_wait_log "$1" "retryguard/milter\[[0-9]+\]: [0-9A-Za-z]+: verdict=" 20 1 "$2"
    e2e_log_since "$1" "$2" | grep -E "retryguard/milter\[[0-9]+\]: [0-9A-Za-z]+: verdict=" | tail -1
}
assert_field() {  # LINE KEY VALUE
    case " $1 " in *" $2=$3 "*) ;; *) e2e_fail "expected $2=$3 in: $1" ;; esac
}
# wait_in_ledger HOST QID: HOST's CLI shows QID's deferral (the host's own
# follower carried it from its log into the shared ledger).
wait_in_ledger() {
    for _ in $(seq 100); do
        rg "$1" explain --json "$2" 2>/dev/null | grep -q '"deferred"' && return 0
        sleep 0.2
    done
    rg "$1" explain "$2" >&2 || true
    e2e_fail "$1's ledger view does not show $2 deferred"
}

# ------------------------------------------- deferred on A, resent through B
mid="fleet-$$@client.e2e.test"
e2e_message "$E2E_DIR/orig" "$mid" "$FROM" bob@defer.e2e.test "Quarterly report"
e2e_submit_smtp_via sender "$E2E_DIR/orig" "$FROM" bob@defer.e2e.test || e2e_fail "original not accepted on sender"
qa=$(e2e_qid_for_mid sender "$mid")
assert_field "$(verdict_for sender "$qa")" verdict accept
e2e_wait_log sender "$qa: to=<bob@defer.e2e.test>,.* status=deferred" 30
wait_in_ledger senderb "$qa"

e2e_log "resend through senderb over SMTP"
off=$(e2e_log_size senderb)
if e2e_submit_smtp_via senderb "$E2E_DIR/orig" "$FROM" bob@defer.e2e.test; then
    e2e_fail "senderb accepted the resend of $qa over SMTP"
fi
grep -q "<\*\* *550 5.7.1 Not accepted again: a copy for <bob@defer.e2e.test> is already queued as $qa on sender for" \
    <<<"$E2E_LAST_SWAKS" || e2e_fail "the submitter did not see sender's queue id and host: $E2E_LAST_SWAKS"
v=$(last_verdict_since senderb "$off")
assert_field "$v" verdict reject
assert_field "$v" path smtp
assert_field "$v" original "$qa"
assert_field "$v" original_host sender

e2e_log "resend through senderb's sendmail"
off=$(e2e_log_size senderb)
e2e_submit_sendmail_via senderb "$E2E_DIR/orig" "$FROM" bob@defer.e2e.test
v=$(last_verdict_since senderb "$off")
assert_field "$v" verdict reject
assert_field "$v" path sendmail
assert_field "$v" original "$qa"
assert_field "$v" original_host sender
e2e_wait_log senderb "postfix/cleanup\[[0-9]+\]: [0-9A-Za-z]+: milter-reject: END-OF-MESSAGE .*5\.7\.1 Not accepted again" 10 1 "$off"

# -------------------------------- a second message deferred on B; one episode
mid2="fleetb-$$@client.e2e.test"
e2e_message "$E2E_DIR/other" "$mid2" "$FROM" carol@defer.e2e.test "Minutes" "The minutes, attached."
e2e_submit_smtp_via senderb "$E2E_DIR/other" "$FROM" carol@defer.e2e.test || e2e_fail "senderb refused unrelated mail"
qb=$(e2e_qid_for_mid senderb "$mid2")
assert_field "$(verdict_for senderb "$qb")" verdict accept
e2e_wait_log senderb "$qb: to=<carol@defer.e2e.test>,.* status=deferred" 30
wait_in_ledger sender "$qb"

# Enough retries from both hosts to pass watch_after_deferrals (3), then hold
# both queues so that the counts stand still while they are compared.
e2e_wait_log sender "$qa: to=<bob@defer.e2e.test>,.* status=deferred" 40 2
e2e_wait_log senderb "$qb: to=<carol@defer.e2e.test>,.* status=deferred" 40 2
for h in "${HOSTS[@]}"; do postsuper -c "$(e2e_etc "$h")" -h ALL >/dev/null 2>&1 || e2e_fail "postsuper -h on $h"; done
# A delivery already running when the hold came still logs its deferral.
sleep 6
deferrals=0
for h in "${HOSTS[@]}"; do
    n=$(grep -cE "to=<[a-z]+@defer\.e2e\.test>,.* status=deferred" "$(e2e_logfile "$h")" || true)
    e2e_log "$h logged $n deferrals to defer.e2e.test"
    [ "$n" -ge 2 ] || e2e_fail "$h logged only $n deferrals"
    deferrals=$((deferrals + n))
done

# Both followers have carried every deferral into the shared episode.
attempts_of() {  # HOST: the open episode's attempts for defer.e2e.test
    rg "$1" destinations --json | python3 -c '
import json, sys
doc = json.load(sys.stdin)
rows = doc["destinations"] if isinstance(doc, dict) else doc
for d in rows:
    if d.get("name") == "defer.e2e.test" and d.get("kind", "domain") == "domain":
        ep = d.get("episode") or {}
        print(ep.get("attempts", d.get("attempts", 0)))
        break
else:
    print(0)'
}
for _ in $(seq 50); do
    [ "$(attempts_of sender)" = "$deferrals" ] && break
    sleep 0.2
done
got=$(attempts_of sender)
[ "$got" = "$deferrals" ] || e2e_fail "the fleet episode counts $got attempts; the two logs hold $deferrals deferrals"
# (without "now", the time each CLI ran)
rg sender destinations --json | grep -v '^  "now": ' >"$E2E_DIR/dest-sender.json"
rg senderb destinations --json | grep -v '^  "now": ' >"$E2E_DIR/dest-senderb.json"
grep -q '"name": "defer.e2e.test"' "$E2E_DIR/dest-sender.json" || e2e_fail "no defer.e2e.test in --json"
cmp -s "$E2E_DIR/dest-sender.json" "$E2E_DIR/dest-senderb.json" || {
    diff -u "$E2E_DIR/dest-sender.json" "$E2E_DIR/dest-senderb.json" >&2 || true
    e2e_fail "the two hosts show different destinations (--json)"
}
rg sender destinations --no-color >"$E2E_DIR/dest-sender.txt"
rg senderb destinations --no-color >"$E2E_DIR/dest-senderb.txt"
cmp -s "$E2E_DIR/dest-sender.txt" "$E2E_DIR/dest-senderb.txt" || e2e_fail "the two hosts show different destinations"
grep -q "defer.e2e.test" "$E2E_DIR/dest-sender.txt" || e2e_fail "defer.e2e.test is not listed"

# The watch verdict fires once for the fleet, whichever host's engine saw the
# third deferral, not once per host.
for _ in $(seq 50); do
    cat "$(e2e_logfile sender)" "$(e2e_logfile senderb)" | grep -qE "retryguard/policyd\[[0-9]+\]: defer\.e2e\.test: verdict=watch " && break
    sleep 0.2
done
sleep 1
watch=0
noted=0
for h in "${HOSTS[@]}"; do
    n=$(grep -cE "retryguard/policyd\[[0-9]+\]: defer\.e2e\.test: verdict=watch " "$(e2e_logfile "$h")" || true)
    m=$(grep -cE "retryguard/policyd\[[0-9]+\]: defer\.e2e\.test: verdict=noted " "$(e2e_logfile "$h")" || true)
    e2e_log "$h logged $m noted and $n watch verdicts for defer.e2e.test"
    watch=$((watch + n))
    noted=$((noted + m))
done
[ "$watch" = 1 ] || e2e_fail "the fleet logged $watch watch verdicts for defer.e2e.test, want 1"
[ "$noted" = 1 ] || e2e_fail "the fleet logged $noted noted verdicts for defer.e2e.test, want 1"

# Each deferral is recorded under the queue id of the host that logged it; both
# hosts explain both messages the same way.
for q in "$qa" "$qb"; do
    rg sender explain --json "$q" | grep -v '^  "now": ' >"$E2E_DIR/explain-a.json"
    rg senderb explain --json "$q" | grep -v '^  "now": ' >"$E2E_DIR/explain-b.json"
    cmp -s "$E2E_DIR/explain-a.json" "$E2E_DIR/explain-b.json" || e2e_fail "the hosts explain $q differently"
done
rg senderb explain "$qa" | grep -q "bob@defer.e2e.test" || e2e_fail "senderb cannot explain sender's $qa"
rg sender explain "$qb" | grep -q "carol@defer.e2e.test" || e2e_fail "sender cannot explain senderb's $qb"
# ... and both say which host holds each one.
rg senderb explain "$qa" | grep -q "^  Host: *sender\$" || e2e_fail "senderb's explain does not name sender as $qa's host"
rg sender explain "$qb" | grep -q "^  Host: *senderb\$" || e2e_fail "sender's explain does not name senderb as $qb's host"

# count_deferrals: deferral lines to defer.e2e.test in both hosts' logs.
count_deferrals() {
    cat "$(e2e_logfile sender)" "$(e2e_logfile senderb)" |
        grep -cE "to=<[a-z]+@defer\.e2e\.test>,.* status=deferred" || true
}

# ---------------------------------------- a wrong password: mail still flows
e2e_log "senderb's milter with a wrong password"
printf '%s:wrong\n' "$RG_USER" >"$E2E_DIR/senderb-rg/redis.pw"
e2e_stop_daemon senderb-milter
off=$(e2e_log_size senderb)
start_milter senderb
e2e_message "$E2E_DIR/wp" "wp-$$@client.e2e.test" "$FROM" erin@ok.e2e.test "Wrong password"
e2e_submit_smtp_via senderb "$E2E_DIR/wp" "$FROM" erin@ok.e2e.test || e2e_fail "refused with a wrong Redis password"
qw=$(e2e_qid_for_mid senderb "wp-$$@client.e2e.test" "$off")
v=$(verdict_for senderb "$qw")
assert_field "$v" verdict accept
assert_field "$v" failopen ledger-error
e2e_wait_log senderb "$qw: to=<erin@ok.e2e.test>,.* status=sent" 30
# The resend of sender's deferred message is not recognised now: fail open.
off=$(e2e_log_size senderb)
e2e_submit_smtp_via senderb "$E2E_DIR/orig" "$FROM" bob@defer.e2e.test || e2e_fail "refused with a wrong Redis password"
v=$(last_verdict_since senderb "$off")
assert_field "$v" verdict accept
assert_field "$v" failopen ledger-error
qdup=$(sed -n 's/.*retryguard\/milter\[[0-9]*\]: \([0-9A-Za-z]*\): verdict=.*/\1/p' <<<"$v")
postsuper -c "$(e2e_etc senderb)" -d "$qdup" >/dev/null 2>&1 || true
grep -hE "WRONGPASS" "$E2E_DIR/log/senderb-milter.stderr" "$(e2e_logfile senderb)" | head -3 >&2 || true
e2e_log "the right password again"
printf '%s:%s\n' "$RG_USER" "$PASSWORD" >"$E2E_DIR/senderb-rg/redis.pw"
e2e_stop_daemon senderb-milter
start_milter senderb
off=$(e2e_log_size senderb)
if e2e_submit_smtp_via senderb "$E2E_DIR/orig" "$FROM" bob@defer.e2e.test; then e2e_fail "resend accepted again with the right password"; fi
assert_field "$(last_verdict_since senderb "$off")" original "$qa"

# ------------------------------------ Redis killed mid-traffic and restarted
e2e_log "Redis killed"
e2e_kill_daemon redis
offa=$(e2e_log_size sender)
offb=$(e2e_log_size senderb)
for h in "${HOSTS[@]}"; do postsuper -c "$(e2e_etc "$h")" -H ALL >/dev/null 2>&1 || e2e_fail "postsuper -H on $h"; done
mid3="down-$$@client.e2e.test"
e2e_message "$E2E_DIR/down" "$mid3" "$FROM" dave@defer.e2e.test "While Redis is down"
e2e_submit_smtp_via sender "$E2E_DIR/down" "$FROM" dave@defer.e2e.test || e2e_fail "refused while Redis is down"
q3=$(e2e_qid_for_mid sender "$mid3" "$offa")
v=$(verdict_for sender "$q3")
assert_field "$v" verdict accept
assert_field "$v" failopen ledger-error
e2e_wait_log sender "$q3: to=<dave@defer.e2e.test>,.* status=deferred" 30
e2e_wait_log sender "to=<bob@defer.e2e.test>,.* status=deferred" 30 1 "$offa"
e2e_wait_log senderb "to=<carol@defer.e2e.test>,.* status=deferred" 30 1 "$offb"
e2e_log "Redis restarted"
redis_start
for h in "${HOSTS[@]}"; do postsuper -c "$(e2e_etc "$h")" -h ALL >/dev/null 2>&1 || e2e_fail "postsuper -h on $h"; done
sleep 6
deferrals=$(count_deferrals)
for _ in $(seq 150); do
    [ "$(attempts_of sender)" = "$deferrals" ] && break
    sleep 0.2
done
got=$(attempts_of sender)
[ "$got" = "$deferrals" ] ||
    e2e_fail "after the Redis restart the episode counts $got attempts; the logs hold $deferrals deferrals"
rg sender explain "$q3" | grep -q "dave@defer.e2e.test" || e2e_fail "the deferral logged while Redis was down is missing"
# The milters' connections from before the kill are dead: a lookup finds that
# out and fails open (counted), and the ledger reconnects after its back-off
# (ledger.redis.reconnect_max_backoff, 2s here). Unrelated mail shows when
# each milter answers from the ledger again.
for h in "${HOSTS[@]}"; do
    for i in $(seq 20); do
        off=$(e2e_log_size "$h")
        e2e_message "$E2E_DIR/probe-$h" "probe$i-$h-$$@client.e2e.test" "$FROM" frank@ok.e2e.test "Probe $i"
        e2e_submit_smtp_via "$h" "$E2E_DIR/probe-$h" "$FROM" frank@ok.e2e.test || e2e_fail "$h refused probe $i"
        v=$(last_verdict_since "$h" "$off")
        assert_field "$v" verdict accept
        case $v in *failopen=*) ;; *) break ;; esac
        e2e_log "$h after the restart: ${v#*verdict=}"
        sleep 1
    done
    case $v in *failopen=*) e2e_fail "$h's milter did not reconnect to Redis: $v" ;; esac
done
off=$(e2e_log_size senderb)
if e2e_submit_smtp_via senderb "$E2E_DIR/orig" "$FROM" bob@defer.e2e.test; then e2e_fail "resend accepted after the Redis restart"; fi
assert_field "$(last_verdict_since senderb "$off")" original "$qa"
off=$(e2e_log_size senderb)
if e2e_submit_smtp_via senderb "$E2E_DIR/down" "$FROM" dave@defer.e2e.test; then e2e_fail "resend of $q3 accepted after the Redis restart"; fi
assert_field "$(last_verdict_since senderb "$off")" original "$q3"
