// policy_ledger_decider_test.cpp -- LedgerDecider: published destination state
// plus configured actions -> the answer, with placeholders, precedence,
// per-destination rules, dry run, stage filtering and snapshots built from a
// real engine fed real log lines.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "retryguard/classify/classifier.hpp"
#include "retryguard/config/config.hpp"
#include "retryguard/config/config_engine.hpp"
#include "retryguard/ingest/ingest.hpp"
#include "retryguard/log/log_parser.hpp"
#include "retryguard/policy/ledger_decider.hpp"
#include "retryguard/policy/policy_service.hpp"
#include "retryguard/runtime/runtime.hpp"

using namespace retryguard;

namespace {

PolicyRequest request_for(std::string text) {
    static std::string keep;
    keep = std::move(text);
    PolicyParser p;
    std::string_view v = keep;
    EXPECT_EQ(p.feed(v), PolicyParser::State::complete);
    return p.request();
}

PolicyRequest rcpt(std::string_view recipient, std::string_view stage = "RCPT") {
    return request_for("request=smtpd_access_policy\nprotocol_state=" + std::string(stage) +
                       "\nrecipient=" + std::string(recipient) + "\n\n");
}

std::shared_ptr<config::ConfigHolder> holder(std::string_view yaml) {
    auto loaded = config::load_string(yaml);
    EXPECT_TRUE(loaded.ok()) << (loaded.errors.empty() ? "" : loaded.errors.front().to_string());
    return std::make_shared<config::ConfigHolder>(loaded.config);
}

constexpr std::string_view kActions = R"yaml(
actions:
  watch: "INFO {domain} in watch ({category})"
  escalated: "WARN {domain} escalated ({category}) since {since} via {mx}: {reply}"
  flagged: "PREPEND X-Retryguard: {domain} flagged, contact {contact}"
  local_incident: "HOLD local incident"
destinations:
  - domain: ruled.test
    contact: "noc@ruled.test"
    actions: {escalated: "REJECT 4.7.1 {domain} closed"}
)yaml";

DestinationView view(Ladder ladder, bool flagged = false) {
    DestinationView v;
    v.ladder = ladder;
    v.flagged = flagged;
    v.category = Category::receiver_config;
    v.since = TimePoint{} + std::chrono::hours(24 * 20000);
    v.last_reply = "451 4.3.5 Server configuration problem";
    v.relay = "mx.example.test";
    return v;
}

std::shared_ptr<PolicySnapshot> snapshot() {
    auto s = std::make_shared<PolicySnapshot>();
    s->by_domain["watch.test"] = view(Ladder::watch);
    s->by_domain["esc.test"] = view(Ladder::escalate);
    s->by_domain["flag.test"] = view(Ladder::escalate, true);
    s->by_domain["ruled.test"] = view(Ladder::escalate);
    s->by_domain["noted.test"] = view(Ladder::noted);
    return s;
}

const PolicyDeadline kDeadline = PolicyClock::now();

}  // namespace

TEST(PolicyLedgerDecider, AnswersConfiguredActionWithPlaceholders) {
    LedgerDecider d(holder(kActions));
    d.publish(snapshot());
    EXPECT_FALSE(d.may_block());
    auto esc = d.decide(rcpt("a@Esc.Test."), kDeadline);
    EXPECT_EQ(esc.kind, ActionKind::warn);
    EXPECT_EQ(esc.action, "WARN esc.test escalated (receiver-config) since " +
                              format_rfc3339(view(Ladder::none).since) +
                              " via mx.example.test: 451 4.3.5 Server configuration problem");
    EXPECT_EQ(d.decide(rcpt("a@watch.test"), kDeadline).action, "INFO watch.test in watch (receiver-config)");
    EXPECT_EQ(d.decide(rcpt("a@noted.test"), kDeadline).kind, ActionKind::dunno);
    EXPECT_EQ(d.decide(rcpt("a@other.test"), kDeadline).action, "DUNNO");
    EXPECT_EQ(d.decide(rcpt("postmaster"), kDeadline).kind, ActionKind::dunno);
    EXPECT_EQ(d.fail_open(), 0u);
}

