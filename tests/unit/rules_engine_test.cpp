// Scenario tests of the rules engine on synthetic multi-day event streams.
#include "retryguard/rules/engine.hpp"

#include <gtest/gtest.h>

#include "engine_feed.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace retryguard {
namespace {

using namespace std::chrono_literals;

const TimePoint T0 = from_micros(1'795'985'302'000'000);  // 2026-11-29T20:48:22Z

Event delivery(TimePoint t, std::string qid, std::string rcpt, DeliveryStatus st,
               std::string relay_host = "mx.example.com",
               std::string reason =
                   "host mx.example.com[192.0.2.1] said: 451 4.3.5 System config error (in reply to end of "
                   "DATA command)") {
    Event e;
    e.kind = EventKind::delivery;
    e.time = t;
    e.queue_id = std::move(qid);
    e.recipient = std::move(rcpt);
    e.status = st;
    e.relay_host = relay_host;
    e.relay = relay_host + "[192.0.2.1]:25";
    e.reason = std::move(reason);
    return e;
}

Event deferred(TimePoint t, std::string qid, std::string rcpt, std::string relay_host = "mx.example.com") {
    return delivery(t, std::move(qid), std::move(rcpt), DeliveryStatus::deferred, std::move(relay_host));
}

std::vector<std::string> names(const std::vector<Verdict>& vs) {
    std::vector<std::string> out;
    for (const auto& v : vs) out.push_back(v.name + "@" + v.key);
    return out;
}

using Feed = EngineFeed;

TEST(RulesEngine, ReceiverConfigClimbsTheLadderAndRecovers) {
    Feed feed;
    auto v1 = feed(deferred(T0, "A1", "bob@example.com"), Category::receiver_config);
    EXPECT_EQ(names(v1), (std::vector<std::string>{"noted@example.com", "noted@mx:mx.example.com"}));
    feed(deferred(T0 + 40min, "A1", "bob@example.com"), Category::receiver_config);
    auto v3 = feed(deferred(T0 + 2h, "A1", "bob@example.com"), Category::receiver_config);
    EXPECT_EQ(feed.count("watch", "example.com"), 1);
    EXPECT_EQ(feed.count("escalate"), 0) << "receiver-config escalates only after 24 h";
    feed(deferred(T0 + 23h, "A1", "bob@example.com"), Category::receiver_config);
    EXPECT_EQ(feed.count("escalate"), 0);
    feed(deferred(T0 + 24h + 1min, "A1", "bob@example.com"), Category::receiver_config);
    const Verdict* esc = feed.find("escalate", "example.com");
    ASSERT_NE(esc, nullptr);
    EXPECT_EQ(esc->field("reply"),
              "host mx.example.com[192.0.2.1] said: 451 4.3.5 System config error (in reply to end of DATA "
              "command)");
    // Time-based checks run as event time passes, before the event that moves
    // the clock: the escalation is due at 24 h, when four attempts were made.
    EXPECT_EQ(esc->field("attempts"), "4");
    EXPECT_EQ(esc->field("first_seen"), format_rfc3339(T0));
    EXPECT_EQ(esc->field("category"), "receiver-config");
    EXPECT_EQ(esc->field("relay"), "mx.example.com[192.0.2.1]:25");

    feed(delivery(T0 + 26h, "A1", "bob@example.com", DeliveryStatus::sent), Category::unknown);
    const Verdict* rec = feed.find("recovered", "example.com");
    ASSERT_NE(rec, nullptr);
    EXPECT_EQ(rec->field("previous"), "escalate");
    EXPECT_EQ(rec->field("duration_s"), std::to_string(26 * 3600));
    const auto* d = feed.engine.destination("example.com");
    ASSERT_NE(d, nullptr);
    EXPECT_FALSE(d->open.has_value());
    ASSERT_EQ(d->history.size(), 1u);
    EXPECT_EQ(d->history[0].ladder, Ladder::recovered);
}

TEST(RulesEngine, ReceiverSystemWaitsForTheRetryWindowBeforeEscalating) {
    Feed feed;
    for (auto t : {0h, 12h, 24h, 48h, 71h})
        feed(deferred(T0 + t, "B1", "ann@slow.example"), Category::receiver_system);
    EXPECT_EQ(feed.count("escalate", "slow.example"), 0);
    feed(deferred(T0 + 72h, "B1", "ann@slow.example"), Category::receiver_system);
    EXPECT_EQ(feed.count("escalate", "slow.example"), 1);
}

TEST(RulesEngine, EscalatesByEventTimeWithoutANewDeferral) {
    Feed feed;
    feed(deferred(T0, "C1", "x@quiet.example"), Category::receiver_config);
    EXPECT_EQ(feed.count("escalate"), 0);
    feed.advance(T0 + 25h);
    EXPECT_EQ(feed.count("escalate", "quiet.example"), 1);
    feed.advance(T0 + 26h);
    EXPECT_EQ(feed.count("escalate", "quiet.example"), 1) << "escalation is reported once per episode";
}

TEST(RulesEngine, GreylistingAndMailboxNeverEscalateADestination) {
    Feed feed;
    for (int i = 0; i < 10; ++i) feed(deferred(T0 + i * 6h, "D1", "a@grey.example"), Category::greylisting);
    for (int i = 0; i < 10; ++i) feed(deferred(T0 + i * 6h, "D2", "full@box.example"), Category::mailbox);
    EXPECT_EQ(feed.count("escalate"), 0);
    EXPECT_EQ(feed.engine.destination("box.example"), nullptr) << "mailbox trouble is per recipient";
}

TEST(RulesEngine, RepeatedReceiverConfigEpisodesFlagTheDestination) {
    Feed feed;
    // A single deferral followed by a success is a blip: it never counts.
    feed(deferred(T0 - 48h, "E9", "u@flaky.example"), Category::receiver_config);
    feed(delivery(T0 - 47h, "E9", "u@flaky.example", DeliveryStatus::sent), Category::unknown);
    for (int ep = 0; ep < 3; ++ep) {
        TimePoint start = T0 + ep * 5 * 24h;
        for (int k = 0; k < 3; ++k)
            feed(deferred(start + k * 40min, "E" + std::to_string(ep), "u@flaky.example"),
                 Category::receiver_config);
        if (ep < 2) {
            EXPECT_EQ(feed.count("flagged", "flaky.example"), 0) << [&] {
                std::string all;
                for (const auto& v : feed.all) all += format_verdict(v) + "\n";
                return all;
            }();
            feed(delivery(start + 3h, "E" + std::to_string(ep), "u@flaky.example", DeliveryStatus::sent),
                 Category::unknown);
        }
    }
    const Verdict* f = feed.find("flagged", "flaky.example");
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->field("reason"), "3 receiver-config episodes within 2592000 s");
    EXPECT_TRUE(feed.engine.destination("flaky.example")->flagged_at.has_value());

    feed.advance(T0 + 10 * 24h + 30 * 24h + 2h);
    EXPECT_EQ(feed.count("flag_expired", "flaky.example"), 1);
    EXPECT_FALSE(feed.engine.destination("flaky.example")->flagged_at.has_value());
}

TEST(RulesEngine, FlagsCanBeClearedByCommand) {
    EngineSettings s;
    s.defaults.repeat_deferrals = 4;
    Feed feed(s);
    for (int i = 0; i < 4; ++i)
        feed(deferred(T0 + i * 30min, "F1", "u@many.example"), Category::receiver_config);
    ASSERT_EQ(feed.count("flagged", "many.example"), 1);
    auto cleared = feed.engine.clear_flag("many.example", T0 + 3h);
    ASSERT_TRUE(cleared.has_value());
    EXPECT_EQ(cleared->name, "flag_cleared");
    EXPECT_FALSE(feed.engine.clear_flag("many.example", T0 + 3h).has_value());
    EXPECT_FALSE(feed.engine.clear_flag("never-seen.example", T0 + 3h).has_value());
}

TEST(RulesEngine, SpreadAcrossUnrelatedDestinationsIsALocalProblem) {
    Feed feed;
    for (int i = 0; i < 8; ++i) {
        std::string d = "d" + std::to_string(i) + ".example";
        feed(deferred(T0 + i * 30s, "G" + std::to_string(i), "u@" + d, "mx." + d), Category::network);
    }
    ASSERT_EQ(feed.count("local_outbound_suspected"), 1);
    EXPECT_TRUE(feed.engine.local_incident_open());
    // Retries keep failing for two days: nobody is escalated for our own outage.
    for (auto t = T0 + 30min; t <= T0 + 49h; t += 30min)
        for (int i = 0; i < 8; ++i) {
            std::string d = "d" + std::to_string(i) + ".example";
            feed(deferred(t + i * 1s, "G" + std::to_string(i), "u@" + d, "mx." + d), Category::network);
        }
    EXPECT_EQ(feed.count("escalate"), 0);
    EXPECT_EQ(feed.count("local_outbound_suspected"), 1) << "one incident, one verdict";
    feed.advance(T0 + 50h);
    EXPECT_EQ(feed.count("local_outbound_cleared"), 0) << "an hour of quiet is a retry gap, not the end";
    feed.advance(T0 + 52h);
    EXPECT_EQ(feed.count("local_outbound_cleared"), 1);
    EXPECT_FALSE(feed.engine.local_incident_open());
}

TEST(RulesEngine, LocalIncidentEndsWhenDeliveriesResume) {
    Feed feed;
    for (int i = 0; i < 8; ++i) {
        std::string d = "d" + std::to_string(i) + ".example";
        feed(deferred(T0 + i * 30s, "P" + std::to_string(i), "u@" + d, "mx." + d), Category::network);
    }
    ASSERT_TRUE(feed.engine.local_incident_open());
    for (int i = 0; i < 4; ++i) {
        std::string d = "d" + std::to_string(i) + ".example";
        feed(
            delivery(T0 + 20min + i * 1s, "P" + std::to_string(i), "u@" + d, DeliveryStatus::sent, "mx." + d),
            Category::unknown);
        EXPECT_EQ(feed.engine.local_incident_open(), i < 3);
    }
    EXPECT_EQ(feed.find("local_outbound_cleared", "-")->field("why"), "deliveries resumed");
}

TEST(RulesEngine, AnIncidentThatEndedDoesNotReopenFromItsOwnHits) {
    Feed feed;
    for (int i = 0; i < 12; ++i) {
        std::string d = "r" + std::to_string(i) + ".example";
        feed(deferred(T0 + i * 10s, "R" + std::to_string(i), "u@" + d, "mx." + d), Category::network);
    }
    ASSERT_EQ(feed.count("local_outbound_suspected"), 1);
    for (int i = 0; i < 4; ++i) {
        std::string d = "r" + std::to_string(i) + ".example";
        feed(delivery(T0 + 3min + i * 1s, "R" + std::to_string(i), "u@" + d, DeliveryStatus::sent, "mx." + d),
             Category::unknown);
    }
    ASSERT_EQ(feed.count("local_outbound_cleared"), 1);
    // A straggler of the same class within the old window: one destination, no new incident.
    feed(deferred(T0 + 4min, "R9", "u@r9.example", "mx.r9.example"), Category::network);
    EXPECT_EQ(feed.count("local_outbound_suspected"), 1);
    EXPECT_FALSE(feed.engine.local_incident_open());
    // A new spread is a new incident.
    for (int i = 0; i < 8; ++i) {
        std::string d = "s" + std::to_string(i) + ".example";
        feed(deferred(T0 + 2h + i * 10s, "S" + std::to_string(i), "u@" + d, "mx." + d), Category::network);
    }
    EXPECT_EQ(feed.count("local_outbound_suspected"), 2);
}

TEST(RulesEngine, ManyDeferralsToOneDestinationAreItsOwnOutage) {
    Feed feed;
    for (int i = 0; i < 20; ++i)
        feed(deferred(T0 + i * 10s, "H" + std::to_string(i), "u" + std::to_string(i) + "@one.example"),
             Category::network);
    EXPECT_EQ(feed.count("local_outbound_suspected"), 0);
    feed(deferred(T0 + 49h, "H0", "u0@one.example"), Category::network);
    EXPECT_EQ(feed.count("escalate", "one.example"), 1);
}

// Seven destinations each deferred three times (watch) in the detection window,
// then the eighth opens the incident: `n` = 7 destinations x (domain + MX).
Feed open_network_incident_after_watch() {
    Feed feed;
    for (int i = 0; i < 7; ++i)
        for (int k = 0; k < 3; ++k) {
            std::string d = "w" + std::to_string(i) + ".example";
            feed(deferred(T0 + i * 20s + k * 5s, "W" + std::to_string(i), "u" + std::to_string(k) + "@" + d,
                          "mx." + d),
                 Category::network);
        }
    EXPECT_EQ(feed.count("watch"), 14) << "judged per destination before the incident existed";
    EXPECT_EQ(feed.count("local_outbound_suspected"), 0);
    feed(deferred(T0 + 3min, "W7", "u@w7.example", "mx.w7.example"), Category::network);
    return feed;
}

TEST(RulesEngine, IncidentTakesBackTheDeferralsThatRevealedIt) {
    Feed feed = open_network_incident_after_watch();
    ASSERT_EQ(feed.count("local_outbound_suspected"), 1);
    const Verdict* s = feed.find("local_outbound_suspected", "-");
    EXPECT_EQ(s->field("absorbed"), "14");
    EXPECT_EQ(feed.engine.incident_deferrals(), 22) << "21 taken back and the one that opened it";
    for (int i = 0; i < 7; ++i) {
        std::string d = "w" + std::to_string(i) + ".example";
        ASSERT_NE(feed.engine.destination(d), nullptr);
        EXPECT_FALSE(feed.engine.destination(d)->open) << d << ": its watch is undone";
        EXPECT_FALSE(feed.engine.destination("mx:mx." + d)->open);
        const Verdict* r = feed.find("absorbed", d);
        ASSERT_NE(r, nullptr) << d;
        EXPECT_TRUE(r->silent) << "one line for the detection, not one per destination";
        EXPECT_EQ(r->field("state"), "");
    }
    EXPECT_EQ(feed.count("absorbed"), 14);
    EXPECT_FALSE(feed.engine.destination("w7.example")) << "the deferral that opened it is the incident's";
}

TEST(RulesEngine, IncidentOwnsItsDeferralsAndLeavesNothingHalfEscalated) {
    Feed feed = open_network_incident_after_watch();
    const std::size_t before = feed.all.size();
    // The outage lasts two days: every retry of its class is the incident's.
    for (auto t = T0 + 30min; t <= T0 + 49h; t += 30min)
        for (int i = 0; i < 8; ++i) {
            std::string d = "w" + std::to_string(i) + ".example";
            feed(deferred(t + i * 1s, "W" + std::to_string(i), "u0@" + d, "mx." + d), Category::network);
        }
    // Reports about messages (retry_too_soon, stalled) go on; no destination is judged.
    for (std::size_t i = before; i < feed.all.size(); ++i)
        for (const char* n : {"noted", "watch", "escalate", "flagged", "recovered"})
            EXPECT_NE(feed.all[i].name, n) << format_verdict(feed.all[i]);
    EXPECT_EQ(feed.engine.incident_deferrals(), 22 + 98 * 8);
    feed.advance(T0 + 52h);
    ASSERT_EQ(feed.count("local_outbound_cleared"), 1);
    const Verdict* c = feed.find("local_outbound_cleared", "-");
    EXPECT_EQ(c->field("deferrals"), std::to_string(22 + 98 * 8));
    EXPECT_EQ(c->field("absorbed"), "14");
    for (const auto& [name, d] : feed.engine.destinations()) {
        EXPECT_FALSE(d.open) << name << " left with an episode of the incident's";
        EXPECT_FALSE(d.flagged_at) << name;
        EXPECT_TRUE(d.config_deferrals.empty()) << name;
    }
    EXPECT_EQ(feed.count("escalate"), 0);
    EXPECT_EQ(feed.count("flagged"), 0);
    // Afterwards a destination is judged on its own again, from scratch.
    feed(deferred(T0 + 53h, "W0", "u0@w0.example", "mx.w0.example"), Category::network);
    ASSERT_TRUE(feed.engine.destination("w0.example")->open);
    EXPECT_EQ(feed.engine.destination("w0.example")->open->attempts, 1);
}

TEST(RulesEngine, AnotherClassDuringAnIncidentIsJudgedOnItsOwn) {
    Feed feed = open_network_incident_after_watch();
    // w0's server also answers 4.3.5 during the network outage: its own fault.
    for (int k = 0; k < 3; ++k)
        feed(deferred(T0 + 10min + k * 40min, "C" + std::to_string(k), "c@w0.example", "mx.w0.example"),
             Category::receiver_config);
    EXPECT_EQ(feed.count("watch", "w0.example"), 2) << "once before the incident, once for the 4.3.5s";
    for (auto t = T0 + 30min; t <= T0 + 25h; t += 30min) {
        feed(deferred(t, "W1", "u0@w1.example", "mx.w1.example"), Category::network);
        feed(deferred(t + 1s, "C0", "c@w0.example", "mx.w0.example"), Category::receiver_config);
    }
    ASSERT_TRUE(feed.engine.local_incident_open());
    EXPECT_EQ(feed.count("escalate", "w0.example"), 1);
    EXPECT_EQ(feed.count("escalate", "w1.example"), 0);
    EXPECT_EQ(
        feed.engine.destination("w0.example")->open->by_category[static_cast<size_t>(Category::network)], 0);
}

TEST(RulesEngine, AbsorbingKeepsDeferralsOfAnotherClass) {
    Feed feed;
    // One 4.3.5 and two network deferrals to m.example in the window: watch on three.
    feed(deferred(T0, "M", "a@m.example", "mx.m.example"), Category::receiver_config);
    feed(deferred(T0 + 10s, "M", "b@m.example", "mx.m.example"), Category::network);
    feed(deferred(T0 + 20s, "M", "c@m.example", "mx.m.example"), Category::network);
    ASSERT_EQ(feed.count("watch", "m.example"), 1);
    for (int i = 1; i < 8; ++i) {
        std::string d = "n" + std::to_string(i) + ".example";
        feed(deferred(T0 + 30s + i * 1s, "N", "u@" + d, "mx." + d), Category::network);
    }
    ASSERT_EQ(feed.count("local_outbound_suspected"), 1);
    const auto* d = feed.engine.destination("m.example");
    ASSERT_TRUE(d->open);
    EXPECT_EQ(d->open->attempts, 1);
    EXPECT_EQ(d->open->dominant(), Category::receiver_config);
    EXPECT_EQ(d->open->ladder, Ladder::noted);
    EXPECT_EQ(feed.find("absorbed", "m.example")->field("state"), "noted");
}

TEST(RulesEngine, AnOutageOlderThanTheWindowIsNotTakenBack) {
    Feed feed;
    for (int k = 0; k < 3; ++k)
        feed(deferred(T0 + k * 30min, "O", "o@old.example", "mx.old.example"), Category::network);
    for (int i = 0; i < 8; ++i) {
        std::string d = "p" + std::to_string(i) + ".example";
        feed(deferred(T0 + 2h + i * 1s, "P", "u@" + d, "mx." + d), Category::network);
    }
    ASSERT_EQ(feed.count("local_outbound_suspected"), 1);
    EXPECT_EQ(feed.find("local_outbound_suspected", "-")->field("absorbed"), "14");
    ASSERT_TRUE(feed.engine.destination("old.example")->open);
    EXPECT_EQ(feed.engine.destination("old.example")->open->attempts, 3);
}

TEST(RulesEngine, IncidentCountsSurviveSaveAndLoad) {
    Feed feed = open_network_incident_after_watch();
    feed(deferred(T0 + 5min, "W1", "u0@w1.example", "mx.w1.example"), Category::network);
    Engine restored;
    ASSERT_TRUE(restored.load_state(feed.engine.save_state()).ok());
    EXPECT_EQ(restored.incident_deferrals(), 23);
    auto a = feed.engine.advance(T0 + 3h), b = restored.advance(T0 + 3h);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(format_verdict(a[i]), format_verdict(b[i]));
}

// advance() looks only at destinations with an open episode or a flag (and
// those touched since the last advance): a destination restored from a saved
// state, or left alone through many advances, must still escalate and lose
// its flag on time, among many destinations that need nothing.
TEST(RulesEngine, TimedChecksReachRestoredAndLongUntouchedDestinations) {
    Feed feed;
    for (int i = 0; i < 200; ++i) {
        const std::string q = "Q" + std::to_string(i), r = "u@quiet" + std::to_string(i) + ".example";
        feed(deferred(T0 - 72h, q, r), Category::greylisting);
        feed(delivery(T0 - 71h, q, r, DeliveryStatus::sent), Category::unknown);
    }
    for (int ep = 0; ep < 3; ++ep) {
        const TimePoint start = T0 + ep * 5 * 24h;
        for (int k = 0; k < 3; ++k)
            feed(deferred(start + k * 40min, "F" + std::to_string(ep), "u@flaky.example"),
                 Category::receiver_config);
        if (ep < 2)
            feed(delivery(start + 3h, "F" + std::to_string(ep), "u@flaky.example", DeliveryStatus::sent),
                 Category::unknown);
    }
    ASSERT_NE(feed.find("flagged", "flaky.example"), nullptr);
    // flaky.example's third episode is still open and not yet escalated.
    ASSERT_TRUE(feed.engine.destination("flaky.example")->open);
    Feed restored;
    ASSERT_TRUE(restored.engine.load_state(feed.engine.save_state()).ok());
    // Hours of advances that find nothing to do, then the ladder and the flag expiry.
    for (int h = 1; h <= 48; ++h) restored.advance(T0 + 10 * 24h + h * 1h);
    EXPECT_EQ(restored.count("escalate", "flaky.example"), 1);
    restored.advance(T0 + 10 * 24h + 30 * 24h + 2h);
    EXPECT_EQ(restored.count("flag_expired", "flaky.example"), 1);
    // every flag set before the save (the domain's and its MX host's) expired
    EXPECT_EQ(restored.count("flag_expired"), feed.count("flagged"));
    EXPECT_GE(feed.count("flagged"), 1);
}

// What runs once per batch in the policy daemon (its snapshot, its metrics,
// probes, the flag sync) walks for_each_active, not every destination: it
// must still reach every destination with an open episode or a flag, through
// advances, flag expiry and a restored state, and not the closed ones.
TEST(RulesEngine, ActiveDestinationsAreEveryOpenOrFlaggedOneAndNoOther) {
    EngineSettings s;
    s.defaults.repeat_deferrals = 3;
    Feed feed(s);
    auto expected = [](const Engine& e) {
        std::vector<std::string> out;
        for (const auto& [name, d] : e.destinations())
            if (d.open || d.flagged_at) out.push_back(name);
        return out;
    };
    auto visited = [](const Engine& e) {
        std::vector<std::string> out;
        e.for_each_active([&](const DestinationState& d) { out.push_back(d.name); });
        return out;
    };
    auto includes = [](const std::vector<std::string>& big, const std::vector<std::string>& small) {
        return std::includes(big.begin(), big.end(), small.begin(), small.end());
    };
    for (int i = 0; i < 300; ++i) {
        const std::string q = "A" + std::to_string(i), r = "u@d" + std::to_string(i) + ".example";
        const TimePoint t = T0 + i * 2min;  // fewer than spread_min_destinations a window
        // every third stays open, every seventh is flagged (three config deferrals), the rest recover
        const int deferrals = i % 7 == 0 ? 3 : 1;
        for (int k = 0; k < deferrals; ++k)
            feed(deferred(t + k * 1s, q, r, "mx" + std::to_string(i) + ".example"),
                 Category::receiver_config);
        if (i % 3 != 0)
            feed(delivery(t + 10s, q, r, DeliveryStatus::sent, "mx" + std::to_string(i) + ".example"),
                 Category::unknown);
    }
    ASSERT_GE(feed.count("flagged"), 40);
    const auto open_or_flagged = expected(feed.engine);
    ASSERT_GT(open_or_flagged.size(), 100u);
    ASSERT_LT(open_or_flagged.size(), feed.engine.destinations().size());
    EXPECT_TRUE(includes(visited(feed.engine), open_or_flagged));
    // An advance drops the destinations with nothing open or flagged.
    feed.advance(T0 + 12h);
    EXPECT_EQ(visited(feed.engine), expected(feed.engine));
    // A restored engine walks the same set.
    Engine restored;
    ASSERT_TRUE(restored.load_state(feed.engine.save_state()).ok());
    EXPECT_EQ(visited(restored), expected(feed.engine));
    // Flags expire and open episodes recover: they leave the set at the next advance.
    for (int i = 0; i < 300; i += 3)
        feed(delivery(T0 + 13h, "A" + std::to_string(i), "u@d" + std::to_string(i) + ".example",
                      DeliveryStatus::sent, "mx" + std::to_string(i) + ".example"),
             Category::unknown);
    feed.advance(T0 + 60 * 24h);
    EXPECT_GE(feed.count("flag_expired"), feed.count("flagged") - 1);
    EXPECT_EQ(visited(feed.engine), expected(feed.engine));
    EXPECT_LT(visited(feed.engine).size(), 10u);
}

// A destination whose state can no longer change a verdict (nothing open, no
// flag, its last episode begun before the repeat period, no flag-category
// deferral within the window) is forgotten at the first evaluation of a day,
// so that what the engine keeps follows the destinations that deferred within
// the repeat period instead of every one that ever did. One that defers again
// starts afresh, as the old episodes would not have counted anyway. A restored
// engine forgets exactly when an uninterrupted one does.
TEST(RulesEngine, DestinationsThatCanNoLongerCountAreForgottenOnceADay) {
    Feed feed;
    auto episode = [&](TimePoint t, const std::string& q, const std::string& domain, bool recover) {
        const std::string rcpt = "u@" + domain, mx = "mx." + domain;
        for (int k = 0; k < 3; ++k) feed(deferred(t + k * 40min, q, rcpt, mx), Category::receiver_config);
        if (recover) feed(delivery(t + 3h, q, rcpt, DeliveryStatus::sent, mx), Category::unknown);
    };
    for (int i = 0; i < 50; ++i)
        episode(T0 + i * 1min, "B" + std::to_string(i), "old" + std::to_string(i) + ".example", true);
    episode(T0, "O1", "open.example", false);              // never recovers
    episode(T0 + 10 * 24h, "R1", "recent.example", true);  // within the period later
    for (int ep = 0; ep < 3; ++ep)                         // flagged on day 27, for 30 days
        episode(T0 + (25 + ep) * 24h, "F" + std::to_string(ep), "flagged.example", true);
    ASSERT_EQ(feed.count("flagged", "flagged.example"), 1);
    ASSERT_EQ(feed.engine.destinations().size(), 2u * 53);  // each domain and its MX host
    ASSERT_NE(feed.engine.destination("old7.example"), nullptr);

    // Day 30 after the first episodes: all of them still within the period.
    feed.advance(T0 + 29 * 24h + 20h);
    EXPECT_EQ(feed.engine.destinations().size(), 2u * 53);
    const std::string before_midnight = feed.engine.save_state();
    // The next day's first evaluation: the 50 old domains and their MX hosts go.
    feed.advance(T0 + 31 * 24h);
    EXPECT_EQ(feed.engine.destinations().size(), 2u * 3);
    EXPECT_EQ(feed.engine.destination("old7.example"), nullptr);
    EXPECT_EQ(feed.engine.destination("mx:mx.old7.example"), nullptr);
    for (const char* kept : {"open.example", "recent.example", "flagged.example", "mx:mx.open.example"})
        EXPECT_NE(feed.engine.destination(kept), nullptr) << kept;
    // Restored from the state saved before midnight: the same forgetting.
    Engine restored;
    ASSERT_TRUE(restored.load_state(before_midnight).ok());
    (void)restored.advance(T0 + 31 * 24h);
    EXPECT_EQ(restored.save_state(), feed.engine.save_state());

    // A forgotten destination that breaks again climbs from nothing, and its
    // new episodes count towards a flag as any would.
    for (int ep = 0; ep < 3; ++ep)
        episode(T0 + (32 + ep) * 24h, "N" + std::to_string(ep), "old7.example", true);
    const Verdict* f = feed.find("flagged", "old7.example");
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->field("reason"), "3 receiver-config episodes within 2592000 s");
}

