// sqlite_internal.hpp -- what the files of the SQLite ledger backend share:
// the SqliteLedger class (its schema and migrations in sqlite_schema.cpp, its
// statement cache and read-only connections in sqlite_statements.cpp, its write
// path for ingest batches in sqlite_ingest.cpp, the other operations in
// sqlite_ledger.cpp, the lookups that rest on one index each in
// sqlite_lookups.hpp, the reports' reads in sqlite_listings.hpp), the
// statement wrapper (Query) and the error type its methods throw inside and
// catch before returning. Never included outside core/ledger/.
#pragma once

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ledger/internal.hpp"
#include "ledger/prehashed_map.hpp"
#include "ledger/sqlite_checkpointer.hpp"
#include "ledger/sqlite_lookups.hpp"

namespace retryguard::ledger_detail {

struct SqlError {
    int code;
    std::string message;
};

class Query {
  public:
    Query(sqlite3* db, sqlite3_stmt* s) : db_(db), s_(s) {}
    ~Query() {
        sqlite3_reset(s_);
        sqlite3_clear_bindings(s_);
    }
    Query(const Query&) = delete;
    Query& operator=(const Query&) = delete;

    Query& i64(std::int64_t v) { return check(sqlite3_bind_int64(s_, ++n_, v)); }
    Query& opt(const std::optional<TimePoint>& t) {
        return t ? i64(to_micros(*t)) : check(sqlite3_bind_null(s_, ++n_));
    }
    Query& null() { return check(sqlite3_bind_null(s_, ++n_)); }
    Query& text(std::string_view v) {
        return check(sqlite3_bind_text(s_, ++n_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    }
    Query& text_or_null(std::string_view v) { return v.empty() ? null() : text(v); }
    Query& blob(std::string_view v) {
        return check(sqlite3_bind_blob64(s_, ++n_, v.data(), v.size(), SQLITE_TRANSIENT));
    }
    // Bound without a copy: the bytes must stay as they are until this Query
    // is destroyed (its destructor resets the statement and clears the
    // bindings). For the write path's rows, kept in members while they are
    // written; never for a temporary.
    Query& text_ref(std::string_view v) {
        return check(sqlite3_bind_text(s_, ++n_, v.data(), static_cast<int>(v.size()), SQLITE_STATIC));
    }
    Query& blob_ref(std::string_view v) {
        return check(sqlite3_bind_blob64(s_, ++n_, v.data(), v.size(), SQLITE_STATIC));
    }

    bool row() {
        int rc = sqlite3_step(s_);
        if (rc == SQLITE_ROW) return true;
        if (rc == SQLITE_DONE) return false;
        throw SqlError{rc, sqlite3_errmsg(db_)};
    }
    void run() {
        while (row()) {
        }
    }
    std::int64_t col(int i) const { return sqlite3_column_int64(s_, i); }
    bool is_null(int i) const { return sqlite3_column_type(s_, i) == SQLITE_NULL; }
    std::optional<TimePoint> time(int i) const {
        if (is_null(i)) return std::nullopt;
        return from_micros(col(i));
    }
    std::string str(int i) const {
        auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, i));
        return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(s_, i))) : std::string();
    }
    // Bytes as stored, whatever the column's type (engine state, journal entries).
    // Valid until the next step or the end of the statement.
    std::string_view text_view(int i) const {
        auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, i));
        return p ? std::string_view(p, static_cast<std::size_t>(sqlite3_column_bytes(s_, i)))
                 : std::string_view();
    }
    std::string bytes(int i) const {
        auto* p = static_cast<const char*>(sqlite3_column_blob(s_, i));
        return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(s_, i))) : std::string();
    }

  private:
    Query& check(int rc) {
        if (rc != SQLITE_OK) throw SqlError{rc, sqlite3_errmsg(db_)};
        return *this;
    }
    sqlite3* db_;
    sqlite3_stmt* s_;
    int n_ = 0;
};

// Statements are prepared once per connection and kept, keyed by their SQL
// text's address (every statement is a string literal).
Query cached_statement(sqlite3* db, std::unordered_map<const char*, sqlite3_stmt*>& cache, const char* sql);

