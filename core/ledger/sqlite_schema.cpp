// sqlite_schema.cpp -- the SQLite ledger's schema: the migrations from
// version 1 to the current one (append-only), opening (WAL, pragmas, the
// migrations in one transaction), and bulk mode, which may defer the secondary
// indexes of an import into an empty ledger and builds them at its end or at
// the next opening. Never edits an existing migration: files in the field ran
// it.
#include "ledger/sqlite_internal.hpp"
#include "ledger/sqlite_wal_writes.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include <fmt/format.h>

#include "retryguard/file_access.hpp"

namespace retryguard::ledger_detail {
namespace {

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
    // version 10: destinations become a rowid table (rows in the order first
    // seen) with (kind, name) as a unique index of its own (same upsert
    // target). Keyed by name, the rows a batch updates (last success, last
    // deferral, the open episode) were spread over the whole table, so every
    // batch rewrote nearly all of its pages, and more of them as the ledger
    // learnt destinations: a month of a relay's log with 20k destinations
    // spent a third of its WAL frames there. In the order first seen, the busy
    // destinations share the first pages and the rest are mostly touched near
    // where they were appended; the key index changes only when a destination
    // is added, and destinations(state) follows the rowid within a state.
    R"sql(
CREATE TABLE destinations_v10(
  id INTEGER PRIMARY KEY,
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
  updated INTEGER NOT NULL DEFAULT 0
);
INSERT INTO destinations_v10(kind, name, state, state_changed, last_success, last_deferral, ep_first, ep_last,
  ep_attempts, ep_messages, ep_categories, ep_last_reply, ep_last_relay, updated)
  SELECT kind, name, state, state_changed, last_success, last_deferral, ep_first, ep_last, ep_attempts,
  ep_messages, ep_categories, ep_last_reply, ep_last_relay, updated FROM destinations ORDER BY updated, kind, name;
DROP TABLE destinations;
ALTER TABLE destinations_v10 RENAME TO destinations;
CREATE UNIQUE INDEX destinations_key ON destinations(kind, name);
CREATE INDEX destinations_state ON destinations(state);
)sql",
    // version 11: engine journal entries may be stored compressed
    // (kJournalCompressedTag, ledger.hpp). No table changes; the version is
    // there so that an older program, which cannot read such an entry,
    // refuses the ledger instead of failing to restore its engine.
    R"sql(
-- engine_journal.entry: 'B' batch entries may now be stored as 'Z' (zstd) entries
)sql",
    // version 12: recipients are found by their message's row id: the unique
    // key (queue_id, address) becomes (message, address). Keyed by queue id
    // (random), each new recipient's entry landed on a page of its own once the
    // index outgrew a batch, the largest of the pages a follower's commit
    // wrote (docs/performance.md, "Twelfth round"); message rows are numbered
    // as they arrive, so a batch's new recipients now land on the last pages
    // of the index. queue_id stays (readers, the Redis copy). A recipient row
    // without a message row (none is made so) gets minus its own id, unique.
    // messages_queue_id first: a bulk import killed before its end left it
    // dropped, and the join needs it.
    R"sql(
CREATE UNIQUE INDEX IF NOT EXISTS messages_queue_id ON messages(queue_id);
ALTER TABLE recipients ADD COLUMN message INTEGER NOT NULL DEFAULT 0;
UPDATE recipients SET message = m.id FROM messages m WHERE m.queue_id = recipients.queue_id;
UPDATE recipients SET message = -id WHERE message = 0;
DROP INDEX IF EXISTS recipients_queue_address;
CREATE UNIQUE INDEX IF NOT EXISTS recipients_message_address ON recipients(message, address);
)sql",
    // version 13: the two history lookups stop being keyed by random values.
    // recipients(address) and messages(message_id) took a page of their own
    // for each new row once they outgrew a batch, the largest and the fifth
    // of the pages a follower's commit wrote (docs/performance.md, "Twelfth
    // round"), and the pages read grew with them. Only `explain` and the
    // milter read them:
    //  - the milter asks for a Message-ID among the messages Postfix may still
    //    retry: messages_message_id_queued holds those only, so its size
    //    follows the queue, and a message that arrives and leaves within one
    //    batch never enters it (as messages_fingerprint_queued);
    //  - `explain` asks for an address or a Message-ID over the whole ledger:
    //    recipients_block_address and messages_block_message_id put the
    //    block of 4,096 message row ids first (RG_HISTORY_BLOCK), so a batch's new
    //    entries land in the last block's few pages, and a lookup asks each
    //    block in turn (about 10 ms for 1.35 million messages).
    R"sql(
