// The verdict log's targets, with real sockets and files.
#include "retryguard/rules/verdict_log.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace retryguard {
namespace {

std::filesystem::path temp_dir() {
    auto d = std::filesystem::temp_directory_path() / ("rg-vlog-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
}

Verdict sample() {
    Verdict v;
    v.key = "1E661116375";
    v.name = "escalate";
    v.add("destination", "example.com").add("reply", "451 4.3.5 System config error\nforged line");
    return v;
}

TEST(VerdictLog, ParsesTargetSpecs) {
    EXPECT_EQ(parse_verdict_log_target("syslog")->kind, VerdictLogTarget::Kind::syslog);
    EXPECT_EQ(parse_verdict_log_target("syslog:local3")->facility, "local3");
    EXPECT_EQ(parse_verdict_log_target("postlog:/var/spool/postfix/public/postlog")->path,
              "/var/spool/postfix/public/postlog");
    EXPECT_EQ(parse_verdict_log_target("stderr")->kind, VerdictLogTarget::Kind::stderr_stream);
    for (std::string_view bad :
         {"", "syslog:nosuch", "postlog:relative", "file:", "stderr:x", "carrier-pigeon"})
        EXPECT_FALSE(parse_verdict_log_target(bad).ok()) << bad;
}

TEST(VerdictLog, FileTargetWritesPostfixShapedLinesWithoutForgedNewlines) {
    auto dir = temp_dir();
    auto path = dir / "mail.log";
    std::filesystem::remove(path);
    VerdictLog log;
    VerdictLogTarget t;
    t.kind = VerdictLogTarget::Kind::file;
    t.path = path;
    t.ident = "retryguard/policyd";
    ASSERT_TRUE(log.open(t).ok());
    log.write(sample());
    EXPECT_EQ(log.written(), 1u);
    std::ifstream in(path);
    std::string line, extra;
    ASSERT_TRUE(std::getline(in, line));
    EXPECT_FALSE(std::getline(in, extra)) << "a newline in a value must not start a new log line";
    EXPECT_TRUE(std::regex_match(
        line,
        std::regex(
            R"([A-Z][a-z]{2} [ 0-9]\d \d\d:\d\d:\d\d \S+ retryguard/policyd\[\d+\]: 1E661116375: verdict=escalate destination=example.com reply=".*forged line")")))
        << line;
    std::filesystem::remove_all(dir);
}

TEST(VerdictLog, PostlogTargetSendsOneDatagramPerVerdict) {
    auto dir = temp_dir();
    auto sock_path = dir / "postlog";
    int srv = ::socket(AF_UNIX, SOCK_DGRAM, 0);
    ASSERT_GE(srv, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, sock_path.c_str());
    ASSERT_EQ(::bind(srv, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    VerdictLog log;
    VerdictLogTarget t;
    t.kind = VerdictLogTarget::Kind::postlog;
    t.path = sock_path;
    ASSERT_TRUE(log.open(t).ok());
    log.write(sample());
    char buf[4096];
    ssize_t n = ::recv(srv, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    std::string got(buf, static_cast<size_t>(n));
    EXPECT_NE(got.find(" retryguard["), std::string::npos) << got;
    EXPECT_NE(got.find("]: 1E661116375: verdict=escalate "), std::string::npos) << got;
    ::close(srv);
    std::filesystem::remove_all(dir);
}

TEST(VerdictLog, UnreachablePostlogIsAnErrorAndWritesAreCountedAsFailures) {
    VerdictLog log;
    VerdictLogTarget t;
    t.kind = VerdictLogTarget::Kind::postlog;
    t.path = "/nonexistent/retryguard/postlog";
    EXPECT_FALSE(log.open(t).ok());
    log.write(sample());  // must not crash or throw
    EXPECT_EQ(log.failures(), 1u);
    EXPECT_EQ(log.written(), 0u);
}

// File tail reconciliation of the verdict outbox: which pending lines a file
// already ends with.
TEST(VerdictLog, FileTailMatchFindsNoneSomeOrAllPendingLines) {
    const std::vector<std::string> pending{"a.test: verdict=watch", "b.test: verdict=escalate",
                                           "c.test: verdict=noted"};
    const std::string before = "Dec  1 10:00:00 h retryguard[7]: z.test: verdict=noted\n";
    auto rec = [](const std::string& text) { return "Dec  1 10:00:01 h retryguard[8]: " + text + "\n"; };

    auto none = match_file_tail(before, pending);
    EXPECT_EQ(none.present, 0u);
    EXPECT_FALSE(none.torn);
    EXPECT_EQ(match_file_tail("", pending).present, 0u);

    auto some = match_file_tail(before + rec(pending[0]) + rec(pending[1]), pending);
    EXPECT_EQ(some.present, 2u);
    EXPECT_FALSE(some.torn);

    auto all = match_file_tail(before + rec(pending[0]) + rec(pending[1]) + rec(pending[2]), pending);
    EXPECT_EQ(all.present, 3u);

    // In order only: the file ending with the second line alone is not "one written".
    EXPECT_EQ(match_file_tail(before + rec(pending[1]), pending).present, 0u);
    // A line that merely ends like a pending one, without the ": " before it, is another line.
    EXPECT_EQ(match_file_tail("xa.test: verdict=watch\n", pending).present, 0u);
    // Only the start of the file's window: a line with no newline before it still counts.
    EXPECT_EQ(match_file_tail("10:00:01 h retryguard[8]: a.test: verdict=watch\n", pending).present, 1u);
}

TEST(VerdictLog, FileTailMatchCountsATornLastLineAsNotWritten) {
    const std::vector<std::string> pending{"a.test: verdict=watch", "b.test: verdict=escalate"};
    const std::string first = "Dec  1 10:00:01 h retryguard[8]: a.test: verdict=watch\n";
    auto m = match_file_tail(first + "Dec  1 10:00:01 h retryguard[8]: b.test: verd", pending);
    EXPECT_TRUE(m.torn);
    EXPECT_EQ(m.present, 1u);
    // Cut right before its newline: still not written.
    m = match_file_tail(first + "Dec  1 10:00:01 h retryguard[8]: b.test: verdict=escalate", pending);
    EXPECT_TRUE(m.torn);
    EXPECT_EQ(m.present, 1u);
    m = match_file_tail("Dec  1 10:00:01 h retr", pending);
    EXPECT_TRUE(m.torn);
    EXPECT_EQ(m.present, 0u);
}

TEST(VerdictLog, ReplayToAFileWritesOnlyTheMissingLinesAndEndsACutLine) {
    auto dir = temp_dir();
    auto path = dir / "verdicts.log";
    std::filesystem::remove(path);
    const std::vector<std::string> pending{"a.test: verdict=watch", "b.test: verdict=escalate",
                                           "c.test: verdict=noted"};
    {
        std::ofstream out(path);
        out << "Dec  1 10:00:00 h retryguard[7]: z.test: verdict=noted\n"
            << "Dec  1 10:00:01 h retryguard[7]: a.test: verdict=watch\n"
            << "Dec  1 10:00:01 h retryguard[7]: b.test: verd";  // cut by a crash
    }
    VerdictLog log;
    VerdictLogTarget t;
    t.kind = VerdictLogTarget::Kind::file;
    t.path = path;
    ASSERT_TRUE(log.open(t).ok());
    auto r = log.replay(pending);
    EXPECT_EQ(r.found, 1u);
    EXPECT_EQ(r.unchecked, 0u);
    EXPECT_TRUE(r.torn);
    EXPECT_EQ(log.written(), 2u);
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    ASSERT_EQ(lines.size(), 5u);
    EXPECT_EQ(lines[2], "Dec  1 10:00:01 h retryguard[7]: b.test: verd") << "the cut line stays, ended";
    EXPECT_TRUE(lines[3].ends_with(": b.test: verdict=escalate")) << lines[3];
    EXPECT_TRUE(lines[4].ends_with(": c.test: verdict=noted")) << lines[4];
    std::filesystem::remove_all(dir);
}

TEST(VerdictLog, ReplayToAFileTwiceWritesEachLineOnce) {
    auto dir = temp_dir();
    auto path = dir / "verdicts2.log";
    std::filesystem::remove(path);
    const std::vector<std::string> pending{"a.test: verdict=watch", "b.test: verdict=escalate"};
    {
        std::ofstream out(path);
        out << "Dec  1 10:00:01 h retryguard[7]: a.test: verdict=watch\n";
    }
    VerdictLog log;
    VerdictLogTarget t;
    t.kind = VerdictLogTarget::Kind::file;
    t.path = path;
    ASSERT_TRUE(log.open(t).ok());
    auto r = log.replay(pending);
    EXPECT_EQ(r.found, 1u);
    EXPECT_FALSE(r.torn);
    // A crash before the outbox was trimmed hands the same lines over again.
    auto again = log.replay(pending);
    EXPECT_EQ(again.found, 2u);
    EXPECT_EQ(log.written(), 1u);
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_TRUE(lines[1].ends_with(": b.test: verdict=escalate")) << lines[1];
    std::filesystem::remove_all(dir);
}

TEST(VerdictLog, ReplayToATargetThatCannotBeReadWritesEveryLineAgain) {
    VerdictLog none;
    VerdictLogTarget t;
    t.kind = VerdictLogTarget::Kind::none;
    ASSERT_TRUE(none.open(t).ok());
    const std::vector<std::string> pending{"a.test: verdict=watch", "b.test: verdict=escalate"};
    EXPECT_EQ(none.replay(pending).unchecked, 0u);
    VerdictLog err;
    t.kind = VerdictLogTarget::Kind::stderr_stream;
    ASSERT_TRUE(err.open(t).ok());
    auto r = err.replay(pending);
    EXPECT_EQ(r.found, 0u);
    EXPECT_EQ(r.unchecked, 2u);
    EXPECT_EQ(err.written(), 2u);
}

}  // namespace
}  // namespace retryguard
