// category.hpp -- the deferral categories of the guidance (docs/guidance.md,
// section 2). One table in core/category.cpp gives each its spelling, whose
// fault it is and what the guidance says to do; everything else refers to it.
#pragma once

#include <optional>
#include <span>
#include <string_view>

namespace retryguard {

enum class Category {
    receiver_config,            // 4.3.5: the receiving system is misconfigured
    receiver_config_permanent,  // 5.3.5
    receiver_system,            // 4.3.0 / 4.3.1 / 4.3.2 / 4.4.5: receiving system trouble
    greylisting,
    rate_limited,
    policy,   // 4.7.x / 5.7.x not matching the above: about the sender
    mailbox,  // 4.2.2, 5.2.x: per recipient
    address,  // 5.1.x
    network,  // connection refused, lost connection, timeouts, 4.4.1/4.4.2
    routing,  // 4.4.4, 5.4.4, host not found
    content,  // X.6.x, size
    expired,  // the retry window ran out
    local,    // the sending Postfix itself (e.g. "mail transport unavailable")
    unknown,
};

struct CategoryInfo {
    Category category;
    std::string_view name;      // spelling in config, JSON, logs: "receiver-config"
    std::string_view fault;     // whose fault it is
    std::string_view guidance;  // what the guidance says to do
    bool system_condition;      // never suppress the address, never a reputation signal
};

std::span<const CategoryInfo> all_categories() noexcept;
const CategoryInfo& info(Category c) noexcept;
std::string_view to_string(Category c) noexcept;
std::optional<Category> category_from_string(std::string_view name) noexcept;

}  // namespace retryguard