// Flag-category deferrals count towards a flag only within their window: the
// list is trimmed when one is added, so after a flag expired, an episode of
// another class must not find the old ones and flag the destination again.
// Failures of the sending Postfix itself climb the ladder of local:postfix,
// which no delivery to a destination ends: its episode ends when none was
// seen for incident_quiet_after (it stayed open, and escalated, for good).
TEST(RulesEngine, TheSendingPostfixsOwnEpisodeEndsWhenItsFailuresStop) {
    Feed feed;
    for (int k = 0; k < 4; ++k)
        feed(deferred(T0 + k * 30min, "L1", "u@far.example", "none"), Category::local);
    ASSERT_NE(feed.engine.destination(kLocalDestination), nullptr);
    ASSERT_TRUE(feed.engine.destination(kLocalDestination)->open);
    // A delivery elsewhere says nothing of it; a retry gap shorter than the quiet period neither.
    feed(delivery(T0 + 2h, "L2", "u@ok.example", DeliveryStatus::sent), Category::unknown);
    feed.advance(T0 + 90min + 119min);
    EXPECT_EQ(feed.count("recovered", kLocalDestination), 0);
    feed.advance(T0 + 90min + 2h);
    ASSERT_EQ(feed.count("recovered", kLocalDestination), 1);
    const Verdict* v = feed.find("recovered", kLocalDestination);
    EXPECT_EQ(v->field("why"), "no failure of the sending Postfix for 7200 s");
    EXPECT_EQ(v->field("type"), "local");
    EXPECT_EQ(v->field("duration_s"), std::to_string(3 * 3600 + 30 * 60));
    EXPECT_FALSE(feed.engine.destination(kLocalDestination)->open);
    // The next failure opens a new episode.
    feed(deferred(T0 + 6h, "L3", "u@far.example", "none"), Category::local);
    EXPECT_TRUE(feed.engine.destination(kLocalDestination)->open);
}

