// The verdict log's targets, with real sockets and files.
#include "retryguard/verdict_log.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

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

}  // namespace
}  // namespace retryguard
