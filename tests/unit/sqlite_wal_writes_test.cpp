// The WAL-gathering VFS (core/ledger/sqlite_wal_writes.hpp): a commit's
// frames reach the file, or fail, inside COMMIT; nothing uncommitted is
// visible; a process that ends right after COMMIT, or dies before it, leaves
// the same file the default VFS would.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "../../core/ledger/sqlite_wal_writes.hpp"

namespace retryguard::ledger_detail {
namespace {

class WalGathering : public testing::Test {
  protected:
    void SetUp() override {
        dir_ = std::filesystem::temp_directory_path() /
               ("retryguard-walgather-" + std::to_string(getpid()) + "-" +
                testing::UnitTest::GetInstance()->current_test_info()->name());
        std::filesystem::remove_all(dir_);
        std::filesystem::create_directories(dir_);
        path_ = (dir_ / "t.db").string();
        ASSERT_NE(wal_gathering_vfs(), nullptr);
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }

    // gathered: through the VFS under test; otherwise the default one.
    sqlite3* open(bool gathered) {
        sqlite3* db = nullptr;
        EXPECT_EQ(sqlite3_open_v2(path_.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                                  gathered ? wal_gathering_vfs() : nullptr),
                  SQLITE_OK);
        sqlite3_busy_timeout(db, 5000);
        return db;
    }
    static int exec(sqlite3* db, const std::string& sql) {
        return sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
    }
    static long long count(sqlite3* db) {
        sqlite3_stmt* s = nullptr;
        if (sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &s, nullptr) != SQLITE_OK) return -1;
        long long n = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
        sqlite3_finalize(s);
        return n;
    }
    static std::string integrity(sqlite3* db) {
        sqlite3_stmt* s = nullptr;
        sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &s, nullptr);
        std::string r =
            sqlite3_step(s) == SQLITE_ROW ? reinterpret_cast<const char*>(sqlite3_column_text(s, 0)) : "";
        sqlite3_finalize(s);
        return r;
    }
    // rows rows of about 1 KiB each, numbered from first.
    static int insert(sqlite3* db, int first, int rows) {
        return exec(db, "WITH RECURSIVE n(i) AS (SELECT " + std::to_string(first) +
                            " UNION ALL SELECT i + 1 FROM n WHERE i < " + std::to_string(first + rows - 1) +
                            ") INSERT INTO t SELECT i, randomblob(1000) FROM n");
    }
    sqlite3* make_table() {
        sqlite3* db = open(true);
        EXPECT_EQ(exec(db,
                       "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                       "CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)"),
                  SQLITE_OK);
        return db;
    }

    // The table with rows 1..rows, its connection closed.
    void seed(int rows) {
        sqlite3* w = make_table();
        ASSERT_EQ(insert(w, 1, rows), SQLITE_OK);
        sqlite3_close(w);
    }
    // body in a child process, which ends with _exit(body()): its wait status.
    static int in_child(const std::function<int()>& body) {
        const pid_t child = fork();
        if (child < 0) return -1;
        if (child == 0) _exit(body());
        int status = -1;
        return waitpid(child, &status, 0) == child ? status : -1;
    }

    std::filesystem::path dir_;
    std::string path_;
};

TEST_F(WalGathering, ACommitIsFewWritesAndVisibleToAnotherConnectionWhenCommitReturns) {
    sqlite3* w = make_table();
    sqlite3* r = open(false);
    ASSERT_EQ(count(r), 0);
    const WalWriteCounts before = wal_write_counts();
    ASSERT_EQ(exec(w, "BEGIN IMMEDIATE"), SQLITE_OK);
    ASSERT_EQ(insert(w, 1, 2000), SQLITE_OK);
    EXPECT_EQ(count(r), 0) << "a reader sees nothing of an open transaction";
    ASSERT_EQ(exec(w, "COMMIT"), SQLITE_OK);
    const WalWriteCounts after = wal_write_counts();
    EXPECT_EQ(count(r), 2000);
    EXPECT_EQ(integrity(r), "ok");
    const auto requested = after.requested - before.requested;
    const auto issued = after.issued - before.issued;
    // About 600 frames, two writes each, gathered into pieces of 124 KiB.
    EXPECT_GT(requested, 1000u);
    EXPECT_LT(issued * 10, requested) << requested << " writes asked for, " << issued << " made";
    sqlite3_close(r);
    sqlite3_close(w);
}

