# lib.sh -- the end-to-end harness: real Postfix instances (Debian's package) on
# loopback, started, driven and stopped by one test script. Source it:
#
#   . "$(dirname "$0")/lib.sh"
#   e2e_begin my-test 120                # temp dir, traps, watchdog (seconds)
#   e2e_start_receiver                   # 451 4.3.5 for every domain in $E2E_DEFER_DOMAINS
#   e2e_start_sender "unix:$E2E_DIR/milter/milter.sock"   # milter spec, or "" for none
#   e2e_start_sender "$SPEC" senderb     # a second sending instance (a fleet host)
#   e2e_start_policyd [EXTRA_YAML [OPTION...]]  # retryguard-policyd following the sender's log
#   e2e_submit_smtp FILE FROM RCPT...    # swaks into the sender's smtpd
#   e2e_submit_sendmail FILE FROM RCPT...  # the sender instance's sendmail -C
#   e2e_submit_smtp_via INST FILE FROM RCPT...      # the same into instance INST
#   e2e_submit_sendmail_via INST FILE FROM RCPT...
#   e2e_wait_log sender 'ERE' [SECONDS] [COUNT] [OFFSET]
#   e2e_receiver_accept                  # the receiver recovers: accepts everything
#   e2e_pass                             # (or just end the script; failures exit non-zero)
#
# What it owns: every process and file it starts or writes lives under one
# temp dir ($E2E_DIR) and is stopped by its pid file on exit, also on failure,
# on SIGTERM and when the watchdog fires. It never touches the system instance
# (/etc/postfix, /var/spool/postfix), never binds anything but 127.0.0.1, and
# never kills a process by name.
#
# Postfix runs its daemons as the user `postfix` and refuses to start unless
# started by root (master drops privileges itself), so the harness needs root;
# without root, or without Postfix installed, a test exits 77 (ctest: skipped),
# except under CI=true where a missing prerequisite is a failure.
#
# Instance layout ($E2E_DIR/<inst>/): etc/ (main.cf, master.cf, maps),
# spool/ (queue_directory), data/ (data_directory, owned by postfix),
# and $E2E_DIR/log/<inst>.log written by postlogd (maillog_file): no syslog.

set -euo pipefail

E2E_SKIP=77
E2E_DIR=
E2E_INSTANCES=()  # started Postfix instances (names)
E2E_DAEMONS=()    # pid files of other processes started with e2e_start_daemon
E2E_WATCHDOG=
E2E_NAME=
E2E_KEEP=${E2E_KEEP:-0}  # 1: keep $E2E_DIR after the test (for debugging)
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

# Domains the receiver defers with 451 4.3.5 and domains it accepts.
E2E_DEFER_DOMAINS=${E2E_DEFER_DOMAINS:-defer.e2e.test}
E2E_OK_DOMAINS=${E2E_OK_DOMAINS:-ok.e2e.test}
E2E_DEFER_REPLY=${E2E_DEFER_REPLY:-451 4.3.5 System config error}
# Lines added to every sending instance's main.cf (empty: none).
E2E_SENDER_MAIN_CF=${E2E_SENDER_MAIN_CF:-}

e2e_log() { printf 'e2e[%s]: %s\n' "${E2E_NAME:-?}" "$*" >&2; }
e2e_fail() {
    e2e_log "FAIL: $*"
    exit 1
}
e2e_skip() {
    if [ "${CI:-}" = true ]; then e2e_fail "prerequisite missing under CI: $*"; fi
    e2e_log "SKIP: $*"
    exit "$E2E_SKIP"
}

