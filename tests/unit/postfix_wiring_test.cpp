// check-config's look at the Postfix side: `postconf -nx` text in, findings
// out. The texts are what Debian 12's postconf prints for the admin steps of
// docs/packaging.md and for the usual ways of getting them wrong.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "retryguard/postfix/postfix_wiring.hpp"

namespace retryguard {
namespace {

using L = WiringFinding::Level;

std::vector<WiringFinding> check(const std::string& text) {
    return check_postfix_wiring(text, *config::defaults());
}

int count(const std::vector<WiringFinding>& f, L level) {
    return static_cast<int>(
        std::count_if(f.begin(), f.end(), [&](const auto& x) { return x.level == level; }));
}

std::string all(const std::vector<WiringFinding>& f) {
    std::string s;
    for (const auto& x : f) s += std::string(to_string(x.level)) + ": " + x.what + " | " + x.fix + "\n";
    return s;
}

const char* kWired =
    "compatibility_level = 3.6\n"
    "milter_default_action = accept\n"
    "myhostname = mx.example\n"
    "non_smtpd_milters = unix:retryguard/milter.sock\n"
    "smtpd_milters = unix:retryguard/milter.sock\n"
    "smtpd_recipient_restrictions = check_policy_service { unix:retryguard/policy.sock, "
    "default_action=DUNNO } permit_mynetworks, permit_sasl_authenticated, reject_unauth_destination\n";

TEST(PostfixWiring, TheDocumentedStepsAreAllOk) {
    auto f = check(kWired);
    EXPECT_EQ(count(f, L::error), 0) << all(f);
    EXPECT_EQ(count(f, L::warning), 0) << all(f);
    EXPECT_EQ(count(f, L::ok), 4) << all(f);
}

TEST(PostfixWiring, NothingWiredSaysWhatIsMissingAndHowToFixIt) {
    auto f = check("myhostname = mx.example\n");
    EXPECT_EQ(count(f, L::error), 3) << all(f);    // smtpd_milters, non_smtpd_milters, policy service
    EXPECT_EQ(count(f, L::warning), 1) << all(f);  // milter_default_action defaults to tempfail
    const std::string s = all(f);
    EXPECT_NE(s.find("postconf -e 'smtpd_milters = unix:retryguard/milter.sock'"), std::string::npos) << s;
    EXPECT_NE(s.find("resends with the sendmail command are not refused"), std::string::npos) << s;
    EXPECT_NE(s.find("milter_default_action = tempfail"), std::string::npos) << s;
    EXPECT_NE(s.find("check_policy_service { unix:retryguard/policy.sock, default_action=DUNNO }"),
              std::string::npos)
        << s;
}

TEST(PostfixWiring, PolicyServiceAfterPermitMynetworksIsAWarning) {
    auto f = check(
        "smtpd_milters = unix:retryguard/milter.sock\nnon_smtpd_milters = $smtpd_milters\n"
        "milter_default_action = accept\n"
        "smtpd_recipient_restrictions = permit_mynetworks,\n"
        "    reject_unauth_destination,\n"
        "    check_policy_service { unix:retryguard/policy.sock, default_action=DUNNO }\n");
    // postconf -x expands $smtpd_milters; unexpanded it is not the milter
    EXPECT_EQ(count(f, L::error), 1) << all(f);
    EXPECT_EQ(count(f, L::warning), 1) << all(f);
    EXPECT_NE(all(f).find("only after permit_mynetworks"), std::string::npos) << all(f);
}

TEST(PostfixWiring, AbsoluteAndInetSpellingsMatchTheConfiguredSockets) {
    auto loaded = config::load_string(
        "milter: {socket: \"inet:8891@127.0.0.1\"}\npolicy: {socket: "
        "\"unix:/var/spool/postfix/rg/p.sock\"}\n");
    ASSERT_TRUE(loaded.ok());
    auto f = check_postfix_wiring(
        "queue_directory = /var/spool/postfix\nsmtpd_milters = inet:localhost:8891\n"
        "non_smtpd_milters = { inet:127.0.0.1:8891, default_action = accept }\n"
        "milter_default_action = accept\n"
        "smtpd_recipient_restrictions = check_policy_service unix:/var/spool/postfix/rg/p.sock\n",
        *loaded.config);
    EXPECT_EQ(count(f, L::error), 0) << all(f);
    EXPECT_EQ(count(f, L::warning), 0) << all(f);
}

TEST(PostfixWiring, AnotherMilterIsNotOurs) {
    auto f = check(
        "smtpd_milters = unix:opendkim/opendkim.sock\nnon_smtpd_milters = unix:opendkim/opendkim.sock\n"
        "milter_default_action = accept\n"
        "smtpd_recipient_restrictions = check_policy_service inet:127.0.0.1:10023\n");
    EXPECT_EQ(count(f, L::error), 3) << all(f);
}

TEST(PostfixWiring, UnreadableLogSourceIsAnError) {
    auto dir = std::filesystem::temp_directory_path() / ("rg-wiring-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    auto log = dir / "mail.log";
    std::ofstream(log) << "x\n";
    ::chmod(log.c_str(), 0600);
    auto loaded = config::load_string("sources: [{type: file, path: " + log.string() + "}]\n");
    ASSERT_TRUE(loaded.ok());
    auto f = check_sources_readable(*loaded.config, "nobody", false);
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].level, L::error) << all(f);
    EXPECT_NE(f[0].what.find("cannot be read by nobody"), std::string::npos) << all(f);
    ::chmod(log.c_str(), 0644);
    f = check_sources_readable(*loaded.config, "nobody", false);
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].level, L::ok) << all(f);
    std::filesystem::remove_all(dir);
}

