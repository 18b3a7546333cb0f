// ledger_contract.hpp -- the one contract every ledger backend must meet. Each
// test binary that has a backend includes this file once and instantiates
// LedgerContract with a factory for its backend (SQLite in the unit tests,
// Redis in retryguard_redis_tests). Crash and two-writer tests fork real
// processes that open the same store.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "ledger/ledger_events.hpp"
#include "retryguard/ledger/ledger.hpp"

namespace retryguard::ledger_test {

struct LedgerBackend {
    std::string name;
    // Opens the store called `tag`; the same tag reopens the same store.
    std::function<Result<std::unique_ptr<Ledger>>(const std::string& tag)> open;
    // Called before each test: may FAIL() or GTEST_SKIP() when the backend cannot run.
    std::function<void()> precondition;
};

inline void PrintTo(const LedgerBackend& b, std::ostream* os) {
    *os << b.name;
}

inline std::string backend_name(const testing::TestParamInfo<LedgerBackend>& info) {
    return info.param.name;
}

class LedgerContract : public testing::TestWithParam<LedgerBackend> {
  protected:
    std::string tag() const {
        const auto* info = testing::UnitTest::GetInstance()->current_test_info();
        std::string t =
            std::string(info->test_suite_name()) + "." + info->name() + "." + std::to_string(getpid());
        for (auto& c : t)
            if (c == '/') c = '_';
        return t;
    }
    std::unique_ptr<Ledger> open(const std::string& suffix = {}) {
        auto r = GetParam().open(tag() + suffix);
        if (!r) ADD_FAILURE() << r.error().message;
        return r ? std::move(r).value() : nullptr;
    }
    static void ingest(Ledger& l, std::vector<IngestItem> items,
                       const std::optional<FollowerPosition>& pos = std::nullopt) {
        auto r = l.ingest(items, pos);
        ASSERT_TRUE(r.ok()) << r.error().message;
    }
};

// A canonical text of everything the ledger knows about the messages and
// destinations of synthetic_stream(n): two ledgers that saw the same events
// exactly once have the same dump.
inline std::string dump(Ledger& l, int messages, int domains = 50) {
    std::ostringstream out;
    for (int i = 0; i < messages; ++i) {
        auto m = l.get_message(qid_for(i));
        if (!m.ok() || !m->has_value()) {
            out << qid_for(i) << " missing\n";
            continue;
        }
        const auto& v = **m;
        out << v.queue_id << " " << to_string(v.state) << " " << v.message_id << " " << v.size << " "
            << (v.arrival ? to_micros(*v.arrival) : -1) << " host=" << v.host << "\n";
        auto rs = l.get_recipients(v.queue_id);
        if (rs.ok())
            for (const auto& r : *rs)
                out << "  " << r.address << " " << to_string(r.state) << " " << r.attempts << " "
                    << (r.first_deferral ? to_micros(*r.first_deferral) : -1) << " " << r.reply_code << "\n";
    }
    DestinationFilter all;
    auto ds = l.list_destinations(all);
    if (ds.ok())
        for (const auto& d : *ds) {
            out << to_string(d.kind) << ":" << d.name
                << " success=" << (d.last_success ? to_micros(*d.last_success) : -1);
            if (d.episode)
                out << " open " << to_micros(d.episode->first_deferral) << " " << d.episode->attempts << " "
                    << d.episode->messages;
            out << "\n";
            auto h = l.episode_history(d.kind, d.name, from_micros(0), from_micros(INT64_MAX / 2));
            if (h.ok())
                for (const auto& e : *h)
                    out << "  ep " << to_micros(e.first_deferral) << " " << e.attempts << " " << e.messages
                        << "\n";
        }
    (void)domains;
    return out.str();
}

TEST_P(LedgerContract, DeferralsThenSuccessCloseAnEpisodeIntoHistory) {
    auto l = open();
    ASSERT_TRUE(l);
    ingest(*l, {client("Q1", 100), message_id("Q1", 100, "<m1@Client.Example>"),
                queue_active("Q1", 101, "s@x.test"), deferred("Q1", 101, "u@dest.test"),
                deferred("Q1", 700, "u@dest.test"), sent("Q1", 2500, "u@dest.test"), removed("Q1", 2500)});
    auto m = l->get_message("Q1");
    ASSERT_TRUE(m.ok() && m->has_value());
    EXPECT_EQ((*m)->state, MessageState::gone);
    EXPECT_EQ((*m)->message_id, "m1@client.example");
    EXPECT_EQ((*m)->size, 470);
    EXPECT_EQ((*m)->arrival, at(100));
    EXPECT_EQ((*m)->finished, at(2500));

    auto rs = l->get_recipients("Q1");
    ASSERT_TRUE(rs.ok());
    ASSERT_EQ(rs->size(), 1u);
    EXPECT_EQ((*rs)[0].state, RecipientState::sent);
    EXPECT_EQ((*rs)[0].attempts, 3);
    EXPECT_EQ((*rs)[0].first_deferral, at(101));
    EXPECT_EQ((*rs)[0].first_attempt, at(101));
    EXPECT_EQ((*rs)[0].last_attempt, at(2500));
    EXPECT_EQ((*rs)[0].reply_code, 250);
    EXPECT_EQ((*rs)[0].relay, "mx.example.net");

    for (auto [kind, name] : {std::pair{DestinationKind::domain, "dest.test"},
                              std::pair{DestinationKind::relay, "mx.example.net"}}) {
        auto d = l->get_destination(kind, name);
        ASSERT_TRUE(d.ok() && d->has_value()) << name;
        EXPECT_FALSE((*d)->episode.has_value()) << name;
        EXPECT_EQ((*d)->last_success, at(2500));
        EXPECT_EQ((*d)->last_deferral, at(700));
        auto h = l->episode_history(kind, name, at(0), at(10000));
        ASSERT_TRUE(h.ok());
        ASSERT_EQ(h->size(), 1u) << name;
        const auto& e = (*h)[0];
        EXPECT_EQ(e.first_deferral, at(101));
        EXPECT_EQ(e.last_deferral, at(700));
        EXPECT_EQ(e.ended, at(2500));
        EXPECT_EQ(e.attempts, 2);
        EXPECT_EQ(e.messages, 1);
        EXPECT_EQ(e.categories, category_bit(Category::receiver_config));
        EXPECT_NE(e.last_reply.find("451 4.3.5 System config error"), std::string::npos);
        EXPECT_EQ(e.last_relay, "mx.example.net");
        // Outside the time range: nothing.
        auto none = l->episode_history(kind, name, at(200), at(10000));
        ASSERT_TRUE(none.ok());
        EXPECT_TRUE(none->empty());
    }
}

TEST_P(LedgerContract, DeliveriesAreCountedPerRecipientInTheirTimeRange) {
    auto l = open();
    ASSERT_TRUE(l);
    ingest(*l, {queue_active("Q1", 100, "s@x.test"), sent("Q1", 150, "a@one.test"),
                sent("Q1", 150, "b@one.test"), removed("Q1", 150), queue_active("Q2", 200, "s@x.test"),
                deferred("Q2", 210, "c@two.test"), sent("Q2", 900, "c@two.test"), removed("Q2", 900),
                queue_active("Q3", 300, "s@x.test"), deferred("Q3", 310, "d@two.test")});
    auto count = [&](int from, int to) {
        auto n = l->count_deliveries(at(from), at(to));
        EXPECT_TRUE(n.ok()) << n.error().message;
        return n.ok() ? *n : -1;
    };
    EXPECT_EQ(count(0, 10000), 3);  // two recipients of Q1, one of Q2; Q3 only deferred
    EXPECT_EQ(count(0, 150), 0);    // the end is not included
    EXPECT_EQ(count(150, 151), 2);
    EXPECT_EQ(count(151, 10000), 1);
    EXPECT_EQ(count(901, 10000), 0);
}

// More messages than one round trip of the Redis backend reads (1000): every
// one is counted once.
TEST_P(LedgerContract, DeliveriesOfManyMessagesAreAllCounted) {
    auto l = open();
    ASSERT_TRUE(l);
    std::vector<IngestItem> events;
    for (int i = 0; i < 2500; ++i) {
        const std::string q = "N" + std::to_string(i);
        events.push_back(queue_active(q, 100 + i, "s@x.test"));
        if (i % 5 == 0)
            events.push_back(deferred(q, 100 + i, "r" + std::to_string(i) + "@d.test"));
        else
            events.push_back(sent(q, 100 + i, "r" + std::to_string(i) + "@d.test"));
        if (events.size() >= 500) {  // batches of the size a follower sends
            ingest(*l, events);
            events.clear();
        }
    }
    ingest(*l, events);
    auto n = l->count_deliveries(at(0), at(100000));
    ASSERT_TRUE(n.ok()) << n.error().message;
    EXPECT_EQ(*n, 2000);
    n = l->count_deliveries(at(1100), at(100000));
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 1200);  // i from 1000 on, four in five sent
}

TEST_P(LedgerContract, OpenEpisodeCountsDistinctMessagesAndCategories) {
    auto l = open();
    ASSERT_TRUE(l);
    auto grey = delivery("Q2", 130, "v@dest.test", DeliveryStatus::deferred, "mx.example.net", 450, "4.2.0",
                         "Greylisted", Category::greylisting);
    ingest(*l, {deferred("Q1", 100, "u@dest.test"), deferred("Q1", 120, "w@dest.test"), grey,
                deferred("Q1", 900, "u@dest.test")});
    auto d = l->get_destination(DestinationKind::domain, "dest.test");
    ASSERT_TRUE(d.ok() && d->has_value());
    ASSERT_TRUE((*d)->episode.has_value());
    const auto& e = *(*d)->episode;
    EXPECT_EQ(e.attempts, 4);
    EXPECT_EQ(e.messages, 2);
    EXPECT_EQ(e.first_deferral, at(100));
    EXPECT_EQ(e.last_deferral, at(900));
    EXPECT_EQ(e.categories, category_bit(Category::receiver_config) | category_bit(Category::greylisting));
    EXPECT_EQ(categories_in(e.categories).size(), 2u);
    auto m = l->get_message("Q1");
    ASSERT_TRUE(m.ok() && m->has_value());
    EXPECT_EQ((*m)->state, MessageState::deferred);

    DestinationFilter open_only;
    open_only.open_episode_only = true;
    open_only.kind = DestinationKind::relay;
    auto list = l->list_destinations(open_only);
    ASSERT_TRUE(list.ok());
    ASSERT_EQ(list->size(), 1u);
    EXPECT_EQ((*list)[0].name, "mx.example.net");
    // A success ends the episode; the next deferral opens a new one.
    ingest(*l, {sent("Q3", 1000, "x@dest.test"), deferred("Q4", 5000, "y@dest.test")});
    d = l->get_destination(DestinationKind::domain, "dest.test");
    ASSERT_TRUE(d.ok() && d->has_value() && (*d)->episode);
    EXPECT_EQ((*d)->episode->first_deferral, at(5000));
    EXPECT_EQ((*d)->episode->attempts, 1);
    EXPECT_EQ((*d)->episode->messages, 1);
    auto h = l->episode_history(DestinationKind::domain, "dest.test", at(0), at(100000));
    ASSERT_TRUE(h.ok());
    ASSERT_EQ(h->size(), 1u);
    EXPECT_EQ((*h)[0].attempts, 4);
}

