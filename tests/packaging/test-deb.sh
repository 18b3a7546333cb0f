#!/usr/bin/env bash
# test-deb.sh -- builds the Debian package, checks it with lintian (errors
# fail), installs it on this machine with dpkg, checks files, user, conffile
# and directories, starts the units' ExecStart commands as systemd would (as
# user retryguard) and talks to them, then checks that a reinstall keeps an
# edited conffile and the ledger and that purge removes what install created.
# In between, the milter and policy end-to-end checks (tests/e2e/) run against
# the installed programs.
#
# It changes the real system (a package, a system user): it refuses to run when
# retryguard is already installed, and purges the package on any exit. It
# kills only the processes it started, by pid. Needs root; exits 77 (skipped)
# without root or the packaging tools, except under CI=true where that fails.
set -euo pipefail
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
src="$(cd "$(dirname "$0")/../.." && pwd)"
out="${RETRYGUARD_DEB_DIR:-$src/build-deb}"

log() { printf 'test-deb: %s\n' "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
skip() {
  [ "${CI:-}" = true ] && fail "prerequisite missing under CI: $*"
  log "SKIP: $*"; exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (installs the package)"
# The packaging tools are an opt-in install (scripts/install-deps.sh --package):
# without them the test is skipped, loudly, under CI too.
for t in dpkg-buildpackage dh lintian python3 setpriv; do
  command -v "$t" >/dev/null || {
    log "SKIP: ****** $t missing: run scripts/install-deps.sh --package to test the package ******"
    exit 77; }
done
if dpkg-query -W -f='${Status}' retryguard 2>/dev/null | grep -q installed; then
  skip "retryguard is installed on this machine already; not touching it"
fi

work=$(mktemp -d /tmp/retryguard-deb.XXXXXX)
pids=()
installed=0
cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ "$installed" = 1 ]; then dpkg --purge retryguard >/dev/null 2>&1 || true; fi
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT
trap 'exit 143' TERM INT

log "building the package"
deb=$("$src/packaging/build-deb.sh" "$out")
[ -f "$deb" ] || fail "no .deb from build-deb.sh"

log "lintian $deb"
lintian --fail-on error --tag-display-limit 0 "$deb" >"$work/lintian.txt" 2>&1 || {
  cat "$work/lintian.txt" >&2; fail "lintian reports errors"; }
sed 's/^/  /' "$work/lintian.txt" >&2
grep -q '^E:' "$work/lintian.txt" && fail "lintian reports errors"

log "dpkg -i"
installed=1
dpkg -i "$deb" >"$work/dpkg.txt" 2>&1 || { cat "$work/dpkg.txt" >&2; fail "dpkg -i failed"; }

for f in /usr/bin/retryguard /usr/sbin/retryguard-milter /usr/sbin/retryguard-policyd; do
  [ -x "$f" ] || fail "$f missing"
done
for f in /etc/retryguard/retryguard.yaml /usr/share/retryguard/classifier.yaml \
         /lib/systemd/system/retryguard-milter.service /lib/systemd/system/retryguard-policyd.service \
         /usr/lib/tmpfiles.d/retryguard.conf \
         /usr/share/man/man1/retryguard.1.gz /usr/share/man/man5/retryguard.yaml.5.gz \
         /usr/share/man/man8/retryguard-milter.8.gz /usr/share/man/man8/retryguard-policyd.8.gz \
         /usr/share/doc/retryguard/main.cf.snippet /usr/share/doc/retryguard/master.cf.snippet \
         /usr/share/doc/retryguard/configuration.md /usr/share/doc/retryguard/copyright; do
  [ -f "$f" ] || fail "$f missing"
done
ls /usr/share/doc/retryguard/README* >/dev/null 2>&1 || fail "README missing from the docs"
# No build or source path compiled into the shipped programs (debug info goes
# to the dbgsym package): they must not depend on where they were built.
for f in /usr/bin/retryguard /usr/sbin/retryguard-milter /usr/sbin/retryguard-policyd; do
  paths=$(strings "$f" | grep -F -e "$src" -e /build-deb/ -e /obj-x86_64 -e /obj-aarch64 | head -3 || true)
  [ -z "$paths" ] || fail "$f names a build or source path: $paths"
done
cmp -s /etc/retryguard/retryguard.yaml "$src/conf/retryguard.yaml" || fail "installed config is not conf/retryguard.yaml"
dpkg-query -W -f='${Conffiles}\n' retryguard | grep -q '/etc/retryguard/retryguard.yaml' ||
  fail "/etc/retryguard/retryguard.yaml is not a conffile"
for u in /lib/systemd/system/retryguard-milter.service /lib/systemd/system/retryguard-policyd.service; do
  for want in 'Type=notify' 'User=retryguard' 'NoNewPrivileges=yes' \
              'ProtectSystem=strict' 'ReadWritePaths=/var/lib/retryguard /var/spool/postfix/retryguard' \
              'PrivateTmp=yes' 'ProtectHome=yes'; do
    grep -qxF "$want" "$u" || fail "$u lacks $want"
  done
done
grep -qxF 'ExecReload=/bin/kill -HUP $MAINPID' /lib/systemd/system/retryguard-policyd.service ||
  fail "policyd unit: no SIGHUP reload"
grep -qxF 'ExecReload=/bin/kill -USR1 $MAINPID' /lib/systemd/system/retryguard-milter.service ||
  fail "milter unit: no SIGUSR1 reload (libmilter stops on SIGHUP)"
grep -q 'unix:retryguard/milter.sock' /usr/share/doc/retryguard/main.cf.snippet || fail "main.cf snippet: milter socket"
grep -q 'unix:retryguard/policy.sock' /usr/share/doc/retryguard/main.cf.snippet || fail "main.cf snippet: policy socket"

# The system user and its group; postfix in it when Postfix is installed.
uid=$(id -u retryguard) || fail "user retryguard missing"
[ "$uid" -lt 1000 ] || fail "retryguard is not a system user (uid $uid)"
[ "$(getent passwd retryguard | cut -d: -f7)" != /bin/bash ] || fail "retryguard has a login shell"
# Postfix's daemons keep only their primary group (set_ugid), so they reach the
# sockets through the socket directory's group, not through membership.
if getent passwd postfix >/dev/null; then
  ! id -nG postfix | tr ' ' '\n' | grep -qx retryguard || fail "postfix was put in group retryguard"
  want_spool="retryguard:postfix 2750"
else
  want_spool="retryguard:retryguard 2750"
fi
[ "$(stat -c '%U:%G %a' /var/lib/retryguard)" = "retryguard:retryguard 750" ] ||
  fail "/var/lib/retryguard: $(stat -c '%U:%G %a' /var/lib/retryguard), want retryguard:retryguard 750"
[ "$(stat -c '%U:%G %a' /var/spool/postfix/retryguard)" = "$want_spool" ] ||
  fail "/var/spool/postfix/retryguard: $(stat -c '%U:%G %a' /var/spool/postfix/retryguard), want $want_spool"

# The classifier finds its rules in the installed data dir.
out_cls=$(cd / && /usr/bin/retryguard classify '451 4.3.5 System config error') || fail "retryguard classify failed"
grep -q 'category *receiver-config' <<<"$out_cls" || fail "classify did not use the installed rules: $out_cls"
log "classify: $(grep category <<<"$out_cls")"

# ExecStart of a unit, continuation lines joined, as systemd would run it:
# as User/Group of the unit with its supplementary groups, cwd /.
# (A sed range would run past a one-line ExecStart: its end is only looked for
# from the next line on.)
exec_start() {
  awk 'index($0, "ExecStart=") == 1 {
      v = substr($0, 11)
      while (v ~ /\\$/) { sub(/\\$/, "", v); if ((getline line) <= 0) break; v = v " " line }
      print v; exit }' "$1"
}
run_unit() {  # UNIT LOGFILE
  local cmd; cmd=$(exec_start "/lib/systemd/system/$1.service")
  log "starting $1: $cmd"
  # shellcheck disable=SC2086
  (cd / && exec setpriv --reuid retryguard --regid retryguard --init-groups --no-new-privs \
     env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin $cmd) >"$2" 2>&1 &
  pids+=($!)
}
wait_socket() {  # PATH SECONDS
  local i
  for ((i = 0; i < $2 * 10; i++)); do [ -S "$1" ] && return 0; sleep 0.1; done
  return 1
}
run_unit retryguard-policyd "$work/policyd.log"
run_unit retryguard-milter "$work/milter.log"
wait_socket /var/spool/postfix/retryguard/policy.sock 15 || { cat "$work/policyd.log" >&2; fail "no policy socket"; }
wait_socket /var/spool/postfix/retryguard/milter.sock 15 || { cat "$work/milter.log" >&2; fail "no milter socket"; }
[ "$(stat -c %U /var/spool/postfix/retryguard/policy.sock)" = retryguard ] || fail "policy socket not owned by retryguard"

