// sqlite_wal_writes.cpp -- see sqlite_wal_writes.hpp.
#include "ledger/sqlite_wal_writes.hpp"

#include <sqlite3.h>

#include <atomic>
#include <cstddef>
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

sqlite3_vfs g_vfs;
sqlite3_vfs* g_base = nullptr;  // the default VFS this one wraps
const char* g_registered = nullptr;

// What a WAL file holds beside the default VFS's file object.
struct Gathered {
    std::vector<unsigned char> bytes;
    sqlite3_int64 at = 0;      // file offset of bytes[0]
    bool commit_next = false;  // the last write was a commit frame's header
};

struct WalFile {
    sqlite3_file base;  // pMethods: kMethods below
    sqlite3_file* real;
    Gathered* gathered;
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
        g_issued.fetch_add(1, std::memory_order_relaxed);
        if (int rc = f->real->pMethods->xWrite(f->real, p, piece, at); rc != SQLITE_OK) return rc;
        p += piece;
        at += piece;
        n -= piece;
    }
    return SQLITE_OK;
}

int flush(WalFile* f) {
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

int x_write(sqlite3_file* file, const void* data, int n, sqlite3_int64 at) {
    WalFile* f = wal(file);
    Gathered& g = *f->gathered;
    g_requested.fetch_add(1, std::memory_order_relaxed);
    if (!g.bytes.empty() && at != g.at + static_cast<sqlite3_int64>(g.bytes.size())) {
        if (int rc = flush(f); rc != SQLITE_OK) return rc;
    }
    const bool ends_commit = g.commit_next;
    try {
        if (g.bytes.empty()) g.at = at;
        const auto* p = static_cast<const unsigned char*>(data);
        g.bytes.insert(g.bytes.end(), p, p + n);
    } catch (const std::bad_alloc&) {
        if (int rc = flush(f); rc != SQLITE_OK) return rc;
        return write_real(f, data, n, at);
    }
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

int x_open(sqlite3_vfs*, const char* name, sqlite3_file* file, int flags, int* out_flags) {
    sqlite3_vfs* base = g_base;
    if ((flags & SQLITE_OPEN_WAL) == 0) {
        // Not a WAL: the default VFS's own object, in the same memory.
        return base->xOpen(base, name, file, flags, out_flags);
    }
    WalFile* f = wal(file);
    f->base.pMethods = nullptr;
    f->real = reinterpret_cast<sqlite3_file*>(reinterpret_cast<unsigned char*>(file) + kRealOffset);
    std::memset(f->real, 0, static_cast<std::size_t>(base->szOsFile));
    f->gathered = nullptr;
    int rc = base->xOpen(base, name, f->real, flags, out_flags);
    if (rc == SQLITE_OK && f->real->pMethods == nullptr) rc = SQLITE_CANTOPEN;
    if (rc == SQLITE_OK) {
        f->gathered = new (std::nothrow) Gathered;
        if (f->gathered == nullptr) rc = SQLITE_NOMEM;
    }
    if (rc != SQLITE_OK) {
        if (f->real->pMethods != nullptr) f->real->pMethods->xClose(f->real);
        return rc;
    }
    const int version = f->real->pMethods->iVersion;
    f->base.pMethods = &kMethods[(version >= 3 ? 3 : version < 1 ? 1 : version) - 1];
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

}  // namespace retryguard::ledger_detail