TEST_F(WalGathering, ASpilledTransactionReadsItsOwnFramesBackAndCommitsThem) {
    sqlite3* w = make_table();
    ASSERT_EQ(exec(w, "PRAGMA cache_size=20"), SQLITE_OK);  // pages: the transaction spills to the WAL
    sqlite3* r = open(false);
    ASSERT_EQ(exec(w, "BEGIN IMMEDIATE"), SQLITE_OK);
    ASSERT_EQ(insert(w, 1, 3000), SQLITE_OK);
    EXPECT_EQ(count(w), 3000) << "pages spilled to the WAL are read back";
    ASSERT_EQ(exec(w, "UPDATE t SET v = zeroblob(900) WHERE id % 7 = 0"), SQLITE_OK);
    EXPECT_EQ(count(r), 0);
    ASSERT_EQ(exec(w, "COMMIT"), SQLITE_OK);
    EXPECT_EQ(count(r), 3000);
    EXPECT_EQ(integrity(r), "ok");
    sqlite3_close(r);
    sqlite3_close(w);
    sqlite3* again = open(false);
    EXPECT_EQ(count(again), 3000);
    sqlite3_close(again);
}

// A child process commits and ends with _exit (no close, no flush of its
// own): the commit must be in the file already. A second child dies in the
// middle of a transaction with gathered frames: nothing of it may show.
TEST_F(WalGathering, AProcessEndingRightAfterCommitOrDyingBeforeItLeavesOnlyCommits) {
    seed(10);
    int status = in_child([&] {
        sqlite3* c = open(true);
        // As the ledger runs: no sync at commit, which would write the frames anyway.
        const bool ok = exec(c, "PRAGMA synchronous=NORMAL") == SQLITE_OK &&
                        exec(c, "BEGIN IMMEDIATE") == SQLITE_OK && insert(c, 11, 500) == SQLITE_OK &&
                        exec(c, "COMMIT") == SQLITE_OK;
        return ok ? 0 : 3;
    });
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    status = in_child([&] {
        sqlite3* c = open(true);
        exec(c, "PRAGMA cache_size=20");
        if (exec(c, "BEGIN IMMEDIATE") == SQLITE_OK && insert(c, 1000, 2000) == SQLITE_OK)
            kill(getpid(), SIGKILL);
        return 3;
    });
    ASSERT_TRUE(WIFSIGNALED(status)) << "the second child was to die in its transaction";
    sqlite3* r = open(false);
    EXPECT_EQ(count(r), 510);
    EXPECT_EQ(integrity(r), "ok");
    sqlite3_close(r);
}

// The file may not grow past its size when the transaction starts
// (RLIMIT_FSIZE, in a child): the rows are gathered without error, and the
// failure of their write is COMMIT's, which publishes nothing.
TEST_F(WalGathering, AWriteThatFailsAtCommitIsTheCommitsErrorAndPublishesNothing) {
    seed(50);
    const int status = in_child([&] {
        signal(SIGXFSZ, SIG_IGN);
        sqlite3* c = open(true);
        if (exec(c, "PRAGMA synchronous=NORMAL; PRAGMA cache_size=-32000") != SQLITE_OK || count(c) != 50)
            return 10;
        // A first commit starts the WAL and syncs its header: the limit
        // then falls on the frames of the next commit, not on that sync.
        if (insert(c, 51, 1) != SQLITE_OK) return 11;
        struct stat st {};
        if (stat((path_ + "-wal").c_str(), &st) != 0 || st.st_size == 0) return 11;
        rlimit limit{static_cast<rlim_t>(st.st_size), static_cast<rlim_t>(st.st_size)};
        if (setrlimit(RLIMIT_FSIZE, &limit) != 0) return 12;
        if (exec(c, "BEGIN IMMEDIATE") != SQLITE_OK) return 13;
        if (insert(c, 52, 1000) != SQLITE_OK) return 14;  // gathered: no error yet
        const int rc = exec(c, "COMMIT");
        if (rc == SQLITE_OK) return 15;
        return (rc & 0xff) == SQLITE_FULL || (rc & 0xff) == SQLITE_IOERR ? 0 : 16;
    });
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0) << "10-14: setup failed, 15: COMMIT succeeded, 16: another error";
    sqlite3* r = open(false);
    EXPECT_EQ(count(r), 51);
    EXPECT_EQ(integrity(r), "ok");
    sqlite3* again = open(true);
    ASSERT_EQ(insert(again, 52, 100), SQLITE_OK) << "the ledger takes writes again";
    EXPECT_EQ(count(r), 151);
    sqlite3_close(again);
    sqlite3_close(r);
}

