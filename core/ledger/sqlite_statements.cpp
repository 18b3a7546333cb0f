// sqlite_statements.cpp -- the SQLite ledger's prepared statements, kept
// per connection, and its pool of read-only connections, so that lookups on
// the milter's path never queue behind a writer (WAL).
#include "ledger/sqlite_internal.hpp"

namespace retryguard::ledger_detail {

// Statements are prepared once per connection and kept, keyed by their SQL
// text's address (every statement is a string literal).
Query cached_statement(sqlite3* db, std::unordered_map<const char*, sqlite3_stmt*>& cache, const char* sql) {
    auto it = cache.find(sql);
    if (it == cache.end()) {
        sqlite3_stmt* s = nullptr;
        int rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr);
        if (rc != SQLITE_OK) throw SqlError{rc, sqlite3_errmsg(db)};
        it = cache.emplace(sql, s).first;
    }
    return Query(db, it->second);
}

std::unique_ptr<ReadConn> SqliteLedger::take_reader() noexcept {
    if (!separate_readers_) return nullptr;
    {
        std::lock_guard lock(pool_mutex_);
        if (!idle_readers_.empty()) {
            auto conn = std::move(idle_readers_.back());
            idle_readers_.pop_back();
            return conn;
        }
    }
    try {
        auto conn = std::make_unique<ReadConn>();
        int rc =
            sqlite3_open_v2(path_.c_str(), &conn->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
        if (rc == SQLITE_OK) {
            sqlite3_busy_timeout(conn->db, static_cast<int>(options_.busy_timeout.count()));
            return conn;
        }
        std::string msg = conn->db ? sqlite3_errmsg(conn->db) : sqlite3_errstr(rc);
        if (counters_.shared_reads.fetch_add(1, std::memory_order_relaxed) == 0)
            options_.warn("cannot open a read-only connection to " + path_ + " (" + msg +
                          "); lookups share the main connection");
    } catch (...) {
        counters_.shared_reads.fetch_add(1, std::memory_order_relaxed);
    }
    return nullptr;
}

void SqliteLedger::give_back(std::unique_ptr<ReadConn> conn) noexcept {
    std::lock_guard lock(pool_mutex_);
    if (idle_readers_.size() < kMaxIdleReaders) idle_readers_.push_back(std::move(conn));
}

bool SqliteLedger::in_memory(const std::string& path) {
    return path.empty() || path == ":memory:" ||
           (path.starts_with("file:") && path.find("mode=memory") != std::string::npos);
}

}  // namespace retryguard::ledger_detail
