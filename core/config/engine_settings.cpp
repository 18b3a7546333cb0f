// engine_settings.cpp -- maps a config snapshot onto the rules engine's
// settings. Owns only the translation (units, "off" spellings, rule names);
// must never change a value's meaning or invent one the config does not hold.
#include <algorithm>
#include <limits>
#include <vector>

#include "retryguard/config/config_engine.hpp"

namespace retryguard::config {

RuleSettings to_rule_settings(const Settings& s, std::string rule_name) {
    RuleSettings r;
    for (const auto& info : all_categories()) {
        const auto& t = s.thresholds(info.category);
        auto& out = r.thresholds(info.category);
        out.watch_after_deferrals = static_cast<int>(t.watch_after_deferrals);
        out.escalate_after =
            t.escalate_after.count() > 0
                ? std::optional(std::chrono::duration_cast<retryguard::Duration>(t.escalate_after))
                : std::nullopt;
    }
    r.min_retry_interval = s.retry.min_interval;
    r.greylist_min_retry = s.retry.min_interval_after_greylisting;
    r.stalled_after = s.retry.stalled_after;
    // The engine treats a zero count as "this trigger is off".
    r.repeat_episodes = s.flags.enabled ? static_cast<int>(s.flags.episodes) : 0;
    r.repeat_period = s.flags.period;
    r.repeat_deferrals = s.flags.enabled ? static_cast<int>(s.flags.deferrals) : 0;
    r.repeat_deferral_window = s.flags.deferrals_window;
    r.flag_ttl = s.flags.ttl;
    r.flags_enabled = s.flags.enabled;
    r.flag_categories = s.flags.categories;
    r.honor_retry_after_hint = s.retry.honor_retry_after_hint;
    r.contact = s.contact;
    r.rule = std::move(rule_name);
    return r;
}

namespace {

struct Resolver {
    std::shared_ptr<const Config> config;
    std::vector<RuleSettings> rules;  // index = DestinationRule::index
};

std::string rule_name(const DestinationRule& r) {
    const char* kind = r.kind == DestinationRule::Kind::mx ? "mx:" : "domain:";
    return kind + r.pattern;
}

}  // namespace

EngineSettings to_engine_settings(std::shared_ptr<const Config> config) {
    EngineSettings e;
    e.defaults = to_rule_settings(config->global, "global");
    e.spread_window = config->spread.window;
    e.spread_min_destinations = config->spread.enabled ? static_cast<int>(config->spread.min_destinations)
                                                       : std::numeric_limits<int>::max();
    e.incident_quiet_after = config->spread.quiet_period;
    e.spread_enabled = config->spread.enabled;
    e.spread_categories = config->spread.categories;
    if (config->destinations.empty()) return e;
    auto resolver = std::make_shared<Resolver>();
    resolver->config = config;
    for (const auto& r : config->destinations) {
        resolver->rules.push_back(to_rule_settings(r.settings, rule_name(r)));
        const RuleSettings& rs = resolver->rules.back();
        e.longest_rule_memory =
            std::max({e.longest_rule_memory, rs.repeat_period, rs.repeat_deferral_window});
    }
    e.resolve = [resolver](std::string_view domain, std::string_view mx) -> const RuleSettings* {
        auto res = resolver->config->resolve(domain, mx);
        return res.rule ? &resolver->rules[res.rule->index] : nullptr;
    };
    return e;
}

}  // namespace retryguard::config
