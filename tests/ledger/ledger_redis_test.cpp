// The ledger contract on the Redis backend (a private redis-server per test
// process), plus what only Redis has: fail-open when the server goes away,
// the EVALSHA -> EVAL fallback, a TTL on every key, and the stream of identity
// changes that keeps the milters' identity filters current. Label: redis.
#include "ledger/ledger_contract.hpp"
#include "ledger/redis_server.hpp"
#include "retryguard/identity/identity_filter.hpp"

namespace retryguard::ledger_test {
namespace {

struct StopServer : testing::Environment {
    void TearDown() override { RedisServer::stop_shared(); }
};
[[maybe_unused]] auto* const kStop = testing::AddGlobalTestEnvironment(new StopServer);

LedgerBackend redis_backend() {
    LedgerBackend b;
    b.name = "redis";
    b.open = [](const std::string& tag) -> Result<std::unique_ptr<Ledger>> {
        auto* server = RedisServer::shared();
        if (!server) return make_error(ErrorKind::unavailable, "no redis-server");
        return open_ledger(server->options("rgtest:" + tag + ":"));
    };
    b.precondition = [] { RETRYGUARD_REQUIRE_REDIS(RedisServer::shared()); };
    return b;
}

INSTANTIATE_TEST_SUITE_P(Redis, LedgerContract, testing::Values(redis_backend()), backend_name);

struct RawRedis {
    redisContext* c = nullptr;
    explicit RawRedis(int port) { c = redisConnect("127.0.0.1", port); }
    ~RawRedis() {
        if (c) redisFree(c);
    }
    redisReply* cmd(const char* fmt, const char* arg = nullptr) {
        return static_cast<redisReply*>(arg ? redisCommand(c, fmt, arg) : redisCommand(c, fmt));
    }
};

TEST(LedgerRedis, EveryKeyHasATimeToLive) {
    auto* server = RedisServer::shared();
    RETRYGUARD_REQUIRE_REDIS(server);
    auto l = open_ledger(server->options("rgttl:"));
    ASSERT_TRUE(l.ok());
    FollowerPosition p;
    p.source = "file:/x";
    ASSERT_TRUE((*l)->ingest(synthetic_stream(30), p).ok());
    MessageIdentity id{"ID1", "<i@x>", "fp", "s@x", {"r@d0.example"}, at(5)};
    ASSERT_TRUE((*l)->record_identity(id).ok());
    ASSERT_TRUE((*l)->set_flag(Flag{0, "d0.example", "r", at(1), std::nullopt, std::nullopt}).ok());
    ASSERT_TRUE((*l)->add_verdict_count("v", 1).ok());
    ASSERT_TRUE((*l)->put_state("k", "v").ok());
    ASSERT_TRUE((*l)->set_destination_state(DestinationKind::domain, "d9.example", "watch", at(9)).ok());
    RawRedis raw(server->port());
    auto* keys = raw.cmd("KEYS %s", "rgttl:*");
    ASSERT_TRUE(keys && keys->type == REDIS_REPLY_ARRAY);
    EXPECT_GT(keys->elements, 100u);
    for (std::size_t i = 0; i < keys->elements; ++i) {
        std::string key(keys->element[i]->str, keys->element[i]->len);
        auto* ttl = raw.cmd("TTL %s", key.c_str());
        ASSERT_TRUE(ttl && ttl->type == REDIS_REPLY_INTEGER);
        EXPECT_GT(ttl->integer, 0) << key;
        freeReplyObject(ttl);
    }
    freeReplyObject(keys);
}

TEST(LedgerRedis, ScriptsForgottenByTheServerAreSentAgain) {
    auto* server = RedisServer::shared();
    RETRYGUARD_REQUIRE_REDIS(server);
    auto l = open_ledger(server->options("rgflush:"));
    ASSERT_TRUE(l.ok());
    ASSERT_TRUE((*l)->ingest(std::vector<IngestItem>{deferred("Q1", 1, "a@b.test")}, std::nullopt).ok());
    RawRedis raw(server->port());
    auto* r = raw.cmd("SCRIPT FLUSH");
    ASSERT_TRUE(r);
    freeReplyObject(r);
    auto again = (*l)->ingest(std::vector<IngestItem>{deferred("Q1", 2, "a@b.test")}, std::nullopt);
    ASSERT_TRUE(again.ok()) << again.error().message;
    EXPECT_EQ(again->applied, 1u);
    auto rs = (*l)->get_recipients("Q1");
    ASSERT_TRUE(rs.ok() && rs->size() == 1);
    EXPECT_EQ((*rs)[0].attempts, 2);
}

// Event keys live in one set per hour of event time (docs/ledger.md, "Redis
// backend"): a replay is recognised whichever batch it comes in, the sets are
// counted by stats() and removed whole by prune().
TEST(LedgerRedis, ReplaysAreRecognisedInThePerHourSeenSets) {
    auto* server = RedisServer::shared();
    RETRYGUARD_REQUIRE_REDIS(server);
    auto l = open_ledger(server->options("rgseen:"));
    ASSERT_TRUE(l.ok());
    const auto stream = synthetic_stream(2000);  // about 2 h of event time
    // in batches of the import's size (one batch of all would be a slow script)
    for (std::size_t from = 0; from < stream.size(); from += 2000) {
        const auto n = std::min<std::size_t>(2000, stream.size() - from);
        auto first = (*l)->ingest(std::span<const IngestItem>(stream).subspan(from, n), std::nullopt);
        ASSERT_TRUE(first.ok()) << first.error().message;
        EXPECT_EQ(first->applied, n);
    }
    RawRedis raw(server->port());
    auto* hours = raw.cmd("ZCARD rgseen:seen-hours");
    ASSERT_TRUE(hours && hours->type == REDIS_REPLY_INTEGER);
    EXPECT_GE(hours->integer, 2);
    freeReplyObject(hours);
    auto* old = raw.cmd("EXISTS rgseen:seen");
    ASSERT_TRUE(old && old->type == REDIS_REPLY_INTEGER);
    EXPECT_EQ(old->integer, 0);  // the sorted set of older builds is not written
    freeReplyObject(old);
    auto s = (*l)->stats();
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->seen_events, static_cast<std::int64_t>(stream.size()));
    // replayed in other batch boundaries: every event a duplicate
    for (std::size_t from = 0; from < stream.size(); from += 777) {
        const auto n = std::min<std::size_t>(777, stream.size() - from);
        auto again = (*l)->ingest(std::span<const IngestItem>(stream).subspan(from, n), std::nullopt);
        ASSERT_TRUE(again.ok()) << again.error().message;
        EXPECT_EQ(again->applied, 0u);
        EXPECT_EQ(again->duplicates, n);
        EXPECT_EQ(again->journal_seq, 0u);
    }
    RetentionPolicy p;
    auto pruned = (*l)->prune(p, at(1795000000 + 100 * 86400));
    ASSERT_TRUE(pruned.ok());
    EXPECT_EQ(pruned->seen_events, static_cast<std::int64_t>(stream.size()));
    auto after = (*l)->stats();
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->seen_events, 0);
}