TEST_P(LedgerContract, ReplayedEventsAreNotCountedTwice) {
    auto l = open();
    ASSERT_TRUE(l);
    std::vector<IngestItem> batch = {queue_active("Q1", 100, "s@x.test"), deferred("Q1", 101, "u@dest.test"),
                                     deferred("Q1", 701, "u@dest.test")};
    auto first = l->ingest(batch, std::nullopt);
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(first->applied, 3u);
    EXPECT_EQ(first->duplicates, 0u);
    EXPECT_EQ(first->fresh, (std::vector<bool>{true, true, true}));
    auto again = l->ingest(batch, std::nullopt);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->applied, 0u);
    EXPECT_EQ(again->duplicates, 3u);
    EXPECT_EQ(again->fresh, (std::vector<bool>{false, false, false}));
    auto rs = l->get_recipients("Q1");
    ASSERT_TRUE(rs.ok() && rs->size() == 1);
    EXPECT_EQ((*rs)[0].attempts, 2);
    auto d = l->get_destination(DestinationKind::domain, "dest.test");
    ASSERT_TRUE(d.ok() && d->has_value() && (*d)->episode);
    EXPECT_EQ((*d)->episode->attempts, 2);
    EXPECT_GE(l->counters().duplicates, 3u);
    // Within one batch as well.
    auto dup = l->ingest(
        std::vector<IngestItem>{deferred("Q9", 5, "z@d.test"), deferred("Q9", 5, "z@d.test")}, std::nullopt);
    ASSERT_TRUE(dup.ok());
    EXPECT_EQ(dup->applied, 1u);
    EXPECT_EQ(dup->duplicates, 1u);
    EXPECT_EQ(dup->fresh, (std::vector<bool>{true, false}));
}

TEST_P(LedgerContract, PositionIsCommittedWithTheBatchAndLoadsBack) {
    auto l = open();
    ASSERT_TRUE(l);
    auto none = l->load_position("file:/var/log/mail.log");
    ASSERT_TRUE(none.ok());
    EXPECT_FALSE(none->has_value());
    FollowerPosition p;
    p.source = "file:/var/log/mail.log";
    p.device = 2049;
    p.inode = 1234567;
    p.offset = 987654321012ULL;
    p.head_fingerprint = "ab12cd";
    p.lines = 42;
    ingest(*l, {queue_active("Q1", 100, "s@x.test")}, p);
    auto got = l->load_position(p.source);
    ASSERT_TRUE(got.ok() && got->has_value());
    EXPECT_EQ((*got)->device, 2049u);
    EXPECT_EQ((*got)->inode, 1234567u);
    EXPECT_EQ((*got)->offset, 987654321012ULL);
    EXPECT_EQ((*got)->head_fingerprint, "ab12cd");
    EXPECT_EQ((*got)->lines, 42u);
    FollowerPosition j;
    j.source = "journal";
    j.cursor = "s=abc;i=1f;b=xyz";
    ASSERT_TRUE(l->save_position(j).ok());
    auto gj = l->load_position("journal");
    ASSERT_TRUE(gj.ok() && gj->has_value());
    EXPECT_EQ((*gj)->cursor, j.cursor);
    // Positions survive reopening the store.
    l.reset();
    auto again = open();
    ASSERT_TRUE(again);
    auto after = again->load_position(p.source);
    ASSERT_TRUE(after.ok() && after->has_value());
    EXPECT_EQ((*after)->offset, p.offset);
}

TEST_P(LedgerContract, PendingCopiesAreFoundPerRecipientByMessageIdOrFingerprint) {
    auto l = open();
    ASSERT_TRUE(l);
    MessageIdentity id;
    id.queue_id = "A1";
    id.message_id = "<orig@Client.EXAMPLE>";
    id.fingerprint = "fp-1";
    id.sender = "s@x.test";
    id.recipients = {"<one@dest.test>", "two@dest.test", "three@other.test"};
    id.time = at(100);
    ASSERT_TRUE(l->record_identity(id).ok());
    ingest(*l, {message_id("A1", 100, "<orig@client.example>"), queue_active("A1", 101, "s@x.test", 500, 3),
                deferred("A1", 102, "one@dest.test"), deferred("A1", 102, "two@dest.test"),
                sent("A1", 102, "three@other.test", "mx.other.test"), deferred("A1", 800, "one@dest.test")});

    PendingCopyQuery q;
    q.message_id = "orig@client.example";
    q.recipients = {"one@dest.test", "three@other.test", "new@dest.test", "two@DEST.test"};
    auto r = l->find_pending_copies(q);
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r->size(), 2u);
    EXPECT_EQ((*r)[0].recipient, "one@dest.test");
    EXPECT_EQ((*r)[0].queue_id, "A1");
    EXPECT_EQ((*r)[0].first_queue_id, "A1");
    EXPECT_EQ((*r)[0].destination, "dest.test");
    EXPECT_EQ((*r)[0].relay, "mx.example.net");
    EXPECT_NE((*r)[0].last_reply.find("451 4.3.5 System config error"), std::string::npos);
    EXPECT_EQ((*r)[0].first_deferral, at(102));
    EXPECT_EQ((*r)[0].last_attempt, at(800));
    EXPECT_EQ((*r)[0].attempts, 2);
    EXPECT_TRUE((*r)[0].matched_by_message_id);
    EXPECT_EQ((*r)[1].recipient, "two@dest.test");

    // Same content under a new Message-ID: found by fingerprint.
    PendingCopyQuery byfp;
    byfp.message_id = "<resend@client.example>";
    byfp.fingerprint = "fp-1";
    byfp.recipients = {"two@dest.test"};
    r = l->find_pending_copies(byfp);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->size(), 1u);
    EXPECT_FALSE((*r)[0].matched_by_message_id);

    // The message itself is not its own copy.
    q.exclude_queue_id = "A1";
    r = l->find_pending_copies(q);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->empty());

    // Unknown identity: nothing.
    PendingCopyQuery other;
    other.message_id = "<nobody@x>";
    other.fingerprint = "fp-none";
    other.recipients = {"one@dest.test"};
    r = l->find_pending_copies(other);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->empty());

    // Once the message has left the queue, no copy is pending.
    ingest(*l, {sent("A1", 3000, "one@dest.test"), removed("A1", 3000)});
    q.exclude_queue_id.clear();
    r = l->find_pending_copies(q);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->empty());
}

// Identical content is ordinary traffic (alerts, cron mail, templates): by
// fingerprint only a copy the queue is retrying matches, so thousands of
// identical messages recorded and never deferred neither match nor make the
// lookup read them.
TEST_P(LedgerContract, ByFingerprintOnlyACopyTheQueueIsRetryingMatches) {
    auto l = open();
    ASSERT_TRUE(l);
    std::vector<MessageIdentity> ids;
    for (int i = 0; i < 2000; ++i) {
        MessageIdentity id;
        id.queue_id = "F" + std::to_string(i);
        id.message_id = "<alert-" + std::to_string(i) + "@monitor.example>";
        id.fingerprint = "fp-alert";
        id.sender = "monitor@x.test";
        id.recipients = {"ops@dest.test"};
        id.time = at(10 + i);
        ids.push_back(std::move(id));
    }
    ASSERT_TRUE(l->record_identities(ids).ok());
    PendingCopyQuery q;
    q.message_id = "<alert-new@monitor.example>";
    q.fingerprint = "fp-alert";
    q.recipients = {"ops@dest.test"};
    auto r = l->find_pending_copies(q);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_TRUE(r->empty()) << "recorded, never deferred: not a copy being retried";

    // Picked up by the queue manager and delivered at once: still nothing.
    ingest(*l, {queue_active("F1", 3000, "monitor@x.test", 500, 1), sent("F1", 3001, "ops@dest.test")});
    r = l->find_pending_copies(q);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->empty());

    // One of them deferred: that one is being retried and matches.
    ingest(*l, {queue_active("F7", 3100, "monitor@x.test", 500, 1), deferred("F7", 3101, "ops@dest.test")});
    r = l->find_pending_copies(q);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ((*r)[0].queue_id, "F7");
    EXPECT_FALSE((*r)[0].matched_by_message_id);

    // By Message-ID a copy matches before any attempt (unchanged).
    q.message_id = "<alert-3@monitor.example>";
    q.fingerprint.clear();
    r = l->find_pending_copies(q);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ((*r)[0].queue_id, "F3");
}

// Many recorded messages with one content (a mailing, a monitor's alert), most
// of them finished: a lookup by that content answers exactly the copies still
// waiting in the queue, one per recipient, whatever way the others finished.
TEST_P(LedgerContract, ByFingerprintOnlyTheStillPendingCopiesOfManyAreFound) {
    auto l = open();
    ASSERT_TRUE(l);
    constexpr int kMessages = 300;
    auto qid = [](int i) { return "B" + std::to_string(i); };
    auto rcpt = [](int i) { return "user" + std::to_string(i) + "@dest.test"; };
    std::vector<MessageIdentity> ids;
    for (int i = 0; i < kMessages; ++i) {
        MessageIdentity id;
        id.queue_id = qid(i);
        id.message_id = "<bulk-" + std::to_string(i) + "@list.example>";
        id.fingerprint = "fp-bulk";
        id.sender = "list@x.test";
        id.recipients = {rcpt(i)};
        id.time = at(10 + i);
        ids.push_back(std::move(id));
    }
    ASSERT_TRUE(l->record_identities(ids).ok());
    std::vector<IngestItem> events;
    for (int i = 0; i < kMessages; ++i) {
        events.push_back(queue_active(qid(i), 1000 + i, "list@x.test", 500, 1));
        events.push_back(deferred(qid(i), 1400 + i, rcpt(i)));
    }
    ingest(*l, events);
    // Finished three ways; every 15th (and one on hold) stays queued.
    std::set<std::string> pending;
    events.clear();
    for (int i = 0; i < kMessages; ++i) {
        const std::int64_t t = 2000 + i;
        if (i % 15 == 0) {
            pending.insert(qid(i));
        } else if (i == 7) {
            events.push_back(queue_op(qid(i), t, "placed on hold"));
            pending.insert(qid(i));
        } else if (i % 3 == 0) {
            events.push_back(expired(qid(i), t, "list@x.test"));
        } else {
            events.push_back(sent(qid(i), t, rcpt(i)));
            events.push_back(removed(qid(i), t + 1));
        }
    }
    ingest(*l, events);
    PendingCopyQuery q;
    q.message_id = "<bulk-new@list.example>";
    q.fingerprint = "fp-bulk";
    for (int i = 0; i < kMessages; ++i) q.recipients.push_back(rcpt(i));
    auto r = l->find_pending_copies(q);
    ASSERT_TRUE(r.ok()) << r.error().message;
    std::set<std::string> found;
    for (const auto& c : *r) {
        EXPECT_FALSE(c.matched_by_message_id) << c.queue_id;
        EXPECT_EQ(c.recipient, rcpt(std::stoi(c.queue_id.substr(1)))) << c.queue_id;
        found.insert(c.queue_id);
    }
    EXPECT_EQ(r->size(), pending.size());
    EXPECT_EQ(found, pending);

    // A pending copy finishing later drops out too.
    ingest(*l, {removed(qid(0), 5000)});
    pending.erase(qid(0));
    r = l->find_pending_copies(q);
    ASSERT_TRUE(r.ok());
    found.clear();
    for (const auto& c : *r) found.insert(c.queue_id);
    EXPECT_EQ(found, pending);
}

