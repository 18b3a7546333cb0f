// sqlite_ledger.cpp -- the embedded ledger backend: one SQLite file in WAL mode
// shared by the policy daemon, the milter and the CLI. Owns the schema and its
// migrations and applies ingest batches in one IMMEDIATE transaction together
// with the follower position (exactly-once). Must never let an exception or a
// half-applied batch escape: every public method catches, rolls back and
// returns an Error.
#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "ledger/internal.hpp"

namespace retryguard::ledger_detail {
namespace {

struct SqlError {
    int code;
    std::string message;
};

// The schema, one entry per version. A new version appends a migration; an
// existing entry is never edited (files in the field already ran it).
constexpr const char* kMigrations[] = {
    // version 1
    R"sql(
CREATE TABLE messages(
  queue_id TEXT PRIMARY KEY,
  first_queue_id TEXT NOT NULL,
  previous_queue_id TEXT,
  next_queue_id TEXT,
  message_id TEXT,
  fingerprint TEXT,
  sender TEXT,
  size INTEGER NOT NULL DEFAULT -1,
  nrcpt INTEGER NOT NULL DEFAULT -1,
  arrival INTEGER,
  state TEXT NOT NULL DEFAULT 'incoming',
  updated INTEGER NOT NULL,
  finished INTEGER
) WITHOUT ROWID;
CREATE INDEX messages_message_id ON messages(message_id) WHERE message_id IS NOT NULL;
CREATE INDEX messages_fingerprint ON messages(fingerprint) WHERE fingerprint IS NOT NULL;
CREATE INDEX messages_finished ON messages(finished) WHERE finished IS NOT NULL;
CREATE INDEX messages_updated ON messages(updated);
CREATE TABLE recipients(
  queue_id TEXT NOT NULL,
  address TEXT NOT NULL,
  domain TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT 'pending',
  attempts INTEGER NOT NULL DEFAULT 0,
  first_attempt INTEGER,
  last_attempt INTEGER,
  first_deferral INTEGER,
  reply_code INTEGER NOT NULL DEFAULT 0,
  enhanced TEXT NOT NULL DEFAULT '',
  reply_text TEXT NOT NULL DEFAULT '',
  stage TEXT NOT NULL DEFAULT '',
  relay TEXT NOT NULL DEFAULT '',
  category TEXT NOT NULL DEFAULT 'unknown',
  PRIMARY KEY(queue_id, address)
) WITHOUT ROWID;
CREATE INDEX recipients_address ON recipients(address);
CREATE TABLE destinations(
  kind TEXT NOT NULL,
  name TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT '',
  state_changed INTEGER,
  last_success INTEGER,
  last_deferral INTEGER,
  ep_first INTEGER,
  ep_last INTEGER,
  ep_attempts INTEGER NOT NULL DEFAULT 0,
  ep_messages INTEGER NOT NULL DEFAULT 0,
  ep_categories INTEGER NOT NULL DEFAULT 0,
  ep_last_reply TEXT NOT NULL DEFAULT '',
  ep_last_relay TEXT NOT NULL DEFAULT '',
  updated INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY(kind, name)
) WITHOUT ROWID;
CREATE INDEX destinations_state ON destinations(state);
CREATE TABLE episode_messages(
  kind TEXT NOT NULL, name TEXT NOT NULL, queue_id TEXT NOT NULL,
  PRIMARY KEY(kind, name, queue_id)
) WITHOUT ROWID;
CREATE TABLE episodes(
  id INTEGER PRIMARY KEY,
  kind TEXT NOT NULL, name TEXT NOT NULL,
  first_deferral INTEGER NOT NULL, last_deferral INTEGER NOT NULL, ended INTEGER NOT NULL,
  attempts INTEGER NOT NULL, messages INTEGER NOT NULL, categories INTEGER NOT NULL,
  last_reply TEXT NOT NULL, last_relay TEXT NOT NULL
);
CREATE INDEX episodes_destination ON episodes(kind, name, first_deferral);
CREATE INDEX episodes_ended ON episodes(ended);
CREATE TABLE flags(
  id INTEGER PRIMARY KEY,
  destination TEXT NOT NULL, reason TEXT NOT NULL,
  set_at INTEGER NOT NULL, expires_at INTEGER, cleared_at INTEGER
);
CREATE INDEX flags_destination ON flags(destination);
CREATE TABLE verdict_counts(verdict TEXT PRIMARY KEY, count INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE engine_state(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE positions(
  source TEXT PRIMARY KEY, device INTEGER NOT NULL, inode INTEGER NOT NULL, offset INTEGER NOT NULL,
  head_fingerprint TEXT NOT NULL, cursor TEXT NOT NULL, lines INTEGER NOT NULL
) WITHOUT ROWID;
-- No index on time: one B-tree per event on the ingest path; prune scans instead.
CREATE TABLE seen_events(key INTEGER PRIMARY KEY, time INTEGER NOT NULL);
)sql",
    // version 2: the engine journal (fresh events, ticks and commands the engine
    // state does not cover yet; AUTOINCREMENT: a trimmed-empty journal never reuses
    // a number) and the high-water mark of applied verdict effects.
    R"sql(
CREATE TABLE engine_journal(seq INTEGER PRIMARY KEY AUTOINCREMENT, entry BLOB NOT NULL);
CREATE TABLE engine_marks(name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
)sql",
    // version 3: the verdict outbox (lines of committed verdict effects until
    // the sink has them; written in the effects transaction, trimmed in the next).
    R"sql(
CREATE TABLE verdict_outbox(seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, line TEXT NOT NULL);
)sql",
    // version 4: seen_events keyed by (time, key). The key is a hash (random), so
    // every insert went to a random page of the B-tree and each batch dirtied
    // about one page per event; ordered by time first, inserts append and a batch
    // dirties a few pages. Same replay protection: the key hashes the event's
    // time, so one event always has the same (time, key). Pruning by time
    // becomes a range delete.
    R"sql(
CREATE TABLE seen_events_v4(time INTEGER NOT NULL, key INTEGER NOT NULL, PRIMARY KEY(time, key)) WITHOUT ROWID;
INSERT OR IGNORE INTO seen_events_v4(time, key) SELECT time, key FROM seen_events;
DROP TABLE seen_events;
ALTER TABLE seen_events_v4 RENAME TO seen_events;
)sql",
    // version 5: messages and recipients become rowid tables (rows in insertion
    // order) with their old keys as UNIQUE constraints. Keyed by queue id (random
    // hex), the rows of a batch's messages were spread over the whole table, so
    // every batch rewrote pages all over it and a ledger larger than the page
    // cache read them back from disk: the cost per event grew with the ledger.
    // In insertion order a batch's rows share a few pages at the end; only the
    // small queue-id indexes stay spread (and stay in the cache).
    R"sql(
CREATE TABLE messages_v5(
  id INTEGER PRIMARY KEY,
  queue_id TEXT NOT NULL UNIQUE,
  first_queue_id TEXT NOT NULL,
  previous_queue_id TEXT,
  next_queue_id TEXT,
  message_id TEXT,
  fingerprint TEXT,
  sender TEXT,
  size INTEGER NOT NULL DEFAULT -1,
  nrcpt INTEGER NOT NULL DEFAULT -1,
  arrival INTEGER,
  state TEXT NOT NULL DEFAULT 'incoming',
  updated INTEGER NOT NULL,
  finished INTEGER
);
INSERT INTO messages_v5(queue_id, first_queue_id, previous_queue_id, next_queue_id, message_id, fingerprint,
  sender, size, nrcpt, arrival, state, updated, finished)
  SELECT queue_id, first_queue_id, previous_queue_id, next_queue_id, message_id, fingerprint, sender, size,
  nrcpt, arrival, state, updated, finished FROM messages ORDER BY COALESCE(arrival, updated), queue_id;
DROP TABLE messages;
ALTER TABLE messages_v5 RENAME TO messages;
CREATE INDEX messages_message_id ON messages(message_id) WHERE message_id IS NOT NULL;
CREATE INDEX messages_fingerprint ON messages(fingerprint) WHERE fingerprint IS NOT NULL;
CREATE INDEX messages_finished ON messages(finished) WHERE finished IS NOT NULL;
CREATE INDEX messages_updated ON messages(updated);
CREATE TABLE recipients_v5(
  id INTEGER PRIMARY KEY,
  queue_id TEXT NOT NULL,
  address TEXT NOT NULL,
  domain TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT 'pending',
  attempts INTEGER NOT NULL DEFAULT 0,
  first_attempt INTEGER,
  last_attempt INTEGER,
  first_deferral INTEGER,
  reply_code INTEGER NOT NULL DEFAULT 0,
  enhanced TEXT NOT NULL DEFAULT '',
  reply_text TEXT NOT NULL DEFAULT '',
  stage TEXT NOT NULL DEFAULT '',
  relay TEXT NOT NULL DEFAULT '',
  category TEXT NOT NULL DEFAULT 'unknown',
  UNIQUE(queue_id, address)
);
INSERT INTO recipients_v5(queue_id, address, domain, state, attempts, first_attempt, last_attempt,
  first_deferral, reply_code, enhanced, reply_text, stage, relay, category)
  SELECT queue_id, address, domain, state, attempts, first_attempt, last_attempt, first_deferral, reply_code,
  enhanced, reply_text, stage, relay, category FROM recipients ORDER BY COALESCE(first_attempt, 0), queue_id,
  address;
DROP TABLE recipients;
ALTER TABLE recipients_v5 RENAME TO recipients;
CREATE INDEX recipients_address ON recipients(address);
)sql",
    // version 6: identical content is ordinary traffic (alerts, cron mail,
    // templates): the fingerprint lookup reads only copies the queue may be
    // retrying, so its cost follows the queue, not the history. A message the
    // queue manager has not picked up yet ('incoming') was never deferred.
    R"sql(
DROP INDEX messages_fingerprint;
CREATE INDEX messages_fingerprint_queued ON messages(fingerprint)
  WHERE fingerprint IS NOT NULL AND state IN ('active','deferred','hold');
)sql",
    // version 7: the keys of a batch's fresh events are kept as one row per
    // batch (packed (time, key) pairs, see SeenKeys) instead of one B-tree
    // entry per event, which cost an insert per event on the ingest path. A
    // batch reads the rows whose time span meets its own. seen_events keeps the
    // keys written before this version (still consulted) until prune drops them.
    R"sql(
CREATE TABLE seen_batches(id INTEGER PRIMARY KEY, first INTEGER NOT NULL, last INTEGER NOT NULL,
  count INTEGER NOT NULL, keys BLOB NOT NULL);