// A read-only connection of its own. In WAL mode readers never wait for the
// writer (and the writer never waits for them), so lookups on the milter's
// end-of-message path do not queue behind an ingest or record transaction.
struct ReadConn {
    sqlite3* db = nullptr;
    std::unordered_map<const char*, sqlite3_stmt*> cache;
    ReadConn() = default;
    ReadConn(const ReadConn&) = delete;
    ReadConn& operator=(const ReadConn&) = delete;
    ~ReadConn() {
        for (auto& [sql, s] : cache) sqlite3_finalize(s);
        if (db) sqlite3_close_v2(db);
    }
    Query stmt(const char* sql) { return cached_statement(db, cache, sql); }
};

inline std::uint64_t hash64(std::string_view s) noexcept {
    const std::uint64_t h = std::hash<std::string_view>{}(s);
    return h == 0 ? 1 : h;
}
inline std::uint32_t hash32(std::string_view s) noexcept {
    const std::uint64_t h = std::hash<std::string_view>{}(s);
    const auto f = static_cast<std::uint32_t>(h ^ (h >> 32));
    return f == 0 ? 1 : f;
}

// A set of hashes (0 stands for an empty slot: hash64 and hash32 never give
// it), open addressing, at most half full: 2-4 slots per member, and half
// again while it grows.
template <typename Slot>
class HashSet {
  public:
    bool contains(Slot h) const noexcept {
        if (slots_.empty()) return false;
        const std::size_t mask = slots_.size() - 1;
        for (std::size_t i = h & mask;; i = (i + 1) & mask) {
            if (slots_[i] == h) return true;
            if (slots_[i] == 0) return false;
        }
    }
    void insert(Slot h) {
        if ((size_ + 1) * 2 > slots_.size()) grow();
        place(h);
    }
    void clear() {
        slots_ = {};
        size_ = 0;
    }

  private:
    void place(Slot h) {
        const std::size_t mask = slots_.size() - 1;
        for (std::size_t i = h & mask;; i = (i + 1) & mask) {
            if (slots_[i] == h) return;
            if (slots_[i] == 0) {
                slots_[i] = h;
                ++size_;
                return;
            }
        }
    }
    void grow() {
        std::vector<Slot> old = std::move(slots_);
        slots_.assign(std::max<std::size_t>(1024, old.size() * 2), 0);
        size_ = 0;
        for (Slot h : old)
            if (h != 0) place(h);
    }
    std::vector<Slot> slots_;
    std::size_t size_ = 0;
};

class SqliteLedger final : public Ledger {
  public:
    SqliteLedger(std::string path, LedgerOptions options);
    ~SqliteLedger() override;

    Status open();

    std::string_view backend() const noexcept override { return "sqlite"; }
    std::optional<EventKeyer> event_keyer() override { return keyer_; }
    bool stores_compressed_journal() const noexcept override { return true; }

    void set_bulk_mode(bool on) noexcept override;

    // The secondary indexes bulk mode may defer, as the schema defines them.
    struct IndexDef {
        const char* name;
        const char* create;
    };
    static constexpr IndexDef kSecondaryIndexes[] = {
        // The first two are the ingest path's (leave_queue_id_map builds them).
        {"messages_queue_id_live",
         "CREATE UNIQUE INDEX IF NOT EXISTS messages_queue_id_live ON messages(queue_id) WHERE finished IS "
         "NULL"},
        {"recipients_message_address",
         "CREATE UNIQUE INDEX IF NOT EXISTS recipients_message_address ON recipients(message, address)"},
        {"messages_block_queue_id",
         "CREATE INDEX IF NOT EXISTS messages_block_queue_id ON messages(id / " RG_HISTORY_BLOCK
         ", queue_id)"},
        {"messages_message_id_queued",
         "CREATE INDEX IF NOT EXISTS messages_message_id_queued ON messages(message_id) "
         "WHERE message_id IS NOT NULL AND state IN ('incoming','active','deferred','hold')"},
        {"messages_block_message_id",
         "CREATE INDEX IF NOT EXISTS messages_block_message_id ON messages(id / " RG_HISTORY_BLOCK
         ", message_id) "
         "WHERE message_id IS NOT NULL"},
        {"messages_fingerprint_queued",
         "CREATE INDEX IF NOT EXISTS messages_fingerprint_queued ON messages(fingerprint) "
         "WHERE fingerprint IS NOT NULL AND state IN ('active','deferred','hold')"},
        {"messages_finished",
         "CREATE INDEX IF NOT EXISTS messages_finished ON messages(finished) WHERE finished IS NOT NULL"},
        {"messages_updated", "CREATE INDEX IF NOT EXISTS messages_updated ON messages(updated)"},
        {"recipients_block_address",
         "CREATE INDEX IF NOT EXISTS recipients_block_address ON recipients(message / " RG_HISTORY_BLOCK
         ", address)"},
        // Keyed by destination name: each ended episode's entry landed on a
        // random page. Only reports and prune read them, never the ingest path.
        {"episodes_destination",
         "CREATE INDEX IF NOT EXISTS episodes_destination ON episodes(kind, name, first_deferral)"},
        {"episodes_ended", "CREATE INDEX IF NOT EXISTS episodes_ended ON episodes(ended)"},
    };