DROP INDEX IF EXISTS messages_message_id;
CREATE INDEX IF NOT EXISTS messages_message_id_queued ON messages(message_id)
  WHERE message_id IS NOT NULL AND state IN ('incoming','active','deferred','hold');
CREATE INDEX IF NOT EXISTS messages_block_message_id ON messages(id / 4096, message_id)
  WHERE message_id IS NOT NULL;
DROP INDEX IF EXISTS recipients_address;
CREATE INDEX IF NOT EXISTS recipients_block_address ON recipients(message / 4096, address);
)sql",
    // version 14: engine_state becomes a rowid table with its key as a unique
    // index. WITHOUT ROWID, each row's whole record is its key in one B-tree,
    // and SQLite reads a record whole (every overflow page) to compare a key
    // against it: finding the small `actions` row read the whole `engine` row
    // beside it, 16.5 MB for a month of a busy relay, for every `explain` and
    // every save of another state whose search passed it. Now the key index holds the keys only.
    R"sql(
CREATE TABLE engine_state_v14(key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO engine_state_v14(key, value) SELECT key, value FROM engine_state;
DROP TABLE engine_state;
ALTER TABLE engine_state_v14 RENAME TO engine_state;
)sql",
    // version 15: messages are found by queue id through two indexes instead
    // of one unique index over all of history. Keyed by queue id (random), each
    // new message's entry in messages_queue_id landed on a page of its own
    // once the index outgrew a batch: the largest share of the pages a
    // follower's commit wrote at a million messages (docs/performance.md,
    // "The queue id off the random key"). Postfix reuses a queue id only long
    // after its message left the queue, so:
    //  - messages_queue_id_live: unique, the unfinished rows only; its size
    //    follows the queue, and a message leaves it when it finishes;
    //  - messages_block_queue_id: every row, keyed by the block of 4,096 row
    //    ids first (RG_HISTORY_BLOCK), so new entries land in the last block,
    //    as the other history indexes (version 13).
    // The row of a queue id is its unfinished one, else its newest
    // (sqlite_lookups.hpp, RG_MESSAGE_BY_QUEUE_ID). A queue id logged again
    // after its message finished still finds that message (message_row).
    R"sql(
DROP INDEX IF EXISTS messages_queue_id;
CREATE UNIQUE INDEX IF NOT EXISTS messages_queue_id_live ON messages(queue_id) WHERE finished IS NULL;
CREATE INDEX IF NOT EXISTS messages_block_queue_id ON messages(id / 4096, queue_id);
)sql",
};
constexpr int kSchemaVersion = static_cast<int>(std::size(kMigrations));

}  // namespace

