// The ledger contract on the SQLite backend, plus what only SQLite has:
// schema versions, lock timeouts, the backend spec.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <grp.h>
#include <pwd.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "../../core/ledger/sqlite_checkpointer.hpp"
#include "../../core/ledger/sqlite_listings.hpp"
#include "../../core/ledger/sqlite_lookups.hpp"
#include "../../core/ledger/sqlite_prune.hpp"
#include "../../core/ledger/sqlite_wal_writes.hpp"
#include "ledger/ledger_contract.hpp"

namespace retryguard::ledger_test {
namespace {

std::filesystem::path temp_root() {
    static std::filesystem::path root = [] {
        auto p = std::filesystem::temp_directory_path() / ("retryguard-ledger-" + std::to_string(getpid()));
        std::filesystem::create_directories(p);
        return p;
    }();
    return root;
}

struct CleanUp : testing::Environment {
    void TearDown() override {
        std::error_code ec;
        std::filesystem::remove_all(temp_root(), ec);
    }
};
[[maybe_unused]] auto* const kCleanUp = testing::AddGlobalTestEnvironment(new CleanUp);

std::string db_path(const std::string& tag) {
    return (temp_root() / (tag + ".db")).string();
}

LedgerBackend sqlite_backend() {
    return {"sqlite", [](const std::string& tag) { return open_ledger("sqlite:" + db_path(tag)); }, {}};
}

INSTANTIATE_TEST_SUITE_P(Sqlite, LedgerContract, testing::Values(sqlite_backend()), backend_name);

TEST(LedgerSqlite, SchemaVersionIsRecordedAndANewerFileIsRefused) {
    auto path = db_path("schema");
    {
        auto l = open_ledger("sqlite:" + path);
        ASSERT_TRUE(l.ok()) << l.error().message;
        auto s = (*l)->stats();
        ASSERT_TRUE(s.ok());
        EXPECT_EQ(s->schema_version, 15);
    }
    {  // reopening does not migrate twice
        auto l = open_ledger(path);
        ASSERT_TRUE(l.ok()) << l.error().message;
    }
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "INSERT INTO schema_version VALUES(99)", nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
    auto l = open_ledger("sqlite:" + path);
    ASSERT_FALSE(l.ok());
    EXPECT_EQ(l.error().kind, ErrorKind::config);
    EXPECT_NE(l.error().message.find("newer"), std::string::npos);
}

// Rewrites the file as an older schema left it: schema_version up to
// `version`, the messages' host (version 8), the batch rows of version 7 and
// the event-key secret gone and the (FNV-1a) keys of `items` in
// seen_events, in that version's layout (key-first before version 4).
void downgrade_seen(const std::string& path, int version, const std::vector<IngestItem>& items) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    std::string sql = "BEGIN; DROP TABLE seen_batches; DROP TABLE seen_events; DROP TABLE ledger_meta;";
    sql += version < 4 ? "CREATE TABLE seen_events(key INTEGER PRIMARY KEY, time INTEGER NOT NULL);"
                       : "CREATE TABLE seen_events(time INTEGER NOT NULL, key INTEGER NOT NULL, "
                         "PRIMARY KEY(time, key)) WITHOUT ROWID;";
    for (const auto& item : items)
        sql += "INSERT INTO seen_events(key, time) VALUES(" +
               std::to_string(static_cast<std::int64_t>(fnv_event_key(item.event))) + ", " +
               std::to_string(to_micros(item.event.time)) + ");";
    sql += "ALTER TABLE messages DROP COLUMN host;";  // version 8
    sql += "DELETE FROM schema_version WHERE version > " + std::to_string(version) + "; COMMIT;";
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
}

// Version 4 re-keyed seen_events by (time, key) and version 7 moved the keys
// of new batches to seen_batches: the events an older file had seen must
// still count as seen after the migrations, and prune must still drop them.
TEST(LedgerSqlite, EventsSeenBeforeTheSeenEventsMigrationsStaySeen) {
    for (int version : {3, 6}) {
        SCOPED_TRACE("from version " + std::to_string(version));
        auto path = db_path("seen-migration-" + std::to_string(version));
        const std::vector<IngestItem> items = {client("Q1", 100), queue_active("Q1", 101, "a@src.test"),
                                               deferred("Q1", 102, "u@dest.test"),
                                               sent("Q1", 900, "u@dest.test"), removed("Q1", 901)};
        {
            auto l = open_ledger("sqlite:" + path);
            ASSERT_TRUE(l.ok()) << l.error().message;
            auto r = (*l)->ingest(items, std::nullopt);
            ASSERT_TRUE(r.ok()) << r.error().message;
            EXPECT_EQ(r->applied, items.size());
        }
        downgrade_seen(path, version, items);

        auto l = open_ledger("sqlite:" + path);
        ASSERT_TRUE(l.ok()) << l.error().message;
        auto s = (*l)->stats();
        ASSERT_TRUE(s.ok());
        EXPECT_EQ(s->schema_version, 15);
        EXPECT_EQ(s->seen_events, static_cast<std::int64_t>(items.size()));
        // Version 8 gave messages a host column: old rows keep their data, with no host.
        auto old = (*l)->get_message("Q1");
        ASSERT_TRUE(old.ok() && old->has_value());
        EXPECT_EQ((*old)->state, MessageState::gone);
        EXPECT_EQ((*old)->host, "");
        auto again = (*l)->ingest(items, std::nullopt);
        ASSERT_TRUE(again.ok()) << again.error().message;
        EXPECT_EQ(again->applied, 0u);
        EXPECT_EQ(again->duplicates, items.size());
        // A new event still goes in, and is seen the next time.
        const std::vector<IngestItem> more = {client("Q2", 2000)};
        auto fresh = (*l)->ingest(more, std::nullopt);
        ASSERT_TRUE(fresh.ok());
        EXPECT_EQ(fresh->applied, 1u);
        EXPECT_EQ((*l)->ingest(more, std::nullopt)->duplicates, 1u);
        // Prune by event time drops the old keys from both tables.
        RetentionPolicy p;
        p.seen_events = std::chrono::seconds(1000);
        auto pr = (*l)->prune(p, at(2500));
        ASSERT_TRUE(pr.ok()) << pr.error().message;
        EXPECT_EQ(pr->seen_events, static_cast<std::int64_t>(items.size()));
        EXPECT_EQ((*l)->stats()->seen_events, 1);
    }
}

// One batch's keys are one row; a prune whose cut falls inside the batch's
// span keeps exactly the keys at or after the cut.
TEST(LedgerSqlite, PruneCutInsideABatchKeepsItsNewerKeys) {
    auto l = open_ledger("sqlite:" + db_path("seen-straddle"));
    ASSERT_TRUE(l.ok()) << l.error().message;
    const std::vector<IngestItem> items = {client("S1", 100), client("S2", 200), client("S3", 300),
                                           client("S4", 400), client("S5", 500)};
    ASSERT_EQ((*l)->ingest(items, std::nullopt)->applied, items.size());
    RetentionPolicy p;
    p.seen_events = std::chrono::seconds(1000);
    auto pr = (*l)->prune(p, at(1300));  // cut at 300: S1 and S2 go
    ASSERT_TRUE(pr.ok()) << pr.error().message;
    EXPECT_EQ(pr->seen_events, 2);
    EXPECT_EQ((*l)->stats()->seen_events, 3);
    auto again = (*l)->ingest(items, std::nullopt);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->duplicates, 3u);
    EXPECT_EQ(again->applied, 2u);  // no longer recognised as replays
}

// `first`, `other` and `second` into a reference ledger one after the other;
// then the same into a ledger in bulk mode, `other` through a second
// connection between the two batches. Returns the bulk ledger (still in bulk
// mode) and sets `expected` to the reference's dump; null on a failed step.
std::unique_ptr<Ledger> bulk_with_another_writer(const std::string& tag, const std::vector<IngestItem>& first,
                                                 const std::vector<IngestItem>& other,
                                                 const std::vector<IngestItem>& second,
                                                 const std::vector<std::string>& ids, std::string& expected,
                                                 std::string* path_out = nullptr) {
    auto ref = open_ledger("sqlite:" + db_path(tag + "-ref"));
    EXPECT_TRUE(ref.ok());
    if (!ref) return nullptr;
    for (const auto* part : {&first, &other, &second})
        if (!(*ref)->ingest(*part, std::nullopt).ok()) return nullptr;
    expected = full_dump(**ref, ids);
    const std::string path = db_path(tag);
    if (path_out) *path_out = path;
    auto bulk = open_ledger("sqlite:" + path);
    EXPECT_TRUE(bulk.ok());
    if (!bulk) return nullptr;
    (*bulk)->set_bulk_mode(true);
    if (!(*bulk)->ingest(first, std::nullopt).ok()) return nullptr;
    {
        auto writer = open_ledger("sqlite:" + path);
        EXPECT_TRUE(writer.ok());
        if (!writer || !(*writer)->ingest(other, std::nullopt).ok()) return nullptr;
    }
    if (!(*bulk)->ingest(second, std::nullopt).ok()) return nullptr;
    return std::move(*bulk);
}

// Bulk mode into an empty ledger defers the secondary indexes; another process
// writing the same file meanwhile must not be overwritten or missed, and the
// indexes are back when bulk mode ends.
TEST(LedgerSqlite, BulkModeIntoAnEmptyLedgerGivesTheSameLedgerDespiteAnotherWriter) {
    const std::vector<IngestItem> first = {client("M1", 10), queue_active("M1", 11, "s@x.test"),
                                           deferred("M1", 12, "r@d.test"), deferred("M1", 13, "q@e.test")};
    const std::vector<IngestItem> other = {client("M2", 20), queue_active("M2", 21, "s@x.test"),
                                           sent("M2", 22, "r@d.test"), removed("M2", 23),
                                           deferred("M1", 24, "q@e.test")};
    const std::vector<IngestItem> second = {deferred("M1", 30, "r@d.test"), client("M2", 31),
                                            deferred("M3", 32, "p@d.test"), sent("M1", 33, "q@e.test")};
    const std::vector<std::string> ids = {"M1", "M2", "M3"};
    std::string expected, path;
    auto bulk = bulk_with_another_writer("bulk", first, other, second, ids, expected, &path);
    ASSERT_TRUE(bulk);
    bulk->set_bulk_mode(false);
    EXPECT_EQ(full_dump(*bulk, ids), expected);

    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db,
                                 "SELECT COUNT(*) FROM sqlite_schema WHERE type = 'index' AND name IN "
                                 "('messages_message_id_queued', 'messages_block_message_id', "
                                 "'messages_fingerprint_queued', 'messages_finished', 'messages_updated', "
                                 "'recipients_block_address')",
                                 -1, &st, nullptr),
              SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int(st, 0), 6) << "the deferred indexes are built when bulk mode ends";
    sqlite3_finalize(st);
    sqlite3_close(db);
}

// How many of the named indexes the file has.
int count_indexes(const std::string& path, const std::string& names) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const std::string sql =
        "SELECT COUNT(*) FROM sqlite_schema WHERE type = 'index' AND name IN (" + names + ")";
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK);
    const int n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

constexpr const char* kQueueIdIndexes = "'messages_queue_id_live', 'recipients_message_address'";

