// engine_feed.hpp -- a rules engine fed events by a test, with every verdict
// it gave kept for the test to count and find.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

#include "retryguard/rules/engine.hpp"

namespace retryguard {

struct EngineFeed {
    Engine engine;
    std::vector<Verdict> all;
    explicit EngineFeed(EngineSettings s = {}) : engine(std::move(s)) {}
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

}  // namespace retryguard