TEST_P(LedgerContract, RecordedButNotYetAttemptedMessageIsPending) {
    auto l = open();
    ASSERT_TRUE(l);
    MessageIdentity id;
    id.queue_id = "B1";
    id.message_id = "<b@c>";
    id.recipients = {"r@d.test"};
    id.time = at(50);
    ASSERT_TRUE(l->record_identity(id).ok());
    PendingCopyQuery q;
    q.message_id = "b@c";
    q.recipients = {"r@d.test"};
    auto r = l->find_pending_copies(q);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ((*r)[0].attempts, 0);
    EXPECT_FALSE((*r)[0].first_deferral.has_value());
    EXPECT_EQ((*r)[0].arrival, at(50));
    EXPECT_TRUE(l->record_identity(MessageIdentity{}).error().kind == ErrorKind::invalid_input);
}

// A fleet shares one ledger: each message names the host that holds it. The
// milter records its own name; the log's host field, once a line of the
// message is read, wins (it is what the host's Postfix calls itself).
TEST_P(LedgerContract, EachMessageNamesTheHostThatHoldsIt) {
    auto l = open();
    ASSERT_TRUE(l);
    MessageIdentity id;
    id.queue_id = "H1";
    id.message_id = "<h@c>";
    id.recipients = {"r@d.test"};
    id.time = at(50);
    id.host = "milter-a";
    ASSERT_TRUE(l->record_identity(id).ok());
    PendingCopyQuery q;
    q.message_id = "h@c";
    q.recipients = {"r@d.test"};
    auto r = l->find_pending_copies(q);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ((*r)[0].host, "milter-a");

    auto line = queue_active("H1", 51, "s@x.test");
    line.event.host = "hosta";
    auto later = deferred("H1", 52, "r@d.test");
    later.event.host = "hosta";
    ingest(*l, {line, later});
    auto m = l->get_message("H1");
    ASSERT_TRUE(m.ok() && m->has_value());
    EXPECT_EQ((*m)->host, "hosta");
    r = l->find_pending_copies(q);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ((*r)[0].host, "hosta");

    // Known from the log first: a later record does not rename it.
    auto other = queue_active("H2", 60, "s@x.test");
    other.event.host = "hostb\x01 bad";
    ingest(*l, {other});
    MessageIdentity id2 = id;
    id2.queue_id = "H2";
    id2.host = "milter-b";
    ASSERT_TRUE(l->record_identity(id2).ok());
    m = l->get_message("H2");
    ASSERT_TRUE(m.ok() && m->has_value());
    EXPECT_EQ((*m)->host, "hostb??bad");  // control characters and spaces are not stored
    auto found = l->find_messages_by_message_id("<h@c>");
    ASSERT_TRUE(found.ok());
    ASSERT_EQ(found->size(), 2u);
    EXPECT_EQ((*found)[0].host, "hosta");
    EXPECT_EQ((*found)[1].host, "hostb??bad");
}

// The milter's identity filter is built from this list: it must hold every
// Message-ID and fingerprint find_pending_copies could match (recorded by the
// milter or learnt from the log), normalised, and nothing of finished messages.
TEST_P(LedgerContract, OpenIdentitiesListEveryMessageALookupCouldMatch) {
    auto l = open();
    ASSERT_TRUE(l);
    std::vector<MessageIdentity> ids = {{"F1", "<f1@Client.Example>", "fp-f1", "s@x", {"r@d.test"}, at(10)},
                                        {"F2", "", "fp-f2", "s@x", {"r@d.test"}, at(11)}};
    ASSERT_TRUE(l->record_identities(ids).ok());
    ingest(*l, {message_id("F3", 12, "<f3@x>"), queue_active("F3", 12, "s@x.test"),
                deferred("F3", 13, "r@d.test"), message_id("F4", 14, "<f4@x>"),
                queue_active("F4", 14, "s@x.test"), deferred("F4", 15, "r@d.test"),
                expired("F4", 500000, "s@x.test")});
    std::set<std::string> seen;
    auto st = l->for_each_open_identity([&](std::string_view mid, std::string_view fp) {
        if (!mid.empty()) seen.insert("m " + std::string(mid));
        if (!fp.empty()) seen.insert("f " + std::string(fp));
    });
    if (!l->can_list_identities()) {
        // this backend is asked about every message instead: it must say so, not list nothing
        ASSERT_FALSE(st.ok());
        EXPECT_EQ(st.error().kind, ErrorKind::unavailable);
        EXPECT_TRUE(seen.empty());
        return;
    }
    ASSERT_TRUE(st.ok()) << st.error().message;
    EXPECT_EQ(seen, (std::set<std::string>{"m f1@client.example", "f fp-f1", "f fp-f2", "m f3@x"}));
}

// Finished messages leave the listing (Redis drops them from its list of open
// messages lazily, while paging: more than one page here), and a message listed
// once stays listed while it is open.
TEST_P(LedgerContract, FinishedMessagesLeaveTheOpenIdentitiesOverManyPages) {
    auto l = open();
    ASSERT_TRUE(l);
    if (!l->can_list_identities()) GTEST_SKIP() << "backend is asked about every message";
    constexpr int kMessages = 2500;
    std::vector<MessageIdentity> ids;
    for (int i = 0; i < kMessages; ++i)
        ids.push_back({"P" + std::to_string(i),
                       "<p" + std::to_string(i) + "@x>",
                       "fp-p" + std::to_string(i),
                       "s@x",
                       {"r@d.test"},
                       at(10)});
    ASSERT_TRUE(l->record_identities(ids).ok());
    auto listed = [&] {
        std::set<std::string> seen;
        auto st = l->for_each_open_identity([&](std::string_view mid, std::string_view fp) {
            seen.insert(std::string(mid) + "|" + std::string(fp));
        });
        EXPECT_TRUE(st.ok()) << st.error().message;
        return seen;
    };
    auto first = listed();
    EXPECT_EQ(first.size(), static_cast<std::size_t>(kMessages));
    EXPECT_TRUE(first.contains("p0@x|fp-p0"));
    EXPECT_TRUE(first.contains("p2499@x|fp-p2499"));
    // every third message finishes: removed from the queue or delivered
    std::vector<IngestItem> done;
    for (int i = 0; i < kMessages; i += 3) done.push_back(removed("P" + std::to_string(i), 20));
    ingest(*l, done);
    for (int pass = 0; pass < 2; ++pass) {  // the second pass reads what the first left
        auto now = listed();
        EXPECT_EQ(now.size(), static_cast<std::size_t>(kMessages - (kMessages + 2) / 3)) << "pass " << pass;
        EXPECT_FALSE(now.contains("p0@x|fp-p0"));
        EXPECT_FALSE(now.contains("p2499@x|fp-p2499"));
        EXPECT_TRUE(now.contains("p1@x|fp-p1"));
        EXPECT_TRUE(now.contains("p2498@x|fp-p2498"));
    }
    // a Message-ID learnt from the log for a message the milter did not record
    ingest(*l, {message_id("LOG1", 30, "<log1@x>")});
    EXPECT_TRUE(listed().contains("log1@x|"));
}

// What the milters' filters read between scans: every key written after the
// mark, by any connection to the same store, normalised as the ledger stores
// it. SQLite has no stream (its milter rescans) and must say so.
TEST_P(LedgerContract, IdentityStreamBringsEveryKeyWrittenAfterItsMark) {
    auto reader = open();
    auto writer = open();
    ASSERT_TRUE(reader && writer);
    ASSERT_TRUE(writer->record_identity({"W0", "<w0@x>", "fp-w0", "s@x", {"r@d.test"}, at(1)}).ok());
    auto stream = reader->open_identity_stream();
    if (!stream) {
        EXPECT_EQ(stream.error().kind, ErrorKind::unavailable);
        EXPECT_EQ(reader->backend(), "sqlite");
        return;
    }
    ASSERT_TRUE((*stream)->mark().ok());
    ASSERT_TRUE(writer->record_identity({"W1", "<w1@X>", "fp-w1", "s@x", {"r@d.test"}, at(2)}).ok());
    ingest(*writer, {message_id("W2", 3, "<w2@x>")});
    std::set<std::string> seen;
    for (int i = 0; i < 50 && seen.size() < 3; ++i) {
        auto st =
            (*stream)->read(std::chrono::milliseconds(100), [&](std::string_view mid, std::string_view fp) {
                if (!mid.empty()) seen.insert("m " + std::string(mid));
                if (!fp.empty()) seen.insert("f " + std::string(fp));
            });
        ASSERT_TRUE(st.ok()) << st.error().message;
    }
    EXPECT_EQ(seen, (std::set<std::string>{"m w1@x", "f fp-w1", "m w2@x"}));  // not W0: before the mark
}

TEST_P(LedgerContract, IdentitiesRecordedInABatchAreAllFound) {
    auto l = open();
    ASSERT_TRUE(l);
    std::vector<MessageIdentity> ids = {{"C1", "<c1@x>", "fp-c1", "s@x", {"r1@d.test"}, at(10)},
                                        {"C2", "<c2@x>", "fp-c2", "s@x", {"r2@d.test", "r3@d.test"}, at(11)}};
    ASSERT_TRUE(l->record_identities(ids).ok());
    PendingCopyQuery q;
    q.message_id = "<c2@x>";
    q.recipients = {"r3@d.test", "r1@d.test"};
    auto r = l->find_pending_copies(q);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ((*r)[0].queue_id, "C2");
    EXPECT_EQ((*r)[0].recipient, "r3@d.test");
    // By fingerprint alone: recorded, never deferred, so not a copy being retried.
    q.message_id.clear();
    q.fingerprint = "fp-c2";
    r = l->find_pending_copies(q);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->empty());
    std::vector<MessageIdentity> bad = {{"C3", "<c3@x>", "", "", {"r@d.test"}, at(12)}, MessageIdentity{}};
    auto st = l->record_identities(bad);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().kind, ErrorKind::invalid_input);
    auto c3 = l->get_message("C3");
    ASSERT_TRUE(c3.ok());
    EXPECT_FALSE(c3->has_value()) << "an invalid batch records nothing";
}