CREATE INDEX seen_batches_last ON seen_batches(last);
)sql",
    // version 8: the host that holds each message (the host field of its log
    // lines, or the milter's host name before the log names it), so that a
    // fleet sharing one ledger says which host is retrying a copy.
    R"sql(
ALTER TABLE messages ADD COLUMN host TEXT NOT NULL DEFAULT '';
)sql",
    // version 9: the UNIQUE constraints of messages(queue_id) and
    // recipients(queue_id, address) become unique indexes of their own (same
    // columns, same uniqueness, same upsert targets), so that bulk mode into an
    // empty ledger can drop them with the other secondary indexes and build
    // them once at its end: keyed by random queue ids, they were the pages
    // every batch rewrote all over (set_bulk_mode). Same columns in the same
    // order, same ids.
    R"sql(
CREATE TABLE messages_v9(
  id INTEGER PRIMARY KEY,
  queue_id TEXT NOT NULL,
  first_queue_id TEXT NOT NULL,
  previous_queue_id TEXT,
  next_queue_id TEXT,
  message_id TEXT,
  fingerprint TEXT,
  sender TEXT,
  size INTEGER NOT NULL DEFAULT -1,
  nrcpt INTEGER NOT NULL DEFAULT -1,
  arrival INTEGER,
  state TEXT NOT NULL DEFAULT 'incoming',
  updated INTEGER NOT NULL,
  finished INTEGER,
  host TEXT NOT NULL DEFAULT ''
);
INSERT INTO messages_v9(id, queue_id, first_queue_id, previous_queue_id, next_queue_id, message_id, fingerprint,
  sender, size, nrcpt, arrival, state, updated, finished, host)
  SELECT id, queue_id, first_queue_id, previous_queue_id, next_queue_id, message_id, fingerprint, sender, size,
  nrcpt, arrival, state, updated, finished, host FROM messages ORDER BY id;
DROP TABLE messages;
ALTER TABLE messages_v9 RENAME TO messages;
CREATE UNIQUE INDEX messages_queue_id ON messages(queue_id);
CREATE INDEX messages_message_id ON messages(message_id) WHERE message_id IS NOT NULL;
CREATE INDEX messages_fingerprint_queued ON messages(fingerprint)
  WHERE fingerprint IS NOT NULL AND state IN ('active','deferred','hold');
CREATE INDEX messages_finished ON messages(finished) WHERE finished IS NOT NULL;
CREATE INDEX messages_updated ON messages(updated);
CREATE TABLE recipients_v9(
  id INTEGER PRIMARY KEY,
  queue_id TEXT NOT NULL,
  address TEXT NOT NULL,
  domain TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT 'pending',
  attempts INTEGER NOT NULL DEFAULT 0,
  first_attempt INTEGER,
  last_attempt INTEGER,
  first_deferral INTEGER,
  reply_code INTEGER NOT NULL DEFAULT 0,
  enhanced TEXT NOT NULL DEFAULT '',
  reply_text TEXT NOT NULL DEFAULT '',
  stage TEXT NOT NULL DEFAULT '',
  relay TEXT NOT NULL DEFAULT '',
  category TEXT NOT NULL DEFAULT 'unknown'
);
INSERT INTO recipients_v9(id, queue_id, address, domain, state, attempts, first_attempt, last_attempt,
  first_deferral, reply_code, enhanced, reply_text, stage, relay, category)
  SELECT id, queue_id, address, domain, state, attempts, first_attempt, last_attempt, first_deferral, reply_code,
  enhanced, reply_text, stage, relay, category FROM recipients ORDER BY id;
DROP TABLE recipients;
ALTER TABLE recipients_v9 RENAME TO recipients;
CREATE UNIQUE INDEX recipients_queue_address ON recipients(queue_id, address);
CREATE INDEX recipients_address ON recipients(address);
)sql",
};
constexpr int kSchemaVersion = static_cast<int>(std::size(kMigrations));

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

MessageInfo read_message(const Query& q) {
    MessageInfo m;
    m.queue_id = q.str(0);
    m.previous_queue_id = q.str(1);
    m.first_queue_id = q.str(2);
    m.next_queue_id = q.str(3);
    m.message_id = q.str(4);
    m.fingerprint = q.str(5);
    m.sender = q.str(6);
    m.size = q.col(7);
    m.nrcpt = static_cast<int>(q.col(8));
    m.arrival = q.time(9);
    m.state = message_state_from_string(q.str(10)).value_or(MessageState::incoming);
    m.updated = from_micros(q.col(11));
    m.finished = q.time(12);
    m.host = q.str(13);
    return m;
}

#define RECIPIENT_COLUMNS                                                                           \
    "queue_id, address, state, attempts, first_attempt, last_attempt, first_deferral, reply_code, " \
    "enhanced, "                                                                                    \
    "reply_text, stage, relay, category"

RecipientInfo read_recipient(const Query& q) {
    RecipientInfo r;
    r.queue_id = q.str(0);
    r.address = q.str(1);
    r.state = recipient_state_from_string(q.str(2)).value_or(RecipientState::pending);
    r.attempts = static_cast<int>(q.col(3));
    r.first_attempt = q.time(4);
    r.last_attempt = q.time(5);
    r.first_deferral = q.time(6);
    r.reply_code = static_cast<int>(q.col(7));
    r.enhanced = q.str(8);
    r.reply_text = q.str(9);
    r.stage = q.str(10);
    r.relay = q.str(11);
    r.category = category_from_string(q.str(12)).value_or(Category::unknown);
    return r;
}

#define DESTINATION_COLUMNS                                                                           \
    "kind, name, state, state_changed, last_success, last_deferral, ep_first, ep_last, ep_attempts, " \
    "ep_messages, ep_categories, ep_last_reply, ep_last_relay"

DestinationInfo read_destination(const Query& q) {
    DestinationInfo d;
    d.kind = destination_kind_from_string(q.str(0)).value_or(DestinationKind::domain);
    d.name = q.str(1);
    d.state = q.str(2);
    d.state_changed = q.time(3);
    d.last_success = q.time(4);
    d.last_deferral = q.time(5);
    if (!q.is_null(6)) {
        Episode e;
        e.kind = d.kind;
        e.destination = d.name;
        e.first_deferral = from_micros(q.col(6));
        e.last_deferral = from_micros(q.col(7));
        e.attempts = q.col(8);
        e.messages = q.col(9);
        e.categories = static_cast<CategorySet>(q.col(10));
        e.last_reply = q.str(11);
        e.last_relay = q.str(12);
        d.episode = std::move(e);
    }
    return d;
}

Flag read_flag(const Query& q) {
    Flag f;
    f.id = q.col(0);
    f.destination = q.str(1);
    f.reason = q.str(2);
    f.set_at = from_micros(q.col(3));
    f.expires_at = q.time(4);
    f.cleared_at = q.time(5);
    return f;
}

class SqliteLedger final : public Ledger {
  public:
    SqliteLedger(std::string path, LedgerOptions options)
        : path_(std::move(path)), options_(std::move(options)), separate_readers_(!in_memory(path_)) {
        if (!options_.warn) options_.warn = default_warn();
    }
    ~SqliteLedger() override {
        if (indexes_deferred_) set_bulk_mode(false);
        idle_readers_.clear();  // before the main connection: the last one to close checkpoints
        for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
        if (db_) sqlite3_close_v2(db_);
    }