TEST_F(WalGathering, TheDatabaseFileReadsAsAskedUnlessReadAheadIsOn) {
    sqlite3* w = make_table();
    ASSERT_EQ(insert(w, 1, 2000), SQLITE_OK);
    sqlite3_file* main_file = nullptr;
    ASSERT_EQ(sqlite3_file_control(w, "main", SQLITE_FCNTL_FILE_POINTER, &main_file), SQLITE_OK);
    sqlite3* plain = open(false);
    sqlite3_file* plain_file = nullptr;
    ASSERT_EQ(sqlite3_file_control(plain, "main", SQLITE_FCNTL_FILE_POINTER, &plain_file), SQLITE_OK);
    EXPECT_NE(main_file->pMethods, plain_file->pMethods);
    EXPECT_FALSE(set_read_ahead(plain, true)) << "a connection of the default VFS has no read-ahead";
    ASSERT_EQ(exec(w, "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA cache_size=-64"), SQLITE_OK);
    const IndexBuildIoCounts before = index_build_io_counts();
    EXPECT_EQ(count(w), 2000);
    EXPECT_EQ(index_build_io_counts().db_reads_requested, before.db_reads_requested);
    sqlite3_close(plain);
    sqlite3_close(w);
}

// Read ahead left on across transactions: another connection's commit and
// checkpoint rewrite the database file in between, and the next read sees
// the new rows, not stretches read before.
TEST_F(WalGathering, ReadAheadServesAScanAndNeverAnOlderFile) {
    seed(3000);
    sqlite3* r = open(true);
    ASSERT_EQ(exec(r, "PRAGMA cache_size=-64"), SQLITE_OK);  // the scan reads the file
    auto checksum = [&](sqlite3* db) {
        sqlite3_stmt* s = nullptr;
        sqlite3_prepare_v2(db,
                           "SELECT count(*), total(length(v)), total(unicode(hex(substr(v, 1, 4)))) FROM t",
                           -1, &s, nullptr);
        std::string out;
        if (sqlite3_step(s) == SQLITE_ROW)
            out = std::to_string(sqlite3_column_int64(s, 0)) + "/" +
                  std::to_string(sqlite3_column_double(s, 1)) + "/" +
                  std::to_string(sqlite3_column_double(s, 2));
        sqlite3_finalize(s);
        return out;
    };
    sqlite3* w = open(false);
    ASSERT_EQ(exec(w, "PRAGMA wal_checkpoint(TRUNCATE)"), SQLITE_OK);
    ASSERT_TRUE(set_read_ahead(r, true));
    const IndexBuildIoCounts before = index_build_io_counts();
    ASSERT_EQ(exec(r, "BEGIN"), SQLITE_OK);
    const std::string first = checksum(r);
    ASSERT_EQ(exec(r, "COMMIT"), SQLITE_OK);
    const IndexBuildIoCounts after = index_build_io_counts();
    EXPECT_EQ(first, checksum(w));
    const auto asked = after.db_reads_requested - before.db_reads_requested;
    ASSERT_GT(asked, 500u);
    EXPECT_LT((after.db_reads_issued - before.db_reads_issued) * 2, asked);
    for (int round = 0; round < 3; ++round) {
        // Every row's bytes change, written back into the database file.
        ASSERT_EQ(exec(w, "UPDATE t SET v = randomblob(1000) WHERE id % 3 != " + std::to_string(round)),
                  SQLITE_OK);
        ASSERT_EQ(insert(w, 10000 + round * 100, 50), SQLITE_OK);
        ASSERT_EQ(exec(w, "PRAGMA wal_checkpoint(TRUNCATE)"), SQLITE_OK);
        const std::string expected = checksum(w);
        EXPECT_EQ(checksum(r), expected) << "round " << round;  // read ahead still on
    }
    EXPECT_TRUE(set_read_ahead(r, false));
    EXPECT_EQ(integrity(r), "ok");
    sqlite3_close(w);
    sqlite3_close(r);
}