TEST(RulesEngine, DeferralsOlderThanTheirWindowDoNotFlagAgain) {
    EngineSettings s;
    s.defaults.repeat_deferrals = 3;
    s.defaults.repeat_period = std::chrono::days(60);  // the destination stays tracked throughout
    Feed feed(s);
    for (int k = 0; k < 3; ++k)
        feed(deferred(T0 + k * 1min, "C1", "u@burst.example"), Category::receiver_config);
    feed(delivery(T0 + 1h, "C1", "u@burst.example", DeliveryStatus::sent), Category::unknown);
    ASSERT_EQ(feed.count("flagged", "burst.example"), 1);
    feed.advance(T0 + 31 * 24h);
    ASSERT_EQ(feed.count("flag_expired", "burst.example"), 1);
    // Weeks later, trouble of another class: a new episode, no flag.
    feed(deferred(T0 + 32 * 24h, "C2", "u@burst.example"), Category::receiver_system);
    ASSERT_NE(feed.engine.destination("burst.example"), nullptr);
    EXPECT_EQ(feed.count("flagged", "burst.example"), 1);
}

TEST(RulesEngine, ReportsRetriesSoonerThanTheMinimum) {
    Feed feed;
    feed(deferred(T0, "I1", "a@example.com"), Category::receiver_config);
    feed(deferred(T0 + 5min, "I1", "a@example.com"), Category::receiver_config);
    const Verdict* v = feed.find("retry_too_soon", "I1");
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->field("interval_s"), "300");
    EXPECT_EQ(v->field("minimum_s"), "1800");
    feed(deferred(T0 + 6min, "I1", "a@example.com"), Category::receiver_config);
    EXPECT_EQ(feed.count("retry_too_soon", "I1"), 1) << "reported once per recipient";

    feed(deferred(T0, "I2", "b@grey.example"), Category::greylisting);
    feed(deferred(T0 + 20min, "I2", "b@grey.example"), Category::greylisting);
    EXPECT_EQ(feed.count("retry_too_soon", "I2"), 0) << "greylisting asks for 15 minutes, not 30";
    feed(deferred(T0, "I3", "c@grey.example"), Category::greylisting);
    feed(deferred(T0 + 10min, "I3", "c@grey.example"), Category::greylisting);
    EXPECT_EQ(feed.count("retry_too_soon", "I3"), 1);

    // After the sending Postfix's own failure no destination was tried: the
    // next attempt is never too soon; after a remote reply it is again.
    feed(deferred(T0, "I4", "d@far.example", "none"), Category::local);
    feed(deferred(T0 + 5min, "I4", "d@far.example", "none"), Category::local);
    feed(deferred(T0 + 10min, "I4", "d@far.example"), Category::receiver_system);
    EXPECT_EQ(feed.count("retry_too_soon", "I4"), 0);
    feed(deferred(T0 + 15min, "I4", "d@far.example"), Category::receiver_system);
    EXPECT_EQ(feed.count("retry_too_soon", "I4"), 1);
}