TEST_P(LedgerContract, OversizedIdentitiesAndQueriesAreRefusedWithALimitError) {
    auto l = open();
    ASSERT_TRUE(l);
    MessageIdentity id{"L1", "<l@x>", "", "", {}, at(1)};
    id.recipients.assign(kMaxRecipientsPerMessage + 1, "r@d.test");
    auto st = l->record_identity(id);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().kind, ErrorKind::limit);
    PendingCopyQuery q;
    q.message_id = "<l@x>";
    q.recipients = id.recipients;
    auto r = l->find_pending_copies(q);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().kind, ErrorKind::limit);
    id.recipients.resize(kMaxRecipientsPerMessage);
    EXPECT_TRUE(l->record_identity(id).ok());
}

TEST_P(LedgerContract, RequeueChainIsFollowedToTheNewQueueId) {
    auto l = open();
    ASSERT_TRUE(l);
    MessageIdentity id;
    id.queue_id = "OLD1";
    id.message_id = "<rq@client>";
    id.fingerprint = "fp-rq";
    id.recipients = {"q@fake.test"};
    id.time = at(100);
    ASSERT_TRUE(l->record_identity(id).ok());
    ingest(*l, {message_id("OLD1", 100, "<rq@client>"), queue_active("OLD1", 100, "s@x.test", 470),
                deferred("OLD1", 101, "q@fake.test"), queue_op("OLD1", 150, "placed on hold")});
    auto m = l->get_message("OLD1");
    ASSERT_TRUE(m.ok() && m->has_value());
    EXPECT_EQ((*m)->state, MessageState::hold);
    PendingCopyQuery q;
    q.fingerprint = "fp-rq";
    q.recipients = {"q@fake.test"};
    auto r = l->find_pending_copies(q);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->size(), 1u) << "a held message is still in the queue";
    EXPECT_EQ((*r)[0].message_state, MessageState::hold);

    ingest(*l, {queue_op("OLD1", 160, "released from hold"), queue_op("OLD1", 170, "requeued"),
                pickup("NEW1", 190, "s@x.test", "OLD1")});
    // The copies of q@fake.test by fingerprint or by Message-ID.
    auto copies = [&](bool by_fp) {
        PendingCopyQuery qq;
        if (by_fp)
            qq.fingerprint = "fp-rq";
        else
            qq.message_id = "<rq@client>";
        qq.recipients = {"q@fake.test"};
        return l->find_pending_copies(qq);
    };
    // pickup's line and the new copy's next attempt can reach the ledger in
    // different batches: in between, the new queue id is the pending copy
    for (bool by_fp : {false, true}) {
        r = copies(by_fp);
        ASSERT_TRUE(r.ok());
        ASSERT_EQ(r->size(), 1u) << (by_fp ? "by fingerprint" : "by Message-ID");
        EXPECT_EQ((*r)[0].queue_id, "NEW1");
        EXPECT_EQ((*r)[0].first_deferral, at(101));
    }
    ingest(*l, {message_id("NEW1", 190, "<rq@client>"), queue_active("NEW1", 190, "s@x.test", 583),
                deferred("NEW1", 191, "q@fake.test")});
    m = l->get_message("OLD1");
    ASSERT_TRUE(m.ok() && m->has_value());
    EXPECT_EQ((*m)->state, MessageState::requeued);
    EXPECT_EQ((*m)->next_queue_id, "NEW1");
    auto n = l->get_message("NEW1");
    ASSERT_TRUE(n.ok() && n->has_value());
    EXPECT_EQ((*n)->previous_queue_id, "OLD1");
    EXPECT_EQ((*n)->first_queue_id, "OLD1");
    EXPECT_EQ((*n)->fingerprint, "fp-rq");
    EXPECT_EQ((*n)->arrival, at(100));

    for (bool by_fp : {true, false}) {
        r = copies(by_fp);
        ASSERT_TRUE(r.ok());
        ASSERT_EQ(r->size(), 1u);
        EXPECT_EQ((*r)[0].queue_id, "NEW1");
        EXPECT_EQ((*r)[0].first_queue_id, "OLD1");
        EXPECT_EQ((*r)[0].first_deferral, at(101));
        EXPECT_EQ((*r)[0].attempts, 2);
    }
    // The requeued message is one message for the destination's episode.
    auto d = l->get_destination(DestinationKind::domain, "fake.test");
    ASSERT_TRUE(d.ok() && d->has_value() && (*d)->episode);
    EXPECT_EQ((*d)->episode->messages, 1);
    EXPECT_EQ((*d)->episode->attempts, 2);

    auto byid = l->find_messages_by_message_id("<rq@CLIENT>");
    ASSERT_TRUE(byid.ok());
    EXPECT_EQ(byid->size(), 2u);
    auto byaddr = l->find_recipients_by_address("q@fake.test", 10);
    ASSERT_TRUE(byaddr.ok());
    ASSERT_EQ(byaddr->size(), 2u);
    EXPECT_EQ((*byaddr)[0].queue_id, "NEW1");
}

// Every field the ledger keeps for the given messages and their destinations,
// as text: ledgers that applied the same events have the same full dump.
inline std::string full_dump(Ledger& l, const std::vector<std::string>& queue_ids) {
    auto t = [](const std::optional<TimePoint>& v) { return v ? std::to_string(to_micros(*v)) : "-"; };
    std::ostringstream out;
    for (const auto& id : queue_ids) {
        auto m = l.get_message(id);
        if (!m.ok() || !m->has_value()) {
            out << id << " missing\n";
            continue;
        }
        const auto& v = **m;
        out << v.queue_id << " first=" << v.first_queue_id << " prev=" << v.previous_queue_id
            << " next=" << v.next_queue_id << " mid=" << v.message_id << " fp=" << v.fingerprint
            << " from=" << v.sender << " size=" << v.size << " nrcpt=" << v.nrcpt
            << " arrival=" << t(v.arrival) << " state=" << to_string(v.state)
            << " updated=" << to_micros(v.updated) << " finished=" << t(v.finished) << "\n";
        auto rs = l.get_recipients(id);
        if (!rs.ok()) {
            out << "  recipients unreadable\n";
            continue;
        }
        for (const auto& r : *rs)
            out << "  " << r.address << " " << to_string(r.state) << " attempts=" << r.attempts
                << " first=" << t(r.first_attempt) << " last=" << t(r.last_attempt)
                << " deferral=" << t(r.first_deferral) << " " << r.reply_code << " " << r.enhanced << " "
                << r.stage << " " << r.relay << " " << to_string(r.category) << " " << r.reply_text << "\n";
    }
    auto ds = l.list_destinations(DestinationFilter{});
    if (ds.ok())
        for (const auto& d : *ds) {
            out << to_string(d.kind) << ":" << d.name << " success=" << t(d.last_success)
                << " deferral=" << t(d.last_deferral);
            if (d.episode)
                out << " open " << to_micros(d.episode->first_deferral) << " "
                    << to_micros(d.episode->last_deferral) << " " << d.episode->attempts << " "
                    << d.episode->messages << " " << d.episode->categories << " " << d.episode->last_relay;
            out << "\n";
            auto h = l.episode_history(d.kind, d.name, from_micros(0), from_micros(INT64_MAX / 2));
            if (h.ok())
                for (const auto& e : *h)
                    out << "  ep " << to_micros(e.first_deferral) << " " << to_micros(e.last_deferral) << " "
                        << t(e.ended) << " " << e.attempts << " " << e.messages << " " << e.categories
                        << "\n";
        }
    return out.str();
}

// A message's events may fall into one batch or several (the ledger may keep
// a batch's rows in memory and write them at its end): every split of the
// same events must give the same ledger, field by field, including requeues
// (postsuper -r), expiry, hold and release, and resent Message-IDs.
TEST_P(LedgerContract, AnySplitIntoBatchesGivesTheSameLedger) {
    IngestItem resent = message_id("A1", 12, "<resent@x>");
    resent.event.resent = true;
    const std::vector<IngestItem> events = {
        client("A1", 10), message_id("A1", 11, "<a1@x>"), resent, queue_active("A1", 13, "s@x.test", 900, 3),
        deferred("A1", 14, "r1@d1.test"), sent("A1", 15, "r2@d2.test"),
        deferred("A1", 16, "r3@d1.test", "mx2.example.net"), queue_op("A1", 30, "placed on hold"),
        deferred("A1", 31, "r1@d1.test"), queue_op("A1", 40, "released from hold"),
        queue_active("A1", 50, "s@x.test", 900, 3), deferred("A1", 51, "r1@d1.test"),
        // postsuper -r: B1 takes over A1 and its pending recipients
        queue_op("A1", 60, "requeued"), pickup("B1", 61, "s@x.test", "A1"), message_id("B1", 61, "<a1@x>"),
        queue_active("B1", 62, "s@x.test", -1, 2), sent("B1", 63, "r3@d1.test", "mx2.example.net"),
        deferred("B1", 64, "r1@d1.test"), client("C1", 70), queue_active("C1", 71, "t@x.test"),
        deferred("C1", 72, "q1@d1.test"), deferred("C1", 73, "q2@d3.test"), sent("C1", 74, "q3@d3.test"),
        expired("C1", 500, "t@x.test"), sent("B1", 501, "r1@d1.test"), removed("B1", 502),
        // a requeue whose successor already has one of the recipients
        client("D1", 600), queue_active("D1", 601, "u@x.test"), deferred("D1", 602, "p1@d4.test"),
        deferred("D1", 603, "p2@d4.test"), client("E1", 604), deferred("E1", 605, "p2@d4.test"),
        pickup("E1", 606, "u@x.test", "D1"), queue_op("E1", 607, "placed on hold"), removed("E1", 608),
        removed("D1", 609), pickup("F1", 700, "v@x.test"), queue_active("F1", 701, "v@x.test"),
        queue_op("F1", 702, "removed")};
    const std::vector<std::string> ids = {"A1", "B1", "C1", "D1", "E1", "F1"};
    std::string whole;
    {
        auto l = open(".whole");
        ASSERT_TRUE(l);
        ingest(*l, events);
        whole = full_dump(*l, ids);
    }
    EXPECT_EQ(whole.find("missing"), std::string::npos) << whole;
    EXPECT_NE(whole.find("B1 first=A1 prev=A1 next= mid=a1@x"), std::string::npos) << whole;
    EXPECT_NE(whole.find("C1 first=C1"), std::string::npos) << whole;
    for (std::size_t size : {std::size_t{1}, std::size_t{2}, std::size_t{5}, std::size_t{13}}) {
        auto l = open(".by" + std::to_string(size));
        ASSERT_TRUE(l);
        for (std::size_t i = 0; i < events.size(); i += size) {
            std::vector<IngestItem> part(
                events.begin() + static_cast<std::ptrdiff_t>(i),
                events.begin() + static_cast<std::ptrdiff_t>(std::min(events.size(), i + size)));
            ingest(*l, part);
        }
        EXPECT_EQ(full_dump(*l, ids), whole) << "batches of " << size;
    }
}