Status SqliteLedger::open() {
    // SQLite's memory statistics take a global mutex on every allocation (3 %
    // of an import's samples) and nothing here reads them
    // (sqlite3_memory_used, sqlite3_status). The setting only takes before
    // SQLite initialises: when something in the process initialised it
    // earlier, SQLITE_MISUSE comes back and the statistics stay on, which is
    // harmless.
    static std::once_flag memstatus_off;
    std::call_once(memstatus_off, [] { (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); });
    // The WAL's frames of a commit go out in a few large writes instead of
    // two per page (sqlite_wal_writes.hpp); should that VFS be missing, the
    // default one writes them as SQLite does.
    const char* vfs = options_.sqlite_gather_wal_writes ? wal_gathering_vfs() : nullptr;
    if (options_.sqlite_gather_wal_writes && vfs == nullptr) {
        static std::once_flag told;
        std::call_once(told, [&] {
            options_.warn(
                "ledger: writing the WAL a page at a time (ledger.sqlite.gather_wal_writes): cannot register "
                "its VFS");
        });
    }
    int rc = sqlite3_open_v2(path_.c_str(), &db_,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, vfs);
    if (rc != SQLITE_OK) {
        std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
        return make_error(ErrorKind::io, "ledger: cannot open " + path_ + ": " + msg);
    }
    // Opening (WAL switch, schema check, migrations) needs the write lock once.
    // It happens at start, off the mail path: wait for it as long as a writer
    // may hold it (another daemon's ingest batch or prune), not the short busy
    // timeout a milter sets for its lookups; that one applies afterwards.
    constexpr std::chrono::milliseconds kOpenBusyTimeout{10000};
    sqlite3_busy_timeout(db_, static_cast<int>(std::max(options_.busy_timeout, kOpenBusyTimeout).count()));
    sqlite3_extended_result_codes(db_, 1);
    auto opened = guard([&] {
        exec("PRAGMA journal_mode=WAL");
        // NORMAL in WAL mode: a process crash (kill -9) loses nothing committed; only a
        // power loss may drop the last transactions, batch and position together.
        exec("PRAGMA synchronous=NORMAL");
        exec("PRAGMA foreign_keys=OFF");
        exec("PRAGMA temp_store=MEMORY");
        exec("PRAGMA cache_size=-16000");
        // Debian's SQLite is built with SECURE_DELETE: every page freed (the
        // engine journal's entries after each state save, pruned rows) was
        // written again as zeros. FAST zeroes deleted content only in pages
        // written anyway; the file's owner and mode protect the rest.
        exec("PRAGMA secure_delete=FAST");
        migrate();
    });
    sqlite3_busy_timeout(db_, static_cast<int>(options_.busy_timeout.count()));
    return opened;
}

// Bulk import: a 64 MiB page cache instead of 16 MiB (the month of a busy
// relay touches far more than 16 MiB of B-tree pages at random: messages and
// recipients are keyed by queue id), and a WAL checkpoint every 256 MiB of
// WAL instead of every 4 MiB (each checkpoint writes the pages back and
// syncs twice; a page written by many batches is written back once).
// synchronous stays NORMAL: a kill -9 loses nothing committed.
// Into an empty ledger, the secondary indexes of messages, recipients and
// episodes (kSecondaryIndexes: queue id, Message-ID, fingerprint, address,
// times, destination) are dropped and built once when bulk mode ends: keyed by random values,
// each batch rewrote pages all over them. Lookups stay correct meanwhile
// (scans); the ingest path finds its rows through the queue-id map instead
// (QueueIdMap), which also keeps queue ids unique while their index is
// missing. A process killed before the end leaves them missing; open()
// builds them. Destination rows are kept between batches meanwhile
// (DestinationCache), into any ledger. The checkpoints run on a thread of
// their own meanwhile (BackgroundCheckpointer), off the import's critical
// path; should it not start, SQLite's own checkpoint stays, every 256 MiB.
void SqliteLedger::set_bulk_mode(bool on) noexcept {
    std::lock_guard lock(mutex_);
    (void)guard([&] {
        exec(on ? "PRAGMA cache_size=-65536" : "PRAGMA cache_size=-16000");
        if (on) exec("PRAGMA wal_autocheckpoint=65536");
        if (on && !dest_cache_.active) {
            dest_cache_.version = data_version();
            dest_cache_.active = true;
        }
    });
    if (on && !checkpointer_ && separate_readers_) {
        BackgroundCheckpointer::Limits limits;
        if (options_.sqlite_bulk_checkpoint_pages > 0) {
            limits.step_pages = options_.sqlite_bulk_checkpoint_pages;
            limits.max_pages = 4 * options_.sqlite_bulk_checkpoint_pages;
        }
        std::string error;
        checkpointer_ = BackgroundCheckpointer::start(db_, path_, limits, options_.warn, error);
        if (!checkpointer_)
            options_.warn("bulk mode: checkpoints stay on the writing thread: cannot open " + path_ +
                          " a second time: " + error);
    }
    if (!on) {
        dest_cache_.active = false;
        dests_.release();
    }
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
                if (empty) {
                    qid_map_.start(version);
                    // The map finds rows meanwhile and does not keep queue_ids_
                    // (message_row): it is read again after the map ends.
                    queue_ids_.clear();
                    queue_ids_built_ = false;
                }
            } catch (...) {
                sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
                throw;
            }
        });
        if (!st) options_.warn("bulk mode: keeping the indexes: " + st.error().message);
    } else if (!on && indexes_deferred_ && !options_.sqlite_bulk_build_indexes) {
        qid_map_.stop();  // a throwaway ledger: the next opening builds them, if any
        indexes_deferred_ = false;
    } else if (!on && indexes_deferred_) {
        qid_map_.stop();
        auto st = guard([&] { ensure_indexes(); });
        if (!st)
            options_.warn(
                "bulk mode: building the indexes: " + st.error().message +
                " (their keys are sorted in temporary files, in the first writable of "
                "$SQLITE_TMPDIR, $TMPDIR, /var/tmp and /tmp; the next opening builds them in memory)");
        indexes_deferred_ = false;
    }
    if (!on) {
        // After the index build, whose pages it checkpoints too. Its end
        // leaves the writer without a WAL hook: SQLite's checkpoint is set again.
        checkpointer_.reset();
        (void)guard([&] { exec("PRAGMA wal_autocheckpoint=1000"); });
    }
}