TEST(RulesEngine, ReportsStalledAndHeldRecipients) {
    Feed feed;
    feed(deferred(T0, "J1", "a@example.com"), Category::receiver_config);
    feed(deferred(T0, "J2", "b@example.com"), Category::receiver_config);
    Event hold;
    hold.kind = EventKind::queue_operation;
    hold.time = T0 + 1min;
    hold.queue_id = "J2";
    hold.action = "placed on hold";
    feed(hold, Category::unknown);
    EXPECT_EQ(feed.count("held", "J2"), 1);
    feed.advance(T0 + 7h);
    EXPECT_EQ(feed.count("stalled", "J1"), 1);
    EXPECT_EQ(feed.count("stalled", "J2"), 0) << "held mail is reported as held, not as stalled";
}

TEST(RulesEngine, ExpiredMessagesSayWhetherTheyWereEscalated) {
    Feed feed;
    feed(deferred(T0, "K1", "a@example.com"), Category::receiver_config);
    Event exp;
    exp.kind = EventKind::expired;
    exp.time = T0 + 2h;
    exp.queue_id = "K1";
    feed(exp, Category::expired);
    const Verdict* v = feed.find("expired", "K1");
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->field("escalated"), "no");
    EXPECT_EQ(v->field("recipient"), "a@example.com");
}