TEST_P(LedgerContract, MessageStateFollowsEventsWithinOneBatch) {
    auto l = open();
    ASSERT_TRUE(l);
    // One batch: deferred, picked up by qmgr again (active), deferred again.
    ingest(*l, {client("S1", 1), queue_active("S1", 2, "s@x.test"), deferred("S1", 3, "r@d.test"),
                queue_active("S1", 600, "s@x.test"), deferred("S1", 601, "r@d.test")});
    auto m = l->get_message("S1");
    ASSERT_TRUE(m.ok() && m->has_value());
    EXPECT_EQ((*m)->state, MessageState::deferred);
    EXPECT_EQ((*m)->arrival, at(1));
    EXPECT_EQ((*m)->updated, at(601));
    ingest(*l, {queue_active("S1", 1200, "s@x.test")});
    m = l->get_message("S1");
    ASSERT_TRUE(m.ok() && m->has_value());
    EXPECT_EQ((*m)->state, MessageState::active);
}

TEST_P(LedgerContract, ExpiredMessageIsNoLongerPending) {
    auto l = open();
    ASSERT_TRUE(l);
    ingest(*l, {message_id("E1", 1, "<e@x>"), queue_active("E1", 1, "s@x.test"),
                deferred("E1", 2, "r@d.test"), expired("E1", 500000, "s@x.test")});
    auto m = l->get_message("E1");
    ASSERT_TRUE(m.ok() && m->has_value());
    EXPECT_EQ((*m)->state, MessageState::expired);
    auto rs = l->get_recipients("E1");
    ASSERT_TRUE(rs.ok() && rs->size() == 1);
    EXPECT_EQ((*rs)[0].state, RecipientState::expired);
    PendingCopyQuery q;
    q.message_id = "<e@x>";
    q.recipients = {"r@d.test"};
    auto r = l->find_pending_copies(q);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->empty());
}

TEST_P(LedgerContract, DestinationStateIsSetAndFiltered) {
    auto l = open();
    ASSERT_TRUE(l);
    ingest(*l, {deferred("Q1", 10, "a@one.test", "mx1.test"), deferred("Q2", 10, "a@two.test", "mx1.test")});
    ASSERT_TRUE(l->set_destination_state(DestinationKind::domain, "one.test", "watch", at(20)).ok());
    ASSERT_TRUE(l->set_destination_state(DestinationKind::relay, "mx1.test", "escalate", at(30)).ok());
    ASSERT_TRUE(l->set_destination_state(DestinationKind::domain, "never-seen.test", "noted", at(31)).ok());
    DestinationFilter f;
    f.state = "watch";
    auto w = l->list_destinations(f);
    ASSERT_TRUE(w.ok());
    ASSERT_EQ(w->size(), 1u);
    EXPECT_EQ((*w)[0].name, "one.test");
    EXPECT_EQ((*w)[0].state_changed, at(20));
    ASSERT_TRUE((*w)[0].episode.has_value());
    f.state.reset();
    f.kind = DestinationKind::domain;
    auto all = l->list_destinations(f);
    ASSERT_TRUE(all.ok());
    EXPECT_EQ(all->size(), 3u);
    f.limit = 2;
    all = l->list_destinations(f);
    ASSERT_TRUE(all.ok());
    EXPECT_EQ(all->size(), 2u);
    auto r = l->get_destination(DestinationKind::relay, "mx1.test");
    ASSERT_TRUE(r.ok() && r->has_value());
    EXPECT_EQ((*r)->state, "escalate");
    // The engine's state survives episodes ending: it decides when to say "recovered".
    ingest(*l, {sent("Q3", 40, "b@one.test", "mx1.test")});
    r = l->get_destination(DestinationKind::relay, "mx1.test");
    ASSERT_TRUE(r.ok() && r->has_value());
    EXPECT_EQ((*r)->state, "escalate");
    EXPECT_FALSE((*r)->episode.has_value());
    auto missing = l->get_destination(DestinationKind::domain, "nowhere.test");
    ASSERT_TRUE(missing.ok());
    EXPECT_FALSE(missing->has_value());
}

// A listing is never cut without the caller asking: more destinations than
// the old default cap of 10,000 all come back, in (kind, name) order.
TEST_P(LedgerContract, DestinationListingHasNoHiddenCap) {
    auto l = open();
    ASSERT_TRUE(l);
    constexpr int kDomains = 10'050;
    // Batches of a size a follower hands over (one huge Redis script would
    // run past the command timeout).
    std::vector<IngestItem> batch;
    for (int i = 0; i < kDomains; ++i) {
        char name[32];
        std::snprintf(name, sizeof name, "u@d%05d.test", i);
        batch.push_back(deferred(qid_for(i), 10 + i / 1000, name, "mx.shared.test"));
        if (batch.size() == 250 || i == kDomains - 1) {
            ingest(*l, std::move(batch));
            batch.clear();
        }
    }
    DestinationFilter f;
    f.kind = DestinationKind::domain;
    auto all = l->list_destinations(f);
    ASSERT_TRUE(all.ok()) << all.error().message;
    ASSERT_EQ(all->size(), static_cast<std::size_t>(kDomains));
    EXPECT_EQ(all->front().name, "d00000.test");
    EXPECT_EQ(all->back().name, "d10049.test");
    f.kind.reset();
    auto both = l->list_destinations(f);
    ASSERT_TRUE(both.ok());
    EXPECT_EQ(both->size(), static_cast<std::size_t>(kDomains) + 1) << "the domains and the one MX";
    f.offset = kDomains - 1;
    f.limit = 5;
    auto tail = l->list_destinations(f);
    ASSERT_TRUE(tail.ok());
    ASSERT_EQ(tail->size(), 2u) << "the last domain, then the relay";
    EXPECT_EQ((*tail)[0].name, "d10049.test");
    EXPECT_EQ((*tail)[1].kind, DestinationKind::relay);
}

// Offset and limit page the filtered rows (not the rows before the filter),
// in the same order on every backend.
TEST_P(LedgerContract, DestinationPagesAreTakenAfterTheFilter) {
    auto l = open();
    ASSERT_TRUE(l);
    std::vector<IngestItem> batch;
    for (int i = 0; i < 12; ++i)
        batch.push_back(deferred(qid_for(i), 10, "u@p" + std::to_string(10 + i) + ".test", "mx.p.test"));
    ingest(*l, std::move(batch));
    // Every third domain is watched: p10, p13, p16, p19.
    for (int i = 0; i < 12; i += 3)
        ASSERT_TRUE(l->set_destination_state(DestinationKind::domain, "p" + std::to_string(10 + i) + ".test",
                                             "watch", at(20))
                        .ok());
    DestinationFilter f;
    f.state = "watch";
    f.offset = 1;
    f.limit = 2;
    auto page = l->list_destinations(f);
    ASSERT_TRUE(page.ok());
    ASSERT_EQ(page->size(), 2u);
    EXPECT_EQ((*page)[0].name, "p13.test");
    EXPECT_EQ((*page)[1].name, "p16.test");
    f.offset = 3;
    page = l->list_destinations(f);
    ASSERT_TRUE(page.ok());
    ASSERT_EQ(page->size(), 1u);
    EXPECT_EQ((*page)[0].name, "p19.test");
    f.offset = 4;
    page = l->list_destinations(f);
    ASSERT_TRUE(page.ok());
    EXPECT_TRUE(page->empty());
    f.state.reset();
    f.kind = DestinationKind::domain;
    f.open_episode_only = true;
    f.offset = 10;
    f.limit = 100;
    page = l->list_destinations(f);
    ASSERT_TRUE(page.ok());
    ASSERT_EQ(page->size(), 2u);
    EXPECT_EQ((*page)[0].name, "p20.test");
    EXPECT_EQ((*page)[1].name, "p21.test");
}

// The counts by ladder state are those of the listing, without reading it:
// more destinations than one round trip of the Redis backend reads (1000).
TEST_P(LedgerContract, DestinationsAreCountedByStateAsTheListingHasThem) {
    auto l = open();
    ASSERT_TRUE(l);
    auto empty = l->count_destinations_by_state();
    ASSERT_TRUE(empty.ok()) << empty.error().message;
    EXPECT_TRUE(empty->empty());
    std::vector<IngestItem> batch;
    for (int i = 0; i < 1100; ++i) {
        batch.push_back(deferred(qid_for(i), 10, "u@c" + std::to_string(i) + ".test",
                                 "mx" + std::to_string(i % 7) + ".test"));
        if (batch.size() == 250) {
            ingest(*l, std::move(batch));
            batch.clear();
        }
    }
    ingest(*l, std::move(batch));
    for (int i : {3, 500, 1099})
        ASSERT_TRUE(l->set_destination_state(DestinationKind::domain, "c" + std::to_string(i) + ".test",
                                             "watch", at(20))
                        .ok());
    ASSERT_TRUE(l->set_destination_state(DestinationKind::relay, "mx2.test", "escalate", at(21)).ok());
    ASSERT_TRUE(l->set_destination_state(DestinationKind::domain, "c7.test", "recovered", at(22)).ok());
    ASSERT_TRUE(l->set_destination_state(DestinationKind::domain, "never-seen.test", "noted", at(23)).ok());
    auto counts = l->count_destinations_by_state();
    ASSERT_TRUE(counts.ok()) << counts.error().message;
    const std::map<std::string, std::int64_t> expected{
        {"", 1100 + 7 - 3 - 1 - 1}, {"watch", 3}, {"escalate", 1}, {"recovered", 1}, {"noted", 1}};
    EXPECT_EQ(*counts, expected);
    auto all = l->list_destinations(DestinationFilter{});
    ASSERT_TRUE(all.ok());
    std::map<std::string, std::int64_t> listed;
    for (const auto& d : *all) ++listed[d.state];
    EXPECT_EQ(*counts, listed);
}