    std::int64_t data_version();

    void leave_queue_id_map(std::string_view why);
    std::int64_t stored_message_id(const std::string& queue_id);
    bool queue_id_ever_seen(const std::string& queue_id);
    void leave_map_if_retired(const std::string& queue_id);

    void ensure_indexes();
    // A ledger file this large sorts its deferred indexes with two threads (ensure_indexes).
    static constexpr std::int64_t kSortThreadsFrom = std::int64_t{128} << 20;

    Result<IngestResult> ingest(std::span<const IngestItem> batch,
                                const std::optional<FollowerPosition>& position,
                                BatchJournal journal = {}) override;

    Result<std::optional<FollowerPosition>> load_position(std::string_view source) override;

    Status save_position(const FollowerPosition& position) override;

    Status record_identity(const MessageIdentity& id) override;

    Status record_identities(std::span<const MessageIdentity> identities) override;

    void store_identity(const MessageIdentity& id);

    Result<std::vector<PendingCopy>> find_pending_copies(const PendingCopyQuery& query) override;

    // A scan of messages (no index on state): run at milter start and every
    // --filter-rescan, on a read connection of its own, so no writer waits for it.
    bool can_list_identities() const noexcept override { return true; }
    Status for_each_open_identity(
        const std::function<void(std::string_view message_id, std::string_view fingerprint)>& f) override;

    Result<std::optional<MessageInfo>> get_message(std::string_view queue_id) override;

    Result<std::vector<MessageInfo>> find_messages_by_message_id(std::string_view message_id) override;

    Result<std::vector<RecipientInfo>> get_recipients(std::string_view queue_id) override;

    Result<std::int64_t> count_deliveries(TimePoint from, TimePoint to) override;

    Result<std::vector<RecipientInfo>> find_recipients_by_address(std::string_view address,
                                                                  std::size_t limit) override;

    Result<std::optional<DestinationInfo>> get_destination(DestinationKind kind,
                                                           std::string_view name) override;

    Result<std::vector<DestinationInfo>> list_destinations(const DestinationFilter& f) override;

    Result<std::map<std::string, std::int64_t>> count_destinations_by_state() override;

    Result<std::int64_t> count_destinations_delivered(DestinationKind kind, TimePoint since) override;

    Result<std::vector<Episode>> episode_history(DestinationKind kind, std::string_view name, TimePoint from,
                                                 TimePoint to) override;

    Result<std::vector<Episode>> episodes_between(TimePoint from, TimePoint to) override;

    Status set_destination_state(DestinationKind kind, std::string_view name, std::string_view state,
                                 TimePoint at) override;

    Result<std::int64_t> set_flag(const Flag& flag) override;

    Result<std::int64_t> clear_flags(std::string_view destination, TimePoint at) override;

    Result<std::vector<Flag>> list_flags(std::optional<std::string_view> destination, TimePoint now,
                                         bool include_inactive) override;

    Result<std::int64_t> add_verdict_count(std::string_view verdict, std::int64_t delta) override;

    Result<std::map<std::string, std::int64_t>> verdict_counts() override;

    Status put_state(std::string_view key, std::string_view value) override;

    Result<std::optional<std::string>> get_state(std::string_view key) override;

    Result<std::uint64_t> append_journal(std::span<const std::string> entries) override;

    Result<std::vector<EngineJournalEntry>> read_journal(std::uint64_t after, std::size_t limit) override;

    Status save_engine_state(std::string_view key, std::string_view value, std::uint64_t journal_seq,
                             std::uint64_t outbox_written) override;