# e2e_begin NAME [SECONDS]: one temp dir, cleanup traps and a watchdog that ends
# the test (and so everything it started) after SECONDS.
e2e_begin() {
    E2E_NAME=$1
    local limit=${2:-120}
    [ "$(id -u)" = 0 ] || e2e_skip "needs root: Postfix's master starts only as root"
    command -v postfix >/dev/null && command -v postconf >/dev/null || e2e_skip "postfix is not installed"
    id postfix >/dev/null 2>&1 || e2e_skip "no user postfix"
    getent group postdrop >/dev/null || e2e_skip "no group postdrop"
    E2E_DIR=$(mktemp -d "/tmp/retryguard-e2e-$E2E_NAME.XXXXXX")
    # Postfix daemons (user postfix) must reach the queue and log below it.
    chmod 755 "$E2E_DIR"
    mkdir -p "$E2E_DIR/log" "$E2E_DIR/run"
    chmod 755 "$E2E_DIR/log" "$E2E_DIR/run"
    trap e2e_cleanup EXIT
    e2e_stage_programs
    trap 'e2e_log "interrupted"; exit 1' INT TERM HUP
    # The watchdog runs in its own process group and signals only this shell.
    # Stopped with SIGTERM by e2e_cleanup, it takes its sleep along.
    (
        trap - EXIT INT HUP
        sleep "$limit" &
        sleeper=$!
        trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
        wait "$sleeper" || exit 0
        echo "e2e[$E2E_NAME]: watchdog: test exceeded ${limit}s" >&2
        kill -TERM $$ 2>/dev/null
    ) </dev/null >/dev/null 2>&1 &
    E2E_WATCHDOG=$!
    e2e_log "dir $E2E_DIR (limit ${limit}s)"
}

# e2e_stage_programs: copies the programs under test (RETRYGUARD_CLI, _MILTER,
# _POLICYD) and the shipped classifier rules into $E2E_DIR/prog, readable by
# everyone, and points the variables and RETRYGUARD_DATADIR there. Daemons run
# as unprivileged users (nobody, postfix), and the source tree may sit where
# they cannot reach it: a clone in root's home (/root is mode 0700) or a
# private /home/USER. Nothing they run or read may depend on that path.
e2e_stage_programs() {
    local dir=$E2E_DIR/prog var src rules=
    mkdir -p "$dir/bin" "$dir/share/retryguard"
    for var in RETRYGUARD_CLI RETRYGUARD_MILTER RETRYGUARD_POLICYD; do
        src=${!var:-}
        [ -n "$src" ] && [ -x "$src" ] || continue
        cp "$src" "$dir/bin/"
        export "$var=$dir/bin/$(basename "$src")"
        [ -n "$rules" ] || rules=$(dirname "$src")/../share/retryguard/classifier.yaml
    done
    if [ -n "$rules" ]; then
        [ -f "$rules" ] || e2e_fail "the build's shipped rules $rules are missing"
        cp "$rules" "$dir/share/retryguard/classifier.yaml"
        export RETRYGUARD_DATADIR=$dir/share/retryguard
    fi
    chmod -R a+rX "$dir"
}