// Destinations delivered to since a time, by kind, as the listing has them:
// the bound is included, a later state change is no delivery, and a
// destination only deferred never counts.
TEST_P(LedgerContract, DestinationsDeliveredSinceAreCountedByKind) {
    auto l = open();
    ASSERT_TRUE(l);
    std::vector<IngestItem> batch;
    for (int i = 0; i < 1200; ++i) {
        const std::string rcpt = "u@s" + std::to_string(i) + ".test";
        batch.push_back(sent(qid_for(i), 100 + 10 * i, rcpt, "mx" + std::to_string(i % 3) + ".test"));
        if (batch.size() == 250) {
            ingest(*l, std::move(batch));
            batch.clear();
        }
    }
    batch.push_back(deferred(qid_for(5000), 50000, "u@late.test", "mx.late.test"));
    ingest(*l, std::move(batch));
    // A state set long after the last delivery raises nothing but the state.
    ASSERT_TRUE(l->set_destination_state(DestinationKind::domain, "s0.test", "watch", at(90000)).ok());
    auto all = l->list_destinations(DestinationFilter{});
    ASSERT_TRUE(all.ok());
    auto listed = [&](DestinationKind kind, std::int64_t since) {
        std::int64_t n = 0;
        for (const auto& d : *all) n += d.kind == kind && d.last_success && *d.last_success >= at(since);
        return n;
    };
    auto count = [&](DestinationKind kind, std::int64_t since) {
        auto n = l->count_destinations_delivered(kind, at(since));
        EXPECT_TRUE(n.ok()) << n.error().message;
        return n.ok() ? *n : -1;
    };
    EXPECT_EQ(count(DestinationKind::domain, 0), 1200);
    EXPECT_EQ(count(DestinationKind::domain, 100), 1200);
    EXPECT_EQ(count(DestinationKind::domain, 101), 1199);
    EXPECT_EQ(count(DestinationKind::domain, 110), 1199) << "the bound itself is included";
    EXPECT_EQ(count(DestinationKind::domain, 100 + 10 * 1199), 1);
    EXPECT_EQ(count(DestinationKind::domain, 100 + 10 * 1199 + 1), 0);
    EXPECT_EQ(count(DestinationKind::domain, 80000), 0) << "s0.test's state changed, not its deliveries";
    EXPECT_EQ(count(DestinationKind::relay, 0), 3) << "mx.late.test was only deferred";
    EXPECT_EQ(count(DestinationKind::relay, 100 + 10 * 1198), 2);
    for (std::int64_t since : {0, 1, 100, 5555, 12000, 12090, 12091, 50000})
        for (auto kind : {DestinationKind::domain, DestinationKind::relay})
            EXPECT_EQ(count(kind, since), listed(kind, since)) << to_string(kind) << " since " << since;
}

inline std::string episode_line(const Episode& e) {
    std::ostringstream out;
    out << to_string(e.kind) << ":" << e.destination << " " << to_micros(e.first_deferral) << "-"
        << to_micros(e.last_deferral) << " ended " << (e.ended ? to_micros(*e.ended) : -1) << " "
        << e.attempts << "/" << e.messages << " " << e.categories << " " << e.last_relay << " "
        << e.last_reply;
    return out.str();
}

// The episodes of a period in one read are each destination's history of that
// period, in listing order, each destination's oldest first: across more
// destinations than one round trip of the Redis backend reads, with the
// bounds included, and an episode that ended before its first deferral (a
// success logged out of order) in the period its first deferral lies in.
TEST_P(LedgerContract, EpisodesOfAPeriodAreEachDestinationsHistoryInOneRead) {
    auto l = open();
    ASSERT_TRUE(l);
    std::vector<IngestItem> batch;
    auto flush = [&] {
        ingest(*l, std::move(batch));
        batch.clear();
    };
    for (int i = 0; i < 1100; ++i) {
        char rcpt[32];
        std::snprintf(rcpt, sizeof rcpt, "u@e%04d.test", i);
        const std::string mx = "mx" + std::to_string(i % 5) + ".test";
        batch.push_back(deferred(qid_for(2 * i), 1000 + i, rcpt, mx));
        batch.push_back(sent(qid_for(2 * i + 1), 1050 + i, rcpt, mx));
        if (batch.size() >= 250) flush();
    }
    flush();
    // Three ended episodes and an open one.
    for (int k = 0; k < 4; ++k) {
        batch.push_back(deferred(qid_for(5000 + k), 100 + 200 * k, "u@multi.test", "mx.multi.test"));
        if (k < 3) batch.push_back(sent(qid_for(5100 + k), 200 + 200 * k, "v@multi.test", "mx.multi.test"));
    }
    flush();
    batch.push_back(deferred(qid_for(6000), 3000, "u@skew.test", "mx.skew.test"));
    batch.push_back(sent(qid_for(6001), 2990, "v@skew.test", "mx.skew.test"));
    flush();

    auto all = l->list_destinations(DestinationFilter{});
    ASSERT_TRUE(all.ok());
    ASSERT_GT(all->size(), 1100u);
    const std::pair<std::int64_t, std::int64_t> periods[] = {{0, 1'000'000}, {1000, 1000}, {1000, 1099},
                                                             {1500, 2000},   {2995, 4000}, {3000, 3000},
                                                             {101, 500},     {2100, 2099}};
    for (auto [from, to] : periods) {
        auto got = l->episodes_between(at(from), at(to));
        ASSERT_TRUE(got.ok()) << got.error().message;
        std::vector<std::string> want, have;
        for (const auto& d : *all) {
            auto h = l->episode_history(d.kind, d.name, at(from), at(to));
            ASSERT_TRUE(h.ok());
            for (const auto& e : *h) want.push_back(episode_line(e));
        }
        for (const auto& e : *got) have.push_back(episode_line(e));
        EXPECT_EQ(have, want) << "period " << from << "-" << to;
    }
    auto whole = l->episodes_between(at(0), at(1'000'000));
    ASSERT_TRUE(whole.ok());
    EXPECT_EQ(whole->size(), 1100u + 1100u + 3 + 3 + 1 + 1) << "domains, MX hosts, multi.test's, skew.test's";
    auto one = l->episodes_between(at(1000), at(1000));
    ASSERT_TRUE(one.ok());
    ASSERT_EQ(one->size(), 2u);
    EXPECT_EQ(episode_line((*one)[0]).substr(0, 30), "domain:e0000.test 1000000000-1");
    EXPECT_EQ((*one)[1].kind, DestinationKind::relay);
    EXPECT_EQ((*one)[1].destination, "mx0.test");
    auto skew = l->episodes_between(at(2995), at(4000));
    ASSERT_TRUE(skew.ok());
    ASSERT_EQ(skew->size(), 2u) << "skew.test and its MX host";
    EXPECT_EQ((*skew)[0].destination, "skew.test");
    EXPECT_EQ((*skew)[0].first_deferral, at(3000));
    EXPECT_EQ((*skew)[0].ended, at(2990));
    auto multi = l->episodes_between(at(101), at(500));
    ASSERT_TRUE(multi.ok());
    ASSERT_EQ(multi->size(), 4u) << "multi.test's episodes from 300 and 500, and its MX host's";
    EXPECT_EQ((*multi)[0].first_deferral, at(300));
    EXPECT_EQ((*multi)[1].first_deferral, at(500));
    auto none = l->episodes_between(at(2100), at(2099));
    ASSERT_TRUE(none.ok());
    EXPECT_TRUE(none->empty());
}

TEST_P(LedgerContract, FlagsExpireAndClear) {
    auto l = open();
    ASSERT_TRUE(l);
    Flag a{0, "bad.test", "receiver-config recurring", at(100), at(1000), std::nullopt};
    Flag b{0, "bad.test", "manual", at(200), std::nullopt, std::nullopt};
    Flag c{0, "other.test", "x", at(300), std::nullopt, std::nullopt};
    auto ia = l->set_flag(a), ib = l->set_flag(b), ic = l->set_flag(c);
    ASSERT_TRUE(ia.ok() && ib.ok() && ic.ok());
    EXPECT_NE(*ia, *ib);
    auto active = l->list_flags(std::string_view("bad.test"), at(500), false);
    ASSERT_TRUE(active.ok());
    ASSERT_EQ(active->size(), 2u);
    EXPECT_EQ((*active)[0].reason, "receiver-config recurring");
    EXPECT_EQ((*active)[0].expires_at, at(1000));
    active = l->list_flags(std::string_view("bad.test"), at(1500), false);
    ASSERT_TRUE(active.ok());
    ASSERT_EQ(active->size(), 1u);
    EXPECT_EQ((*active)[0].reason, "manual");
    auto cleared = l->clear_flags("bad.test", at(1600));
    ASSERT_TRUE(cleared.ok());
    EXPECT_EQ(*cleared, 1);
    active = l->list_flags(std::string_view("bad.test"), at(1700), false);
    ASSERT_TRUE(active.ok());
    EXPECT_TRUE(active->empty());
    auto every = l->list_flags(std::nullopt, at(1700), true);
    ASSERT_TRUE(every.ok());
    EXPECT_EQ(every->size(), 3u);
    auto others = l->list_flags(std::nullopt, at(1700), false);
    ASSERT_TRUE(others.ok());
    ASSERT_EQ(others->size(), 1u);
    EXPECT_EQ((*others)[0].destination, "other.test");
}

TEST_P(LedgerContract, VerdictCountsAndEngineStatePersist) {
    auto l = open();
    ASSERT_TRUE(l);
    auto v = l->add_verdict_count("escalate", 1);
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(*v, 1);
    v = l->add_verdict_count("escalate", 2);
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(*v, 3);
    ASSERT_TRUE(l->add_verdict_count("duplicate-rejected", 1).ok());
    ASSERT_TRUE(l->put_state("engine.spread.window", "{\"since\":123}").ok());
    ASSERT_TRUE(l->put_state("engine.spread.window", "{\"since\":456}").ok());
    l.reset();
    auto again = open();
    ASSERT_TRUE(again);
    auto counts = again->verdict_counts();
    ASSERT_TRUE(counts.ok());
    EXPECT_EQ(counts->at("escalate"), 3);
    EXPECT_EQ(counts->at("duplicate-rejected"), 1);
    auto s = again->get_state("engine.spread.window");
    ASSERT_TRUE(s.ok() && s->has_value());
    EXPECT_EQ(**s, "{\"since\":456}");
    auto missing = again->get_state("nope");
    ASSERT_TRUE(missing.ok());
    EXPECT_FALSE(missing->has_value());
}

// Duplicates between fresh events: the batch's journal entry holds exactly
// the fresh ones, in batch order.
TEST_P(LedgerContract, JournalEntryOfABatchWithDuplicatesBetweenFreshEventsHoldsTheFreshOnes) {
    auto l = open();
    ASSERT_TRUE(l);
    std::vector<IngestItem> known = {deferred("K1", 10, "a@k.test"), deferred("K2", 11, "b@k.test"),
                                     deferred("K3", 12, "c@k.test")};
    ASSERT_TRUE(l->ingest(known, std::nullopt).ok());
    std::vector<IngestItem> batch = {deferred("F1", 13, "d@k.test"), known[0], deferred("F2", 14, "e@k.test"),
                                     deferred("F3", 15, "f@k.test"), known[1], known[2],
                                     deferred("F4", 16, "g@k.test")};
    auto r = l->ingest(batch, std::nullopt);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->applied, 4u);
    EXPECT_EQ(r->fresh, (std::vector<bool>{true, false, true, true, false, false, true}));
    auto entries = l->read_journal(r->journal_seq - 1, 10);
    ASSERT_TRUE(entries.ok()) << entries.error().message;
    ASSERT_EQ(entries->size(), 1u);
    EXPECT_EQ((*entries)[0].seq, r->journal_seq);
    std::vector<EngineJournalRecord> records;
    ASSERT_TRUE(decode_journal_entry((*entries)[0].data, records));
    std::vector<std::string> queue_ids;
    for (const auto& rec : records) queue_ids.push_back(rec.item.event.queue_id);
    EXPECT_EQ(queue_ids, (std::vector<std::string>{"F1", "F2", "F3", "F4"}));
    EXPECT_EQ(encode_journal_event(records[3].item), encode_journal_event(batch[6]));
}

