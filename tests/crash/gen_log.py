#!/usr/bin/env python3
"""gen_log.py -- a deterministic Postfix sender log for the kill -9 loop tests:
receiver-config outages that come and go (watch, escalate, recover, repeat
offender flags and their expiry), a rate-limited destination, plain deliveries
and one reply with bytes that are not UTF-8. Times are RFC 3339 in 2030, ahead
of any test machine's clock, so a live daemon's quiet-time evaluations never
add verdicts of their own.

usage: gen_log.py LINES SEED > mail.log
"""
import random
import sys
from datetime import datetime, timedelta, timezone

lines_wanted = int(sys.argv[1])
rnd = random.Random(int(sys.argv[2]))
t = datetime(2030, 3, 1, tzinfo=timezone.utc)
out = sys.stdout.buffer

cfg = [f"cfg{i}.test" for i in range(1, 7)]
rate = ["rate1.test", "rate2.test"]
ok = [f"ok{i}.test" for i in range(1, 9)]
domains = cfg * 3 + rate + ok
pending = []
count = 0
qseq = 0x1000
poisoned = False


def ip(domain):
    return "192.0.2.%d" % (sum(domain.encode()) % 250 + 1)


def emit(program, pid, text):
    global count
    stamp = t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "+00:00"
    out.write(stamp.encode() + b" sender postfix/" + program.encode() + b"[%d]: " % pid + text + b"\n")
    count += 1


def broken(domain):
    # Each receiver-config domain fails for 50 minutes of every 2 hours, phase by name.
    phase = (sum(domain.encode()) * 7) % 120
    minute = (t.hour * 60 + t.minute + phase) % 120
    return minute < 50


while count < lines_wanted:
    t += timedelta(seconds=rnd.randint(3, 25))
    if not pending or rnd.random() < 0.3:
        qseq += rnd.randint(1, 50)
        qid = "%011X" % (qseq * 7919)
        dom = rnd.choice(domains)
        rcpt = "user%d@%s" % (rnd.randint(1, 40), dom)
        pending.append((qid, rcpt, dom))
        emit("qmgr", 300, b"%s: from=<sender@example.org>, size=%d, nrcpt=1 (queue active)"
             % (qid.encode(), rnd.randint(500, 90000)))
        continue
    qid, rcpt, dom = rnd.choice(pending)
    mx = "mx." + dom
    head = b"%s: to=<%s>, relay=%s[%s]:25, delay=%d, delays=0.1/0/0.2/0.3, " % (
        qid.encode(), rcpt.encode(), mx.encode(), ip(dom).encode(), rnd.randint(1, 4000))
    pid = rnd.randint(2000, 2100)
    if dom in cfg and broken(dom):
        text = b"Recipient address rejected: Server configuration problem"
        if not poisoned and count > lines_wanted // 3:
            text = b"Recipient address rejected: caf\xc3\x28 configuration \xff problem"
            poisoned = True
        emit("smtp", pid, head + b"dsn=4.3.5, status=deferred (host %s[%s] said: 451 4.3.5 <%s>: %s "
             b"(in reply to RCPT TO command))" % (mx.encode(), ip(dom).encode(), rcpt.encode(), text))
    elif dom in rate and rnd.random() < 0.5:
        emit("smtp", pid, head + b"dsn=4.7.0, status=deferred (host %s[%s] said: 421 4.7.0 Too many "
             b"messages, rate limited, try again later (in reply to MAIL FROM command))"
             % (mx.encode(), ip(dom).encode()))
    else:
        emit("smtp", pid, head + b"dsn=2.0.0, status=sent (250 2.0.0 Ok: queued as %X)" % rnd.randint(1, 1 << 40))
        emit("qmgr", 300, b"%s: removed" % qid.encode())
        pending.remove((qid, rcpt, dom))
