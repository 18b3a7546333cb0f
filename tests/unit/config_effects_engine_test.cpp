// config_effects_engine_test.cpp -- settings read by the rules engine and the
// policy answers, observed through what they change: each test loads a YAML
// configuration as the daemons do (config::load_string, to_engine_settings,
// LedgerDecider), feeds the engine deferrals and compares the verdicts or the
// policy answer with those of the shipped defaults.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "retryguard/config/config.hpp"
#include "retryguard/config/config_engine.hpp"
#include "retryguard/policy/ledger_decider.hpp"
#include "retryguard/policy/policy.hpp"
#include "retryguard/reply/reply.hpp"
#include "retryguard/rules/engine.hpp"
#include "unit/config_effects_util.hpp"

namespace retryguard {
namespace {

using namespace std::chrono_literals;
using namespace config_effects;

Event delivery(TimePoint t, std::string qid, std::string rcpt, DeliveryStatus st, std::string relay_host,
               std::string reason) {
    Event e;
    e.kind = EventKind::delivery;
    e.time = t;
    e.queue_id = std::move(qid);
    e.recipient = std::move(rcpt);
    e.status = st;
    e.relay_host = relay_host;
    e.relay = relay_host == "none" ? "none" : relay_host + "[192.0.2.1]:25";
    e.reason = std::move(reason);
    e.reply = parse_postfix_reason(e.reason);
    return e;
}

Event deferred(TimePoint t, std::string qid, std::string rcpt, std::string relay_host = "mx.example.com",
               std::string reason = "host mx.example.com[192.0.2.1] said: 451 4.3.5 System config error") {
    return delivery(t, std::move(qid), std::move(rcpt), DeliveryStatus::deferred, std::move(relay_host),
                    std::move(reason));
}

Event sent(TimePoint t, std::string qid, std::string rcpt, std::string relay_host = "mx.example.com") {
    return delivery(t, std::move(qid), std::move(rcpt), DeliveryStatus::sent, std::move(relay_host),
                    "250 2.0.0 Ok: queued");
}

// The ladder keys of every category but receiver_config (the policy daemon's
// tests show those: PolicydLive.FollowedDeferralsEscalate...).
const std::vector<CategoryKeys> kLadderCategories = category_keys_but(Category::receiver_config);

// Where one deferral of `c` is filed: the sending Postfix's own failures under
// kLocalDestination, the others under the recipient's domain.
struct Target {
    std::string destination, recipient, relay;
};
Target target_for(const CategoryKeys& l) {
    if (l.category == Category::local) return {std::string(kLocalDestination), "u@far.example", "none"};
    const std::string domain = std::string(l.key) + ".example";
    return {domain, "u@" + domain, "mx." + domain};
}

TEST(ConfigEffects, WatchAfterDeferralsPerCategoryDecidesWhenADestinationIsWatched) {
    constexpr int kConfigured = 7;
    for (const CategoryKeys& l : kLadderCategories) {
        SCOPED_TRACE(l.key);
        const int by_default =
            static_cast<int>(config::defaults()->global.thresholds(l.category).watch_after_deferrals);
        ASSERT_LT(by_default, kConfigured);
        Engined configured("categories: {" + std::string(l.key) +
                           ": {watch_after_deferrals: " + std::to_string(kConfigured) + "}}\n");
        Engined shipped("");
        const Target t = target_for(l);
        for (int i = 1; i <= kConfigured; ++i) {
            const Event e = deferred(T0 + i * 1min, "Q" + std::to_string(i), t.recipient, t.relay);
            configured(e, l.category);
            shipped(e, l.category);
            EXPECT_EQ(configured.count("watch", t.destination), i >= kConfigured ? 1 : 0) << "deferral " << i;
            EXPECT_EQ(shipped.count("watch", t.destination), i >= by_default ? 1 : 0) << "deferral " << i;
        }
    }
}

TEST(ConfigEffects, EscalateAfterPerCategoryDecidesWhenAnEpisodeEscalates) {
    for (const CategoryKeys& l : kLadderCategories) {
        SCOPED_TRACE(l.key);
        const Duration by_default = config::defaults()->global.thresholds(l.category).escalate_after;
        ASSERT_GT(by_default, Duration(31min));
        Engined configured("categories: {" + std::string(l.key) + ": {escalate_after: 30m}}\n");
        Engined shipped("");
        const Target t = target_for(l);
        const Event e = deferred(T0, "E1", t.recipient, t.relay);
        configured(e, l.category);
        shipped(e, l.category);
        configured.advance(T0 + 29min);
        shipped.advance(T0 + 29min);
        EXPECT_EQ(configured.count("escalate", t.destination), 0);
        configured.advance(T0 + 31min);
        shipped.advance(T0 + 31min);
        EXPECT_EQ(configured.count("escalate", t.destination), 1);
        EXPECT_EQ(shipped.count("escalate", t.destination), 0);
        // The shipped value still applies where nothing is set.
        shipped.advance(T0 + by_default - 1min);
        EXPECT_EQ(shipped.count("escalate", t.destination), 0);
        shipped.advance(T0 + by_default + 1min);
        EXPECT_EQ(shipped.count("escalate", t.destination), 1);
    }
}

TEST(ConfigEffects, RetryMinIntervalIsTheShortestRetryNotReported) {
    Engined configured("retry: {min_interval: 10m}\n");
    Engined shipped("");
    for (Engined* r : {&configured, &shipped}) {
        (*r)(deferred(T0, "R1", "a@example.com"), Category::receiver_config);
        (*r)(deferred(T0 + 15min, "R1", "a@example.com"), Category::receiver_config);
        (*r)(deferred(T0, "R2", "b@example.com"), Category::receiver_config);
        (*r)(deferred(T0 + 5min, "R2", "b@example.com"), Category::receiver_config);
    }
    EXPECT_EQ(shipped.count("retry_too_soon", "R1"), 1);
    EXPECT_EQ(configured.count("retry_too_soon", "R1"), 0);
    const Verdict* v = configured.find("retry_too_soon", "R2");
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->field("minimum_s"), "600");
    EXPECT_EQ(shipped.find("retry_too_soon", "R2")->field("minimum_s"), "1800");
}

TEST(ConfigEffects, RetryMinIntervalAfterGreylistingAppliesAfterAGreylistingReply) {
    Engined configured("retry: {min_interval_after_greylisting: 40m}\n");
    Engined shipped("");
    const std::string grey =
        "host mx.grey.example[192.0.2.1] said: 450 4.2.0 Greylisted, please try again later";
    for (Engined* r : {&configured, &shipped}) {
        (*r)(deferred(T0, "G1", "a@grey.example", "mx.grey.example", grey), Category::greylisting);
        (*r)(deferred(T0 + 20min, "G1", "a@grey.example", "mx.grey.example", grey), Category::greylisting);
        // After another class of reply the general minimum applies.
        (*r)(deferred(T0, "G2", "b@other.example", "mx.other.example"), Category::receiver_config);
        (*r)(deferred(T0 + 35min, "G2", "b@other.example", "mx.other.example"), Category::receiver_config);
    }
    EXPECT_EQ(shipped.count("retry_too_soon", "G1"), 0);
    const Verdict* v = configured.find("retry_too_soon", "G1");
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->field("minimum_s"), "2400");
    EXPECT_EQ(v->field("category"), "greylisting");
    EXPECT_EQ(configured.count("retry_too_soon", "G2"), 0);
}

