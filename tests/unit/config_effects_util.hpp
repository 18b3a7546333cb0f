// config_effects_util.hpp -- helpers for the tests that observe settings
// through what they change: a YAML configuration loaded as the daemons load
// it, and the rules engine built from it with every verdict it gave kept.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

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
struct Engined {
    Engine engine;
    std::vector<Verdict> all;
    explicit Engined(const std::string& yaml) : engine(config::to_engine_settings(load(yaml))) {}
    std::vector<Verdict> operator()(const Event& e, Category c) {
        auto vs = engine.on_event(e, c);
        all.insert(all.end(), vs.begin(), vs.end());
        return vs;
    }
    std::vector<Verdict> advance(TimePoint t) {
        auto vs = engine.advance(t);
        all.insert(all.end(), vs.begin(), vs.end());
        return vs;
    }
    // Verdicts named `name` (for `key` when given).
    int count(std::string_view name, std::string_view key = {}) const {
        int n = 0;
        for (const auto& v : all) n += v.name == name && (key.empty() || v.key == key);
        return n;
    }
    const Verdict* find(std::string_view name, std::string_view key) const {
        for (const auto& v : all)
            if (v.name == name && v.key == key) return &v;
        return nullptr;
    }
};

// A category with thresholds of its own, as the configuration spells it.
struct CategoryKeys {
    Category category;
    const char* key;
};

}  // namespace retryguard::config_effects