// PRAGMA data_version: changes when another connection commits.
std::int64_t SqliteLedger::data_version() {
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
void SqliteLedger::leave_queue_id_map(std::string_view why) {
    options_.warn("bulk mode: " + std::string(why) + ": building the queue-id indexes now");
    qid_map_.stop();
    if (options_.sqlite_bulk_unsettled) options_.sqlite_bulk_unsettled();
    for (std::size_t i = 0; i < 2; ++i) exec(kSecondaryIndexes[i].create);
}

// At the end of bulk mode. SQLite sorts an index's keys in runs of at most
// the page cache's size, each written to a temporary file, and merges them;
// with temp_store=MEMORY it sorts all the keys as one list in memory. Runs
// of 4 MiB and their merge took 40 % less time than one list (64 MiB of
// cache; docs/performance.md, "Eleventh round"). SQLite's two worker
// threads for the runs and their merge cost more than they save on a small
// ledger (0.62 against 0.57 s on the scale-1 month log's, 100 MB) and save
// more than they cost on a large one (1.93-2.10 against 2.19-2.43 s at 320 MB,
// 4.1-4.5 against 5.2-5.5 s at 1 GB; "Seventeenth round"), where the import's
// other threads have ended: they sort when the file holds 128 MiB or more
// and the machine has a second core. Each index is a transaction of its
// own, so that the background checkpointer copies one index's pages while
// the next one is built, instead of all of them at the close. Should no
// temporary file open, the warning says where SQLite looks for them, and
// the next opening builds the indexes not built yet in memory (migrate()).
void SqliteLedger::ensure_indexes() {
    std::int64_t cache_size = -16000, bytes = 0;
    {
        Query q = stmt("PRAGMA cache_size");
        if (q.row()) cache_size = q.col(0);
        q.run();
        Query n = stmt("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()");
        if (n.row()) bytes = n.col(0);
        n.run();
    }
    const int threads = bytes >= kSortThreadsFrom && std::thread::hardware_concurrency() >= 2 ? 2 : 0;
    const std::string restore =
        fmt::format("PRAGMA temp_store=MEMORY; PRAGMA cache_size={}; PRAGMA threads=0", cache_size);
    exec(fmt::format("PRAGMA temp_store=FILE; PRAGMA cache_size=-4096; PRAGMA threads={}", threads).c_str());
    for (const auto& index : kSecondaryIndexes) {
        exec("BEGIN IMMEDIATE");
        try {
            // Each index is a scan of its table in order: its pages are read in
            // stretches, not one pread(2) at a time (sqlite_wal_writes.hpp).
            set_read_ahead(db_, true);
            exec(index.create);
            set_read_ahead(db_, false);
            exec("COMMIT");
        } catch (...) {
            set_read_ahead(db_, false);
            sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
            sqlite3_exec(db_, restore.c_str(), nullptr, nullptr, nullptr);
            throw;
        }
    }
    exec(restore.c_str());
}

std::int64_t SqliteLedger::exec_bound(const char* sql, std::initializer_list<std::int64_t> args) {
    Query q = stmt(sql);
    for (auto a : args) q.i64(a);
    q.run();
    return sqlite3_changes(db_);
}

void SqliteLedger::exec(const char* sql) {
    char* err = nullptr;
    int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
    if (rc != SQLITE_OK) {
        std::string msg = err ? err : sqlite3_errmsg(db_);
        sqlite3_free(err);
        throw SqlError{rc, msg};
    }
}

void SqliteLedger::migrate() {
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
        load_event_keyer();
        // A bulk import killed before its end left them dropped (set_bulk_mode).
        for (const auto& index : kSecondaryIndexes) exec(index.create);
        exec("COMMIT");
    } catch (...) {
        sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
        throw;
    }
}

