#!/usr/bin/env python3
"""hostile_cli_test.py -- the real `retryguard` CLI over the hostile-log corpus
(tests/fixtures/hostile/make_hostile_log.py) in a fresh SQLite ledger.

Checks: import and every reporting command exit normally (0, or 1 where the
command documents "needs attention"); terminal output holds no raw control
byte (C0 other than newline, DEL, ESC, C1) and is valid UTF-8; every --json
output parses as strict UTF-8 JSON; the HTML report holds no raw control and
no markup from the corpus; and the verdict lines import wrote, read back by
`retryguard events`, are all verdicts of names the engine has, none about
victim.test (which the corpus only ever names inside forged text).

Usage: hostile_cli_test.py CLI SOURCE_DIR OUTDIR
"""
import json
import os
import shutil
import subprocess
import sys

CLI, SRC, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
NOW = "2026-11-30T12:00:00Z"
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def run(args, ok_codes=(0,), stdin=None):
    p = subprocess.run([CLI] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, input=stdin,
                       env=dict(os.environ, TZ="UTC", NO_COLOR="1"))
    if p.returncode not in ok_codes:
        fail("%s exited %d (want %s): %s" % (" ".join(args[:2]), p.returncode, ok_codes,
                                              p.stderr[-2000:].decode("utf-8", "replace")))
    return p.stdout


def check_terminal(name, data, allow_tab=False):
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        fail("%s: invalid UTF-8 at byte %d" % (name, e.start))
        return
    for i, ch in enumerate(text):
        o = ord(ch)
        if ch == "\n" or (allow_tab and ch == "\t"):
            continue
        if o < 0x20 or o == 0x7F or 0x80 <= o <= 0x9F or o in (0x2028, 0x2029) or 0x202A <= o <= 0x202E \
                or 0x2066 <= o <= 0x2069:
            fail("%s: raw control U+%04X at char %d: %r" % (name, o, i, text[max(0, i - 30):i + 10]))
            return


