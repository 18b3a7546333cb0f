#!/usr/bin/env bash
# debootstrap-test.sh -- the README's two commands on a fresh Debian 12: makes
# a minimal bookworm tree with debootstrap, clones the project into root's home
# there (/root/project, mode 0700, as a root user's clone usually is), and runs,
# as root inside the tree (chroot):
#
#   scripts/demo.sh     install what is needed, build, run the first-run demo
#   scripts/test.sh     install what is needed, build, pass every test
#
# The second includes the package test (tests/packaging/test-deb.sh), so the
# .deb is built, checked with lintian, installed into the fresh tree and its
# programs pass the milter and policy end-to-end checks there.
#
# Slow (a fresh install, two builds, the whole suite): label `debootstrap`,
# `ctest -L debootstrap`. Needs root, debootstrap and the Debian mirror this
# machine's apt uses (RETRYGUARD_DEBIAN_MIRROR overrides it). Exits 77
# (skipped) without them, except under CI=true where that fails.
#
# What the tree gets besides debootstrap's own files, and why:
#  - /proc, /sys, /dev, /dev/pts and a private /run, as any running system has;
#  - /etc/resolv.conf and /etc/hosts from this machine (name resolution);
#  - this machine's apt archive as its package cache (see below);
#  - /usr/sbin/policy-rc.d answering 101, the standard chroot rule: package
#    installs do not start daemons (a real machine's systemd would start them
#    under its own control; here they would outlive the test). Every test
#    starts the daemons it needs itself;
#  - /etc/retryguard-debootstrap-tree, a marker: the suite run inside the tree
#    does not register this test again (no tree inside the tree).
# The network namespace is this machine's: everything the tests start listens
# on loopback only, on ports checked free, and this test runs alone
# (RUN_SERIAL) so nothing else competes for them.
set -euo pipefail
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
src="$(cd "$(dirname "$0")/../.." && pwd)"

