// engine_config.cpp -- maps configuration values onto the rules engine's
// settings. The only place that knows both vocabularies.
#include "retryguard/engine_config.hpp"

#include <unordered_map>

namespace retryguard {

namespace {
Duration micros(config::Duration d) { return std::chrono::duration_cast<Duration>(d); }
}  // namespace

RuleSettings rule_settings_from(const config::Settings& s, std::string rule_name) {
    RuleSettings r;
    for (const auto& ci : all_categories()) {
        const auto& t = s.thresholds(ci.category);
        auto& out = r.thresholds(ci.category);
        out.watch_after_deferrals = static_cast<int>(t.watch_after_deferrals);
        out.escalate_after = t.escalate_after.count() > 0 ? std::optional<Duration>(micros(t.escalate_after))
                                                          : std::nullopt;
    }
    r.min_retry_interval = micros(s.retry.min_interval);
    r.greylist_min_retry = micros(s.retry.min_interval_after_greylisting);
    r.stalled_after = micros(s.retry.stalled_after);
    r.honor_retry_after_hint = s.retry.honor_retry_after_hint;
    r.flags_enabled = s.flags.enabled;
    r.repeat_episodes = static_cast<int>(s.flags.episodes);
    r.repeat_period = micros(s.flags.period);
    r.repeat_deferrals = static_cast<int>(s.flags.deferrals);
    r.repeat_deferral_window = micros(s.flags.deferrals_window);
    r.flag_ttl = micros(s.flags.ttl);
    r.flag_categories = s.flags.categories;
    r.contact = s.contact;
    r.rule = std::move(rule_name);
    return r;
}

EngineSettings engine_settings_from(std::shared_ptr<const config::Config> config) {
    struct Converted {
        std::shared_ptr<const config::Config> config;
        std::vector<RuleSettings> per_rule;  // index = DestinationRule::index
    };
    auto conv = std::make_shared<Converted>();
    conv->config = config;
    for (const auto& rule : config->destinations)
        conv->per_rule.push_back(rule_settings_from(
            rule.settings, "destinations[" + std::to_string(rule.index) + "] (" + rule.pattern + ")"));

    EngineSettings e;
    e.defaults = rule_settings_from(config->global, "global");
    e.spread_enabled = config->spread.enabled;
    e.spread_window = micros(config->spread.window);
    e.spread_min_destinations = static_cast<int>(config->spread.min_destinations);
    e.incident_quiet_after = micros(config->spread.quiet_period);
    e.spread_categories = config->spread.categories;
    e.resolve = [conv](std::string_view domain, std::string_view mx) -> const RuleSettings* {
        auto res = conv->config->resolve(domain, mx);
        if (!res.rule || res.rule->index >= conv->per_rule.size()) return nullptr;
        return &conv->per_rule[res.rule->index];
    };
    return e;
}

}  // namespace retryguard
