#!/usr/bin/env bash
# gen-redis-scripts.sh -- writes the C++ file that embeds the Redis ledger's Lua
# scripts (core/ledger/redis/*.lua, the source) so the daemons need no data
# files at run time. The build runs it (core/CMakeLists.txt) into the build
# tree whenever a .lua file changes; nothing generated is committed.
#   usage: scripts/gen-redis-scripts.sh LUA_DIR OUT
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 LUA_DIR OUT" >&2; exit 2; }
dir=$1 out=$2
tmp=$out.tmp
{
  echo "// redis_scripts.cpp -- GENERATED at build time by scripts/gen-redis-scripts.sh from"
  echo "// core/ledger/redis/*.lua. Holds the Redis backend's Lua text; nothing else."
  echo '#include "ledger/redis_scripts.hpp"'
  echo
  echo "namespace retryguard::ledger_detail {"
  echo
  echo "const std::vector<RedisScript>& redis_scripts() {"
  echo "    static const std::vector<RedisScript> scripts = {"
  # LC_ALL=C: file-name order independent of the build's locale
  for f in $(LC_ALL=C ls "$dir"/*.lua); do
    name=$(basename "$f" .lua)
    if grep -q ')lua"' "$f"; then echo "delimiter found in $f" >&2; exit 1; fi
    printf '        {"%s", R"lua(' "$name"
    cat "$f"
    printf ')lua"},\n'
  done
  echo "    };"
  echo "    return scripts;"
  echo "}"
  echo
  echo "}  // namespace retryguard::ledger_detail"
} > "$tmp"
mv "$tmp" "$out"
