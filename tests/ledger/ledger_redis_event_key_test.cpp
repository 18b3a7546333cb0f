// The event-key secret on Redis (docs/ledger.md "Event keys"): one key under
// the prefix, shared by every host, with a TTL, and the upgrade of a ledger
// whose seen set holds FNV-1a keys from before the secret. Label: redis.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <cstdio>

#include "ledger/event_key_upgrade.hpp"
#include "ledger/ledger_events.hpp"
#include "ledger/redis_server.hpp"
#include "retryguard/ledger/ledger.hpp"

namespace retryguard::ledger_test {
namespace {

std::string hex_key(std::uint64_t key) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(key));
    return buf;
}

struct Raw {
    redisContext* c;
    explicit Raw(int port) : c(redisConnect("127.0.0.1", port)) {}
    ~Raw() {
        if (c) redisFree(c);
    }
    Raw(const Raw&) = delete;
    Raw& operator=(const Raw&) = delete;
    // The reply as an integer, or -1 when it is not one.
    long long integer(const std::vector<std::string>& argv) {
        std::vector<const char*> p;
        std::vector<std::size_t> n;
        for (const auto& a : argv) p.push_back(a.data()), n.push_back(a.size());
        auto* r =
            static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(argv.size()), p.data(), n.data()));
        long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
        if (r) freeReplyObject(r);
        return v;
    }
};

// A ledger on the shared server under `prefix` (nullptr, and a failure, when it cannot open).
std::unique_ptr<Ledger> open_on(const std::string& prefix) {
    auto l = open_ledger(RedisServer::shared()->options(prefix));
    EXPECT_TRUE(l.ok()) << l.error().message;
    return l.ok() ? std::move(l).value() : nullptr;
}

TEST(LedgerRedisEventKey, HostsOfAFleetShareOneSecretThatHasATimeToLive) {
    RETRYGUARD_REQUIRE_REDIS(RedisServer::shared());
    auto first = open_on("rgkey-fleet:"), second = open_on("rgkey-fleet:");
    ASSERT_TRUE(first && second);
    auto k1 = first->event_keyer(), k2 = second->event_keyer();
    ASSERT_TRUE(k1.has_value() && k2.has_value());
    EXPECT_EQ(k1->secret, k2->secret);
    Raw raw(RedisServer::shared()->port());
    EXPECT_GT(raw.integer({"TTL", "rgkey-fleet:event_keyer"}), 0);
}

TEST(LedgerRedisEventKey, LedgerFromBeforeTheSecretKeepsItsReplaysSeen) {
    RETRYGUARD_REQUIRE_REDIS(RedisServer::shared());
    const std::string prefix = "rgkey-upgrade:";
    const std::vector<IngestItem> old = {client("Q1", 100), queue_active("Q1", 101, "a@src.test"),
                                         deferred("Q1", 102, "u@dest.test")};
    {
        auto l = open_on(prefix);
        ASSERT_TRUE(l);
        auto r = l->ingest(old, std::nullopt);
        ASSERT_TRUE(r.ok()) << r.error().message;
        ASSERT_EQ(r->applied, old.size());
    }
    // As the version before the secret left it: no secret, FNV-1a keys in the
    // one sorted set it kept (no per-hour sets).
    Raw raw(RedisServer::shared()->port());
    const std::int64_t hour = to_micros(old.front().event.time) / 3'600'000'000LL;
    ASSERT_EQ(hour, to_micros(old.back().event.time) / 3'600'000'000LL);
    ASSERT_GE(raw.integer({"DEL", prefix + "event_keyer", prefix + "seen", prefix + "seen-hours",
                           prefix + "seen:" + std::to_string(hour)}),
              1);
    for (const auto& item : old)
        ASSERT_EQ(raw.integer({"ZADD", prefix + "seen", std::to_string(to_micros(item.event.time)),
                               hex_key(fnv_event_key(item.event))}),
                  1);

    auto l = open_on(prefix);
    ASSERT_TRUE(l);
    const std::vector<IngestItem> later = {deferred("Q1", 700, "u@dest.test"),
                                           sent("Q1", 900, "u@dest.test")};
    // Old keys in the sorted set (ZRANK: the member's rank, or nil, -1 here,
    // when absent), new ones in the set of their hour.
    expect_upgrade_keeps_replays(*l, old, later, [&](std::int64_t t, std::uint64_t key) {
        return raw.integer({"ZRANK", prefix + "seen", hex_key(key)}) >= 0 ||
               raw.integer(
                   {"SISMEMBER", prefix + "seen:" + std::to_string(t / 3'600'000'000LL), hex_key(key)}) == 1;
    });
}

}  // namespace
}  // namespace retryguard::ledger_test