    Status open() {
        int rc = sqlite3_open_v2(path_.c_str(), &db_,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
        if (rc != SQLITE_OK) {
            std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
            return make_error(ErrorKind::io, "ledger: cannot open " + path_ + ": " + msg);
        }
        // Opening (WAL switch, schema check, migrations) needs the write lock once.
        // It happens at start, off the mail path: wait for it as long as a writer
        // may hold it (another daemon's ingest batch or prune), not the short busy
        // timeout a milter sets for its lookups; that one applies afterwards.
        constexpr std::chrono::milliseconds kOpenBusyTimeout{10000};
        sqlite3_busy_timeout(db_,
                             static_cast<int>(std::max(options_.busy_timeout, kOpenBusyTimeout).count()));
        sqlite3_extended_result_codes(db_, 1);
        auto opened = guard([&] {
            exec("PRAGMA journal_mode=WAL");
            // NORMAL in WAL mode: a process crash (kill -9) loses nothing committed; only a
            // power loss may drop the last transactions, batch and position together.
            exec("PRAGMA synchronous=NORMAL");
            exec("PRAGMA foreign_keys=OFF");
            exec("PRAGMA temp_store=MEMORY");
            exec("PRAGMA cache_size=-16000");
            migrate();
        });
        sqlite3_busy_timeout(db_, static_cast<int>(options_.busy_timeout.count()));
        return opened;
    }

    std::string_view backend() const noexcept override { return "sqlite"; }

    // Bulk import: a 64 MiB page cache instead of 16 MiB (the month of a busy
    // relay touches far more than 16 MiB of B-tree pages at random: messages and
    // recipients are keyed by queue id), and a WAL checkpoint every 256 MiB of
    // WAL instead of every 4 MiB (each checkpoint writes the pages back and
    // syncs twice; a page written by many batches is written back once).
    // synchronous stays NORMAL: a kill -9 loses nothing committed.
    // Into an empty ledger, the secondary indexes of messages and recipients
    // (kSecondaryIndexes: queue id, Message-ID, fingerprint, address, times)
    // are dropped and built once when bulk mode ends: keyed by random values,
    // each batch rewrote pages all over them. Lookups stay correct meanwhile
    // (scans); the ingest path finds its rows through the queue-id map instead
    // (QueueIdMap), which also keeps queue ids unique while their index is
    // missing. A process killed before the end leaves them missing; open()
    // builds them.
    void set_bulk_mode(bool on) noexcept override {
        std::lock_guard lock(mutex_);
        (void)guard([&] {
            exec(on ? "PRAGMA cache_size=-65536" : "PRAGMA cache_size=-16000");
            exec(on ? "PRAGMA wal_autocheckpoint=65536" : "PRAGMA wal_autocheckpoint=1000");
        });
        if (on && !indexes_deferred_) {
            auto st = guard([&] {
                exec("BEGIN IMMEDIATE");
                try {
                    Query q = stmt(
                        "SELECT NOT EXISTS(SELECT 1 FROM messages) AND NOT EXISTS(SELECT 1 FROM recipients)");
                    const bool empty = q.row() && q.col(0) != 0;
                    q.run();
                    if (empty)
                        for (const auto& index : kSecondaryIndexes)
                            exec(("DROP INDEX IF EXISTS " + std::string(index.name)).c_str());
                    const std::int64_t version = data_version();
                    exec("COMMIT");
                    indexes_deferred_ = empty;
                    if (empty) qid_map_.start(version);
                } catch (...) {
                    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
                    throw;
                }
            });
            if (!st) options_.warn("bulk mode: keeping the indexes: " + st.error().message);
        } else if (!on && indexes_deferred_) {
            qid_map_.stop();
            auto st = guard([&] { ensure_indexes(); });
            if (!st)
                options_.warn("bulk mode: building the indexes: " + st.error().message +
                              " (the next opening builds them)");
            indexes_deferred_ = false;
        }
    }

    // The secondary indexes bulk mode may defer, as the schema defines them.
    struct IndexDef {
        const char* name;
        const char* create;
    };
    static constexpr IndexDef kSecondaryIndexes[] = {
        {"messages_queue_id", "CREATE UNIQUE INDEX IF NOT EXISTS messages_queue_id ON messages(queue_id)"},
        {"recipients_queue_address",
         "CREATE UNIQUE INDEX IF NOT EXISTS recipients_queue_address ON recipients(queue_id, address)"},
        {"messages_message_id",
         "CREATE INDEX IF NOT EXISTS messages_message_id ON messages(message_id) WHERE message_id IS NOT "
         "NULL"},
        {"messages_fingerprint_queued",
         "CREATE INDEX IF NOT EXISTS messages_fingerprint_queued ON messages(fingerprint) "
         "WHERE fingerprint IS NOT NULL AND state IN ('active','deferred','hold')"},
        {"messages_finished",
         "CREATE INDEX IF NOT EXISTS messages_finished ON messages(finished) WHERE finished IS NOT NULL"},
        {"messages_updated", "CREATE INDEX IF NOT EXISTS messages_updated ON messages(updated)"},
        {"recipients_address", "CREATE INDEX IF NOT EXISTS recipients_address ON recipients(address)"},
    };

    // PRAGMA data_version: changes when another connection commits.
    std::int64_t data_version() {
        Query v = stmt("PRAGMA data_version");
        const std::int64_t version = v.row() ? v.col(0) : -1;
        v.run();
        return version;
    }

    // The queue-id map is given up for good (another writer, a retired queue
    // id seen again, a failed batch): the two unique indexes are built now, in
    // the current transaction, and rows are looked up by queue id again. If
    // that transaction rolls back, lookups stay correct (scans) and bulk mode's
    // end or the next opening builds them.
    void leave_queue_id_map(std::string_view why) {
        options_.warn("bulk mode: " + std::string(why) + ": building the queue-id indexes now");
        qid_map_.stop();
        for (std::size_t i = 0; i < 2; ++i) exec(kSecondaryIndexes[i].create);
    }

    void ensure_indexes() {
        exec("BEGIN IMMEDIATE");
        try {
            for (const auto& index : kSecondaryIndexes) exec(index.create);
            exec("COMMIT");
        } catch (...) {
            sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
            throw;
        }
    }

    Result<IngestResult> ingest(std::span<const IngestItem> batch,
                                const std::optional<FollowerPosition>& position) override {
        IngestResult result;
        auto st = write([&] {
            result = {};
            journal_.assign(kJournalBatchTag);
            clear_rows();
            dests_.clear();
            qid_map_.discard_staged();
            // Another connection wrote since: rows the map does not know may exist.
            if (qid_map_.active() && data_version() != qid_map_.version())
                leave_queue_id_map("another connection wrote to the ledger");
            load_seen(batch);
            for (const auto& item : batch) {
                Op op = plan(item);
                if (!seen_.insert(op.time, op.key)) {
                    ++result.duplicates;
                    result.fresh.push_back(false);
                    continue;
                }
                fresh_keys_.emplace_back(op.time, op.key);
                apply(op);
                append_journal_batch_item(journal_, item);
                ++result.applied;
                result.fresh.push_back(true);
            }
            flush_rows();
            flush_destinations();
            store_seen();
            if (position) store_position(*position);
            if (result.applied > 0) {
                // The engine journal: the batch's fresh events as one entry, in the
                // batch's transaction, so the engine is fed each exactly once (ingest.hpp).
                Query q = stmt("INSERT INTO engine_journal(entry) VALUES(?)");
                q.blob(journal_).run();
                result.journal_seq = static_cast<std::uint64_t>(sqlite3_last_insert_rowid(db_));
            }
        });
        clear_rows();
        dests_.clear();
        if (!st) {
            qid_map_.discard_staged();  // rolled back with the batch: the map stays as committed
            return counters_.count(Result<IngestResult>(st.error()));
        }
        qid_map_.commit_staged();
        counters_.events += result.applied;
        counters_.duplicates += result.duplicates;
        return counters_.count(Result<IngestResult>(result));
    }

    Result<std::optional<FollowerPosition>> load_position(std::string_view source) override {
        return read<std::optional<FollowerPosition>>([&]() -> std::optional<FollowerPosition> {
            Query q = stmt(
                "SELECT device, inode, offset, head_fingerprint, cursor, lines FROM positions WHERE source = "
                "?");
            q.text(source);
            if (!q.row()) return std::nullopt;
            FollowerPosition p;
            p.source = std::string(source);
            p.device = static_cast<std::uint64_t>(q.col(0));
            p.inode = static_cast<std::uint64_t>(q.col(1));
            p.offset = static_cast<std::uint64_t>(q.col(2));
            p.head_fingerprint = q.str(3);
            p.cursor = q.str(4);
            p.lines = static_cast<std::uint64_t>(q.col(5));
            return p;
        });
    }

    Status save_position(const FollowerPosition& position) override {
        return counters_.count(write([&] { store_position(position); }));
    }

    Status record_identity(const MessageIdentity& id) override {
        return record_identities(std::span<const MessageIdentity>(&id, 1));
    }

    Status record_identities(std::span<const MessageIdentity> identities) override {
        if (auto st = check_identities(identities); !st) return counters_.count(std::move(st));
        return counters_.count(write([&] {
            if (qid_map_.active())
                leave_queue_id_map("a message identity is recorded");  // its upserts need them
            for (const auto& id : identities) store_identity(id);
        }));
    }

    // An upsert on the queue-id indexes. While an import in bulk mode (in
    // another process) has them dropped (set_bulk_mode), the upsert has no
    // conflict target and fails to prepare: the same change is then made by
    // an UPDATE, and an INSERT when it found no row (the same outcome under
    // the write lock; the lookups scan until the indexes are back).
    void store_identity(const MessageIdentity& id) {
        const std::int64_t t = to_micros(id.time);
        const std::string message_id = normalize_message_id(id.message_id);
        const std::string sender = normalize_address(id.sender);
        const std::string host = bounded_host(id.host);
        bool unique_indexes = true;
        try {
            Query q = stmt(
                "INSERT INTO messages(queue_id, first_queue_id, message_id, fingerprint, sender, "
                "arrival, updated, host) VALUES(?1, ?1, ?2, ?3, ?4, ?5, ?5, ?6) ON CONFLICT(queue_id) DO "
                "UPDATE SET "
                "message_id = COALESCE(excluded.message_id, message_id), "
                "host = CASE WHEN host = '' THEN excluded.host ELSE host END, "
                "fingerprint = COALESCE(excluded.fingerprint, fingerprint), "
                "sender = COALESCE(excluded.sender, sender), "
                "arrival = MIN(COALESCE(arrival, excluded.arrival), excluded.arrival), "
                "updated = MAX(updated, excluded.updated)");
            q.text(id.queue_id).text_or_null(message_id).text_or_null(id.fingerprint).text_or_null(sender);
            q.i64(t).text(host).run();
        } catch (const SqlError& e) {
            if ((e.code & 0xff) != SQLITE_ERROR) throw;
            unique_indexes = false;
            Query u = stmt(
                "UPDATE messages SET message_id = COALESCE(?2, message_id), "
                "host = CASE WHEN host = '' THEN ?6 ELSE host END, fingerprint = COALESCE(?3, fingerprint), "
                "sender = COALESCE(?4, sender), arrival = MIN(COALESCE(arrival, ?5), ?5), "
                "updated = MAX(updated, ?5) WHERE queue_id = ?1");
            u.text(id.queue_id).text_or_null(message_id).text_or_null(id.fingerprint).text_or_null(sender);
            u.i64(t).text(host).run();
            if (sqlite3_changes(db_) == 0) {
                Query q = stmt(
                    "INSERT INTO messages(queue_id, first_queue_id, message_id, fingerprint, sender, "
                    "arrival, updated, host) VALUES(?1, ?1, ?2, ?3, ?4, ?5, ?5, ?6)");
                q.text(id.queue_id)
                    .text_or_null(message_id)
                    .text_or_null(id.fingerprint)
                    .text_or_null(sender);
                q.i64(t).text(host).run();
            }
        }
        for (const auto& r : id.recipients) {
            auto address = normalize_address(r);
            if (address.empty()) continue;
            Query q =
                stmt(unique_indexes
                         ? "INSERT OR IGNORE INTO recipients(queue_id, address, domain) VALUES(?1, ?2, ?3)"
                         : "INSERT INTO recipients(queue_id, address, domain) SELECT ?1, ?2, ?3 WHERE NOT "
                           "EXISTS(SELECT 1 FROM recipients WHERE queue_id = ?1 AND address = ?2)");
            q.text(id.queue_id).text(address).text(domain_of(address)).run();
        }
    }

    // One statement whatever the number of recipients: the pending recipients
    // of the messages with this Message-ID, then the deferred recipients of
    // the queued messages with this fingerprint (one index seek each); the
    // wanted addresses are picked out here. Copies by Message-ID are few
    // (usually none); copies by fingerprint can be many (identical alerts,
    // templates), so that half reads only what the queue may be retrying
    // (messages_fingerprint_queued): its cost follows the queue, not history.
    // One statement is its own read transaction: no BEGIN/COMMIT on the
    // end-of-message path.
    Result<std::vector<PendingCopy>> find_pending_copies(const PendingCopyQuery& query) override {
        if (auto st = check_query(query); !st)
            return counters_.count(Result<std::vector<PendingCopy>>(st.error()));
        const std::string message_id = normalize_message_id(query.message_id);
        if (message_id.empty() && query.fingerprint.empty()) return std::vector<PendingCopy>{};
        return read_concurrent<std::vector<PendingCopy>>(query.deadline, [&](auto& conn) {
            std::vector<std::string> wanted;
            std::unordered_map<std::string_view, std::size_t> index;
            wanted.reserve(query.recipients.size());
            for (const auto& raw : query.recipients) wanted.push_back(normalize_address(raw));
            for (std::size_t i = 0; i < wanted.size(); ++i) index.emplace(wanted[i], i);
            std::vector<std::optional<PendingCopy>> best(wanted.size());
            // UNION ALL of two single-index queries: SQLite's OR optimisation over both
            // indexes builds a temporary table to drop duplicates and was slower (7.1 against
            // 3.6-5.1 us per miss on a 100k-message ledger).
            Query q = conn.stmt(
                "SELECT m.queue_id, m.first_queue_id, r.domain, r.relay, r.reply_text, r.first_deferral, "
                "r.last_attempt, m.arrival, r.attempts, m.state, r.address, 1, m.host "
                "FROM messages m JOIN recipients r ON r.queue_id = m.queue_id WHERE m.message_id = ?1 AND "
                "m.queue_id <> ?3 "
                "AND m.state IN ('incoming','active','deferred','hold') AND r.state = 'pending' "
                "UNION ALL "
                "SELECT m.queue_id, m.first_queue_id, r.domain, r.relay, r.reply_text, r.first_deferral, "
                "r.last_attempt, m.arrival, r.attempts, m.state, r.address, 0, m.host "
                "FROM messages m JOIN recipients r ON r.queue_id = m.queue_id WHERE m.fingerprint = ?2 AND "
                "m.queue_id <> ?3 "
                "AND m.state IN ('active','deferred','hold') AND r.state = 'pending' "
                "AND r.first_deferral IS NOT NULL");
            q.text_or_null(message_id).text_or_null(query.fingerprint).text(query.exclude_queue_id);
            while (q.row()) {
                auto it = index.find(q.str(10));
                if (it == index.end()) continue;
                PendingCopy c;
                c.recipient = wanted[it->second];
                c.queue_id = q.str(0);
                c.first_queue_id = q.str(1);
                c.destination = q.str(2);
                c.relay = q.str(3);
                c.last_reply = q.str(4);
                c.first_deferral = q.time(5);
                c.last_attempt = q.time(6);
                c.arrival = q.time(7);
                c.attempts = static_cast<int>(q.col(8));
                c.message_state = message_state_from_string(q.str(9)).value_or(MessageState::incoming);
                c.matched_by_message_id = q.col(11) != 0;
                c.host = q.str(12);
                auto& slot = best[it->second];
                // the oldest copy; of one copy, its Message-ID match first
                if (!slot || older(c, *slot) ||
                    (c.queue_id == slot->queue_id && c.matched_by_message_id && !slot->matched_by_message_id))
                    slot = std::move(c);
            }
            std::vector<PendingCopy> out;
            for (auto& b : best)
                if (b) out.push_back(std::move(*b));
            return out;
        });
    }

    // A scan of messages (no index on state): run at milter start and every
    // --filter-rescan, on a read connection of its own, so no writer waits for it.
    bool can_list_identities() const noexcept override { return true; }
    Status for_each_open_identity(
        const std::function<void(std::string_view message_id, std::string_view fingerprint)>& f) override {
        auto r = read_concurrent<bool>(std::nullopt, [&](auto& conn) {
            Query q = conn.stmt(
                "SELECT message_id, fingerprint FROM messages "
                "WHERE state IN ('incoming','active','deferred','hold') "
                "AND (message_id IS NOT NULL OR fingerprint IS NOT NULL)");
            while (q.row()) f(q.str(0), q.str(1));
            return true;
        });
        if (!r) return r.error();
        return {};
    }

    Result<std::optional<MessageInfo>> get_message(std::string_view queue_id) override {
        return read<std::optional<MessageInfo>>([&]() -> std::optional<MessageInfo> {
            Query q = stmt(
                "SELECT queue_id, previous_queue_id, first_queue_id, next_queue_id, message_id, "
                "fingerprint, sender, size, nrcpt, arrival, state, updated, finished, host FROM messages "
                "WHERE queue_id = ?");
            q.text(queue_id);
            if (!q.row()) return std::nullopt;
            return read_message(q);
        });
    }

    Result<std::vector<MessageInfo>> find_messages_by_message_id(std::string_view message_id) override {
        return read<std::vector<MessageInfo>>([&] {
            std::vector<MessageInfo> out;
            Query q = stmt(
                "SELECT queue_id, previous_queue_id, first_queue_id, next_queue_id, message_id, "
                "fingerprint, sender, size, nrcpt, arrival, state, updated, finished, host FROM messages "
                "WHERE message_id = ? ORDER BY arrival, queue_id");
            q.text(normalize_message_id(message_id));
            while (q.row()) out.push_back(read_message(q));
            return out;
        });
    }

    Result<std::vector<RecipientInfo>> get_recipients(std::string_view queue_id) override {
        return read<std::vector<RecipientInfo>>([&] {
            std::vector<RecipientInfo> out;
            Query q =
                stmt("SELECT " RECIPIENT_COLUMNS " FROM recipients WHERE queue_id = ? ORDER BY address");
            q.text(queue_id);
            while (q.row()) out.push_back(read_recipient(q));
            return out;
        });
    }

    Result<std::int64_t> count_deliveries(TimePoint from, TimePoint to) override {
        return read<std::int64_t>([&] {
            Query q = stmt(
                "SELECT COUNT(*) FROM recipients WHERE state = 'sent' AND last_attempt >= ? AND last_attempt "
                "< ?");
            q.i64(to_micros(from)).i64(to_micros(to));
            return q.row() ? q.col(0) : std::int64_t{0};
        });
    }

    Result<std::vector<RecipientInfo>> find_recipients_by_address(std::string_view address,
                                                                  std::size_t limit) override {
        return read<std::vector<RecipientInfo>>([&] {
            std::vector<RecipientInfo> out;
            Query q = stmt("SELECT " RECIPIENT_COLUMNS
                           " FROM recipients WHERE address = ? ORDER BY COALESCE(last_attempt, 0) DESC, "
                           "queue_id LIMIT ?");
            q.text(normalize_address(address))
                .i64(static_cast<std::int64_t>(std::min<std::size_t>(limit, 1u << 30)));
            while (q.row()) out.push_back(read_recipient(q));
            return out;
        });
    }

    Result<std::optional<DestinationInfo>> get_destination(DestinationKind kind,
                                                           std::string_view name) override {
        return read<std::optional<DestinationInfo>>([&]() -> std::optional<DestinationInfo> {
            Query q = stmt("SELECT " DESTINATION_COLUMNS " FROM destinations WHERE kind = ? AND name = ?");
            q.text(to_string(kind)).text(name);
            if (!q.row()) return std::nullopt;
            return read_destination(q);
        });
    }

    Result<std::vector<DestinationInfo>> list_destinations(const DestinationFilter& f) override {
        return read<std::vector<DestinationInfo>>([&] {
            std::vector<DestinationInfo> out;
            Query q =
                stmt("SELECT " DESTINATION_COLUMNS
                     " FROM destinations WHERE (?1 IS NULL OR kind = ?1) AND (?2 IS NULL OR state = ?2) "
                     "AND (?3 = 0 OR ep_first IS NOT NULL) ORDER BY kind, name LIMIT ?4 OFFSET ?5");
            if (f.kind)
                q.text(to_string(*f.kind));
            else
                q.null();
            if (f.state)
                q.text(*f.state);
            else
                q.null();
            // LIMIT -1: every row (SQLite's spelling of no limit).
            constexpr auto kMax = static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max());
            q.i64(f.open_episode_only ? 1 : 0)
                .i64(f.limit >= kMax ? -1 : static_cast<std::int64_t>(f.limit))
                .i64(static_cast<std::int64_t>(std::min(f.offset, kMax)));
            while (q.row()) out.push_back(read_destination(q));
            return out;
        });
    }

