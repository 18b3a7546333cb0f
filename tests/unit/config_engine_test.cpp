// config_engine_test.cpp -- the rules engine sees the config's values: global
// thresholds, per-destination overrides through the resolve hook, "off"
// spellings, and the snapshot it was built from even after a reload.
#include <gtest/gtest.h>

#include "retryguard/config/config_engine.hpp"

namespace cfg = retryguard::config;
using namespace std::chrono_literals;
using retryguard::Category;

namespace {

std::shared_ptr<const cfg::Config> load(const std::string& text) {
    auto out = cfg::load_string(text, "e.yaml");
    EXPECT_TRUE(out.ok()) << (out.errors.empty() ? "" : out.errors[0].to_string());
    return out.config;
}

}  // namespace

TEST(ConfigEngineSettings, GlobalValuesReachTheEngine) {
    auto e =
        cfg::to_engine_settings(load("categories:\n  receiver_system:\n    escalate_after: 4d\n"
                                     "flags:\n  episodes: 5\n  deferrals: 40\n  deferrals_window: 2d\n"
                                     "spread:\n  window: 20m\n  min_destinations: 12\n  quiet_period: 1h\n"));
    const auto& d = e.defaults;
    EXPECT_EQ(d.rule, "global");
    EXPECT_EQ(d.thresholds(Category::receiver_system).escalate_after, retryguard::Duration(96h));
    EXPECT_EQ(d.thresholds(Category::receiver_config).escalate_after, retryguard::Duration(24h));
    EXPECT_EQ(d.thresholds(Category::receiver_config).watch_after_deferrals, 3);
    // Categories without their own keys follow `unknown`.
    EXPECT_EQ(d.thresholds(Category::mailbox).escalate_after, retryguard::Duration(48h));
    EXPECT_EQ(d.min_retry_interval, retryguard::Duration(30min));
    EXPECT_EQ(d.greylist_min_retry, retryguard::Duration(15min));
    EXPECT_EQ(d.repeat_episodes, 5);
    EXPECT_EQ(d.repeat_deferrals, 40);
    EXPECT_EQ(d.repeat_deferral_window, retryguard::Duration(48h));
    EXPECT_EQ(d.flag_ttl, retryguard::Duration(30 * 24h));
    EXPECT_EQ(e.spread_window, retryguard::Duration(20min));
    EXPECT_EQ(e.spread_min_destinations, 12);
    EXPECT_EQ(e.incident_quiet_after, retryguard::Duration(1h));
    EXPECT_FALSE(e.resolve);  // no destination rules: the engine uses the defaults
}

TEST(ConfigEngineSettings, OffSpellings) {
    auto e = cfg::to_engine_settings(
        load("flags:\n  enabled: false\n  deferrals: 10\nspread:\n  enabled: false\n"));
    EXPECT_EQ(e.defaults.repeat_episodes, 0);
    EXPECT_EQ(e.defaults.repeat_deferrals, 0);
    EXPECT_EQ(e.spread_min_destinations, std::numeric_limits<int>::max());
}

TEST(ConfigEngineSettings, DestinationRulesThroughResolve) {
    auto c = load(
        "destinations:\n"
        "  - domain: example.com\n"
        "    contact: \"noc@example.com\"\n"
        "    categories: {receiver_config: {escalate_after: 12h}}\n"
        "  - mx: \"mx*.provider.net\"\n"
        "    flags: {episodes: 2}\n");
    auto e = cfg::to_engine_settings(c);
    ASSERT_TRUE(e.resolve);
    const auto* exact = e.resolve("example.com", "");
    ASSERT_NE(exact, nullptr);
    EXPECT_EQ(exact->rule, "domain:example.com");
    EXPECT_EQ(exact->contact, "noc@example.com");
    EXPECT_EQ(exact->thresholds(Category::receiver_config).escalate_after, retryguard::Duration(12h));
    // The engine looks MX destinations up with an empty domain.
    const auto* mx = e.resolve("", "mx2.provider.net");
    ASSERT_NE(mx, nullptr);
    EXPECT_EQ(mx->rule, "mx:mx*.provider.net");
    EXPECT_EQ(mx->repeat_episodes, 2);
    EXPECT_EQ(e.resolve("other.org", "mx.other.org"), nullptr);
    // Deterministic: the same answer every time.
    EXPECT_EQ(e.resolve("example.com", ""), exact);
}

TEST(ConfigEngineSettings, KeepsItsSnapshotAlive) {
    auto snapshot = load("destinations:\n  - domain: a.example\n    retry: {min_interval: 45m}\n");
    std::weak_ptr<const cfg::Config> watch = snapshot;
    auto e = cfg::to_engine_settings(std::move(snapshot));
    // The daemon dropped its reference (a reload swapped in another snapshot): the engine's still answers.
    EXPECT_FALSE(watch.expired());
    const auto* r = e.resolve("a.example", "");
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->min_retry_interval, retryguard::Duration(45min));
    e = retryguard::EngineSettings{};
    EXPECT_TRUE(watch.expired());
}
