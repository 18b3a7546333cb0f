#!/usr/bin/env bash
# installed-host-test.sh -- the package on a real Postfix host, the way a mail
# admin gets there: a fresh Debian 12 tree (debootstrap minbase) with nothing
# installed, then, as root inside it:
#
#   apt-get install postfix rsyslog ./retryguard_*.deb   (the .deb built from this tree)
#   the documented admin steps of docs/packaging.md ("Wiring the system Postfix"),
#   the daemons started as their units start them,
#
# and a receiver on loopback that answers `451 4.3.5 System config error`. It
# sends one message with `sendmail` and one over SMTP, waits for Postfix's
# status=deferred, resends both ways and checks: the SMTP resend gets the
# milter's 5xx; the sendmail resend is bounced to its submitter with the
# explanation (cleanup's treatment of a milter reject on that path); the
# verdict lines are in /var/log/mail.log, written by rsyslog; `retryguard
# destinations` and `retryguard explain QID` show them; a restart of the
# policy daemon loses nothing; `check-config` finds the Postfix side wired.
# A second round does the same with the journal as the log source. Then
# `apt-get purge` removes it all.
#
# systemd cannot be PID 1 here (see docs/packaging.md: systemd-nspawn -b never
# reaches a console on these machines), so each daemon is started with its
# unit's ExecStart under the unit's User=, Group=, the user's groups plus
# SupplementaryGroups=, and UMask=, and the unit files are checked with
# `systemd-analyze verify`.
#
# Slow (a fresh tree and a package build): labels `slow;packaging`. Needs root,
# debootstrap and the Debian mirror this machine's apt uses. Exits 77 (skipped)
# without them, except under CI=true where that fails.
set -euo pipefail
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
src="$(cd "$(dirname "$0")/../.." && pwd)"
out="${RETRYGUARD_DEB_DIR:-$src/build-deb}"