TEST(PolicyLedgerDecider, FlaggedBeatsEscalatedAndRulesOverride) {
    LedgerDecider d(holder(kActions));
    d.publish(snapshot());
    auto flag = d.decide(rcpt("a@flag.test"), kDeadline);
    EXPECT_EQ(flag.kind, ActionKind::prepend);
    EXPECT_EQ(flag.action, "PREPEND X-Retryguard: flag.test flagged, contact -");
    EXPECT_EQ(d.decide(rcpt("a@ruled.test"), kDeadline).action, "REJECT 4.7.1 ruled.test closed");
}

TEST(PolicyLedgerDecider, LocalIncidentRanksBetweenEscalatedAndWatch) {
    LedgerDecider d(holder(kActions));
    auto s = snapshot();
    s->local_incident = true;
    d.publish(s);
    EXPECT_EQ(d.decide(rcpt("a@esc.test"), kDeadline).kind, ActionKind::warn);
    EXPECT_EQ(d.decide(rcpt("a@watch.test"), kDeadline).action, "HOLD local incident");
    EXPECT_EQ(d.decide(rcpt("a@other.test"), kDeadline).action, "HOLD local incident");
}

TEST(PolicyLedgerDecider, DunnoActionFallsToTheNextState) {
    // escalated DUNNO: an escalated destination still answers its watch action.
    LedgerDecider d(holder("actions: {watch: \"WARN watched {domain}\", escalated: DUNNO}\n"));
    d.publish(snapshot());
    EXPECT_EQ(d.decide(rcpt("a@esc.test"), kDeadline).kind, ActionKind::dunno);
    EXPECT_EQ(d.decide(rcpt("a@watch.test"), kDeadline).action, "WARN watched watch.test");
}

TEST(PolicyLedgerDecider, DryRunAnswersDunnoAndNotesWhatItWouldHaveSaid) {
    std::vector<std::string> notes;
    LedgerDecider d(holder(std::string(kActions) + "dry_run: true\n"),
                    [&](std::string_view line) { notes.emplace_back(line); });
    d.publish(snapshot());
    EXPECT_EQ(d.decide(rcpt("a@esc.test"), kDeadline).kind, ActionKind::dunno);
    EXPECT_EQ(d.dry_run_answers(), 1u);
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_NE(notes[0].find("would get 'WARN esc.test escalated"), std::string::npos) << notes[0];
}

TEST(PolicyLedgerDecider, PlaceholderValuesCannotBreakTheReplyLine) {
    DestinationView v = view(Ladder::escalate);
    v.last_reply = "451 evil\r\nREJECT injected";
    const std::string out = fill_action_placeholders("x {reply} {unknown}", "d.test", v, "");
    EXPECT_EQ(out.find('\n'), std::string::npos);
    EXPECT_EQ(out, "x 451 evil  REJECT injected {unknown}");
}

TEST(PolicyLedgerDecider, StagesOtherThanRcptAreNotAsked) {
    PolicyMetrics metrics;
    PolicyService service(PolicyStageSet::rcpt_only(), metrics);
    LedgerDecider d(holder(kActions));
    d.publish(snapshot());
    EXPECT_FALSE(service.wants_decision(rcpt("a@esc.test", "DATA")));
    ASSERT_TRUE(service.wants_decision(rcpt("a@esc.test", "RCPT")));
    bool failed = false;
    EXPECT_EQ(service.decide_contained(d, rcpt("a@esc.test"), kDeadline, failed).kind, ActionKind::warn);
    EXPECT_FALSE(failed);
}

