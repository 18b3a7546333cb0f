// sqlite_wal_writes.hpp -- a SQLite VFS that writes a transaction's WAL
// frames with one system call instead of two per page.
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
// have anyway. Every other file (the database, its shared memory, temporary
// files) is the default VFS's own file object, untouched. As with SQLite
// itself, a connection must not be used or closed across fork(2): a child
// would hold the parent's gathered bytes too (the actions runner spawns with
// posix_spawn, which closes nothing).
#pragma once

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

}  // namespace retryguard::ledger_detail
