#!/usr/bin/env bash
# run.sh -- the main job: install what is needed, build, and run retryguard on
# the embedded default. Today it classifies every remote reply found in a Postfix
# log (default: the shipped sample from Postfix 3.7) and prints the verdicts.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
log=${1:-tests/fixtures/postfix-3.7/full-run.sender.log}
echo "== remote replies in $log, classified"
grep -o 'status=[a-z]* (.*)$' "$log" | sed -E 's/^status=[a-z]+ \((.*)\)$/\1/' | sort -u |
  build/tools/retryguard classify