TEST_P(LedgerContract, EngineJournalHoldsFreshEventsInOrderUntilAStateCoversThem) {
    auto l = open();
    ASSERT_TRUE(l);
    std::vector<IngestItem> batch = {deferred("J1", 10, "a@j.test"), deferred("J2", 11, "b@j.test")};
    batch[0].event.reason = std::string("host mx.j.test said: 451 4.3.5 bad \xc3\x28 byte\0end", 46);
    auto first = l->ingest(batch, std::nullopt);
    ASSERT_TRUE(first.ok()) << first.error().message;
    const std::uint64_t s0 = first->journal_seq;
    ASSERT_GT(s0, 0u);
    // A replay adds nothing to the journal; a batch with a new event adds one entry.
    auto replay = l->ingest(batch, std::nullopt);
    ASSERT_TRUE(replay.ok());
    EXPECT_EQ(replay->journal_seq, 0u);
    std::vector<IngestItem> mixed = {batch[1], deferred("J3", 12, "c@j.test")};
    auto second = l->ingest(mixed, std::nullopt);
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(second->applied, 1u);
    EXPECT_EQ(second->journal_seq, s0 + 1);
    std::vector<std::string> extra = {encode_journal_tick(at(20)),
                                      encode_journal_clear_flag("j.test", at(21))};
    auto appended = l->append_journal(extra);
    ASSERT_TRUE(appended.ok());
    EXPECT_EQ(*appended, s0 + 2);

    auto all = l->read_journal(0, 100);
    ASSERT_TRUE(all.ok()) << all.error().message;
    ASSERT_EQ(all->size(), 4u);
    for (std::size_t i = 0; i < all->size(); ++i) EXPECT_EQ((*all)[i].seq, s0 + i);
    std::vector<EngineJournalRecord> r;
    ASSERT_TRUE(decode_journal_entry((*all)[0].data, r));
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0].kind, EngineJournalRecord::Kind::event);
    EXPECT_EQ(r[0].item.event.reason, batch[0].event.reason) << "reply bytes survive unchanged";
    EXPECT_EQ(r[0].item.event.queue_id, "J1");
    EXPECT_EQ(r[1].item.event.queue_id, "J2");
    EXPECT_EQ(encode_journal_event(r[0].item), encode_journal_event(batch[0])) << "every field round-trips";
    r.clear();
    ASSERT_TRUE(decode_journal_entry((*all)[1].data, r));
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].item.event.queue_id, "J3");
    r.clear();
    ASSERT_TRUE(decode_journal_entry((*all)[3].data, r));
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].kind, EngineJournalRecord::Kind::clear_flag);
    EXPECT_EQ(r[0].destination, "j.test");
    EXPECT_EQ(r[0].time, at(21));
    r.clear();
    EXPECT_FALSE(decode_journal_entry("Zjunk", r));
    EXPECT_FALSE(decode_journal_entry((*all)[0].data.substr(0, 20), r)) << "a cut entry is refused";
    EXPECT_TRUE(r.empty());
    auto tail = l->read_journal(s0 + 1, 1);
    ASSERT_TRUE(tail.ok());
    ASSERT_EQ(tail->size(), 1u);
    EXPECT_EQ((*tail)[0].seq, s0 + 2);

    // Saving a state trims what it covers, and the state is stored byte-exact.
    const std::string state("\x00\xff\xc3\x28 state", 10);
    ASSERT_TRUE(l->save_engine_state("engine", state, s0 + 1, 0).ok());
    auto rest = l->read_journal(0, 100);
    ASSERT_TRUE(rest.ok());
    ASSERT_EQ(rest->size(), 2u);
    EXPECT_EQ((*rest)[0].seq, s0 + 2);
    l.reset();
    auto again = open();
    ASSERT_TRUE(again);
    auto saved = again->get_state("engine");
    ASSERT_TRUE(saved.ok() && saved->has_value());
    EXPECT_EQ(**saved, state);
    // Numbers never go back, even once the journal was trimmed empty.
    ASSERT_TRUE(again->save_engine_state("engine", state, s0 + 10, 0).ok());
    auto empty = again->read_journal(0, 100);
    ASSERT_TRUE(empty.ok());
    EXPECT_TRUE(empty->empty());
    auto next = again->append_journal(std::vector<std::string>{encode_journal_tick(at(30))});
    ASSERT_TRUE(next.ok());
    EXPECT_EQ(*next, s0 + 4);
}

TEST_P(LedgerContract, VerdictEffectsApplyOnceAboveTheHighWaterMark) {
    auto l = open();
    ASSERT_TRUE(l);
    auto mark = l->verdict_mark();
    ASSERT_TRUE(mark.ok());
    EXPECT_EQ(*mark, 0u);
    std::vector<VerdictEffect> effects(4);
    effects[0].seq = 1;
    effects[0].verdict = "watch";
    effects[0].action = VerdictEffect::Action::destination_state;
    effects[0].name = "hw.test";
    effects[0].state = "watch";
    effects[0].at = at(100);
    effects[1].seq = 2;
    effects[1].verdict = "flagged";
    effects[1].action = VerdictEffect::Action::set_flag;
    effects[1].name = "hw.test";
    effects[1].reason = "repeat";
    effects[1].at = at(101);
    effects[1].expires_at = at(100000);
    effects[2].seq = 3;
    effects[2].verdict = "too_soon";
    effects[2].at = at(102);
    effects[3].seq = 4;
    effects[3].verdict = "watch";
    effects[3].action = VerdictEffect::Action::destination_state;
    effects[3].kind = DestinationKind::relay;
    effects[3].name = "mx.hw.test";
    effects[3].state = "watch";
    effects[3].at = at(103);
    auto before = l->apply_verdict_effects(std::span<const VerdictEffect>(effects.data(), 2), 0);
    ASSERT_TRUE(before.ok()) << before.error().message;
    EXPECT_EQ(*before, 0u);
    // A replay offers 1..4 again: only 3 and 4 are new.
    before = l->apply_verdict_effects(effects, 0);
    ASSERT_TRUE(before.ok());
    EXPECT_EQ(*before, 2u);
    before = l->apply_verdict_effects(effects, 0);
    ASSERT_TRUE(before.ok());
    EXPECT_EQ(*before, 4u);
    mark = l->verdict_mark();
    ASSERT_TRUE(mark.ok());
    EXPECT_EQ(*mark, 4u);

    auto counts = l->verdict_counts();
    ASSERT_TRUE(counts.ok());
    EXPECT_EQ(counts->at("watch"), 2);
    EXPECT_EQ(counts->at("flagged"), 1);
    EXPECT_EQ(counts->at("too_soon"), 1);
    auto flags = l->list_flags(std::nullopt, at(200), true);
    ASSERT_TRUE(flags.ok());
    ASSERT_EQ(flags->size(), 1u);
    EXPECT_EQ((*flags)[0].reason, "repeat");
    ASSERT_TRUE((*flags)[0].expires_at.has_value());
    EXPECT_EQ(*(*flags)[0].expires_at, at(100000));
    auto d = l->get_destination(DestinationKind::domain, "hw.test");
    ASSERT_TRUE(d.ok() && d->has_value());
    EXPECT_EQ((*d)->state, "watch");
    auto mx = l->get_destination(DestinationKind::relay, "mx.hw.test");
    ASSERT_TRUE(mx.ok() && mx->has_value());
    EXPECT_EQ((*mx)->state, "watch");

    // Clearing is an effect too, applied once.
    std::vector<VerdictEffect> clear(1);
    clear[0].seq = 5;
    clear[0].verdict = "flag_expired";
    clear[0].action = VerdictEffect::Action::clear_flags;
    clear[0].name = "hw.test";
    clear[0].at = at(300);
    ASSERT_TRUE(l->apply_verdict_effects(clear, 0).ok());
    ASSERT_TRUE(l->apply_verdict_effects(clear, 0).ok());
    flags = l->list_flags(std::nullopt, at(400), false);
    ASSERT_TRUE(flags.ok());
    EXPECT_TRUE(flags->empty());
    counts = l->verdict_counts();
    ASSERT_TRUE(counts.ok());
    EXPECT_EQ(counts->at("flag_expired"), 1);
}

TEST_P(LedgerContract, VerdictOutboxKeepsLinesOfAppliedEffectsUntilWritten) {
    auto l = open();
    ASSERT_TRUE(l);
    auto empty = l->read_outbox();
    ASSERT_TRUE(empty.ok()) << empty.error().message;
    EXPECT_TRUE(empty->empty());
    auto effect = [](std::uint64_t seq, std::string line) {
        VerdictEffect e;
        e.seq = seq;
        e.verdict = "too_soon";
        e.at = at(static_cast<std::int64_t>(1000 + seq));
        e.line = std::move(line);
        return e;
    };
    // Lines with tabs, quotes and bytes that are not UTF-8 come back byte-exact.
    const std::string odd = "k\t\"x\": verdict=too_soon note=\xc3\x28";
    std::vector<VerdictEffect> first{effect(1, "a.test: verdict=too_soon"), effect(2, odd), effect(3, "")};
    auto before = l->apply_verdict_effects(first, 0);
    ASSERT_TRUE(before.ok()) << before.error().message;
    EXPECT_EQ(*before, 0u);
    auto box = l->read_outbox();
    ASSERT_TRUE(box.ok());
    ASSERT_EQ(box->size(), 2u) << "an effect without a line keeps nothing";
    EXPECT_EQ((*box)[0].seq, 1u);
    EXPECT_EQ((*box)[0].at, at(1001));
    EXPECT_EQ((*box)[0].line, "a.test: verdict=too_soon");
    EXPECT_EQ((*box)[1].seq, 2u);
    EXPECT_EQ((*box)[1].line, odd);

    // A replay (at or below the mark) adds nothing; the next commit trims what
    // the caller wrote (up to 2) and keeps its own lines.
    std::vector<VerdictEffect> second{effect(2, "replayed: verdict=too_soon"),
                                      effect(4, "d.test: verdict=too_soon"),
                                      effect(5, "e.test: verdict=too_soon")};
    before = l->apply_verdict_effects(second, 2);
    ASSERT_TRUE(before.ok());
    EXPECT_EQ(*before, 3u);
    box = l->read_outbox();
    ASSERT_TRUE(box.ok());
    ASSERT_EQ(box->size(), 2u);
    EXPECT_EQ((*box)[0].seq, 4u);
    EXPECT_EQ((*box)[1].seq, 5u);
    EXPECT_EQ((*box)[1].line, "e.test: verdict=too_soon");

    // Trimming part of it, then the rest with a state save; it survives a reopen in between.
    ASSERT_TRUE(l->apply_verdict_effects(std::vector<VerdictEffect>{}, 4).ok());
    l.reset();
    auto again = open();
    ASSERT_TRUE(again);
    box = again->read_outbox();
    ASSERT_TRUE(box.ok());
    ASSERT_EQ(box->size(), 1u);
    EXPECT_EQ((*box)[0].seq, 5u);
    ASSERT_TRUE(again->save_engine_state("engine", "s", 0, 5).ok());
    box = again->read_outbox();
    ASSERT_TRUE(box.ok());
    EXPECT_TRUE(box->empty());
    auto mark = again->verdict_mark();
    ASSERT_TRUE(mark.ok());
    EXPECT_EQ(*mark, 5u);
}

