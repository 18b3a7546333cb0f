// sqlite_checkpointer.hpp -- WAL checkpoints of a bulk import on a thread of
// their own (SqliteLedger::set_bulk_mode). Never included outside core/ledger/.
//
// With SQLite's automatic checkpoint, the connection that commits copies the
// WAL back into the database file and syncs both files, on its own thread:
// during an import that is the ledger thread, the import's critical path (a
// sixth of its wall time on a month of log, most of it waiting for the two
// syncs). Here a second connection to the same file checkpoints in PASSIVE
// mode (it never blocks the writer nor waits for it) each time the writer has
// committed `step_pages` more WAL pages. The WAL can start over from its
// beginning only when a checkpoint has copied all of it before a write
// transaction starts; so once it holds `max_pages`, the writer waits, before
// its next transaction, for one checkpoint to finish (only the pages since the
// last one are left to copy). The WAL is thus bounded as before (max_pages
// plus one transaction), and the same: SQLite's own checkpoint is PASSIVE too.
// A checkpoint changes no data: other connections' PRAGMA data_version stays.
// SQLITE_BUSY (another connection checkpointing, or the WAL header read while
// a commit wrote it) is tried again a few times and is no failure; a failure,
// or BUSY through 16 requests in a row, is logged once.
#pragma once

#include <sqlite3.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace retryguard::ledger_detail {

class BackgroundCheckpointer {
  public:
    struct Limits {
        int step_pages = 16384;  // 64 MiB of 4 KiB pages between two checkpoints
        int max_pages = 65536;   // 256 MiB: the writer waits for the WAL to start over
    };
    // Opens a second connection to `path` and takes over the WAL hook of
    // `writer` (SQLite's automatic checkpoint is off while this runs). An
    // error: nothing was changed, the caller keeps the automatic checkpoint.
    static std::unique_ptr<BackgroundCheckpointer> start(sqlite3* writer, const std::string& path,
                                                         Limits limits,
                                                         std::function<void(std::string_view)> warn,
                                                         std::string& error);
    // Stops and joins the thread and closes its connection. The WAL hook of
    // the writer is left unset: the caller sets the automatic checkpoint again.
    ~BackgroundCheckpointer();
    BackgroundCheckpointer(const BackgroundCheckpointer&) = delete;
    BackgroundCheckpointer& operator=(const BackgroundCheckpointer&) = delete;

    // The writer's thread, before each write transaction: when the WAL holds
    // max_pages, waits for a checkpoint of all of it.
    void before_write();

  private:
    BackgroundCheckpointer(sqlite3* writer, sqlite3* db, Limits limits,
                           std::function<void(std::string_view)> warn);
    static int on_commit(void* self, sqlite3* db, const char* schema, int frames);
    void run(std::stop_token stop);

    sqlite3* writer_;
    sqlite3* db_;  // the checkpointing connection, used by the thread only
    Limits limits_;
    std::function<void(std::string_view)> warn_;
    mutable std::mutex mutex_;
    std::condition_variable_any cv_;
    int frames_ = 0;        // WAL pages after the writer's last commit
    int requested_at_ = 0;  // frames_ when a checkpoint was last asked for
    std::uint64_t requested_ = 0, served_ = 0;
    bool last_complete_ = false;  // the last checkpoint copied the whole WAL it saw
    int last_log_ = 0;            // the WAL pages that checkpoint saw
    int busy_in_a_row_ = 0;       // requests that found the WAL busy, one after another
    bool warned_ = false;         // a failed checkpoint is logged once
    std::jthread thread_;         // last: started once the rest is set up, joined first
};

}  // namespace retryguard::ledger_detail