    Result<std::uint64_t> apply_verdict_effects(std::span<const VerdictEffect> effects,
                                                std::uint64_t outbox_written) override;

    Result<std::uint64_t> verdict_mark() override;

    Result<std::vector<OutboxEntry>> read_outbox() override;

    Result<PruneResult> prune(const RetentionPolicy& policy, TimePoint now) override;

    Result<LedgerStats> stats() override;

    LedgerCounters counters() const noexcept override { return counters_.snapshot(); }

  private:
    static bool older(const PendingCopy& a, const PendingCopy& b);

    Query stmt(const char* sql) { return cached_statement(db_, cache_, sql); }

    // Statements shared by the single operations and apply_verdict_effects
    // (one text each: the statement cache is keyed by the text's address).
    static constexpr const char* kSetDestinationState =
        "INSERT INTO destinations(kind, name, state, state_changed, updated) VALUES(?1, ?2, ?3, ?4, ?4) "
        "ON CONFLICT(kind, name) DO UPDATE SET state = excluded.state, "
        "state_changed = excluded.state_changed, updated = MAX(updated, excluded.updated)";
    static constexpr const char* kInsertFlag =
        "INSERT INTO flags(destination, reason, set_at, expires_at, cleared_at) VALUES(?, ?, ?, ?, ?)";
    static constexpr const char* kClearFlags =
        "UPDATE flags SET cleared_at = ?1 WHERE destination = ?2 AND cleared_at IS NULL "
        "AND (expires_at IS NULL OR expires_at > ?1)";
    static constexpr const char* kAddVerdictCountReturning =
        "INSERT INTO verdict_counts(verdict, count) VALUES(?1, ?2) ON CONFLICT(verdict) DO UPDATE "
        "SET count = count + excluded.count RETURNING count";
    static constexpr const char* kAddVerdictCount =
        "INSERT INTO verdict_counts(verdict, count) VALUES(?1, ?2) ON CONFLICT(verdict) DO UPDATE "
        "SET count = count + excluded.count";

    void store_state(std::string_view key, std::string_view value);

    std::string journal_;             // the batch's engine journal entry, built during ingest
    std::string journal_compressed_;  // its stored form, when the caller made none

    void trim_outbox(std::uint64_t written);

    std::uint64_t load_mark();

    std::int64_t exec_bound(const char* sql, std::initializer_list<std::int64_t> args);

    void exec(const char* sql);

    void migrate();
    // The event-key secret (docs/ledger.md "Event keys"), read or made in the
    // opening's migration transaction.
    void load_event_keyer();

    static Error to_error(const SqlError& e);
    // to_error, and for SQLITE_READONLY what is not writable and how to fix it.
    Error error_of(const SqlError& e) const;

    template <typename F>
    Status guard(F&& f) noexcept {
        try {
            f();
            return {};
        } catch (const SqlError& e) {
            return error_of(e);
        } catch (const std::exception& e) {
            return make_error(ErrorKind::internal, std::string("ledger (sqlite): ") + e.what());
        } catch (...) {
            return make_error(ErrorKind::internal, "ledger (sqlite): unknown failure");
        }
    }

    // One IMMEDIATE transaction: the write lock is taken up front, so two writers
    // wait on busy_timeout instead of deadlocking on a read-to-write upgrade.
    template <typename F>
    Status write(F&& f) noexcept {
        std::lock_guard lock(mutex_);
        if (checkpointer_) checkpointer_->before_write();
        auto st = guard([&] {
            exec("BEGIN IMMEDIATE");
            try {
                f();
                exec("COMMIT");
            } catch (...) {
                sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
                throw;
            }
        });
        if (!st && st.error().kind == ErrorKind::unavailable) options_.warn(st.error().message);
        return st;
    }

    template <typename T, typename F>
    Result<T> read(F&& f) noexcept {
        std::lock_guard lock(mutex_);
        std::optional<T> value;
        auto st = guard([&] { value.emplace(f()); });
        if (!st) return counters_.count(Result<T>(st.error()));
        return counters_.count(Result<T>(std::move(*value)));
    }

    // The main connection, for read_concurrent's fallback.
    struct MainConn {
        SqliteLedger& ledger;
        Query stmt(const char* sql) { return ledger.stmt(sql); }
    };