// Bulk mode into an empty ledger drops the queue-id indexes too and finds its
// rows through its own map of queue ids: rows touched again in later batches,
// a requeue, an expiry of recipients written batches before, a finished
// queue id logged again within the hour (an expiry's bounce notice and
// removal in the next batch: the map keeps it), and one logged again more
// than an hour of log time after it finished (which ends the map and builds
// the indexes mid-import) give the same ledger as without bulk mode.
TEST(LedgerSqlite, BulkModeQueueIdMapGivesTheSameLedger) {
    const std::vector<std::vector<IngestItem>> batches = {
        {client("A1", 10), queue_active("A1", 11, "s@x.test"), deferred("A1", 12, "r@d.test"),
         deferred("A1", 13, "q@e.test"), client("B1", 14), queue_active("B1", 15, "s@x.test"),
         deferred("B1", 16, "p@d.test")},
        {deferred("A1", 20, "r@d.test"), sent("A1", 21, "q@e.test"), client("C1", 22),
         queue_active("C1", 23, "t@x.test"), sent("C1", 24, "o@f.test"), removed("C1", 25)},
        {pickup("A2", 30, "s@x.test", "A1"), deferred("A2", 31, "r@d.test"), expired("B1", 32, "s@x.test"),
         sent("A2", 33, "r@d.test"), removed("A2", 34)},
        {deferred("A2", 40, "n@d.test"), client("D1", 41), sent("D1", 42, "m@d.test"), removed("B1", 43)},
        {sent("A2", 50, "n@d.test"), removed("D1", 51)},
        {client("E1", 4000), queue_active("E1", 4001, "u@x.test"), sent("E1", 4002, "l@d.test"),
         removed("E1", 4003)},
        {deferred("A2", 4100, "k@d.test")},
    };
    const std::vector<std::string> ids = {"A1", "A2", "B1", "C1", "D1", "E1"};
    for (std::size_t retired_again : {std::size_t{3}, std::size_t{5}, batches.size()}) {
        SCOPED_TRACE("batches " + std::to_string(retired_again));
        // Without the last batch no queue id comes back after its hour: the map lasts to the end.
        std::vector<std::vector<IngestItem>> use(batches.begin(),
                                                 batches.begin() + static_cast<long>(retired_again));
        std::string expected;
        {
            auto ref = open_ledger("sqlite:" + db_path("qidmap-ref-" + std::to_string(retired_again)));
            ASSERT_TRUE(ref.ok());
            for (const auto& b : use) ASSERT_TRUE((*ref)->ingest(b, std::nullopt).ok());
            expected = full_dump(**ref, ids);
        }
        const std::string path = db_path("qidmap-" + std::to_string(retired_again));
        auto bulk = open_ledger("sqlite:" + path);
        ASSERT_TRUE(bulk.ok());
        (*bulk)->set_bulk_mode(true);
        EXPECT_EQ(count_indexes(path, kQueueIdIndexes), 0) << "dropped while the import runs";
        for (std::size_t i = 0; i < use.size(); ++i) {
            auto r = (*bulk)->ingest(use[i], std::nullopt);
            ASSERT_TRUE(r.ok()) << r.error().message;
            if (i == 2) {
                EXPECT_EQ(count_indexes(path, kQueueIdIndexes), 0);
            }
        }
        EXPECT_EQ(count_indexes(path, kQueueIdIndexes), retired_again == batches.size() ? 2 : 0)
            << "A2 logged again an hour after it finished ends the map; within the hour it does not";
        (*bulk)->set_bulk_mode(false);
        EXPECT_EQ(count_indexes(path, kQueueIdIndexes), 2);
        EXPECT_EQ(full_dump(**bulk, ids), expected);
        // The same events again are all replays, and the milter's upsert finds
        // the unfinished row: A1 finished (requeued as A2), so the first
        // identity of A1 is a new message, which the second one updates.
        std::size_t n = 0;
        for (const auto& b : use) {
            auto again = (*bulk)->ingest(b, std::nullopt);
            ASSERT_TRUE(again.ok());
            n += again->duplicates;
        }
        EXPECT_GT(n, 0u);
        MessageIdentity id;
        id.queue_id = "A1";
        id.message_id = "<m1@x.test>";
        id.time = at(60);
        ASSERT_TRUE((*bulk)->record_identity(id).ok());
        id.fingerprint = "fp-a1";
        ASSERT_TRUE((*bulk)->record_identity(id).ok());
        auto m = (*bulk)->get_message("A1");
        ASSERT_TRUE(m.ok() && m->has_value());
        EXPECT_EQ((*m)->message_id, "m1@x.test");
        EXPECT_EQ((*m)->fingerprint, "fp-a1");
        EXPECT_FALSE((*m)->finished.has_value()) << "the new message, not the finished A1";
        EXPECT_EQ((*bulk)->stats()->messages, static_cast<std::int64_t>(retired_again == 3   ? 5
                                                                        : retired_again == 5 ? 6
                                                                                             : 7));
    }
}

// Bulk mode reports each message its queue-id map lets go of (finished an
// hour of log time before the latest finish), with all its recipients' rows,
// after the batch that let it go committed; and reports the map's early end
// (a let-go queue id logged again), after which those rows may change.
TEST(LedgerSqlite, BulkModeReportsSettledMessagesAndTheMapsEarlyEnd) {
    const std::vector<std::vector<IngestItem>> batches = {
        {client("A1", 10), queue_active("A1", 11, "s@x.test"), sent("A1", 12, "r@d.test"),
         sent("A1", 13, "q@e.test"), removed("A1", 14)},
        {client("B1", 20), queue_active("B1", 21, "s@x.test"), deferred("B1", 22, "p@d.test")},
        {client("C1", 4000), queue_active("C1", 4001, "t@x.test"), sent("C1", 4002, "o@f.test"),
         removed("C1", 4003)},
        {deferred("A1", 4100, "n@d.test")},
    };
    const std::string path = db_path("settled");
    std::vector<std::pair<std::int64_t, std::vector<std::int64_t>>> settled;
    int unsettled = 0;
    LedgerOptions o;
    o.spec = "sqlite:" + path;
    o.sqlite_bulk_settled = [&](std::int64_t m, std::span<const std::int64_t> r) {
        settled.emplace_back(m, std::vector<std::int64_t>(r.begin(), r.end()));
    };
    o.sqlite_bulk_unsettled = [&] { ++unsettled; };
    auto l = open_ledger(o);
    ASSERT_TRUE(l.ok());
    (*l)->set_bulk_mode(true);
    for (std::size_t i = 0; i + 1 < batches.size(); ++i)
        ASSERT_TRUE((*l)->ingest(batches[i], std::nullopt).ok());
    // A1 finished at 14, more than an hour before C1 at 4003; B1 is not finished, C1 just now.
    ASSERT_EQ(settled.size(), 1u);
    EXPECT_EQ(unsettled, 0);
    {
        sqlite3* db = nullptr;
        ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
        auto text = [&](const std::string& sql) {
            sqlite3_stmt* st = nullptr;
            EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK);
            std::string out;
            while (sqlite3_step(st) == SQLITE_ROW) {
                if (!out.empty()) out += ",";
                out += reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
            }
            sqlite3_finalize(st);
            return out;
        };
        EXPECT_EQ(text("SELECT queue_id FROM messages WHERE id = " + std::to_string(settled[0].first)), "A1");
        std::string ids;
        for (auto r : settled[0].second) ids += (ids.empty() ? "" : ",") + std::to_string(r);
        EXPECT_EQ(text("SELECT address FROM recipients WHERE id IN (" + ids + ") ORDER BY address"),
                  "q@e.test,r@d.test");
        EXPECT_EQ(text("SELECT address FROM recipients WHERE queue_id = 'A1' ORDER BY address"),
                  "q@e.test,r@d.test");
        sqlite3_close(db);
    }
    ASSERT_TRUE((*l)->ingest(batches.back(), std::nullopt).ok());
    EXPECT_EQ(unsettled, 1) << "A1 logged again after it was let go of";
    (*l)->set_bulk_mode(false);
    EXPECT_EQ(unsettled, 1);
}