    Result<std::vector<Episode>> episode_history(DestinationKind kind, std::string_view name, TimePoint from,
                                                 TimePoint to) override {
        return read<std::vector<Episode>>([&] {
            std::vector<Episode> out;
            Query q = stmt(
                "SELECT first_deferral, last_deferral, ended, attempts, messages, categories, last_reply, "
                "last_relay FROM episodes WHERE kind = ? AND name = ? AND first_deferral BETWEEN ? AND ? "
                "ORDER BY first_deferral, id");
            q.text(to_string(kind)).text(name).i64(to_micros(from)).i64(to_micros(to));
            while (q.row()) {
                Episode e;
                e.kind = kind;
                e.destination = std::string(name);
                e.first_deferral = from_micros(q.col(0));
                e.last_deferral = from_micros(q.col(1));
                e.ended = from_micros(q.col(2));
                e.attempts = q.col(3);
                e.messages = q.col(4);
                e.categories = static_cast<CategorySet>(q.col(5));
                e.last_reply = q.str(6);
                e.last_relay = q.str(7);
                out.push_back(std::move(e));
            }
            return out;
        });
    }

    Status set_destination_state(DestinationKind kind, std::string_view name, std::string_view state,
                                 TimePoint at) override {
        return counters_.count(write([&] {
            Query q = stmt(kSetDestinationState);
            q.text(to_string(kind)).text(name).text(state).i64(to_micros(at)).run();
        }));
    }

    Result<std::int64_t> set_flag(const Flag& flag) override {
        std::int64_t id = 0;
        auto st = write([&] {
            Query q = stmt(kInsertFlag);
            q.text(flag.destination).text(flag.reason).i64(to_micros(flag.set_at)).opt(flag.expires_at);
            q.opt(flag.cleared_at).run();
            id = sqlite3_last_insert_rowid(db_);
        });
        if (!st) return counters_.count(Result<std::int64_t>(st.error()));
        return counters_.count(Result<std::int64_t>(id));
    }

    Result<std::int64_t> clear_flags(std::string_view destination, TimePoint at) override {
        std::int64_t n = 0;
        auto st = write([&] {
            Query q = stmt(kClearFlags);
            q.i64(to_micros(at)).text(destination).run();
            n = sqlite3_changes(db_);
        });
        if (!st) return counters_.count(Result<std::int64_t>(st.error()));
        return counters_.count(Result<std::int64_t>(n));
    }

    Result<std::vector<Flag>> list_flags(std::optional<std::string_view> destination, TimePoint now,
                                         bool include_inactive) override {
        return read<std::vector<Flag>>([&] {
            std::vector<Flag> out;
            Query q = stmt(
                "SELECT id, destination, reason, set_at, expires_at, cleared_at FROM flags WHERE "
                "(?1 IS NULL OR destination = ?1) AND (?2 = 1 OR (cleared_at IS NULL AND "
                "(expires_at IS NULL OR expires_at > ?3))) ORDER BY id");
            if (destination)
                q.text(*destination);
            else
                q.null();
            q.i64(include_inactive ? 1 : 0).i64(to_micros(now));
            while (q.row()) out.push_back(read_flag(q));
            return out;
        });
    }

    Result<std::int64_t> add_verdict_count(std::string_view verdict, std::int64_t delta) override {
        std::int64_t v = 0;
        auto st = write([&] {
            Query q = stmt(kAddVerdictCountReturning);
            q.text(verdict).i64(delta);
            if (q.row()) v = q.col(0);
            q.run();
        });
        if (!st) return counters_.count(Result<std::int64_t>(st.error()));
        return counters_.count(Result<std::int64_t>(v));
    }