TEST(RulesEngine, RequeueKeepsFollowingTheSameMessage) {
    Feed feed;
    feed(deferred(T0, "L1", "a@example.com"), Category::receiver_config);
    Event pickup;
    pickup.kind = EventKind::pickup;
    pickup.time = T0 + 1h;
    pickup.queue_id = "L2";
    pickup.orig_queue_id = "L1";
    feed(pickup, Category::unknown);
    Event exp;
    exp.kind = EventKind::expired;
    exp.time = T0 + 2h;
    exp.queue_id = "L2";
    feed(exp, Category::expired);
    EXPECT_EQ(feed.count("expired", "L2"), 1);
}

TEST(RulesEngine, PerDestinationRulesOverrideThresholds) {
    RuleSettings fast;
    fast.thresholds(Category::receiver_config).escalate_after = 1h;
    fast.contact = "postmaster via +1 555 0100";
    fast.rule = "destinations[0] (example.com)";
    EngineSettings s;
    s.resolve = [&](std::string_view domain, std::string_view) -> const RuleSettings* {
        return domain == "example.com" ? &fast : nullptr;
    };
    Feed feed(s);
    feed(deferred(T0, "M1", "a@example.com"), Category::receiver_config);
    feed(deferred(T0, "M2", "a@other.example", "mx.other.example"), Category::receiver_config);
    feed(deferred(T0 + 61min, "M1", "a@example.com"), Category::receiver_config);
    feed(deferred(T0 + 61min, "M2", "a@other.example", "mx.other.example"), Category::receiver_config);
    const Verdict* v = feed.find("escalate", "example.com");
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->field("contact"), "postmaster via +1 555 0100");
    EXPECT_EQ(feed.count("escalate", "other.example"), 0);
    EXPECT_EQ(feed.find("noted", "example.com")->field("rule"), "destinations[0] (example.com)");
}

