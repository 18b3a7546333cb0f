// sqlite_wal_writes.cpp -- see sqlite_wal_writes.hpp.
#include "ledger/sqlite_wal_writes.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

namespace retryguard::ledger_detail {

namespace {

constexpr char kName[] = "retryguard-wal-gather";
constexpr int kFrameHeaderSize = 24;            // WAL format: a frame's header
constexpr std::size_t kGatherLimit = 8u << 20;  // bytes held before writing anyway

std::atomic<unsigned long long> g_requested{0};
std::atomic<unsigned long long> g_issued{0};
std::atomic<bool> g_temp_files{true};
std::atomic<unsigned long long> g_temp_writes_requested{0};
std::atomic<unsigned long long> g_temp_writes_issued{0};
std::atomic<unsigned long long> g_temp_reads_requested{0};
std::atomic<unsigned long long> g_temp_reads_issued{0};
std::atomic<unsigned long long> g_db_reads_requested{0};
std::atomic<unsigned long long> g_db_reads_issued{0};

sqlite3_vfs g_vfs;
sqlite3_vfs* g_base = nullptr;  // the default VFS this one wraps
const char* g_registered = nullptr;

// What a WAL file holds beside the default VFS's file object.
struct Gathered {
    std::vector<unsigned char> bytes;
    sqlite3_int64 at = 0;      // file offset of bytes[0]
    bool commit_next = false;  // the last write was a commit frame's header
};

// Read-ahead (a temporary file's, or a database file's while set_read_ahead
// has it on): the last few stretches read, one per stream being read (a
// merge reads up to 16 runs of one file in turn).
struct ReadAhead {
    static constexpr int kStreams = 16;
    struct Stretch {
        std::vector<unsigned char> bytes;
        sqlite3_int64 at = -1;   // file offset of bytes[0]; -1: empty
        std::uint64_t used = 0;  // when last read from (LRU)
    };
    Stretch stretches[kStreams];
    std::uint64_t clock = 0;
    sqlite3_int64 size = 0;   // stretches stop here: a temporary file's bytes written, a database file's size
    sqlite3_int64 next = -1;  // where the last read ended
    void forget() noexcept {
        for (auto& s : stretches) s.at = -1;
        next = -1;
    }
};

struct WalFile {
    sqlite3_file base;  // pMethods: kMethods or kTempMethods below
    sqlite3_file* real;
    Gathered* gathered;
    ReadAhead* ahead;  // temporary files; database files while read ahead is on (set_read_ahead)
};

constexpr std::size_t kRealOffset = (sizeof(WalFile) + 15) & ~std::size_t{15};

WalFile* wal(sqlite3_file* f) {
    return reinterpret_cast<WalFile*>(f);
}
sqlite3_file* real(sqlite3_file* f) {
    return wal(f)->real;
}

// The default VFS writes at most 128 KiB - 1 bytes per call (os_unix.c masks
// larger sizes): gathered bytes go in pieces of 124 KiB.
constexpr int kMaxRealWrite = 0x1ffff & ~0xfff;

int write_real(WalFile* f, const void* data, int n, sqlite3_int64 at) {
    const auto* p = static_cast<const unsigned char*>(data);
    while (n > 0) {
        const int piece = n < kMaxRealWrite ? n : kMaxRealWrite;
        (f->ahead ? g_temp_writes_issued : g_issued).fetch_add(1, std::memory_order_relaxed);
        if (int rc = f->real->pMethods->xWrite(f->real, p, piece, at); rc != SQLITE_OK) return rc;
        if (f->ahead && at + piece > f->ahead->size) f->ahead->size = at + piece;
        p += piece;
        at += piece;
        n -= piece;
    }
    return SQLITE_OK;
}

int flush(WalFile* f) {
    if (f->gathered == nullptr) return SQLITE_OK;  // a database file
    Gathered& g = *f->gathered;
    g.commit_next = false;
    if (g.bytes.empty()) return SQLITE_OK;
    const int rc = write_real(f, g.bytes.data(), static_cast<int>(g.bytes.size()), g.at);
    g.bytes.clear();
    return rc;
}

bool is_commit_header(const void* data, int n) {
    if (n != kFrameHeaderSize) return false;
    // Bytes 4-7, big-endian: the database size in pages after a commit, 0 otherwise.
    const auto* p = static_cast<const unsigned char*>(data);
    return (p[4] | p[5] | p[6] | p[7]) != 0;
}

// The gathered bytes written first if a write at `at` does not continue them.
int flush_unless_continued(WalFile* f, sqlite3_int64 at) {
    const Gathered& g = *f->gathered;
    if (g.bytes.empty() || at == g.at + static_cast<sqlite3_int64>(g.bytes.size())) return SQLITE_OK;
    return flush(f);
}

// A write added to the gathered bytes; should memory run out, they and it
// are written at once instead (`direct`).
int append(WalFile* f, const void* data, int n, sqlite3_int64 at, bool& direct) {
    Gathered& g = *f->gathered;
    direct = false;
    try {
        if (g.bytes.empty()) g.at = at;
        const auto* p = static_cast<const unsigned char*>(data);
        g.bytes.insert(g.bytes.end(), p, p + n);
        return SQLITE_OK;
    } catch (const std::bad_alloc&) {
        direct = true;
        if (int rc = flush(f); rc != SQLITE_OK) return rc;
        return write_real(f, data, n, at);
    }
}

int x_write(sqlite3_file* file, const void* data, int n, sqlite3_int64 at) {
    WalFile* f = wal(file);
    Gathered& g = *f->gathered;
    g_requested.fetch_add(1, std::memory_order_relaxed);
    if (int rc = flush_unless_continued(f, at); rc != SQLITE_OK) return rc;
    const bool ends_commit = g.commit_next;
    bool direct = false;
    if (int rc = append(f, data, n, at, direct); rc != SQLITE_OK || direct) return rc;
    g.commit_next = is_commit_header(data, n);
    if (ends_commit || g.bytes.size() >= kGatherLimit) return flush(f);
    return SQLITE_OK;
}

int x_close(sqlite3_file* file) {
    WalFile* f = wal(file);
    const int flushed = flush(f);
    const int closed = f->real->pMethods->xClose(f->real);
    delete f->gathered;
    f->gathered = nullptr;
    delete f->ahead;
    f->ahead = nullptr;
    return flushed != SQLITE_OK ? flushed : closed;
}

int x_read(sqlite3_file* file, void* data, int n, sqlite3_int64 at) {
    if (int rc = flush(wal(file)); rc != SQLITE_OK) return rc;
    return real(file)->pMethods->xRead(real(file), data, n, at);
}

int x_truncate(sqlite3_file* file, sqlite3_int64 size) {
    if (int rc = flush(wal(file)); rc != SQLITE_OK) return rc;
    return real(file)->pMethods->xTruncate(real(file), size);
}

int x_sync(sqlite3_file* file, int flags) {
    if (int rc = flush(wal(file)); rc != SQLITE_OK) return rc;
    return real(file)->pMethods->xSync(real(file), flags);
}

int x_file_size(sqlite3_file* file, sqlite3_int64* size) {
    if (int rc = flush(wal(file)); rc != SQLITE_OK) return rc;
    return real(file)->pMethods->xFileSize(real(file), size);
}

int x_file_control(sqlite3_file* file, int op, void* arg) {
    if (int rc = flush(wal(file)); rc != SQLITE_OK) return rc;
    return real(file)->pMethods->xFileControl(real(file), op, arg);
}

int x_lock(sqlite3_file* file, int level) {
    return real(file)->pMethods->xLock(real(file), level);
}
int x_unlock(sqlite3_file* file, int level) {
    return real(file)->pMethods->xUnlock(real(file), level);
}
int x_check_reserved_lock(sqlite3_file* file, int* out) {
    return real(file)->pMethods->xCheckReservedLock(real(file), out);
}
int x_sector_size(sqlite3_file* file) {
    return real(file)->pMethods->xSectorSize(real(file));
}
int x_device_characteristics(sqlite3_file* file) {
    return real(file)->pMethods->xDeviceCharacteristics(real(file));
}

// A WAL file has no shared memory or mapping of its own; these are here
// because the methods' version follows the default VFS's (3 for "unix").
int x_shm_map(sqlite3_file* file, int page, int size, int extend, void volatile** out) {
    return real(file)->pMethods->xShmMap(real(file), page, size, extend, out);
}
int x_shm_lock(sqlite3_file* file, int offset, int n, int flags) {
    return real(file)->pMethods->xShmLock(real(file), offset, n, flags);
}
void x_shm_barrier(sqlite3_file* file) {
    real(file)->pMethods->xShmBarrier(real(file));
}
int x_shm_unmap(sqlite3_file* file, int delete_flag) {
    return real(file)->pMethods->xShmUnmap(real(file), delete_flag);
}
int x_fetch(sqlite3_file* file, sqlite3_int64 at, int n, void** out) {
    if (int rc = flush(wal(file)); rc != SQLITE_OK) return rc;
    return real(file)->pMethods->xFetch(real(file), at, n, out);
}
int x_unfetch(sqlite3_file* file, sqlite3_int64 at, void* p) {
    return real(file)->pMethods->xUnfetch(real(file), at, p);
}

// Temporary files: writes that continue one another gathered (no commit to
// wait for: a limit, or anything else that touches the file, writes them),
// reads served from read-ahead stretches. Only this connection uses the file.
constexpr std::size_t kTempGatherLimit = 1u << 20;
constexpr sqlite3_int64 kAheadBytes = 64 * 1024;

int x_temp_write(sqlite3_file* file, const void* data, int n, sqlite3_int64 at) {
    WalFile* f = wal(file);
    g_temp_writes_requested.fetch_add(1, std::memory_order_relaxed);
    f->ahead->forget();
    if (int rc = flush_unless_continued(f, at); rc != SQLITE_OK) return rc;
    bool direct = false;
    if (int rc = append(f, data, n, at, direct); rc != SQLITE_OK || direct) return rc;
    if (f->gathered->bytes.size() >= kTempGatherLimit) return flush(f);
    return SQLITE_OK;
}

// A read served from a stretch that holds it, else a stretch of up to
// kAheadBytes read from `at` (no further than `limit`) into the least
// recently used one; any failure reads as asked instead. in_sequence_only:
// only a read that continues the one before starts a stretch (a table's
// leaf pages are mostly either in long runs or alone); others read as asked.
int read_ahead(WalFile* f, void* data, int n, sqlite3_int64 at, sqlite3_int64 limit, bool in_sequence_only,
               std::atomic<unsigned long long>& issued) {
    ReadAhead& a = *f->ahead;
    const bool in_sequence = at == a.next;
    a.next = at + n;
    ReadAhead::Stretch* lru = &a.stretches[0];
    for (auto& s : a.stretches) {
        if (s.at >= 0 && at >= s.at && at + n <= s.at + static_cast<sqlite3_int64>(s.bytes.size())) {
            std::memcpy(data, s.bytes.data() + (at - s.at), static_cast<std::size_t>(n));
            s.used = ++a.clock;
            return SQLITE_OK;
        }
        if (s.used < lru->used) lru = &s;
    }
    issued.fetch_add(1, std::memory_order_relaxed);
    const sqlite3_int64 len = std::min(kAheadBytes, limit - at);
    if (len <= n || (in_sequence_only && !in_sequence)) return f->real->pMethods->xRead(f->real, data, n, at);
    try {
        lru->bytes.resize(static_cast<std::size_t>(len));
    } catch (const std::bad_alloc&) {
        lru->at = -1;
        return f->real->pMethods->xRead(f->real, data, n, at);
    }
    if (int rc = f->real->pMethods->xRead(f->real, lru->bytes.data(), static_cast<int>(len), at);
        rc != SQLITE_OK) {
        lru->at = -1;
        return f->real->pMethods->xRead(f->real, data, n, at);
    }
    lru->at = at;
    lru->used = ++a.clock;
    std::memcpy(data, lru->bytes.data(), static_cast<std::size_t>(n));
    return SQLITE_OK;
}

int x_temp_read(sqlite3_file* file, void* data, int n, sqlite3_int64 at) {
    WalFile* f = wal(file);
    if (int rc = flush(f); rc != SQLITE_OK) return rc;
    g_temp_reads_requested.fetch_add(1, std::memory_order_relaxed);
    // No further than what was written (a size hint may have extended the file).
    return read_ahead(f, data, n, at, f->ahead->size, false, g_temp_reads_issued);
}

int x_temp_truncate(sqlite3_file* file, sqlite3_int64 size) {
    WalFile* f = wal(file);
    f->ahead->forget();
    if (int rc = flush(f); rc != SQLITE_OK) return rc;
    if (f->ahead->size > size) f->ahead->size = size;
    return f->real->pMethods->xTruncate(f->real, size);
}

int x_temp_file_control(sqlite3_file* file, int op, void* arg) {
    WalFile* f = wal(file);
    f->ahead->forget();  // a size hint may write
    if (int rc = flush(f); rc != SQLITE_OK) return rc;
    return f->real->pMethods->xFileControl(f->real, op, arg);
}

int x_temp_fetch(sqlite3_file* file, sqlite3_int64 at, int n, void** out) {
    WalFile* f = wal(file);
    f->ahead->forget();  // the caller may write through the mapping
    if (int rc = flush(f); rc != SQLITE_OK) return rc;
    return f->real->pMethods->xFetch(f->real, at, n, out);
}

// Database files: every method the default VFS's, but reads while read
// ahead is on (set_read_ahead: one connection's transaction that reads its
// tables in order, the index build at the end of bulk mode). Inside one
// transaction the pages SQLite reads from the database file do not change:
// a checkpoint (of any connection) writes back only frames the transaction's
// snapshot holds, and SQLite reads those pages from the WAL. Each
// transaction's begin and end (the shared memory's read locks), and any
// write, lock change, sync, truncation or other file control, drop the
// stretches.
constexpr int kReadAheadOp = 0x52470001;  // a file-control opcode SQLite does not use

int x_db_read(sqlite3_file* file, void* data, int n, sqlite3_int64 at) {
    WalFile* f = wal(file);
    if (!f->ahead) return f->real->pMethods->xRead(f->real, data, n, at);
    g_db_reads_requested.fetch_add(1, std::memory_order_relaxed);
    return read_ahead(f, data, n, at, f->ahead->size, true, g_db_reads_issued);
}
// Drops the stretches (a database file's): the real file, for the call to go on.
sqlite3_file* forget_ahead(sqlite3_file* file) {
    WalFile* f = wal(file);
    if (f->ahead) f->ahead->forget();
    return f->real;
}
int x_db_write(sqlite3_file* file, const void* data, int n, sqlite3_int64 at) {
    sqlite3_file* r = forget_ahead(file);
    return r->pMethods->xWrite(r, data, n, at);
}
int x_db_truncate(sqlite3_file* file, sqlite3_int64 size) {
    sqlite3_file* r = forget_ahead(file);
    return r->pMethods->xTruncate(r, size);
}
int x_db_sync(sqlite3_file* file, int flags) {
    sqlite3_file* r = forget_ahead(file);
    return r->pMethods->xSync(r, flags);
}
int x_db_lock(sqlite3_file* file, int level) {
    sqlite3_file* r = forget_ahead(file);
    return r->pMethods->xLock(r, level);
}
int x_db_unlock(sqlite3_file* file, int level) {
    sqlite3_file* r = forget_ahead(file);
    return r->pMethods->xUnlock(r, level);
}
// In WAL mode the database file's lock stays taken between transactions; a
// transaction begins and ends with the read locks of the shared memory.
int x_db_shm_lock(sqlite3_file* file, int offset, int n, int flags) {
    sqlite3_file* r = forget_ahead(file);
    return r->pMethods->xShmLock(r, offset, n, flags);
}
int x_db_fetch(sqlite3_file* file, sqlite3_int64 at, int n, void** out) {
    sqlite3_file* r = forget_ahead(file);
    return r->pMethods->xFetch(r, at, n, out);
}
int x_db_file_control(sqlite3_file* file, int op, void* arg) {
    WalFile* f = wal(file);
    forget_ahead(file);
    if (op != kReadAheadOp) return f->real->pMethods->xFileControl(f->real, op, arg);
    delete f->ahead;  // up to 1 MiB: not kept while unused
    f->ahead = nullptr;
    if (*static_cast<int*>(arg) == 0) return SQLITE_OK;
    sqlite3_int64 size = 0;
    if (int rc = f->real->pMethods->xFileSize(f->real, &size); rc != SQLITE_OK) return rc;
    f->ahead = new (std::nothrow) ReadAhead;
    if (!f->ahead) return SQLITE_NOMEM;
    f->ahead->size = size;  // pages past it are in the WAL
    return SQLITE_OK;
}

sqlite3_io_methods make_methods(int version) {
    sqlite3_io_methods m{};
    m.iVersion = version;
    m.xClose = x_close;
    m.xRead = x_read;
    m.xWrite = x_write;
    m.xTruncate = x_truncate;
    m.xSync = x_sync;
    m.xFileSize = x_file_size;
    m.xLock = x_lock;
    m.xUnlock = x_unlock;
    m.xCheckReservedLock = x_check_reserved_lock;
    m.xFileControl = x_file_control;
    m.xSectorSize = x_sector_size;
    m.xDeviceCharacteristics = x_device_characteristics;
    if (version >= 2) {
        m.xShmMap = x_shm_map;
        m.xShmLock = x_shm_lock;
        m.xShmBarrier = x_shm_barrier;
        m.xShmUnmap = x_shm_unmap;
    }
    if (version >= 3) {
        m.xFetch = x_fetch;
        m.xUnfetch = x_unfetch;
    }
    return m;
}

const sqlite3_io_methods kMethods[3] = {make_methods(1), make_methods(2), make_methods(3)};

sqlite3_io_methods make_temp_methods(int version) {
    sqlite3_io_methods m = make_methods(version);
    m.xWrite = x_temp_write;
    m.xRead = x_temp_read;
    m.xTruncate = x_temp_truncate;
    m.xFileControl = x_temp_file_control;
    if (version >= 3) m.xFetch = x_temp_fetch;
    return m;
}

const sqlite3_io_methods kTempMethods[3] = {make_temp_methods(1), make_temp_methods(2), make_temp_methods(3)};

sqlite3_io_methods make_db_methods(int version) {
    sqlite3_io_methods m = make_methods(version);  // close and size: nothing gathered to write
    m.xRead = x_db_read;
    m.xWrite = x_db_write;
    m.xTruncate = x_db_truncate;
    m.xSync = x_db_sync;
    m.xLock = x_db_lock;
    m.xUnlock = x_db_unlock;
    m.xFileControl = x_db_file_control;
    if (version >= 2) m.xShmLock = x_db_shm_lock;
    if (version >= 3) m.xFetch = x_db_fetch;
    return m;
}

const sqlite3_io_methods kDbMethods[3] = {make_db_methods(1), make_db_methods(2), make_db_methods(3)};

int x_open(sqlite3_vfs*, const char* name, sqlite3_file* file, int flags, int* out_flags) {
    sqlite3_vfs* base = g_base;
    const bool temp = (flags & SQLITE_OPEN_TEMP_JOURNAL) != 0 && g_temp_files.load(std::memory_order_relaxed);
    const bool db = (flags & SQLITE_OPEN_MAIN_DB) != 0;
    if ((flags & SQLITE_OPEN_WAL) == 0 && !temp && !db) {
        // Anything else (journals, shared memory): the default VFS's own object, in the same memory.
        return base->xOpen(base, name, file, flags, out_flags);
    }
    WalFile* f = wal(file);
    f->base.pMethods = nullptr;
    f->real = reinterpret_cast<sqlite3_file*>(reinterpret_cast<unsigned char*>(file) + kRealOffset);
    std::memset(f->real, 0, static_cast<std::size_t>(base->szOsFile));
    f->gathered = nullptr;
    f->ahead = nullptr;
    int rc = base->xOpen(base, name, f->real, flags, out_flags);
    if (rc == SQLITE_OK && f->real->pMethods == nullptr) rc = SQLITE_CANTOPEN;
    if (rc == SQLITE_OK && !db) {  // a database file gathers nothing; its stretches come with set_read_ahead
        f->gathered = new (std::nothrow) Gathered;
        if (temp && f->gathered != nullptr) f->ahead = new (std::nothrow) ReadAhead;
        if (f->gathered == nullptr || (temp && f->ahead == nullptr)) rc = SQLITE_NOMEM;
    }
    if (rc != SQLITE_OK) {
        delete f->gathered;
        f->gathered = nullptr;
        if (f->real->pMethods != nullptr) f->real->pMethods->xClose(f->real);
        return rc;
    }
    const int version = f->real->pMethods->iVersion;
    const sqlite3_io_methods* methods = db ? kDbMethods : temp ? kTempMethods : kMethods;
    f->base.pMethods = &methods[(version >= 3 ? 3 : version < 1 ? 1 : version) - 1];
    return SQLITE_OK;
}

}  // namespace

const char* wal_gathering_vfs() {
    static std::once_flag once;
    std::call_once(once, [] {
        sqlite3_vfs* base = sqlite3_vfs_find(nullptr);
        if (base == nullptr) return;
        // A copy: the default's other methods read their own fields
        // (pAppData, mxPathname) from the struct they are given.
        g_base = base;
        g_vfs = *base;
        g_vfs.pNext = nullptr;
        g_vfs.zName = kName;
        g_vfs.szOsFile = static_cast<int>(kRealOffset) + base->szOsFile;
        g_vfs.xOpen = x_open;
        if (sqlite3_vfs_register(&g_vfs, 0) == SQLITE_OK) g_registered = kName;
    });
    return g_registered;
}

WalWriteCounts wal_write_counts() {
    return {g_requested.load(std::memory_order_relaxed), g_issued.load(std::memory_order_relaxed)};
}

bool set_read_ahead(sqlite3* db, bool on) {
    int arg = on ? 1 : 0;
    return sqlite3_file_control(db, "main", kReadAheadOp, &arg) == SQLITE_OK;
}

void set_temp_file_gathering(bool on) {
    g_temp_files.store(on, std::memory_order_relaxed);
}

IndexBuildIoCounts index_build_io_counts() {
    return {g_temp_writes_requested.load(std::memory_order_relaxed),
            g_temp_writes_issued.load(std::memory_order_relaxed),
            g_temp_reads_requested.load(std::memory_order_relaxed),
            g_temp_reads_issued.load(std::memory_order_relaxed),
            g_db_reads_requested.load(std::memory_order_relaxed),
            g_db_reads_issued.load(std::memory_order_relaxed)};
}

}  // namespace retryguard::ledger_detail
