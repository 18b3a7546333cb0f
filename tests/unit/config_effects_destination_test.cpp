// config_effects_destination_test.cpp -- keys set in a `destinations:` rule,
// observed through what they change: each test loads a YAML configuration
// whose rule for ruled.example sets one key, feeds the engine (and the policy
// answers, the notice and flush planner) the same deferrals for ruled.example
// and other.example, and expects the rule's effect on ruled.example only while
// other.example keeps the global behaviour.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "retryguard/actions/actions.hpp"
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

const std::string kRuled = "ruled.example";
const std::string kOther = "other.example";

// `global` followed by one rule for ruled.example holding `body` (flow YAML).
std::string with_rule(const std::string& body, const std::string& global = "") {
    return global + "destinations:\n  - domain: " + kRuled + "\n    " + body + "\n";
}

Event delivery(TimePoint t, std::string qid, const std::string& domain, DeliveryStatus st, std::string reason,
               const std::string& relay_host = "") {
    Event e;
    e.kind = EventKind::delivery;
    e.time = t;
    e.queue_id = std::move(qid);
    e.recipient = "u@" + domain;
    e.status = st;
    e.relay_host = relay_host.empty() ? "mx." + domain : relay_host;
    e.relay = e.relay_host + "[192.0.2.1]:25";
    e.reason = std::move(reason);
    e.reply = parse_postfix_reason(e.reason);
    return e;
}

Event deferred(TimePoint t, std::string qid, const std::string& domain,
               std::string reason = "host mx[192.0.2.1] said: 451 4.3.5 System config error",
               const std::string& relay_host = "") {
    return delivery(t, std::move(qid), domain, DeliveryStatus::deferred, std::move(reason), relay_host);
}

Event sent(TimePoint t, std::string qid, const std::string& domain, const std::string& relay_host = "") {
    return delivery(t, std::move(qid), domain, DeliveryStatus::sent, "250 2.0.0 Ok: queued", relay_host);
}

// One episode of `c` at `domain` from `t`: three deferrals (watch by
// default), then a delivery ends it.
void episode(Engined& r, TimePoint t, const std::string& domain, Category c, const std::string& qid) {
    for (int k = 0; k < 3; ++k) r(deferred(t + k * 1min, qid, domain), c);
    r(sent(t + 10min, qid + "S", domain), Category::unknown);
}

// Every category with keys that a destination rule may set.
const std::vector<CategoryKeys> kRuleCategories = category_keys_but(Category::local);

// ---------------------------------------------------------------- the engine

TEST(DestinationRules, CategoryWatchAfterDeferralsOfARuleAppliesToItsDestinationOnly) {
    constexpr int kConfigured = 7;
    for (const CategoryKeys& l : kRuleCategories) {
        SCOPED_TRACE(l.key);
        ASSERT_LT(config::defaults()->global.thresholds(l.category).watch_after_deferrals, kConfigured - 1);
        Engined r(with_rule(std::string("categories: {") + l.key +
                            ": {watch_after_deferrals: " + std::to_string(kConfigured) + "}}"));
        for (int i = 0; i < kConfigured - 1; ++i)
            for (const std::string& d : {kRuled, kOther})
                r(deferred(T0 + i * 1min, d + std::to_string(i), d), l.category);
        EXPECT_EQ(r.count("watch", kRuled), 0);
        EXPECT_EQ(r.count("watch", kOther), 1);
        r(deferred(T0 + 10min, "last", kRuled), l.category);
        EXPECT_EQ(r.count("watch", kRuled), 1);
    }
}

TEST(DestinationRules, CategoryEscalateAfterOfARuleAppliesToItsDestinationOnly) {
    for (const CategoryKeys& l : kRuleCategories) {
        SCOPED_TRACE(l.key);
        Engined r(with_rule(std::string("categories: {") + l.key + ": {escalate_after: 2h}}"));
        for (const std::string& d : {kRuled, kOther}) r(deferred(T0, d, d), l.category);
        r.advance(T0 + 2h + 1min);
        EXPECT_EQ(r.count("escalate", kRuled), 1);
        EXPECT_EQ(r.count("escalate", kOther), 0);
    }
}

