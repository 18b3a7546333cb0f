// config_effects_util.hpp -- helpers for the tests that observe settings
// through what they change: a YAML configuration loaded as the daemons load
// it, and the rules engine built from it with every verdict it gave kept.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "engine_feed.hpp"
#include "retryguard/config/config.hpp"
#include "retryguard/config/config_engine.hpp"
#include "retryguard/rules/engine.hpp"

namespace retryguard::config_effects {

inline const TimePoint T0 = from_micros(1'795'985'302'000'000);  // 2026-11-29T20:48:22Z

// The configuration `yaml` (named `file` in errors); the defaults, with a
// test failure, when it does not load.
inline std::shared_ptr<const config::Config> load(const std::string& yaml,
                                                  const std::string& file = "effects.yaml") {
    auto out = config::load_string(yaml, file);
    EXPECT_TRUE(out.ok()) << (out.errors.empty() ? "" : out.errors[0].to_string());
    return out.ok() ? out.config : config::defaults();
}

// The engine a daemon builds from this configuration, and its verdicts.
struct Engined : EngineFeed {
    explicit Engined(const std::string& yaml) : EngineFeed(config::to_engine_settings(load(yaml))) {}
};

// A category with thresholds of its own, as the configuration spells it.
struct CategoryKeys {
    Category category;
    const char* key;
};

// Every category with ladder keys (categories.<key>.*), but `except`.
inline std::vector<CategoryKeys> category_keys_but(Category except) {
    static const CategoryKeys kAll[] = {
        {Category::receiver_config, "receiver_config"},
        {Category::receiver_system, "receiver_system"},
        {Category::greylisting, "greylisting"},
        {Category::rate_limited, "rate_limited"},
        {Category::policy, "policy"},
        {Category::network, "network"},
        {Category::routing, "routing"},
        {Category::local, "local"},
        {Category::unknown, "unknown"},
    };
    std::vector<CategoryKeys> out;
    for (const auto& k : kAll)
        if (k.category != except) out.push_back(k);
    return out;
}

}  // namespace retryguard::config_effects
