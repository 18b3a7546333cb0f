// values.hpp -- parsers of the config's value types that are not part of the
// public API (the public ones are declared in retryguard/config/config.hpp). Owns no
// state; must never throw.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "retryguard/config/config.hpp"

namespace retryguard::config {

std::optional<HostPort> parse_host_port(std::string_view text, std::string* why);
// A literal IPv4 or IPv6 address (no name lookup).
bool is_ip_address(std::string_view host);
bool check_placeholders(std::string_view text, std::span<const std::string_view> allowed, std::string* why);
bool printable_text(std::string_view text, std::string* why);
std::optional<PolicyAction> parse_policy_action(std::string_view text,
                                                std::span<const std::string_view> verbs,
                                                std::span<const std::string_view> placeholders,
                                                std::string* why);
// Host glob (*, ?, [a-z]) to an anchored-by-FullMatch, case-insensitive RE2 pattern.
std::optional<std::string> glob_to_regex(std::string_view glob, std::size_t* literal_chars, std::string* why);

}  // namespace retryguard::config