// A rule for an MX host also covers the domains it answers for, on a
// deferral and as time passes alike.
TEST(DestinationRules, EscalateAfterOfAnMxRuleAppliesAsTimePassesToTheDomainsItServes) {
    Engined r(
        "destinations:\n  - mx: \"*.slow.example\"\n    categories: {receiver_config: {escalate_after: "
        "96h}}\n");
    r(deferred(T0, "S1", kRuled, "host mx[192.0.2.1] said: 451 4.3.5 System config error",
               "mx1.slow.example"),
      Category::receiver_config);
    r(deferred(T0, "O1", kOther), Category::receiver_config);
    r.advance(T0 + 25h);
    EXPECT_EQ(r.count("escalate", kRuled), 0);
    EXPECT_EQ(r.count("escalate", kOther), 1);
    r.advance(T0 + 97h);
    EXPECT_EQ(r.count("escalate", kRuled), 1);
}

TEST(DestinationRules, RetryMinIntervalOfARuleAppliesToItsDestinationOnly) {
    Engined r(with_rule("retry: {min_interval: 2h}"));
    for (const std::string& d : {kRuled, kOther}) {
        r(deferred(T0, d, d), Category::receiver_config);
        r(deferred(T0 + 1h, d, d), Category::receiver_config);
    }
    const Verdict* v = r.find("retry_too_soon", kRuled);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->field("minimum_s"), "7200");
    EXPECT_EQ(r.count("retry_too_soon", kOther), 0);
}

TEST(DestinationRules, RetryMinIntervalAfterGreylistingOfARuleAppliesToItsDestinationOnly) {
    Engined r(with_rule("retry: {min_interval_after_greylisting: 2h}"));
    for (const std::string& d : {kRuled, kOther}) {
        r(deferred(T0, d, d), Category::greylisting);
        r(deferred(T0 + 1h, d, d), Category::greylisting);
    }
    EXPECT_EQ(r.count("retry_too_soon", kRuled), 1);
    EXPECT_EQ(r.count("retry_too_soon", kOther), 0);
}

TEST(DestinationRules, RetryStalledAfterOfARuleAppliesToItsDestinationOnly) {
    Engined r(with_rule("retry: {stalled_after: 20m}"));
    for (const std::string& d : {kRuled, kOther}) r(deferred(T0, d, d), Category::receiver_config);
    r.advance(T0 + 1h);
    EXPECT_EQ(r.count("stalled", kRuled), 1);
    EXPECT_EQ(r.count("stalled", kOther), 0);
    r.advance(T0 + 3h + 1min);
    EXPECT_EQ(r.count("stalled", kOther), 1);
}

TEST(DestinationRules, RetryHonorRetryAfterHintOfARuleAppliesToItsDestinationOnly) {
    Engined r(with_rule("retry: {honor_retry_after_hint: false}"));
    const std::string hint = "host mx[192.0.2.1] said: 451 4.7.1 Too busy, please try again in 90 minutes";
    for (const std::string& d : {kRuled, kOther}) {
        r(deferred(T0, d, d, hint), Category::rate_limited);
        r(deferred(T0 + 1h, d, d, hint), Category::rate_limited);
    }
    EXPECT_EQ(r.count("retry_too_soon", kRuled), 0);
    const Verdict* v = r.find("retry_too_soon", kOther);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->field("minimum_s"), "5400");
}

TEST(DestinationRules, FlagsEnabledOfARuleAppliesToItsDestinationOnly) {
    Engined r(with_rule("flags: {enabled: false}", "flags: {episodes: 1}\n"));
    for (const std::string& d : {kRuled, kOther}) episode(r, T0, d, Category::receiver_config, d);
    EXPECT_EQ(r.count("flagged", kRuled), 0);
    EXPECT_EQ(r.count("flagged", kOther), 1);
}