    // A read on a pooled read-only connection (see ReadConn), so it runs
    // alongside writes and other reads. An in-memory database has no second
    // connection; there, and when no read-only connection can be opened
    // (counted in shared_reads, warned once), it runs on the main connection
    // under its mutex like read(). f runs one statement, so that statement is the
    // read transaction (one snapshot).
    template <typename T, typename F>
    Result<T> read_concurrent(std::optional<std::chrono::steady_clock::time_point> deadline, F&& f) noexcept {
        if (deadline && std::chrono::steady_clock::now() >= *deadline)
            return counters_.count(
                Result<T>(make_error(ErrorKind::timeout, "ledger (sqlite): lookup deadline passed")));
        std::unique_ptr<ReadConn> conn = take_reader();
        if (!conn) {
            return read<T>([&] {
                MainConn main{*this};
                return f(main);
            });
        }
        // The deadline: SQLite calls this every kProgressSteps virtual machine
        // steps and interrupts the statement when it returns non-zero.
        if (deadline)
            sqlite3_progress_handler(
                conn->db, kProgressSteps,
                [](void* d) -> int {
                    return std::chrono::steady_clock::now() >=
                           *static_cast<const std::chrono::steady_clock::time_point*>(d);
                },
                &*deadline);
        struct ClearHandler {
            sqlite3* db;
            ~ClearHandler() { sqlite3_progress_handler(db, 0, nullptr, nullptr); }
        } clear{conn->db};
        std::optional<T> value;
        // f runs one statement: its read transaction (snapshot, WAL locks) is that statement's
        auto st = guard([&] { value.emplace(f(*conn)); });
        if (!st) return counters_.count(Result<T>(st.error()));  // that connection is dropped
        give_back(std::move(conn));
        return counters_.count(Result<T>(std::move(*value)));
    }

    std::unique_ptr<ReadConn> take_reader() noexcept;

    void give_back(std::unique_ptr<ReadConn> conn) noexcept;

    static bool in_memory(const std::string& path);

    void store_position(const FollowerPosition& p);

    // Replay protection (schema 7): the (time, key) pairs of a batch's fresh
    // events, packed little-endian, 16 bytes each, in one seen_batches row
    // with the batch's time span; the pairs a new batch may repeat are those
    // of the rows whose span meets its own (and, from older files, the
    // seen_events rows in its span).
    struct SeenHash {
        std::size_t operator()(const std::pair<std::int64_t, std::uint64_t>& p) const noexcept {
            return static_cast<std::size_t>(p.second ^
                                            (static_cast<std::uint64_t>(p.first) * 0x9E3779B97F4A7C15ULL));
        }
    };

    // The batch's (time, key) pairs: open addressing in one array that keeps
    // its size between batches, so a batch's tens of thousands of inserts
    // allocate nothing (a node-based set allocated and freed one node each).
    class SeenSet {
      public:
        void clear() {
            if (size_ > 0) std::fill(slots_.begin(), slots_.end(), Slot{});
            size_ = 0;
        }
        // false when the pair was there already.
        bool insert(std::int64_t t, std::uint64_t key) {
            if ((size_ + 1) * 2 > slots_.size()) grow();
            return place(t, key);
        }

      private:
        struct Slot {
            std::int64_t t = 0;
            std::uint64_t key = 0;
            bool used = false;
        };
        bool place(std::int64_t t, std::uint64_t key) {
            const std::size_t mask = slots_.size() - 1;
            for (std::size_t i = SeenHash{}({t, key}) & mask;; i = (i + 1) & mask) {
                Slot& s = slots_[i];
                if (!s.used) {
                    s = Slot{t, key, true};
                    ++size_;
                    return true;
                }
                if (s.t == t && s.key == key) return false;
            }
        }
        void grow() {
            std::vector<Slot> old = std::move(slots_);
            slots_.assign(std::max<std::size_t>(1024, old.size() * 2), Slot{});
            size_ = 0;
            for (const auto& s : old)
                if (s.used) place(s.t, s.key);
        }
        std::vector<Slot> slots_;
        std::size_t size_ = 0;
    };

    static void put_u64(std::string& out, std::uint64_t v) {
        for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    }
    static std::uint64_t get_u64(const unsigned char* p) {
        std::uint64_t v = 0;
        for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
        return v;
    }

    void load_seen(std::span<const IngestItem> batch);

    void store_seen();