TEST(RulesEngine, SavedStateResumesWithIdenticalVerdicts) {
    std::vector<std::pair<Event, Category>> stream;
    for (int i = 0; i < 6; ++i)
        stream.emplace_back(deferred(T0 + i * 6h, "N1", "a@example.com"), Category::receiver_config);
    for (int i = 0; i < 4; ++i)
        stream.emplace_back(deferred(T0 + i * 13h, "N2", "b@sys.example", "mx.sys.example"),
                            Category::receiver_system);
    stream.emplace_back(delivery(T0 + 40h, "N1", "a@example.com", DeliveryStatus::sent), Category::unknown);
    std::sort(stream.begin(), stream.end(),
              [](const auto& a, const auto& b) { return a.first.time < b.first.time; });

    Feed straight;
    for (auto& [e, c] : stream) straight(e, c);
    straight.advance(T0 + 80h);

    Feed first, second;
    size_t half = stream.size() / 2;
    for (size_t i = 0; i < half; ++i) first(stream[i].first, stream[i].second);
    std::string state = first.engine.save_state();
    ASSERT_TRUE(second.engine.load_state(state).ok());
    EXPECT_EQ(second.engine.save_state(), state);
    for (size_t i = half; i < stream.size(); ++i) second(stream[i].first, stream[i].second);
    second.advance(T0 + 80h);

    std::vector<std::string> a, b;
    for (const auto& v : straight.all) a.push_back(format_verdict(v));
    for (const auto& v : first.all) b.push_back(format_verdict(v));
    for (const auto& v : second.all) b.push_back(format_verdict(v));
    EXPECT_EQ(a, b);
    EXPECT_GE(straight.count("escalate"), 2);
}