TEST(DestinationRules, FlagsEpisodesOfARuleAppliesToItsDestinationOnly) {
    Engined r(with_rule("flags: {episodes: 1}"));
    for (const std::string& d : {kRuled, kOther}) episode(r, T0, d, Category::receiver_config, d);
    const Verdict* v = r.find("flagged", kRuled);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->field("rule"), "domain:" + kRuled);
    EXPECT_EQ(r.count("flagged", kOther), 0);
}

TEST(DestinationRules, FlagsPeriodOfARuleAppliesToItsDestinationOnly) {
    Engined r(with_rule("flags: {period: 1d}", "flags: {episodes: 2}\n"));
    for (const std::string& d : {kRuled, kOther})
        for (int i = 0; i < 2; ++i)
            episode(r, T0 + i * 72h, d, Category::receiver_config, d + std::to_string(i));
    EXPECT_EQ(r.count("flagged", kRuled), 0);
    EXPECT_EQ(r.count("flagged", kOther), 1);
}

TEST(DestinationRules, FlagsDeferralsOfARuleAppliesToItsDestinationOnly) {
    Engined r(with_rule("flags: {deferrals: 4}"));
    for (int i = 0; i < 4; ++i)
        for (const std::string& d : {kRuled, kOther})
            r(deferred(T0 + i * 5min, d + std::to_string(i), d), Category::receiver_config);
    const Verdict* v = r.find("flagged", kRuled);
    ASSERT_NE(v, nullptr);
    EXPECT_NE(v->field("reason").find("deferrals"), std::string_view::npos) << v->field("reason");
    EXPECT_EQ(r.count("flagged", kOther), 0);
}

TEST(DestinationRules, FlagsDeferralsWindowOfARuleAppliesToItsDestinationOnly) {
    Engined r(with_rule("flags: {deferrals_window: 1h}", "flags: {deferrals: 4}\n"));
    for (int i = 0; i < 4; ++i)
        for (const std::string& d : {kRuled, kOther})
            r(deferred(T0 + i * 30min, d + std::to_string(i), d), Category::receiver_config);
    EXPECT_EQ(r.count("flagged", kRuled), 0);
    EXPECT_EQ(r.count("flagged", kOther), 1);
}

TEST(DestinationRules, FlagsTtlOfARuleAppliesToItsDestinationOnly) {
    Engined r(with_rule("flags: {ttl: 2h}", "flags: {episodes: 1}\n"));
    for (const std::string& d : {kRuled, kOther}) episode(r, T0, d, Category::receiver_config, d);
    const Verdict* ruled = r.find("flagged", kRuled);
    const Verdict* other = r.find("flagged", kOther);
    ASSERT_NE(ruled, nullptr);
    ASSERT_NE(other, nullptr);
    EXPECT_EQ(ruled->field("expires"), format_rfc3339(ruled->time + 2h));
    EXPECT_EQ(other->field("expires"), format_rfc3339(other->time + 30 * 24h));
    r.advance(ruled->time + 3h);
    EXPECT_EQ(r.count("flag_expired", kRuled), 1);
    EXPECT_EQ(r.count("flag_expired", kOther), 0);
}

TEST(DestinationRules, FlagsCategoriesOfARuleAppliesToItsDestinationOnly) {
    Engined r(with_rule("flags: {categories: [receiver_system]}", "flags: {episodes: 1}\n"));
    for (const std::string& d : {kRuled, kOther}) episode(r, T0, d, Category::receiver_system, d);
    EXPECT_EQ(r.count("flagged", kRuled), 1);
    EXPECT_EQ(r.count("flagged", kOther), 0);
}

// ------------------------------------------------------------ policy answers

PolicyRequest rcpt(const std::string& domain) {
    static std::string keep;
    keep = "request=smtpd_access_policy\nprotocol_state=RCPT\nrecipient=someone@" + domain + "\n\n";
    PolicyParser p;
    std::string_view v = keep;
    EXPECT_EQ(p.feed(v), PolicyParser::State::complete);
    return p.request();
}

struct Answers {
    Decision ruled, other;
    std::uint64_t dry_run_answers = 0;
};

