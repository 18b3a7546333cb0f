#!/usr/bin/env bash
# import_bulk_load_test.sh -- `retryguard import` into an empty Redis ledger
# (ledger.redis.bulk_load, docs/ledger.md "Bulk load into an empty Redis
# ledger"), through the CLI as an admin runs it, against a private
# redis-server on a free loopback port:
#   - the bulk load says what it copied and prints the verdicts the batch-by-
#     batch import prints, and what the CLI reads back is the same;
#   - ledger.redis.bulk_load=false imports batch by batch, without a bulk load;
#   - a second import into the bulk-loaded ledger goes batch by batch and finds
#     every event known (the replay keys were copied);
#   - the temporary ledger is gone afterwards.
#
#   import_bulk_load_test.sh RETRYGUARD
set -euo pipefail
RG=${1:?usage: $0 RETRYGUARD}
HERE=$(cd "$(dirname "$0")" && pwd)
command -v redis-server > /dev/null || {
    echo "*** REDIS NOT AVAILABLE: redis-server not installed; this test did NOT run ***"
    exit 1
}
DIR=$(mktemp -d "${TMPDIR:-/tmp}/rg-bulk-cli.XXXXXX")
RPID=
cleanup() {
    [ -n "$RPID" ] && kill "$RPID" 2> /dev/null
    wait 2> /dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    exit 1
}

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR" > "$DIR/redis.log" 2>&1 &
RPID=$!
for _ in $(seq 100); do redis-cli -p "$PORT" ping > /dev/null 2>&1 && break; sleep 0.05; done

python3 "$HERE/../crash/gen_log.py" 6000 11 > "$DIR/mail.log"
cat > "$DIR/rg.yaml" << EOF
categories: {receiver_config: {watch_after_deferrals: 2, escalate_after: 20m}}
flags: {episodes: 2, period: 1d, ttl: 3h}
metrics: {enabled: false}
EOF
mkdir "$DIR/tmp"
rg() {  # rg PREFIX COMMAND [SUBCOMMAND] ARGS... (the -o options before the files: -o takes several)
    local prefix=$1 cmd=(${2})
    shift 2
    TMPDIR=$DIR/tmp "$RG" "${cmd[@]}" -c "$DIR/rg.yaml" -o ledger.backend=redis -o "ledger.redis.address=127.0.0.1:$PORT" \
        -o "ledger.redis.key_prefix=$prefix" -o ledger.redis.timeout=5s "$@"
}

# The bulk load.
rg bulk: import --utc "$DIR/mail.log" > "$DIR/bulk.out" 2> "$DIR/bulk.err" || { cat "$DIR/bulk.err"; fail "bulk import"; }
grep -q "bulk load: copied [1-9][0-9]* messages" "$DIR/bulk.err" || { cat "$DIR/bulk.err"; fail "no bulk load reported"; }
[ -z "$(ls -A "$DIR/tmp")" ] || fail "the temporary ledger was left behind: $(ls "$DIR/tmp")"

# ledger.redis.bulk_load=false: batch by batch without a bulk load.
rg batch: import -o ledger.redis.bulk_load=false --utc "$DIR/mail.log" > "$DIR/batch.out" 2> "$DIR/batch.err" ||
    { cat "$DIR/batch.err"; fail "batch import"; }
! grep -q "bulk load" "$DIR/batch.err" || fail "bulk load with ledger.redis.bulk_load=false"
[ -s "$DIR/batch.out" ] || fail "no verdicts: the log escalates nothing, the comparison below would be empty"
cmp "$DIR/bulk.out" "$DIR/batch.out" || fail "the verdicts differ"
grep -q " 0 already known" "$DIR/bulk.err" || fail "the bulk load skipped events: $(cat "$DIR/bulk.err")"

# What the CLI reads back.
for cmd in "destinations|--json" "escalations|--json --since 3650d" "flags list|--json --all"; do
    # shellcheck disable=SC2086
    rg bulk: "${cmd%%|*}" ${cmd#*|} > "$DIR/a.json" 2> /dev/null || true
    # shellcheck disable=SC2086
    rg batch: "${cmd%%|*}" ${cmd#*|} > "$DIR/b.json" 2> /dev/null || true
    python3 - "$DIR/a.json" "$DIR/b.json" "$cmd" << 'EOF' || exit 1
import json, sys
def load(p):
    d = json.load(open(p))
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("now", "generated_at")}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x
    return strip(d)
a, b = load(sys.argv[1]), load(sys.argv[2])
if a != b:
    print("FAIL: `%s` differs between the bulk load and the batch-by-batch import" % sys.argv[3])
    sys.exit(1)
if not a:
    print("FAIL: `%s` is empty" % sys.argv[3])
    sys.exit(1)
EOF
done
qid=$(awk 'match($0, / [0-9A-F][0-9A-F]+: /) { print substr($0, RSTART + 1, RLENGTH - 3); exit }' "$DIR/mail.log")
[ -n "$qid" ] || fail "no queue id in the log"
rg bulk: explain --json "$qid" | python3 -c 'import json,sys; d=json.load(sys.stdin); d.pop("now",None); print(json.dumps(d,sort_keys=True))' > "$DIR/ea"
rg batch: explain --json "$qid" | python3 -c 'import json,sys; d=json.load(sys.stdin); d.pop("now",None); print(json.dumps(d,sort_keys=True))' > "$DIR/eb"
cmp -s "$DIR/ea" "$DIR/eb" || fail "explain $qid differs"

# Not empty any more: batch by batch, every event known.
rg bulk: import --utc -q "$DIR/mail.log" 2> "$DIR/again.err" || { cat "$DIR/again.err"; fail "second import"; }
! grep -q "bulk load" "$DIR/again.err" || fail "a second bulk load into a ledger with data"
tail -1 "$DIR/again.err" | grep -q " 0 new," || fail "events recorded twice: $(tail -1 "$DIR/again.err")"
echo "PASS: bulk load of $(grep -c . "$DIR/mail.log") lines, $(wc -l < "$DIR/bulk.out") verdicts, the same as batch by batch"