    Result<std::map<std::string, std::int64_t>> verdict_counts() override {
        return read<std::map<std::string, std::int64_t>>([&] {
            std::map<std::string, std::int64_t> out;
            Query q = stmt("SELECT verdict, count FROM verdict_counts");
            while (q.row()) out[q.str(0)] = q.col(1);
            return out;
        });
    }

    Status put_state(std::string_view key, std::string_view value) override {
        return counters_.count(write([&] { store_state(key, value); }));
    }

    Result<std::optional<std::string>> get_state(std::string_view key) override {
        return read<std::optional<std::string>>([&]() -> std::optional<std::string> {
            Query q = stmt("SELECT value FROM engine_state WHERE key = ?");
            q.text(key);
            if (!q.row()) return std::nullopt;
            return q.bytes(0);
        });
    }

    Result<std::uint64_t> append_journal(std::span<const std::string> entries) override {
        std::uint64_t first = 0;
        auto st = write([&] {
            first = 0;
            for (const auto& e : entries) {
                Query q = stmt("INSERT INTO engine_journal(entry) VALUES(?)");
                q.blob(e).run();
                if (first == 0) first = static_cast<std::uint64_t>(sqlite3_last_insert_rowid(db_));
            }
        });
        if (!st) return counters_.count(Result<std::uint64_t>(st.error()));
        return counters_.count(Result<std::uint64_t>(first));
    }

    Result<std::vector<EngineJournalEntry>> read_journal(std::uint64_t after, std::size_t limit) override {
        return read<std::vector<EngineJournalEntry>>([&] {
            std::vector<EngineJournalEntry> out;
            Query q = stmt("SELECT seq, entry FROM engine_journal WHERE seq > ? ORDER BY seq LIMIT ?");
            q.i64(static_cast<std::int64_t>(after)).i64(static_cast<std::int64_t>(limit));
            while (q.row())
                out.push_back(EngineJournalEntry{static_cast<std::uint64_t>(q.col(0)), q.bytes(1)});
            return out;
        });
    }

    Status save_engine_state(std::string_view key, std::string_view value, std::uint64_t journal_seq,
                             std::uint64_t outbox_written) override {
        return counters_.count(write([&] {
            store_state(key, value);
            exec_bound("DELETE FROM engine_journal WHERE seq <= ?", {static_cast<std::int64_t>(journal_seq)});
            trim_outbox(outbox_written);
        }));
    }

    Result<std::uint64_t> apply_verdict_effects(std::span<const VerdictEffect> effects,
                                                std::uint64_t outbox_written) override {
        std::uint64_t before = 0;
        auto st = write([&] {
            before = load_mark();
            trim_outbox(outbox_written);
            std::uint64_t mark = before;
            std::map<std::string, std::int64_t> counts;
            for (const auto& e : effects) {
                if (e.seq <= before) continue;  // applied before a crash: a replay
                mark = std::max(mark, e.seq);
                ++counts[e.verdict];
                if (!e.line.empty()) {
                    Query q = stmt("INSERT OR REPLACE INTO verdict_outbox(seq, at, line) VALUES(?, ?, ?)");
                    q.i64(static_cast<std::int64_t>(e.seq)).i64(to_micros(e.at)).text(e.line).run();
                }
                switch (e.action) {
                    case VerdictEffect::Action::none: break;
                    case VerdictEffect::Action::destination_state: {
                        Query q = stmt(kSetDestinationState);
                        q.text(to_string(e.kind)).text(e.name).text(e.state).i64(to_micros(e.at)).run();
                        break;
                    }
                    case VerdictEffect::Action::set_flag: {
                        Query q = stmt(kInsertFlag);
                        q.text(e.name).text(e.reason).i64(to_micros(e.at)).opt(e.expires_at).null().run();
                        break;
                    }
                    case VerdictEffect::Action::clear_flags: {
                        Query q = stmt(kClearFlags);
                        q.i64(to_micros(e.at)).text(e.name).run();
                        break;
                    }
                }
            }
            for (const auto& [name, n] : counts) {
                Query q = stmt(kAddVerdictCount);
                q.text(name).i64(n).run();
            }
            if (mark != before) {
                Query q = stmt(
                    "INSERT INTO engine_marks(name, value) VALUES('verdicts', ?1) ON CONFLICT(name) DO "
                    "UPDATE "
                    "SET value = excluded.value");
                q.i64(static_cast<std::int64_t>(mark)).run();
            }
        });
        if (!st) return counters_.count(Result<std::uint64_t>(st.error()));
        return counters_.count(Result<std::uint64_t>(before));
    }

    Result<std::uint64_t> verdict_mark() override {
        return read<std::uint64_t>([&] { return load_mark(); });
    }

    Result<std::vector<OutboxEntry>> read_outbox() override {
        return read<std::vector<OutboxEntry>>([&] {
            std::vector<OutboxEntry> out;
            Query q = stmt("SELECT seq, at, line FROM verdict_outbox ORDER BY seq");
            while (q.row())
                out.push_back(
                    OutboxEntry{static_cast<std::uint64_t>(q.col(0)), from_micros(q.col(1)), q.bytes(2)});
            return out;
        });
    }

    Result<PruneResult> prune(const RetentionPolicy& policy, TimePoint now) override {
        PruneResult r;
        auto st = write([&] {
            r = {};
            if (qid_map_.active()) leave_queue_id_map("pruning");  // deletes rows the map knows
            std::int64_t finished_cut = to_micros(now - policy.finished_messages);
            std::int64_t stale_cut = to_micros(now - policy.stale_messages);
            std::int64_t ep_cut = to_micros(now - policy.episodes);
            std::int64_t seen_cut = to_micros(now - policy.seen_events);
            exec_bound("CREATE TEMP TABLE IF NOT EXISTS doomed(queue_id TEXT PRIMARY KEY) WITHOUT ROWID", {});
            exec_bound("DELETE FROM temp.doomed", {});
            exec_bound(
                "INSERT OR IGNORE INTO temp.doomed SELECT queue_id FROM messages WHERE finished < ?1 "
                "UNION SELECT queue_id FROM messages WHERE updated < ?2",
                {finished_cut, stale_cut});
            r.recipients =
                exec_bound("DELETE FROM recipients WHERE queue_id IN (SELECT queue_id FROM temp.doomed)", {});
            r.messages =
                exec_bound("DELETE FROM messages WHERE queue_id IN (SELECT queue_id FROM temp.doomed)", {});
            exec_bound("DELETE FROM episode_messages WHERE queue_id IN (SELECT queue_id FROM temp.doomed)",
                       {});
            exec_bound("DELETE FROM temp.doomed", {});
            r.episodes = exec_bound("DELETE FROM episodes WHERE ended < ?1", {ep_cut});
            r.flags = exec_bound(
                "DELETE FROM flags WHERE (cleared_at IS NOT NULL AND cleared_at < ?1) OR "
                "(expires_at IS NOT NULL AND expires_at < ?1)",
                {ep_cut});
            exec_bound(
                "DELETE FROM destinations WHERE ep_first IS NULL AND updated < ?1 AND "
                "(state = '' OR state = 'recovered')",
                {ep_cut});
            r.seen_events = prune_seen(seen_cut);
        });
        if (!st) return counters_.count(Result<PruneResult>(st.error()));
        return counters_.count(Result<PruneResult>(r));
    }

    Result<LedgerStats> stats() override {
        return read<LedgerStats>([&] {
            LedgerStats s;
            s.backend = "sqlite";
            s.location = path_;
            auto scalar = [&](const char* sql) {
                Query q = stmt(sql);
                return q.row() ? q.col(0) : 0;
            };
            s.messages = scalar("SELECT COUNT(*) FROM messages");
            s.pending_messages = scalar("SELECT COUNT(*) FROM messages WHERE finished IS NULL");
            s.recipients = scalar("SELECT COUNT(*) FROM recipients");
            s.destinations = scalar("SELECT COUNT(*) FROM destinations");
            s.open_episodes = scalar("SELECT COUNT(*) FROM destinations WHERE ep_first IS NOT NULL");
            s.episodes = scalar("SELECT COUNT(*) FROM episodes");
            s.flags = scalar("SELECT COUNT(*) FROM flags WHERE cleared_at IS NULL");
            s.seen_events = scalar("SELECT COUNT(*) FROM seen_events") +
                            scalar("SELECT COALESCE(SUM(count), 0) FROM seen_batches");
            s.bytes = scalar("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()");
            s.schema_version = static_cast<int>(scalar("SELECT MAX(version) FROM schema_version"));
            return s;
        });
    }

    LedgerCounters counters() const noexcept override { return counters_.snapshot(); }

  private:
    static bool older(const PendingCopy& a, const PendingCopy& b) {
        auto ka = a.arrival.value_or(a.first_deferral.value_or(TimePoint::max()));
        auto kb = b.arrival.value_or(b.first_deferral.value_or(TimePoint::max()));
        if (ka != kb) return ka < kb;
        return a.queue_id < b.queue_id;
    }

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

    void store_state(std::string_view key, std::string_view value) {
        Query q = stmt(
            "INSERT INTO engine_state(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET "
            "value = excluded.value");
        q.text(key).blob(value).run();
    }

    std::string journal_;  // the batch's engine journal entry, built during ingest

    // Usually a no-op probe of an empty or one-commit table (the primary key).
    void trim_outbox(std::uint64_t written) {
        if (written == 0) return;
        Query q = stmt("DELETE FROM verdict_outbox WHERE seq <= ?");
        q.i64(static_cast<std::int64_t>(written)).run();
    }

    std::uint64_t load_mark() {
        Query q = stmt("SELECT value FROM engine_marks WHERE name = 'verdicts'");
        return q.row() ? static_cast<std::uint64_t>(q.col(0)) : 0;
    }

    std::int64_t exec_bound(const char* sql, std::initializer_list<std::int64_t> args) {
        Query q = stmt(sql);
        for (auto a : args) q.i64(a);
        q.run();
        return sqlite3_changes(db_);
    }

    void exec(const char* sql) {
        char* err = nullptr;
        int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
        if (rc != SQLITE_OK) {
            std::string msg = err ? err : sqlite3_errmsg(db_);
            sqlite3_free(err);
            throw SqlError{rc, msg};
        }
    }

