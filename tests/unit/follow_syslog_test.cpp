// follow_syslog_test.cpp -- syslog datagrams to log lines (RFC 3164, RFC 5424,
// rsyslog's forward format) and the socket sources on a real UNIX datagram
// socket and real UDP sockets on loopback.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <thread>

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

std::string line_of(std::string_view datagram, std::string_view host = "localhost") {
    auto r = syslog_datagram_to_line(datagram, host);
    EXPECT_TRUE(r.ok()) << datagram << ": " << (r.ok() ? "" : r.error().message);
    return r.ok() ? r->line : std::string();
}

TEST(FollowSyslogParse, Rfc3164WithHostStripsOnlyThePri) {
    auto r = syslog_datagram_to_line(
        "<22>Nov 29 20:38:50 sender postfix/smtp[23760]: 5345A116373: to=<a@b.example>, status=sent\n");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->line,
              "Nov 29 20:38:50 sender postfix/smtp[23760]: 5345A116373: to=<a@b.example>, status=sent");
    EXPECT_EQ(r->facility, 2);  // mail
    EXPECT_EQ(r->severity, 6);  // info
    EXPECT_FALSE(r->truncated);
}

TEST(FollowSyslogParse, Rfc3164WithoutHostGetsTheDefaultHost) {
    EXPECT_EQ(line_of("<22>Nov  9 20:38:50 postfix/qmgr[17]: 5345A116373: removed", "mx1"),
              "Nov  9 20:38:50 mx1 postfix/qmgr[17]: 5345A116373: removed");
    EXPECT_EQ(line_of("<22>Nov 29 20:38:50 postfix-out/smtp: warning: x", "mx1"),
              "Nov 29 20:38:50 mx1 postfix-out/smtp: warning: x");
}

TEST(FollowSyslogParse, RsyslogForwardFormatWithRfc3339Timestamp) {
    EXPECT_EQ(line_of("<22>2026-11-29T20:38:50.123456+01:00 sender postfix/smtp[1]: m"),
              "2026-11-29T20:38:50.123456+01:00 sender postfix/smtp[1]: m");
}

TEST(FollowSyslogParse, Rfc5424BecomesAFileStyleLine) {
    EXPECT_EQ(line_of("<22>1 2026-11-29T20:38:50.1Z sender postfix/smtp 1 - - 5345A116373: removed"),
              "2026-11-29T20:38:50.1Z sender postfix/smtp[1]: 5345A116373: removed");
    EXPECT_EQ(
        line_of(
            "<22>1 2026-11-29T20:38:50Z - postfix/qmgr - ID47 "
            "[exampleSDID@32473 iut=\"3\" eventSource=\"Appl\\\"ica]tion\"][x@1 a=\"b\"] \xEF\xBB\xBFhello",
            "mx"),
        "2026-11-29T20:38:50Z mx postfix/qmgr: hello");
    EXPECT_EQ(line_of("<22>1 2026-11-29T20:38:50+00:00 h postfix/smtp 9 - -"),
              "2026-11-29T20:38:50+00:00 h postfix/smtp[9]: ");
}

TEST(FollowSyslogParse, EmbeddedNewlinesAndNulsCannotSplitALine) {
    std::string d = "<22>Nov 29 20:38:50 h postfix/smtp[1]: a\nb\rc";
    d += '\0';
    d += "d";
    EXPECT_EQ(line_of(d), "Nov 29 20:38:50 h postfix/smtp[1]: a b c d");
}

TEST(FollowSyslogParse, InvalidDatagramsAreClearErrors) {
    for (std::string_view bad : {"", "no pri", "<>Nov 29 20:38:50 h p: m", "<192>Nov 29 20:38:50 h p: m",
                                 "<1234>Nov 29 20:38:50 h p: m", "<22", "<22>", "<22>garbage without time",
                                 "<22>Foo 29 20:38:50 h p: m", "<22>1 2026-13-xx h a 1 - - m",
                                 "<22>1 2026-11-29T20:38:50Z h a 1 - [unterminated", "<22>1 - h a 1 - - m",
                                 "<22>1 2026-11-29T20:38:50Z h a 1 - -junk"}) {
        auto r = syslog_datagram_to_line(bad);
        EXPECT_FALSE(r.ok()) << bad;
        if (!r.ok()) {
            EXPECT_EQ(r.error().kind, ErrorKind::invalid_input);
        }
    }
}

TEST(FollowSyslogParse, OutputIsBounded) {
    std::string d = "<22>Nov 29 20:38:50 h postfix/smtp[1]: " + std::string(5000, 'x');
    auto r = syslog_datagram_to_line(d, "localhost", 1000);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->line.size(), 1000u);
    EXPECT_TRUE(r->truncated);
}

