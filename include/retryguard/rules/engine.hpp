// engine.hpp -- the guidance (docs/guidance.md) as behaviour: per-destination
// deferral episodes and the escalation ladder, repeat-offender flags, the
// local-versus-remote spread check, retry-spacing and stalled-retry reports.
//
// The engine is a pure function of the classified events it is fed, in log
// order: it never reads the wall clock, so importing last month's log and
// following it live give the same verdicts. Its state can be saved and loaded
// (CBOR bytes) so a restarted daemon resumes exactly where it stopped. It is not
// thread-safe; the owner serialises calls and publishes what readers need.
//
// It never suppresses an address and never emits a reputation signal for
// system conditions (GUIDANCE 3.6): no verdict of that kind exists here.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "retryguard/category.hpp"
#include "retryguard/log/events.hpp"
#include "retryguard/result.hpp"
#include "retryguard/rules/verdict.hpp"

namespace retryguard {

inline constexpr std::size_t kCategoryCount = static_cast<std::size_t>(Category::unknown) + 1;

struct CategoryThresholds {
    int watch_after_deferrals = 3;           // deferrals in one episode before `watch`
    std::optional<Duration> escalate_after;  // episode age before `escalate`; none: never
};

// Settings that a per-destination rule may override.
struct RuleSettings {
    std::array<CategoryThresholds, kCategoryCount> categories = default_categories();
    Duration min_retry_interval = std::chrono::minutes(30);  // RFC 5321 4.5.4.1
    Duration greylist_min_retry = std::chrono::minutes(15);
    Duration stalled_after = std::chrono::hours(6);          // deferred recipient with no attempt since
    int repeat_episodes = 3;                                 // receiver-config episodes ...
    Duration repeat_period = std::chrono::days(30);          // ... within this period flag the destination
    int repeat_deferrals = 100;                              // or this many receiver-config deferrals ...
    Duration repeat_deferral_window = std::chrono::days(7);  // ... within this window
    Duration flag_ttl = std::chrono::days(30);
    bool flags_enabled = true;
    std::vector<Category> flag_categories = {Category::receiver_config};  // episodes that count
    bool honor_retry_after_hint = true;  // "try again in 300 seconds" raises the minimum
    std::string contact;                 // carried by escalation reports
    std::string rule;                    // name of the rule these settings came from ("global" by default)

    static std::array<CategoryThresholds, kCategoryCount> default_categories();
    const CategoryThresholds& thresholds(Category c) const { return categories[static_cast<size_t>(c)]; }
    CategoryThresholds& thresholds(Category c) { return categories[static_cast<size_t>(c)]; }
};

struct EngineSettings {
    RuleSettings defaults;
    // Per-destination overrides: return the settings for (domain, mx host), or
    // nullptr for the defaults. Called with an empty mx for MX destinations' own
    // lookups. Must be deterministic.
    std::function<const RuleSettings*(std::string_view domain, std::string_view mx)> resolve;
    // The longest repeat_period or repeat_deferral_window of the settings
    // `resolve` can return (the defaults' are read from `defaults`): how long
    // a quiet destination's past can still count towards a flag, after which
    // the engine forgets it.
    Duration longest_rule_memory{0};
    Duration spread_window = std::chrono::minutes(10);
    int spread_min_destinations = 8;  // distinct unrelated destinations (by MX) in the window
    // An incident ends when no deferral of its class was seen for this long
    // (longer than Postfix's maximal_backoff_time, so retry gaps do not end it),
    // or when half the threshold of its destinations delivered again.
    Duration incident_quiet_after = std::chrono::hours(2);
    bool spread_enabled = true;
    std::vector<Category> spread_categories = {
        Category::receiver_config, Category::receiver_system, Category::network, Category::routing,
        Category::policy,          Category::rate_limited,    Category::local,   Category::unknown};
    Duration evaluate_every = std::chrono::minutes(1);  // event time between time-based checks
    std::size_t max_messages_per_episode = 1000;
    std::size_t max_episode_history = 64;
};

enum class Ladder { none, noted, watch, escalate, recovered };
std::string_view to_string(Ladder l) noexcept;

struct EpisodeState {
    TimePoint first_deferral{};
    TimePoint last_deferral{};
    TimePoint ended{};
    std::int64_t attempts = 0;
    std::array<std::int64_t, kCategoryCount> by_category{};
    std::set<std::string> messages;  // queue ids, bounded
    std::string last_reply;          // literal reply text as logged
    std::string last_relay;
    Ladder ladder = Ladder::none;
    Ladder peak = Ladder::none;  // highest state reached: blips (noted only) never count towards a flag
    TimePoint escalated_at{};
    bool local_suspect = false;  // overlapped a local-outbound incident of its class

    Category dominant() const;
};

struct DestinationState {
    std::string name;  // "example.com" or "mx:mx1.example.net"
    bool is_mx = false;
    std::optional<EpisodeState> open;
    std::vector<EpisodeState> history;        // closed episodes, newest last, bounded
    std::vector<TimePoint> config_deferrals;  // flag-category deferral times within the window
    TimePoint last_success{};
    std::optional<TimePoint> flagged_at;
    TimePoint flag_expires{};
    std::string flag_reason;
};

class Engine {
  public:
    explicit Engine(EngineSettings settings = {});

    // Feed one event with its classification (Category::unknown for events
    // that carry no reply). Returns the verdicts it caused, in order.
    std::vector<Verdict> on_event(const Event& event, Category category);

