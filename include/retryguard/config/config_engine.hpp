// config_engine.hpp -- turns a config snapshot into the rules engine's
// settings (engine.hpp), so the engine reads thresholds, flags, spread and
// per-destination overrides from retryguard.yaml. Kept apart from config.hpp
// so the config does not depend on the engine. Decides nothing itself.
#pragma once

#include <memory>

#include "retryguard/config/config.hpp"
#include "retryguard/rules/engine.hpp"

namespace retryguard::config {

// The engine's view of one Settings (global or a destination rule's).
// `rule_name` is what verdicts show as rule=.
RuleSettings to_rule_settings(const Settings& s, std::string rule_name);

// Everything the engine takes from a snapshot. The returned resolve hook keeps
// the snapshot alive, so an engine built from it is unaffected by a reload;
// build a new EngineSettings from the new snapshot to apply one.
EngineSettings to_engine_settings(std::shared_ptr<const Config> config);

}  // namespace retryguard::config