    std::int64_t prune_seen(std::int64_t cut, std::int64_t budget, bool& more);
    // Run by prune between its passes, no transaction open (set_prune_pass_hook).
    std::function<void()> prune_pass_hook_;
    friend void set_prune_pass_hook(Ledger& ledger, std::function<void()> hook);

    // The batch's message and recipient rows, kept in memory while the batch's
    // events are applied and written once at its end (flush_rows): a message's
    // life (client, cleanup, qmgr, deliveries, removal) takes a few seconds and
    // mostly falls into one batch, so one INSERT replaces the eight or so
    // statements (and index updates of `updated`, `state`, `finished`) its
    // events used to run one by one. Safe because the batch holds the write
    // lock (BEGIN IMMEDIATE); rows are loaded from the table on first touch and
    // new rows are inserted in first-touch order, as the statements did, so
    // they get the same ids.
#define RECIPIENT_ROW_COLUMNS                                                                       \
    "id, queue_id, address, domain, state, attempts, first_attempt, last_attempt, first_deferral, " \
    "reply_code, "                                                                                  \
    "enhanced, reply_text, stage, relay, category"
    struct MessageRow {
        std::int64_t id = 0;  // 0: not in the table yet
        std::string queue_id, first_queue_id;
        std::optional<std::string> previous_queue_id, next_queue_id, message_id, fingerprint, sender;
        std::int64_t size = -1, nrcpt = -1;
        std::optional<std::int64_t> arrival, finished;
        std::string state = "incoming";
        std::string host;
        std::int64_t updated = 0;
        bool dirty = false;
    };
    struct RecipientRow {
        std::int64_t id = 0;  // 0: not in the table yet
        std::string queue_id, address, domain, state = "pending";
        std::int64_t attempts = 0;
        std::optional<std::int64_t> first_attempt, last_attempt, first_deferral;
        std::int64_t reply_code = 0;
        std::string enhanced, reply_text, stage, relay, category = "unknown";
        bool dirty = false;
    };

    // Bulk mode into an empty ledger (set_bulk_mode): the row ids of the
    // messages and recipients the import wrote, by queue id, so that the
    // ingest path reads its rows by id without the two queue-id indexes
    // (dropped meanwhile), and knows that a queue id it never wrote has no row
    // (so never inserts one twice). A finished message leaves the map an hour
    // of log time after it finished (kLinger: an expired message's bounce
    // notice and removal, logged right after the expiry, may fall into the
    // next batch) and only a 64-bit hash of its queue id stays: memory follows
    // the mail queue, plus 8-16 bytes per finished message. A queue id logged
    // again after that (rare: Postfix does not reuse a queue id soon), a hash
    // collision, another connection's commit or the end of bulk mode ends the
    // map for the rest of the import and builds the indexes
    // (leave_queue_id_map). A batch's changes are staged and take effect when
    // its transaction commits.
    class QueueIdMap {
      public:
        struct Entry {
            std::int64_t message = 0;                                      // row id, 0: no row
            std::vector<std::pair<std::string, std::int64_t>> recipients;  // address, row id
        };
        bool active() const noexcept { return active_; }
        std::int64_t version() const noexcept { return version_; }  // PRAGMA data_version at the start
        void start(std::int64_t version) {
            stop();
            active_ = true;
            version_ = version;
        }
        void stop() {
            active_ = false;
            live_ = {};
            retired_.clear();
            lingering_.clear();
            clock_ = 0;
            discard_staged();
        }
        const Entry* find(const std::string& queue_id) const {
            auto it = live_.find(queue_id);
            return it == live_.end() ? nullptr : &it->second;
        }
        bool retired(std::string_view queue_id) const { return retired_.contains(hash(queue_id)); }
        void stage_message(const std::string& queue_id, std::int64_t id) {
            if (active_) staged_messages_.emplace_back(queue_id, id);
        }
        void stage_recipient(const std::string& queue_id, const std::string& address, std::int64_t id) {
            if (active_) staged_recipients_.push_back({queue_id, address, id});
        }
        void stage_finished(const std::string& queue_id, std::int64_t finished) {
            if (active_) staged_finished_.emplace_back(finished, queue_id);
        }
        void discard_staged() {
            staged_messages_.clear();
            staged_recipients_.clear();
            staged_finished_.clear();
        }
        // settled: each message let go of, with its recipients' row ids
        // (LedgerOptions::sqlite_bulk_settled), after the batch committed.
        void commit_staged(const std::function<void(std::int64_t, std::span<const std::int64_t>)>& settled) {
            if (active_) {
                for (auto& [queue_id, id] : staged_messages_) live_[queue_id].message = id;
                for (auto& r : staged_recipients_)
                    live_[r.queue_id].recipients.emplace_back(std::move(r.address), r.id);
                for (auto& finished : staged_finished_) {
                    clock_ = std::max(clock_, finished.first);
                    lingering_.push_back(std::move(finished));
                }
                while (!lingering_.empty() && lingering_.front().first < clock_ - kLinger) {
                    auto it = live_.find(lingering_.front().second);
                    if (settled && it != live_.end() && it->second.message != 0) {
                        settled_rows_.clear();
                        for (const auto& r : it->second.recipients) settled_rows_.push_back(r.second);
                        settled(it->second.message, settled_rows_);
                    }
                    if (it != live_.end()) live_.erase(it);
                    retired_.insert(hash(lingering_.front().second));
                    lingering_.pop_front();
                }
            }
            discard_staged();
        }
        std::size_t live_size() const noexcept { return live_.size(); }