Answers answers(const Engined& run, const std::string& yaml) {
    LedgerDecider decider(std::make_shared<config::ConfigHolder>(load(yaml)));
    decider.publish(snapshot_from_engine(run.engine));
    Answers a;
    a.ruled = decider.decide(rcpt(kRuled), PolicyClock::now());
    a.other = decider.decide(rcpt(kOther), PolicyClock::now());
    a.dry_run_answers = decider.dry_run_answers();
    return a;
}

// Both destinations in watch.
void both_watched(Engined& r) {
    for (int k = 0; k < 3; ++k)
        for (const std::string& d : {kRuled, kOther})
            r(deferred(T0 + k * 40min, d, d), Category::receiver_config);
    ASSERT_EQ(r.count("watch", kRuled), 1);
    ASSERT_EQ(r.count("watch", kOther), 1);
}

TEST(DestinationRules, ActionsWatchOfARuleAnswersForItsDestinationOnly) {
    const std::string yaml = with_rule("actions: {watch: \"WARN {domain} in watch\"}");
    Engined r(yaml);
    both_watched(r);
    const Answers a = answers(r, yaml);
    EXPECT_EQ(a.ruled.kind, ActionKind::warn);
    EXPECT_EQ(a.ruled.action, "WARN ruled.example in watch");
    EXPECT_EQ(a.other.kind, ActionKind::dunno);
}

TEST(DestinationRules, ActionsEscalatedOfARuleAnswersForItsDestinationOnly) {
    const std::string yaml = with_rule("actions: {escalated: \"REJECT 4.7.1 {domain} closed\"}");
    Engined r(yaml);
    for (const std::string& d : {kRuled, kOther}) r(deferred(T0, d, d), Category::receiver_config);
    r.advance(T0 + 25h);
    ASSERT_EQ(r.count("escalate", kRuled), 1);
    ASSERT_EQ(r.count("escalate", kOther), 1);
    const Answers a = answers(r, yaml);
    EXPECT_EQ(a.ruled.kind, ActionKind::reject);
    EXPECT_EQ(a.ruled.action, "REJECT 4.7.1 ruled.example closed");
    EXPECT_EQ(a.other.kind, ActionKind::warn);
}

TEST(DestinationRules, ActionsFlaggedOfARuleAnswersForItsDestinationOnly) {
    const std::string yaml =
        with_rule("actions: {flagged: \"REJECT 4.7.1 {domain} is flagged\"}", "flags: {episodes: 1}\n");
    Engined r(yaml);
    for (const std::string& d : {kRuled, kOther}) episode(r, T0, d, Category::receiver_config, d);
    ASSERT_EQ(r.count("flagged", kRuled), 1);
    ASSERT_EQ(r.count("flagged", kOther), 1);
    const Answers a = answers(r, yaml);
    EXPECT_EQ(a.ruled.kind, ActionKind::reject);
    EXPECT_EQ(a.ruled.action, "REJECT 4.7.1 ruled.example is flagged");
    EXPECT_EQ(a.other.kind, ActionKind::info);
}

TEST(DestinationRules, ActionsLocalIncidentOfARuleAnswersForItsDestinationOnly) {
    const std::string yaml = with_rule("actions: {local_incident: \"HOLD outbound trouble ({category})\"}",
                                       "spread: {min_destinations: 3}\n");
    Engined r(yaml);
    for (int i = 0; i < 3; ++i) {
        const std::string d = "n" + std::to_string(i) + ".example";
        r(deferred(T0 + i * 20s, d, d), Category::network);
    }
    ASSERT_TRUE(r.engine.local_incident_open());
    const Answers a = answers(r, yaml);
    EXPECT_EQ(a.ruled.kind, ActionKind::hold);
    EXPECT_EQ(a.ruled.action, "HOLD outbound trouble (network)");
    EXPECT_EQ(a.other.kind, ActionKind::warn);
}

TEST(DestinationRules, DryRunOfARuleSilencesThePolicyAnswerForItsDestinationOnly) {
    const std::string yaml = with_rule("dry_run: true", "actions: {watch: \"WARN {domain} in watch\"}\n");
    Engined r(yaml);
    both_watched(r);
    const Answers a = answers(r, yaml);
    EXPECT_EQ(a.ruled.kind, ActionKind::dunno);
    EXPECT_EQ(a.other.kind, ActionKind::warn);
    EXPECT_EQ(a.dry_run_answers, 1u);
}

