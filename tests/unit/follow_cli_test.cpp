// follow_cli_test.cpp -- `retryguard follow` run as a program: prints the
// delivered lines, resumes from its state directory, refuses bad usage.
#include <sys/wait.h>

#include <cstdio>

#include "unit/follow_util.hpp"

namespace retryguard {
namespace {

struct Run {
    int code = -1;
    std::string out;
};

Run run(const std::string& args) {
    Run r;
    std::string cmd = std::string(RETRYGUARD_CLI) + " follow " + args + " 2>/dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return r;
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    int st = ::pclose(p);
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

TEST(FollowCli, PrintsLinesAndResumesFromTheStateDirectory) {
    test::TempDir dir;
    auto log = dir / "mail.log";
    test::append(log, "Nov 29 20:48:20 sender postfix/smtpd[1]: connect\nsecond\npartial");
    auto first = run("--once --state-dir " + dir / "state" + " " + log);
    EXPECT_EQ(first.code, 0);
    EXPECT_EQ(first.out, "Nov 29 20:48:20 sender postfix/smtpd[1]: connect\nsecond\n");
    test::append(log, " line\n");
    auto second = run("--once --state-dir " + dir / "state" + " " + log);
    EXPECT_EQ(second.code, 0);
    EXPECT_EQ(second.out, "partial line\n");
}

TEST(FollowCli, BadUsageExitsWithTwo) {
    EXPECT_EQ(run("--once").code, 2);
    EXPECT_EQ(run("--syslog-udp 0.0.0.0:5514").code, 2);
    EXPECT_EQ(run("--syslog-udp 127.0.0.1").code, 2);
    EXPECT_EQ(run("--once --batch-lines 0 /nonexistent").code, 2);
}

}  // namespace
}  // namespace retryguard