      private:
        static constexpr std::int64_t kLinger = 3600LL * 1000000;  // microseconds of log time
        static std::uint64_t hash(std::string_view s) noexcept { return hash64(s); }
        struct StagedRecipient {
            std::string queue_id, address;
            std::int64_t id = 0;
        };
        bool active_ = false;
        std::int64_t version_ = 0;
        std::unordered_map<std::string, Entry> live_;
        HashSet<std::uint64_t> retired_;
        std::vector<std::pair<std::string, std::int64_t>> staged_messages_;
        std::vector<StagedRecipient> staged_recipients_;
        std::vector<std::pair<std::int64_t, std::string>> staged_finished_;  // finished at, queue id
        std::deque<std::pair<std::int64_t, std::string>> lingering_;         // finished, still in live_
        std::int64_t clock_ = 0;  // the latest finish seen (log time)
        std::vector<std::int64_t> settled_rows_;
    };

    static std::optional<std::string> opt_str(const Query& q, int i) {
        if (q.is_null(i)) return std::nullopt;
        return q.str(i);
    }
    static std::optional<std::int64_t> opt_i64(const Query& q, int i) {
        if (q.is_null(i)) return std::nullopt;
        return q.col(i);
    }

    MessageRow& message_row(const std::string& queue_id, std::int64_t t);

    static std::string recipient_key(std::string_view queue_id, std::string_view address) {
        std::string key;
        key.reserve(queue_id.size() + 1 + address.size());
        key.append(queue_id).push_back('\0');
        key.append(address);
        return key;
    }

    RecipientRow* recipient_row(const std::string& queue_id, const std::string& address);

    static RecipientRow read_recipient_row(const Query& q);

    std::vector<std::size_t> recipients_of(const std::string& queue_id);

    void set_message_state(const std::string& queue_id, std::int64_t t, const char* state, bool finishes);

    void apply(const Op& op);

    void apply_pickup(const Op& op);

    void apply_delivery(const Op& op);

    void flush_rows();

    void clear_rows();

    // Destination rows touched by the current batch, kept in memory and written
    // once per batch (flush_destinations), in the order first touched: a busy
    // MX sees hundreds of deferrals per batch. Safe because the batch holds the
    // write lock (BEGIN IMMEDIATE).
    // Neither `state` nor `state_changed` is here: only the verdict effects
    // write them, and the batch's UPDATE leaves them alone.
    // The `ep_*` columns: most destinations have no open episode, so a kept
    // row holds them only while one is open (or the table had them).
    struct DestinationEpisode {
        std::optional<std::int64_t> first, last;
        std::int64_t attempts = 0, messages = 0, categories = 0;
        std::string last_reply, last_relay;
    };
    struct DestinationRow {
        std::optional<std::int64_t> last_success, last_deferral;
        std::int64_t updated = 0;
        std::unique_ptr<DestinationEpisode> ep;  // nullptr: the columns' defaults
        bool in_table = false;                   // UPDATE it (by id), else INSERT
        std::int64_t id = 0;                     // its rowid, once in_table
        bool touched = false;                    // by the current batch: to be written
        // Queue ids known to be in episode_messages: for the current batch only
        // (released when it is written), so a long episode does not grow it.
        std::unique_ptr<std::unordered_set<std::string>> episode_messages;
    };
    using DestinationRows = PrehashedMap<DestinationRow>;  // "kind\tname", destination_hash(kind, name)

