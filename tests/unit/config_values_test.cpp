// config_values_test.cpp -- the value syntaxes: durations, sizes, sockets.
#include <gtest/gtest.h>

#include "retryguard/config/config.hpp"

namespace cfg = retryguard::config;
using namespace std::chrono_literals;

TEST(ConfigValues, Durations) {
    EXPECT_EQ(cfg::parse_duration("30s", false), cfg::Duration(30s));
    EXPECT_EQ(cfg::parse_duration("15m", false), cfg::Duration(15min));
    EXPECT_EQ(cfg::parse_duration("48h", false), cfg::Duration(48h));
    EXPECT_EQ(cfg::parse_duration("3d", false), cfg::Duration(72h));
    EXPECT_EQ(cfg::parse_duration("1w", false), cfg::Duration(168h));
    EXPECT_EQ(cfg::parse_duration("1h30m", false), cfg::Duration(90min));
    EXPECT_EQ(cfg::parse_duration("250ms", false), cfg::Duration(250ms));
    EXPECT_EQ(cfg::parse_duration("30", true), cfg::Duration(30s));
    EXPECT_FALSE(cfg::parse_duration("30", false));
    EXPECT_FALSE(cfg::parse_duration("", false));
    EXPECT_FALSE(cfg::parse_duration("-5m", false));
    EXPECT_FALSE(cfg::parse_duration("5 m", false));
    EXPECT_FALSE(cfg::parse_duration("99999999999999999999d", false));
    EXPECT_FALSE(cfg::parse_duration("999999999w", false));
    EXPECT_EQ(cfg::format_duration(cfg::Duration(72h)), "3d");
    EXPECT_EQ(cfg::format_duration(cfg::Duration(24h)), "24h");
    EXPECT_EQ(cfg::format_duration(cfg::Duration(48h)), "48h");
    EXPECT_EQ(cfg::format_duration(cfg::Duration(14 * 24h)), "2w");
    EXPECT_EQ(cfg::format_duration(cfg::Duration(90min)), "90m");
    EXPECT_EQ(cfg::format_duration(cfg::Duration(1500ms)), "1500ms");
}

TEST(ConfigValues, Sizes) {
    EXPECT_EQ(cfg::parse_size("64KiB"), 65536u);
    EXPECT_EQ(cfg::parse_size("1MiB"), 1048576u);
    EXPECT_EQ(cfg::parse_size("512B"), 512u);
    EXPECT_FALSE(cfg::parse_size("64"));
    EXPECT_FALSE(cfg::parse_size("64kb"));
    EXPECT_FALSE(cfg::parse_size("KiB"));
    EXPECT_FALSE(cfg::parse_size("99999999GiB"));
    EXPECT_EQ(cfg::format_size(65536), "64KiB");
    EXPECT_EQ(cfg::format_size(1000), "1000B");
}

TEST(ConfigValues, Sockets) {
    auto u = cfg::parse_socket("unix:/var/spool/postfix/retryguard/milter.sock");
    ASSERT_TRUE(u);
    EXPECT_EQ(u->kind, cfg::SocketSpec::Kind::unix_path);
    EXPECT_EQ(u->path, "/var/spool/postfix/retryguard/milter.sock");
    auto l = cfg::parse_socket("local:/run/x.sock");
    ASSERT_TRUE(l);
    EXPECT_EQ(l->kind, cfg::SocketSpec::Kind::unix_path);
    auto i = cfg::parse_socket("inet:8891@127.0.0.1");
    ASSERT_TRUE(i);
    EXPECT_EQ(i->kind, cfg::SocketSpec::Kind::inet);
    EXPECT_EQ(i->port, 8891);
    EXPECT_EQ(i->host, "127.0.0.1");
    auto i6 = cfg::parse_socket("inet6:8891@[::1]");
    ASSERT_TRUE(i6);
    EXPECT_EQ(i6->kind, cfg::SocketSpec::Kind::inet6);
    EXPECT_EQ(i6->host, "::1");
    EXPECT_TRUE(cfg::parse_socket("inet:10040@localhost"));
    EXPECT_TRUE(cfg::parse_socket("inet:0@127.0.0.1"));  // any free port (tests; the bound port is reported)
    EXPECT_FALSE(cfg::parse_socket("inet:65536@127.0.0.1"));
    EXPECT_FALSE(cfg::parse_socket("inet6:1@127.0.0.1"));
    EXPECT_FALSE(cfg::parse_socket("unix:" + std::string(200, 'a')));
    EXPECT_FALSE(cfg::parse_socket("/var/run/x.sock"));
}