// A ledger written by a build before the per-hour seen sets keeps its event
// keys in the sorted set <prefix>seen: they still count as seen.
TEST(LedgerRedis, ReplaysOfEventsRecordedByAnOlderLayoutAreRecognised) {
    auto* server = RedisServer::shared();
    RETRYGUARD_REQUIRE_REDIS(server);
    auto l = open_ledger(server->options("rgold:"));
    ASSERT_TRUE(l.ok());
    const auto stream = synthetic_stream(300);
    const auto half = std::span<const IngestItem>(stream).first(stream.size() / 2);
    ASSERT_TRUE((*l)->ingest(half, std::nullopt).ok());
    // turn the per-hour sets into the older layout: one sorted set
    RawRedis raw(server->port());
    auto* hours = raw.cmd("ZRANGE rgold:seen-hours 0 -1");
    ASSERT_TRUE(hours && hours->type == REDIS_REPLY_ARRAY);
    std::size_t moved = 0;
    for (std::size_t i = 0; i < hours->elements; ++i) {
        const std::string key = "rgold:seen:" + std::string(hours->element[i]->str, hours->element[i]->len);
        auto* members = raw.cmd("SMEMBERS %s", key.c_str());
        ASSERT_TRUE(members && members->type == REDIS_REPLY_ARRAY);
        for (std::size_t j = 0; j < members->elements; ++j) {
            auto* add = static_cast<redisReply*>(redisCommand(
                raw.c, "ZADD rgold:seen 1 %b", members->element[j]->str, members->element[j]->len));
            ASSERT_TRUE(add);
            freeReplyObject(add);
            ++moved;
        }
        freeReplyObject(members);
        freeReplyObject(raw.cmd("DEL %s", key.c_str()));
    }
    freeReplyObject(hours);
    freeReplyObject(raw.cmd("DEL rgold:seen-hours"));
    ASSERT_EQ(moved, half.size());
    auto whole = (*l)->ingest(stream, std::nullopt);
    ASSERT_TRUE(whole.ok()) << whole.error().message;
    EXPECT_EQ(whole->duplicates, half.size());
    EXPECT_EQ(whole->applied, stream.size() - half.size());
    for (std::size_t i = 0; i < stream.size(); ++i) EXPECT_EQ(whole->fresh[i], i >= half.size()) << i;
}