// The sorter's runs (an index built with temp_store=FILE and a small cache):
// written and read back a page at a time by SQLite, in far fewer calls to the
// real files, and the index holds every row in order.
TEST_F(WalGathering, AnIndexBuiltThroughTemporaryFilesIsWholeInFewerCalls) {
    sqlite3* w = make_table();
    ASSERT_EQ(exec(w, "ALTER TABLE t ADD COLUMN k TEXT"), SQLITE_OK);
    // 20,000 keys in no order, about 2.5 MB of them: many runs of 256 KiB.
    ASSERT_EQ(exec(w,
                   "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) "
                   "INSERT INTO t(id, v, k) SELECT i, NULL, hex(randomblob(60)) || i FROM n"),
              SQLITE_OK);
    const IndexBuildIoCounts before = index_build_io_counts();
    ASSERT_EQ(exec(w, "PRAGMA temp_store=FILE; PRAGMA cache_size=-256; CREATE INDEX t_k ON t(k)"), SQLITE_OK);
    const IndexBuildIoCounts after = index_build_io_counts();
    const auto writes = after.writes_requested - before.writes_requested;
    const auto reads = after.reads_requested - before.reads_requested;
    ASSERT_GT(writes, 100u) << "the build did not sort through temporary files";
    ASSERT_GT(reads, 100u);
    EXPECT_LT((after.writes_issued - before.writes_issued) * 10, writes);
    EXPECT_LT((after.reads_issued - before.reads_issued) * 4, reads);
    EXPECT_EQ(integrity(w), "ok");
    // The index, walked in order, against the table sorted anew.
    auto keys = [&](const char* sql) {
        std::string all;
        sqlite3_stmt* s = nullptr;
        EXPECT_EQ(sqlite3_prepare_v2(w, sql, -1, &s, nullptr), SQLITE_OK);
        while (sqlite3_step(s) == SQLITE_ROW) {
            all += reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
            all += '\n';
        }
        sqlite3_finalize(s);
        return all;
    };
    const std::string by_index = keys("SELECT k FROM t INDEXED BY t_k ORDER BY k");
    const std::string sorted = keys("SELECT k FROM t NOT INDEXED ORDER BY k");
    EXPECT_EQ(by_index.size(), sorted.size());
    EXPECT_TRUE(by_index == sorted);
    // SQLite's worker threads sort runs and merge them in files of their own
    // (ensure_indexes turns them on for large ledgers).
    const IndexBuildIoCounts before_threads = index_build_io_counts();
    ASSERT_EQ(exec(w, "PRAGMA threads=2; CREATE INDEX t_k2 ON t(k, id)"), SQLITE_OK);
    EXPECT_GT(index_build_io_counts().writes_requested - before_threads.writes_requested, 100u);
    EXPECT_EQ(integrity(w), "ok");
    EXPECT_TRUE(keys("SELECT k FROM t INDEXED BY t_k2 ORDER BY k, id") ==
                keys("SELECT k FROM t NOT INDEXED ORDER BY k, id"));
    sqlite3_close(w);
}

}  // namespace
}  // namespace retryguard::ledger_detail