    // Time-based checks (escalation by age, stalled recipients, flag expiry,
    // incident end) at event time `now`. on_event calls it as time advances;
    // call it directly at the end of an import or on a quiet live log.
    std::vector<Verdict> advance(TimePoint now);

    // Replace the settings (configuration reload); the state is kept.
    void set_settings(EngineSettings settings);

    // Clear a repeat-offender flag by command.
    std::optional<Verdict> clear_flag(std::string_view destination, TimePoint now);

    const DestinationState* destination(std::string_view name) const;
    const std::map<std::string, DestinationState, std::less<>>& destinations() const { return dests_; }
    // Calls f(const DestinationState&) for every destination with an open
    // episode or a flag, in name order, and for those touched since the last
    // advance (the set advance() walks). Its size follows the open episodes
    // and flags, not every destination ever tracked: what runs once per
    // batch (the policy snapshot, the metrics, probes) walks this instead.
    template <class F>
    void for_each_active(F&& f) const {
        for (const auto& name : timed_)
            if (auto it = dests_.find(name); it != dests_.end()) f(it->second);
    }
    bool local_incident_open() const { return incident_.has_value(); }
    // The open incident's class and when it opened (Category::unknown and the
    // epoch when none is open).
    Category local_incident_category() const { return incident_ ? incident_->category : Category::unknown; }
    TimePoint local_incident_since() const { return incident_ ? incident_->started : TimePoint{}; }
    // Deferrals the open incident owns (0 when none is open).
    std::int64_t incident_deferrals() const { return incident_ ? incident_->deferrals : 0; }
    TimePoint now() const { return now_; }

    // The state as bytes (CBOR, lossless for any reply text); load_state also
    // reads the JSON text older versions saved. A failed load leaves the engine as it was.
    std::string save_state() const;
    Status load_state(std::string_view bytes);

    // Settings for a destination (the resolve hook or the defaults).
    const RuleSettings& settings_for(std::string_view domain, std::string_view mx) const;

  private:
    struct RecipientState {
        TimePoint last_attempt{};
        Category last_category = Category::unknown;
        Duration retry_after{0};  // the receiver's "try again in N seconds", when honoured
        std::string domain, mx;
        bool pending = true;
        bool held = false;
        bool reported_too_soon = false;
        bool reported_stalled = false;
    };
    struct Incident {
        Category category;
        TimePoint started{};
        std::set<std::string> destinations;  // spread keys ("mx:host", or the domain without an MX)
        TimePoint last_hit{};
        std::set<std::string> recovered;
        std::int64_t deferrals = 0;  // deferrals of its class it owns, absorbed ones included
        std::int64_t absorbed = 0;   // destinations whose episode it took back when it opened
    };
    std::vector<Verdict> absorb_into_incident(TimePoint horizon, Category c);

    void on_delivery(const Event& e, Category c, std::vector<Verdict>& out);
    void on_deferral(const Event& e, Category c, std::string_view dest, bool is_mx, std::string_view domain,
                     std::string_view mx, std::vector<Verdict>& out);
    void on_success(const Event& e, std::string_view dest, bool is_mx, std::vector<Verdict>& out);
    Verdict recovered(DestinationState& d, TimePoint t, std::string_view qid);
    void check_spread(const Event& e, Category c, std::string_view spread_key, std::vector<Verdict>& out);
    void maybe_escalate(DestinationState& d, const RuleSettings& rs, TimePoint t, std::string_view qid,
                        std::vector<Verdict>& out);
    void check_flag(DestinationState& d, const RuleSettings& rs, TimePoint now, std::string_view qid,
                    std::vector<Verdict>& out);
    void end_incident(TimePoint now, std::string_view why, std::vector<Verdict>& out);
    bool idle(const DestinationState& d, TimePoint horizon) const;
    void forget_idle(TimePoint now);
    Verdict destination_verdict(const DestinationState& d, std::string name, TimePoint t,
                                std::string_view qid) const;
    DestinationState& dest(std::string_view name, bool is_mx);

    EngineSettings settings_;
    std::map<std::string, DestinationState, std::less<>> dests_;
    // The destinations advance() must look at: every one handed out by dest()
    // since the last advance, and those still with an open episode or a flag.
    // advance() drops the others, so its cost follows the open episodes and
    // flags, not every destination ever tracked (a month's import tracks tens
    // of thousands and advances once a minute of log time). Same order as dests_.
    std::set<std::string, std::less<>> timed_;
    std::map<std::string, RecipientState, std::less<>> recipients_;  // "QID\x1frecipient"
    struct SpreadHit {
        TimePoint time;
        Category category;
        std::string key;
    };
    std::vector<SpreadHit> spread_;  // deferrals within the spread window, oldest first
    std::optional<Incident> incident_;
    TimePoint now_{};
    TimePoint last_evaluated_{};
};

// The destination that local failures of the sending Postfix are filed under:
// they are nobody else's outage, but they climb a ladder of their own.
inline constexpr std::string_view kLocalDestination = "local:postfix";

// Which destination an event concerns: the recipient's domain (lower case).
std::string recipient_domain(std::string_view recipient);
// The MX host that answered, or "" (relay=none, local transports).
std::string answering_host(const Event& e);

// The class a flag's reason names ("3 receiver-config episodes within 2592000
// s", as the engine writes it); unknown when flags.categories lists several
// ("flag-category") or the reason says none.
Category flag_reason_category(std::string_view reason) noexcept;

}  // namespace retryguard
