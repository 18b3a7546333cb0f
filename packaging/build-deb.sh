#!/usr/bin/env bash
# build-deb.sh -- build the retryguard Debian package with debhelper.
#   packaging/build-deb.sh [OUTDIR]     (default OUTDIR: build-deb/)
# Copies the source and packaging/debian/ into OUTDIR/tree (kept between runs so
# a rebuild is incremental) and runs dpkg-buildpackage there; prints the path of
# the .deb. Needs the packages of scripts/install-deps.sh --package.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mkdir -p "${1:-$src/build-deb}" && cd "${1:-$src/build-deb}" && pwd)"
tree="$out/tree"
for tool in dpkg-buildpackage dh rsync; do
  command -v "$tool" >/dev/null || { echo "build-deb: $tool missing (scripts/install-deps.sh --package)" >&2; exit 2; }
done
mkdir -p "$tree"
# The source as it is in the work tree (uncommitted edits included), without
# build directories; debian/ and the debhelper build directory are ours.
# Not -a: the copy must not keep the source's modification times. A file edited
# before the previous package build started but copied after it would carry a
# time older than the objects built from its old content, and make would link
# those stale objects (a header's struct layout out of step between two
# objects). With --checksum and no -t, a changed file gets the time of this
# copy and an unchanged one is left alone.
rsync -rlpD --checksum --delete --exclude=/.git --exclude='/build*' --exclude='/obj-*' --exclude=/debian \
  "$src/" "$tree/"
# A changed rules file means other compiler flags: configure afresh.
if ! cmp -s "$src/packaging/debian/rules" "$tree/debian/rules" 2>/dev/null; then
  rm -rf "$tree"/obj-*
fi
rm -rf "$tree/debian"
cp -a "$src/packaging/debian" "$tree/debian"
for unit in "$src"/packaging/systemd/*.service; do
  cp "$unit" "$tree/debian/retryguard.$(basename "$unit")"
done
cp "$src/packaging/systemd/retryguard.tmpfiles" "$tree/debian/retryguard.tmpfiles"
rm -f "$out"/retryguard_*.deb "$out"/retryguard-dbgsym_*.deb "$out"/retryguard_*.buildinfo "$out"/retryguard_*.changes
(
  cd "$tree"
  export DEB_BUILD_OPTIONS="nocheck parallel=${JOBS:-$(nproc)}"
  # ccache, when installed, as in scripts/build.sh: a package build in another
  # clone or OUTDIR reuses the objects already compiled. Paths are hashed
  # relative to the tree, and the -ffile-prefix-map of dpkg-buildflags (the
  # tree's absolute path, mapped to ".") is left out of the hash: it is there
  # to keep that path out of the objects. CCACHE_DISABLE=1 compiles afresh.
  if command -v ccache >/dev/null 2>&1 && [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]; then
    export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
    export CCACHE_BASEDIR="$tree" CCACHE_NOHASHDIR=1 CCACHE_IGNOREOPTIONS='-ffile-prefix-map=*'
    # debhelper points HOME into the tree: name the user's cache itself.
    CCACHE_DIR="$(ccache -k cache_dir)"
    export CCACHE_DIR
  fi
  # -nc: keep the previous build directory so only changed sources recompile.
  dpkg-buildpackage -b -uc -us -nc >"$out/build.log" 2>&1
) || { tail -40 "$out/build.log" >&2; echo "build-deb: failed, see $out/build.log" >&2; exit 1; }
deb=$(ls "$out"/retryguard_*.deb)
echo "$deb"