e2e_cleanup() {
    local rc=$? inst f pid
    trap - EXIT INT TERM HUP
    set +e
    for f in "${E2E_DAEMONS[@]}"; do e2e_stop_daemon "$f"; done
    for inst in "${E2E_INSTANCES[@]}"; do e2e_stop_postfix "$inst"; done
    if [ "$rc" != 0 ] && [ "$rc" != "$E2E_SKIP" ] && [ -n "$E2E_DIR" ]; then
        for f in "$E2E_DIR"/log/*; do
            [ -f "$f" ] || continue
            echo "---- $f (last 60 lines)" >&2
            tail -n 60 "$f" >&2
        done
    fi
    if [ -n "$E2E_WATCHDOG" ]; then
        kill "$E2E_WATCHDOG" 2>/dev/null
        wait "$E2E_WATCHDOG" 2>/dev/null
    fi
    if [ -n "$E2E_DIR" ] && [ "$E2E_KEEP" != 1 ]; then
        case $E2E_DIR in /tmp/retryguard-e2e-*) rm -rf "$E2E_DIR" ;; esac
    elif [ -n "$E2E_DIR" ]; then
        e2e_log "kept $E2E_DIR"
    fi
    [ "$rc" = 0 ] && e2e_log PASS
    exit "$rc"
}

# A free TCP port on 127.0.0.1 (the kernel picks it; the tiny window before
# Postfix binds it is acceptable for tests).
e2e_free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

e2e_port_listening() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }

e2e_wait_port() {  # e2e_wait_port PORT [SECONDS [DAEMON]]
    local deadline=$((SECONDS + ${2:-15})) daemon=${3:-} pid
    until e2e_port_listening "$1"; do
        if [ -n "$daemon" ]; then
            pid=$(e2e_daemon_pid "$daemon")
            [ -n "$pid" ] && [ -d "/proc/$pid" ] || e2e_daemon_failed "$daemon" "exited before 127.0.0.1:$1 came up"
        fi
        [ $SECONDS -lt "$deadline" ] || {
            [ -n "$daemon" ] && e2e_daemon_failed "$daemon" "127.0.0.1:$1 did not come up"
            e2e_fail "127.0.0.1:$1 did not come up"
        }
        sleep 0.1
    done
}

# e2e_daemon_failed NAME WHAT: fail with the daemon's own last words (its
# stderr, e.g. "cannot read: Permission denied for user nobody"), not only
# with what the harness saw.
e2e_daemon_failed() {
    local f="$E2E_DIR/log/$1.stderr"
    if [ -s "$f" ]; then
        e2e_log "$1 said:"
        tail -n 5 "$f" | sed 's/^/    /' >&2
    fi
    e2e_fail "$1: $2"
}

e2e_etc() { echo "$E2E_DIR/$1/etc"; }
e2e_logfile() { echo "$E2E_DIR/log/$1.log"; }

# Settings every instance shares.
_e2e_common_main_cf() {  # INSTANCE HOSTNAME
    local inst=$1 host=$2
    cat <<EOF
# written by tests/e2e/lib.sh for one test run
compatibility_level = 3.6
queue_directory = $E2E_DIR/$inst/spool
data_directory = $E2E_DIR/$inst/data
mail_owner = postfix
setgid_group = postdrop
maillog_file = $(e2e_logfile "$inst")
maillog_file_prefixes = $E2E_DIR
myhostname = $host
mydomain = e2e.test
myorigin = \$myhostname
mydestination =
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
smtp_dns_support_level = disabled
alias_maps =
alias_database =
local_transport = error:5.1.1 no local delivery in the e2e test
default_transport = error:5.4.4 no route outside the e2e test
biff = no
smtp_tls_security_level = none
smtpd_tls_security_level = none
smtp_connect_timeout = 5s
mynetworks = 127.0.0.0/8
EOF
}

_e2e_common_master_cf() {
    cat <<'EOF'
# service type  private unpriv  chroot  wakeup  maxproc command + args
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
smtp      unix  -       -       n       -       -       smtp
relay     unix  -       -       n       -       -       smtp
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
EOF
}

_e2e_prepare_instance() {  # INSTANCE
    local d="$E2E_DIR/$1"
    mkdir -p "$d/etc" "$d/spool" "$d/data"
    chmod 755 "$d" "$d/etc"
    chown postfix:postfix "$d/data"
}

_e2e_start_postfix() {  # INSTANCE PORT
    local inst=$1 etc
    etc=$(e2e_etc "$inst")
    postfix -c "$etc" check || e2e_fail "postfix check failed for $inst"
    postfix -c "$etc" start >/dev/null 2>&1 || e2e_fail "postfix start failed for $inst"
    E2E_INSTANCES+=("$inst")
    e2e_wait_port "$2" 20
}

# The receiver: relays for the defer and ok domains into the discard transport,
# answering $E2E_DEFER_REPLY at RCPT TO for every defer domain.
e2e_start_receiver() {
    local etc d
    _e2e_prepare_instance rcv
    etc=$(e2e_etc rcv)
    E2E_RCV_PORT=$(e2e_free_port)
    {
        _e2e_common_main_cf rcv rcv.e2e.test
        cat <<EOF
relay_domains = $E2E_DEFER_DOMAINS $E2E_OK_DOMAINS
relay_transport = discard:accepted by the e2e receiver
smtpd_relay_restrictions = reject_unauth_destination
smtpd_recipient_restrictions = check_recipient_access texthash:$etc/access, reject_unauth_destination
EOF
    } >"$etc/main.cf"
    { _e2e_common_master_cf; echo "127.0.0.1:$E2E_RCV_PORT inet n - n - - smtpd"; } >"$etc/master.cf"
    : >"$etc/access"
    for d in $E2E_DEFER_DOMAINS; do printf '%s %s\n' "$d" "$E2E_DEFER_REPLY" >>"$etc/access"; done
    _e2e_start_postfix rcv "$E2E_RCV_PORT"
    e2e_log "receiver on 127.0.0.1:$E2E_RCV_PORT defers: $E2E_DEFER_DOMAINS"
}

# The receiver recovers: the access map empties and smtpd restarts with it.
e2e_receiver_accept() {
    : >"$(e2e_etc rcv)/access"
    postfix -c "$(e2e_etc rcv)" reload >/dev/null 2>&1 || e2e_fail "receiver reload failed"
    e2e_log "receiver now accepts everything"
}

# The sending Postfix: smtpd on a free port, pickup for sendmail -C, every test
# domain relayed to the receiver, retries every few seconds, and the milter
# (when a spec is given) both as smtpd_milters and non_smtpd_milters with
# milter_default_action = accept, as docs/milter.md documents.
# INSTANCE (default "sender"; letters and digits) names the instance, its
# directory, its log and its myhostname (INSTANCE.e2e.test): several senders
# make a fleet. Its smtpd port is $E2E_SENDER_PORT for "sender" and
# $(e2e_sender_port INSTANCE) for any.
e2e_start_sender() {  # [MILTER_SPEC [INSTANCE]]
    local milter=${1:-} inst=${2:-sender} etc d port
    [ -n "${E2E_RCV_PORT:-}" ] || e2e_fail "start the receiver first"
    [[ $inst =~ ^[A-Za-z][A-Za-z0-9]*$ ]] || e2e_fail "instance name '$inst': letters and digits only"
    _e2e_prepare_instance "$inst"
    etc=$(e2e_etc "$inst")
    port=$(e2e_free_port)
    printf -v "E2E_PORT_$inst" '%s' "$port"
    [ "$inst" = sender ] && E2E_SENDER_PORT=$port
    {
        _e2e_common_main_cf "$inst" "$inst.e2e.test"
        cat <<EOF
smtpd_relay_restrictions = permit_mynetworks, reject
transport_maps = texthash:$etc/transport
# retry fast (production defaults: 300s / 300s / 4000s)
queue_run_delay = 3s
minimal_backoff_time = 3s
maximal_backoff_time = 6s
delay_warning_time = 0h
milter_default_action = accept
milter_connect_timeout = 5s
milter_command_timeout = 10s
milter_content_timeout = 10s
EOF
        if [ -n "$milter" ]; then
            echo "smtpd_milters = $milter"
            echo "non_smtpd_milters = $milter"
        fi
        # A test's own settings for its sending instances (e.g. a policy service).
        [ -z "${E2E_SENDER_MAIN_CF:-}" ] || printf '%s\n' "$E2E_SENDER_MAIN_CF"
    } >"$etc/main.cf"
    { _e2e_common_master_cf; echo "127.0.0.1:$port inet n - n - - smtpd"; } >"$etc/master.cf"
    : >"$etc/transport"
    for d in $E2E_DEFER_DOMAINS $E2E_OK_DOMAINS; do
        printf '%s smtp:[127.0.0.1]:%s\n' "$d" "$E2E_RCV_PORT" >>"$etc/transport"
    done
    _e2e_start_postfix "$inst" "$port"
    e2e_log "$inst on 127.0.0.1:$port milter: ${milter:-none}"
}

# e2e_sender_port INSTANCE: the smtpd port of a started sending instance.
e2e_sender_port() {
    local var="E2E_PORT_$1"
    [ -n "${!var:-}" ] || e2e_fail "no sending instance $1"
    echo "${!var}"
}

e2e_stop_postfix() {  # INSTANCE
    local inst=$1 etc pidf pid
    etc=$(e2e_etc "$inst")
    pidf="$E2E_DIR/$inst/spool/pid/master.pid"
    pid=$(tr -dc 0-9 <"$pidf" 2>/dev/null || true)
    postfix -c "$etc" stop >/dev/null 2>&1 || true
    [ -n "$pid" ] || return 0
    for _ in $(seq 100); do [ -d "/proc/$pid" ] || return 0; sleep 0.1; done
    postfix -c "$etc" abort >/dev/null 2>&1 || true
    sleep 0.5
    if [ -d "/proc/$pid" ] && grep -q master "/proc/$pid/comm" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null; fi
    return 0
}

# e2e_start_policyd [EXTRA_YAML [OPTION...]]: retryguard-policyd as installed,
# unprivileged (nobody, group postdrop: the postlog socket): its log follower
# feeds the SQLite ledger $E2E_DIR/ledger/ledger.db from the sender's log, its
# rules engine's verdicts go to that log through postlogd. EXTRA_YAML is added
# to its configuration file, OPTIONs (-o key=value) to its command line. Its
# policy service listens on 127.0.0.1:$POLICY_PORT.
e2e_start_policyd() {
    local extra=${1:-}
    [ $# -gt 0 ] && shift
    mkdir -p "$E2E_DIR/ledger"
    chown nobody:nogroup "$E2E_DIR/ledger"
    POLICY_PORT=$(e2e_free_port)
    cat >"$E2E_DIR/retryguard.yaml" <<EOF
ledger: {backend: sqlite, sqlite: {path: $E2E_DIR/ledger/ledger.db}}
sources:
  - {type: file, path: $(e2e_logfile sender), start: beginning}
ingest: {batch_max_delay: 50ms}
metrics: {enabled: false}
log: {verdicts: "postlog:$E2E_DIR/sender/spool/public/postlog"}
EOF
    [ -z "$extra" ] || printf '%s\n' "$extra" >>"$E2E_DIR/retryguard.yaml"
    chmod 644 "$E2E_DIR/retryguard.yaml"
    e2e_start_daemon policyd setpriv --reuid=nobody --regid=postdrop --clear-groups \
        "$RETRYGUARD_POLICYD" -c "$E2E_DIR/retryguard.yaml" --foreground -o "policy.socket=inet:$POLICY_PORT@127.0.0.1" "$@"
    e2e_wait_port "$POLICY_PORT" 10 policyd
}

# e2e_start_daemon NAME CMD ARGS...: runs CMD in its own session, pid in
# $E2E_DIR/run/NAME.pid, stdout+stderr in $E2E_DIR/log/NAME.stderr.
e2e_start_daemon() {
    local name=$1 pidf="$E2E_DIR/run/$1.pid"
    shift
    setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pidf" "$@" </dev/null >>"$E2E_DIR/log/$name.stderr" 2>&1 &
    for _ in $(seq 50); do [ -s "$pidf" ] && break; sleep 0.05; done
    [ -s "$pidf" ] || e2e_fail "$name did not start"
    E2E_DAEMONS+=("$pidf")
}

e2e_daemon_pid() { tr -dc 0-9 <"$E2E_DIR/run/$1.pid" 2>/dev/null; }

e2e_stop_daemon() {  # PIDFILE or NAME; SIGTERM, then SIGKILL after 5 s
    local f=$1 pid
    case $f in /*) ;; *) f="$E2E_DIR/run/$f.pid" ;; esac
    pid=$(tr -dc 0-9 <"$f" 2>/dev/null || true)
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || { rm -f "$f"; return 0; }
    for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
    [ -d "/proc/$pid" ] && kill -KILL "$pid" 2>/dev/null
    rm -f "$f"
    return 0
}

# e2e_kill_daemon NAME: SIGKILL, as a crash would (the pid file stays unused).
e2e_kill_daemon() {
    local pid
    pid=$(e2e_daemon_pid "$1")
    [ -n "$pid" ] || e2e_fail "no pid for $1"
    kill -KILL "$pid"
    for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
    rm -f "$E2E_DIR/run/$1.pid"
}

# ---------------------------------------------------------------- messages

# e2e_message FILE MESSAGE-ID FROM TO SUBJECT [BODY]: an RFC 5322 message as a
# mail client would write it.
e2e_message() {
    local f=$1 mid=$2 from=$3 to=$4 subject=$5 body=${6:-Hello,
this is the e2e test body.
Regards}
    {
        printf 'From: <%s>\r\nTo: <%s>\r\nSubject: %s\r\n' "$from" "$to" "$subject"
        printf 'Date: %s\r\n' "$(date -R)"
        [ -n "$mid" ] && printf 'Message-ID: <%s>\r\n' "$mid"
        printf 'MIME-Version: 1.0\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n'
        printf '%s\r\n' "$body"
    } >"$f"
}

# e2e_submit_smtp FILE FROM RCPT...: swaks into the sender's smtpd; the SMTP
# dialogue goes to $E2E_DIR/log/swaks.log. Returns swaks' exit code (24 when
# the message was rejected at end of data).
e2e_submit_smtp() { e2e_submit_smtp_via sender "$@"; }

e2e_submit_smtp_via() {  # INSTANCE FILE FROM RCPT...
    local inst=$1 f=$2 from=$3 rc=0 port
    shift 3
    port=$(e2e_sender_port "$inst")
    {
        echo "==== swaks $from -> $* (via $inst)"
        swaks --server "127.0.0.1:$port" --helo client.e2e.test --from "$from" \
            --to "$(IFS=,; echo "$*")" --data "@$f" --timeout 30 2>&1 || rc=$?
    } >>"$E2E_DIR/log/swaks.log"
    E2E_LAST_SWAKS=$(awk '/^==== swaks/{buf=""} {buf=buf $0 "\n"} END{printf "%s", buf}' "$E2E_DIR/log/swaks.log")
    return "$rc"
}

# e2e_submit_sendmail FILE FROM RCPT...: local submission through the sender
# instance's sendmail -> postdrop -> pickup -> cleanup (the non_smtpd_milters path).
e2e_submit_sendmail() { e2e_submit_sendmail_via sender "$@"; }

e2e_submit_sendmail_via() {  # INSTANCE FILE FROM RCPT...
    local inst=$1 f=$2 from=$3
    shift 3
    sendmail -C "$(e2e_etc "$inst")" -f "$from" -- "$@" <"$f"
}

# ---------------------------------------------------------------- the log

e2e_log_size() { stat -c %s "$(e2e_logfile "$1")" 2>/dev/null || echo 0; }

# e2e_log_since INSTANCE [OFFSET]: the log from byte OFFSET on.
e2e_log_since() { tail -c +$((${2:-0} + 1)) "$(e2e_logfile "$1")" 2>/dev/null || true; }

# e2e_wait_log INSTANCE ERE [SECONDS] [COUNT] [OFFSET]: wait until the log (from
# OFFSET) has COUNT lines matching ERE; fails the test on timeout.
e2e_wait_log() {
    local inst=$1 re=$2 secs=${3:-30} want=${4:-1} off=${5:-0} deadline n
    deadline=$((SECONDS + secs))
    while :; do
        n=$(e2e_log_since "$inst" "$off" | grep -cE -- "$re" || true)
        [ "$n" -ge "$want" ] && return 0
        [ $SECONDS -lt "$deadline" ] || e2e_fail "timed out after ${secs}s waiting for $want x /$re/ in $inst log (saw $n)"
        sleep 0.2
    done
}

# e2e_wait_ingested INSTANCE ERE [SECONDS] [OFFSET]: waits for the first line
# matching ERE in INSTANCE's log (from OFFSET on), then until the log follower
# of the policy daemon started by e2e_start_policyd has committed the log past
# it (its position, as `retryguard status --json` reads it from the ledger, is
# stored in the same transaction as the line's effects): from then on the ledger
# answers for that line. A sleep would guess how far behind the follower is.
e2e_wait_ingested() {
    local inst=$1 re=$2 secs=${3:-30} off=${4:-0} hit line end pos deadline
    e2e_wait_log "$inst" "$re" "$secs" 1 "$off"
    hit=$(e2e_log_since "$inst" "$off" | LC_ALL=C grep -bE -m1 -- "$re")
    line=${hit#*:}
    end=$(LC_ALL=C; echo $((off + ${hit%%:*} + ${#line} + 1)))
    deadline=$((SECONDS + secs))
    while :; do
        pos=$("$RETRYGUARD_CLI" status --json -c "$E2E_DIR/retryguard.yaml" 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(max([f.get("offset") or 0 for f in d.get("followers", []) if f.get("source") == "file:" + sys.argv[1]] or [0]))
' "$(e2e_logfile "$inst")" 2>/dev/null) || pos=0
        [ "${pos:-0}" -ge "$end" ] && return 0
        [ $SECONDS -lt "$deadline" ] ||
            e2e_fail "timed out after ${secs}s waiting for the follower to pass byte $end of the $inst log (at ${pos:-?}): /$re/"
        sleep 0.2
    done
}

# e2e_qid_for_mid INSTANCE MESSAGE-ID [OFFSET]: the queue id cleanup logged for it
# (the last one from OFFSET on), waiting up to 20 s.
e2e_qid_for_mid() {
    local q
    for _ in $(seq 100); do
        q=$(e2e_log_since "$1" "${3:-0}" |
            sed -n "s/.*postfix\/cleanup\[[0-9]*\]: \([0-9A-Za-z]*\): message-id=<$2>.*/\1/p" | tail -1)
        [ -n "$q" ] && { echo "$q"; return 0; }
        sleep 0.2
    done
    e2e_fail "no queue id logged for <$2>"
}

