#!/usr/bin/env bash
# html_report_test.sh -- imports the full-run fixture, writes the HTML report and
# renders it in headless Chromium: the screenshot must exist and be non-trivial,
# the rendered DOM must hold the escalated destination's timeline SVG, and the
# page must load nothing from outside. Usage: html_report_test.sh CLI FIXTURES OUTDIR
set -euo pipefail
cli=$1 fixtures=$2 out=$3
mkdir -p "$out"
rm -f "$out/ledger.db" "$out/report.html" "$out/report.png" "$out/dom.html"
command -v chromium >/dev/null || { echo "FAIL: chromium not installed (scripts/install-deps.sh)"; exit 1; }
export TZ=UTC
cfg="$fixtures/report/escalate-fast.yaml"
"$cli" import -q --year 2026 -c "$cfg" -o "ledger.sqlite.path=$out/ledger.db" "$fixtures/postfix-3.7/full-run.sender.log"
"$cli" report --html "$out/report.html" -c "$cfg" -o "ledger.sqlite.path=$out/ledger.db" --now 2026-11-29T21:00:00Z
if grep -Eq '(src|href)="(https?:)?//' "$out/report.html"; then echo "FAIL: external resource in report"; exit 1; fi
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
flags=(--headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking
       --disable-component-update --disable-sync --user-data-dir="$profile" --window-size=1280,2000)
timeout 120 chromium "${flags[@]}" --screenshot="$out/report.png" "file://$out/report.html" >/dev/null 2>&1 || true
timeout 120 chromium "${flags[@]}" --dump-dom "file://$out/report.html" > "$out/dom.html" 2>/dev/null || true
size=$(stat -c %s "$out/report.png" 2>/dev/null || echo 0)
[ "$size" -gt 20000 ] || { echo "FAIL: screenshot missing or trivial ($size bytes)"; exit 1; }
grep -q 'id="timeline-domain-cfgerr.lab.test"' "$out/dom.html" || { echo "FAIL: escalated timeline SVG not in DOM"; exit 1; }
grep -q '<rect' "$out/dom.html" || { echo "FAIL: no timeline bars"; exit 1; }
grep -q 'id="categories-over-time"' "$out/dom.html" || { echo "FAIL: categories chart missing"; exit 1; }
echo "ok: screenshot $out/report.png ($size bytes)"