TEST(PolicyLedgerDecider, SnapshotFromFlagsKeepsActiveDomainFlagsOnly) {
    std::vector<Flag> flags(3);
    flags[0].destination = "Flagged.Test";
    flags[0].reason = "3 episodes";
    flags[1].destination = "gone.test";
    flags[1].cleared_at = TimePoint{} + std::chrono::hours(1);
    flags[2].destination = "mx:mx.test";
    auto s = snapshot_from_flags(flags);
    ASSERT_EQ(s->by_domain.size(), 1u);
    LedgerDecider d(holder(kActions));
    d.publish(s);
    EXPECT_EQ(d.decide(rcpt("u@flagged.test"), kDeadline).kind, ActionKind::prepend);
    EXPECT_EQ(d.decide(rcpt("u@gone.test"), kDeadline).kind, ActionKind::dunno);
}

// A flag read back from the ledger answers with the class its reason names
// ({category} in actions.flagged), not one fixed class.
TEST(PolicyLedgerDecider, SnapshotFromFlagsTakesTheCategoryFromTheReason) {
    std::vector<Flag> flags(3);
    flags[0].destination = "rate.test";
    flags[0].reason = "4 rate-limited episodes within 2592000 s";
    flags[1].destination = "config.test";
    flags[1].reason = "3 receiver-config deferrals within 86400 s";
    flags[2].destination = "several.test";
    flags[2].reason = "3 flag-category episodes within 2592000 s";
    auto s = snapshot_from_flags(flags);
    ASSERT_EQ(s->by_domain.size(), 3u);
    EXPECT_EQ(s->by_domain.at("rate.test").category, Category::rate_limited);
    EXPECT_EQ(s->by_domain.at("config.test").category, Category::receiver_config);
    EXPECT_EQ(s->by_domain.at("several.test").category, Category::unknown);
    auto cfg = holder("actions: {flagged: \"WARN {domain} flagged for {category}\"}\n");
    LedgerDecider d(cfg);
    d.publish(s);
    EXPECT_EQ(d.decide(rcpt("u@rate.test"), kDeadline).action, "WARN rate.test flagged for rate-limited");
}

TEST(PolicyLedgerDecider, SnapshotFromARealEngineFedThePostfixFixture) {
    // The fixture's deferrals span three minutes: a 1m escalate_after makes the
    // receiver_config episode escalate, as a day-long one would by default.
    auto cfg = holder(std::string(kActions) +
                      "categories: {receiver_config: {watch_after_deferrals: 1, "
                      "escalate_after: 1m}}\n");
    std::ifstream in(std::string(RETRYGUARD_FIXTURES) +
                     "/postfix-3.7/41-lifecycle-deferred-retries-delay-warning.sender.log");
    ASSERT_TRUE(in);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    auto classifier = classifier_from(*cfg->current());
    ASSERT_TRUE(classifier);
    const auto db =
        std::filesystem::temp_directory_path() / ("rg-ledger-decider-" + std::to_string(::getpid()) + ".db");
    std::filesystem::remove(db);
    auto ledger = open_ledger("sqlite:" + db.string());
    ASSERT_TRUE(ledger) << ledger.error().message;
    Ingestor ingest(**ledger, *classifier, config::to_engine_settings(cfg->current()));
    LogParser parser;
    ASSERT_TRUE(ingest.ingest_lines(parser, lines, std::nullopt));
    auto snap = snapshot_from_engine(ingest.engine());
    ASSERT_FALSE(snap->by_domain.empty());
    LedgerDecider d(cfg);
    d.publish(snap);
    const std::string domain = snap->by_domain.begin()->first;
    const Decision dec = d.decide(rcpt("someone@" + domain), kDeadline);
    EXPECT_NE(dec.kind, ActionKind::dunno) << domain;
    EXPECT_NE(dec.action.find(domain), std::string::npos) << dec.action;
    EXPECT_EQ(d.decide(rcpt("someone@unrelated.test"), kDeadline).kind, ActionKind::dunno);
    ledger->reset();
    std::filesystem::remove(db);
}