// Postfix's daemons run as postfix with that one group: a socket directory or
// socket that only other groups may use keeps Postfix out (it then skips the
// milter and the policy service, fail-open, and nothing is refused).
TEST(PostfixWiring, SocketsPostfixCannotReachAreErrors) {
    auto dir = std::filesystem::temp_directory_path() / ("rg-wiring-sock-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const auto sock = dir / "milter.sock";
    auto loaded = config::load_string("milter: {socket: \"unix:" + sock.string() +
                                      "\"}\npolicy: {socket: \"inet:10045@127.0.0.1\"}\n");
    ASSERT_TRUE(loaded.ok()) << (loaded.errors.empty() ? "" : loaded.errors[0].message);
    // "nobody" plays Postfix's user: neither owner nor group of what this test makes.
    ::chmod(dir.c_str(), 0750);
    auto f = check_sockets_reachable(*loaded.config, "nobody");
    ASSERT_EQ(f.size(), 1u) << all(f);
    EXPECT_EQ(f[0].level, L::error) << all(f);
    EXPECT_NE(f[0].what.find("cannot be entered by nobody"), std::string::npos) << all(f);
    ::chmod(dir.c_str(), 0751);
    f = check_sockets_reachable(*loaded.config, "nobody");
    ASSERT_EQ(f.size(), 1u) << all(f);
    EXPECT_EQ(f[0].level, L::warning) << all(f);  // not there: the daemon is not running
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock.c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    ::chmod(sock.c_str(), 0660);
    f = check_sockets_reachable(*loaded.config, "nobody");
    ASSERT_EQ(f.size(), 1u) << all(f);
    EXPECT_EQ(f[0].level, L::error) << all(f);
    EXPECT_NE(f[0].what.find("cannot be opened by nobody"), std::string::npos) << all(f);
    ::chmod(sock.c_str(), 0666);
    f = check_sockets_reachable(*loaded.config, "nobody");
    ASSERT_EQ(f.size(), 1u) << all(f);
    EXPECT_EQ(f[0].level, L::ok) << all(f);
    ::close(fd);
    std::filesystem::remove_all(dir);
}

// A fleet shares one Redis ledger: a follower position under the derived
// source id would be the same on every host.
TEST(PostfixWiring, FleetSourcesWithoutAHostNameAreAWarning) {
    auto redis = config::load_string(
        "ledger: {backend: redis}\nsources: [{type: file, path: /var/log/mail.log}, "
        "{type: file, path: /var/log/other.log, name: mx1:other.log}]\n");
    ASSERT_TRUE(redis.ok()) << (redis.errors.empty() ? "" : redis.errors[0].message);
    auto f = check_fleet_sources(*redis.config);
    ASSERT_EQ(f.size(), 1u) << all(f);
    EXPECT_EQ(f[0].level, L::warning);
    EXPECT_NE(f[0].what.find("sources[0]"), std::string::npos) << all(f);
    EXPECT_NE(f[0].what.find("file:/var/log/mail.log"), std::string::npos) << all(f);
    auto sqlite = config::load_string("sources: [{type: file, path: /var/log/mail.log}]\n");
    ASSERT_TRUE(sqlite.ok());
    EXPECT_TRUE(check_fleet_sources(*sqlite.config).empty());
}

}  // namespace
}  // namespace retryguard
