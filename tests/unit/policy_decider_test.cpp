// policy_decider_test.cpp -- action text checking, the static destination
// table (file format, lookups, reload) and the per-request service steps.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "retryguard/policy/policy.hpp"
#include "retryguard/policy/policy_service.hpp"

using namespace retryguard;

namespace {

PolicyRequest request_for(std::string_view text) {
    PolicyParser p;
    static std::string keep;
    keep = std::string(text);
    std::string_view v = keep;
    EXPECT_EQ(p.feed(v), PolicyParser::State::complete);
    return p.request();
}

PolicyRequest rcpt(std::string_view recipient, std::string_view stage = "RCPT") {
    return request_for("request=smtpd_access_policy\nprotocol_state=" + std::string(stage) +
                       "\nrecipient=" + std::string(recipient) + "\n\n");
}

class TempFile {
  public:
    explicit TempFile(const std::string& text) {
        path_ = (std::filesystem::temp_directory_path() /
                 ("rg-policy-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++)))
                    .string();
        write(text);
    }
    ~TempFile() { std::remove(path_.c_str()); }
    void write(const std::string& text) const { std::ofstream(path_, std::ios::trunc) << text; }
    const std::string& path() const { return path_; }

  private:
    static inline int counter_ = 0;
    std::string path_;
};

}  // namespace

TEST(PolicyAction, AcceptsEachKindAndKeepsText) {
    struct Case {
        const char* text;
        ActionKind kind;
        const char* action;
    };
    const Case cases[] = {
        {"DUNNO", ActionKind::dunno, "DUNNO"},
        {"dunno", ActionKind::dunno, "DUNNO"},
        {"WARN destination flagged", ActionKind::warn, "WARN destination flagged"},
        {"WARN", ActionKind::warn, "WARN"},
        {"INFO retryguard: flagged", ActionKind::info, "INFO retryguard: flagged"},
        {"PREPEND X-Retryguard: destination flagged", ActionKind::prepend,
         "PREPEND X-Retryguard: destination flagged"},
        {"HOLD", ActionKind::hold, "HOLD"},
        {"hold  waiting for review ", ActionKind::hold, "HOLD waiting for review"},
        {"DEFER_IF_PERMIT 4.7.1 destination is failing", ActionKind::defer_if_permit,
         "DEFER_IF_PERMIT 4.7.1 destination is failing"},
        {"REJECT 5.7.1 destination closed", ActionKind::reject, "REJECT 5.7.1 destination closed"},
    };
    for (const Case& c : cases) {
        auto d = parse_action(c.text);
        ASSERT_TRUE(d) << c.text << ": " << d.error().message;
        EXPECT_EQ(d->kind, c.kind) << c.text;
        EXPECT_EQ(d->action, c.action);
    }
}

TEST(PolicyAction, RefusesWhatPostfixWouldMisread) {
    for (const char* bad : {"", "   ", "OK", "DISCARD", "DUNNO please", "PREPEND", "PREPEND no colon here",
                            "PREPEND Bad Name: x", "REJECT a\nb", "WARN tab\tinside"}) {
        EXPECT_FALSE(parse_action(bad)) << bad;
    }
    EXPECT_FALSE(parse_action("REJECT " + std::string(600, 'x')));
}

TEST(PolicyStaticTable, ParsesLinesCommentsAndNormalizesDomains) {
    auto t = parse_destination_table(
        "# flagged destinations\n"
        "\n"
        "Example.COM.   REJECT 5.7.1 closed\n"
        "slow.test\tDEFER_IF_PERMIT 4.7.1 try later\r\n"
        "  warn.test WARN flagged\n");
    ASSERT_TRUE(t) << t.error().message;
}

TEST(PolicyStaticTable, ErrorsNameTheLine) {
    auto t = parse_destination_table("a.test REJECT\nb.test\n");
    ASSERT_FALSE(t);
    EXPECT_NE(t.error().message.find("line 2"), std::string::npos) << t.error().message;
    t = parse_destination_table("a.test REJECT\na.test HOLD\n");
    ASSERT_FALSE(t);
    EXPECT_NE(t.error().message.find("twice"), std::string::npos);
    t = parse_destination_table("a.test FROBNICATE\n");
    ASSERT_FALSE(t);
    EXPECT_NE(t.error().message.find("line 1"), std::string::npos);
    t = parse_destination_table("user@a.test REJECT\n");
    ASSERT_FALSE(t);
    t = parse_destination_table(std::string(300, 'a') + " REJECT\n");
    ASSERT_FALSE(t);
}

TEST(PolicyStaticDecider, LooksUpRecipientDomainCaseInsensitively) {
    TempFile f("example.com REJECT 5.7.1 closed\nwarn.test WARN flagged\n");
    auto d = StaticDestinationDecider::load(f.path());
    ASSERT_TRUE(d) << d.error().message;
    auto& decider = **d;
    EXPECT_FALSE(decider.may_block());
    EXPECT_EQ(decider.size(), 2u);
    const auto deadline = PolicyClock::now();
    EXPECT_EQ(decider.decide(rcpt("u@example.com"), deadline).action, "REJECT 5.7.1 closed");
    EXPECT_EQ(decider.decide(rcpt("u@EXAMPLE.Com."), deadline).kind, ActionKind::reject);
    EXPECT_EQ(decider.decide(rcpt("\"odd@local\"@warn.test"), deadline).kind, ActionKind::warn);
    EXPECT_EQ(decider.decide(rcpt("u@sub.example.com"), deadline).kind, ActionKind::dunno);
    EXPECT_EQ(decider.decide(rcpt("u@other.test"), deadline).action, "DUNNO");
    EXPECT_EQ(decider.decide(rcpt(""), deadline).kind, ActionKind::dunno);
    EXPECT_EQ(decider.decide(rcpt("postmaster"), deadline).kind, ActionKind::dunno);
}

TEST(PolicyStaticDecider, ReloadSwapsTableAndKeepsOldOnError) {
    TempFile f("a.test REJECT\n");
    auto d = StaticDestinationDecider::load(f.path());
    ASSERT_TRUE(d);
    auto& decider = **d;
    const auto now = PolicyClock::now();
    EXPECT_EQ(decider.decide(rcpt("x@a.test"), now).kind, ActionKind::reject);
    f.write("b.test HOLD\n");
    ASSERT_TRUE(decider.reload());
    EXPECT_EQ(decider.decide(rcpt("x@a.test"), now).kind, ActionKind::dunno);
    EXPECT_EQ(decider.decide(rcpt("x@b.test"), now).kind, ActionKind::hold);
    f.write("b.test NONSENSE\n");
    auto st = decider.reload();
    ASSERT_FALSE(st);
    EXPECT_NE(st.error().message.find("line 1"), std::string::npos);
    EXPECT_EQ(decider.decide(rcpt("x@b.test"), now).kind, ActionKind::hold);
}

TEST(PolicyStaticDecider, MissingFileIsAnError) {
    auto d = StaticDestinationDecider::load("/nonexistent/retryguard/flagged");
    ASSERT_FALSE(d);
    EXPECT_EQ(d.error().kind, ErrorKind::io);
}

TEST(PolicyStaticDecider, HundredThousandDestinations) {
    std::string text;
    for (int i = 0; i < 100000; ++i) text += "d" + std::to_string(i) + ".flagged.test REJECT 5.7.1 flagged\n";
    auto t = parse_destination_table(text);
    ASSERT_TRUE(t);
    TempFile f(text);
    auto d = StaticDestinationDecider::load(f.path());
    ASSERT_TRUE(d);
    EXPECT_EQ((*d)->size(), 100000u);
    EXPECT_EQ((*d)->decide(rcpt("u@d99999.flagged.test"), PolicyClock::now()).kind, ActionKind::reject);
    EXPECT_EQ((*d)->decide(rcpt("u@d100000.flagged.test"), PolicyClock::now()).kind, ActionKind::dunno);
}

TEST(PolicyStages, ParseAndLookup) {
    auto s = PolicyStageSet::parse("rcpt, END-OF-MESSAGE");
    ASSERT_TRUE(s);
    EXPECT_TRUE(s->contains(PolicyStage::rcpt));
    EXPECT_TRUE(s->contains(PolicyStage::end_of_message));
    EXPECT_FALSE(s->contains(PolicyStage::data));
    EXPECT_EQ(s->to_string(), "RCPT,END-OF-MESSAGE");
    EXPECT_FALSE(PolicyStageSet::parse("RCPT,BOGUS"));
    EXPECT_EQ(policy_stage_of("END-OF-MESSAGE"), PolicyStage::end_of_message);
    EXPECT_EQ(policy_stage_of("VRFY"), PolicyStage::vrfy);
    EXPECT_EQ(policy_stage_of("rcpt"), PolicyStage::other);
    EXPECT_EQ(policy_stage_of(""), PolicyStage::other);
}

TEST(PolicyServiceSteps, OnlyConfiguredStagesAreDecided) {
    PolicyMetrics m;
    PolicyService svc(PolicyStageSet::rcpt_only(), m);
    EXPECT_TRUE(svc.wants_decision(rcpt("a@b")));
    EXPECT_FALSE(svc.wants_decision(rcpt("a@b", "DATA")));
    EXPECT_FALSE(svc.wants_decision(rcpt("a@b", "MAIL")));
    EXPECT_EQ(m.requests(PolicyStage::rcpt), 1u);
    EXPECT_EQ(m.requests(PolicyStage::data), 1u);
    EXPECT_EQ(m.requests(PolicyStage::mail), 1u);
}

namespace {
class ThrowingDecider final : public PolicyDecider {
  public:
    Decision decide(const PolicyRequest&, PolicyDeadline) override { throw std::runtime_error("boom"); }
    bool may_block() const noexcept override { return false; }
    Status reload() override { return {}; }
    std::string describe() const override { return "throws"; }
};
}  // namespace

TEST(PolicyServiceSteps, FailOpenAnswersDunnoAndCounts) {
    PolicyMetrics m;
    PolicyService svc(PolicyStageSet::rcpt_only(), m);
    ThrowingDecider d;
    bool failed = false;
    const Decision dec = svc.decide_contained(d, rcpt("a@b"), PolicyClock::now(), failed);
    EXPECT_TRUE(failed);
    EXPECT_EQ(dec.kind, ActionKind::dunno);
    std::string out;
    svc.answer_fail_open(out, FailOpenReason::decider_error);
    svc.answer_fail_open(out, FailOpenReason::timeout);
    EXPECT_EQ(out, "action=DUNNO\n\naction=DUNNO\n\n");
    EXPECT_EQ(m.fail_opens(FailOpenReason::decider_error), 1u);
    EXPECT_EQ(m.fail_opens(FailOpenReason::timeout), 1u);
    EXPECT_EQ(m.actions(ActionKind::dunno), 2u);
}

TEST(PolicyMetricsText, RendersCountersAndCumulativeHistogram) {
    PolicyMetrics m;
    m.request(PolicyStage::rcpt);
    m.action(ActionKind::reject);
    m.malformed(PolicyError::line_too_long);
    m.latency(7);
    m.latency(40);
    m.latency(1'000'000);
    m.connection_opened();
    const std::string t = m.render_prometheus();
    EXPECT_NE(t.find("retryguard_policy_requests_total{stage=\"RCPT\"} 1\n"), std::string::npos);
    EXPECT_NE(t.find("retryguard_policy_actions_total{action=\"reject\"} 1\n"), std::string::npos);
    EXPECT_NE(t.find("retryguard_policy_malformed_total{reason=\"line_too_long\"} 1\n"), std::string::npos);
    EXPECT_NE(t.find("retryguard_policy_open_connections 1\n"), std::string::npos);
    EXPECT_NE(t.find("retryguard_policy_decision_seconds_bucket{le=\"1e-05\"} 1\n"), std::string::npos) << t;
    EXPECT_NE(t.find("retryguard_policy_decision_seconds_bucket{le=\"5e-05\"} 2\n"), std::string::npos);
    EXPECT_NE(t.find("retryguard_policy_decision_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
    EXPECT_NE(t.find("retryguard_policy_decision_seconds_count 3\n"), std::string::npos);
}