def check_json(name, data, lines=False):
    try:
        text = data.decode("utf-8")  # strict: invalid UTF-8 is a failure
        docs = [json.loads(l) for l in text.splitlines() if l] if lines else [json.loads(text)]
    except (UnicodeDecodeError, ValueError) as e:
        fail("%s: not valid UTF-8 JSON: %s" % (name, e))
        return []
    check_terminal(name, data)  # controls are escaped, so JSON on a terminal is safe too
    return docs


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    log = os.path.join(OUT, "hostile.sender.log")
    subprocess.run([sys.executable, os.path.join(SRC, "tests/fixtures/hostile/make_hostile_log.py"), log],
                   check=True)
    ledger = ["-o", "ledger.sqlite.path=" + os.path.join(OUT, "ledger.db")]
    report = ledger + ["--now", NOW]

    out = run(["import"] + ledger + ["--year", "2026", "--utc", log])
    check_terminal("import", out)
    verdict_lines = [l for l in out.split(b"\n") if l]
    if len(verdict_lines) < 10:
        fail("import printed only %d verdicts" % len(verdict_lines))

    check_terminal("destinations", run(["destinations"] + report, ok_codes=(0, 1)))
    docs = check_json("destinations --json", run(["destinations", "--json"] + report, ok_codes=(0, 1)))
    names = [d["name"] for d in docs[0]["destinations"]] if docs else []
    if docs and len(names) < 8:
        fail("destinations --json lists only %d destinations" % len(names))
    if any("victim.test" == n for n in names):
        fail("victim.test listed as a destination")

    for q in ["A00000001", "A00000002", "A00000005", "A00000011"]:
        check_terminal("explain " + q, run(["explain", q] + report))
        check_json("explain --json " + q, run(["explain", q, "--json"] + report))
    check_terminal("escalations", run(["escalations"] + report, ok_codes=(0, 1)))
    docs = check_json("escalations --json", run(["escalations", "--json"] + report, ok_codes=(0, 1)))
    if docs and not docs[0]["escalations"]:
        fail("the corpus escalates nothing: the escalation note path is not exercised")
    check_terminal("flags list", run(["flags", "list", "--all"] + report))
    check_json("flags list --json", run(["flags", "list", "--all", "--json"] + report))
    check_terminal("status", run(["status"] + report, ok_codes=(0, 1)))
    check_json("status --json", run(["status", "--json"] + report, ok_codes=(0, 1)))

    html = os.path.join(OUT, "report.html")
    run(["report", "--html", html] + report)
    page = open(html, "rb").read()
    check_terminal("report.html", page)
    if b"&lt;script&gt;" not in page:
        fail("report.html does not show the corpus's markup as text")
    for needle in [b"\x1b", b"<b>", b"<script>", b"owned by mx\x07"]:
        if needle in page:
            fail("report.html holds %r" % needle)

    # The corpus itself through `events` (the log as read), text and JSON.
    check_terminal("events (corpus)", run(["events", "--utc", "--year", "2026", log]))
    check_json("events --json (corpus)", run(["events", "--utc", "--year", "2026", "--json", log]), lines=True)

    # The verdict lines import wrote, as a mail log would hold them, read back.
    vlog = os.path.join(OUT, "verdicts.log")
    with open(vlog, "wb") as f:
        for l in verdict_lines:
            when, _, line = l.partition(b" ")
            f.write(when + b" sender retryguard/import[1]: " + line + b"\n")
    events = check_json("events --json (verdicts)", run(["events", "--utc", "--json", vlog]), lines=True)
    check_terminal("events (verdicts)", run(["events", "--utc", vlog]))
    known = {"noted", "watch", "escalate", "recovered", "flagged", "flag_expired", "flag_cleared",
             "local_outbound_suspected", "local_outbound_cleared", "retry_too_soon", "stalled", "held",
             "expired"}
    if len(events) != len(verdict_lines):
        fail("%d verdict lines, %d events" % (len(verdict_lines), len(events)))
    for e in events:
        if e.get("kind") != "verdict" or e.get("verdict") not in known:
            fail("not a verdict the engine writes: %r" % e)
            break
        dests = [e.get("destination", "")] + [v for k, v in e.get("fields", []) if k == "destination"]
        if "victim.test" in dests:
            fail("forged verdict about victim.test: %r" % e)
            break
    # Lines past the 64 KiB line limit are recorded cut, and import says how
    # many, per file: the corpus with three overlong deferrals appended.
    long_log = os.path.join(OUT, "overlong.sender.log")
    with open(log, "rb") as src, open(long_log, "wb") as f:
        f.write(src.read())
        for i, n in enumerate([65537, 200000, 3 * 1024 * 1024]):
            f.write(b"Nov 30 10:00:0%d sender postfix/smtp[7]: B0000000%d: to=<x@long.test>, "
                    b"relay=mx.long.test[192.0.2.9]:25, delay=1, delays=0/0/0/1, dsn=4.3.0, "
                    b"status=deferred (host mx.long.test[192.0.2.9] said: 451 4.3.0 " % (i, i)
                    + b"x" * n + b")\n")
    over = sum(1 for l in open(long_log, "rb") if len(l.rstrip(b"\n")) > 65536)
    p = subprocess.run([CLI, "import", "-q", "-o", "ledger.sqlite.path=" + os.path.join(OUT, "long.db"),
                        "--year", "2026", "--utc", long_log], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=dict(os.environ, TZ="UTC", NO_COLOR="1"))
    want = ("%s: %d lines longer than 65536 bytes, cut to that length" % (long_log, over)).encode()
    if p.returncode != 0 or want not in p.stderr:
        fail("import of overlong lines (rc %d) did not say %r: %r" % (p.returncode, want, p.stderr[-600:]))
    check_terminal("import stderr (overlong)", p.stderr)

    print("hostile corpus: %d bytes, %d verdict lines read back, %d destinations"
          % (os.path.getsize(log), len(events), len(names)))
    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("ok")


main()