// An ACL user whose command list predates SMISMEMBER (docs/ledger.md,
// "Running a fleet") still ingests, checking each event with its own SADD.
TEST(LedgerRedis, WithoutSmismemberEventsAreCheckedOneByOne) {
    RETRYGUARD_REQUIRE_REDIS(RedisServer::shared());
    RedisServer server;  // private: this test adds a user
    ASSERT_TRUE(server.running());
    {
        RawRedis raw(server.port());
        auto* r = raw.cmd("ACL SETUSER oldlist on >old-pw ~* &* +@all -smismember -zmscore");
        ASSERT_TRUE(r && r->type == REDIS_REPLY_STATUS);
        freeReplyObject(r);
    }
    auto o = server.options("rgacl:");
    o.redis_username = "oldlist";
    o.redis_password = "old-pw";
    auto l = open_ledger(o);
    ASSERT_TRUE(l.ok()) << l.error().message;
    const auto stream = synthetic_stream(100);
    auto first = (*l)->ingest(std::span<const IngestItem>(stream).first(400), std::nullopt);
    ASSERT_TRUE(first.ok()) << first.error().message;
    EXPECT_EQ(first->applied, 400u);
    auto whole = (*l)->ingest(stream, std::nullopt);
    ASSERT_TRUE(whole.ok()) << whole.error().message;
    EXPECT_EQ(whole->duplicates, 400u);
    EXPECT_EQ(whole->applied, stream.size() - 400);
    // the same ledger as one written with SMISMEMBER
    auto ref = open_ledger(RedisServer::shared()->options("rgaclref:"));
    ASSERT_TRUE(ref.ok());
    ASSERT_TRUE((*ref)->ingest(stream, std::nullopt).ok());
    EXPECT_EQ(dump(**l, 100), dump(**ref, 100));
}

