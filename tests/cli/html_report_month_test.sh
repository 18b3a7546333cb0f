#!/usr/bin/env bash
# html_report_month_test.sh -- the period report of a generated month: the log
# of bench/gen_month_log (5% scale, seed 1, with its truth file of planted
# cases) imported with the CLI, the HTML report written at the end of the log
# and rendered in headless Chromium at desktop (1280 px) and phone (390 px)
# width. Checks: both screenshots exist, are non-trivial and have the
# dimensions of the committed docs/images/report-{desktop,phone}.png (not the
# pixels: fonts vary); the rendered DOM at phone width holds the summary's
# sections, the planted escalations' destinations, the outage as one incident
# row, and no script or outside resource.
# RETRYGUARD_UPDATE_SCREENSHOTS=1 copies the new screenshots over the committed ones.
# Usage: html_report_month_test.sh CLI GEN_MONTH_LOG SOURCE_DIR OUTDIR
set -euo pipefail
cli=$1 gen=$2 src=$3 out=$4
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/ledger.db* "$out"/report.html "$out"/report-*.png "$out"/dom-*.html
command -v chromium >/dev/null || { echo "FAIL: chromium not installed (scripts/install-deps.sh)"; exit 1; }
export TZ=UTC RETRYGUARD_DATADIR="$src/conf"
fail() { echo "FAIL: $*"; exit 1; }

"$gen" --scale 0.05 --seed 1 --out "$out/month.log" --truth "$out/truth.tsv"
printf 'ledger:\n  backend: sqlite\n  sqlite:\n    path: %s\n' "$out/ledger.db" > "$out/retryguard.yaml"
"$cli" import -q --utc --year 2026 -c "$out/retryguard.yaml" "$out/month.log"
# "now" is the last line's time stamp ("Dec  1 09:14:07": syslog, UTC, year 2026).
now=$(tail -n 1 "$out/month.log" | python3 -c '
import sys, datetime
t = datetime.datetime.strptime("2026 " + sys.stdin.read()[:15], "%Y %b %d %H:%M:%S")
print(t.strftime("%Y-%m-%dT%H:%M:%SZ"))')
"$cli" report --html "$out/report.html" --days 31 -c "$out/retryguard.yaml" --now "$now"
if grep -Eiq '<script|(src|href)="(https?:)?//|url\(' "$out/report.html"; then
    fail "script or outside resource in the report"
fi

profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
flags=(--headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking
       --disable-component-update --disable-sync --hide-scrollbars --run-all-compositor-stages-before-draw
       --user-data-dir="$profile")
shoot() {  # NAME WIDTH
    timeout 120 chromium "${flags[@]}" --window-size="$2,1600" --screenshot="$out/report-$1.png" \
        "file://$out/report.html" >/dev/null 2>&1 || true
    timeout 120 chromium "${flags[@]}" --window-size="$2,1600" --dump-dom \
        "file://$out/report.html" > "$out/dom-$1.html" 2>/dev/null || true
}
shoot desktop 1280
shoot phone 390

# Width and height from the PNG header (IHDR follows the 8-byte signature).
png_size() {
    python3 -c '
import struct, sys
with open(sys.argv[1], "rb") as f:
    head = f.read(24)
if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
    sys.exit("not a PNG: " + sys.argv[1])
print("%dx%d" % struct.unpack(">II", head[16:24]))' "$1"
}
for shot in desktop phone; do
    size=$(stat -c %s "$out/report-$shot.png" 2>/dev/null || echo 0)
    [ "$size" -gt 20000 ] || fail "$shot screenshot missing or trivial ($size bytes)"
done
[ "$(png_size "$out/report-phone.png")" = 390x1600 ] || fail "phone screenshot is $(png_size "$out/report-phone.png")"
[ "$(png_size "$out/report-desktop.png")" = 1280x1600 ] || fail "desktop screenshot is $(png_size "$out/report-desktop.png")"
if [ "${RETRYGUARD_UPDATE_SCREENSHOTS:-}" = 1 ]; then
    cp "$out/report-desktop.png" "$out/report-phone.png" "$src/docs/images/"
fi
for shot in desktop phone; do
    committed="$src/docs/images/report-$shot.png"
    [ -f "$committed" ] || fail "$committed missing (RETRYGUARD_UPDATE_SCREENSHOTS=1 makes it)"
    [ "$(png_size "$committed")" = "$(png_size "$out/report-$shot.png")" ] ||
        fail "$shot: $(png_size "$out/report-$shot.png"), committed $(png_size "$committed")"
done

# The rendered DOM (phone width): the sections in their order, the planted cases.
dom="$out/dom-phone.html"
[ -s "$dom" ] || fail "no DOM dumped"
python3 - "$dom" "$out/truth.tsv" <<'EOF'
import re, sys
dom = open(sys.argv[1], encoding="utf-8").read()
truth = [l.rstrip("\n").split("\t") for l in open(sys.argv[2], encoding="utf-8")]
last = -1
for sid in ["summary", "folded", "deferrals-by-category", "escalations", "flags", "incidents", "timelines",
            "categories-over-time"]:
    at = dom.find('id="%s"' % sid)
    if at < 0:
        sys.exit("FAIL: section %s missing from the DOM" % sid)
    if at < last:
        sys.exit("FAIL: section %s out of order" % sid)
    last = at
esc = dom[dom.find('id="escalations"'):dom.find('id="flags"')]
for row in truth:
    if row[0] == "escalate" and ">domain %s " % row[1] not in esc:
        sys.exit("FAIL: planted escalation %s not in the escalations section" % row[1])
outages = [r for r in truth if r[0] == "outage"]
incidents = dom[dom.find('id="incidents"'):dom.find('id="timelines"')]
rows = re.findall(r'<tr id="incident-\d+">', incidents)
if len(rows) != len(outages):
    sys.exit("FAIL: %d incident rows for %d planted outages" % (len(rows), len(outages)))
m = re.search(r"<summary>(\d+) destinations</summary>", incidents)
if not m or int(m.group(1)) < int(outages[0][3]) // 2:
    sys.exit("FAIL: the incident row does not fold in the outage's %s domains" % outages[0][3])
if 'id="timeline-incident-1"' not in dom:
    sys.exit("FAIL: the incident is not drawn on the timelines")
if not re.search(r"\d+ destinations? greylisted and delivered; \d+ single deferrals? resolved", dom):
    sys.exit("FAIL: the folded counts are missing")
if "<script" in dom.lower():
    sys.exit("FAIL: script in the DOM")
print("dom ok: %d incident row(s), escalations %s" %
      (len(rows), ", ".join(r[1] for r in truth if r[0] == "escalate")))
EOF
echo "ok: $out/report-desktop.png $(png_size "$out/report-desktop.png"), $out/report-phone.png $(png_size "$out/report-phone.png")"