// Bulk mode checkpoints on a thread of its own (BackgroundCheckpointer),
// here every 16 pages and with the writer waiting for the WAL to start over
// at 64. Many batches: the WAL stays bounded (it starts over, as with
// SQLite's own checkpoint), the checkpoints are not taken for another
// connection's writes (the queue-id map lasts to the end), and the ledger is
// the one written without bulk mode. Then the same with a reader holding a
// snapshot through the import: no checkpoint can copy all of the WAL, and
// the writer must not wait for the reader.
TEST(LedgerSqlite, BulkModeCheckpointsOnAThreadKeepTheWalBoundedAndTheLedgerTheSame) {
    std::vector<std::vector<IngestItem>> batches;
    std::vector<std::string> ids;
    for (int b = 0; b < 150; ++b) {
        std::vector<IngestItem> batch;
        for (int m = 0; m < 12; ++m) {
            const std::string q = "Q" + std::to_string(b * 100 + m);
            const int t = b * 60 + m;
            const std::string rcpt =
                "r" + std::to_string(m) + "@d" + std::to_string((b * 7 + m) % 40) + ".test";
            batch.push_back(client(q, t));
            batch.push_back(queue_active(q, t, "s@x.test"));
            batch.push_back(deferred(q, t + 1, rcpt));
            batch.push_back(sent(q, t + 30, rcpt));
            batch.push_back(removed(q, t + 30));
            if (m == 0 && b % 10 == 0) ids.push_back(q);
        }
        batches.push_back(std::move(batch));
    }
    std::string expected;
    {
        auto ref = open_ledger("sqlite:" + db_path("bgckpt-ref"));
        ASSERT_TRUE(ref.ok());
        for (const auto& b : batches) ASSERT_TRUE((*ref)->ingest(b, std::nullopt).ok());
        auto st = (*ref)->stats();
        expected = full_dump(**ref, ids) + " messages=" + std::to_string(st->messages);
    }
    constexpr int kStep = 16, kMax = 4 * kStep;
    for (const bool reader : {false, true}) {
        SCOPED_TRACE(reader ? "with a reader" : "alone");
        const std::string path = db_path(reader ? "bgckpt-reader" : "bgckpt");
        std::vector<std::string> warnings;
        LedgerOptions options;
        options.spec = "sqlite:" + path;
        options.sqlite_bulk_checkpoint_pages = kStep;
        options.warn = [&](std::string_view w) { warnings.emplace_back(w); };
        auto bulk = open_ledger(options);
        ASSERT_TRUE(bulk.ok());
        (*bulk)->set_bulk_mode(true);
        sqlite3* snapshot = nullptr;
        std::uintmax_t wal_max = 0, wal_after_reader = 0;
        for (std::size_t i = 0; i < batches.size(); ++i) {
            if (reader && i == 20) {
                ASSERT_EQ(sqlite3_open_v2(path.c_str(), &snapshot, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
                ASSERT_EQ(
                    sqlite3_exec(snapshot, "BEGIN; SELECT count(*) FROM messages", nullptr, nullptr, nullptr),
                    SQLITE_OK);
            }
            if (reader && i == 100) {
                ASSERT_EQ(sqlite3_exec(snapshot, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
                sqlite3_close_v2(snapshot);
                snapshot = nullptr;
                wal_after_reader = std::filesystem::file_size(path + "-wal");
            }
            auto r = (*bulk)->ingest(batches[i], std::nullopt);
            ASSERT_TRUE(r.ok()) << r.error().message;
            wal_max = std::max(wal_max, std::filesystem::file_size(path + "-wal"));
        }
        SCOPED_TRACE(
            fmt::format("WAL: largest {} bytes, {} when the reader left", wal_max, wal_after_reader));
        // A frame is a page and a 24-byte header; one batch here writes far
        // fewer than kMax pages. Without the WAL starting over it would hold
        // every page each batch wrote (thousands).
        const std::uintmax_t bound = 2 * kMax * (4096 + 24) + 32;
        if (!reader) {
            EXPECT_LE(wal_max, bound);
        } else {
            EXPECT_GT(wal_after_reader, bound) << "the reader kept the WAL from starting over";
            EXPECT_EQ(std::filesystem::file_size(path + "-wal"), wal_max) << "a WAL file does not shrink";
        }
        EXPECT_EQ(count_indexes(path, kQueueIdIndexes), 0) << "the queue-id map lasted to the end";
        (*bulk)->set_bulk_mode(false);  // joins the checkpointing thread, the one that warns
        EXPECT_TRUE(warnings.empty()) << fmt::format("{}", fmt::join(warnings, "\n"));
        auto st = (*bulk)->stats();
        EXPECT_EQ(full_dump(**bulk, ids) + " messages=" + std::to_string(st->messages), expected);
    }
}

// The checkpointing thread finds the WAL busy: another connection (here a
// FULL checkpoint waiting for the write lock, which a third one holds) has
// the checkpoint lock. The writer's wait for a checkpoint still ends; BUSY is
// tried again and is no failure; BUSY through 16 requests in a row is logged,
// once. Once the lock is free, the next checkpoint copies the whole WAL.
TEST(LedgerSqlite, ABusyCheckpointIsNoFailureUntilItLasts) {
    const std::string path = db_path("ckpt-busy");
    auto open = [&](sqlite3** db) {
        ASSERT_EQ(sqlite3_open_v2(path.c_str(), db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr),
                  SQLITE_OK);
    };
    sqlite3 *writer = nullptr, *holder = nullptr, *other = nullptr;
    open(&writer);
    open(&holder);
    open(&other);
    ASSERT_EQ(
        sqlite3_exec(writer, "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; CREATE TABLE t(v BLOB)",
                     nullptr, nullptr, nullptr),
        SQLITE_OK);
    std::vector<std::string> warnings;
    std::string error;
    auto checkpointer = ledger_detail::BackgroundCheckpointer::start(
        writer, path, {.step_pages = 1000, .max_pages = 8},
        [&](std::string_view w) { warnings.emplace_back(w); }, error);
    ASSERT_TRUE(checkpointer) << error;
    // More than max_pages in the WAL: each before_write asks for a checkpoint.
    ASSERT_EQ(sqlite3_exec(writer,
                           "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20) "
                           "INSERT INTO t SELECT randomblob(3000) FROM n",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);

    std::atomic<bool> waiting{false}, release{false};
    std::pair<std::atomic<bool>*, std::atomic<bool>*> flags(&waiting, &release);
    sqlite3_busy_handler(
        other,
        [](void* arg, int) -> int {
            auto* flags = static_cast<std::pair<std::atomic<bool>*, std::atomic<bool>*>*>(arg);
            flags->first->store(true);
            for (int i = 0; i < 2000 && !flags->second->load(); ++i)
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
            return 0;  // give up: the FULL checkpoint goes on as a PASSIVE one
        },
        &flags);
    ASSERT_EQ(sqlite3_exec(holder, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(other, "SELECT count(*) FROM t", nullptr, nullptr, nullptr), SQLITE_OK);
    std::atomic<int> full_rc{-1};
    std::thread full([&] {
        full_rc = sqlite3_wal_checkpoint_v2(other, nullptr, SQLITE_CHECKPOINT_FULL, nullptr, nullptr);
        waiting.store(true);
    });
    for (int i = 0; i < 2000 && !waiting.load(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (full_rc.load() != -1) full.join();
    ASSERT_EQ(full_rc.load(), -1)
        << "the FULL checkpoint waits for the write lock, holding the checkpoint lock";

    checkpointer->before_write();  // returns: BUSY is tried again, then given up for now
    EXPECT_TRUE(warnings.empty()) << fmt::format("{}", fmt::join(warnings, "\n"));
    for (int i = 0; i < 20; ++i) checkpointer->before_write();
    EXPECT_EQ(warnings.size(), 1u) << "logged once, at the 16th request in a row";
    const std::string warned = warnings.empty() ? "" : warnings[0];
    EXPECT_NE(warned.find("WAL checkpoint failed"), std::string::npos) << warned;
    EXPECT_NE(warned.find("locked"), std::string::npos) << warned;

    release.store(true);
    full.join();
    ASSERT_EQ(sqlite3_exec(holder, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
    checkpointer->before_write();
    checkpointer.reset();
    int log = -1, copied = -1;
    ASSERT_EQ(sqlite3_wal_checkpoint_v2(writer, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &copied),
              SQLITE_OK);
    EXPECT_EQ(copied, log) << "nothing was left to copy";
    EXPECT_EQ(warnings.size(), 1u);
    sqlite3_close_v2(other);
    sqlite3_close_v2(holder);
    sqlite3_close_v2(writer);
}

// A milter (another connection) records identities while an import in bulk
// mode has the queue-id indexes dropped: its writes succeed without them, add
// no second row, and the import's next batch goes on without its map; the
// ledger is the one the same writes give without bulk mode.
TEST(LedgerSqlite, AMilterRecordsWhileABulkImportHasTheQueueIdIndexesDropped) {
    const std::vector<IngestItem> b1 = {client("A1", 10), queue_active("A1", 11, "s@x.test"),
                                        deferred("A1", 12, "r@d.test")};
    const std::vector<IngestItem> b2 = {deferred("A1", 20, "s@d.test"), client("Z9", 21),
                                        sent("Z9", 22, "y@d.test")};
    MessageIdentity a1;
    a1.queue_id = "A1";
    a1.message_id = "<a1@x.test>";
    a1.recipients = {"r@d.test", "s@d.test"};
    a1.time = at(15);
    MessageIdentity z9;
    z9.queue_id = "Z9";
    z9.fingerprint = "fp-z9";
    z9.recipients = {"y@d.test"};
    z9.time = at(16);
    const std::vector<std::string> ids = {"A1", "Z9"};
    auto run = [&](const std::string& tag, bool bulk_mode) {
        const std::string path = db_path(tag);
        auto importer = open_ledger("sqlite:" + path);
        EXPECT_TRUE(importer.ok());
        if (bulk_mode) (*importer)->set_bulk_mode(true);
        EXPECT_TRUE((*importer)->ingest(b1, std::nullopt).ok());
        {
            auto milter = open_ledger("sqlite:" + path);
            EXPECT_TRUE(milter.ok());
            EXPECT_TRUE((*milter)->record_identity(a1).ok());
            EXPECT_TRUE((*milter)->record_identity(z9).ok());
            EXPECT_TRUE((*milter)->record_identity(z9).ok()) << "recorded twice: still one row";
        }
        EXPECT_TRUE((*importer)->ingest(b2, std::nullopt).ok());
        if (bulk_mode) (*importer)->set_bulk_mode(false);
        auto st = (*importer)->stats();
        return full_dump(**importer, ids) + " messages=" + std::to_string(st->messages) +
               " recipients=" + std::to_string(st->recipients);
    };
    const std::string expected = run("milter-ref", false);
    EXPECT_NE(expected.find("messages=2 recipients=3"), std::string::npos) << expected;
    EXPECT_EQ(run("milter-bulk", true), expected);
}

// Bulk mode keeps destination rows between batches. Another connection ends
// d.test's episode between two batches of the import: the import's next
// batch reads the row again instead of writing its own stale copy back.
TEST(LedgerSqlite, BulkModeReadsDestinationsAgainAfterAnotherConnectionWrote) {
    const std::vector<IngestItem> first = {client("A1", 10), queue_active("A1", 11, "s@x.test"),
                                           deferred("A1", 12, "r@d.test")};
    const std::vector<IngestItem> other = {client("B1", 20), queue_active("B1", 21, "s@x.test"),
                                           sent("B1", 22, "q@d.test"), removed("B1", 23)};
    const std::vector<IngestItem> second = {deferred("A1", 30, "r@d.test")};
    const std::vector<std::string> ids = {"A1", "B1"};
    std::string expected;
    auto bulk = bulk_with_another_writer("destcache-writer", first, other, second, ids, expected);
    ASSERT_TRUE(bulk);
    auto d = bulk->get_destination(DestinationKind::domain, "d.test");
    ASSERT_TRUE(d.ok() && d->has_value());
    EXPECT_EQ((*d)->last_success, at(22)) << "the other connection's delivery stays";
    ASSERT_TRUE((*d)->episode.has_value());
    EXPECT_EQ((*d)->episode->first_deferral, at(30))
        << "a new episode, not the one the other connection ended";
    EXPECT_EQ((*d)->episode->attempts, 1);
    EXPECT_EQ(full_dump(*bulk, ids), expected);
    bulk->set_bulk_mode(false);
    EXPECT_EQ(full_dump(*bulk, ids), expected);
}

// A batch that rolls back after its destination rows were written (a trigger
// refuses its journal entry) leaves no trace in the rows bulk mode keeps: the
// next batch counts from the committed rows.
TEST(LedgerSqlite, BulkModeForgetsTheDestinationChangesOfARolledBackBatch) {
    const std::vector<IngestItem> first = {client("A1", 10), queue_active("A1", 11, "s@x.test"),
                                           deferred("A1", 12, "r@d.test")};
    const std::vector<IngestItem> poisoned = {deferred("A1", 20, "r@d.test"),
                                              deferred("A1", 21, "p@poison.test")};
    const std::vector<IngestItem> third = {deferred("A1", 30, "r@d.test")};
    const std::vector<std::string> ids = {"A1"};
    std::string expected;
    {
        auto ref = open_ledger("sqlite:" + db_path("destcache-rollback-ref"));
        ASSERT_TRUE(ref.ok());
        ASSERT_TRUE((*ref)->ingest(first, std::nullopt).ok());
        ASSERT_TRUE((*ref)->ingest(third, std::nullopt).ok());
        expected = full_dump(**ref, ids);
    }
    const std::string path = db_path("destcache-rollback");
    auto bulk = open_ledger("sqlite:" + path);
    ASSERT_TRUE(bulk.ok());
    {
        sqlite3* db = nullptr;
        ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(db,
                               "CREATE TRIGGER poison BEFORE INSERT ON engine_journal WHEN EXISTS("
                               "SELECT 1 FROM destinations WHERE name = 'poison.test') "
                               "BEGIN SELECT RAISE(ABORT, 'poisoned batch'); END",
                               nullptr, nullptr, nullptr),
                  SQLITE_OK);
        sqlite3_close(db);
    }
    (*bulk)->set_bulk_mode(true);
    ASSERT_TRUE((*bulk)->ingest(first, std::nullopt).ok());
    auto failed = (*bulk)->ingest(poisoned, std::nullopt);
    ASSERT_FALSE(failed.ok());
    EXPECT_NE(failed.error().message.find("poisoned batch"), std::string::npos) << failed.error().message;
    ASSERT_TRUE((*bulk)->ingest(third, std::nullopt).ok());
    auto d = (*bulk)->get_destination(DestinationKind::domain, "d.test");
    ASSERT_TRUE(d.ok() && d->has_value() && (*d)->episode.has_value());
    EXPECT_EQ((*d)->episode->attempts, 2) << "the rolled-back deferral is not counted";
    EXPECT_EQ((*d)->last_deferral, at(30));
    (*bulk)->set_bulk_mode(false);
    EXPECT_EQ(full_dump(**bulk, ids), expected);
}

// The import's own connection writes destinations outside its batches too:
// verdict effects set a ladder state (which the batches' writes leave alone)
// and a prune deletes idle rows (which the import then reads again, absent).
TEST(LedgerSqlite, BulkModeDestinationRowsFollowVerdictEffectsAndPrune) {
    const std::vector<IngestItem> first = {client("A1", 10),
                                           queue_active("A1", 11, "s@x.test"),
                                           deferred("A1", 12, "r@d.test"),
                                           client("B1", 13),
                                           queue_active("B1", 13, "s@x.test"),
                                           deferred("B1", 13, "q@e.test"),
                                           sent("B1", 14, "q@e.test"),
                                           removed("B1", 15)};
    const std::vector<IngestItem> second = {deferred("A1", 30, "r@d.test")};
    const std::vector<IngestItem> third = {client("C1", 40), queue_active("C1", 40, "s@x.test"),
                                           sent("C1", 41, "z@e.test"), removed("C1", 42)};
    const std::vector<std::string> ids = {"A1", "B1", "C1"};
    VerdictEffect watch;
    watch.seq = 1;
    watch.verdict = "watch";
    watch.action = VerdictEffect::Action::destination_state;
    watch.kind = DestinationKind::domain;
    watch.name = "d.test";
    watch.state = "watch";
    watch.at = at(100);
    RetentionPolicy policy;
    policy.episodes = std::chrono::seconds(500);  // at 1000: idle destinations last updated before 500 go
    auto run = [&](const std::string& tag, bool bulk_mode) {
        auto l = open_ledger("sqlite:" + db_path(tag));
        EXPECT_TRUE(l.ok());
        if (bulk_mode) (*l)->set_bulk_mode(true);
        EXPECT_TRUE((*l)->ingest(first, std::nullopt).ok());
        EXPECT_TRUE((*l)->apply_verdict_effects(std::span(&watch, 1), 0).ok());
        EXPECT_TRUE((*l)->ingest(second, std::nullopt).ok());
        auto pruned = (*l)->prune(policy, at(1000));
        EXPECT_TRUE(pruned.ok());
        EXPECT_TRUE((*l)->ingest(third, std::nullopt).ok());
        std::string out = full_dump(**l, ids);
        auto d = (*l)->get_destination(DestinationKind::domain, "d.test");
        EXPECT_TRUE(d.ok() && d->has_value());
        if (d.ok() && d->has_value()) {
            EXPECT_EQ((*d)->state, "watch");
            EXPECT_EQ((*d)->state_changed, at(100));
            EXPECT_EQ((*d)->last_deferral, at(30));
        }
        auto e = (*l)->get_destination(DestinationKind::domain, "e.test");
        EXPECT_TRUE(e.ok() && e->has_value());
        if (e.ok() && e->has_value()) {
            EXPECT_EQ((*e)->last_deferral, std::nullopt) << "pruned, then written afresh";
            EXPECT_EQ((*e)->last_success, at(41));
        }
        if (bulk_mode) (*l)->set_bulk_mode(false);
        return out;
    };
    const std::string expected = run("destcache-effects-ref", false);
    EXPECT_EQ(run("destcache-effects", true), expected);
}

// A ledger at `path` holding two messages (Q1 deferred to two recipients of
// dest.test, Q2 sent and removed); returns its full dump ("" on failure).
std::string two_message_ledger(const std::string& path) {
    const std::vector<IngestItem> items = {client("Q1", 100),
                                           queue_active("Q1", 101, "a@src.test"),
                                           deferred("Q1", 102, "u@dest.test"),
                                           deferred("Q1", 103, "v@dest.test"),
                                           client("Q2", 104),
                                           sent("Q2", 105, "w@dest.test"),
                                           removed("Q2", 106)};
    auto l = open_ledger("sqlite:" + path);
    if (!l.ok() || !(*l)->ingest(items, std::nullopt).ok()) return "";
    return full_dump(**l, {"Q1", "Q2"});
}

// Schema 9 turned the UNIQUE constraints of messages and recipients into
// unique indexes: a version 8 file keeps its rows, ids and uniqueness.
TEST(LedgerSqlite, SchemaEightFileMigratesToUniqueIndexesKeepingItsRows) {
    const std::string path = db_path("schema8");
    const std::vector<std::string> ids = {"Q1", "Q2"};
    const std::string before = two_message_ledger(path);
    ASSERT_FALSE(before.empty());
    // As version 8 left the file: the keys as UNIQUE constraints of the tables.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const char* v8 = R"sql(BEGIN;
CREATE TABLE m8(id INTEGER PRIMARY KEY, queue_id TEXT NOT NULL UNIQUE, first_queue_id TEXT NOT NULL,
  previous_queue_id TEXT, next_queue_id TEXT, message_id TEXT, fingerprint TEXT, sender TEXT,
  size INTEGER NOT NULL DEFAULT -1, nrcpt INTEGER NOT NULL DEFAULT -1, arrival INTEGER,
  state TEXT NOT NULL DEFAULT 'incoming', updated INTEGER NOT NULL, finished INTEGER, host TEXT NOT NULL DEFAULT '');
INSERT INTO m8 SELECT * FROM messages;
DROP TABLE messages; ALTER TABLE m8 RENAME TO messages;
CREATE TABLE r8(id INTEGER PRIMARY KEY, queue_id TEXT NOT NULL, address TEXT NOT NULL, domain TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT 'pending', attempts INTEGER NOT NULL DEFAULT 0, first_attempt INTEGER,
  last_attempt INTEGER, first_deferral INTEGER, reply_code INTEGER NOT NULL DEFAULT 0,
  enhanced TEXT NOT NULL DEFAULT '', reply_text TEXT NOT NULL DEFAULT '', stage TEXT NOT NULL DEFAULT '',
  relay TEXT NOT NULL DEFAULT '', category TEXT NOT NULL DEFAULT 'unknown', UNIQUE(queue_id, address));
INSERT INTO r8 SELECT id, queue_id, address, domain, state, attempts, first_attempt, last_attempt,
  first_deferral, reply_code, enhanced, reply_text, stage, relay, category FROM recipients;
DROP TABLE recipients; ALTER TABLE r8 RENAME TO recipients;
DELETE FROM schema_version WHERE version > 8;
COMMIT;)sql";
    ASSERT_EQ(sqlite3_exec(db, v8, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
    ASSERT_EQ(count_indexes(path, kQueueIdIndexes), 0);

    auto l = open_ledger("sqlite:" + path);
    ASSERT_TRUE(l.ok()) << l.error().message;
    EXPECT_EQ((*l)->stats()->schema_version, 15);
    EXPECT_EQ(count_indexes(path, kQueueIdIndexes + std::string(", 'messages_message_id_queued', "
                                                                "'recipients_block_address'")),
              4);
    EXPECT_EQ(full_dump(**l, ids), before);
    // Still unique: the same queue id and recipient are updated, not added.
    MessageIdentity id;
    id.queue_id = "Q1";
    id.message_id = "<q1@src.test>";
    id.recipients = {"u@dest.test", "x@dest.test"};
    id.time = at(200);
    ASSERT_TRUE((*l)->record_identity(id).ok());
    EXPECT_EQ((*l)->stats()->messages, 2);
    EXPECT_EQ((*l)->stats()->recipients, 4);
    // A queue id has one unfinished row at most (schema 15): Q1 is still
    // queued; Q2 finished, so a new message may take its queue id.
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    EXPECT_NE(
        sqlite3_exec(db, "INSERT INTO messages(queue_id, first_queue_id, updated) VALUES('Q1', 'Q1', 1)",
                     nullptr, nullptr, nullptr),
        SQLITE_OK);
    EXPECT_EQ(
        sqlite3_exec(db, "INSERT INTO messages(queue_id, first_queue_id, updated) VALUES('Q2', 'Q2', 1)",
                     nullptr, nullptr, nullptr),
        SQLITE_OK);
    sqlite3_close(db);
}

// Schema 10 made destinations a rowid table with (kind, name) as a unique
// index: a version 9 file keeps its destinations (state, open episode, times),
// and (kind, name) stays unique and the upsert target of state changes.
TEST(LedgerSqlite, SchemaNineFileMigratesDestinationsToARowidTableKeepingThem) {
    const std::string path = db_path("schema9");
    const std::vector<IngestItem> items = {client("Q1", 100),
                                           queue_active("Q1", 101, "a@src.test"),
                                           deferred("Q1", 102, "u@dest.test"),
                                           deferred("Q1", 103, "v@other.test"),
                                           client("Q2", 104),
                                           sent("Q2", 105, "w@third.test"),
                                           removed("Q2", 106)};
    const std::vector<std::string> ids = {"Q1", "Q2"};
    auto states = [](Ledger& l) {
        std::string out;
        auto ds = l.list_destinations(DestinationFilter{});
        if (ds.ok())
            for (const auto& d : *ds)
                out += std::string(to_string(d.kind)) + ":" + d.name + "=" + d.state + "@" +
                       (d.state_changed ? std::to_string(to_micros(*d.state_changed)) : "-") + "\n";
        return out;
    };
    std::string before;
    std::string before_states;
    {
        auto l = open_ledger("sqlite:" + path);
        ASSERT_TRUE(l.ok());
        ASSERT_TRUE((*l)->ingest(items, std::nullopt).ok());
        ASSERT_TRUE((*l)->set_destination_state(DestinationKind::domain, "dest.test", "watch", at(110)).ok());
        before = full_dump(**l, ids);
        before_states = states(**l);
    }
    ASSERT_NE(before_states.find("domain:dest.test=watch@"), std::string::npos) << before_states;
    // As version 9 left the file: destinations keyed by (kind, name), WITHOUT ROWID.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const char* v9 = R"sql(BEGIN;
CREATE TABLE d9(kind TEXT NOT NULL, name TEXT NOT NULL, state TEXT NOT NULL DEFAULT '', state_changed INTEGER,
  last_success INTEGER, last_deferral INTEGER, ep_first INTEGER, ep_last INTEGER,
  ep_attempts INTEGER NOT NULL DEFAULT 0, ep_messages INTEGER NOT NULL DEFAULT 0,
  ep_categories INTEGER NOT NULL DEFAULT 0, ep_last_reply TEXT NOT NULL DEFAULT '',
  ep_last_relay TEXT NOT NULL DEFAULT '', updated INTEGER NOT NULL DEFAULT 0, PRIMARY KEY(kind, name)) WITHOUT ROWID;
INSERT INTO d9 SELECT kind, name, state, state_changed, last_success, last_deferral, ep_first, ep_last,
  ep_attempts, ep_messages, ep_categories, ep_last_reply, ep_last_relay, updated FROM destinations;
DROP TABLE destinations; ALTER TABLE d9 RENAME TO destinations;
CREATE INDEX destinations_state ON destinations(state);
DROP INDEX recipients_block_address;
DROP INDEX messages_queue_id_live;
DROP INDEX messages_block_queue_id;
CREATE UNIQUE INDEX messages_queue_id ON messages(queue_id);
DROP INDEX messages_block_message_id;
DROP INDEX messages_message_id_queued;
CREATE INDEX recipients_address ON recipients(address);
CREATE INDEX messages_message_id ON messages(message_id) WHERE message_id IS NOT NULL;
DROP INDEX recipients_message_address;
ALTER TABLE recipients DROP COLUMN message;
CREATE UNIQUE INDEX recipients_queue_address ON recipients(queue_id, address);
DELETE FROM schema_version WHERE version > 9;
COMMIT;)sql";
    ASSERT_EQ(sqlite3_exec(db, v9, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
    ASSERT_EQ(count_indexes(path, "'destinations_key'"), 0);

    auto l = open_ledger("sqlite:" + path);
    ASSERT_TRUE(l.ok()) << l.error().message;
    EXPECT_EQ((*l)->stats()->schema_version, 15);
    EXPECT_EQ(count_indexes(path, "'destinations_key', 'destinations_state'"), 2);
    EXPECT_EQ(full_dump(**l, ids), before);
    EXPECT_EQ(states(**l), before_states);
    // Still one row per (kind, name): a state change updates it, a later
    // delivery to it too.
    const auto count = (*l)->stats()->destinations;
    ASSERT_TRUE((*l)->set_destination_state(DestinationKind::domain, "dest.test", "escalate", at(120)).ok());
    const std::vector<IngestItem> later = {sent("Q1", 130, "u@dest.test")};
    ASSERT_TRUE((*l)->ingest(later, std::nullopt).ok());
    EXPECT_EQ((*l)->stats()->destinations, count);
    auto d = (*l)->get_destination(DestinationKind::domain, "dest.test");
    ASSERT_TRUE(d.ok() && d->has_value());
    EXPECT_EQ((*d)->state, "escalate");
    EXPECT_EQ((*d)->last_success, at(130));
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    EXPECT_NE(sqlite3_exec(db, "INSERT INTO destinations(kind, name) VALUES('domain', 'dest.test')", nullptr,
                           nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
}

// Schema 12 keys recipients by their message's row id: a version 11 file
// keeps its rows, each recipient gets its message's id (one without a
// message row minus its own id), and (message, address) is unique and the
// target of the milter's upsert and of later deliveries.
TEST(LedgerSqlite, SchemaElevenFileMigratesRecipientsToMessageKeys) {
    const std::string path = db_path("schema11");
    const std::vector<std::string> ids = {"Q1", "Q2"};
    const std::string before = two_message_ledger(path);
    ASSERT_FALSE(before.empty());
    // As version 11 left the file: no message column, (queue_id, address) unique;
    // and a recipient row whose message row is gone.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const char* v11 = R"sql(BEGIN;
DROP INDEX messages_queue_id_live;
DROP INDEX messages_block_queue_id;
CREATE UNIQUE INDEX messages_queue_id ON messages(queue_id);
DROP INDEX recipients_block_address;
DROP INDEX messages_block_message_id;
DROP INDEX messages_message_id_queued;
CREATE INDEX recipients_address ON recipients(address);
CREATE INDEX messages_message_id ON messages(message_id) WHERE message_id IS NOT NULL;
DROP INDEX recipients_message_address;
ALTER TABLE recipients DROP COLUMN message;
CREATE UNIQUE INDEX recipients_queue_address ON recipients(queue_id, address);
INSERT INTO recipients(queue_id, address, domain) VALUES('Q9', 'u@dest.test', 'dest.test');
INSERT INTO recipients(queue_id, address, domain) VALUES('Q8', 'u@dest.test', 'dest.test');
DELETE FROM schema_version WHERE version > 11;
COMMIT;)sql";
    ASSERT_EQ(sqlite3_exec(db, v11, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
    ASSERT_EQ(count_indexes(path, "'recipients_message_address'"), 0);

    auto l = open_ledger("sqlite:" + path);
    ASSERT_TRUE(l.ok()) << l.error().message;
    EXPECT_EQ((*l)->stats()->schema_version, 15);
    EXPECT_EQ(count_indexes(path, "'recipients_message_address', 'recipients_queue_address'"), 1);
    EXPECT_EQ(count_indexes(path, "'recipients_message_address'"), 1);
    EXPECT_EQ(full_dump(**l, ids), before);
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    auto scalar = [&](const char* sql) {
        sqlite3_stmt* st = nullptr;
        EXPECT_EQ(sqlite3_prepare_v2(db, sql, -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
        const std::int64_t v = st && sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -999;
        sqlite3_finalize(st);
        return v;
    };
    EXPECT_EQ(scalar("SELECT COUNT(*) FROM recipients r JOIN messages m ON m.id = r.message "
                     "WHERE m.queue_id = r.queue_id"),
              3);
    EXPECT_EQ(scalar("SELECT COUNT(*) FROM recipients WHERE queue_id IN ('Q8', 'Q9') AND message = -id"), 2);
    sqlite3_close(db);
    // Still one row per message and address: the milter's identity and a
    // later delivery update the rows; a new address is added once.
    MessageIdentity id;
    id.queue_id = "Q1";
    id.message_id = "<q1@src.test>";
    id.recipients = {"u@dest.test", "x@dest.test"};
    id.time = at(200);
    ASSERT_TRUE((*l)->record_identity(id).ok());
    ASSERT_TRUE((*l)->record_identity(id).ok());
    const std::vector<IngestItem> later = {sent("Q1", 210, "u@dest.test"), sent("Q1", 211, "x@dest.test")};
    ASSERT_TRUE((*l)->ingest(later, std::nullopt).ok());
    EXPECT_EQ((*l)->stats()->recipients, 6);  // 3 + x@dest.test + the two without a message
    auto rs = (*l)->get_recipients("Q1");
    ASSERT_TRUE(rs.ok());
    ASSERT_EQ(rs->size(), 3u);
    EXPECT_EQ((*rs)[0].address, "u@dest.test");
    EXPECT_EQ((*rs)[0].state, RecipientState::sent);
    EXPECT_EQ((*rs)[0].attempts, 2);
    EXPECT_EQ((*rs)[2].address, "x@dest.test");
    EXPECT_EQ((*rs)[2].state, RecipientState::sent);
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    EXPECT_NE(sqlite3_exec(db,
                           "INSERT INTO recipients(message, queue_id, address, domain) SELECT id, 'Q1', "
                           "'u@dest.test', 'dest.test' FROM messages WHERE queue_id = 'Q1'",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
}

// The details of EXPLAIN QUERY PLAN for `sql` on the file at `path`, one line each.
std::string query_plan(const std::string& path, const char* sql) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, (std::string("EXPLAIN QUERY PLAN ") + sql).c_str(), -1, &st, nullptr),
              SQLITE_OK)
        << sqlite3_errmsg(db);
    std::string out;
    while (st && sqlite3_step(st) == SQLITE_ROW)
        out += std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 3))) + "\n";
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
}

// Messages 0..n-1 (queue ids qid_for(i)), each with a Message-ID and one
// recipient, delivered and removed; those in `same` share the Message-ID
// <same@src.test> and the address same@dest.test.
std::vector<IngestItem> history_stream(int n, const std::set<int>& same) {
    std::vector<IngestItem> items;
    for (int i = 0; i < n; ++i) {
        const std::string q = qid_for(i);
        const std::int64_t t = 1000 + i;
        const bool s = same.count(i) > 0;
        items.push_back(client(q, t));
        items.push_back(message_id(q, t, s ? "<same@src.test>" : "<m" + std::to_string(i) + "@src.test>"));
        items.push_back(queue_active(q, t, "a@src.test"));
        items.push_back(sent(q, t, s ? "same@dest.test" : "r" + std::to_string(i) + "@dest.test"));
        items.push_back(removed(q, t));
    }
    return items;
}

// Schema 13: the lookups by address and by Message-ID over the whole history
// ask each block of 4,096 message row ids in turn (recipients_block_address,
// messages_block_message_id), and the milter's lookup reads only the queued
// messages. Rows in the first, a middle and the last block are all found, in
// order, and SQLite uses the index each lookup is built on.
TEST(LedgerSqlite, HistoryLookupsAskEveryBlockThroughTheirIndexes) {
    const std::string path = db_path("history-blocks");
    const std::set<int> same = {0, 4500, 8999};  // row ids 1, 4501, 9000: blocks 0, 1 and 2
    auto l = open_ledger("sqlite:" + path);
    ASSERT_TRUE(l.ok());
    ASSERT_TRUE((*l)->ingest(history_stream(9000, same), std::nullopt).ok());

    auto byid = (*l)->find_messages_by_message_id("<same@src.test>");
    ASSERT_TRUE(byid.ok());
    ASSERT_EQ(byid->size(), 3u);
    EXPECT_EQ((*byid)[0].queue_id, qid_for(0));
    EXPECT_EQ((*byid)[1].queue_id, qid_for(4500));
    EXPECT_EQ((*byid)[2].queue_id, qid_for(8999));
    auto one = (*l)->find_messages_by_message_id("<m8998@src.test>");
    ASSERT_TRUE(one.ok());
    ASSERT_EQ(one->size(), 1u);
    EXPECT_EQ((*one)[0].queue_id, qid_for(8998));

    auto byaddr = (*l)->find_recipients_by_address("same@dest.test", 10);
    ASSERT_TRUE(byaddr.ok());
    ASSERT_EQ(byaddr->size(), 3u);
    EXPECT_EQ((*byaddr)[0].queue_id, qid_for(8999)) << "the newest attempt first";
    EXPECT_EQ((*byaddr)[2].queue_id, qid_for(0));
    auto two = (*l)->find_recipients_by_address("same@dest.test", 2);
    ASSERT_TRUE(two.ok());
    ASSERT_EQ(two->size(), 2u);
    EXPECT_EQ((*two)[1].queue_id, qid_for(4500));
    auto none = (*l)->find_recipients_by_address("nobody@dest.test", 10);
    ASSERT_TRUE(none.ok());
    EXPECT_TRUE(none->empty());

    const std::string by_address = query_plan(path, ledger_detail::kRecipientsByAddressSql);
    EXPECT_NE(by_address.find("USING INDEX recipients_block_address"), std::string::npos) << by_address;
    EXPECT_EQ(by_address.find("SCAN recipients"), std::string::npos) << by_address;
    const std::string by_message_id = query_plan(path, ledger_detail::kMessagesByMessageIdSql);
    EXPECT_NE(by_message_id.find("USING INDEX messages_block_message_id"), std::string::npos)
        << by_message_id;
    EXPECT_EQ(by_message_id.find("SCAN m\n"), std::string::npos) << by_message_id;
    const std::string pending = query_plan(path, ledger_detail::kPendingCopiesSql);
    EXPECT_NE(pending.find("USING INDEX messages_message_id_queued"), std::string::npos) << pending;
    EXPECT_NE(pending.find("USING INDEX messages_fingerprint_queued"), std::string::npos) << pending;
    EXPECT_EQ(pending.find("SCAN"), std::string::npos) << pending;
}

// Schema 15: a queue id is found in the small index of unfinished rows
// (messages_queue_id_live), else in the block index of all rows
// (messages_block_queue_id), newest first. A finished message's queue id
// logged again (an expired message's bounce notice and removal, after its
// expiry was written) still finds that message, in the connection that wrote
// it and in a new one; the milter's identity of a new message under a
// finished queue id makes a row of its own, which the readers then return.
TEST(LedgerSqlite, QueueIdsAreFoundAmongQueuedMessagesThenInHistory) {
    const std::string path = db_path("queue-id-live");
    const std::string early = qid_for(10), middle = qid_for(4500), last = qid_for(8999);
    {
        auto l = open_ledger("sqlite:" + path);
        ASSERT_TRUE(l.ok());
        auto items = history_stream(9000, {});
        // `early` (block 0) is still queued: its removal is not logged.
        std::erase_if(items, [&](const IngestItem& i) {
            return i.event.queue_id == early && i.event.kind == EventKind::queue_removed;
        });
        ASSERT_TRUE((*l)->ingest(items, std::nullopt).ok());
        EXPECT_EQ((*l)->stats()->pending_messages, 1);
        // The same connection: a line of the finished `middle` after its removal.
        const std::vector<IngestItem> late = {deferred(middle, 20000, "late@dest.test")};
        ASSERT_TRUE((*l)->ingest(late, std::nullopt).ok());
        EXPECT_EQ((*l)->stats()->messages, 9000);
    }
    auto l = open_ledger("sqlite:" + path);
    ASSERT_TRUE(l.ok());
    // A new connection: a line of the finished `last`, and one of the queued `early`.
    const std::vector<IngestItem> later = {deferred(last, 20001, "late@dest.test"),
                                           sent(early, 20002, "r10@dest.test")};
    ASSERT_TRUE((*l)->ingest(later, std::nullopt).ok());
    EXPECT_EQ((*l)->stats()->messages, 9000) << "no row of its own for a finished queue id logged again";
    for (const std::string& q : {middle, last}) {
        auto r = (*l)->get_recipients(q);
        ASSERT_TRUE(r.ok());
        ASSERT_EQ(r->size(), 2u) << q;
        EXPECT_EQ((*r)[0].address, "late@dest.test") << q;
    }
    // A new message under the finished `middle`'s queue id (Postfix reuses
    // queue ids long after): the milter's identity makes its row.
    MessageIdentity id;
    id.queue_id = middle;
    id.message_id = "<reused@src.test>";
    id.recipients = {"new@dest.test"};
    id.time = at(30000);
    ASSERT_TRUE((*l)->record_identity(id).ok());
    EXPECT_EQ((*l)->stats()->messages, 9001);
    auto m = (*l)->get_message(middle);
    ASSERT_TRUE(m.ok() && m->has_value());
    EXPECT_EQ((*m)->message_id, "reused@src.test");
    EXPECT_FALSE((*m)->finished.has_value());
    auto r = (*l)->get_recipients(middle);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ((*r)[0].address, "new@dest.test");
    auto old = (*l)->find_messages_by_message_id("<m4500@src.test>");
    ASSERT_TRUE(old.ok());
    ASSERT_EQ(old->size(), 1u);
    EXPECT_TRUE((*old)[0].finished.has_value()) << "the finished message keeps its row";
    auto none = (*l)->get_message("NOSUCHQ");
    ASSERT_TRUE(none.ok());
    EXPECT_FALSE(none->has_value());

    const std::string by_queue_id = query_plan(path, ledger_detail::kMessageByQueueIdSql);
    EXPECT_NE(by_queue_id.find("USING INDEX messages_queue_id_live"), std::string::npos) << by_queue_id;
    EXPECT_NE(by_queue_id.find("USING INDEX messages_block_queue_id"), std::string::npos) << by_queue_id;
    EXPECT_EQ(by_queue_id.find("SCAN messages"), std::string::npos) << by_queue_id;
    const std::string recipients = query_plan(path, ledger_detail::kRecipientsByQueueIdSql);
    EXPECT_NE(recipients.find("USING INDEX messages_queue_id_live"), std::string::npos) << recipients;
    EXPECT_EQ(recipients.find("SCAN messages"), std::string::npos) << recipients;
    EXPECT_EQ(count_indexes(path, "'messages_queue_id'"), 0);
}

// The reports' reads (sqlite_listings.hpp) read what they need: the counts by
// state the state index alone, a state's rows through that index, the open
// episodes and the deliveries one pass over the table rather than a seek per
// row through the key index, and a period's episodes in the order of their
// destination index with nothing to sort. On a relay's month each of the
// others costs seconds (docs/performance.md, "Reports on a large ledger").
TEST(LedgerSqlite, ReportReadsUseTheirIndexes) {
    const std::string path = db_path("report-plans");
    {
        auto l = open_ledger("sqlite:" + path);
        ASSERT_TRUE(l.ok());
        ASSERT_TRUE((*l)->ingest(synthetic_stream(200), std::nullopt).ok());
    }
    using namespace ledger_detail;
    const std::string by_state = query_plan(path, kCountDestinationsByStateSql);
    EXPECT_NE(by_state.find("COVERING INDEX destinations_state"), std::string::npos) << by_state;
    const std::string in_state = query_plan(path, kListDestinationsInStateSql);
    EXPECT_NE(in_state.find("USING INDEX destinations_state"), std::string::npos) << in_state;
    for (const char* sql : {kListOpenDestinationsSql, kCountDestinationsDeliveredSql}) {
        const std::string plan = query_plan(path, sql);
        EXPECT_NE(plan.find("SCAN destinations\n"), std::string::npos) << sql << "\n" << plan;
        EXPECT_EQ(plan.find("destinations_key"), std::string::npos) << sql << "\n" << plan;
    }
    const std::string all = query_plan(path, kListDestinationsSql);
    EXPECT_NE(all.find("destinations_key"), std::string::npos) << "every row in order, none sorted: " << all;
    EXPECT_EQ(all.find("TEMP B-TREE"), std::string::npos) << all;
    const std::string episodes = query_plan(path, kEpisodesBetweenSql);
    EXPECT_NE(episodes.find("USING INDEX episodes_destination"), std::string::npos) << episodes;
    EXPECT_EQ(episodes.find("TEMP B-TREE"), std::string::npos) << episodes;
    const std::string count = query_plan(path, kCountEpisodesBetweenSql);
    EXPECT_NE(count.find("COVERING INDEX episodes_destination"), std::string::npos) << count;
}

// A version 12 file, with its Message-ID and address indexes over the whole
// history, gets the queued and block indexes instead, and keeps its answers.
TEST(LedgerSqlite, SchemaTwelveFileMovesTheHistoryLookupsToBlockIndexes) {
    const std::string path = db_path("schema12");
    {
        auto l = open_ledger("sqlite:" + path);
        ASSERT_TRUE(l.ok());
        ASSERT_TRUE((*l)->ingest(history_stream(1200, {3, 1150}), std::nullopt).ok());
    }
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const char* v12 = R"sql(BEGIN;
DROP INDEX messages_message_id_queued;
DROP INDEX messages_block_message_id;
DROP INDEX recipients_block_address;
CREATE INDEX messages_message_id ON messages(message_id) WHERE message_id IS NOT NULL;
CREATE INDEX recipients_address ON recipients(address);
DROP INDEX messages_queue_id_live;
DROP INDEX messages_block_queue_id;
CREATE UNIQUE INDEX messages_queue_id ON messages(queue_id);
DELETE FROM schema_version WHERE version > 12;
COMMIT;)sql";
    ASSERT_EQ(sqlite3_exec(db, v12, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);

    auto l = open_ledger("sqlite:" + path);
    ASSERT_TRUE(l.ok()) << l.error().message;
    EXPECT_EQ((*l)->stats()->schema_version, 15);
    EXPECT_EQ(count_indexes(path, "'messages_message_id', 'recipients_address', 'messages_queue_id'"), 0);
    EXPECT_EQ(count_indexes(path, "'messages_queue_id_live', 'messages_block_queue_id'"), 2) << "schema 15";
    auto m = (*l)->get_message(qid_for(1150));
    ASSERT_TRUE(m.ok() && m->has_value());
    EXPECT_EQ((*m)->message_id, "same@src.test");
    EXPECT_EQ(count_indexes(path,
                            "'messages_message_id_queued', 'messages_block_message_id', "
                            "'recipients_block_address'"),
              3);
    auto byid = (*l)->find_messages_by_message_id("<same@src.test>");
    ASSERT_TRUE(byid.ok());
    ASSERT_EQ(byid->size(), 2u);
    EXPECT_EQ((*byid)[1].queue_id, qid_for(1150));
    auto byaddr = (*l)->find_recipients_by_address("same@dest.test", 10);
    ASSERT_TRUE(byaddr.ok());
    ASSERT_EQ(byaddr->size(), 2u);
    EXPECT_EQ((*byaddr)[0].queue_id, qid_for(1150));
}

// Schema 14: a state is looked up without reading the large one beside it.
// WITHOUT ROWID, SQLite read a whole record to compare a key against it, so
// looking for `actions` read every page of `engine` (16.5 MB on a month of a
// busy relay), for every `explain` of a ledger that has no actions state.
TEST(LedgerSqlite, AStateIsLookedUpWithoutReadingTheLargeOneBesideIt) {
    const std::string path = db_path("state-rowid");
    const std::string large(2 << 20, 'e');  // 2 MiB: some 500 overflow pages
    {
        auto l = open_ledger("sqlite:" + path);
        ASSERT_TRUE(l.ok());
        ASSERT_TRUE((*l)->put_state("engine", large).ok());
        auto none = (*l)->get_state("actions");
        ASSERT_TRUE(none.ok());
        EXPECT_FALSE(none->has_value());
        auto big = (*l)->get_state("engine");
        ASSERT_TRUE(big.ok() && big->has_value());
        EXPECT_EQ((*big)->size(), large.size());
    }
    // Pages a fresh connection reads to look up a key that is not there, then
    // one added after it.
    auto pages_to_find = [&](const char* key) {
        sqlite3* db = nullptr;
        EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
        sqlite3_stmt* st = nullptr;
        EXPECT_EQ(
            sqlite3_prepare_v2(db, "SELECT length(value) FROM engine_state WHERE key = ?", -1, &st, nullptr),
            SQLITE_OK);
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        int before = 0, after = 0, high = 0;
        sqlite3_db_status(db, SQLITE_DBSTATUS_CACHE_MISS, &before, &high, 0);
        while (sqlite3_step(st) == SQLITE_ROW) {
        }
        sqlite3_finalize(st);
        sqlite3_db_status(db, SQLITE_DBSTATUS_CACHE_MISS, &after, &high, 0);
        sqlite3_close(db);
        return after - before;
    };
    EXPECT_LT(pages_to_find("actions"), 20) << "pages read to miss a state beside a 2 MiB one";
    EXPECT_LT(pages_to_find("zzz"), 20);
    {
        auto l = open_ledger("sqlite:" + path);
        ASSERT_TRUE(l.ok());
        ASSERT_TRUE((*l)->put_state("zzz", "small").ok());
        auto small = (*l)->get_state("zzz");
        ASSERT_TRUE(small.ok() && small->has_value());
        EXPECT_EQ(**small, "small");
    }
    EXPECT_LT(pages_to_find("zzz"), 20);
}

// An import killed while bulk mode had dropped the indexes: the next opening builds them.
TEST(LedgerSqlite, IndexesDroppedByAnInterruptedBulkImportAreBuiltAtOpening) {
    const std::string path = db_path("bulk-killed");
    {
        auto l = open_ledger("sqlite:" + path);
        ASSERT_TRUE(l.ok());
    }
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "DROP INDEX recipients_block_address; DROP INDEX messages_message_id_queued",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
    auto l = open_ledger("sqlite:" + path);
    ASSERT_TRUE(l.ok()) << l.error().message;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db,
                                 "SELECT COUNT(*) FROM sqlite_schema WHERE type = 'index' AND name IN "
                                 "('messages_message_id_queued', 'recipients_block_address')",
                                 -1, &st, nullptr),
              SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int(st, 0), 2);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

// A milter opens the ledger with a short busy timeout for its lookups, but
// opening needs the write lock once (schema check): started while the policy
// daemon writes a batch, it waits for it instead of exiting "database is locked".
TEST(LedgerSqlite, OpeningWaitsForAWriterBeyondTheShortBusyTimeout) {
    auto path = db_path("open-busy");
    {
        LedgerOptions first;
        first.spec = "sqlite:" + path;
        ASSERT_TRUE(open_ledger(first).ok());  // the schema exists, as when the policy daemon runs
    }
    sqlite3* other = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &other), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
    std::thread writer([other] {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr);
    });
    LedgerOptions options;
    options.spec = "sqlite:" + path;
    options.busy_timeout = std::chrono::milliseconds(20);
    auto l = open_ledger(options);
    writer.join();
    sqlite3_close(other);
    ASSERT_TRUE(l.ok()) << l.error().message;
    EXPECT_TRUE((*l)->ingest(std::vector<IngestItem>{deferred("Q1", 1, "a@b.test")}, std::nullopt).ok());
}

TEST(LedgerSqlite, AWriteLockHeldTooLongIsUnavailableNotAHang) {
    auto path = db_path("busy");
    LedgerOptions options;
    options.spec = "sqlite:" + path;
    options.busy_timeout = std::chrono::milliseconds(50);
    std::vector<std::string> warnings;
    options.warn = [&](std::string_view w) { warnings.emplace_back(w); };
    auto l = open_ledger(options);
    ASSERT_TRUE(l.ok());
    sqlite3* other = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &other), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
    auto start = std::chrono::steady_clock::now();
    auto r = (*l)->ingest(std::vector<IngestItem>{deferred("Q1", 1, "a@b.test")}, std::nullopt);
    auto took = std::chrono::steady_clock::now() - start;
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().kind, ErrorKind::unavailable);
    EXPECT_LT(took, std::chrono::seconds(2));
    EXPECT_EQ((*l)->counters().unavailable, 1u);
    EXPECT_EQ(warnings.size(), 1u);
    // Readers are not blocked by a writer (WAL).
    auto m = (*l)->get_message("Q1");
    EXPECT_TRUE(m.ok());
    sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close(other);
    r = (*l)->ingest(std::vector<IngestItem>{deferred("Q1", 1, "a@b.test")}, std::nullopt);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->applied, 1u) << "the failed batch left nothing behind";
}

// The milter's lookup must not queue behind a write of the same process (an
// ingest batch or a batch of recorded identities): lookups run on read-only
// connections of their own. Here a write is stuck waiting for another
// process's lock while holding the ledger's write path; the lookup still
// answers, from the committed data, before that write ends.
TEST(LedgerSqlite, PendingLookupsDoNotWaitForTheLedgersOwnWriter) {
    auto path = db_path("readers");
    LedgerOptions options;
    options.spec = "sqlite:" + path;
    options.busy_timeout = std::chrono::milliseconds(20000);
    auto l = open_ledger(options);
    ASSERT_TRUE(l.ok());
    MessageIdentity id;
    id.queue_id = "A1";
    id.message_id = "<m1@client.test>";
    id.recipients = {"r@dest.test"};
    id.time = at(100);
    ASSERT_TRUE((*l)->record_identity(id).ok());
    ASSERT_TRUE((*l)->ingest(std::vector<IngestItem>{deferred("A1", 102, "r@dest.test")}, std::nullopt).ok());

    sqlite3* other = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &other), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
    std::atomic<bool> writer_started{false}, writer_done{false};
    Status writer_status;
    std::thread writer([&] {
        MessageIdentity next = id;
        next.queue_id = "B2";
        next.message_id = "<m2@client.test>";
        writer_started = true;
        writer_status = (*l)->record_identity(next);  // waits for `other`
        writer_done = true;
    });
    while (!writer_started) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the writer is in its busy wait

    PendingCopyQuery q;
    q.message_id = "<m1@client.test>";
    q.recipients = {"r@dest.test"};
    auto r = (*l)->find_pending_copies(q);
    bool answered_during_write = !writer_done;
    sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close(other);
    writer.join();
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ((*r)[0].queue_id, "A1");
    EXPECT_TRUE(answered_during_write) << "the lookup waited for the write to end";
    EXPECT_TRUE(writer_status.ok()) << writer_status.error().message;
    EXPECT_EQ((*l)->counters().shared_reads, 0u);
}

// Many lookups on several threads while another thread writes: every lookup
// answers correctly, and writes made before a lookup are visible to it.
TEST(LedgerSqlite, ConcurrentLookupsSeeCommittedWrites) {
    auto l = open_ledger("sqlite:" + db_path("concurrent"));
    ASSERT_TRUE(l.ok());
    std::atomic<int> recorded{0};
    std::atomic<bool> failed{false}, writer_done{false};
    std::thread writer([&] {
        for (int i = 0; i < 200; ++i) {
            MessageIdentity id;
            id.queue_id = "Q" + std::to_string(i);
            id.message_id = "<m" + std::to_string(i) + "@client.test>";
            id.recipients = {"r@dest.test"};
            id.time = at(100 + i);
            if (!(*l)->record_identity(id).ok()) failed = true;
            recorded = i + 1;
        }
        writer_done = true;
    });
    std::vector<std::thread> readers;
    std::atomic<int> lookups{0};
    for (int t = 0; t < 4; ++t)
        readers.emplace_back([&, t] {
            // while the writer writes, then some more
            for (int k = 0, after = 0; after < 50; ++k) {
                if (writer_done) ++after;
                int n = recorded;
                if (n == 0) {
                    std::this_thread::yield();
                    continue;
                }
                int i = (k * 7 + t) % n;  // recorded before this lookup began
                PendingCopyQuery q;
                q.message_id = "<m" + std::to_string(i) + "@client.test>";
                q.recipients = {"r@dest.test", "other@dest.test"};
                auto r = (*l)->find_pending_copies(q);
                if (!r.ok() || r->size() != 1 || (*r)[0].queue_id != "Q" + std::to_string(i)) failed = true;
                ++lookups;
            }
        });
    writer.join();
    for (auto& r : readers) r.join();
    EXPECT_FALSE(failed);
    EXPECT_GT(lookups.load(), 0);
    EXPECT_EQ((*l)->counters().shared_reads, 0u);
}

// A lookup with a deadline stops there (the milter's milter.deadline): a
// query that would read many rows is interrupted, and one whose deadline has
// passed before it starts is not run. Both are ErrorKind::timeout.
TEST(LedgerSqlite, LookupsStopAtTheirDeadline) {
    auto l = open_ledger("sqlite:" + db_path("deadline"));
    ASSERT_TRUE(l.ok());
    std::vector<MessageIdentity> ids;
    for (int i = 0; i < 30000; ++i) {  // one Message-ID, many pending copies: a long scan
        MessageIdentity id;
        id.queue_id = "Q" + std::to_string(i);
        id.message_id = "<same@client.test>";
        id.recipients = {"r@dest.test"};
        id.time = at(100 + i);
        ids.push_back(std::move(id));
    }
    ASSERT_TRUE((*l)->record_identities(ids).ok());
    PendingCopyQuery q;
    q.message_id = "<same@client.test>";
    q.recipients = {"r@dest.test"};
    auto start = std::chrono::steady_clock::now();
    auto full = (*l)->find_pending_copies(q);
    auto took = std::chrono::steady_clock::now() - start;
    ASSERT_TRUE(full.ok()) << full.error().message;
    ASSERT_EQ(full->size(), 1u);

    q.deadline = std::chrono::steady_clock::now() + took / 20;  // far less than the scan needs
    auto cut = (*l)->find_pending_copies(q);
    ASSERT_FALSE(cut.ok());
    EXPECT_EQ(cut.error().kind, ErrorKind::timeout) << cut.error().message;

    q.deadline = std::chrono::steady_clock::now() - std::chrono::milliseconds(1);
    auto late = (*l)->find_pending_copies(q);
    ASSERT_FALSE(late.ok());
    EXPECT_EQ(late.error().kind, ErrorKind::timeout);

    q.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);  // ample: answers
    auto ok = (*l)->find_pending_copies(q);
    ASSERT_TRUE(ok.ok()) << ok.error().message;
    EXPECT_EQ(ok->size(), 1u);
}

// An in-memory database has no second connection: lookups share the main one.
// Counts of a raw connection to the ledger file (the oracle of the prune tests).
std::int64_t count_rows(const std::string& path, const std::string& sql) {
    sqlite3* db = nullptr;
    std::int64_t n = -1;
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
        sqlite3_stmt* s = nullptr;
        if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK &&
            sqlite3_step(s) == SQLITE_ROW)
            n = sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
    }
    sqlite3_close(db);
    return n;
}

// What one transaction over the whole retention selects (the selection prune
// made before it ran in passes), against the ledger file: the rows to go and
// the rows to stay, per table.
struct PruneCounts {
    std::int64_t messages, recipients, episodes, destinations;
    std::int64_t kept_messages, kept_recipients, kept_episodes, kept_destinations;
};

PruneCounts prune_counts(const std::string& path, std::int64_t finished_cut, std::int64_t stale_cut,
                         std::int64_t ep_cut) {
    const std::string doomed = "(SELECT queue_id FROM messages WHERE finished < " +
                               std::to_string(finished_cut) + " OR updated < " + std::to_string(stale_cut) +
                               ")";
    const std::string old_destination = "ep_first IS NULL AND updated < " + std::to_string(ep_cut) +
                                        " AND (state = '' OR state = 'recovered')";
    const std::string ended = "ended < " + std::to_string(ep_cut);
    PruneCounts c{};
    c.messages = count_rows(path, "SELECT COUNT(*) FROM messages WHERE queue_id IN " + doomed);
    c.recipients = count_rows(path, "SELECT COUNT(*) FROM recipients WHERE queue_id IN " + doomed);
    c.episodes = count_rows(path, "SELECT COUNT(*) FROM episodes WHERE " + ended);
    c.destinations = count_rows(path, "SELECT COUNT(*) FROM destinations WHERE " + old_destination);
    c.kept_messages = count_rows(path, "SELECT COUNT(*) FROM messages WHERE queue_id NOT IN " + doomed);
    c.kept_recipients = count_rows(path, "SELECT COUNT(*) FROM recipients WHERE queue_id NOT IN " + doomed);
    c.kept_episodes = count_rows(path, "SELECT COUNT(*) FROM episodes WHERE NOT (" + ended + ")");
    c.kept_destinations =
        count_rows(path, "SELECT COUNT(*) FROM destinations WHERE NOT (" + old_destination + ")");
    return c;
}

// synthetic_stream's message i is seen at t0 + 2i; prune's passes take 5,000
// messages each, so that 10,000 messages (3 in 4 finished) need several.
constexpr int kPruneStream = 10000;
constexpr std::int64_t kT0 = 1795000000;

// Prune in passes removes what one transaction over the same retention would
// have removed, totals included, and nothing else: the cuts fall inside the
// stream, so that each table keeps rows too.
TEST(LedgerSqlite, PruneInPassesRemovesWhatOneTransactionWouldAndNothingElse) {
    auto path = db_path("prune-passes");
    auto l = open_ledger("sqlite:" + path);
    ASSERT_TRUE(l.ok()) << l.error().message;
    const auto stream = synthetic_stream(kPruneStream, 50, kT0);
    ASSERT_TRUE((*l)->ingest(stream, std::nullopt).ok());
    const std::int64_t hour = 3600, day = 24 * hour;
    const std::int64_t now = kT0 + 100 * day;
    RetentionPolicy p;
    p.finished_messages = std::chrono::seconds(now - (kT0 + 2 * 8000));  // finished up to message ~7100
    p.stale_messages = std::chrono::seconds(now - (kT0 + 2 * 5000));     // queued up to message ~5000
    p.episodes = std::chrono::seconds(now - (kT0 + 2 * 6000));
    p.seen_events = std::chrono::seconds(now - (kT0 + 2 * 7000));
    const std::int64_t finished_cut = (kT0 + 2 * 8000) * 1000000, stale_cut = (kT0 + 2 * 5000) * 1000000,
                       ep_cut = (kT0 + 2 * 6000) * 1000000, seen_cut = kT0 + 2 * 7000;
    const auto want = prune_counts(path, finished_cut, stale_cut, ep_cut);
    ASSERT_GT(want.messages, 5000);  // more than one pass
    ASSERT_GT(want.kept_messages, 0);
    ASSERT_GT(want.episodes, 0);
    ASSERT_GT(want.kept_episodes, 0);
    ASSERT_GT(want.kept_destinations, 0);
    auto before = (*l)->stats();
    ASSERT_TRUE(before.ok());
    ASSERT_EQ(before->seen_events, static_cast<std::int64_t>(stream.size()));
    std::int64_t old_events = 0;
    for (const auto& item : stream) old_events += to_micros(item.event.time) < seen_cut * 1000000 ? 1 : 0;
    ASSERT_GT(old_events, 0);
    ASSERT_LT(old_events, static_cast<std::int64_t>(stream.size()));

    auto r = (*l)->prune(p, at(now));
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->messages, want.messages);
    EXPECT_EQ(r->recipients, want.recipients);
    EXPECT_EQ(r->episodes, want.episodes);
    EXPECT_EQ(r->flags, 0);
    EXPECT_EQ(r->seen_events, old_events);

    const auto after = prune_counts(path, finished_cut, stale_cut, ep_cut);
    EXPECT_EQ(after.messages, 0);
    EXPECT_EQ(after.recipients, 0);
    EXPECT_EQ(after.episodes, 0);
    EXPECT_EQ(after.destinations, 0);
    EXPECT_EQ(after.kept_messages, want.kept_messages);
    EXPECT_EQ(after.kept_recipients, want.kept_recipients);
    EXPECT_EQ(after.kept_episodes, want.kept_episodes);
    EXPECT_EQ(after.kept_destinations, want.kept_destinations);
    EXPECT_EQ(count_rows(path,
                         "SELECT COUNT(*) FROM episode_messages WHERE queue_id NOT IN "
                         "(SELECT queue_id FROM messages)"),
              0);
    auto stats = (*l)->stats();
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->seen_events, static_cast<std::int64_t>(stream.size()) - old_events);
    // The keys kept still count as seen: their events are no news.
    auto again = (*l)->ingest(std::vector<IngestItem>(stream.end() - 9, stream.end()), std::nullopt);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->applied, 0u);
    EXPECT_EQ(again->duplicates, 9u);
    // A second prune finds nothing left.
    r = (*l)->prune(p, at(now));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->messages + r->recipients + r->episodes + r->flags + r->seen_events, 0);
}