void send_unix(const std::string& path, std::string_view datagram) {
    int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    std::memcpy(sun.sun_path, path.c_str(), path.size() + 1);
    ASSERT_EQ(
        ::sendto(fd, datagram.data(), datagram.size(), 0, reinterpret_cast<sockaddr*>(&sun), sizeof sun),
        static_cast<ssize_t>(datagram.size()));
    ::close(fd);
}

TEST(FollowSyslogSocket, UnixDatagramSocketDeliversLinesAndCountsBadOnes) {
    TempDir dir;
    auto path = dir / "postfix.sock";
    auto s = fast_settings();
    s.syslog_default_host = "mx1";
    auto src = open_syslog_unix_source(path, s);
    ASSERT_TRUE(src.ok()) << src.error().message;
    send_unix(path, "<22>Nov 29 20:38:50 postfix/smtp[1]: first");
    send_unix(path, "not syslog at all");
    send_unix(path, "<22>1 2026-11-29T20:38:50.5Z h postfix/smtp 2 - - second");
    auto got = drain(**src, 2);
    EXPECT_EQ(texts(got), (Lines{"Nov 29 20:38:50 mx1 postfix/smtp[1]: first",
                                 "2026-11-29T20:38:50.5Z h postfix/smtp[2]: second"}));
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].position, 1u);
    EXPECT_EQ(got[1].position, 3u);
    auto st = (*src)->status();
    EXPECT_EQ(st.lines_skipped, 1u);
    EXPECT_EQ(st.kind, "syslog-unix");
    EXPECT_EQ(st.source, "syslog:unix:" + path);
    EXPECT_EQ((*src)->committed().offset, 3u);
    EXPECT_FALSE(st.last_error.empty());
    src->reset();
    EXPECT_FALSE(std::filesystem::exists(path)) << "the socket file is removed with the source";
}

// Without max_datagram_bytes, a datagram has room for a max_line_bytes line and
// its header: a line is cut at max_line_bytes, whatever its size below 64 KiB.
TEST(FollowSyslogSocket, DatagramsHoldALineOfMaxLineBytes) {
    FollowerSettings d;
    EXPECT_EQ(datagram_limit(d), 65535u) << "64 KiB lines by default";
    d.max_line_bytes = 1024;
    EXPECT_EQ(datagram_limit(d), 8192u) << "at least 8 KiB";
    d.max_line_bytes = 20000;
    EXPECT_EQ(datagram_limit(d), 21024u);
    d.max_datagram_bytes = 1024;
    EXPECT_EQ(datagram_limit(d), 1024u) << "an explicit size wins";

    TempDir dir;
    auto path = dir / "s";
    auto s = fast_settings();
    s.max_line_bytes = 20000;
    auto src = open_syslog_unix_source(path, s);
    ASSERT_TRUE(src.ok()) << src.error().message;
    const std::string head = "Nov 29 20:38:50 h postfix/smtp[1]: ";
    send_unix(path, "<22>" + head + std::string(15000, 'w'));
    send_unix(path, "<22>" + head + std::string(30000, 'c'));
    auto got = drain(**src, 2);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_FALSE(got[0].truncated);
    EXPECT_EQ(got[0].text.size(), head.size() + 15000);
    EXPECT_TRUE(got[1].truncated);
    EXPECT_EQ(got[1].text.size(), 20000u);
}

TEST(FollowSyslogSocket, RefusesToReplaceAFileThatIsNotASocket) {
    TempDir dir;
    auto path = dir / "regular";
    test::append(path, "keep me\n");
    EXPECT_FALSE(open_syslog_unix_source(path, fast_settings()).ok());
    EXPECT_EQ(test::slurp(path), "keep me\n");
}

TEST(FollowSyslogSocket, RefusedBatchIsKeptAndOfferedAgain) {
    TempDir dir;
    auto path = dir / "s";
    auto src = open_syslog_unix_source(path, fast_settings());
    ASSERT_TRUE(src.ok());
    send_unix(path, "<22>Nov 29 20:38:50 h postfix/smtp[1]: a");
    int calls = 0;
    Lines seen;
    auto consumer = [&](const LineBatch& b) -> Status {
        if (++calls == 1) return make_error(ErrorKind::unavailable, "busy");
        for (const auto& l : b.lines) seen.push_back(l.text);
        return {};
    };
    EXPECT_EQ((*src)->poll_once(consumer, 500ms).value_or(99), 0u);
    send_unix(path, "<22>Nov 29 20:38:51 h postfix/smtp[1]: b");
    EXPECT_EQ((*src)->poll_once(consumer, 500ms).value_or(99), 1u);
    EXPECT_EQ((*src)->poll_once(consumer, 500ms).value_or(99), 1u);
    EXPECT_EQ(seen, (Lines{"Nov 29 20:38:50 h postfix/smtp[1]: a", "Nov 29 20:38:51 h postfix/smtp[1]: b"}));
}