// The set a lookup by content reads holds only the copies it can match
// (queued, unfinished), so its size follows the queue, not how many recorded
// messages ever shared the content (docs/milter.md, "Identical content").
TEST(LedgerRedis, TheFingerprintSetHoldsOnlyQueuedUnfinishedCopies) {
    auto* server = RedisServer::shared();
    RETRYGUARD_REQUIRE_REDIS(server);
    auto l = open_ledger(server->options("rgfp:"));
    ASSERT_TRUE(l.ok());
    RawRedis raw(server->port());
    auto scard = [&] {
        auto* r = raw.cmd("SCARD %s", "rgfp:fp:fp-many");
        long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
        if (r) freeReplyObject(r);
        return n;
    };
    std::vector<MessageIdentity> ids;
    for (int i = 0; i < 100; ++i)
        ids.push_back(MessageIdentity{"M" + std::to_string(i),
                                      "<m" + std::to_string(i) + "@x>",
                                      "fp-many",
                                      "s@x.test",
                                      {"r" + std::to_string(i) + "@d.test"},
                                      at(i)});
    ASSERT_TRUE((*l)->record_identities(ids).ok());
    EXPECT_EQ(scard(), 0) << "recorded, not yet picked up by the queue manager";
    std::vector<IngestItem> events;
    for (int i = 0; i < 100; ++i)
        events.push_back(queue_active("M" + std::to_string(i), 200 + i, "s@x.test"));
    ASSERT_TRUE((*l)->ingest(events, std::nullopt).ok());
    EXPECT_EQ(scard(), 100);
    events.clear();
    for (int i = 0; i < 90; ++i) events.push_back(removed("M" + std::to_string(i), 400 + i));
    ASSERT_TRUE((*l)->ingest(events, std::nullopt).ok());
    EXPECT_EQ(scard(), 10);
    // Recorded after the log showed it queued (the log came first): listed at once.
    ASSERT_TRUE(
        (*l)->ingest(std::vector<IngestItem>{queue_active("LATE", 600, "s@x.test")}, std::nullopt).ok());
    ASSERT_TRUE((*l)->record_identity(
                        MessageIdentity{"LATE", "<late@x>", "fp-many", "s@x.test", {"r@d.test"}, at(601)})
                    .ok());
    EXPECT_EQ(scard(), 11);
}

// The milter's batches go out pipelined (more than one chunk here); a server
// that forgot the script answers NOSCRIPT to each, and each is sent again.
TEST(LedgerRedis, PipelinedIdentityBatchesSurviveAForgottenScript) {
    auto* server = RedisServer::shared();
    RETRYGUARD_REQUIRE_REDIS(server);
    auto l = open_ledger(server->options("rgpipe:"));
    ASSERT_TRUE(l.ok());
    auto batch = [](int from, int n) {
        std::vector<MessageIdentity> ids;
        for (int i = from; i < from + n; ++i)
            ids.push_back({"PL" + std::to_string(i),
                           "<pl" + std::to_string(i) + "@x>",
                           "",
                           "s@x",
                           {"r@d.test"},
                           at(i)});
        return ids;
    };
    ASSERT_TRUE((*l)->record_identities(batch(0, 2500)).ok());
    RawRedis raw(server->port());
    freeReplyObject(raw.cmd("SCRIPT FLUSH"));
    ASSERT_TRUE((*l)->record_identities(batch(2500, 10)).ok());
    for (int i : {0, 999, 1000, 2499, 2500, 2509}) {
        auto m = (*l)->find_messages_by_message_id("<pl" + std::to_string(i) + "@x>");
        ASSERT_TRUE(m.ok());
        EXPECT_EQ(m->size(), 1u) << i;
    }
    std::size_t listed = 0;
    ASSERT_TRUE((*l)->for_each_open_identity([&](std::string_view, std::string_view) { ++listed; }).ok());
    EXPECT_EQ(listed, 2510u);
}

