// sqlite_wal_writes.hpp -- a SQLite VFS that writes a transaction's WAL
// frames with one system call instead of two per page, and reads and writes
// an index build's files in stretches.
//
// SQLite writes each WAL frame as two pwrite(2) calls, the 24-byte frame
// header and then the page. A bulk import's commit appends about a thousand
// frames, and on a virtual machine each system call costs more than copying
// the page: the WAL's pwrites were a quarter of the ledger thread's time.
// This VFS wraps the default one ("unix") and, for WAL files only, gathers
// writes that continue one another in memory and hands them to the real file
// as one write when
//   - the commit frame's page arrives (its header names the database size,
//     the WAL format's mark of a commit; docs: "WAL File Format"), so a
//     commit's frames are written, or its error returned, inside the same
//     xWrite call, before SQLite publishes the commit in the wal-index;
//   - a write does not continue the gathered ones (a frame rewritten in
//     place, the WAL started over), or the gathered bytes reach a limit;
//   - anything else touches the file: read, sync, truncate, size, file
//     control, close.
// Frames of a transaction that spills its cache before committing wait in
// memory until then or until read back; no other connection reads frames past
// the last published commit, so none can see the difference. A process
// killed with frames gathered loses an uncommitted transaction, as it would
// have anyway.
//
// Two more kinds of file, for the index build at the end of bulk mode (one
// scan of its table per index, the keys sorted in runs in temporary files,
// each read and written a page per system call):
//   - temporary files (SQLITE_OPEN_TEMP_JOURNAL: the sorter's runs, which only
//     this connection reads): writes that continue one another are gathered
//     as above (up to 1 MiB), and reads come from read-ahead stretches of
//     64 KiB, one per stream being read (a merge reads up to 16 runs of one
//     file in turn);
//   - the database file: reads as SQLite asks, except while the connection
//     turns read ahead on (set_read_ahead) for one transaction: then a read
//     that continues the one before starts a 64 KiB stretch. Stretches are
//     dropped at every transaction's begin and end (the shared memory's read
//     locks) and at any write, sync, truncation or file control.
// Every other file (journals, the shared memory) is the default VFS's own
// file object, untouched. As with SQLite
// itself, a connection must not be used or closed across fork(2): a child
// would hold the parent's gathered bytes too (the actions runner spawns with
// posix_spawn, which closes nothing).
#pragma once

#include <sqlite3.h>

namespace retryguard::ledger_detail {

// The name to pass to sqlite3_open_v2 (registered on first use, not as the
// default), or nullptr if it could not be registered (the default VFS then).
const char* wal_gathering_vfs();

// Writes passed to the real WAL files since the start, and the writes SQLite
// asked for (tests and benchmarks read these; relaxed counters).
struct WalWriteCounts {
    unsigned long long requested = 0;
    unsigned long long issued = 0;
};
WalWriteCounts wal_write_counts();

// The same for the files of an index build: temporary files' writes and
// reads, and database files' reads while read ahead is on.
struct IndexBuildIoCounts {
    unsigned long long writes_requested = 0;
    unsigned long long writes_issued = 0;
    unsigned long long reads_requested = 0;
    unsigned long long reads_issued = 0;
    // Reads of database files while read ahead is on (set_read_ahead).
    unsigned long long db_reads_requested = 0;
    unsigned long long db_reads_issued = 0;
};
IndexBuildIoCounts index_build_io_counts();
// Reads of `db`'s main database file from read-ahead stretches (on) or as
// SQLite asks (off, the default). Only for the span of one transaction that
// reads its tables in order (an index build); lock changes and writes drop
// the stretches. false: the connection does not use this VFS.
bool set_read_ahead(sqlite3* db, bool on);

// Temporary files opened from now on are the default VFS's own (off) or
// gathered and read ahead (on, the default): for benchmarks that compare both.
void set_temp_file_gathering(bool on);

}  // namespace retryguard::ledger_detail