// Between two passes prune holds no transaction: another connection (the
// policy daemon's follower while its pruner runs) commits an ingest batch
// there at once, with a busy timeout far too short to wait for a pass.
TEST(LedgerSqlite, AnotherConnectionCommitsBetweenPrunePasses) {
    auto path = db_path("prune-between");
    auto l = open_ledger("sqlite:" + path);
    ASSERT_TRUE(l.ok()) << l.error().message;
    ASSERT_TRUE((*l)->ingest(synthetic_stream(kPruneStream, 50, kT0), std::nullopt).ok());
    LedgerOptions options;
    options.spec = "sqlite:" + path;
    options.busy_timeout = std::chrono::milliseconds(1);
    auto follower = open_ledger(options);
    ASSERT_TRUE(follower.ok()) << follower.error().message;
    const std::int64_t later = kT0 + 40 * 86400;
    int passes = 0, committed = 0;
    std::vector<std::int64_t> left;  // messages of the stream still there at each pass
    ledger_detail::set_prune_pass_hook(**l, [&] {
        ++passes;
        auto qid = "F" + std::to_string(passes);
        auto done = (*follower)->ingest(std::vector<IngestItem>{queue_active(qid, later + passes, "s@x.test"),
                                                                deferred(qid, later + passes, "r@f.test")},
                                        std::nullopt);
        if (done.ok()) ++committed;
        left.push_back(count_rows(path, "SELECT COUNT(*) FROM messages WHERE queue_id NOT LIKE 'F%'"));
    });
    RetentionPolicy p;  // 30 days after the stream: all its finished messages go
    auto r = (*l)->prune(p, at(kT0 + 35 * 86400));
    ledger_detail::set_prune_pass_hook(**l, {});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->messages, kPruneStream * 3 / 4);
    ASSERT_GE(passes, 3);
    EXPECT_EQ(committed, passes);
    // The follower's batches landed while the stream's messages were going, not after.
    ASSERT_FALSE(left.empty());
    EXPECT_LT(left.front(), kPruneStream);
    EXPECT_GT(left.front(), kPruneStream / 4);
    for (int i = 1; i <= passes; ++i) {
        auto m = (*l)->get_message("F" + std::to_string(i));
        ASSERT_TRUE(m.ok());
        EXPECT_TRUE(m->has_value()) << i;
    }
}