TEST(ConfigEffects, HonorRetryAfterHintRaisesTheMinimumToTheDelayAsked) {
    Engined honoured("");
    Engined ignored("retry: {honor_retry_after_hint: false}\n");
    const std::string hint =
        "host mx.busy.example[192.0.2.1] said: 451 4.7.1 Too busy, please try again in 60 minutes";
    for (Engined* r : {&honoured, &ignored}) {
        (*r)(deferred(T0, "H1", "a@busy.example", "mx.busy.example", hint), Category::rate_limited);
        (*r)(deferred(T0 + 40min, "H1", "a@busy.example", "mx.busy.example", hint), Category::rate_limited);
    }
    const Verdict* v = honoured.find("retry_too_soon", "H1");
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->field("minimum_s"), "3600");
    EXPECT_EQ(ignored.count("retry_too_soon", "H1"), 0) << "40 minutes is past the 30-minute minimum";
}

TEST(ConfigEffects, StalledAfterDecidesWhenAQuietRecipientIsReported) {
    Engined configured("retry: {stalled_after: 1h}\n");
    Engined shipped("");
    for (Engined* r : {&configured, &shipped}) {
        (*r)(deferred(T0, "S1", "a@example.com"), Category::receiver_config);
        r->advance(T0 + 59min);
    }
    EXPECT_EQ(configured.count("stalled", "S1"), 0);
    configured.advance(T0 + 61min);
    shipped.advance(T0 + 61min);
    EXPECT_EQ(configured.count("stalled", "S1"), 1);
    EXPECT_EQ(shipped.count("stalled", "S1"), 0);
    shipped.advance(T0 + 3h + 1min);
    EXPECT_EQ(shipped.count("stalled", "S1"), 1);
}