template <typename Addr>
void send_udp(int family, const Addr& to, std::string_view datagram) {
    int fd = ::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(
        ::sendto(fd, datagram.data(), datagram.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to),
        static_cast<ssize_t>(datagram.size()));
    ::close(fd);
}

TEST(FollowSyslogSocket, UdpOnIpv4LoopbackWithOversizedDatagramCut) {
    auto s = fast_settings();
    s.max_datagram_bytes = 1024;
    auto src = open_syslog_udp_source("127.0.0.1", 0, s);
    ASSERT_TRUE(src.ok()) << src.error().message;
    std::uint16_t port = bound_port(**src);
    ASSERT_NE(port, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    send_udp(AF_INET, to, "<22>Nov 29 20:38:50 h postfix/smtp[1]: small");
    send_udp(AF_INET, to, "<22>Nov 29 20:38:50 h postfix/smtp[1]: " + std::string(3000, 'L'));
    auto got = drain(**src, 2);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].text, "Nov 29 20:38:50 h postfix/smtp[1]: small");
    EXPECT_TRUE(got[1].truncated);
    EXPECT_EQ(got[1].text.size(), 1024u - 4) << "the datagram is cut at 1024 bytes, then its <22> goes";
    EXPECT_EQ((*src)->status().lines_truncated, 1u);
    EXPECT_EQ((*src)->status().kind, "syslog-udp");
}

TEST(FollowSyslogSocket, UdpOnIpv6Loopback) {
    auto src = open_syslog_udp_source("::1", 0, fast_settings());
    if (!src.ok()) {
        if (std::getenv("CI")) FAIL() << "no IPv6 loopback: " << src.error().message;
        GTEST_SKIP() << "NO IPv6 LOOPBACK ON THIS MACHINE: " << src.error().message;
    }
    sockaddr_in6 to{};
    to.sin6_family = AF_INET6;
    to.sin6_port = htons(bound_port(**src));
    to.sin6_addr = in6addr_loopback;
    send_udp(AF_INET6, to, "<22>1 2026-11-29T20:38:50Z h postfix/smtp 1 - - v6");
    EXPECT_EQ(texts(drain(**src, 1)), (Lines{"2026-11-29T20:38:50Z h postfix/smtp[1]: v6"}));
}

TEST(FollowSyslogSocket, RefusesNonLoopbackAddresses) {
    for (const char* addr :
         {"0.0.0.0", "::", "192.168.1.1", "10.0.0.1", "::ffff:127.0.0.1", "localhost", ""}) {
        auto src = open_syslog_udp_source(addr, 0, fast_settings());
        EXPECT_FALSE(src.ok()) << addr;
        if (!src.ok()) {
            EXPECT_EQ(src.error().kind, ErrorKind::config);
        }
    }
}

// sources[].allow_non_loopback: the address is bound as given. The test binds
// nothing but loopback: an address of the documentation range (192.0.2.0/24,
// never this machine's) gets past the check and fails only at bind().
TEST(FollowSyslogSocket, AllowNonLoopbackLetsTheAddressThrough) {
    auto refused = open_syslog_udp_source("192.0.2.1", 0, fast_settings());
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().message.find("not a loopback address"), std::string::npos);
    auto allowed = open_syslog_udp_source("192.0.2.1", 0, fast_settings(), true);
    ASSERT_FALSE(allowed.ok()) << "192.0.2.1 is not an address of this machine";
    EXPECT_EQ(allowed.error().kind, ErrorKind::io) << allowed.error().message;
    EXPECT_NE(allowed.error().message.find("bind 192.0.2.1:0"), std::string::npos) << allowed.error().message;
    auto name = open_syslog_udp_source("localhost", 0, fast_settings(), true);
    ASSERT_FALSE(name.ok());
    EXPECT_NE(name.error().message.find("not an IP address"), std::string::npos);
    auto loop = open_syslog_udp_source("127.0.0.1", 0, fast_settings(), true);
    EXPECT_TRUE(loop.ok());
}

TEST(FollowSyslogSocket, StopWakesAWaitingSource) {
    auto src = open_syslog_udp_source("127.0.0.1", 0, fast_settings());
    ASSERT_TRUE(src.ok());
    auto started = std::chrono::steady_clock::now();
    std::thread t([&] { (void)(*src)->next_batch(30s); });
    std::this_thread::sleep_for(30ms);
    (*src)->stop();
    t.join();
    EXPECT_LT(std::chrono::steady_clock::now() - started, 2s);
}

}  // namespace
}  // namespace retryguard
