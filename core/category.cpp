// category.cpp -- the one table of deferral categories (see GUIDANCE section 2).
#include "retryguard/category.hpp"

#include <array>

namespace retryguard {
namespace {

constexpr std::array kCategories = {
    CategoryInfo{Category::receiver_config, "receiver-config", "the receiving system",
                 "Let the queue retry on its normal schedule; do not reroute, do not audit your own "
                 "SPF/DKIM/DMARC, do not suppress the address. Usually fixed within a business day; past "
                 "24-48 h contact the recipient through another channel with the literal reply text.",
                 true},
    CategoryInfo{Category::receiver_config_permanent, "receiver-config-permanent",
                 "the receiving system, or your own server when the reporting MTA is yours",
                 "Retrying will not help; check whether the reporting host is one of yours.", true},
    CategoryInfo{Category::receiver_system, "receiver-system", "the receiving system",
                 "Do nothing in a hurry: the queue retries for days. Never resend manually (duplicates "
                 "are worse than delay), do not reduce volume, do not give up on the address. Escalate "
                 "only past the retry window (3-5 days) for the same domain.",
                 true},
    CategoryInfo{Category::greylisting, "greylisting", "nobody: an anti-spam delay",
                 "Retry after the delay asked for (never within 15 minutes); the next attempt normally "
                 "passes.",
                 false},
    CategoryInfo{Category::rate_limited, "rate-limited", "sender volume or reputation at that receiver",
                 "Slow down for that destination.", false},
    CategoryInfo{Category::policy, "policy", "the sender: authentication, reputation or content",
                 "This one is about you: check authentication, reputation and content.", false},
    CategoryInfo{Category::mailbox, "mailbox", "the recipient's mailbox",
                 "Per recipient, not per domain: the mailbox is full or disabled.", false},
    CategoryInfo{Category::address, "address", "the address",
                 "Hard bounce: the address does not exist; suppression is appropriate.", false},
    CategoryInfo{Category::network, "network", "the path to the receiver (or your own outbound path)",
                 "Retry; watch whether the failures spread across unrelated destinations.", true},
    CategoryInfo{Category::routing, "routing", "DNS or routing of the destination",
                 "Check the destination's MX and address records.", false},
    CategoryInfo{Category::content, "content", "the message", "Check the message's size and content.", false},
    CategoryInfo{Category::expired, "expired", "the retry window ran out",
                 "The message was returned; escalation should have happened before this.", false},
    CategoryInfo{Category::local, "local", "your own Postfix",
                 "The sending Postfix itself failed (transport, table or service): fix it locally.", true},
    CategoryInfo{Category::unknown, "unknown", "unknown", "Recorded; no guess is made.", false},
};

}  // namespace

std::span<const CategoryInfo> all_categories() noexcept {
    return kCategories;
}

const CategoryInfo& info(Category c) noexcept {
    for (const auto& entry : kCategories)
        if (entry.category == c) return entry;
    return kCategories.back();
}

std::string_view to_string(Category c) noexcept {
    return info(c).name;
}

std::optional<Category> category_from_string(std::string_view name) noexcept {
    for (const auto& entry : kCategories)
        if (entry.name == name) return entry.category;
    return std::nullopt;
}

}  // namespace retryguard