// One episode of `c` to `domain` that reaches watch (three deferrals) and
// ends with a delivery.
void episode(Engined& r, TimePoint start, const std::string& domain, Category c, const std::string& qid) {
    for (int k = 0; k < 3; ++k) r(deferred(start + k * 40min, qid, "u@" + domain, "mx." + domain), c);
    r(sent(start + 3h, qid, "u@" + domain, "mx." + domain), Category::unknown);
}

TEST(ConfigEffects, FlagsPeriodIsTheWindowInWhichEpisodesCount) {
    // Three episodes ten days apart: within the shipped 30 days, not within 7.
    Engined narrow("flags: {period: 7d}\n");
    Engined shipped("");
    Engined wide("flags: {period: 60d}\n");
    for (Engined* r : {&narrow, &shipped, &wide})
        for (int i = 0; i < 3; ++i)
            episode(*r, T0 + i * 10 * 24h, "often.example", Category::receiver_config,
                    "F" + std::to_string(i));
    EXPECT_EQ(shipped.count("flagged", "often.example"), 1);
    EXPECT_EQ(narrow.count("flagged", "often.example"), 0);
    EXPECT_EQ(wide.count("flagged", "often.example"), 1);
    // Three episodes twenty days apart: only a 60-day period sees them together.
    Engined wide_slow("flags: {period: 60d}\n");
    Engined shipped_slow("");
    for (Engined* r : {&wide_slow, &shipped_slow})
        for (int i = 0; i < 3; ++i)
            episode(*r, T0 + i * 20 * 24h, "slow.example", Category::receiver_config,
                    "W" + std::to_string(i));
    EXPECT_EQ(wide_slow.count("flagged", "slow.example"), 1);
    EXPECT_EQ(shipped_slow.count("flagged", "slow.example"), 0);
}

TEST(ConfigEffects, FlagsTtlDecidesWhenAFlagExpires) {
    Engined configured("flags: {ttl: 2d}\n");
    Engined shipped("");
    for (Engined* r : {&configured, &shipped})
        for (int i = 0; i < 3; ++i)
            episode(*r, T0 + i * 24h, "again.example", Category::receiver_config, "T" + std::to_string(i));
    const Verdict* flag = configured.find("flagged", "again.example");
    ASSERT_NE(flag, nullptr);
    ASSERT_EQ(shipped.count("flagged", "again.example"), 1);
    const TimePoint flagged_at = flag->time;
    EXPECT_EQ(flag->field("expires"), format_rfc3339(flagged_at + 48h));
    configured.advance(flagged_at + 47h);
    EXPECT_EQ(configured.count("flag_expired", "again.example"), 0);
    configured.advance(flagged_at + 49h);
    shipped.advance(flagged_at + 49h);
    EXPECT_EQ(configured.count("flag_expired", "again.example"), 1);
    EXPECT_EQ(shipped.count("flag_expired", "again.example"), 0);
    shipped.advance(flagged_at + 30 * 24h + 1h);
    EXPECT_EQ(shipped.count("flag_expired", "again.example"), 1);
}

