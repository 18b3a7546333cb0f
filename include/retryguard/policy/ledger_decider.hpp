// ledger_decider.hpp -- the policy decision from the real state: what the
// ingest thread last published about each destination (ladder state, flag,
// category, since, last reply) and the configured action for it.
//
// The ingest thread owns the engine and the ledger; after each batch it builds
// an immutable PolicySnapshot and publishes it here with one atomic store. The
// request path only loads that pointer and the configuration snapshot: it never
// touches the ledger, never takes a lock and never blocks.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "retryguard/category.hpp"
#include "retryguard/config/config.hpp"
#include "retryguard/ledger/ledger.hpp"
#include "retryguard/policy/policy.hpp"
#include "retryguard/rules/engine.hpp"
#include "retryguard/time.hpp"

namespace retryguard {

// What the policy path needs to know about one destination (a recipient domain).
struct DestinationView {
    Ladder ladder = Ladder::none;
    bool flagged = false;
    Category category = Category::unknown;
    TimePoint since{};       // episode start, or when the flag was set
    std::string last_reply;  // literal reply text as logged
    std::string relay;       // MX host that answered last
};

struct PolicySnapshot {
    struct Hash {
        using is_transparent = void;
        std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
    };
    std::unordered_map<std::string, DestinationView, Hash, std::equal_to<>> by_domain;  // lower case
    bool local_incident = false;
    TimePoint local_incident_since{};
    Category local_incident_category = Category::local;  // the class of deferrals that opened it
    std::string origin;                                  // "engine" or "ledger flags", for logs
};

// Destinations the engine tracks that deserve an answer (watch, escalate, or
// flagged); MX and local pseudo-destinations are left out.
std::shared_ptr<PolicySnapshot> snapshot_from_engine(const Engine& engine);
// Active flags only (a second daemon without the engine in memory).
std::shared_ptr<const PolicySnapshot> snapshot_from_flags(const std::vector<Flag>& flags);

// Fills {domain} {mx} {category} {since} {reply} {contact} in `text`. Values
// are made safe for one Postfix reply line (no control bytes, bounded).
std::string fill_action_placeholders(std::string_view text, std::string_view domain,
                                     const DestinationView& view, std::string_view contact);

class LedgerDecider final : public PolicyDecider {
  public:
    // Writes one line per dry-run or fail-open answer (may be empty).
    using Note = std::function<void(std::string_view)>;

    explicit LedgerDecider(std::shared_ptr<const config::ConfigHolder> config, Note note = {});

    Decision decide(const PolicyRequest& request, PolicyDeadline deadline) override;
    bool may_block() const noexcept override { return false; }
    // The configuration is reloaded by its holder and the state by the ingest
    // thread; nothing of its own to re-read.
    Status reload() override { return {}; }
    std::string describe() const override;

    void publish(std::shared_ptr<const PolicySnapshot> snapshot) { snapshot_.store(std::move(snapshot)); }
    std::shared_ptr<const PolicySnapshot> snapshot() const { return snapshot_.load(); }

    std::uint64_t fail_open() const noexcept { return fail_open_.load(std::memory_order_relaxed); }
    std::uint64_t dry_run_answers() const noexcept { return dry_run_.load(std::memory_order_relaxed); }

  private:
    Decision decide_unchecked(const PolicyRequest& request);

    std::shared_ptr<const config::ConfigHolder> config_;
    Note note_;
    std::atomic<std::shared_ptr<const PolicySnapshot>> snapshot_;
    std::atomic<std::uint64_t> fail_open_{0};
    std::atomic<std::uint64_t> dry_run_{0};
};

}  // namespace retryguard