// ------------------------------------------------------- notices and flushes

// The engine and the planner the log follower feeds, from one configuration.
struct Planned {
    std::shared_ptr<const config::Config> config;
    Engined run;
    actions::Planner planner;
    explicit Planned(const std::string& yaml) : config(load(yaml)), run(yaml), planner(config) {}
    void operator()(const Event& e, Category c) {
        auto vs = run(e, c);
        planner.observe(&e, c, e.time, vs, run.engine, false);
    }
    void tick(TimePoint t) {
        auto vs = run.advance(t);
        planner.observe(nullptr, Category::unknown, t, vs, run.engine, false);
    }
    // A message submitted locally by alice, deferred to `domain`.
    void submitted_and_deferred(TimePoint t, const std::string& qid, const std::string& domain) {
        Event p;
        p.kind = EventKind::pickup;
        p.time = t;
        p.queue_id = qid;
        p.sender = "alice@sender.example";
        p.uid = 1000;
        (*this)(p, Category::unknown);
        (*this)(deferred(t + 1s, qid, domain), Category::receiver_config);
    }
};

std::vector<std::string> flushed_destinations(const std::vector<actions::Flush>& flushes) {
    std::vector<std::string> out;
    for (const auto& f : flushes)
        if (!f.destination.starts_with("mx:")) out.push_back(f.destination);
    std::sort(out.begin(), out.end());
    return out;
}

// Carries out what `p` planned through a runner that records each command
// (sendmail, postqueue) instead of running it.
actions::CarriedOut carry_out_recording(Planned& p, std::vector<std::vector<std::string>>& commands) {
    actions::ActionRunner runner(
        actions::RunnerSettings{}, [](bool, std::string_view) {},
        [&](const std::vector<std::string>& argv, std::string_view, std::chrono::milliseconds) -> Status {
            commands.push_back(argv);
            return {};
        });
    return actions::carry_out(p.planner, runner, actions::NoticeTemplate{});
}

// A message to each destination deferred (a notice each), then mail
// delivered there (a flush each of the deferred message), carried out with the
// commands recorded.
actions::CarriedOut notice_and_flush_each(Planned& p, std::vector<std::vector<std::string>>& commands) {
    p.submitted_and_deferred(T0, "RUL0000001", kRuled);
    p.submitted_and_deferred(T0, "OTH0000001", kOther);
    p(sent(T0 + 10min, "RUL0000009", kRuled), Category::unknown);
    p(sent(T0 + 10min, "OTH0000009", kOther), Category::unknown);
    return carry_out_recording(p, commands);
}

TEST(DestinationRules, DryRunOfARuleOnlyLogsTheNoticesAndFlushesOfItsDestination) {
    Planned p(with_rule("dry_run: true",
                        "notify: {enabled: true}\n"
                        "categories: {receiver_config: {watch_after_deferrals: 1}}\n"));
    std::vector<std::vector<std::string>> commands;
    const auto done = notice_and_flush_each(p, commands);
    int ruled_dry = 0, other_live = 0;
    for (const auto& v : done.verdicts) {
        const bool ruled = v.field("destination") == kRuled || v.key == "RUL0000001";
        if (ruled) ruled_dry += v.field("dry_run") == "yes";
        if (!ruled && v.field("dry_run").empty()) ++other_live;
    }
    EXPECT_EQ(ruled_dry, 2);  // the notice and the domain's flush
    EXPECT_GE(other_live, 2);
    for (const auto& argv : commands)
        for (const auto& a : argv) EXPECT_EQ(a.find("RUL0000001"), std::string::npos) << a;
    EXPECT_FALSE(commands.empty());
}

