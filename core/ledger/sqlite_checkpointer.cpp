// sqlite_checkpointer.cpp -- see sqlite_checkpointer.hpp.
#include "ledger/sqlite_checkpointer.hpp"

#include <fmt/format.h>

#include <chrono>

#include "retryguard/runtime/threads.hpp"

namespace retryguard::ledger_detail {

namespace {
constexpr int kBusyRetries = 5;          // sleeps of 1, 2, 4, 8 and 16 ms
constexpr int kBusyRequestsToWarn = 16;  // BUSY that long is more than a passing commit
}  // namespace

std::unique_ptr<BackgroundCheckpointer> BackgroundCheckpointer::start(
    sqlite3* writer, const std::string& path, Limits limits, std::function<void(std::string_view)> warn,
    std::string& error) {
    sqlite3* db = nullptr;
    int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc == SQLITE_OK) {
        // The writer's durability: the WAL is synced before the pages are
        // copied, the database file after (as the writer's own checkpoint did).
        rc = sqlite3_exec(db, "PRAGMA synchronous=NORMAL", nullptr, nullptr, nullptr);
    }
    if (rc != SQLITE_OK) {
        error = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
        sqlite3_close_v2(db);
        return nullptr;
    }
    std::unique_ptr<BackgroundCheckpointer> c(
        new BackgroundCheckpointer(writer, db, limits, std::move(warn)));
    sqlite3_wal_hook(writer, &BackgroundCheckpointer::on_commit, c.get());
    c->thread_ = std::jthread([p = c.get()](std::stop_token stop) { p->run(std::move(stop)); });
    return c;
}

BackgroundCheckpointer::BackgroundCheckpointer(sqlite3* writer, sqlite3* db, Limits limits,
                                               std::function<void(std::string_view)> warn)
    : writer_(writer), db_(db), limits_(limits), warn_(std::move(warn)) {}

BackgroundCheckpointer::~BackgroundCheckpointer() {
    sqlite3_wal_hook(writer_, nullptr, nullptr);
    thread_.request_stop();
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    sqlite3_close_v2(db_);
}

// In the writer's COMMIT, on its thread: never blocks, never fails the commit.
int BackgroundCheckpointer::on_commit(void* self, sqlite3*, const char*, int frames) {
    auto* c = static_cast<BackgroundCheckpointer*>(self);
    std::lock_guard lock(c->mutex_);
    if (frames < c->frames_ || frames < c->requested_at_) c->requested_at_ = 0;  // the WAL started over
    c->frames_ = frames;
    if (frames - c->requested_at_ >= c->limits_.step_pages) {
        c->requested_at_ = frames;
        ++c->requested_;
        c->cv_.notify_all();
    }
    return SQLITE_OK;
}

void BackgroundCheckpointer::run(std::stop_token stop) {
    set_thread_name("rg-checkpoint");
    std::unique_lock lock(mutex_);
    for (;;) {
        cv_.wait(lock, stop, [&] { return requested_ > served_; });
        if (stop.stop_requested()) return;
        const std::uint64_t request = requested_;
        lock.unlock();
        int log = -1, copied = -1;
        int rc = SQLITE_OK;
        // SQLITE_BUSY is "not now", not a failure: another connection's
        // checkpoint holds the checkpoint lock, or the WAL header was read
        // while the writer was writing it (a commit on a loaded machine).
        // Tried again a few times, at most 31 ms in all; then the writer's
        // next request tries again, as SQLite's own checkpoint would.
        for (int attempt = 0;; ++attempt) {
            rc = sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &copied);
            if ((rc & 0xff) != SQLITE_BUSY || attempt == kBusyRetries || stop.stop_requested()) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(1 << attempt));
        }
        std::string failure;
        if (rc != SQLITE_OK) failure = sqlite3_errmsg(db_);
        lock.lock();
        served_ = request;
        last_complete_ = rc == SQLITE_OK && log >= 0 && copied == log;
        last_log_ = log;
        const bool busy = (rc & 0xff) == SQLITE_BUSY;
        busy_in_a_row_ = busy ? busy_in_a_row_ + 1 : 0;
        if (rc != SQLITE_OK && (!busy || busy_in_a_row_ == kBusyRequestsToWarn) && !warned_) {
            // The next commit asks again; SQLite keeps the WAL meanwhile.
            warned_ = true;
            if (warn_)
                warn_(fmt::format("bulk mode: WAL checkpoint failed (the WAL grows until one succeeds): {}",
                                  failure));
        }
        cv_.notify_all();
    }
}

void BackgroundCheckpointer::before_write() {
    std::unique_lock lock(mutex_);
    if (frames_ < limits_.max_pages) return;
    // Ask for one checkpoint now and wait for it. One only: a reader on an
    // older snapshot (another process) can keep it from copying everything,
    // and the writer must not wait on that reader; the WAL then grows until
    // the reader is gone, as with SQLite's own checkpoint.
    const std::uint64_t request = ++requested_;
    requested_at_ = frames_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return served_ >= request; });
    // The next write transaction starts the WAL over (when complete): the
    // next commit reports its new, small size.
    if (last_complete_ && last_log_ >= frames_) frames_ = 0;
}

}  // namespace retryguard::ledger_detail
