#!/usr/bin/env python3
"""wal-frames.py -- which tables the frames of a SQLite WAL file belong to.

Each committed batch of an import writes every page it changed to the WAL as
one frame, so the frames per table say where a batch's write cost goes. Takes
a copy of the WAL file and a copy of the database with its WAL (opened
read-write by sqlite3 to map page numbers to tables through the `dbstat`
virtual table), counts the frames of the WAL's current generation (the salt of
its header) by the table or index that owns each page at the time of the copy;
pages that no table owns then (freed since, such as trimmed journal entries)
count as "(free)".

Copy the files of a running import while it is stopped, so that the two agree:

    retryguard import -q ... -o ledger.sqlite.path=$PWD/l.db month.log & p=$!
    sleep 3; kill -STOP $p; cp l.db a.db; cp l.db-wal a.db-wal; cp l.db-wal wal.raw; kill -CONT $p
    bench/wal-frames.py wal.raw a.db

usage: wal-frames.py WAL_COPY DATABASE_COPY
"""
import collections
import sqlite3
import struct
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    with open(sys.argv[1], "rb") as f:
        raw = f.read()
    if len(raw) < 32:
        sys.exit(f"{sys.argv[1]}: not a WAL file (shorter than its header)")
    magic, _version, page_size, _ckpt, salt1, salt2, _c1, _c2 = struct.unpack(">IIIIIIII", raw[:32])
    if magic not in (0x377F0682, 0x377F0683):
        sys.exit(f"{sys.argv[1]}: not a WAL file (magic {magic:#x})")
    frames, commits, off = [], 0, 32
    while off + 24 + page_size <= len(raw):
        page, commit, s1, s2 = struct.unpack(">IIII", raw[off:off + 16])
        if (s1, s2) != (salt1, salt2):
            break  # a frame of an earlier generation: the current one ends here
        frames.append(page)
        commits += commit != 0
        off += 24 + page_size
    db = sqlite3.connect(sys.argv[2])
    owner = dict(db.execute("SELECT pageno, name FROM dbstat"))
    counts = collections.Counter(owner.get(p, "(free)") for p in frames)
    print(f"{len(frames)} frames of {page_size} bytes, {commits} commits")
    for name, n in counts.most_common():
        print(f"{name:30s} {n:8d} {100 * n / max(len(frames), 1):5.1f} %  {n / max(commits, 1):8.1f} per commit")


if __name__ == "__main__":
    main()