log() { printf 'debootstrap-test: %s\n' "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
skip() {
  [ "${CI:-}" = true ] && fail "prerequisite missing under CI: $*"
  log "SKIP: ****** $* ******"; exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, chroot, mounts)"
command -v debootstrap >/dev/null || skip "debootstrap missing: run scripts/install-deps.sh --package"
[ -e /etc/retryguard-debootstrap-tree ] && fail "already inside a tree made by this test"

mirror=${RETRYGUARD_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  # the first Debian archive this machine's apt uses (deb822 or one-line form),
  # not the security archive
  mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs: *//p' |
             tr ' ' '\n' | grep -E '/debian/?$' | head -1 || true)
  [ -n "$mirror" ] || mirror=$(grep -hE '^deb +(\[[^]]*\] +)?https?://[^ ]+/debian/? +bookworm( |$)' \
                                 /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
                               sed -E 's/^deb +(\[[^]]*\] +)?//' | cut -d' ' -f1 | head -1 || true)
  [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
fi

work=$(mktemp -d /var/tmp/retryguard-debootstrap.XXXXXX)
tree=$work/tree
mounted=()
cleanup() {
  local rc=$? pid m
  # processes still running inside the tree (none expected: the scripts stop
  # what they start), then the mounts, then the tree
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$tree" ] || continue
    log "killing leftover process $pid inside the tree: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)"
    kill -KILL "$pid" 2>/dev/null || true
    rc=${rc/#0/1}
  done
  for ((m = ${#mounted[@]} - 1; m >= 0; m--)); do
    umount -R "${mounted[m]}" 2>/dev/null || umount -lR "${mounted[m]}" 2>/dev/null || true
  done
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# This machine's apt archive (/var/cache/apt/archives) serves as the package
# cache of debootstrap and then of the tree's apt: the tree installs the same
# Debian 12 packages this machine has, and downloading them again from the
# mirror was the part of this test that varied most (minutes on a slow
# mirror). It changes nothing the tree installs: apt uses a cached .deb only
# when its checksum matches the tree's own signed index, and downloads it
# otherwise. RETRYGUARD_DEBOOTSTRAP_APT_CACHE=0 downloads everything.
apt_cache=
if [ "${RETRYGUARD_DEBOOTSTRAP_APT_CACHE:-1}" != 0 ] && [ -d /var/cache/apt/archives ]; then
  apt_cache=/var/cache/apt/archives
  mkdir -p "$apt_cache/partial"
fi
log "debootstrap bookworm from $mirror${apt_cache:+ (package cache $apt_cache)}"
started=$(date +%s)
debootstrap --variant=minbase ${apt_cache:+--cache-dir=$apt_cache} bookworm "$tree" "$mirror" \
  >"$work/debootstrap.log" 2>&1 || {
  tail -30 "$work/debootstrap.log" >&2; fail "debootstrap failed"; }
log "tree made in $(($(date +%s) - started)) s"

bind() {  # TYPE-OR-SOURCE TARGET [options]
  mkdir -p "$tree$2"
  mount "${@:3}" "$1" "$tree$2"
  mounted+=("$tree$2")
}
bind proc /proc -t proc
bind sysfs /sys -t sysfs
bind /dev /dev --rbind
mount --make-rslave "$tree/dev"
bind tmpfs /run -t tmpfs -o mode=0755,nosuid,nodev
[ -n "$apt_cache" ] && bind "$apt_cache" /var/cache/apt/archives --bind
cp /etc/resolv.conf "$tree/etc/resolv.conf"
cp /etc/hosts "$tree/etc/hosts"
printf '#!/bin/sh\nexit 101\n' >"$tree/usr/sbin/policy-rc.d"
chmod 0755 "$tree/usr/sbin/policy-rc.d"
echo "made by retryguard's tests/packaging/debootstrap-test.sh" >"$tree/etc/retryguard-debootstrap-tree"

# Where a root user's clone usually lands: root's home, mode 0700, which the
# daemons' unprivileged users cannot enter. The clone comes from this
# repository (there is no network for a remote one); the working tree's tracked
# files are laid over it so that uncommitted changes are what is tested.
proj=/root/project
log "cloning the project into $proj"
[ "$(stat -c %a "$tree/root")" = 700 ] || chmod 0700 "$tree/root"
# This machine's compiler cache, when it has one, as root's cache in the tree:
# the two builds in there (the programs with their tests, and the package)
# would otherwise compile every object afresh, the longest part of this test.
# The tree still installs ccache and the compiler itself (install-deps.sh), and
# ccache returns an object only for the same compiler (same size and time, as
# dpkg installs it), flags and preprocessed input; a missing header or library
# still fails the build (the header is looked up again, linking is never
# cached). RETRYGUARD_DEBOOTSTRAP_CCACHE=0 builds without it.
if [ "${RETRYGUARD_DEBOOTSTRAP_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null; then
  host_cache=$(ccache -k cache_dir)
  mkdir -p "$host_cache"
  bind "$host_cache" /root/.cache/ccache --bind
  log "compiler cache: $host_cache"
fi
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  git clone -q --no-hardlinks "$src" "$tree$proj"
  git -C "$src" ls-files -z | (cd "$src" && tar --null -T - -cf -) | tar -xf - -C "$tree$proj"
else
  mkdir -p "$tree$proj"
  (cd "$src" && tar --exclude='./build*' -cf - .) | tar -xf - -C "$tree$proj"
fi

in_tree() {  # a clean root login shell's environment, in the clone
  chroot "$tree" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 TERM=dumb CI="${CI:-}" /bin/bash -c "cd $proj && $1"
}

log "README main command: scripts/demo.sh"
started=$(date +%s)
in_tree scripts/demo.sh >"$work/demo.log" 2>&1 || { tail -80 "$work/demo.log" >&2; fail "scripts/demo.sh failed"; }
log "demo passed in $(($(date +%s) - started)) s; its end:"
tail -25 "$work/demo.log" | sed 's/^/  | /' >&2
grep -q 'verdict=reject' "$work/demo.log" || fail "the demo shows no refused resend"
# the demo leaves nothing running
for pid in $(ls /proc | grep -E '^[0-9]+$'); do
  [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$tree" ] &&
    fail "the demo left a process running: $(tr '\0' ' ' <"/proc/$pid/cmdline")"
done

log "README test command: scripts/test.sh"
started=$(date +%s)
if ! in_tree scripts/test.sh >"$work/test.log" 2>&1; then
  grep -E 'tests passed|FAILED|Failed|\*\*\*' "$work/test.log" | tail -40 >&2
  tail -150 "$work/test.log" >&2
  fail "scripts/test.sh failed inside the tree"
fi
log "test suite passed in $(($(date +%s) - started)) s:"
grep -E 'tests passed|Label Time Summary' -A12 "$work/test.log" | sed 's/^/  | /' >&2
grep -qE '^100% tests passed' "$work/test.log" || fail "no '100% tests passed' line"
grep -qE 'packaging\.deb .*Passed' "$work/test.log" || fail "the package test did not pass inside the tree"
if grep -E '\*\*\*Skipped|tests did not run' "$work/test.log" >&2; then fail "tests were skipped inside the tree"; fi
log "PASS"
echo "1 passed, 0 failed"
