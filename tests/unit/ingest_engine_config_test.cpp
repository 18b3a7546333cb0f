// Configuration values reach the rules engine, globally and per destination.
#include "retryguard/config/config_engine.hpp"

#include <gtest/gtest.h>

namespace retryguard {
namespace {

using namespace std::chrono_literals;

TEST(EngineConfig, DefaultsFollowTheGuidance) {
    auto s = config::to_engine_settings(config::defaults());
    EXPECT_EQ(s.defaults.thresholds(Category::receiver_config).escalate_after, Duration(24h));
    EXPECT_EQ(s.defaults.thresholds(Category::receiver_system).escalate_after, Duration(72h));
    EXPECT_EQ(s.defaults.min_retry_interval, Duration(30min));
    EXPECT_EQ(s.defaults.greylist_min_retry, Duration(15min));
    EXPECT_EQ(s.defaults.flag_categories, std::vector<Category>{Category::receiver_config});
    EXPECT_FALSE(s.resolve) << "no destination rules";
}

TEST(EngineConfig, DestinationRulesOverrideAndCarryTheirContact) {
    auto loaded = config::load_string(R"(
categories:
  receiver_config:
    escalate_after: 36h
spread:
  min_destinations: 4
destinations:
  - domain: example.com
    contact: "noc@example.com"
    categories:
      receiver_config:
        escalate_after: 2h
  - mx: "*.outlook.invalid"
    flags:
      episodes: 2
)");
    ASSERT_TRUE(loaded.ok()) << (loaded.errors.empty() ? "" : loaded.errors[0].to_string());
    auto s = config::to_engine_settings(loaded.config);
    EXPECT_EQ(s.defaults.thresholds(Category::receiver_config).escalate_after, Duration(36h));
    EXPECT_EQ(s.spread_min_destinations, 4);
    const RuleSettings* exact = s.resolve("example.com", "");
    ASSERT_NE(exact, nullptr);
    EXPECT_EQ(exact->thresholds(Category::receiver_config).escalate_after, Duration(2h));
    EXPECT_EQ(exact->contact, "noc@example.com");
    EXPECT_EQ(exact->rule, "domain:example.com");
    const RuleSettings* mx = s.resolve("contoso.invalid", "mail.protection.outlook.invalid");
    ASSERT_NE(mx, nullptr);
    EXPECT_EQ(mx->repeat_episodes, 2);
    EXPECT_EQ(s.resolve("other.example", "mx.other.example"), nullptr);

    // The engine applies it: example.com escalates after 2 h, others do not.
    Engine engine(s);
    auto defer = [&](TimePoint t, std::string rcpt) {
        Event e;
        e.kind = EventKind::delivery;
        e.time = t;
        e.queue_id = "Q1";
        e.recipient = std::move(rcpt);
        e.status = DeliveryStatus::deferred;
        e.relay_host = "mx.example.com";
        return engine.on_event(e, Category::receiver_config);
    };
    TimePoint t0 = from_micros(1'795'985'302'000'000);
    defer(t0, "a@example.com");
    defer(t0, "a@other.example");
    auto vs = engine.advance(t0 + 3h);
    ASSERT_FALSE(vs.empty());
    bool example_escalated = false, other_escalated = false;
    for (const auto& v : vs) {
        example_escalated = example_escalated || (v.name == "escalate" && v.key == "example.com");
        other_escalated = other_escalated || (v.name == "escalate" && v.key == "other.example");
    }
    EXPECT_TRUE(example_escalated);
    EXPECT_FALSE(other_escalated);
}

}  // namespace
}  // namespace retryguard