// Made by the first opening in its migration transaction, so that concurrent
// openers agree. Kept outside the numbered schema: every opening checks for it
// anyway. A file that already holds seen keys (FNV-1a, from before the secret)
// gets the newest of their times as its horizon.
void SqliteLedger::load_event_keyer() {
    exec("CREATE TABLE IF NOT EXISTS ledger_meta(name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID");
    {
        Query q = stmt("SELECT value FROM ledger_meta WHERE name = 'event_keyer'");
        if (q.row()) {
            auto stored = decode_event_keyer(q.str(0));
            if (!stored) throw SqlError{SQLITE_CORRUPT, "unreadable event key secret in ledger_meta"};
            keyer_ = *stored;
            return;
        }
    }
    std::optional<TimePoint> horizon;
    {
        Query q = stmt(
            "SELECT MAX(t) FROM (SELECT MAX(time) AS t FROM seen_events UNION ALL "
            "SELECT MAX(last) FROM seen_batches)");
        if (q.row() && !q.is_null(0)) horizon = from_micros(q.col(0));
    }
    auto made = options_.new_event_keyer ? options_.new_event_keyer : new_event_keyer(horizon);
    if (!made) throw SqlError{SQLITE_ERROR, "no random bytes for the event key secret"};
    Query q = stmt("INSERT INTO ledger_meta(name, value) VALUES('event_keyer', ?)");
    q.text(encode_event_keyer(*made)).run();
    keyer_ = *made;
}

Error SqliteLedger::to_error(const SqlError& e) {
    int primary = e.code & 0xff;
    if (primary == SQLITE_INTERRUPT)
        return make_error(ErrorKind::timeout, "ledger (sqlite): lookup deadline passed");
    auto kind = (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) ? ErrorKind::unavailable
                : (primary == SQLITE_MISMATCH)                       ? ErrorKind::config
                                                                     : ErrorKind::io;
    return make_error(kind, "ledger (sqlite): " + e.message);
}

Error SqliteLedger::error_of(const SqlError& e) const {
    Error err = to_error(e);
    if ((e.code & 0xff) != SQLITE_READONLY) return err;
    // The usual cause: root created the file (or its -wal/-shm) and another
    // user runs this program. Say which file and how to fix it.
    for (const char* suffix : {"", "-wal", "-shm"}) {
        const std::string file = path_ + suffix;
        struct stat st {};
        if (::stat(file.c_str(), &st) != 0 || ::access(file.c_str(), W_OK) == 0) continue;
        err.message += fmt::format(
            " ({} is {}:{} mode {:04o}, which user {} cannot write: as root, chown the ledger's files to "
            "the user that runs the daemons, e.g. chown retryguard:retryguard {}*)",
            file, user_name(st.st_uid), group_name(st.st_gid), st.st_mode & 07777, user_name(::geteuid()),
            path_);
        break;
    }
    return err;
}

}  // namespace retryguard::ledger_detail