// The other way round: under a global dry run, a rule's dry_run: false makes
// its destination's notices and flushes real (the policy daemon carries them
// out with each one's own setting).
TEST(DestinationRules, DryRunFalseOfARuleActsForItsDestinationUnderAGlobalDryRun) {
    Planned p(with_rule("dry_run: false",
                        "dry_run: true\n"
                        "notify: {enabled: true}\n"
                        "categories: {receiver_config: {watch_after_deferrals: 1}}\n"));
    std::vector<std::vector<std::string>> commands;
    const auto done = notice_and_flush_each(p, commands);
    int ruled_live = 0, other_dry = 0;
    for (const auto& v : done.verdicts) {
        const bool ruled = v.field("destination") == kRuled || v.key == "RUL0000001";
        if (ruled && v.field("dry_run").empty()) ++ruled_live;
        if (!ruled) other_dry += v.field("dry_run") == "yes";
    }
    EXPECT_EQ(ruled_live, 2);  // the notice and the domain's flush
    EXPECT_GE(other_dry, 2);
    bool ruled_run = false;
    for (const auto& argv : commands)
        for (const auto& a : argv) {
            EXPECT_EQ(a.find("OTH0000001"), std::string::npos) << a;
            ruled_run = ruled_run || a.find("RUL0000001") != std::string::npos;
        }
    EXPECT_TRUE(ruled_run);
}

TEST(DestinationRules, FlushEnabledOfARuleAppliesToItsDestinationOnly) {
    Planned p(
        with_rule("flush: {enabled: false}", "categories: {receiver_config: {watch_after_deferrals: 1}}\n"));
    for (const std::string& d : {kRuled, kOther}) {
        p(deferred(T0, d + "1", d), Category::receiver_config);
        p(sent(T0 + 10min, d + "9", d), Category::unknown);
    }
    EXPECT_EQ(flushed_destinations(p.planner.take_flushes()), std::vector<std::string>{kOther});
}

TEST(DestinationRules, FlushMinIntervalOfARuleAppliesToItsDestinationOnly) {
    Planned p(with_rule("flush: {min_interval: 2h}",
                        "categories: {receiver_config: {watch_after_deferrals: 1}}\n"));
    for (const TimePoint t : {T0, T0 + 30min}) {
        for (const std::string& d : {kRuled, kOther}) {
            p(deferred(t, d + "D" + format_rfc3339(t), d), Category::receiver_config);
            p(sent(t + 10min, d + "S" + format_rfc3339(t), d), Category::unknown);
        }
        const auto flushed = flushed_destinations(p.planner.take_flushes());
        if (t == T0) {
            EXPECT_EQ(flushed, (std::vector<std::string>{kOther, kRuled}));
        } else {
            EXPECT_EQ(flushed, std::vector<std::string>{kOther});
        }
    }
}

TEST(DestinationRules, FlushProbeOfARuleAppliesToItsDestinationOnly) {
    Planned p(with_rule("flush: {probe: true}", "categories: {receiver_config: {escalate_after: 1h}}\n"));
    for (const std::string& d : {kRuled, kOther}) p(deferred(T0, d, d), Category::receiver_config);
    p.tick(T0 + 61min);
    ASSERT_EQ(p.run.count("escalate", kRuled), 1);
    ASSERT_EQ(p.run.count("escalate", kOther), 1);
    p.planner.take_flushes();
    p.tick(T0 + 92min);
    EXPECT_EQ(flushed_destinations(p.planner.take_flushes()), std::vector<std::string>{kRuled});
}

TEST(DestinationRules, FlushProbeIntervalOfARuleAppliesToItsDestinationOnly) {
    Planned p(with_rule("flush: {probe_interval: 2h}",
                        "flush: {probe: true}\ncategories: {receiver_config: {escalate_after: 1h}}\n"));
    for (const std::string& d : {kRuled, kOther}) p(deferred(T0, d, d), Category::receiver_config);
    p.tick(T0 + 61min);
    p.planner.take_flushes();
    p.tick(T0 + 92min);
    EXPECT_EQ(flushed_destinations(p.planner.take_flushes()), std::vector<std::string>{kOther});
    p.tick(T0 + 3h + 2min);
    EXPECT_EQ(flushed_destinations(p.planner.take_flushes()), (std::vector<std::string>{kOther, kRuled}));
}

}  // namespace
}  // namespace retryguard