TEST(LedgerSqlite, InMemoryLedgerAnswersLookupsOnItsOnlyConnection) {
    auto l = open_ledger("sqlite::memory:");
    ASSERT_TRUE(l.ok()) << l.error().message;
    MessageIdentity id;
    id.queue_id = "A1";
    id.message_id = "<m1@client.test>";
    id.recipients = {"r@dest.test"};
    id.time = at(100);
    ASSERT_TRUE((*l)->record_identity(id).ok());
    PendingCopyQuery q;
    q.message_id = "<m1@client.test>";
    q.recipients = {"r@dest.test"};
    auto r = (*l)->find_pending_copies(q);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->size(), 1u);
    EXPECT_EQ((*l)->counters().shared_reads, 0u);
}

TEST(LedgerSqlite, BadSpecsAreConfigErrors) {
    for (const char* spec :
         {"", "sqlite:", "mysql://x", "redis://h:99999", "redis://h:6379/x", "redis+unix:"}) {
        auto l = open_ledger(spec);
        ASSERT_FALSE(l.ok()) << spec;
        EXPECT_EQ(l.error().kind, ErrorKind::config) << spec;
    }
    auto l = open_ledger("sqlite:/nonexistent-dir/x/y.db");
    ASSERT_FALSE(l.ok());
    EXPECT_EQ(l.error().kind, ErrorKind::io);
}

