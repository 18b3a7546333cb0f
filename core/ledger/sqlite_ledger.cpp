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
    // recipients are keyed by queue id), and a WAL checkpoint every 64 MiB of
    // WAL instead of every 4 MiB (each checkpoint writes the pages back and
    // syncs twice; a page written by many batches is written back once).
    // synchronous stays NORMAL: a kill -9 loses nothing committed.
    void set_bulk_mode(bool on) noexcept override {
        std::lock_guard lock(mutex_);
        (void)guard([&] {
            exec(on ? "PRAGMA cache_size=-65536" : "PRAGMA cache_size=-16000");
            exec(on ? "PRAGMA wal_autocheckpoint=16384" : "PRAGMA wal_autocheckpoint=1000");
        });
    }

    Result<IngestResult> ingest(std::span<const IngestItem> batch,
                                const std::optional<FollowerPosition>& position) override {
        IngestResult result;
        auto st = write([&] {
            result = {};
            journal_.assign(kJournalBatchTag);
            touched_.clear();
            dests_.clear();
            deferred_in_batch_.clear();
            for (const auto& item : batch) {
                Op op = plan(item);
                {
                    Query q = stmt("INSERT OR IGNORE INTO seen_events(key, time) VALUES(?, ?)");
                    q.i64(static_cast<std::int64_t>(op.key)).i64(op.time).run();
                }
                if (sqlite3_changes(db_) == 0) {
                    ++result.duplicates;
                    result.fresh.push_back(false);
                    continue;
                }
                apply(op);
                append_journal_batch_item(journal_, item);
                ++result.applied;
                result.fresh.push_back(true);
            }
            flush_touched();
            flush_destinations();
            if (position) store_position(*position);
            if (result.applied > 0) {
                // The engine journal: the batch's fresh events as one entry, in the
                // batch's transaction, so the engine is fed each exactly once (ingest.hpp).
                Query q = stmt("INSERT INTO engine_journal(entry) VALUES(?)");
                q.blob(journal_).run();
                result.journal_seq = static_cast<std::uint64_t>(sqlite3_last_insert_rowid(db_));
            }
        });
        touched_.clear();
        dests_.clear();
        if (!st) return counters_.count(Result<IngestResult>(st.error()));
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
            for (const auto& id : identities) store_identity(id);
        }));
    }

    void store_identity(const MessageIdentity& id) {
        std::int64_t t = to_micros(id.time);
        {
            Query q = stmt(
                "INSERT INTO messages(queue_id, first_queue_id, message_id, fingerprint, sender, "
                "arrival, "
                "updated) VALUES(?1, ?1, ?2, ?3, ?4, ?5, ?5) ON CONFLICT(queue_id) DO UPDATE SET "
                "message_id = COALESCE(excluded.message_id, message_id), "
                "fingerprint = COALESCE(excluded.fingerprint, fingerprint), "
                "sender = COALESCE(excluded.sender, sender), "
                "arrival = MIN(COALESCE(arrival, excluded.arrival), excluded.arrival), "
                "updated = MAX(updated, excluded.updated)");
            q.text(id.queue_id)
                .text_or_null(normalize_message_id(id.message_id))
                .text_or_null(id.fingerprint)
                .text_or_null(normalize_address(id.sender))
                .i64(t)
                .run();
        }
        for (const auto& r : id.recipients) {
            auto address = normalize_address(r);
            if (address.empty()) continue;
            Query q = stmt("INSERT OR IGNORE INTO recipients(queue_id, address, domain) VALUES(?, ?, ?)");
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
                "r.last_attempt, m.arrival, r.attempts, m.state, r.address, 1 "
                "FROM messages m JOIN recipients r ON r.queue_id = m.queue_id WHERE m.message_id = ?1 AND "
                "m.queue_id <> ?3 "
                "AND m.state IN ('incoming','active','deferred','hold') AND r.state = 'pending' "
                "UNION ALL "
                "SELECT m.queue_id, m.first_queue_id, r.domain, r.relay, r.reply_text, r.first_deferral, "
                "r.last_attempt, m.arrival, r.attempts, m.state, r.address, 0 "
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
                "fingerprint, sender, size, nrcpt, arrival, state, updated, finished FROM messages "
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
                "fingerprint, sender, size, nrcpt, arrival, state, updated, finished FROM messages "
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
            r.seen_events = exec_bound("DELETE FROM seen_events WHERE time < ?1", {seen_cut});
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
            s.seen_events = scalar("SELECT COUNT(*) FROM seen_events");
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

    // Ensures the message row exists; returns the start of its requeue chain.
    // Within a batch the answer is cached and `updated` is written once per
    // message at the end (flush_touched), which halves the statements per event.
    const std::string& touch_message(const std::string& queue_id, std::int64_t t) {
        auto it = touched_.find(queue_id);
        if (it != touched_.end()) {
            it->second.second = std::max(it->second.second, t);
            return it->second.first;
        }
        Query q = stmt(
            "INSERT INTO messages(queue_id, first_queue_id, updated) VALUES(?1, ?1, ?2) "
            "ON CONFLICT(queue_id) DO UPDATE SET updated = MAX(updated, excluded.updated) "
            "RETURNING first_queue_id");
        q.text(queue_id).i64(t);
        std::string first = q.row() ? q.str(0) : queue_id;
        q.run();
        return touched_.emplace(queue_id, std::make_pair(std::move(first), t)).first->second.first;
    }

    void flush_touched() {
        for (const auto& [queue_id, entry] : touched_) {
            Query q = stmt("UPDATE messages SET updated = MAX(updated, ?2) WHERE queue_id = ?1");
            q.text(queue_id).i64(entry.second).run();
        }
        touched_.clear();
    }

    void set_message_state(const std::string& queue_id, std::int64_t t, const char* state, bool finishes) {
        touch_message(queue_id, t);
        if (finishes) {
            Query q = stmt(
                "UPDATE messages SET state = ?2, finished = ?3 WHERE queue_id = ?1 AND finished IS NULL");
            q.text(queue_id).text(state).i64(t).run();
        } else {
            Query q = stmt("UPDATE messages SET state = ?2 WHERE queue_id = ?1 AND finished IS NULL");
            q.text(queue_id).text(state).run();
        }
    }

    void apply(const Op& op) {
        switch (op.kind) {
            case OpKind::none: return;
            case OpKind::client: {
                if (!touched_.contains(op.queue_id)) {
                    // First sight of the message in this batch: create and date it in one statement.
                    Query q = stmt(
                        "INSERT INTO messages(queue_id, first_queue_id, arrival, updated) VALUES(?1, ?1, ?2, "
                        "?2) "
                        "ON CONFLICT(queue_id) DO UPDATE SET arrival = MIN(COALESCE(arrival, ?2), ?2), "
                        "updated = MAX(updated, ?2) RETURNING first_queue_id");
                    q.text(op.queue_id).i64(op.time);
                    std::string first = q.row() ? q.str(0) : op.queue_id;
                    q.run();
                    touched_.emplace(op.queue_id, std::make_pair(std::move(first), op.time));
                    return;
                }
                touch_message(op.queue_id, op.time);
                Query q =
                    stmt("UPDATE messages SET arrival = MIN(COALESCE(arrival, ?2), ?2) WHERE queue_id = ?1");
                q.text(op.queue_id).i64(op.time).run();
                return;
            }
            case OpKind::pickup: return apply_pickup(op);
            case OpKind::message_id: {
                touch_message(op.queue_id, op.time);
                Query q =
                    stmt(op.resent
                             ? "UPDATE messages SET message_id = COALESCE(message_id, ?2) WHERE queue_id = ?1"
                             : "UPDATE messages SET message_id = ?2 WHERE queue_id = ?1");
                q.text(op.queue_id).text(op.text).run();
                return;
            }
            case OpKind::queue_active: {
                Query q = stmt(
                    "INSERT INTO messages(queue_id, first_queue_id, sender, size, nrcpt, arrival, state, "
                    "updated) "
                    "VALUES(?1, ?1, ?2, ?3, ?4, ?5, 'active', ?5) ON CONFLICT(queue_id) DO UPDATE SET "
                    "sender = excluded.sender, size = excluded.size, nrcpt = excluded.nrcpt, "
                    "arrival = COALESCE(arrival, excluded.arrival), "
                    "state = CASE WHEN finished IS NULL THEN 'active' ELSE state END, "
                    "updated = MAX(updated, excluded.updated)");
                q.text(op.queue_id).text(op.text).i64(op.size).i64(op.nrcpt).i64(op.time).run();
                deferred_in_batch_.erase(op.queue_id);
                return;
            }
            case OpKind::delivery: return apply_delivery(op);
            case OpKind::removed: return set_message_state(op.queue_id, op.time, "gone", true);
            case OpKind::expired: {
                set_message_state(op.queue_id, op.time, "expired", true);
                Query q =
                    stmt("UPDATE recipients SET state = 'expired' WHERE queue_id = ? AND state = 'pending'");
                q.text(op.queue_id).run();
                return;
            }
            case OpKind::hold: return set_message_state(op.queue_id, op.time, "hold", false);
            case OpKind::release: return set_message_state(op.queue_id, op.time, "deferred", false);
            case OpKind::rejected: return set_message_state(op.queue_id, op.time, "rejected", true);
        }
    }

    void apply_pickup(const Op& op) {
        {
            Query q = stmt(
                "INSERT INTO messages(queue_id, first_queue_id, previous_queue_id, sender, arrival, updated) "
                "VALUES(?1, ?1, NULLIF(?2, ''), ?3, ?4, ?4) ON CONFLICT(queue_id) DO UPDATE SET "
                "previous_queue_id = COALESCE(excluded.previous_queue_id, previous_queue_id), "
                "sender = excluded.sender, arrival = MIN(COALESCE(arrival, excluded.arrival), "
                "excluded.arrival), "
                "updated = MAX(updated, excluded.updated)");
            q.text(op.queue_id).text(op.other_id).text(op.text).i64(op.time).run();
        }
        if (op.other_id.empty() || op.other_id == op.queue_id) return;
        // postsuper -r: the same message under a new queue id. The successor inherits
        // the identity and the still-pending recipients with their history, so the
        // milter keeps recognising it and attempts keep counting.
        touch_message(op.other_id, op.time);
        touched_.erase(op.queue_id);  // its first_queue_id changes below
        {
            Query q = stmt(
                "UPDATE messages SET first_queue_id = (SELECT first_queue_id FROM messages WHERE queue_id = "
                "?2), "
                "message_id = COALESCE(message_id, (SELECT message_id FROM messages WHERE queue_id = ?2)), "
                "fingerprint = COALESCE(fingerprint, (SELECT fingerprint FROM messages WHERE queue_id = "
                "?2)), "
                "arrival = COALESCE((SELECT arrival FROM messages WHERE queue_id = ?2), arrival), "
                "size = CASE WHEN size < 0 THEN (SELECT size FROM messages WHERE queue_id = ?2) ELSE size "
                "END "
                "WHERE queue_id = ?1");
            q.text(op.queue_id).text(op.other_id).run();
        }
        {
            Query q = stmt(
                "UPDATE messages SET state = 'requeued', next_queue_id = ?2, "
                "finished = COALESCE(finished, ?3) WHERE queue_id = ?1");
            q.text(op.other_id).text(op.queue_id).i64(op.time).run();
        }
        {
            Query q = stmt(
                "INSERT OR IGNORE INTO recipients(queue_id, address, domain, state, attempts, first_attempt, "
                "last_attempt, first_deferral, reply_code, enhanced, reply_text, stage, relay, category) "
                "SELECT ?1, address, domain, state, attempts, first_attempt, last_attempt, first_deferral, "
                "reply_code, enhanced, reply_text, stage, relay, category FROM recipients "
                "WHERE queue_id = ?2 AND state = 'pending'");
            q.text(op.queue_id).text(op.other_id).run();
        }
    }

    void apply_delivery(const Op& op) {
        std::string first = touch_message(op.queue_id, op.time);
        const char* rstate = op.outcome == Outcome::sent       ? "sent"
                             : op.outcome == Outcome::deferred ? "pending"
                             : op.outcome == Outcome::bounced  ? "bounced"
                                                               : "expired";
        std::string category(to_string(op.category));
        {
            Query q = stmt(
                "INSERT INTO recipients(queue_id, address, domain, state, attempts, first_attempt, "
                "last_attempt, "
                "first_deferral, reply_code, enhanced, reply_text, stage, relay, category) "
                "VALUES(?1, ?2, ?3, ?4, 1, ?5, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) "
                "ON CONFLICT(queue_id, address) DO UPDATE SET state = excluded.state, attempts = attempts + "
                "1, "
                "first_attempt = MIN(COALESCE(first_attempt, excluded.first_attempt), "
                "excluded.first_attempt), "
                "last_attempt = MAX(COALESCE(last_attempt, excluded.last_attempt), excluded.last_attempt), "
                "first_deferral = COALESCE(first_deferral, excluded.first_deferral), "
                "reply_code = excluded.reply_code, enhanced = excluded.enhanced, reply_text = "
                "excluded.reply_text, "
                "stage = excluded.stage, relay = excluded.relay, category = excluded.category");
            q.text(op.queue_id).text(op.recipient).text(op.domain).text(rstate).i64(op.time);
            if (op.outcome == Outcome::deferred)
                q.i64(op.time);
            else
                q.null();
            q.i64(op.code)
                .text(op.enhanced)
                .text(op.reason)
                .text(op.stage)
                .text(op.relay)
                .text(category)
                .run();
        }
        // Skipped when this batch already marked the message deferred: only
        // queue_active (back to active) changes it in between, and it clears the mark.
        if (op.outcome == Outcome::deferred && deferred_in_batch_.insert(op.queue_id).second) {
            Query q = stmt(
                "UPDATE messages SET state = 'deferred' WHERE queue_id = ? AND finished IS NULL AND state <> "
                "'hold'");
            q.text(op.queue_id).run();
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
    std::unordered_map<std::string, std::pair<std::string, std::int64_t>> touched_;  // per batch
    std::unordered_map<std::string, DestinationRow> dests_;
    std::unordered_set<std::string> deferred_in_batch_;  // per batch
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