# A policy request over the socket, as smtpd sends it (as the postfix user
# when there is one, with only its primary group, as Postfix's daemons run).
asker=(python3)
getent passwd postfix >/dev/null && asker=(setpriv --reuid postfix --regid postfix --clear-groups python3)
answer=$("${asker[@]}" - <<'PY'
import socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect("/var/spool/postfix/retryguard/policy.sock")
s.sendall(b"request=smtpd_access_policy\nprotocol_state=RCPT\nprotocol_name=ESMTP\n"
          b"sender=a@example.org\nrecipient=b@example.com\nqueue_id=\n\n")
data = b""
while not data.endswith(b"\n\n"):
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
print(data.decode().strip())
PY
) || fail "policy request failed"
log "policy answer: $answer"
[[ "$answer" == action=* ]] || fail "policy answer is not action=...: $answer"
# The milter opened (created) its SQLite ledger in the state directory.
for ((i = 0; i < 50; i++)); do [ -f /var/lib/retryguard/ledger.db ] && break; sleep 0.1; done
[ -f /var/lib/retryguard/ledger.db ] || { cat "$work/milter.log" >&2; fail "milter created no ledger"; }
# ExecReload, as `systemctl reload` sends it: both daemons keep running.
i=0
for u in retryguard-policyd retryguard-milter; do
  sig=$(sed -n 's/^ExecReload=\/bin\/kill -\([A-Z0-9]*\) \$MAINPID$/\1/p' "/lib/systemd/system/$u.service")
  [ -n "$sig" ] || fail "$u: no ExecReload=/bin/kill -SIG \$MAINPID"
  kill -"$sig" "${pids[i]}" || fail "$u: cannot send SIG$sig"
  i=$((i + 1))