TEST(LedgerIdentity, NormalisationMatchesWhatThePostfixLogShows) {
    EXPECT_EQ(normalize_message_id(" <Abc.Def@Example.COM> "), "Abc.Def@example.com");
    EXPECT_EQ(normalize_message_id("abc@x"), "abc@x");
    EXPECT_EQ(normalize_address("<User@Example.COM>"), "User@example.com");
    EXPECT_EQ(domain_of("User@Example.COM."), "example.com");
    EXPECT_EQ(domain_of("postmaster"), "");
    EXPECT_EQ(normalize_message_id(std::string(5000, 'x')).size(), kMaxIdentityLength);
}

// A ledger file this user cannot write (root made it): the error names the
// file, its owner and mode, the user, and the fix, not SQLite's bare
// "attempt to write a readonly database".
TEST(LedgerSqlite, AReadOnlyLedgerFileIsNamedWithItsOwnerAndTheFix) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (CI runs the unit tests as root)";
    const passwd* nobody = ::getpwnam("nobody");
    const struct group* nogroup = ::getgrnam("nogroup");
    ASSERT_TRUE(nobody && nogroup);
    const auto dir = temp_root() / "readonly";
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "l.db").string();
    {
        auto l = open_ledger("sqlite:" + path);  // made by root, 0644
        ASSERT_TRUE(l.ok()) << l.error().message;
    }
    ASSERT_EQ(::chmod(temp_root().c_str(), 0755), 0);
    ASSERT_EQ(::chown(dir.c_str(), nobody->pw_uid, nogroup->gr_gid), 0);  // -wal and -shm can be made
    const auto out = dir / "error.txt";
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        if (::setgid(nogroup->gr_gid) != 0 || ::setuid(nobody->pw_uid) != 0) ::_exit(10);
        auto l = open_ledger("sqlite:" + path);
        std::string message;
        if (l.ok()) {
            auto w = (*l)->append_journal(std::vector<std::string>{"x"});
            if (w.ok()) ::_exit(11);
            message = w.error().message;
        } else {
            message = l.error().message;
        }
        std::ofstream(out) << message;
        ::_exit(0);
    }
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    ASSERT_TRUE(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0) << "10: no drop to nobody, 11: nobody wrote root's 0644 file";
    std::ifstream in(out);
    const std::string message((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(message.find("readonly database"), std::string::npos) << message;
    EXPECT_NE(message.find(path + " is root:root mode 0644, which user nobody cannot write"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("chown retryguard:retryguard " + path + "*"), std::string::npos) << message;
}

// ledger.sqlite.gather_wal_writes (LedgerOptions::sqlite_gather_wal_writes):
// on, the ledger's commits go through the gathering VFS; off, SQLite's own.
TEST(LedgerSqlite, WalWritesAreGatheredUnlessTheSettingIsOff) {
    for (bool gather : {true, false}) {
        SCOPED_TRACE(gather ? "gathered" : "default VFS");
        LedgerOptions options;
        options.spec = "sqlite:" + db_path(gather ? "gather-on" : "gather-off");
        options.sqlite_gather_wal_writes = gather;
        auto l = open_ledger(options);
        ASSERT_TRUE(l.ok()) << l.error().message;
        const std::vector<IngestItem> items = {client("G1", 10), queue_active("G1", 11, "s@x.test"),
                                               deferred("G1", 12, "r@d.test")};
        const auto before = ledger_detail::wal_write_counts().requested;
        auto r = (*l)->ingest(items, std::nullopt);
        ASSERT_TRUE(r.ok()) << r.error().message;
        EXPECT_EQ(r->applied, items.size());
        const auto after = ledger_detail::wal_write_counts().requested;
        if (gather)
            EXPECT_GT(after, before);
        else
            EXPECT_EQ(after, before);
    }
}

}  // namespace
}  // namespace retryguard::ledger_test