TEST(ConfigEffects, FlagsCategoriesDecideWhichEpisodesFlag) {
    Engined configured("flags: {categories: [receiver_system]}\n");
    Engined shipped("");
    for (Engined* r : {&configured, &shipped})
        for (int i = 0; i < 3; ++i) {
            episode(*r, T0 + i * 24h, "system.example", Category::receiver_system, "Y" + std::to_string(i));
            episode(*r, T0 + i * 24h, "config.example", Category::receiver_config, "C" + std::to_string(i));
        }
    EXPECT_EQ(configured.count("flagged", "system.example"), 1);
    EXPECT_EQ(configured.count("flagged", "config.example"), 0);
    EXPECT_EQ(shipped.count("flagged", "system.example"), 0);
    EXPECT_EQ(shipped.count("flagged", "config.example"), 1);
}

TEST(ConfigEffects, SpreadCategoriesDecideWhichDeferralsRevealALocalIncident) {
    // Ten unrelated destinations deferred within minutes, by class.
    auto spread = [](Engined& r, Category c, const std::string& prefix) {
        for (int i = 0; i < 10; ++i) {
            const std::string d = prefix + std::to_string(i) + ".example";
            r(deferred(T0 + i * 20s, prefix + std::to_string(i), "u@" + d, "mx." + d), c);
        }
    };
    Engined grey_configured("spread: {categories: [greylisting]}\n");
    Engined grey_shipped("");
    spread(grey_configured, Category::greylisting, "g");
    spread(grey_shipped, Category::greylisting, "g");
    EXPECT_EQ(grey_configured.count("local_outbound_suspected"), 1);
    EXPECT_TRUE(grey_configured.engine.local_incident_open());
    EXPECT_EQ(grey_shipped.count("local_outbound_suspected"), 0);

    Engined net_configured("spread: {categories: [greylisting]}\n");
    Engined net_shipped("");
    spread(net_configured, Category::network, "n");
    spread(net_shipped, Category::network, "n");
    EXPECT_EQ(net_configured.count("local_outbound_suspected"), 0);
    EXPECT_EQ(net_shipped.count("local_outbound_suspected"), 1);
    const Verdict* v = net_shipped.find("local_outbound_suspected", "-");
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->field("category"), "network");
}

// ------------------------------------------------------------ policy answers

PolicyRequest rcpt(const std::string& recipient) {
    static std::string keep;
    keep = "request=smtpd_access_policy\nprotocol_state=RCPT\nrecipient=" + recipient + "\n\n";
    PolicyParser p;
    std::string_view v = keep;
    EXPECT_EQ(p.feed(v), PolicyParser::State::complete);
    return p.request();
}

// The answer the policy daemon gives for mail to `recipient`, with the engine
// state `run` reached and the configuration `yaml` (the one `run` was built from).
Decision answer(const Engined& run, const std::string& yaml, const std::string& recipient) {
    LedgerDecider decider(std::make_shared<config::ConfigHolder>(load(yaml)));
    decider.publish(snapshot_from_engine(run.engine));
    return decider.decide(rcpt(recipient), PolicyClock::now());
}

TEST(ConfigEffects, ActionsWatchIsTheAnswerForADestinationInWatch) {
    const std::string configured = "actions: {watch: \"WARN {domain} in watch ({category})\"}\n";
    for (const std::string& yaml : {std::string(), configured}) {
        Engined run(yaml);
        for (int k = 0; k < 3; ++k)
            run(deferred(T0 + k * 40min, "A1", "u@watched.example", "mx.watched.example"),
                Category::receiver_config);
        ASSERT_EQ(run.count("watch", "watched.example"), 1);
        const Decision d = answer(run, yaml, "someone@watched.example");
        if (yaml.empty()) {
            EXPECT_EQ(d.kind, ActionKind::dunno);
        } else {
            EXPECT_EQ(d.kind, ActionKind::warn);
            EXPECT_EQ(d.action, "WARN watched.example in watch (receiver-config)");
        }
        EXPECT_EQ(answer(run, yaml, "someone@quiet.example").kind, ActionKind::dunno);
    }
}

