#!/usr/bin/env python3
# prune-lock-wait.py -- how long another writer waits for the SQLite ledger's
# write lock while a command (a `retryguard prune`) runs on the same file.
#
# Starts the command, then on its own connection (busy timeout 600 s, SQLite's
# own busy handler, as the policy daemon's log follower has) loops
# BEGIN IMMEDIATE / a one-row write / COMMIT, pausing --gap ms between two
# attempts (a follower's batches are some milliseconds apart), until the
# command exits. Prints the command's wall time and its output, how many
# write transactions the probe committed meanwhile, and the longest, 99th
# percentile and median wait for BEGIN IMMEDIATE: the longest is about the
# longest write transaction of the command, or the longest stretch of
# back-to-back ones, as a follower sees it.
#
# usage: bench/prune-lock-wait.py [--gap MS] LEDGER.sqlite -- COMMAND...
import argparse
import sqlite3
import subprocess
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gap", type=float, default=5.0, help="ms between two probe transactions")
    ap.add_argument("ledger")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command and a.command[0] == "--" else a.command
    if not cmd:
        ap.error("no command")
    db = sqlite3.connect(a.ledger, timeout=600, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE IF NOT EXISTS bench_probe(id INTEGER PRIMARY KEY, at REAL NOT NULL)")
    waits = []
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    while proc.poll() is None:
        t = time.monotonic()
        db.execute("BEGIN IMMEDIATE")
        waits.append(time.monotonic() - t)
        db.execute("INSERT INTO bench_probe(at) VALUES(?)", (t,))
        db.execute("COMMIT")
        time.sleep(a.gap / 1000)
    elapsed = time.monotonic() - start
    out = proc.stdout.read().strip()
    db.execute("DROP TABLE bench_probe")
    db.close()
    waits.sort()

    def pct(p):
        return waits[min(len(waits) - 1, int(p * len(waits)))] * 1000 if waits else 0.0

    print(f"command: {' '.join(cmd)}")
    print(f"output: {out}")
    print(f"exit: {proc.returncode}  wall: {elapsed:.2f} s")
    print(f"probe transactions: {len(waits)}  wait ms: max {pct(1.0):.1f}  p99 {pct(0.99):.1f}  median {pct(0.5):.1f}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
