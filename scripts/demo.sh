#!/usr/bin/env bash
# demo.sh -- the first run: on a Debian 12 machine as root, installs what the
# build needs, builds, and shows retryguard end to end on loopback with the
# SQLite ledger: a receiver that answers 451 4.3.5 System config error, a
# sending Postfix with retryguard wired in (the milter for smtpd and sendmail,
# the policy service in smtpd_recipient_restrictions, the log follower feeding
# the ledger), a message that gets deferred, a manual resend that is refused,
# and what retryguard recorded.
#
#   scripts/demo.sh              install deps, build, run the demo
#   scripts/demo.sh --no-build   run the demo with the programs in build/
#
# Everything runs in one temp dir with private Postfix instances (the system
# Postfix is not used or touched) and is stopped on exit, also on failure or
# Ctrl-C: nothing is left listening.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${RETRYGUARD_BUILD_DIR:-$root/build}

if [ "$(id -u)" != 0 ]; then
  echo "demo: run as root (it installs packages and starts private Postfix instances)" >&2
  exit 2
fi
if [ "${1:-}" != --no-build ]; then
  scripts/install-deps.sh
  scripts/build.sh
fi
export RETRYGUARD_CLI=$build/tools/retryguard
export RETRYGUARD_MILTER=$build/milter/retryguard-milter
export RETRYGUARD_POLICYD=$build/policyd/retryguard-policyd
for p in "$RETRYGUARD_CLI" "$RETRYGUARD_MILTER" "$RETRYGUARD_POLICYD"; do
  [ -x "$p" ] || { echo "demo: $p is not built (scripts/build.sh)" >&2; exit 2; }
done

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# shellcheck source=../tests/e2e/milter_lib.sh
. "$root/tests/e2e/milter_lib.sh"
milter_e2e_begin demo 240

# The policy service, consulted by the sender's smtpd for every recipient:
# the same retryguard-policyd that follows the sender's log (milter_lib.sh).
postconf -c "$(e2e_etc sender)" -e \
  "smtpd_recipient_restrictions = check_policy_service { inet:127.0.0.1:$POLICY_PORT, default_action=DUNNO }, permit_mynetworks, reject"
postfix -c "$(e2e_etc sender)" reload >/dev/null 2>&1
sleep 1

say "Postfix (sender) main.cf: retryguard wired in"
postconf -c "$(e2e_etc sender)" -n | grep -E '^(smtpd_milters|non_smtpd_milters|milter_default_action|smtpd_recipient_restrictions) '

say "1. Alice sends a report to bob@defer.e2e.test; the receiver answers 451 4.3.5"
mid="report-$$@client.e2e.test"
e2e_message "$E2E_DIR/report" "$mid" "$FROM" bob@defer.e2e.test "Quarterly report"
e2e_submit_smtp "$E2E_DIR/report" "$FROM" bob@defer.e2e.test || e2e_fail "the original was not accepted"
q1=$(e2e_qid_for_mid sender "$mid")
wait_deferred "$q1" bob@defer.e2e.test
grep -E "$q1: to=<bob@defer.e2e.test>.*status=deferred" "$(e2e_logfile sender)" | tail -1
echo "-> Postfix keeps $q1 in its queue and retries it on its own."

say "2. Alice resends it by hand: retryguard refuses the duplicate"
off=$(e2e_log_size sender)
if e2e_submit_smtp "$E2E_DIR/report" "$FROM" bob@defer.e2e.test; then e2e_fail "the resend was accepted"; fi
grep -E '^ *<\*\* ' <<<"$E2E_LAST_SWAKS" || true
last_verdict_since "$off"

say "3. The policy service's answers for these recipients"
grep -E 'retryguard[/-]policyd' "$(e2e_logfile sender)" | tail -3 ||
  echo "(no policy verdict lines: every answer was DUNNO, no destination is flagged yet)"

say "4. retryguard destinations (the ledger the policy daemon's log follower keeps)"
"$RETRYGUARD_CLI" destinations -c "$E2E_DIR/retryguard.yaml" --no-color

say "5. retryguard explain $q1"
"$RETRYGUARD_CLI" explain -c "$E2E_DIR/retryguard.yaml" --no-color "$q1"

say "Done: stopping the demo's Postfix instances and daemons"
