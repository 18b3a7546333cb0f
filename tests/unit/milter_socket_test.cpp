// milter_socket_test.cpp -- the OpenDKIM-style socket spec.
#include <gtest/gtest.h>

#include "retryguard/socket_spec.hpp"

using namespace retryguard;

TEST(MilterSocketSpec, UnixAndLocalAreTheSame) {
    auto a = parse_socket_spec("unix:/var/spool/postfix/retryguard/milter.sock");
    auto b = parse_socket_spec("local:/var/spool/postfix/retryguard/milter.sock");
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->kind, SocketSpec::Kind::unix_path);
    EXPECT_EQ(a->path, "/var/spool/postfix/retryguard/milter.sock");
    EXPECT_EQ(a->libmilter_spec(), b->libmilter_spec());
}

TEST(MilterSocketSpec, InetWithPortAndHost) {
    auto s = parse_socket_spec("inet:8891@127.0.0.1");
    ASSERT_TRUE(s);
    EXPECT_EQ(s->kind, SocketSpec::Kind::inet);
    EXPECT_EQ(s->port, 8891);
    EXPECT_EQ(s->host, "127.0.0.1");
    EXPECT_EQ(s->libmilter_spec(), "inet:8891@127.0.0.1");
    auto v6 = parse_socket_spec("inet6:8891@[::1]");
    ASSERT_TRUE(v6);
    EXPECT_EQ(v6->host, "::1");
    EXPECT_EQ(v6->libmilter_spec(), "inet6:8891@::1");
}

TEST(MilterSocketSpec, RejectsWhatLibmilterWouldMisread) {
    for (const char* bad : {"", "/tmp/x.sock", "unix:relative.sock", "tcp:25@localhost", "inet:0@127.0.0.1",
                            "inet:65536@127.0.0.1", "inet:88x1@127.0.0.1", "inet:@127.0.0.1", "inet:8891@"}) {
        auto r = parse_socket_spec(bad);
        EXPECT_FALSE(r) << bad;
        if (!r) {
            EXPECT_EQ(r.error().kind, ErrorKind::config) << bad;
        }
    }
}
