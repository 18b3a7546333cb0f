#!/usr/bin/env bash
# install-deps.sh -- install every Debian 12 package retryguard needs to build,
# test and run its end-to-end harness. Idempotent and non-interactive; run as root.
#
#   scripts/install-deps.sh            build + test + e2e packages
#   scripts/install-deps.sh --bench    also the peers the benchmarks compare against
#   scripts/install-deps.sh --package  also the tools that build and check the .deb
#
# Postfix is installed with debconf "No configuration", so the system instance stays
# unconfigured and unstarted: the project's harness runs its own instances.
set -euo pipefail

BUILD_PKGS=(
  build-essential cmake ninja-build pkg-config clang clang-format
  ccache                              # scripts/build.sh: a rebuild in another clone reuses objects
  libboost-dev libboost-system-dev    # Asio (policy daemon), Beast (metrics HTTP)
  libmilter-dev                       # the milter
  libyaml-cpp-dev                     # YAML configuration
  libre2-dev                          # classifier and per-destination patterns
  libsqlite3-dev                      # embedded ledger
  libhiredis-dev                      # Redis ledger
  libfmt-dev nlohmann-json3-dev libcli11-dev
  libsystemd-dev                      # journald follower, sd_notify
  zlib1g-dev                          # reading rotated .gz logs
  libzstd-dev                         # the engine journal's batch entries, compressed
  libssl-dev                          # SHA-1 of the milter's content fingerprint (libcrypto)
  libgtest-dev libgmock-dev libbenchmark-dev
)
TEST_PKGS=(
  redis-server                        # the Redis half of the ledger contract tests
  postfix swaks miltertest            # end-to-end tests with the real thing
  sqlite3 python3 iproute2 procps
  systemd-journal-remote              # writes journal files the journald follower tests read
  chromium                            # renders the HTML report headless in its test
)
BENCH_PKGS=(pflogsumm postfwd postgrey time gnuplot-nox curl)  # time: GNU time (peak memory) in bench/import-vs-pflogsumm.sh; gnuplot: bench/import-curve.sh plots; curl: its --follow reads the daemon's metrics
PACKAGE_PKGS=(debhelper dpkg-dev fakeroot lintian rsync util-linux debootstrap)  # packaging/build-deb.sh, tests/packaging

want=("${BUILD_PKGS[@]}" "${TEST_PKGS[@]}")
for opt in "$@"; do
  case "$opt" in
    --bench) want+=("${BENCH_PKGS[@]}") ;;
    --package) want+=("${PACKAGE_PKGS[@]}") ;;
    *) echo "usage: $0 [--bench] [--package]" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#want[@]} packages present"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-deps: missing packages: ${missing[*]} (run as root)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
printf '%s\n' "postfix postfix/main_mailer_type select No configuration" \
  "postfix postfix/mailname string localhost" | debconf-set-selections
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null
apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts redis-server on install; the tests run their own on a free port.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active -q redis-server 2>/dev/null; then
  systemctl stop redis-server || true
fi
echo "install-deps: done"