    void migrate() {
        exec("BEGIN IMMEDIATE");
        try {
            exec("CREATE TABLE IF NOT EXISTS schema_version(version INTEGER NOT NULL)");
            int version = 0;
            {
                Query q = stmt("SELECT COALESCE(MAX(version), 0) FROM schema_version");
                if (q.row()) version = static_cast<int>(q.col(0));
            }
            if (version > kSchemaVersion)
                throw SqlError{SQLITE_MISMATCH, "ledger schema version " + std::to_string(version) +
                                                    " is newer than this program (" +
                                                    std::to_string(kSchemaVersion) + ")"};
            for (int v = version; v < kSchemaVersion; ++v) {
                exec(kMigrations[v]);
                exec_bound("INSERT INTO schema_version(version) VALUES(?)", {v + 1});
            }
            // A bulk import killed before its end left them dropped (set_bulk_mode).
            for (const auto& index : kSecondaryIndexes) exec(index.create);
            exec("COMMIT");
        } catch (...) {
            sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
            throw;
        }
    }

    static Error to_error(const SqlError& e) {
        int primary = e.code & 0xff;
        if (primary == SQLITE_INTERRUPT)
            return make_error(ErrorKind::timeout, "ledger (sqlite): lookup deadline passed");
        auto kind = (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) ? ErrorKind::unavailable
                    : (primary == SQLITE_MISMATCH)                       ? ErrorKind::config
                                                                         : ErrorKind::io;
        return make_error(kind, "ledger (sqlite): " + e.message);
    }