TEST(LedgerRedis, ServerGoneFailsOpenQuicklyAndRecovers) {
    RETRYGUARD_REQUIRE_REDIS(RedisServer::shared());
    RedisServer server;  // private: this test stops it
    ASSERT_TRUE(server.running());
    auto o = server.options("rgdown:");
    o.connect_timeout = std::chrono::milliseconds(100);
    o.command_timeout = std::chrono::milliseconds(100);
    o.reconnect_min = std::chrono::milliseconds(50);
    o.reconnect_max = std::chrono::milliseconds(200);
    int warnings = 0;
    o.warn = [&](std::string_view) { ++warnings; };
    auto opened = open_ledger(o);
    ASSERT_TRUE(opened.ok());
    auto& l = *opened;
    ASSERT_TRUE(l->ingest(std::vector<IngestItem>{deferred("Q1", 1, "a@b.test")}, std::nullopt).ok());

    server.stop();
    auto before = l->counters();
    PendingCopyQuery q;
    q.message_id = "<x@y>";
    q.recipients = {"a@b.test"};
    for (int i = 0; i < 20; ++i) {
        auto start = std::chrono::steady_clock::now();
        auto r = l->find_pending_copies(q);
        auto took = std::chrono::steady_clock::now() - start;
        ASSERT_FALSE(r.ok());
        EXPECT_EQ(r.error().kind, ErrorKind::unavailable) << r.error().message;
        EXPECT_LT(took, std::chrono::milliseconds(400));
        auto w = l->ingest(std::vector<IngestItem>{deferred("Q1", 10 + i, "a@b.test")}, std::nullopt);
        ASSERT_FALSE(w.ok());
        EXPECT_EQ(w.error().kind, ErrorKind::unavailable);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    auto during = l->counters();
    EXPECT_EQ(during.unavailable - before.unavailable, 40u);
    EXPECT_EQ(during.failures - before.failures, 40u);
    EXPECT_GT(during.reconnects, before.reconnects);
    EXPECT_GT(warnings, 0);

    ASSERT_TRUE(server.start()) << "could not restart redis-server on port " << server.port();
    bool recovered = false;
    for (int i = 0; i < 100 && !recovered; ++i) {
        recovered = l->ingest(std::vector<IngestItem>{deferred("Q2", 100, "c@d.test")}, std::nullopt).ok();
        if (!recovered) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(recovered);
    auto rs = l->get_recipients("Q2");
    ASSERT_TRUE(rs.ok());
    EXPECT_EQ(rs->size(), 1u);
}

// A Redis restart between two lookups: the milter's next lookup finds its
// connection closed. A read cannot have changed anything, so it is sent again
// on a new connection at once and answered, instead of failing open for the
// whole reconnect back-off.
TEST(LedgerRedis, TheFirstLookupAfterARedisRestartIsAnswered) {
    RETRYGUARD_REQUIRE_REDIS(RedisServer::shared());
    RedisServer server;  // private: this test restarts it
    ASSERT_TRUE(server.running());
    auto o = server.options("rgrestart:");
    o.reconnect_min = std::chrono::seconds(30);  // a failure would fail open for 30 s
    o.reconnect_max = std::chrono::seconds(30);
    std::vector<std::string> warnings;
    o.warn = [&](std::string_view w) { warnings.emplace_back(w); };
    auto opened = open_ledger(o);
    ASSERT_TRUE(opened.ok());
    auto& l = *opened;
    PendingCopyQuery q;
    q.message_id = "<x@y>";
    q.recipients = {"a@b.test"};
    ASSERT_TRUE(l->find_pending_copies(q).ok());  // connected
    server.stop();
    ASSERT_TRUE(server.start()) << "could not restart redis-server on port " << server.port();
    auto r = l->find_pending_copies(q);
    EXPECT_TRUE(r.ok()) << r.error().message;
    std::string all;
    for (const auto& w : warnings) all += w + "\n";
    EXPECT_NE(all.find("reconnecting at once for a read"), std::string::npos) << all;
}

TEST(LedgerRedis, AConnectionResetDuringALargeWriteDoesNotKillTheProcess) {
    auto* server = RedisServer::shared();
    RETRYGUARD_REQUIRE_REDIS(server);
    auto events = synthetic_stream(3000);  // several megabytes of arguments in one EVALSHA
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        signal(SIGPIPE, SIG_DFL);  // as in a host process that never ignored it
        auto o = server->options("rgpipe:");
        o.warn = [](std::string_view) {};
        auto l = open_ledger(o);
        if (!l || !(*l)->put_state("k", "v").ok()) _exit(3);
        RawRedis raw(server->port());
        auto* r = raw.cmd("CLIENT KILL TYPE normal SKIPME yes");
        if (!r) _exit(4);
        freeReplyObject(r);
        auto big = (*l)->ingest(events, std::nullopt);
        if (big.ok()) _exit(5);  // the connection was gone: this must fail...
        if (big.error().kind != ErrorKind::unavailable) _exit(6);
        for (int i = 0; i < 100; ++i) {  // ...and the next calls reconnect
            if ((*l)->put_state("k", "w").ok()) _exit(0);
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        _exit(7);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_FALSE(WIFSIGNALED(status)) << "killed by signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(LedgerRedis, ServerDownAtStartIsNotFatal) {
    LedgerOptions o;
    o.spec = "redis://127.0.0.1:" + std::to_string(free_loopback_port());
    o.connect_timeout = std::chrono::milliseconds(100);
    o.warn = [](std::string_view) {};
    auto l = open_ledger(o);
    ASSERT_TRUE(l.ok()) << "a daemon must start and fail open while Redis is down";
    auto r = (*l)->get_state("x");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().kind, ErrorKind::unavailable);
    EXPECT_EQ((*l)->counters().unavailable, 1u);
}

// ledger.redis.password_file: the ledger authenticates (AUTH password, or
// AUTH user password for a Redis 6 ACL user) on every connection; a wrong
// password is an error the caller fails open on, not a crash.
TEST(LedgerRedis, AuthenticatesWithThePasswordFromTheConfiguration) {
    RETRYGUARD_REQUIRE_REDIS(RedisServer::shared());
    RedisServer server;  // private: this test sets a password on it
    ASSERT_TRUE(server.running());
    {
        timeval tv{1, 0};
        redisContext* c = redisConnectWithTimeout("127.0.0.1", server.port(), tv);
        ASSERT_TRUE(c && !c->err);
        freeReplyObject(redisCommand(c, "ACL SETUSER mta1 on >acl-pw ~* &* +@all"));
        freeReplyObject(redisCommand(c, "CONFIG SET requirepass s3cret"));
        redisFree(c);
    }
    auto o = server.options("rgauth:");
    o.warn = [](std::string_view) {};
    {
        auto none = open_ledger(o);  // no password: the first command is refused
        if (none.ok()) {
            EXPECT_FALSE((*none)->get_message("Q1").ok());
        }
    }
    o.redis_password = "wrong";
    {
        auto wrong = open_ledger(o);
        if (wrong.ok()) {
            EXPECT_FALSE((*wrong)->get_message("Q1").ok());
        }
    }
    o.redis_password = "s3cret";
    auto right = open_ledger(o);
    ASSERT_TRUE(right.ok()) << right.error().message;
    EXPECT_TRUE((*right)->ingest(std::vector<IngestItem>{deferred("Q1", 1, "a@b.test")}, std::nullopt).ok());
    auto msg = (*right)->get_message("Q1");
    ASSERT_TRUE(msg.ok()) << msg.error().message;
    EXPECT_TRUE(msg->has_value());
    o.redis_username = "mta1";
    o.redis_password = "acl-pw";
    auto acl = open_ledger(o);
    ASSERT_TRUE(acl.ok()) << acl.error().message;
    auto seen = (*acl)->get_message("Q1");
    ASSERT_TRUE(seen.ok()) << seen.error().message;
    EXPECT_TRUE(seen->has_value());
}

// Reads the stream until `until` holds or about five seconds passed (a bound
// for a failing test, not a timing assertion); the last read's status.
template <typename Pred>
Status read_until(IdentityStream& stream, IdentityFilter& filter, Pred until) {
    Status st;
    for (int i = 0; i < 50 && !until(); ++i) {
        st = stream.read(std::chrono::milliseconds(100),
                         [&](std::string_view mid, std::string_view fp) { filter.add_normalised(mid, fp); });
        if (!st) return st;
    }
    return st;
}

// The fleet case: host A's milter records a message and A's follower learns
// another Message-ID from the log; host B's identity filter, built from its own
// connection's scan and fed by its own stream connection, learns both keys
// without a rescan.
TEST(LedgerRedis, IdentitiesWrittenOnOneConnectionReachAnotherConnectionsFilter) {
    auto* server = RedisServer::shared();
    RETRYGUARD_REQUIRE_REDIS(server);
    auto a = open_ledger(server->options("rgstream1:"));
    auto b = open_ledger(server->options("rgstream1:"));
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_TRUE((*a)->record_identity({"S0", "<s0@x>", "fp-s0", "s@x", {"r@d.test"}, at(1)}).ok());
    auto stream = (*b)->open_identity_stream();
    ASSERT_TRUE(stream.ok()) << stream.error().message;
    ASSERT_TRUE((*stream)->mark().ok());
    IdentityFilter filter;  // scanned as the milter scans: on the stream's connection
    auto built = filter.rebuild([&](const IdentityFilter::Visitor& v) { return (*stream)->scan(v); });
    ASSERT_TRUE(built.ok()) << built.error().message;
    EXPECT_EQ(*built, 2u);  // S0's Message-ID and fingerprint
    EXPECT_TRUE(filter.may_have_copy("<s0@x>", ""));
    EXPECT_FALSE(filter.may_have_copy("<s1@X>", ""));
    EXPECT_FALSE(filter.may_have_copy("", "fp-s1"));
    EXPECT_FALSE(filter.may_have_copy("<s2@x>", ""));

    ASSERT_TRUE((*a)->record_identity({"S1", "<s1@X>", "fp-s1", "s@x", {"r@d.test"}, at(2)}).ok());
    ASSERT_TRUE((*a)->ingest(std::vector<IngestItem>{message_id("S2", 3, "<s2@x>")}, std::nullopt).ok());
    auto st = read_until(**stream, filter, [&] {
        return filter.may_have_copy("<s1@x>", "") && filter.may_have_copy("", "fp-s1") &&
               filter.may_have_copy("<s2@x>", "");
    });
    ASSERT_TRUE(st.ok()) << st.error().message;
    EXPECT_TRUE(filter.may_have_copy("<s1@X>", ""));
    EXPECT_TRUE(filter.may_have_copy("", "fp-s1"));
    EXPECT_TRUE(filter.may_have_copy("<s2@x>", ""));
    EXPECT_TRUE(filter.ready());
    EXPECT_FALSE(filter.may_have_copy("<never@x>", "fp-never"));  // still a filter
    // and B's own lookup then finds A's copy
    PendingCopyQuery q;
    q.message_id = "<s1@x>";
    q.recipients = {"r@d.test"};
    auto found = (*b)->find_pending_copies(q);
    ASSERT_TRUE(found.ok());
    ASSERT_EQ(found->size(), 1u);
    EXPECT_EQ((*found)[0].queue_id, "S1");
}

// Entries the reader never saw (trimmed, or lost with a Redis that restarted
// without its data) must not be skipped silently: the read fails, so the
// milter stops trusting its filter and scans again.
TEST(LedgerRedis, LostIdentityStreamEntriesAreReportedNotSkipped) {
    auto* server = RedisServer::shared();
    RETRYGUARD_REQUIRE_REDIS(server);
    const std::string prefix = "rgstream2:";
    auto a = open_ledger(server->options(prefix));
    ASSERT_TRUE(a.ok());
    auto stream = (*a)->open_identity_stream();
    ASSERT_TRUE(stream.ok());
    ASSERT_TRUE((*stream)->mark().ok());
    IdentityFilter filter;
    ASSERT_TRUE(filter.rebuild([](const IdentityFilter::Visitor&) { return Status{}; }).ok());
    ASSERT_TRUE((*a)->record_identity({"T1", "<t1@x>", "", "s@x", {"r@d.test"}, at(1)}).ok());
    ASSERT_TRUE(read_until(**stream, filter, [&] { return filter.may_have_copy("<t1@x>", ""); }).ok());
    ASSERT_TRUE(filter.may_have_copy("<t1@x>", ""));

    // T2 and T3 are trimmed away before the reader gets to them
    ASSERT_TRUE((*a)->record_identity({"T2", "<t2@x>", "", "s@x", {"r@d.test"}, at(2)}).ok());
    ASSERT_TRUE((*a)->record_identity({"T3", "<t3@x>", "", "s@x", {"r@d.test"}, at(3)}).ok());
    RawRedis raw(server->port());
    ASSERT_TRUE(raw.c && !raw.c->err);
    freeReplyObject(raw.cmd("XTRIM %s MAXLEN 0", (prefix + "identities-stream").c_str()));
    ASSERT_TRUE((*a)->record_identity({"T4", "<t4@x>", "", "s@x", {"r@d.test"}, at(4)}).ok());
    auto st = read_until(**stream, filter, [] { return false; });
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message.find("skipped"), std::string::npos) << st.error().message;
    // a read without a new mark is refused, not resumed past the gap
    EXPECT_FALSE((*stream)->read(std::chrono::milliseconds(1), [](auto, auto) {}).ok());

    // marked again, it reads on; the scan holds what was lost
    ASSERT_TRUE((*stream)->mark().ok());
    ASSERT_TRUE(
        filter.rebuild([&](const IdentityFilter::Visitor& v) { return (*a)->for_each_open_identity(v); })
            .ok());
    EXPECT_TRUE(filter.may_have_copy("<t2@x>", ""));
    EXPECT_TRUE(filter.may_have_copy("<t3@x>", ""));
    ASSERT_TRUE((*a)->record_identity({"T5", "<t5@x>", "", "s@x", {"r@d.test"}, at(5)}).ok());
    ASSERT_TRUE(read_until(**stream, filter, [&] { return filter.may_have_copy("<t5@x>", ""); }).ok());
    EXPECT_TRUE(filter.may_have_copy("<t5@x>", ""));

    // the whole prefix lost (a Redis restarted without persistence): the
    // numbering starts again at 1, which is not the next one
    for (const char* key : {"identities-stream", "identities-seq"})
        freeReplyObject(raw.cmd("DEL %s", (prefix + key).c_str()));
    // (a new stream's first id comes from the clock: one millisecond on, it is
    // past the last id read, as it always is after a real restart)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE((*a)->record_identity({"T6", "<t6@x>", "", "s@x", {"r@d.test"}, at(6)}).ok());
    st = read_until(**stream, filter, [] { return false; });
    ASSERT_FALSE(st.ok());
}

// A stream reader whose Redis went away says so (the milter then looks every
// message up) and works again once marked after Redis is back.
TEST(LedgerRedis, AnIdentityStreamWhoseServerWentAwayFailsAndRecovers) {
    RETRYGUARD_REQUIRE_REDIS(RedisServer::shared());
    RedisServer server;  // private: this test stops it
    ASSERT_TRUE(server.running());
    auto o = server.options("rgstream3:");
    o.connect_timeout = std::chrono::milliseconds(100);
    o.command_timeout = std::chrono::milliseconds(100);
    o.reconnect_min = std::chrono::milliseconds(50);
    o.reconnect_max = std::chrono::milliseconds(200);
    o.warn = [](std::string_view) {};
    auto l = open_ledger(o);
    ASSERT_TRUE(l.ok());
    auto stream = (*l)->open_identity_stream();
    ASSERT_TRUE(stream.ok());
    ASSERT_TRUE((*stream)->mark().ok());
    server.stop();
    auto st = (*stream)->read(std::chrono::milliseconds(50), [](auto, auto) {});
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().kind, ErrorKind::unavailable) << st.error().message;
    ASSERT_TRUE(server.start());
    bool marked = false;
    for (int i = 0; i < 100 && !marked; ++i) {
        marked = (*stream)->mark().ok();
        if (!marked) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(marked);
    bool recorded = false;  // the ledger's own connection reconnects after its back-off
    for (int i = 0; i < 100 && !recorded; ++i) {
        recorded = (*l)->record_identity({"U1", "<u1@x>", "", "s@x", {"r@d.test"}, at(1)}).ok();
        if (!recorded) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(recorded);
    IdentityFilter filter;
    ASSERT_TRUE(filter.rebuild([](const IdentityFilter::Visitor&) { return Status{}; }).ok());
    ASSERT_TRUE(read_until(**stream, filter, [&] { return filter.may_have_copy("<u1@x>", ""); }).ok());
    EXPECT_TRUE(filter.may_have_copy("<u1@x>", ""));
}

}  // namespace
}  // namespace retryguard::ledger_test
