// The bulk load of an empty Redis ledger (docs/ledger.md, "Bulk load into an
// empty Redis ledger"): an SQLite ledger fed the same batches and engine calls
// as a Redis ledger, copied into another prefix, gives the same keys and values
// as the ingest script wrote, every one with a TTL; and the marker that makes
// a killed load resumable. Label: redis.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "ledger/ledger_events.hpp"
#include "ledger/redis_server.hpp"

namespace retryguard::ledger_test {
namespace {

struct Raw {
    redisContext* c = nullptr;
    explicit Raw(int port) { c = redisConnect("127.0.0.1", port); }
    ~Raw() {
        if (c) redisFree(c);
    }
    Raw(const Raw&) = delete;
    Raw& operator=(const Raw&) = delete;
    // One command of binary-safe arguments.
    redisReply* cmd(const std::vector<std::string>& argv) {
        std::vector<const char*> p;
        std::vector<std::size_t> l;
        for (const auto& a : argv) {
            p.push_back(a.data());
            l.push_back(a.size());
        }
        return static_cast<redisReply*>(
            redisCommandArgv(c, static_cast<int>(argv.size()), p.data(), l.data()));
    }
    std::string str(const std::vector<std::string>& argv) {
        auto* r = cmd(argv);
        std::string s = r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
                            ? std::string(r->str, r->len)
                            : std::string();
        if (r) freeReplyObject(r);
        return s;
    }
};

std::string s_of(const redisReply* r) {
    return r->str ? std::string(r->str, r->len) : std::string();
}

// A JSON object's text with its members sorted (cjson's order is the hash
// table's); any other value as it is.
std::string normal(const std::string& v) {
    if (v.empty() || v[0] != '{') return v;
    auto j = nlohmann::json::parse(v, nullptr, false);
    return j.is_discarded() ? v : j.dump();
}

// Every key of the prefix but the event-key secret and the marker: type,
// content (sets, hashes and sorted sets sorted; stream entries without their
// ids, which are times) and whether it has a TTL, one sorted line each.
std::vector<std::string> dump_prefix(Raw& raw, const std::string& prefix) {
    std::vector<std::string> lines;
    std::string cursor = "0";
    do {
        auto* r = raw.cmd({"SCAN", cursor, "MATCH", prefix + "*", "COUNT", "1000"});
        EXPECT_TRUE(r && r->type == REDIS_REPLY_ARRAY);
        if (!r || r->type != REDIS_REPLY_ARRAY) return lines;
        cursor = s_of(r->element[0]);
        for (std::size_t i = 0; i < r->element[1]->elements; ++i) {
            const std::string key = s_of(r->element[1]->element[i]);
            const std::string k = key.substr(prefix.size());
            if (k == "event_keyer" || k == "bulk-load") continue;
            const std::string type = raw.str({"TYPE", key});
            auto* ttl = raw.cmd({"TTL", key});
            lines.push_back(k + " ttl " + (ttl && ttl->integer > 0 ? "yes" : "no"));
            if (ttl) freeReplyObject(ttl);
            redisReply* c = nullptr;
            if (type == "string") {
                lines.push_back(k + " = " + raw.str({"GET", key}));
            } else if (type == "hash") {
                c = raw.cmd({"HGETALL", key});
                for (std::size_t j = 0; j + 1 < c->elements; j += 2)
                    lines.push_back(k + " h " + s_of(c->element[j]) + " " + normal(s_of(c->element[j + 1])));
            } else if (type == "set") {
                c = raw.cmd({"SMEMBERS", key});
                for (std::size_t j = 0; j < c->elements; ++j)
                    lines.push_back(k + " s " + s_of(c->element[j]));
            } else if (type == "zset") {
                c = raw.cmd({"ZRANGE", key, "0", "-1", "WITHSCORES"});
                for (std::size_t j = 0; j + 1 < c->elements; j += 2)
                    lines.push_back(k + " z " + normal(s_of(c->element[j])) + " " + s_of(c->element[j + 1]));
            } else if (type == "stream") {
                c = raw.cmd({"XRANGE", key, "-", "+"});
                for (std::size_t j = 0; j < c->elements; ++j) {
                    std::string e = k + " x " + std::to_string(j);
                    const redisReply* f = c->element[j]->element[1];
                    for (std::size_t m = 0; m < f->elements; ++m) e += " " + s_of(f->element[m]);
                    lines.push_back(e);
                }
            } else {
                lines.push_back(k + " type " + type);
            }
            if (c) freeReplyObject(c);
        }
        freeReplyObject(r);
    } while (cursor != "0");
    std::sort(lines.begin(), lines.end());
    return lines;
}

// The events of a relay in a few batches: deliveries, deferrals, episodes
// opened and closed, an expiry, a hold, a requeue under a new queue id.
std::vector<std::vector<IngestItem>> batches() {
    auto all = synthetic_stream(80, 12);
    all.push_back(client("EXP1", 1795000300));
    all.push_back(message_id("EXP1", 1795000300, "<exp@client.example>"));
    all.push_back(queue_active("EXP1", 1795000301, "s@sender.example", 900, 1));
    all.push_back(deferred("EXP1", 1795000301, "x@d3.example", "mx1.example.net"));
    all.push_back(expired("EXP1", 1795400000, "s@sender.example"));
    all.push_back(client("OLD1", 1795000400));
    all.push_back(message_id("OLD1", 1795000400, "<old@client.example>"));
    all.push_back(queue_active("OLD1", 1795000401, "s@sender.example", 800, 1));
    all.push_back(deferred("OLD1", 1795000401, "y@d4.example", "mx2.example.net"));
    all.push_back(queue_op("OLD1", 1795000500, "placed on hold"));
    all.push_back(pickup("NEW1", 1795000600, "s@sender.example", "OLD1"));
    all.push_back(queue_active("NEW1", 1795000601, "s@sender.example", 800, 1));
    all.push_back(deferred("NEW1", 1795000601, "y@d4.example", "mx2.example.net"));
    for (std::size_t i = 0; i < all.size(); i += 3) all[i].event.host = "relay1";  // the log names the host
    std::vector<std::vector<IngestItem>> out;
    for (std::size_t i = 0; i < all.size(); i += 97)
        out.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(i),
                         all.begin() + static_cast<std::ptrdiff_t>(std::min(all.size(), i + 97)));
    return out;
}

// The same ledger calls on any backend: batches with a follower position,
// verdict effects (a state, a flag set and cleared, outbox lines), journal
// entries and a saved engine state.
void feed(Ledger& l) {
    FollowerPosition p;
    p.source = "file:/var/log/mail.log";
    std::uint64_t seq = 0;
    int n = 0;
    for (const auto& b : batches()) {
        p.offset += b.size() * 100;
        p.lines += b.size();
        auto r = l.ingest(b, p);
        ASSERT_TRUE(r.ok()) << r.error().message;
        std::vector<VerdictEffect> effects;
        VerdictEffect e;
        e.seq = ++seq;
        e.verdict = "watch";
        e.action = VerdictEffect::Action::destination_state;
        e.name = "d" + std::to_string(n % 12) + ".example";
        e.state = n % 3 == 2 ? "" : "watch";
        e.at = at(1795000000 + n * 50);
        e.line = "verdict=watch destination=" + e.name;
        effects.push_back(e);
        if (n == 1) {
            VerdictEffect f = e;
            f.seq = ++seq;
            f.verdict = "flag";
            f.action = VerdictEffect::Action::set_flag;
            f.reason = "three episodes";
            f.expires_at = at(1795900000);
            f.line = "verdict=flag destination=" + e.name;
            effects.push_back(f);
        }
        if (n == 3) {
            VerdictEffect c = e;
            c.seq = ++seq;
            c.verdict = "recovered";
            c.action = VerdictEffect::Action::clear_flags;
            c.name = "d1.example";
            c.line = "";
            effects.push_back(c);
        }
        ASSERT_TRUE(l.apply_verdict_effects(effects, seq > 2 ? seq - 2 : 0).ok());
        ++n;
    }
    const std::vector<std::string> entries = {std::string("T\x01\x02", 3), "C d1.example"};
    auto first = l.append_journal(entries);
    ASSERT_TRUE(first.ok());
    ASSERT_TRUE(l.save_engine_state("engine", std::string("state\0bytes", 11), *first, seq - 1).ok());
}

enum class Early { none, settled, unsettled };

class BulkLoad : public testing::Test {
  protected:
    void SetUp() override {
        server_ = RedisServer::shared();
        RETRYGUARD_REQUIRE_REDIS(server_);
        static int n = 0;
        tag_ = "rgbulk" + std::to_string(getpid()) + "x" + std::to_string(++n);
        dir_ = std::filesystem::temp_directory_path() / tag_;
        std::filesystem::create_directories(dir_);
    }
    void TearDown() override {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    std::unique_ptr<Ledger> redis(const std::string& prefix) {
        auto l = open_ledger(server_->options(prefix, std::chrono::milliseconds(5000)));
        EXPECT_TRUE(l.ok());
        return l.ok() ? std::move(l.value()) : nullptr;
    }
    std::string owner(const std::string& pid = std::to_string(getpid())) {
        char host[256] = {};
        gethostname(host, sizeof host - 1);
        return std::string(host) + " " + pid + " 1 " + (dir_ / "load").string();
    }
    void copy_and_compare(Early early);
    RedisServer* server_ = nullptr;
    std::string tag_;
    std::filesystem::path dir_;
};

// A message of the first batch logged again after it finished, long after:
// bulk mode's queue-id map has let it go (settled) and must end.
void feed_late_event(Ledger& l) {
    auto r =
        l.ingest(std::vector<IngestItem>{deferred(qid_for(1), 1795500000, "late@d1.example")}, std::nullopt);
    ASSERT_TRUE(r.ok()) << r.error().message;
}

// Feeds a (through the ingest script) and a temporary SQLite ledger alike,
// copies the latter into b and compares every key. Early::settled: the SQLite
// ledger in bulk mode hands its settled rows to b's early copy while it is
// fed; Early::unsettled: and a late event ends its queue-id map.
void BulkLoad::copy_and_compare(Early early) {
    const std::string pa = tag_ + ":a:", pb = tag_ + ":b:";
    auto a = redis(pa);
    ASSERT_TRUE(a);
    feed(*a);
    if (early == Early::unsettled) feed_late_event(*a);
    auto keyer = a->event_keyer();
    ASSERT_TRUE(keyer);
    // The copy's ledger takes a's secret, as the import hands the claimed one on.
    Raw raw(server_->port());
    freeReplyObject(raw.cmd({"SET", pb + "event_keyer", raw.str({"GET", pa + "event_keyer"})}));
    auto bo = server_->options(pb, std::chrono::milliseconds(5000));
    bo.redis_bulk_early_chunk = 1;  // a chunk per message
    auto opened = open_ledger(bo);
    ASSERT_TRUE(opened.ok());
    auto b = std::move(opened.value());
    auto claim = b->bulk_load_claim(owner());
    ASSERT_TRUE(claim.ok()) << claim.error().message;
    ASSERT_EQ(claim->outcome, BulkLoadClaim::Outcome::claimed);
    EXPECT_EQ(claim->dir, (dir_ / "load").string());
    EXPECT_EQ(claim->keyer.secret, keyer->secret);
    const std::string path = (dir_ / "ledger.db").string();
    LedgerOptions so;
    so.spec = "sqlite:" + path;
    so.new_event_keyer = claim->keyer;
    so.sqlite_bulk_build_indexes = false;
    std::atomic<int> settled{0};
    if (early != Early::none) {
        auto f = b->bulk_load_early(path, claim->owner);
        ASSERT_TRUE(f.ok()) << f.error().message;
        so.sqlite_bulk_settled = [&settled, g = f->settled](std::int64_t m, std::span<const std::int64_t> r) {
            ++settled;
            g(m, r);
        };
        so.sqlite_bulk_unsettled = f->unsettled;
    }
    {
        auto s = open_ledger(so);
        ASSERT_TRUE(s.ok()) << s.error().message;
        if (early != Early::none) (*s)->set_bulk_mode(true);
        feed(**s);
        if (early == Early::unsettled) {
            // Once the early copy has written, so that there is something to remove.
            for (int i = 0; i < 1000 && raw.str({"TYPE", pb + "msgs"}) != "zset"; ++i)
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
            ASSERT_EQ(raw.str({"TYPE", pb + "msgs"}), "zset") << "the early copy wrote nothing in 10 s";
            feed_late_event(**s);
        }
        (*s)->set_bulk_mode(false);
    }
    auto copied = b->bulk_load_copy(path, claim->owner);
    ASSERT_TRUE(copied.ok()) << copied.error().message;
    EXPECT_FALSE(copied->refused);
    EXPECT_EQ(copied->messages, 83u);
    if (early == Early::none) {
        EXPECT_EQ(copied->messages_early, 0u);
    } else {
        // Messages finished an hour of log time before the expiry were settled.
        EXPECT_GT(settled.load(), 40);
        if (early == Early::settled) {
            EXPECT_EQ(copied->messages_early, static_cast<std::uint64_t>(settled.load()));
            EXPECT_FALSE(copied->early_redone);
        } else {
            EXPECT_TRUE(copied->early_redone) << "what the early copy wrote is removed and copied again";
            EXPECT_EQ(copied->messages_early, 0u);
        }
    }
    std::size_t events = 0;
    for (const auto& b : batches()) events += b.size();
    EXPECT_EQ(copied->seen_keys, events + (early == Early::unsettled ? 1 : 0));
    const auto da = dump_prefix(raw, pa), db = dump_prefix(raw, pb);
    EXPECT_GT(da.size(), 800u);
    EXPECT_EQ(da, db);
    // What the comparison covers: hosts, recipients, episodes, replay keys.
    for (const char* want : {" h host relay1", "rcpt:NEW1 h y@d4.example", "eps:domain:", "seen:"})
        EXPECT_TRUE(std::any_of(db.begin(), db.end(), [&](const std::string& l) {
            return l.find(want) != std::string::npos;
        })) << want;
    for (const auto& line : db) EXPECT_EQ(line.find(" ttl no"), std::string::npos) << line;
    // The marker is gone: the ledger is an ordinary one now.
    EXPECT_EQ(raw.str({"GET", pb + "bulk-load"}), "");
    auto again = b->bulk_load_claim(owner());
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->outcome, BulkLoadClaim::Outcome::not_empty);
    // And reads back as the script's does.
    auto ma = a->get_recipients("NEW1"), mb = b->get_recipients("NEW1");
    ASSERT_TRUE(ma.ok() && mb.ok());
    ASSERT_EQ(mb->size(), 1u);
    EXPECT_EQ((*mb)[0].attempts, (*ma)[0].attempts);
}

TEST_F(BulkLoad, TheCopyHoldsWhatTheIngestScriptWrites) {
    copy_and_compare(Early::none);
}

// The rows bulk mode's queue-id map let go of are copied while the import
// runs, the rest at the end: the same keys.
TEST_F(BulkLoad, TheEarlyCopyAndTheRestHoldWhatTheIngestScriptWrites) {
    copy_and_compare(Early::settled);
}

// A settled message logged again: its rows changed after they were copied, so
// the copy starts over (and the result is the same).
TEST_F(BulkLoad, AnUnsettledEarlyCopyIsRemovedAndDoneAgain) {
    copy_and_compare(Early::unsettled);
}

TEST_F(BulkLoad, ALedgerWithDataIsNotClaimed) {
    auto a = redis(tag_ + ":");
    MessageIdentity id{"Q1", "<i@x>", "fp", "s@x", {"r@d0.example"}, at(5)};
    ASSERT_TRUE(a->record_identity(id).ok());
    auto claim = a->bulk_load_claim(owner());
    ASSERT_TRUE(claim.ok());
    EXPECT_EQ(claim->outcome, BulkLoadClaim::Outcome::not_empty);
    Raw raw(server_->port());
    EXPECT_EQ(raw.str({"GET", tag_ + ":bulk-load"}), "");
}

TEST_F(BulkLoad, AWriterBeforeTheCopyMakesItRefuseAndLetGo) {
    auto a = redis(tag_ + ":");
    auto claim = a->bulk_load_claim(owner());
    ASSERT_TRUE(claim.ok());
    ASSERT_EQ(claim->outcome, BulkLoadClaim::Outcome::claimed);
    // A follower of another host writes first.
    ASSERT_TRUE(a->ingest(std::vector<IngestItem>{deferred("Q1", 1, "a@b.test")}, std::nullopt).ok());
    LedgerOptions so;
    so.spec = "sqlite:" + (dir_ / "ledger.db").string();
    {
        auto s = open_ledger(so);
        ASSERT_TRUE(s.ok());
        ASSERT_TRUE((*s)->ingest(synthetic_stream(3), std::nullopt).ok());
    }
    auto copied = a->bulk_load_copy((dir_ / "ledger.db").string(), claim->owner);
    ASSERT_TRUE(copied.ok()) << copied.error().message;
    EXPECT_TRUE(copied->refused);
    EXPECT_NE(copied->refused_why.find("another writer"), std::string::npos);
    auto m = a->get_message(qid_for(0));
    ASSERT_TRUE(m.ok());
    EXPECT_FALSE(m->has_value()) << "nothing of the SQLite ledger was copied";
    Raw raw(server_->port());
    EXPECT_EQ(raw.str({"GET", tag_ + ":bulk-load"}), "");
}

TEST_F(BulkLoad, AnUnfinishedLoadOfAGoneProcessIsResumedAndItsCopyRemoved) {
    const std::string p = tag_ + ":";
    // A pid no process has: above the kernel's limit.
    const std::string gone = owner("2147483646");
    {
        auto a = redis(p);
        auto claim = a->bulk_load_claim(gone);
        ASSERT_TRUE(claim.ok());
        ASSERT_EQ(claim->outcome, BulkLoadClaim::Outcome::claimed);
    }
    Raw raw(server_->port());
    // What its copy wrote before the process died.
    freeReplyObject(raw.cmd({"HSET", p + "msg:Q1", "queue_id", "Q1"}));
    freeReplyObject(raw.cmd({"ZADD", p + "msgs", "1", "Q1"}));
    auto b = redis(p);
    const std::string me = owner() + "-mine";
    auto claim = b->bulk_load_claim(me);
    ASSERT_TRUE(claim.ok()) << claim.error().message;
    ASSERT_EQ(claim->outcome, BulkLoadClaim::Outcome::claimed);
    EXPECT_EQ(claim->wiped_keys, 2u);
    EXPECT_EQ(claim->dir, (dir_ / "load").string()) << "the unfinished load's directory is resumed";
    EXPECT_NE(claim->owner, me);
    EXPECT_EQ(raw.str({"GET", p + "bulk-load"}), claim->owner);
    EXPECT_EQ(raw.str({"TYPE", p + "msg:Q1"}), "none");
    EXPECT_NE(raw.str({"GET", p + "event_keyer"}), "")
        << "the secret stays: the resumed ledger's keys use it";
    ASSERT_TRUE(b->bulk_load_release(claim->owner).ok());
    EXPECT_EQ(raw.str({"GET", p + "bulk-load"}), "");
}

TEST_F(BulkLoad, ALoadOfAnotherHostIsLeftAlone) {
    const std::string p = tag_ + ":";
    auto a = redis(p);
    auto first = a->bulk_load_claim("elsewhere.example 1 1 /var/tmp/x");
    ASSERT_TRUE(first.ok());
    ASSERT_EQ(first->outcome, BulkLoadClaim::Outcome::claimed);
    auto second = a->bulk_load_claim(owner());
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(second->outcome, BulkLoadClaim::Outcome::busy);
    EXPECT_EQ(second->detail, "elsewhere.example 1 1 /var/tmp/x");
    // Nor may its marker be taken over by a copy.
    auto copied = a->bulk_load_copy((dir_ / "none.db").string(), owner());
    EXPECT_FALSE(copied.ok());
}

TEST(LedgerSqliteBulk, OtherBackendsRefuseABulkLoad) {
    auto dir = std::filesystem::temp_directory_path() / ("rgbulk-sqlite" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    {
        auto l = open_ledger("sqlite:" + (dir / "l.db").string());
        ASSERT_TRUE(l.ok());
        EXPECT_FALSE((*l)->bulk_load_claim("h 1 1 /x").ok());
    }
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace retryguard::ledger_test