TEST(ConfigEffects, ActionsFlaggedIsTheAnswerForAFlaggedDestination) {
    const std::string flags = "flags: {episodes: 1}\n";
    const std::string configured = flags + "actions: {flagged: \"REJECT 4.7.1 {domain} is flagged\"}\n";
    for (const std::string& yaml : {flags, configured}) {
        Engined run(yaml);
        for (int k = 0; k < 3; ++k)
            run(deferred(T0 + k * 40min, "B1", "u@flaky.example", "mx.flaky.example"),
                Category::receiver_config);
        ASSERT_EQ(run.count("flagged", "flaky.example"), 1);
        const Decision d = answer(run, yaml, "someone@flaky.example");
        if (yaml == flags) {
            EXPECT_EQ(d.kind, ActionKind::info);
            EXPECT_EQ(d.action, "INFO retryguard: flaky.example flagged as consistently unreliable");
        } else {
            EXPECT_EQ(d.kind, ActionKind::reject);
            EXPECT_EQ(d.action, "REJECT 4.7.1 flaky.example is flagged");
        }
    }
}

TEST(ConfigEffects, ActionsLocalIncidentIsTheAnswerWhileAnIncidentIsOpen) {
    const std::string spread = "spread: {min_destinations: 3}\n";
    const std::string configured =
        spread + "actions: {local_incident: \"HOLD outbound trouble ({category}) since {since}\"}\n";
    for (const std::string& yaml : {spread, configured}) {
        Engined run(yaml);
        for (int i = 0; i < 3; ++i) {
            const std::string d = "n" + std::to_string(i) + ".example";
            run(deferred(T0 + i * 20s, "N" + std::to_string(i), "u@" + d, "mx." + d), Category::network);
        }
        ASSERT_TRUE(run.engine.local_incident_open());
        const Verdict* opened = run.find("local_outbound_suspected", "-");
        ASSERT_NE(opened, nullptr);
        const Decision d = answer(run, yaml, "someone@elsewhere.example");
        if (yaml == spread) {
            EXPECT_EQ(d.kind, ActionKind::warn);
            EXPECT_EQ(d.action, "WARN retryguard: local outbound problem suspected (network)");
        } else {
            EXPECT_EQ(d.kind, ActionKind::hold);
            EXPECT_EQ(d.action, "HOLD outbound trouble (network) since " + format_rfc3339(opened->time));
        }
    }
}

// The local category's episode is the sending host's own, one for every
// destination: a destination rule that sets its keys is refused at its
// position, and the global value is the one the local episode uses even for
// mail to a destination that has a rule of its own.
TEST(ConfigEffects, LocalCategoryKeysAreGlobalOnly) {
    for (const char* key : {"watch_after_deferrals: 2", "escalate_after: 2h"}) {
        auto loaded = config::load_string(std::string("destinations:\n  - domain: near.example\n"
                                                      "    categories: {local: {") +
                                              key + "}}\n",
                                          "effects.yaml");
        ASSERT_FALSE(loaded.ok()) << key;
        EXPECT_NE(loaded.errors[0].message.find("global only"), std::string::npos)
            << loaded.errors[0].to_string();
        EXPECT_EQ(loaded.errors[0].line, 3) << loaded.errors[0].to_string();
    }
    Engined e(
        "categories: {local: {escalate_after: 10m}}\n"
        "destinations:\n  - domain: near.example\n    categories: {network: {escalate_after: 5h}}\n");
    e(deferred(T0, "L1", "u@near.example", "none"), Category::local);
    e.advance(T0 + 11min);
    EXPECT_EQ(e.count("escalate", std::string(kLocalDestination)), 1);
}

}  // namespace
}  // namespace retryguard