// save_state() writes CBOR directly (core/text/cbor_writer.hpp) instead of
// building an nlohmann::json tree: its bytes must be exactly what that tree
// encodes to, so states saved before and after compare and load alike.
// Covers every part of the state (flags, open and past episodes of several
// categories, config deferrals, an open incident with its spread hits,
// pending and held recipients), reply bytes that are not UTF-8, and strings
// and counts long enough for every CBOR head size.
TEST(EngineState, StreamedStateIsWhatTheJsonTreeEncodes) {
    EngineSettings s;
    s.defaults.repeat_deferrals = 4;
    Feed feed(s);
    static constexpr char kOdd[] = "451 4.3.0 \xff\xfe\x00 bytes ";
    const std::string odd_reply = std::string(kOdd, sizeof kOdd - 1) + std::string(300, 'x');
    const std::string long_relay = "mx." + std::string(70000, 'r') + ".example";
    for (int i = 0; i < 4; ++i)
        feed(delivery(T0 + i * 30min, "F1", "u@many.example", DeliveryStatus::deferred, "mx.many.example",
                      "host mx.many.example[192.0.2.1] said: " + odd_reply),
             Category::receiver_config);
    feed(deferred(T0 - 48h, "H1", "a@hist.example", long_relay), Category::receiver_system);
    feed(deferred(T0 - 47h, "H1", "a@hist.example", long_relay), Category::receiver_config);
    feed(delivery(T0 - 40h, "H1", "a@hist.example", DeliveryStatus::sent, long_relay), Category::unknown);
    for (int i = 0; i < 300; ++i)
        feed(deferred(T0 + 1h + i * 1s, "Q" + std::to_string(i), "r" + std::to_string(i) + "@bulk.example"),
             Category::greylisting);
    for (int i = 0; i < 8; ++i) {
        std::string d = "d" + std::to_string(i) + ".example";
        feed(deferred(T0 + 2h + i * 30s, "G" + std::to_string(i), "u@" + d, "mx." + d), Category::network);
    }
    ASSERT_TRUE(feed.engine.local_incident_open());
    ASSERT_TRUE(feed.engine.destination("many.example")->flagged_at.has_value());

    const std::string state = feed.engine.save_state();
    const nlohmann::json tree = nlohmann::json::from_cbor(state);
    const std::vector<std::uint8_t> again = nlohmann::json::to_cbor(tree);
    EXPECT_EQ(std::string(again.begin(), again.end()), state);
    EXPECT_EQ(tree.at("version"), 1);
    EXPECT_FALSE(tree.at("incident").is_null());
    EXPECT_GE(tree.at("spread").size(), 8u);
    EXPECT_GE(tree.at("recipients").size(), 300u);
    bool saw_odd_reply = false, saw_history = false;
    for (const auto& d : tree.at("dests")) {
        if (!d.at("open").is_null() &&
            d.at("open").at("reply").get<std::string>().find(odd_reply) != std::string::npos)
            saw_odd_reply = true;
        saw_history = saw_history || !d.at("history").empty();
    }
    EXPECT_TRUE(saw_odd_reply);
    EXPECT_TRUE(saw_history);

    Engine restored;
    ASSERT_TRUE(restored.load_state(state).ok());
    EXPECT_EQ(restored.save_state(), state);
}

