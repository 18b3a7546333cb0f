# milter_lib.sh -- e2e setup for retryguard-milter on top of lib.sh: a receiver
# that defers defer.e2e.test with 451 4.3.5, a sending Postfix with the milter
# as smtpd_milters and non_smtpd_milters, the milter itself (unprivileged,
# SQLite ledger, verdicts into the sender's log through postlogd), and
# retryguard-policyd following the sender's log into the same ledger (its
# policy service listens on 127.0.0.1:$POLICY_PORT; wiring it into the sender
# is up to the caller).
#   . "$(dirname "$0")/milter_lib.sh"
#   milter_e2e_begin NAME SECONDS [extra milter options (-o key=value)...]
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FROM=alice@ok.e2e.test

milter_e2e_begin() {
    local name=$1 limit=$2
    shift 2
    e2e_begin "$name" "$limit"
    [ -x "${RETRYGUARD_MILTER:-}" ] || e2e_fail "RETRYGUARD_MILTER is not set to the built retryguard-milter"
    [ -x "${RETRYGUARD_POLICYD:-}" ] || e2e_fail "RETRYGUARD_POLICYD is not set to the built retryguard-policyd"
    id nobody >/dev/null 2>&1 || e2e_skip "no user nobody"
    mkdir -p "$E2E_DIR/milter" "$E2E_DIR/ledger"
    chmod 755 "$E2E_DIR/milter"
    # the milter runs as nobody and removes its socket on the way out, as the
    # package's does in its own runtime directory
    chown nobody:nogroup "$E2E_DIR/milter"
    chown nobody:nogroup "$E2E_DIR/ledger"
    MILTER_SOCK=$E2E_DIR/milter/milter.sock
    LEDGER=sqlite:$E2E_DIR/ledger/ledger.db
    # The milter reads its configuration file (MILTER_CONFIG_TEXT, default empty)
    # and this test's settings as -o overrides, as an admin would give them.
    MILTER_CONFIG=$E2E_DIR/milter/retryguard.yaml
    printf '%s\n' "${MILTER_CONFIG_TEXT:-}" >"$MILTER_CONFIG"
    chmod 644 "$MILTER_CONFIG"
    local ledger=(-o "ledger.sqlite.path=$E2E_DIR/ledger/ledger.db")
    # MILTER_REDIS_ADDRESS: a Redis ledger for the milter only (default: the SQLite $LEDGER)
    [ -n "${MILTER_REDIS_ADDRESS:-}" ] && ledger=(-o ledger.backend=redis -o "ledger.redis.address=$MILTER_REDIS_ADDRESS")
    MILTER_ARGS=(-c "$MILTER_CONFIG" -o "milter.socket=unix:$MILTER_SOCK" -o milter.user=nobody
        -o milter.group=postfix -o milter.socket_mode=0660 "${ledger[@]}"
        -o "log.verdicts=postlog:$E2E_DIR/sender/spool/public/postlog" -o log.hostname=sender
        -o milter.minimal_backoff=3s -o milter.maximal_backoff=6s "$@")
    e2e_start_receiver
    e2e_start_sender "unix:$MILTER_SOCK"
    milter_start
    policyd_start
}

# retryguard-policyd as installed (lib.sh), on the milter's ledger.
policyd_start() {
    e2e_start_policyd
}

milter_start() {
    e2e_start_daemon milter "$RETRYGUARD_MILTER" "${MILTER_ARGS[@]}"
    for _ in $(seq 100); do [ -S "$MILTER_SOCK" ] && break; sleep 0.05; done
    [ -S "$MILTER_SOCK" ] || e2e_daemon_failed milter "socket $MILTER_SOCK did not appear"
    e2e_wait_log sender "retryguard/milter\[[0-9]+\]: starting: " 10
}

# verdict_for QID [INSTANCE]: the milter's verdict line for a queue id in the
# instance's log (default sender; waits up to 20 s).
verdict_for() {
    local inst=${2:-sender}
    e2e_wait_log "$inst" "retryguard/milter\[[0-9]+\]: $1: verdict=" 20
    e2e_log_since "$inst" | grep -E "retryguard/milter\[[0-9]+\]: $1: verdict=" | tail -1
}

# last_verdict_since OFFSET [INSTANCE]: the last verdict line logged from
# OFFSET on (waits up to 20 s).
last_verdict_since() {
    local inst=${2:-sender}
    e2e_wait_log "$inst" "retryguard/milter\[[0-9]+\]: [0-9A-Za-z]+: verdict=" 20 1 "$1"
    e2e_log_since "$inst" "$1" | grep -E "retryguard/milter\[[0-9]+\]: [0-9A-Za-z]+: verdict=" | tail -1
}

# Waits until QID's deferral has been logged and the log follower has
# carried it into the ledger.
wait_deferred() {  # QID RCPT [INSTANCE]
    e2e_wait_ingested "${3:-sender}" "$1: to=<$2>,.* status=deferred" 30
}

assert_field() {  # LINE KEY VALUE
    case " $1 " in *" $2=$3 "*) ;; *) e2e_fail "expected $2=$3 in: $1" ;; esac
}
