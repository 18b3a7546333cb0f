// follow_journal_test.cpp -- the journald follower. Journal files are written by
// systemd-journal-remote from the journal export format into a temporary
// directory and read back with sd_journal_open_directory: real journal files,
// no running journald needed. The line reconstruction is tested on its own too.
#include <sys/wait.h>

#include <cstdio>

#include <fmt/format.h>

#include "unit/follow_util.hpp"

namespace retryguard {
namespace {

using namespace std::chrono_literals;
using test::drain;
using test::fast_settings;
using test::TempDir;
using test::texts;
using Lines = std::vector<std::string>;

constexpr const char* kJournalRemote = "/lib/systemd/systemd-journal-remote";

TEST(FollowJournalLine, RebuildsAnRsyslogStyleLineWithMicroseconds) {
    JournalEntry e;
    e.realtime_usec = 1796006330123456ull;  // 2026-11-30T02:38:50.123456Z
    e.hostname = "sender";
    e.identifier = "postfix/smtp";
    e.pid = "23760";
    e.message = "5345A116373: to=<a@b.example>, status=sent (250 2.0.0 Ok)";
    EXPECT_EQ(journal_entry_to_line(e),
              "2026-11-30T02:38:50.123456+00:00 sender postfix/smtp[23760]: 5345A116373: to=<a@b.example>, "
              "status=sent (250 2.0.0 Ok)");
    e.realtime_usec = 1796006330000000ull;
    e.pid.clear();
    e.hostname.clear();
    e.message = "multi\nline\0x";
    e.message += std::string("\0nul", 4);
    EXPECT_EQ(journal_entry_to_line(e),
              std::string("2026-11-30T02:38:50.000000+00:00 localhost postfix/smtp: multi line") +
                  std::string(" nul", 4));
}

TEST(FollowJournalLine, BoundedByTheLineLimit) {
    JournalEntry e;
    e.realtime_usec = 1;
    e.identifier = "postfix/smtp";
    e.message = std::string(100000, 'm');
    bool cut = false;
    auto line = journal_entry_to_line(e, 4096, &cut);
    EXPECT_EQ(line.size(), 4096u);
    EXPECT_TRUE(cut);
    EXPECT_EQ(line.substr(0, 27), "1970-01-01T00:00:00.000001+");
}

struct ExportEntry {
    std::uint64_t realtime;
    std::string identifier;
    std::string pid;
    std::string message;
};

// Appends entries to <dir>/remote.journal through systemd-journal-remote.
bool write_journal(const std::string& dir, const std::vector<ExportEntry>& entries,
                   std::uint64_t& monotonic) {
    std::string cmd = fmt::format("{} -o {}/remote.journal - 2>/dev/null", kJournalRemote, dir);
    FILE* p = ::popen(cmd.c_str(), "w");
    if (!p) return false;
    for (const auto& e : entries) {
        std::string text = fmt::format(
            "__REALTIME_TIMESTAMP={}\n__MONOTONIC_TIMESTAMP={}\n_BOOT_ID=0123456789abcdef0123456789abcdef\n"
            "_HOSTNAME=sender\nSYSLOG_IDENTIFIER={}\n",
            e.realtime, ++monotonic, e.identifier);
        if (!e.pid.empty()) text += fmt::format("SYSLOG_PID={}\n", e.pid);
        text += fmt::format("MESSAGE={}\n\n", e.message);
        std::fwrite(text.data(), 1, text.size(), p);
    }
    int rc = ::pclose(p);
    return WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
}

bool have_journal_remote() {
    if (::access(kJournalRemote, X_OK) == 0) return true;
    return false;
}

#define REQUIRE_JOURNAL_REMOTE()                                                                            \
    do {                                                                                                    \
        if (!have_journal_remote()) {                                                                       \
            if (std::getenv("CI")) FAIL() << kJournalRemote << " missing (package systemd-journal-remote)"; \
            GTEST_SKIP() << "SKIPPED: " << kJournalRemote                                                   \
                         << " missing; install systemd-journal-remote (scripts/install-deps.sh)";           \
        }                                                                                                   \
    } while (0)

TEST(FollowJournal, ReadsMatchingEntriesFromAJournalDirectoryAndResumesAfterTheCursor) {
    REQUIRE_JOURNAL_REMOTE();
    TempDir dir;
    std::uint64_t mono = 0;
    const std::uint64_t t0 = 1796006330000000ull;
    ASSERT_TRUE(write_journal(dir.path,
                              {{t0 + 1, "postfix/smtpd", "10", "connect from localhost[127.0.0.1]"},
                               {t0 + 2, "cron", "11", "not mail"},
                               {t0 + 3, "postfix/qmgr", "12", "5345A116373: removed"},
                               {t0 + 4, "postfix-out/smtp", "", "no pid here"}},
                              mono));
    auto s = fast_settings();
    s.batch_max_lines = 2;
    FollowerPosition pos;
    {
        auto src = open_journal_follower(dir.path, {}, s);
        ASSERT_TRUE(src.ok()) << src.error().message;
        auto got = drain(**src, 2);
        EXPECT_EQ(texts(got),
                  (Lines{"2026-11-30T02:38:50.000001+00:00 sender postfix/smtpd[10]: connect from "
                         "localhost[127.0.0.1]",
                         "2026-11-30T02:38:50.000003+00:00 sender postfix/qmgr[12]: 5345A116373: removed"}));
        pos = (*src)->committed();
        EXPECT_FALSE(pos.cursor.empty());
        EXPECT_EQ(pos.source, "journal");
        EXPECT_EQ(pos.lines, 2u);
        EXPECT_EQ((*src)->status().cursor, pos.cursor);
    }
    auto s2 = s;
    s2.journal_identifier_prefixes = {"postfix", "cron"};
    auto src = open_journal_follower(dir.path, pos, s2);
    ASSERT_TRUE(src.ok());
    EXPECT_EQ(texts(drain(**src, 1)),
              (Lines{"2026-11-30T02:38:50.000004+00:00 sender postfix-out/smtp: no pid here"}))
        << "nothing at or before the committed cursor comes back (not even cron, now matched)";
    EXPECT_EQ(texts(drain(**src, 1, 200ms)), Lines{});
}

// sources[].journal_match: only entries matching it are read (journalctl's
// syntax: terms ANDed, "+" between alternatives).
TEST(FollowJournal, JournalMatchSelectsEntries) {
    REQUIRE_JOURNAL_REMOTE();
    TempDir dir;
    std::string cmd = fmt::format("{} -o {}/remote.journal - 2>/dev/null", kJournalRemote, dir.path);
    FILE* p = ::popen(cmd.c_str(), "w");
    ASSERT_NE(p, nullptr);
    std::uint64_t mono = 0;
    const std::uint64_t t0 = 1796006330000000ull;
    for (const auto& [facility, text] : std::vector<std::pair<int, std::string>>{
             {2, "mail line one"}, {3, "daemon line"}, {2, "mail line two"}}) {
        std::string e = fmt::format(
            "__REALTIME_TIMESTAMP={}\n__MONOTONIC_TIMESTAMP={}\n_BOOT_ID=0123456789abcdef0123456789abcdef\n"
            "_HOSTNAME=sender\nSYSLOG_IDENTIFIER=postfix/smtp\nSYSLOG_FACILITY={}\nMESSAGE={}\n\n",
            t0 + mono, mono + 1, facility, text);
        ++mono;
        std::fwrite(e.data(), 1, e.size(), p);
    }
    const int rc = ::pclose(p);
    ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
    auto s = fast_settings();
    s.journal_match = "SYSLOG_FACILITY=2";
    auto src = open_journal_follower(dir.path, {}, s);
    ASSERT_TRUE(src.ok()) << src.error().message;
    auto got = texts(drain(**src, 2));
    ASSERT_EQ(got.size(), 2u);
    EXPECT_NE(got[0].find("mail line one"), std::string::npos);
    EXPECT_NE(got[1].find("mail line two"), std::string::npos);
    EXPECT_EQ(texts(drain(**src, 1, 200ms)), Lines{});
    s.journal_match = "SYSLOG_FACILITY=3 + SYSLOG_FACILITY=2";
    auto both = open_journal_follower(dir.path, {}, s);
    ASSERT_TRUE(both.ok()) << both.error().message;
    EXPECT_EQ(texts(drain(**both, 3)).size(), 3u);
}

TEST(FollowJournal, RefusedBatchIsOfferedAgainAndUncommittedEntriesReturnAfterRestart) {
    REQUIRE_JOURNAL_REMOTE();
    TempDir dir;
    std::uint64_t mono = 0;
    const std::uint64_t t0 = 1796006330000000ull;
    ASSERT_TRUE(write_journal(dir.path,
                              {{t0 + 1, "postfix/smtp", "1", "a"},
                               {t0 + 2, "postfix/smtp", "1", "b"},
                               {t0 + 3, "postfix/smtp", "1", "c"}},
                              mono));
    auto s = fast_settings();
    s.batch_max_lines = 1;
    FollowerPosition pos;
    {
        auto src = open_journal_follower(dir.path, {}, s);
        ASSERT_TRUE(src.ok());
        ASSERT_EQ(drain(**src, 1).size(), 1u);
        pos = (*src)->committed();
        auto refuse = [](const LineBatch&) -> Status { return make_error(ErrorKind::unavailable, "busy"); };
        std::string offered;
        auto remember = [&](const LineBatch& b) -> Status {
            offered = b.lines.at(0).text;
            return make_error(ErrorKind::unavailable, "busy");
        };
        EXPECT_EQ((*src)->poll_once(remember, 500ms).value_or(9), 0u);
        EXPECT_EQ((*src)->poll_once(refuse, 500ms).value_or(9), 0u);
        EXPECT_NE(offered.find("postfix/smtp[1]: b"), std::string::npos);
        EXPECT_EQ((*src)->status().batches_refused, 2u);
    }
    auto src = open_journal_follower(dir.path, pos, s);
    ASSERT_TRUE(src.ok());
    auto got = texts(drain(**src, 2));
    ASSERT_EQ(got.size(), 2u);
    EXPECT_NE(got[0].find(": b"), std::string::npos);
    EXPECT_NE(got[1].find(": c"), std::string::npos);
}

TEST(FollowJournal, FollowsEntriesWrittenWhileItWaits) {
    REQUIRE_JOURNAL_REMOTE();
    TempDir dir;
    std::uint64_t mono = 0;
    const std::uint64_t t0 = 1796006330000000ull;
    ASSERT_TRUE(write_journal(dir.path, {{t0 + 1, "postfix/smtp", "1", "early"}}, mono));
    auto src = open_journal_follower(dir.path, {}, fast_settings());
    ASSERT_TRUE(src.ok());
    ASSERT_EQ(drain(**src, 1).size(), 1u);
    auto b = (*src)->next_batch(50ms);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(*b, nullptr);
    // A second writer run starts a new journal file next to the first one.
    ASSERT_TRUE(write_journal(dir.path, {{t0 + 2, "postfix/smtp", "1", "late"}}, mono));
    auto got = texts(drain(**src, 1));
    ASSERT_EQ(got.size(), 1u);
    EXPECT_NE(got[0].find("postfix/smtp[1]: late"), std::string::npos) << got[0];
    EXPECT_EQ(texts(drain(**src, 1, 200ms)), Lines{}) << "the early entry must not come back";
}

TEST(FollowJournal, ABadCursorIsAClearError) {
    TempDir dir;
    FollowerPosition pos;
    pos.cursor = "not a cursor";
    auto src = open_journal_follower(dir.path, pos, fast_settings());
    EXPECT_FALSE(src.ok());
}

}  // namespace
}  // namespace retryguard