// load_state reads a CBOR state a destination at a time (core/text/
// cbor_reader.hpp) and the JSON text of older versions whole: the same state
// either way. A damaged CBOR state (cut short, a destination without a name,
// a byte string where the map should be) is an error that changes nothing.
TEST(EngineState, ReadADestinationAtATimeOrWholeGivesTheSameEngine) {
    EngineSettings s;
    s.defaults.repeat_episodes = 2;
    Feed feed(s);
    for (int i = 0; i < 40; ++i) {
        const std::string q = "S" + std::to_string(i), r = "u@s" + std::to_string(i % 7) + ".example";
        for (int k = 0; k < 3; ++k)
            feed(deferred(T0 + i * 3h + k * 40min, q, r, "mx" + std::to_string(i % 5) + ".example"),
                 Category::receiver_config);
        if (i % 4 != 0) feed(delivery(T0 + i * 3h + 2h, q, r, DeliveryStatus::sent), Category::unknown);
    }
    ASSERT_GE(feed.count("flagged"), 1);
    const std::string state = feed.engine.save_state();
    const nlohmann::json tree = nlohmann::json::from_cbor(state);
    ASSERT_GE(tree.at("dests").size(), 10u);

    Engine by_destination, whole;
    ASSERT_TRUE(by_destination.load_state(state).ok());
    EXPECT_EQ(by_destination.save_state(), state);
    ASSERT_TRUE(whole.load_state(tree.dump()).ok());
    EXPECT_EQ(whole.save_state(), state);

    nlohmann::json nameless = tree;
    nameless["dests"][3].erase("name");
    const auto nameless_bytes = nlohmann::json::to_cbor(nameless);
    const std::string before = feed.engine.save_state();
    for (const std::string& bad : {state.substr(0, state.size() / 2), state.substr(0, state.size() - 1),
                                   std::string(nameless_bytes.begin(), nameless_bytes.end()),
                                   std::string("\x5a\xff\xff\xff\xff", 5)}) {
        EXPECT_FALSE(feed.engine.load_state(bad).ok()) << bad.size();
        EXPECT_EQ(feed.engine.save_state(), before);
    }
}

TEST(RulesEngine, BadStateIsAnErrorAndLeavesTheEngineAsItWas) {
    Feed feed;
    feed(deferred(T0, "O1", "a@example.com"), Category::receiver_config);
    std::string before = feed.engine.save_state();
    for (std::string_view bad : {"", "{", "[]", "{\"version\":2}", "{\"version\":1,\"now\":\"x\"}"}) {
        auto st = feed.engine.load_state(bad);
        EXPECT_FALSE(st.ok()) << bad;
        EXPECT_EQ(feed.engine.save_state(), before);
    }
}

TEST(Verdict, FormatsQuotesAndReadsBack) {
    Verdict v;
    v.key = "1E661116375";
    v.name = "escalate";
    v.add("destination", "cfgerr.lab.test")
        .add("reply", "451 4.3.5 \"System\" config\\error")
        .add("empty", "");
    v.add("ctl", std::string("a\tb\x01", 4)).add("eq", "a=b");
    std::string line = format_verdict(v);
    EXPECT_EQ(line,
              "1E661116375: verdict=escalate destination=cfgerr.lab.test reply=\"451 4.3.5 \\\"System\\\" "
              "config\\\\error\" empty=\"\" ctl=\"a\\x09b\\x01\" eq=\"a=b\"");
    auto colon = line.find(": ");
    std::vector<std::pair<std::string, std::string>> fields;
    ASSERT_TRUE(parse_verdict_fields(line.substr(colon + 2), fields));
    ASSERT_EQ(fields.size(), 6u);
    EXPECT_EQ(fields[0], (std::pair<std::string, std::string>{"verdict", "escalate"}));
    for (size_t i = 0; i < v.fields.size(); ++i) EXPECT_EQ(fields[i + 1], v.fields[i]);
}

TEST(Verdict, MalformedFieldTextIsRejected) {
    std::vector<std::pair<std::string, std::string>> f;
    for (std::string_view bad : {"novalue", "=x", "k=\"a\"b", "k=\"\\x4\""}) {
        f.clear();
        EXPECT_FALSE(parse_verdict_fields(bad, f)) << bad;
    }
    // A record cut by syslog's length limit keeps what arrived.
    f.clear();
    ASSERT_TRUE(parse_verdict_fields("verdict=watch reply=\"451 4.3.5 Sys", f));
    EXPECT_EQ(f.at(1).second, "451 4.3.5 Sys");
}

}  // namespace
}  // namespace retryguard