log() { printf 'installed-host: %s\n' "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
skip() {
  [ "${CI:-}" = true ] && fail "prerequisite missing under CI: $*"
  log "SKIP: ****** $* ******"; exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, chroot, mounts)"
for t in debootstrap dpkg-buildpackage dh rsync; do
  command -v "$t" >/dev/null || skip "$t missing: run scripts/install-deps.sh --package"
done
[ -e /etc/retryguard-debootstrap-tree ] && fail "already inside a tree made by a test"

mirror=${RETRYGUARD_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs: *//p' |
             tr ' ' '\n' | grep -E '/debian/?$' | head -1 || true)
  [ -n "$mirror" ] || mirror=$(grep -hE '^deb +(\[[^]]*\] +)?https?://[^ ]+/debian/? +bookworm( |$)' \
                                 /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
                               sed -E 's/^deb +(\[[^]]*\] +)?//' | cut -d' ' -f1 | head -1 || true)
  [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
fi

work=$(mktemp -d /var/tmp/retryguard-installed.XXXXXX)
tree=$work/tree
mounted=()
cleanup() {
  local rc=$? pid m
  # the journal lives in the tree's /run (a mount): read it before anything stops
  if [ "$rc" != 0 ] && [ "${system_log:-file}" = journal ]; then
    echo "---- journal (last 80 lines)" >&2
    chroot "$tree" journalctl -q --no-pager -o short-iso 2>&1 | tail -n 80 >&2 || true
  fi
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$tree" ] || continue
    kill -KILL "$pid" 2>/dev/null || true
  done
  sleep 0.2
  for ((m = ${#mounted[@]} - 1; m >= 0; m--)); do
    umount -R "${mounted[m]}" 2>/dev/null || umount -lR "${mounted[m]}" 2>/dev/null || true
  done
  if [ "$rc" != 0 ]; then
    ls -la "$tree/var/spool/postfix/retryguard" >&2 2>/dev/null || true
    for f in "$work"/*.out "$tree/var/log/mail.log"; do
      [ -f "$f" ] || continue
      echo "---- $f (last 60 lines)" >&2
      tail -n 60 "$f" >&2
    done
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

log "building the package"
deb=$("$src/packaging/build-deb.sh" "$out")
[ -f "$deb" ] || fail "no .deb from build-deb.sh"

log "debootstrap bookworm (minbase) from $mirror"
started=$(date +%s)
debootstrap --variant=minbase bookworm "$tree" "$mirror" >"$work/debootstrap.log" 2>&1 || {
  tail -30 "$work/debootstrap.log" >&2; fail "debootstrap failed"; }
log "tree made in $(($(date +%s) - started)) s"

bind() {  # SOURCE-OR-TYPE TARGET [mount options...]
  mkdir -p "$tree$2"
  mount "${@:3}" "$1" "$tree$2"
  mounted+=("$tree$2")
}
bind proc /proc -t proc
bind sysfs /sys -t sysfs
# journald needs a cgroup hierarchy it recognises ("Failed to acquire cgroup
# root path: No medium found" on this machine's v1 tmpfs): a cgroup2 view.
bind cgroup2 /sys/fs/cgroup -t cgroup2
# A private /dev: the tree's syslog daemon creates /dev/log, which must not be
# this machine's.
bind tmpfs /dev -t tmpfs -o mode=0755,nosuid
for n in null zero full random urandom tty; do
  touch "$tree/dev/$n"
  mount --bind "/dev/$n" "$tree/dev/$n"
done
ln -s /proc/self/fd "$tree/dev/fd"
ln -s /proc/self/fd/0 "$tree/dev/stdin"
ln -s /proc/self/fd/1 "$tree/dev/stdout"
ln -s /proc/self/fd/2 "$tree/dev/stderr"
mkdir -p "$tree/dev/shm"
bind tmpfs /run -t tmpfs -o mode=0755,nosuid,nodev
cp /etc/resolv.conf "$tree/etc/resolv.conf"
cp /etc/hosts "$tree/etc/hosts"
printf '#!/bin/sh\nexit 101\n' >"$tree/usr/sbin/policy-rc.d"
chmod 0755 "$tree/usr/sbin/policy-rc.d"
echo "made by retryguard's tests/packaging/installed-host-test.sh" >"$tree/etc/retryguard-debootstrap-tree"
echo mx.sender.test >"$tree/etc/mailname"
echo mx >"$tree/etc/hostname"
mkdir -p "$tree/opt/test"
cp "$deb" "$tree/opt/test/"
debname=$(basename "$deb")

in_tree() {  # COMMAND: a root login shell's environment inside the tree
  chroot "$tree" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 TERM=dumb /bin/bash -c "$1"
}

# The receiver: an SMTP server on 127.0.0.1 that answers every RCPT with
# 451 4.3.5 System config error (until /opt/test/accept exists).
cat >"$tree/opt/test/receiver.py" <<'PY'
import os, socketserver, sys
class H(socketserver.StreamRequestHandler):
    def w(self, s): self.wfile.write((s + "\r\n").encode()); self.wfile.flush()
    def handle(self):
        self.w("220 rx.test ESMTP")
        data = False
        while True:
            line = self.rfile.readline(4096)
            if not line: return
            if data:
                if line.rstrip(b"\r\n") == b".": data = False; self.w("250 2.0.0 Ok: queued")
                continue
            cmd = line.decode("latin-1").strip().upper()
            if cmd.startswith(("EHLO", "HELO")): self.w("250 rx.test")
            elif cmd.startswith("MAIL"): self.w("250 2.1.0 Ok")
            elif cmd.startswith("RCPT"):
                if os.path.exists("/opt/test/accept"): self.w("250 2.1.5 Ok")
                else: self.w("451 4.3.5 System config error")
            elif cmd == "DATA": self.w("354 End data with <CR><LF>.<CR><LF>"); data = True
            elif cmd == "QUIT": self.w("221 2.0.0 Bye"); return
            else: self.w("250 2.0.0 Ok")
class S(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
# Submission over SMTP as a mail client does (exit 0: accepted, 1: refused).
cat >"$tree/opt/test/submit.py" <<'PY'
import smtplib, sys
mid, rcpt, subject = sys.argv[1:4]
msg = (f"From: alice@mx.sender.test\r\nTo: {rcpt}\r\nSubject: {subject}\r\n"
       f"Message-ID: <{mid}>\r\n\r\nThe quarterly figures.\r\n")
try:
    with smtplib.SMTP("127.0.0.1", 25, timeout=30) as s:
        s.sendmail("alice@mx.sender.test", [rcpt], msg)
    print("accepted")
except smtplib.SMTPResponseException as e:
    print(f"refused {e.smtp_code} {e.smtp_error.decode(errors='replace')}")
    sys.exit(1)
except smtplib.SMTPRecipientsRefused as e:
    print(f"refused {e.recipients}")
    sys.exit(1)
PY

log "installing Postfix, rsyslog and $debname from nothing"
in_tree "printf '%s\n' 'postfix postfix/main_mailer_type select Internet Site' \
           'postfix postfix/mailname string mx.sender.test' | debconf-set-selections
         export DEBIAN_FRONTEND=noninteractive
         apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null &&
         apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends \
           postfix rsyslog python3 procps systemd /opt/test/$debname" >"$work/apt.log" 2>&1 || {
  tail -40 "$work/apt.log" >&2; fail "installing the package failed"; }
log "installed: $(in_tree "dpkg-query -W -f='\${Package} \${Version}\n' retryguard postfix rsyslog" | tr '\n' ' ')"

log "systemd-analyze verify the installed units"
in_tree "systemd-analyze verify --man=no /lib/systemd/system/retryguard-milter.service \
           /lib/systemd/system/retryguard-policyd.service" >"$work/verify.log" 2>&1 || {
  cat "$work/verify.log" >&2; fail "systemd-analyze verify found problems in the units"; }

# ---------------------------------------------------------------- admin steps
# Exactly the commands of docs/packaging.md, "Wiring the system Postfix".
admin_steps=$(sed -n '/^<!-- admin-steps:begin -->$/,/^<!-- admin-steps:end -->$/p' "$src/docs/packaging.md" |
                sed -n '/^```sh$/,/^```$/p' | grep -v '^```')
[ -n "$admin_steps" ] || fail "docs/packaging.md has no admin-steps block"
log "admin steps from docs/packaging.md:"
sed 's/^/  | /' <<<"$admin_steps" >&2
in_tree "set -e; $admin_steps" >"$work/admin.log" 2>&1 || { cat "$work/admin.log" >&2; fail "the admin steps failed"; }
rport=$((20000 + RANDOM % 10000))
in_tree "postconf -e 'inet_interfaces = loopback-only' 'inet_protocols = ipv4' 'relayhost = [127.0.0.1]:$rport' \
           'maximal_queue_lifetime = 5d' 'minimal_backoff_time = 300s'"

# -------------------------------------------------------------- the services
daemon_pids=()
start_syslog() {
  in_tree "rsyslogd -i /run/rsyslogd.pid" || fail "rsyslogd did not start"
  for _ in $(seq 50); do [ -S "$tree/dev/log" ] && break; sleep 0.1; done
  [ -S "$tree/dev/log" ] || fail "rsyslog made no /dev/log"
}
start_postfix() {
  # as the init script does (it prepares the chroot for smtpd)
  in_tree "/etc/init.d/postfix start" >"$work/postfix-start.log" 2>&1 || {
    cat "$work/postfix-start.log" >&2; fail "postfix did not start"; }
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/25") 2>/dev/null && break; sleep 0.1; done
}
unit_key() {  # UNIT KEY: the value, continuation lines joined
  awk -v k="$2" 'index($0, k "=") == 1 {
      v = substr($0, length(k) + 2)
      while (v ~ /\\$/) { sub(/\\$/, "", v); if ((getline line) <= 0) break; v = v " " line }
      print v; exit }' "$tree/lib/systemd/system/$1.service" | sed 's/[[:space:]][[:space:]]*/ /g; s/ $//'
}
start_unit() {  # UNIT: its ExecStart as systemd would run it
  local unit=$1 cmd user group umask groups g
  cmd=$(unit_key "$unit" ExecStart)
  user=$(unit_key "$unit" User) group=$(unit_key "$unit" Group) umask=$(unit_key "$unit" UMask)
  [ -n "$cmd" ] && [ -n "$user" ] || fail "$unit: no ExecStart or User"
  groups=$(in_tree "id -G $user" | tr ' ' ',')
  for g in $(unit_key "$unit" SupplementaryGroups); do
    groups+=",$(in_tree "getent group $g" | cut -d: -f3)"
  done
  # ExecStartPre= first, as systemd runs it: "+" with full privileges, "-" failure ignored.
  local pre flags
  pre=$(unit_key "$unit" ExecStartPre)
  if [ -n "$pre" ]; then
    flags=${pre%%/*} pre=/${pre#*/}
    [[ $flags == *+* ]] || fail "$unit: ExecStartPre without + is not emulated here: $flags$pre"
    log "$unit: ExecStartPre (as root): $pre"
    in_tree "$pre" >>"$work/$unit.out" 2>&1 || [[ $flags == *-* ]] || fail "$unit: ExecStartPre failed"
  fi
  log "starting $unit as $user:$group (groups $groups, umask ${umask:-0022}): $cmd"
  chroot "$tree" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c \
    "umask ${umask:-0022}; cd /; exec setpriv --reuid $user --regid $group --groups $groups --no-new-privs $cmd" \
    >>"$work/$unit.out" 2>&1 &
  daemon_pids+=("$!")
  eval "pid_${unit//-/_}=$!"
}
stop_unit() {  # UNIT
  local var="pid_${1//-/_}"
  kill -TERM "${!var}" 2>/dev/null || true
  wait "${!var}" 2>/dev/null || true
}
wait_socket() {  # PATH-IN-TREE SECONDS UNIT
  for _ in $(seq $(($2 * 10))); do [ -S "$tree$1" ] && return 0; sleep 0.1; done
  cat "$work/$3.out" >&2
  fail "$3: no socket $1"
}
mail_log=$tree/var/log/mail.log
system_log=file  # where the round reads the system's log: file (mail.log) or journal
log_text() {
  if [ "$system_log" = journal ]; then
    in_tree "journalctl -q --no-pager -o short-iso" 2>/dev/null || true
  else
    cat "$mail_log" 2>/dev/null || true
  fi
}
wait_log() {  # ERE SECONDS
  for _ in $(seq $(($2 * 10))); do log_text | grep -qE "$1" && return 0; sleep 0.1; done
  fail "no /$1/ in the system log ($system_log) within $2 s"
}
qid_of() {  # MESSAGE-ID: the queue id cleanup logged for it
  wait_log "postfix/cleanup\[[0-9]+\]: [0-9A-F]+: message-id=<$1>" 30
  log_text | grep -E "postfix/cleanup\[[0-9]+\]: [0-9A-F]+: message-id=<$1>" | head -1 |
    sed -E 's/.*cleanup\[[0-9]+\]: ([0-9A-F]+): .*/\1/'
}

log "root imports an old log before the daemons ever ran: the ledger stays theirs"
# An admin's first step is often to replay last month's log; the ledger that
# creates must still be writable by the daemons' user (docs/packaging.md).
# The destination recovered in that log: nothing of it is left to escalate
# (which would make the later listings exit 1).
owner=$(in_tree "stat -c %U:%G /var/lib/retryguard")  # the tree's names, not this host's
[ "$owner" = retryguard:retryguard ] || fail "/var/lib/retryguard is $owner after install"
[ ! -e "$tree/var/lib/retryguard/ledger.db" ] || fail "a ledger exists before anything ran"
cat >"$tree/tmp/history.log" <<'EOF'
Nov 29 20:50:20 mx postfix/qmgr[812]: 584D911616B: from=<ops@mx.sender.test>, size=412, nrcpt=1 (queue active)
Nov 29 20:50:20 mx postfix/smtp[2646]: 584D911616B: to=<ann@history.defer.test>, relay=192.0.2.7[192.0.2.7]:25, delay=0.22, delays=0.14/0.04/0/0.03, dsn=4.3.5, status=deferred (host 192.0.2.7[192.0.2.7] said: 451 4.3.5 Server configuration error (in reply to RCPT TO command))
Nov 29 20:56:02 mx postfix/smtp[2702]: 584D911616B: to=<ann@history.defer.test>, relay=192.0.2.7[192.0.2.7]:25, delay=342, delays=342/0.01/0.05/0.04, dsn=2.0.0, status=sent (250 2.0.0 Ok: queued as 4Lk2Qx0abc)
Nov 29 20:56:02 mx postfix/qmgr[812]: 584D911616B: removed
EOF
in_tree "retryguard import --year 2026 /tmp/history.log" >"$work/history-import.txt" 2>&1 || {
  cat "$work/history-import.txt" >&2; fail "root's import of an old log failed"; }
sed 's/^/  | /' "$work/history-import.txt" >&2
owners=$(in_tree "stat -c '%n %U:%G' /var/lib/retryguard/ledger.db*")
grep -q '^/var/lib/retryguard/ledger.db ' <<<"$owners" || fail "root's import made no ledger: $owners"
grep -v ' retryguard:retryguard$' <<<"$owners" && fail "root's import left files to another owner: $owners"
grep -q "made /var/lib/retryguard/ledger.db for retryguard:retryguard" "$work/history-import.txt" ||
  fail "root's import did not say it made the ledger for retryguard"
# and the daemons' user can write what root's import created
in_tree "setpriv --reuid retryguard --regid retryguard --init-groups retryguard import --year 2026 /tmp/history.log" \
  >"$work/history-again.txt" 2>&1 || { cat "$work/history-again.txt" >&2; fail "user retryguard cannot import into root's ledger"; }

# A ledger left to root some other way (an earlier version's import, a root
# sqlite3 session) is not given away behind the admin's back: root's command
# warns with the chown that fixes it, and that chown does.
in_tree "chown root:root /var/lib/retryguard/ledger.db"
out=$(in_tree "retryguard status --no-color" 2>&1) || true
fix=$(grep -o 'as root, run: chown .*' <<<"$out" | sed 's/^as root, run: //')
[ "$fix" = "chown retryguard:retryguard /var/lib/retryguard/ledger.db*" ] ||
  fail "root's command gave no chown for a root-owned ledger: $out"
in_tree "$fix"
owner=$(in_tree "stat -c %U:%G /var/lib/retryguard/ledger.db")
[ "$owner" = retryguard:retryguard ] || fail "the warning's chown left the ledger $owner"

in_tree "python3 /opt/test/receiver.py $rport" >"$work/receiver.log" 2>&1 &
start_syslog
start_postfix
start_unit retryguard-milter
start_unit retryguard-policyd
wait_socket /var/spool/postfix/retryguard/milter.sock 20 retryguard-milter
wait_socket /var/spool/postfix/retryguard/policy.sock 20 retryguard-policyd
[ "$(stat -c %U:%G "$mail_log")" = root:adm ] || fail "mail.log is $(stat -c %U:%G "$mail_log"), Debian's is root:adm"

log "check-config sees the Postfix side wired"
in_tree "retryguard check-config" >"$work/check-config.txt" 2>&1 || {
  cat "$work/check-config.txt" >&2; fail "check-config reports a problem on a wired host"; }
sed 's/^/  | /' "$work/check-config.txt" >&2

round() {  # NAME: one send/defer/resend round to NAME.defer.test; the log source is what the config says
  local name=$1 dom=$1.defer.test m1="smtp-$1-$$@mx.sender.test" m2="cmd-$1-$$@mx.sender.test" q1 q2 out
  local dre=${dom//./\\.}
  log "[$name] a message over SMTP and one with sendmail to $dom"
  in_tree "python3 /opt/test/submit.py $m1 bob@$dom 'report $name'" >/dev/null || fail "[$name] first SMTP send refused"
  in_tree "printf 'From: root@mx.sender.test\nTo: carol@$dom\nSubject: cron $name\nMessage-ID: <$m2>\n\nnightly\n' |
           sendmail -f root@mx.sender.test carol@$dom" || fail "[$name] sendmail failed"
  q1=$(qid_of "$m1") q2=$(qid_of "$m2")
  wait_log "$q1: to=<bob@$dre>,.* status=deferred .*451 4\.3\.5 System config error" 60
  wait_log "$q2: to=<carol@$dre>,.* status=deferred" 60
  # the policy daemon follows the log (batch delay 200 ms) into the ledger
  wait_log "retryguard/policyd\[[0-9]+\]: $dre: verdict=noted" 20
  sleep 1

  log "[$name] resend over SMTP: refused by the milter"
  if out=$(in_tree "python3 /opt/test/submit.py $m1 bob@$dom 'report $name'"); then
    fail "[$name] the SMTP resend was accepted: $out"
  fi
  grep -qE '^refused 55[0-9] ' <<<"$out" || fail "[$name] the SMTP resend was not refused with 5xx: $out"
  log "[$name]   $out"
  wait_log "retryguard/milter\[[0-9]+\]: [0-9A-F]+: verdict=reject path=smtp original=$q1 " 20

  log "[$name] resend with sendmail: bounced to the submitter with the explanation"
  in_tree "printf 'From: root@mx.sender.test\nTo: carol@$dom\nSubject: cron $name\nMessage-ID: <$m2>\n\nnightly\n' |
           sendmail -f root@mx.sender.test carol@$dom" || fail "[$name] sendmail resend failed to submit"
  wait_log "retryguard/milter\[[0-9]+\]: [0-9A-F]+: verdict=reject path=sendmail original=$q2 " 30
  wait_log "status=sent \(delivered to mailbox\)" 30

  log "[$name] retryguard destinations and explain show it"
  out=$(in_tree "retryguard destinations --no-color" 2>&1) || fail "[$name] retryguard destinations exited $?: $out"
  grep -qE "^domain +$dre +(noted|watch) +receiver-config" <<<"$out" || fail "[$name] destinations: $out"
  # the refusal reaches the ledger when the policy daemon has read the milter's
  # verdict line from the log (its follower batches; the journal is polled)
  for _ in $(seq 100); do
    out=$(in_tree "retryguard explain --no-color $q1")
    grep -q "resend refused" <<<"$out" && break
    sleep 0.1
  done
  grep -q "resend refused" <<<"$out" || fail "[$name] explain $q1 shows no refused resend within 10 s: $out"
  grep -q "451 4.3.5 System config error" <<<"$out" || fail "[$name] explain $q1 lacks the reply: $out"
}

round file
grep -q "already queued" "$tree/var/mail/root" 2>/dev/null || fail "no bounce with the explanation in /var/mail/root"

log "a member of group retryguard reads the same ledger as root"
in_tree "useradd -m -G retryguard postmaster-ops" || fail "useradd"
root_view=$(in_tree "retryguard destinations --json" | python3 -c 'import json,sys; print(sorted((x["kind"], x["name"], x["attempts"]) for x in json.load(sys.stdin)["destinations"]))')
ops_view=$(in_tree "setpriv --reuid postmaster-ops --regid postmaster-ops --init-groups retryguard destinations --json" |
           python3 -c 'import json,sys; print(sorted((x["kind"], x["name"], x["attempts"]) for x in json.load(sys.stdin)["destinations"]))') ||
  fail "retryguard destinations as a member of group retryguard failed"
[ "$root_view" = "$ops_view" ] || fail "root and a group member see different ledgers: $root_view / $ops_view"
grep -q "file.defer.test" <<<"$ops_view" || fail "the group member's view lacks file.defer.test: $ops_view"
out=$(in_tree "setpriv --reuid nobody --regid nogroup --clear-groups retryguard destinations 2>&1") &&
  fail "a user outside group retryguard read the ledger: $out"
log "  same view as root; outside the group: $(head -1 <<<"$out")"

log "a restart of the policy daemon loses nothing"
stop_unit retryguard-policyd
before=$(in_tree "retryguard destinations --json" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(x.get("attempts",0) for x in d["destinations"] if x.get("kind")=="domain" and x.get("name")=="file.defer.test"))')
in_tree "python3 /opt/test/submit.py while-down-$$@mx.sender.test dave@file.defer.test 'while down'" >/dev/null
wait_log "to=<dave@file\.defer\.test>,.* status=deferred" 60
start_unit retryguard-policyd
wait_socket /var/spool/postfix/retryguard/policy.sock 20 retryguard-policyd
for _ in $(seq 100); do
  after=$(in_tree "retryguard destinations --json" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(x.get("attempts",0) for x in d["destinations"] if x.get("kind")=="domain" and x.get("name")=="file.defer.test"))')
  [ "$after" -gt "$before" ] && break
  sleep 0.1
done
[ "$after" -gt "$before" ] || fail "the deferral logged while the policy daemon was down never reached the ledger ($before -> $after)"
log "  attempts for file.defer.test: $before before, $after after the restart"

log "second round: the journal as the log source"
# As on a systemd host: journald owns /dev/log and keeps the lines; the
# policy daemon reads them from the journal (group systemd-journal).
stop_unit retryguard-policyd
# docs/packaging.md: "with sources: [{type: journald}], the journal" -- the
# shipped file's sources block (its file entry and comments) replaced by that.
# Also on for this round: the "do not resend" notice (notify.enabled) and a
# destination in watch at its first 4.3.5 deferral, so that its recovery flushes.
in_tree "awk '/^sources:/ { print \"sources: [{type: journald}]\"; skip = 1; next }
              skip && /^[^ #]/ { skip = 0 }
              /^notify:/ { notify = 1 } /^[^ #]/ && !/^notify:/ { notify = 0 }
              notify && /^  enabled: false/ { print \"  enabled: true\"; next }
              /^    watch_after_deferrals: / && !wad { print \"    watch_after_deferrals: 1\"; wad = 1; next }
              !skip' /etc/retryguard/retryguard.yaml >/tmp/rg.yaml &&
         cat /tmp/rg.yaml >/etc/retryguard/retryguard.yaml && retryguard check-config" >"$work/journal-config.txt" 2>&1 || {
  cat "$work/journal-config.txt" >&2; fail "switching the source to the journal"; }
kill -TERM "$(cat "$tree/run/rsyslogd.pid")" 2>/dev/null || true
mkdir -p "$tree/var/log/journal" "$tree/run/systemd/journal"
# journald names its files after the machine id, which a chroot-made tree lacks
in_tree "systemd-machine-id-setup && chgrp systemd-journal /var/log/journal && chmod 2755 /var/log/journal" \
  >"$work/journald.out" 2>&1 || fail "preparing the journal"
in_tree "/lib/systemd/systemd-journald" >>"$work/journald.out" 2>&1 &
for _ in $(seq 50); do [ -S "$tree/run/systemd/journal/dev-log" ] && break; sleep 0.1; done
[ -S "$tree/run/systemd/journal/dev-log" ] || { cat "$work/journald.out" >&2; fail "systemd-journald did not start in the tree"; }
# As systemd-tmpfiles-setup does at boot: the journal directories group
# systemd-journal (and ACLs for adm), which is what lets the service user read them.
in_tree "systemd-tmpfiles --create --prefix /run/log/journal --prefix /var/log/journal" >>"$work/journald.out" 2>&1 || true
rm -f "$tree/dev/log"
ln -s /run/systemd/journal/dev-log "$tree/dev/log"
system_log=journal
in_tree "logger -p mail.info -t postfix/test 'journal probe'"
wait_log "postfix/test.*journal probe" 10
# Postfix's daemons reopen /dev/log per process; restart so none keeps rsyslog's old socket.
in_tree "/etc/init.d/postfix restart" >>"$work/postfix-start.log" 2>&1 || fail "postfix did not restart"
stop_unit retryguard-milter
start_unit retryguard-milter
start_unit retryguard-policyd
wait_socket /var/spool/postfix/retryguard/milter.sock 20 retryguard-milter
wait_socket /var/spool/postfix/retryguard/policy.sock 20 retryguard-policyd
round journal

log "the sendmail submitter got one do-not-resend notice, sent under the unit's sandbox"
wait_log "retryguard/policyd\[[0-9]+\]: [0-9A-F]+: verdict=notified .*journal\.defer\.test" 20
for _ in $(seq 100); do grep -q "^Subject: Delayed, do not resend: your message to journal.defer.test" "$tree/var/mail/root" 2>/dev/null && break; sleep 0.1; done
grep -q "^Subject: Delayed, do not resend: your message to journal.defer.test" "$tree/var/mail/root" ||
  fail "no notice for journal.defer.test in /var/mail/root"
grep -q "^Auto-Submitted: auto-generated" "$tree/var/mail/root" || fail "the notice lacks Auto-Submitted"
n=$(grep -c "^Subject: Delayed, do not resend: your message to journal.defer.test" "$tree/var/mail/root")
[ "$n" = 1 ] || fail "$n notices for journal.defer.test, want 1"

log "the destination recovers: its deferred mail is flushed, not left to its next retry"
touch "$tree/opt/test/accept"
in_tree "python3 /opt/test/submit.py recovered-$$@mx.sender.test erin@journal.defer.test 'after the fix'" >/dev/null ||
  fail "the message after the recovery was refused"
wait_log "to=<erin@journal\.defer\.test>,.* status=sent" 60
wait_log "retryguard/policyd\[[0-9]+\]: journal\.defer\.test: verdict=flushed .*count=[1-9]" 20
# Postfix's own next retry of these is minutes away (minimal_backoff_time 300s)
wait_log "to=<bob@journal\.defer\.test>,.* status=sent" 20
wait_log "to=<carol@journal\.defer\.test>,.* status=sent" 20

log "apt-get purge removes it all"
for p in "${daemon_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
for p in "${daemon_pids[@]}"; do wait "$p" 2>/dev/null || true; done
in_tree "DEBIAN_FRONTEND=noninteractive apt-get purge -y -q retryguard" >"$work/purge.log" 2>&1 || {
  cat "$work/purge.log" >&2; fail "apt-get purge failed"; }
for f in /usr/bin/retryguard /usr/sbin/retryguard-milter /usr/sbin/retryguard-policyd /etc/retryguard \
         /var/lib/retryguard /var/spool/postfix/retryguard /lib/systemd/system/retryguard-policyd.service; do
  [ ! -e "$tree$f" ] || fail "purge left $f"
done
in_tree "getent passwd retryguard" >/dev/null && fail "purge left the user"
log "PASS"
echo "1 passed, 0 failed"