TEST_P(LedgerContract, PruneRemovesFinishedMessagesAndOldHistoryOnly) {
    auto l = open();
    ASSERT_TRUE(l);
    const std::int64_t day = 86400;
    ingest(*l, {queue_active("OLD", 0, "s@x.test"), deferred("OLD", 1, "r@d.test"),
                sent("OLD", 2, "r@d.test"), removed("OLD", 2), queue_active("LIVE", 10, "s@x.test"),
                deferred("LIVE", 11, "r@e.test"), queue_active("NEW", 40 * day, "s@x.test"),
                sent("NEW", 40 * day, "r@d.test"), removed("NEW", 40 * day)});
    auto before = l->stats();
    ASSERT_TRUE(before.ok());
    EXPECT_EQ(before->messages, 3);
    EXPECT_EQ(before->pending_messages, 1);
    // d.test and mx.example.net ended at 2; LIVE's deferral opened a new relay episode
    // that NEW's delivery through the same MX ended on day 40.
    EXPECT_EQ(before->episodes, 3);
    RetentionPolicy p;
    p.finished_messages = std::chrono::hours(24 * 30);
    p.stale_messages = std::chrono::hours(24 * 60);
    p.episodes = std::chrono::hours(24 * 30);
    p.seen_events = std::chrono::hours(24 * 30);
    auto r = l->prune(p, at(45 * day));
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->messages, 1);
    EXPECT_EQ(r->recipients, 1);
    EXPECT_EQ(r->episodes, 2);
    EXPECT_GE(r->seen_events, 6);
    auto gone = l->get_message("OLD");
    ASSERT_TRUE(gone.ok());
    EXPECT_FALSE(gone->has_value());
    auto live = l->get_message("LIVE");
    ASSERT_TRUE(live.ok());
    EXPECT_TRUE(live->has_value());
    auto kept = l->get_message("NEW");
    ASSERT_TRUE(kept.ok());
    EXPECT_TRUE(kept->has_value());
    // A message nobody has heard of for longer than stale_messages goes too.
    r = l->prune(p, at(75 * day));
    ASSERT_TRUE(r.ok());
    live = l->get_message("LIVE");
    ASSERT_TRUE(live.ok());
    EXPECT_FALSE(live->has_value());
    auto after = l->stats();
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->messages, 0);
    EXPECT_GT(after->bytes, 0);
}

TEST_P(LedgerContract, StatsAndCountersReflectActivity) {
    auto l = open();
    ASSERT_TRUE(l);
    ingest(*l, synthetic_stream(20));
    auto s = l->stats();
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->backend, GetParam().name.substr(0, s->backend.size()));
    EXPECT_EQ(s->messages, 20);
    EXPECT_EQ(s->recipients, 40);
    EXPECT_EQ(s->pending_messages, 5);
    EXPECT_GT(s->destinations, 0);
    EXPECT_GT(s->seen_events, 100);
    EXPECT_GE(s->schema_version, 1);
    auto c = l->counters();
    EXPECT_GE(c.operations, 2u);
    EXPECT_EQ(c.events, synthetic_stream(20).size());
    EXPECT_EQ(c.failures, 0u);
}

// --- processes -------------------------------------------------------------

// Child: ingests `events` in batches of `batch`, each with the position "number
// of events consumed", starting after the position already stored (a follower
// restart), forever looping when `loop` (to be killed).
inline int ingest_child(const LedgerBackend& backend, const std::string& tag,
                        const std::vector<IngestItem>& events, std::size_t batch) {
    auto l = backend.open(tag);
    if (!l) return 3;
    auto pos = (*l)->load_position("synthetic");
    if (!pos) return 4;
    std::size_t from = pos->has_value() ? static_cast<std::size_t>((*pos)->offset) : 0;
    for (std::size_t i = from; i < events.size(); i += batch) {
        std::size_t n = std::min(batch, events.size() - i);
        FollowerPosition p;
        p.source = "synthetic";
        p.offset = i + n;
        p.lines = i + n;
        for (int attempt = 0;; ++attempt) {
            auto r = (*l)->ingest(std::span<const IngestItem>(events.data() + i, n), p);
            if (r) break;
            if (attempt > 100) return 5;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }
    return 0;
}

TEST_P(LedgerContract, KillDuringIngestThenResumeEqualsCleanRun) {
    const int messages = 600;
    auto events = synthetic_stream(messages);
    std::string clean_dump;
    {
        auto clean = open(".clean");
        ASSERT_TRUE(clean);
        ingest(*clean, events);
        clean_dump = dump(*clean, messages);
    }
    const std::string crash_tag = tag() + ".crash";
    // The committed position, read through a connection of its own (opened
    // first, so it also creates the ledger the writers resume in).
    auto probe = GetParam().open(crash_tag);
    ASSERT_TRUE(probe.ok()) << probe.error().message;
    auto committed = [&]() -> std::size_t {
        auto pos = (*probe)->load_position("synthetic");
        return pos.ok() && pos->has_value() ? static_cast<std::size_t>((*pos)->offset) : 0;
    };
    // Kill the writer several times at different moments, resuming each time
    // from the committed position, as the policy daemon does after kill -9.
    // Each kill comes once the writer has committed a batch of its own, a few
    // milliseconds more each round: a fixed delay from the fork could land
    // before the first commit in a slow (sanitizer) build or a busy machine.
    int kills = 0, killed_midway = 0;
    for (int round = 0; round < 4; ++round) {
        const std::size_t before = committed();
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) _exit(ingest_child(GetParam(), crash_tag, events, 37));
        int status = 0;
        bool exited = false;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (committed() <= before && std::chrono::steady_clock::now() < deadline)
            if (waitpid(pid, &status, WNOHANG) == pid) {
                exited = true;
                break;
            } else {
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
        if (!exited) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5 * round));
            if (kill(pid, SIGKILL) == 0) ++kills;
            waitpid(pid, &status, 0);
        }
        if (WIFEXITED(status)) {
            ASSERT_EQ(WEXITSTATUS(status), 0);
        }
        const std::size_t at = committed();
        if (at > 0 && at < events.size()) ++killed_midway;
    }
    EXPECT_GT(kills, 0);
    EXPECT_GT(killed_midway, 0) << "no kill landed in the middle of the stream";
    {
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) _exit(ingest_child(GetParam(), crash_tag, events, 37));
        int status = 0;
        waitpid(pid, &status, 0);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    auto resumed = GetParam().open(crash_tag);
    ASSERT_TRUE(resumed.ok()) << resumed.error().message;
    auto pos = (*resumed)->load_position("synthetic");
    ASSERT_TRUE(pos.ok() && pos->has_value());
    EXPECT_EQ((*pos)->offset, events.size());
    EXPECT_EQ(dump(**resumed, messages), clean_dump);
    // A full replay from the start (position lost) changes nothing either.
    auto replay = (*resumed)->ingest(events, std::nullopt);
    ASSERT_TRUE(replay.ok());
    EXPECT_EQ(replay->applied, 0u);
    EXPECT_EQ(dump(**resumed, messages), clean_dump);
}

TEST_P(LedgerContract, TwoWritersIngestAndQueryAtOnce) {
    const int messages = 400;
    auto all = synthetic_stream(messages);
    // Split by message: writer 0 takes even messages, writer 1 odd ones. A
    // deferral-then-success order across writers is not guaranteed, so the
    // check is on per-message state, which each writer owns.
    std::map<std::string, int> owner;
    for (int m = 0; m < messages; ++m) owner[qid_for(m)] = m % 2;
    std::vector<IngestItem> part[2];
    for (const auto& item : all) part[owner.at(item.event.queue_id)].push_back(item);
    const std::string shared = tag() + ".shared";
    {
        auto first = GetParam().open(shared);  // create the schema before the race
        ASSERT_TRUE(first.ok()) << first.error().message;
    }
    pid_t pids[2];
    for (int w = 0; w < 2; ++w) {
        pids[w] = fork();
        ASSERT_GE(pids[w], 0);
        if (pids[w] == 0) {
            auto l = GetParam().open(shared);
            if (!l) _exit(3);
            for (std::size_t i = 0; i < part[w].size(); i += 25) {
                std::size_t n = std::min<std::size_t>(25, part[w].size() - i);
                bool ok = false;
                for (int attempt = 0; attempt < 200 && !ok; ++attempt) {
                    ok = (*l)->ingest(std::span<const IngestItem>(part[w].data() + i, n), std::nullopt).ok();
                    if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(10));
                }
                if (!ok) _exit(4);
                // Query while the other process writes.
                PendingCopyQuery q;
                q.message_id = "<m" + std::to_string(w) + "@client.example>";
                q.recipients = {"a" + std::to_string(w) + "@d" + std::to_string(w) + ".example"};
                if (!(*l)->find_pending_copies(q).ok()) _exit(5);
                DestinationFilter f;
                if (!(*l)->list_destinations(f).ok()) _exit(6);
            }
            _exit(0);
        }
    }
    for (pid_t pid : pids) {
        int status = 0;
        waitpid(pid, &status, 0);
        ASSERT_TRUE(WIFEXITED(status)) << "writer crashed";
        EXPECT_EQ(WEXITSTATUS(status), 0);
    }
    auto l = GetParam().open(shared);
    ASSERT_TRUE(l.ok());
    auto s = (*l)->stats();
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->messages, messages);
    EXPECT_EQ(s->recipients, 2 * messages);
    EXPECT_EQ(s->pending_messages, messages / 4);
    auto clean = open(".clean");
    ASSERT_TRUE(clean);
    ingest(*clean, all);
    for (int m = 0; m < messages; ++m) {
        auto a = (*l)->get_recipients(qid_for(m));
        auto b = clean->get_recipients(qid_for(m));
        ASSERT_TRUE(a.ok() && b.ok());
        ASSERT_EQ(a->size(), b->size());
        for (std::size_t i = 0; i < a->size(); ++i) {
            EXPECT_EQ((*a)[i].attempts, (*b)[i].attempts) << qid_for(m);
            EXPECT_EQ((*a)[i].state, (*b)[i].state) << qid_for(m);
        }
    }
    PendingCopyQuery q;
    q.message_id = "<m0@client.example>";
    q.recipients = {"b0@d0.example"};
    auto pending = (*l)->find_pending_copies(q);
    ASSERT_TRUE(pending.ok());
    EXPECT_EQ(pending->size(), 1u);  // message 0 keeps deferring (0 % 4 == 0)
}

}  // namespace retryguard::ledger_test

#include "ledger/ledger_event_key_contract.hpp"  // the event-key part of the contract