    template <typename F>
    Status guard(F&& f) noexcept {
        try {
            f();
            return {};
        } catch (const SqlError& e) {
            return to_error(e);
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

    std::unique_ptr<ReadConn> take_reader() noexcept {
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
            int rc = sqlite3_open_v2(path_.c_str(), &conn->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX,
                                     nullptr);
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

    void give_back(std::unique_ptr<ReadConn> conn) noexcept {
        std::lock_guard lock(pool_mutex_);
        if (idle_readers_.size() < kMaxIdleReaders) idle_readers_.push_back(std::move(conn));
    }

    static bool in_memory(const std::string& path) {
        return path.empty() || path == ":memory:" ||
               (path.starts_with("file:") && path.find("mode=memory") != std::string::npos);
    }

    void store_position(const FollowerPosition& p) {
        Query q = stmt(
            "INSERT INTO positions(source, device, inode, offset, head_fingerprint, cursor, lines) "
            "VALUES(?, ?, ?, ?, ?, ?, ?) ON CONFLICT(source) DO UPDATE SET device = excluded.device, "
            "inode = excluded.inode, offset = excluded.offset, head_fingerprint = excluded.head_fingerprint, "
            "cursor = excluded.cursor, lines = excluded.lines");
        q.text(p.source)
            .i64(static_cast<std::int64_t>(p.device))
            .i64(static_cast<std::int64_t>(p.inode))
            .i64(static_cast<std::int64_t>(p.offset))
            .text(p.head_fingerprint)
            .text(p.cursor)
            .i64(static_cast<std::int64_t>(p.lines))
            .run();
    }

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

    // seen_ := the stored pairs within the batch's time span.
    void load_seen(std::span<const IngestItem> batch) {
        seen_.clear();
        fresh_keys_.clear();
        if (batch.empty()) return;
        std::int64_t lo = to_micros(batch.front().event.time), hi = lo;
        for (const auto& item : batch) {
            const std::int64_t t = to_micros(item.event.time);
            lo = std::min(lo, t);
            hi = std::max(hi, t);
        }
        {
            Query q = stmt("SELECT keys FROM seen_batches WHERE last >= ?1 AND first <= ?2");
            q.i64(lo).i64(hi);
            while (q.row()) {
                const std::string keys = q.bytes(0);
                const auto* p = reinterpret_cast<const unsigned char*>(keys.data());
                for (std::size_t i = 0; i + 16 <= keys.size(); i += 16) {
                    const auto t = static_cast<std::int64_t>(get_u64(p + i));
                    if (t >= lo && t <= hi) seen_.insert(t, get_u64(p + i + 8));
                }
            }
        }
        Query q = stmt("SELECT time, key FROM seen_events WHERE time >= ?1 AND time <= ?2");
        q.i64(lo).i64(hi);
        while (q.row()) seen_.insert(q.col(0), static_cast<std::uint64_t>(q.col(1)));
    }

    void store_seen() {
        if (fresh_keys_.empty()) return;
        std::int64_t lo = fresh_keys_.front().first, hi = lo;
        seen_blob_.clear();
        seen_blob_.reserve(fresh_keys_.size() * 16);
        for (const auto& [t, key] : fresh_keys_) {
            lo = std::min(lo, t);
            hi = std::max(hi, t);
            put_u64(seen_blob_, static_cast<std::uint64_t>(t));
            put_u64(seen_blob_, key);
        }
        Query q = stmt("INSERT INTO seen_batches(first, last, count, keys) VALUES(?, ?, ?, ?)");
        q.i64(lo).i64(hi).i64(static_cast<std::int64_t>(fresh_keys_.size())).blob(seen_blob_).run();
        fresh_keys_.clear();
    }

    // Drops the pairs older than `cut`: whole rows, and the old pairs of a row
    // that straddles it. Returns how many pairs went.
    std::int64_t prune_seen(std::int64_t cut) {
        std::int64_t dropped = 0;
        std::vector<std::pair<std::int64_t, std::string>> straddling;
        {
            Query q = stmt("SELECT COALESCE(SUM(count), 0) FROM seen_batches WHERE last < ?");
            q.i64(cut);
            if (q.row()) dropped += q.col(0);
        }
        exec_bound("DELETE FROM seen_batches WHERE last < ?1", {cut});
        {
            Query q = stmt("SELECT id, keys FROM seen_batches WHERE first < ?1 AND last >= ?1");
            q.i64(cut);
            while (q.row()) straddling.emplace_back(q.col(0), q.bytes(1));
        }
        for (const auto& [id, keys] : straddling) {
            std::string kept;
            std::int64_t n = 0, lo = 0, hi = 0;
            const auto* p = reinterpret_cast<const unsigned char*>(keys.data());
            for (std::size_t i = 0; i + 16 <= keys.size(); i += 16) {
                const auto t = static_cast<std::int64_t>(get_u64(p + i));
                if (t < cut) {
                    ++dropped;
                    continue;
                }
                lo = n == 0 ? t : std::min(lo, t);
                hi = n == 0 ? t : std::max(hi, t);
                ++n;
                kept.append(keys, i, 16);
            }
            Query q = stmt("UPDATE seen_batches SET first = ?, last = ?, count = ?, keys = ? WHERE id = ?");
            q.i64(lo).i64(hi).i64(n).blob(kept).i64(id).run();
        }
        return dropped + exec_bound("DELETE FROM seen_events WHERE time < ?1", {cut});
    }

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
    // (so never inserts one twice). A finished message leaves the map and only
    // a 64-bit hash of its queue id stays: memory follows the mail queue, plus
    // 8-16 bytes per finished message. A finished queue id logged again (rare:
    // Postfix does not reuse a queue id soon), a hash collision, another
    // connection's commit or the end of bulk mode ends the map for the rest of
    // the import and builds the indexes (leave_queue_id_map). A batch's
    // changes are staged and take effect when its transaction commits.
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
        void stage_finished(const std::string& queue_id) {
            if (active_) staged_finished_.push_back(queue_id);
        }
        void discard_staged() {
            staged_messages_.clear();
            staged_recipients_.clear();
            staged_finished_.clear();
        }
        void commit_staged() {
            if (active_) {
                for (auto& [queue_id, id] : staged_messages_) live_[queue_id].message = id;
                for (auto& r : staged_recipients_)
                    live_[r.queue_id].recipients.emplace_back(std::move(r.address), r.id);
                for (const auto& queue_id : staged_finished_) {
                    live_.erase(queue_id);
                    retired_.insert(hash(queue_id));
                }
            }
            discard_staged();
        }
        std::size_t live_size() const noexcept { return live_.size(); }

      private:
        static std::uint64_t hash(std::string_view s) noexcept {
            const std::uint64_t h = std::hash<std::string_view>{}(s);
            return h == 0 ? 1 : h;  // 0 marks an empty slot
        }
        // Open addressing over 64-bit hashes (0: empty), at most half full.
        class HashSet {
          public:
            bool contains(std::uint64_t h) const noexcept {
                if (slots_.empty()) return false;
                const std::size_t mask = slots_.size() - 1;
                for (std::size_t i = h & mask;; i = (i + 1) & mask) {
                    if (slots_[i] == h) return true;
                    if (slots_[i] == 0) return false;
                }
            }
            void insert(std::uint64_t h) {
                if ((size_ + 1) * 2 > slots_.size()) grow();
                place(h);
            }
            void clear() {
                slots_ = {};
                size_ = 0;
            }

          private:
            void place(std::uint64_t h) {
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
                std::vector<std::uint64_t> old = std::move(slots_);
                slots_.assign(std::max<std::size_t>(1024, old.size() * 2), 0);
                size_ = 0;
                for (std::uint64_t h : old)
                    if (h != 0) place(h);
            }
            std::vector<std::uint64_t> slots_;
            std::size_t size_ = 0;
        };
        struct StagedRecipient {
            std::string queue_id, address;
            std::int64_t id = 0;
        };
        bool active_ = false;
        std::int64_t version_ = 0;
        std::unordered_map<std::string, Entry> live_;
        HashSet retired_;
        std::vector<std::pair<std::string, std::int64_t>> staged_messages_;
        std::vector<StagedRecipient> staged_recipients_;
        std::vector<std::string> staged_finished_;
    };

    static std::optional<std::string> opt_str(const Query& q, int i) {
        if (q.is_null(i)) return std::nullopt;
        return q.str(i);
    }
    static std::optional<std::int64_t> opt_i64(const Query& q, int i) {
        if (q.is_null(i)) return std::nullopt;
        return q.col(i);
    }

    // The row of `queue_id`, created (as the first INSERT of one of its events
    // would) when the table has none; `updated` raised to t.
    MessageRow& message_row(const std::string& queue_id, std::int64_t t) {
        auto it = msg_index_.find(queue_id);
        if (it == msg_index_.end()) {
            MessageRow row;
            // With the queue-id map, by row id or not at all (a queue id it does not know has no row).
            const QueueIdMap::Entry* known = nullptr;
            if (qid_map_.active() && qid_map_.retired(queue_id))
                leave_queue_id_map("a finished queue id was logged again");
            if (qid_map_.active()) known = qid_map_.find(queue_id);
            const bool by_id = known && known->message != 0;
            Query q =
                stmt(by_id ? "SELECT id, first_queue_id, previous_queue_id, next_queue_id, message_id, "
                             "fingerprint, sender, size, nrcpt, arrival, state, updated, finished, host "
                             "FROM messages WHERE id = ?"
                           : "SELECT id, first_queue_id, previous_queue_id, next_queue_id, message_id, "
                             "fingerprint, sender, size, nrcpt, arrival, state, updated, finished, host "
                             "FROM messages WHERE queue_id = ?");
            if (by_id)
                q.i64(known->message);
            else
                q.text(queue_id);
            row.queue_id = queue_id;
            if ((by_id || !qid_map_.active()) && q.row()) {
                row.id = q.col(0);
                row.first_queue_id = q.str(1);
                row.previous_queue_id = opt_str(q, 2);
                row.next_queue_id = opt_str(q, 3);
                row.message_id = opt_str(q, 4);
                row.fingerprint = opt_str(q, 5);
                row.sender = opt_str(q, 6);
                row.size = q.col(7);
                row.nrcpt = q.col(8);
                row.arrival = opt_i64(q, 9);
                row.state = q.str(10);
                row.updated = q.col(11);
                row.finished = opt_i64(q, 12);
                row.host = q.str(13);
            } else {
                row.first_queue_id = queue_id;
                row.updated = t;
            }
            it = msg_index_.emplace(queue_id, msgs_.size()).first;
            msgs_.push_back(std::move(row));
        }
        MessageRow& row = msgs_[it->second];
        row.updated = std::max(row.updated, t);
        row.dirty = true;
        return row;
    }

    static std::string recipient_key(std::string_view queue_id, std::string_view address) {
        std::string key;
        key.reserve(queue_id.size() + 1 + address.size());
        key.append(queue_id).push_back('\0');
        key.append(address);
        return key;
    }

    // The row of (queue_id, address), loaded on first touch; nullptr when the
    // table has none.
    RecipientRow* recipient_row(const std::string& queue_id, const std::string& address) {
        std::string key = recipient_key(queue_id, address);
        auto it = rcpt_index_.find(key);
        if (it != rcpt_index_.end()) return it->second == kNoRow ? nullptr : &rcpts_[it->second];
        if (rcpts_loaded_.contains(queue_id)) {
            rcpt_index_.emplace(std::move(key), kNoRow);
            return nullptr;
        }
        if (qid_map_.active() && qid_map_.retired(queue_id))
            leave_queue_id_map("a finished queue id was logged again");
        std::int64_t id = 0;
        if (qid_map_.active()) {
            // With the queue-id map, by row id or not at all.
            if (const auto* known = qid_map_.find(queue_id))
                for (const auto& [a, rid] : known->recipients)
                    if (a == address) id = rid;
            if (id == 0) {
                rcpt_index_.emplace(std::move(key), kNoRow);
                return nullptr;
            }
        }
        Query q = stmt(id != 0 ? "SELECT " RECIPIENT_ROW_COLUMNS " FROM recipients WHERE id = ?"
                               : "SELECT " RECIPIENT_ROW_COLUMNS
                                 " FROM recipients WHERE queue_id = ? AND address = ?");
        if (id != 0)
            q.i64(id);
        else
            q.text(queue_id).text(address);
        if (!q.row()) {
            rcpt_index_.emplace(std::move(key), kNoRow);
            return nullptr;
        }
        rcpt_index_.emplace(std::move(key), rcpts_.size());
        rcpts_.push_back(read_recipient_row(q));
        return &rcpts_.back();
    }

    static RecipientRow read_recipient_row(const Query& q) {
        RecipientRow r;
        r.id = q.col(0);
        r.queue_id = q.str(1);
        r.address = q.str(2);
        r.domain = q.str(3);
        r.state = q.str(4);
        r.attempts = q.col(5);
        r.first_attempt = opt_i64(q, 6);
        r.last_attempt = opt_i64(q, 7);
        r.first_deferral = opt_i64(q, 8);
        r.reply_code = q.col(9);
        r.enhanced = q.str(10);
        r.reply_text = q.str(11);
        r.stage = q.str(12);
        r.relay = q.str(13);
        r.category = q.str(14);
        return r;
    }

    // Every recipient row of `queue_id` (table and batch), in address order.
    std::vector<std::size_t> recipients_of(const std::string& queue_id) {
        if (!rcpts_loaded_.contains(queue_id)) {
            if (qid_map_.active() && qid_map_.retired(queue_id))
                leave_queue_id_map("a finished queue id was logged again");
            rcpts_loaded_.insert(queue_id);
            auto take = [&](RecipientRow r) {
                std::string key = recipient_key(queue_id, r.address);
                auto it = rcpt_index_.find(key);
                if (it != rcpt_index_.end() && it->second != kNoRow) return;  // the batch's copy is newer
                if (it != rcpt_index_.end())
                    it->second = rcpts_.size();
                else
                    rcpt_index_.emplace(std::move(key), rcpts_.size());
                rcpts_.push_back(std::move(r));
            };
            if (qid_map_.active()) {
                // With the queue-id map: each row it knows, by its id.
                if (const auto* known = qid_map_.find(queue_id))
                    for (const auto& [address, id] : known->recipients) {
                        Query q = stmt("SELECT " RECIPIENT_ROW_COLUMNS " FROM recipients WHERE id = ?");
                        q.i64(id);
                        if (q.row()) take(read_recipient_row(q));
                    }
            } else {
                Query q = stmt("SELECT " RECIPIENT_ROW_COLUMNS " FROM recipients WHERE queue_id = ?");
                q.text(queue_id);
                while (q.row()) take(read_recipient_row(q));
            }
        }
        std::vector<std::size_t> out;
        for (std::size_t i = 0; i < rcpts_.size(); ++i)
            if (rcpts_[i].queue_id == queue_id) out.push_back(i);
        std::sort(out.begin(), out.end(),
                  [&](std::size_t a, std::size_t b) { return rcpts_[a].address < rcpts_[b].address; });
        return out;
    }

    void set_message_state(const std::string& queue_id, std::int64_t t, const char* state, bool finishes) {
        MessageRow& m = message_row(queue_id, t);
        if (m.finished) return;
        m.state = state;
        if (finishes) m.finished = t;
    }

    void apply(const Op& op) {
        // The log's host field names the host that holds the queue id; it wins
        // over the name the milter recorded.
        if (op.kind != OpKind::none && !op.host.empty()) {
            MessageRow& m = message_row(op.queue_id, op.time);
            if (m.host != op.host) m.host = op.host;
        }
        switch (op.kind) {
            case OpKind::none: return;
            case OpKind::client: {
                MessageRow& m = message_row(op.queue_id, op.time);
                m.arrival = m.arrival ? std::min(*m.arrival, op.time) : op.time;
                return;
            }
            case OpKind::pickup: return apply_pickup(op);
            case OpKind::message_id: {
                MessageRow& m = message_row(op.queue_id, op.time);
                if (!op.resent || !m.message_id) m.message_id = op.text;
                return;
            }
            case OpKind::queue_active: {
                MessageRow& m = message_row(op.queue_id, op.time);
                m.sender = op.text;
                m.size = op.size;
                m.nrcpt = op.nrcpt;
                if (!m.arrival) m.arrival = op.time;
                if (!m.finished) m.state = "active";
                return;
            }
            case OpKind::delivery: return apply_delivery(op);
            case OpKind::removed: return set_message_state(op.queue_id, op.time, "gone", true);
            case OpKind::expired: {
                set_message_state(op.queue_id, op.time, "expired", true);
                for (std::size_t i : recipients_of(op.queue_id)) {
                    RecipientRow& r = rcpts_[i];
                    if (r.state != "pending") continue;
                    r.state = "expired";
                    r.dirty = true;
                }
                return;
            }
            case OpKind::hold: return set_message_state(op.queue_id, op.time, "hold", false);
            case OpKind::release: return set_message_state(op.queue_id, op.time, "deferred", false);
            case OpKind::rejected: return set_message_state(op.queue_id, op.time, "rejected", true);
        }
    }

    void apply_pickup(const Op& op) {
        {
            MessageRow& m = message_row(op.queue_id, op.time);
            if (!op.other_id.empty()) m.previous_queue_id = op.other_id;
            m.sender = op.text;
            m.arrival = m.arrival ? std::min(*m.arrival, op.time) : op.time;
        }
        if (op.other_id.empty() || op.other_id == op.queue_id) return;
        // postsuper -r: the same message under a new queue id. The successor inherits
        // the identity and the still-pending recipients with their history, so the
        // milter keeps recognising it and attempts keep counting.
        MessageRow& old = message_row(op.other_id, op.time);
        MessageRow& m = msgs_[msg_index_.at(op.queue_id)];  // message_row may have moved it
        m.first_queue_id = old.first_queue_id;
        if (!m.message_id) m.message_id = old.message_id;
        if (!m.fingerprint) m.fingerprint = old.fingerprint;
        if (old.arrival) m.arrival = old.arrival;
        if (m.size < 0) m.size = old.size;
        old.state = "requeued";
        old.next_queue_id = op.queue_id;
        if (!old.finished) old.finished = op.time;
        for (std::size_t i : recipients_of(op.other_id)) {
            if (rcpts_[i].state != "pending") continue;
            const std::string address = rcpts_[i].address;      // recipient_row may grow rcpts_
            if (recipient_row(op.queue_id, address)) continue;  // INSERT OR IGNORE
            RecipientRow copy = rcpts_[i];
            copy.id = 0;
            copy.queue_id = op.queue_id;
            copy.dirty = true;
            rcpt_index_[recipient_key(copy.queue_id, copy.address)] = rcpts_.size();
            rcpts_.push_back(std::move(copy));
        }
    }

    void apply_delivery(const Op& op) {
        const std::string first = message_row(op.queue_id, op.time).first_queue_id;
        const char* rstate = op.outcome == Outcome::sent       ? "sent"
                             : op.outcome == Outcome::deferred ? "pending"
                             : op.outcome == Outcome::bounced  ? "bounced"
                                                               : "expired";
        RecipientRow* r = recipient_row(op.queue_id, op.recipient);
        if (!r) {
            rcpt_index_[recipient_key(op.queue_id, op.recipient)] = rcpts_.size();
            r = &rcpts_.emplace_back();
            r->queue_id = op.queue_id;
            r->address = op.recipient;
            r->domain = op.domain;
        }
        r->state = rstate;
        r->attempts += 1;
        r->first_attempt = r->first_attempt ? std::min(*r->first_attempt, op.time) : op.time;
        r->last_attempt = r->last_attempt ? std::max(*r->last_attempt, op.time) : op.time;
        if (!r->first_deferral && op.outcome == Outcome::deferred) r->first_deferral = op.time;
        r->reply_code = op.code;
        r->enhanced = op.enhanced;
        r->reply_text = op.reason;
        r->stage = op.stage;
        r->relay = op.relay;
        r->category = std::string(to_string(op.category));
        r->dirty = true;
        if (op.outcome == Outcome::deferred) {
            MessageRow& m = msgs_[msg_index_.at(op.queue_id)];
            if (!m.finished && m.state != "hold") m.state = "deferred";
        }
        for (int i = 0; i < 2; ++i) {
            const char* kind = i == 0 ? "domain" : "relay";
            const std::string& name = i == 0 ? op.domain : op.relay;
            if (name.empty()) continue;
            if (op.outcome == Outcome::deferred)
                record_deferral(kind, name, first, op);
            else if (op.outcome == Outcome::sent)
                record_success(kind, name, op.time);
        }
    }

    // Writes the batch's rows: new ones in first-touch order (ids as before),
    // changed ones in place.
    void flush_rows() {
        auto opt_text = [](Query& q, const std::optional<std::string>& v) -> Query& {
            return v ? q.text(*v) : q.null();
        };
        auto opt_int = [](Query& q, const std::optional<std::int64_t>& v) -> Query& {
            return v ? q.i64(*v) : q.null();
        };
        for (const MessageRow& m : msgs_) {
            if (!m.dirty) continue;
            Query q = stmt(
                m.id == 0
                    ? "INSERT INTO messages(first_queue_id, previous_queue_id, next_queue_id, "
                      "message_id, fingerprint, sender, size, nrcpt, arrival, state, updated, finished, "
                      "host, "
                      "queue_id) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    : "UPDATE messages SET first_queue_id = ?, previous_queue_id = ?, next_queue_id = "
                      "?, message_id = ?, fingerprint = ?, sender = ?, size = ?, nrcpt = ?, arrival = ?, "
                      "state = ?, updated = ?, finished = ?, host = ? WHERE id = ?");
            q.text(m.first_queue_id);
            opt_text(q, m.previous_queue_id);
            opt_text(q, m.next_queue_id);
            opt_text(q, m.message_id);
            opt_text(q, m.fingerprint);
            opt_text(q, m.sender);
            q.i64(m.size).i64(m.nrcpt);
            opt_int(q, m.arrival);
            q.text(m.state).i64(m.updated);
            opt_int(q, m.finished);
            q.text(m.host);
            if (m.id == 0) {
                q.text(m.queue_id).run();
                qid_map_.stage_message(m.queue_id, sqlite3_last_insert_rowid(db_));
            } else {
                q.i64(m.id).run();
            }
            if (m.finished) qid_map_.stage_finished(m.queue_id);
        }
        for (const RecipientRow& r : rcpts_) {
            if (!r.dirty) continue;
            Query q =
                stmt(r.id == 0
                         ? "INSERT INTO recipients(domain, state, attempts, first_attempt, last_attempt, "
                           "first_deferral, reply_code, enhanced, reply_text, stage, relay, category, "
                           "queue_id, address) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                         : "UPDATE recipients SET domain = ?, state = ?, attempts = ?, first_attempt = ?, "
                           "last_attempt = ?, first_deferral = ?, reply_code = ?, enhanced = ?, reply_text = "
                           "?, stage = ?, relay = ?, category = ? WHERE id = ?");
            q.text(r.domain).text(r.state).i64(r.attempts);
            opt_int(q, r.first_attempt);
            opt_int(q, r.last_attempt);
            opt_int(q, r.first_deferral);
            q.i64(r.reply_code)
                .text(r.enhanced)
                .text(r.reply_text)
                .text(r.stage)
                .text(r.relay)
                .text(r.category);
            if (r.id == 0) {
                q.text(r.queue_id).text(r.address).run();
                qid_map_.stage_recipient(r.queue_id, r.address, sqlite3_last_insert_rowid(db_));
            } else {
                q.i64(r.id).run();
            }
        }
        clear_rows();
    }

    void clear_rows() {
        msgs_.clear();
        msg_index_.clear();
        rcpts_.clear();
        rcpt_index_.clear();
        rcpts_loaded_.clear();
    }

    // Destination rows touched by the current batch, kept in memory and written
    // once per batch (flush_destinations): a busy MX sees hundreds of deferrals
    // per batch. Safe because the batch holds the write lock (BEGIN IMMEDIATE).
    struct DestinationRow {
        std::optional<std::int64_t> last_success, last_deferral, ep_first, ep_last;
        std::int64_t ep_attempts = 0, ep_messages = 0, ep_categories = 0, updated = 0;
        std::string ep_last_reply, ep_last_relay;
        std::unordered_set<std::string> episode_messages;  // known to be in episode_messages
    };

    static std::optional<std::int64_t> max_opt(std::optional<std::int64_t> a, std::int64_t b) {
        return a ? std::max(*a, b) : b;
    }

    DestinationRow& destination_row(const char* kind, const std::string& name) {
        auto key = std::string(kind) + '\t' + name;
        auto it = dests_.find(key);
        if (it != dests_.end()) return it->second;
        DestinationRow row;
        Query q = stmt(
            "SELECT last_success, last_deferral, ep_first, ep_last, ep_attempts, ep_messages, ep_categories, "
            "ep_last_reply, ep_last_relay, updated FROM destinations WHERE kind = ? AND name = ?");
        q.text(kind).text(name);
        if (q.row()) {
            auto opt = [&](int i) -> std::optional<std::int64_t> {
                if (q.is_null(i)) return std::nullopt;
                return q.col(i);
            };
            row.last_success = opt(0);
            row.last_deferral = opt(1);
            row.ep_first = opt(2);
            row.ep_last = opt(3);
            row.ep_attempts = q.col(4);
            row.ep_messages = q.col(5);
            row.ep_categories = q.col(6);
            row.ep_last_reply = q.str(7);
            row.ep_last_relay = q.str(8);
            row.updated = q.col(9);
        }
        return dests_.emplace(std::move(key), std::move(row)).first->second;
    }

    void record_deferral(const char* kind, const std::string& name, const std::string& message,
                         const Op& op) {
        auto& row = destination_row(kind, name);
        if (!row.episode_messages.contains(message)) {
            Query q = stmt("INSERT OR IGNORE INTO episode_messages(kind, name, queue_id) VALUES(?, ?, ?)");
            q.text(kind).text(name).text(message).run();
            row.ep_messages += sqlite3_changes(db_);
            row.episode_messages.insert(message);
        }
        row.last_deferral = max_opt(row.last_deferral, op.time);
        if (!row.ep_first) row.ep_first = op.time;
        row.ep_last = max_opt(row.ep_last, op.time);
        row.ep_attempts += 1;
        row.ep_categories |= category_bit(op.category);
        row.ep_last_reply = op.reason;
        row.ep_last_relay = op.relay;
        row.updated = std::max(row.updated, op.time);
    }

    void record_success(const char* kind, const std::string& name, std::int64_t t) {
        auto& row = destination_row(kind, name);
        if (row.ep_first) {
            Query q = stmt(
                "INSERT INTO episodes(kind, name, first_deferral, last_deferral, ended, attempts, messages, "
                "categories, last_reply, last_relay) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
            q.text(kind).text(name).i64(*row.ep_first).i64(row.ep_last.value_or(*row.ep_first)).i64(t);
            q.i64(row.ep_attempts).i64(row.ep_messages).i64(row.ep_categories).text(row.ep_last_reply);
            q.text(row.ep_last_relay).run();
            Query d = stmt("DELETE FROM episode_messages WHERE kind = ? AND name = ?");
            d.text(kind).text(name).run();
            row.episode_messages.clear();
        }
        row.last_success = max_opt(row.last_success, t);
        row.ep_first.reset();
        row.ep_last.reset();
        row.ep_attempts = row.ep_messages = row.ep_categories = 0;
        row.ep_last_reply.clear();
        row.ep_last_relay.clear();
        row.updated = std::max(row.updated, t);
    }

    void flush_destinations() {
        for (const auto& [key, row] : dests_) {
            auto tab = key.find('\t');
            Query q = stmt(
                "INSERT INTO destinations(kind, name, last_success, last_deferral, ep_first, ep_last, "
                "ep_attempts, ep_messages, ep_categories, ep_last_reply, ep_last_relay, updated) "
                "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) ON CONFLICT(kind, name) DO UPDATE "
                "SET "
                "last_success = excluded.last_success, last_deferral = excluded.last_deferral, "
                "ep_first = excluded.ep_first, ep_last = excluded.ep_last, ep_attempts = "
                "excluded.ep_attempts, "
                "ep_messages = excluded.ep_messages, ep_categories = excluded.ep_categories, "
                "ep_last_reply = excluded.ep_last_reply, ep_last_relay = excluded.ep_last_relay, "
                "updated = MAX(updated, excluded.updated)");
            auto opt = [&](const std::optional<std::int64_t>& v) -> Query& {
                return v ? q.i64(*v) : q.null();
            };
            q.text(std::string_view(key).substr(0, tab)).text(std::string_view(key).substr(tab + 1));
            opt(row.last_success);
            opt(row.last_deferral);
            opt(row.ep_first);
            opt(row.ep_last);
            q.i64(row.ep_attempts).i64(row.ep_messages).i64(row.ep_categories).text(row.ep_last_reply);
            q.text(row.ep_last_relay).i64(row.updated).run();
        }
        dests_.clear();
    }

    std::string path_;
    LedgerOptions options_;
    sqlite3* db_ = nullptr;
    std::unordered_map<const char*, sqlite3_stmt*> cache_;
    // The batch's rows (see MessageRow); cleared after each batch.
    static constexpr std::size_t kNoRow = static_cast<std::size_t>(-1);  // known absent from the table
    std::vector<MessageRow> msgs_;
    std::unordered_map<std::string, std::size_t> msg_index_;
    std::vector<RecipientRow> rcpts_;
    std::unordered_map<std::string, std::size_t> rcpt_index_;  // recipient_key -> rcpts_ or kNoRow
    std::unordered_set<std::string> rcpts_loaded_;             // queue ids whose rows are all in rcpts_
    std::unordered_map<std::string, DestinationRow> dests_;
    SeenSet seen_;  // per batch, see load_seen
    std::vector<std::pair<std::int64_t, std::uint64_t>> fresh_keys_;
    std::string seen_blob_;
    bool indexes_deferred_ = false;  // bulk mode dropped kSecondaryIndexes (see set_bulk_mode)
    QueueIdMap qid_map_;             // active while the two queue-id indexes are deferred
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

}  // namespace

Result<std::unique_ptr<Ledger>> open_sqlite_ledger(const std::string& path, const LedgerOptions& options) {
    try {
        auto ledger = std::make_unique<SqliteLedger>(path, options);
        if (auto st = ledger->open(); !st) return st.error();
        return std::unique_ptr<Ledger>(std::move(ledger));
    } catch (const std::exception& e) {
        return make_error(ErrorKind::internal, std::string("ledger (sqlite): ") + e.what());
    }
}

}  // namespace retryguard::ledger_detail