e2e_assert_log() {  # INSTANCE ERE [OFFSET] [MESSAGE]
    e2e_log_since "$1" "${3:-0}" | grep -qE -- "$2" || e2e_fail "${4:-expected /$2/ in $1 log}"
}

e2e_assert_no_log() {  # INSTANCE ERE [OFFSET] [MESSAGE]
    if e2e_log_since "$1" "${3:-0}" | grep -qE -- "$2"; then e2e_fail "${4:-unexpected /$2/ in $1 log}"; fi
}

e2e_queue_ids() { postqueue -c "$(e2e_etc "${1:-sender}")" -j 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    print(json.loads(line)["queue_id"])'; }

# ---------------------------------------------------------------- instance settings

# e2e_postconf INSTANCE KEY=VALUE...: changes main.cf settings of a started
# instance (postconf -e) and reloads it.
e2e_postconf() {
    local inst=$1 etc
    shift
    etc=$(e2e_etc "$inst")
    postconf -c "$etc" -e "$@" || e2e_fail "postconf -e failed for $inst"
    postfix -c "$etc" reload >/dev/null 2>&1 || e2e_fail "reload failed for $inst"
}

# e2e_local_mailboxes INSTANCE LOCALPART...: the started instance delivers
# LOCALPART@INSTANCE.e2e.test with virtual(8), as user nobody, into the mbox
# file $(e2e_mailbox INSTANCE LOCALPART), so a test reads what Postfix
# delivered locally (Return-Path, headers, body).
e2e_local_mailboxes() {
    local inst=$1 etc dir u
    shift
    etc=$(e2e_etc "$inst")
    dir=$E2E_DIR/$inst/mail
    id nobody >/dev/null 2>&1 || e2e_skip "no user nobody"
    mkdir -p "$dir"
    chown nobody "$dir"
    chmod 755 "$dir"
    : >"$etc/vmailbox"
    for u in "$@"; do printf '%s@%s.e2e.test %s\n' "$u" "$inst" "$u" >>"$etc/vmailbox"; done
    grep -q '^virtual ' "$etc/master.cf" ||
        echo "virtual   unix  -       n       n       -       -       virtual" >>"$etc/master.cf"
    e2e_postconf "$inst" "virtual_mailbox_domains=$inst.e2e.test" "virtual_mailbox_base=$dir" \
        "virtual_mailbox_maps=texthash:$etc/vmailbox" "virtual_uid_maps=static:$(id -u nobody)" \
        "virtual_gid_maps=static:$(id -g nobody)" "virtual_minimum_uid=1"
}

e2e_mailbox() { echo "$E2E_DIR/$1/mail/$2"; }

# ---------------------------------------------------------------- command proxy

# e2e_start_command_proxy: Postfix lets a user other than root name a
# configuration directory (sendmail -C, postqueue -c) only when the system's
# /etc/postfix/main.cf lists it, and the harness never touches the system
# instance. A daemon that runs as nobody and must run the test instance's
# sendmail or postqueue is pointed at $E2E_PROXY_DIR/bin/{sendmail,postqueue}:
# each call hands its arguments and standard input to a helper running as
# root, which runs /usr/sbin/sendmail or /usr/sbin/postqueue with exactly
# those (and nothing else), and returns its exit status. Every call is
# appended to $E2E_PROXY_DIR/calls.log.
E2E_PROXY_DIR=
e2e_start_command_proxy() {
    local name
    E2E_PROXY_DIR=$E2E_DIR/proxy
    mkdir -p "$E2E_PROXY_DIR/spool" "$E2E_PROXY_DIR/bin"
    chmod 755 "$E2E_PROXY_DIR" "$E2E_PROXY_DIR/bin"
    chmod 1777 "$E2E_PROXY_DIR/spool"
    : >"$E2E_PROXY_DIR/calls.log"
    chmod 644 "$E2E_PROXY_DIR/calls.log"
    for name in sendmail postqueue; do
        cat >"$E2E_PROXY_DIR/bin/$name" <<PROXY
#!/bin/bash
set -u
spool=$E2E_PROXY_DIR/spool
id=\$\$.\$RANDOM
mkdir "\$spool/tmp.\$id" || exit 75
cat >"\$spool/tmp.\$id/stdin"
printf '%s\0' $name "\$@" >"\$spool/tmp.\$id/argv"
mv "\$spool/tmp.\$id" "\$spool/req.\$id"
for _ in \$(seq 600); do
    if [ -f "\$spool/req.\$id/rc" ]; then cat "\$spool/req.\$id/out" >&2; exit "\$(cat "\$spool/req.\$id/rc")"; fi
    sleep 0.05
done
exit 75
PROXY
        chmod 755 "$E2E_PROXY_DIR/bin/$name"
    done
    cat >"$E2E_PROXY_DIR/helper.sh" <<'HELPER'
#!/bin/bash
# Runs the requests the proxy scripts leave in SPOOL, as root.
spool=$1 calls=$2
while :; do
    for r in "$spool"/req.*; do
        [ -d "$r" ] && [ ! -f "$r/rc" ] || continue
        mapfile -d '' -t a <"$r/argv"
        case ${a[0]} in sendmail | postqueue) ;; *) echo 64 >"$r/rc"; continue ;; esac
        printf '%s\n' "$(printf '%q ' "${a[@]}")" >>"$calls"
        rc=0
        "/usr/sbin/${a[0]}" "${a[@]:1}" <"$r/stdin" >"$r/out" 2>&1 || rc=$?
        echo "$rc" >"$r/rc.tmp"
        mv "$r/rc.tmp" "$r/rc"
    done
    sleep 0.05
done
HELPER
    e2e_start_daemon command-proxy bash "$E2E_PROXY_DIR/helper.sh" "$E2E_PROXY_DIR/spool" "$E2E_PROXY_DIR/calls.log"
}

# e2e_log_epoch LINE: the time stamp of a Postfix log line in seconds since the epoch.
e2e_log_epoch() { date -d "$(cut -c1-15 <<<"$1")" +%s; }