    // Bulk mode keeps the destination rows (dests_) between batches, so that a
    // destination is read once per import instead of once per batch that
    // touches it; otherwise they are dropped after each batch. The rows a
    // batch touched are dropped when it rolls back (read again when touched
    // again); all are dropped when another connection committed (PRAGMA
    // data_version), when a prune deleted rows, and when bulk mode ends. The
    // verdict effects need no drop: they write `state` and `state_changed`,
    // which the rows do not hold and the batch's UPDATE leaves alone, and
    // raise `updated`, which that UPDATE raises with MAX() as well.
    struct DestinationCache {
        bool active = false;
        std::int64_t version = 0;  // PRAGMA data_version when the rows were dropped last
        bool unsound = false;      // a kept row was missing from the table: drop them all
    };

    static std::optional<std::int64_t> max_opt(std::optional<std::int64_t> a, std::int64_t b) {
        return a ? std::max(*a, b) : b;
    }

    // `hash`: destination_hash(kind, name).
    DestinationRow& destination_row(const char* kind, const std::string& name, std::uint64_t hash);

    void record_deferral(const char* kind, const std::string& name, std::uint64_t hash,
                         const std::string& message, const Op& op);

    void record_success(const char* kind, const std::string& name, std::uint64_t hash, std::int64_t t);

    // Fetches ahead the kept destination rows that the deliveries a few items
    // after batch[i] will look up (PrehashedMap::prefetch).
    void prefetch_destinations(std::span<const IngestItem> batch, std::size_t i) const noexcept;

    void flush_destinations();

    void drop_touched_destinations();

    std::string path_;
    LedgerOptions options_;
    EventKeyer keyer_;  // set by open(), then only read
    sqlite3* db_ = nullptr;
    std::unordered_map<const char*, sqlite3_stmt*> cache_;
    // The batch's rows (see MessageRow); cleared after each batch.
    static constexpr std::size_t kNoRow = static_cast<std::size_t>(-1);  // known absent from the table
    std::vector<MessageRow> msgs_;
    std::unordered_map<std::string, std::size_t> msg_index_;
    std::vector<RecipientRow> rcpts_;
    std::unordered_map<std::string, std::size_t> rcpt_index_;  // recipient_key -> rcpts_ or kNoRow
    std::unordered_set<std::string> rcpts_loaded_;             // queue ids whose rows are all in rcpts_
    DestinationRows dests_;                                    // see DestinationCache
    std::vector<DestinationRows::Entry*> dests_touched_;       // by the current batch
    std::string dest_key_;  // destination_row's key, built without allocating
    DestinationCache dest_cache_;
    SeenSet seen_;  // per batch, see load_seen
    std::vector<std::pair<std::int64_t, std::uint64_t>> fresh_keys_;
    std::string seen_blob_;
    bool indexes_deferred_ = false;  // bulk mode dropped kSecondaryIndexes (see set_bulk_mode)
    QueueIdMap qid_map_;             // active while the two queue-id indexes are deferred
    // Every queue id the table holds a row of, as far as this connection
    // knows (see message_row); built on the first lookup that needs it. 32-bit
    // hashes: a false "seen" costs one lookup in the block index, about one
    // in 3,000 new queue ids at a million messages; 8-16 bytes each.
    HashSet<std::uint32_t> queue_ids_;
    bool queue_ids_built_ = false;
    std::unique_ptr<BackgroundCheckpointer> checkpointer_;  // in bulk mode (see set_bulk_mode)
    std::mutex mutex_;
    Counters counters_;
    // Read-only connections for read_concurrent; idle ones are kept up to a
    // bound (one per concurrent lookup thread in practice).
    static constexpr std::size_t kMaxIdleReaders = 16;
    static constexpr int kProgressSteps = 1000;  // a few microseconds of work between deadline checks
    bool separate_readers_ = false;
    std::mutex pool_mutex_;
    std::vector<std::unique_ptr<ReadConn>> idle_readers_;
};

}  // namespace retryguard::ledger_detail
