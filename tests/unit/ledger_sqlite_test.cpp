// The ledger contract on the SQLite backend, plus what only SQLite has:
// schema versions, lock timeouts, the backend spec.
#include <sqlite3.h>

#include <filesystem>

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
        EXPECT_EQ(s->schema_version, 1);
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

TEST(LedgerIdentity, EventKeysDependOnEveryIdentifyingField) {
    auto a = deferred("Q1", 1, "a@b.test").event;
    auto k = event_key(a);
    EXPECT_EQ(k, event_key(deferred("Q1", 1, "a@b.test").event));
    auto b = a;
    b.pid = 7;
    EXPECT_NE(event_key(b), k);
    b = a;
    b.host = "other";
    EXPECT_NE(event_key(b), k);
    b = a;
    b.time += std::chrono::microseconds(1);
    EXPECT_NE(event_key(b), k);
    b = a;
    b.text += " ";
    EXPECT_NE(event_key(b), k);
}

}  // namespace
}  // namespace retryguard::ledger_test
