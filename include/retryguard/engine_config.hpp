// engine_config.hpp -- the rules engine's settings from a configuration
// snapshot: global values plus a per-destination resolver backed by the
// snapshot's `destinations:` rules. The returned settings keep the snapshot
// alive; a reload builds new settings from the new snapshot.
#pragma once

#include <memory>

#include "retryguard/config.hpp"
#include "retryguard/engine.hpp"

namespace retryguard {

EngineSettings engine_settings_from(std::shared_ptr<const config::Config> config);

// One destination rule's (or the global) settings in the engine's terms.
RuleSettings rule_settings_from(const config::Settings& settings, std::string rule_name);

}  // namespace retryguard