done
sleep 1
for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || fail "a daemon exited early (pid $p)"; done
grep -q 'reloaded /etc/retryguard/retryguard.yaml' "$work/milter.log" 2>/dev/null ||
  log "(the milter logs to syslog here; its reload line is checked by the e2e tests)"
for p in "${pids[@]}"; do kill "$p"; wait "$p" 2>/dev/null || true; done
pids=()

# The end-to-end checks, with real Postfix, against the installed programs
# (the same scripts the build's e2e tests run): milter (resend refused over
# SMTP and sendmail, by Message-ID and by content; fail open when killed) and
# policy service (live log follower, escalation, WARN in Postfix's log).
e2e() {  # NAME COMMAND...
  local name=$1 rc=0
  shift
  log "e2e against the installed programs: $name"
  RETRYGUARD_MILTER=/usr/sbin/retryguard-milter RETRYGUARD_POLICYD=/usr/sbin/retryguard-policyd \
    RETRYGUARD_CLI=/usr/bin/retryguard "$@" >"$work/$name.log" 2>&1 || rc=$?
  [ "$rc" = 0 ] && return 0
  cat "$work/$name.log" >&2
  [ "$rc" = 77 ] && skip "$name: a prerequisite is missing (postfix, swaks?)"
  fail "$name failed against the installed programs"
}
e2e milter_resend bash "$src/tests/e2e/milter_resend_test.sh"
e2e milter_failopen bash "$src/tests/e2e/milter_failopen_test.sh"
e2e policyd_live bash "$src/tests/e2e/policyd_live_postfix.sh" /usr/sbin/retryguard-policyd

log "upgrade: reinstall over an edited conffile and a ledger"
echo "# edited by the administrator" >>/etc/retryguard/retryguard.yaml
sum=$(sha256sum /var/lib/retryguard/ledger.db | cut -d' ' -f1)
dpkg -i --force-confold "$deb" >"$work/dpkg2.txt" 2>&1 || { cat "$work/dpkg2.txt" >&2; fail "reinstall failed"; }
tail -1 /etc/retryguard/retryguard.yaml | grep -qx '# edited by the administrator' || fail "reinstall lost the edited conffile"
[ "$(sha256sum /var/lib/retryguard/ledger.db | cut -d' ' -f1)" = "$sum" ] || fail "reinstall changed the ledger"
[ "$(id -u retryguard)" = "$uid" ] || fail "reinstall changed the user"

log "remove keeps the ledger, purge removes what install created"
dpkg --remove retryguard >/dev/null
[ -f /var/lib/retryguard/ledger.db ] || fail "remove deleted the ledger"
[ -f /etc/retryguard/retryguard.yaml ] || fail "remove deleted the conffile"
dpkg --purge retryguard >/dev/null
installed=0
! getent passwd retryguard >/dev/null || fail "purge left the user"
! getent group retryguard >/dev/null || fail "purge left the group"
for d in /var/lib/retryguard /var/spool/postfix/retryguard /etc/retryguard /usr/bin/retryguard; do
  [ ! -e "$d" ] || fail "purge left $d"
done
log "PASS"
echo "1 passed, 0 failed"
