// report_internal.hpp -- helpers shared by the files of core/report (the
// listings in report.cpp, the incidents in incidents.cpp, the HTML page in
// html_report.cpp), so each reads the ledger and the engine's saved state the
// same way. Not part of the public API: nothing outside core/report includes it.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "retryguard/config.hpp"
#include "retryguard/ledger.hpp"
#include "retryguard/time.hpp"

namespace retryguard::report::detail {

nlohmann::json time_or_null(const std::optional<TimePoint>& t);
std::optional<TimePoint> json_time(const nlohmann::json& j);
// The string at `key`, or `fallback` when it is missing, not a string or empty.
std::string str_or(const nlohmann::json& j, std::string_view key, std::string_view fallback = "-");
// 23481 -> "23,481"
std::string grouped(std::size_t n);
// The first category of the set that is not unknown ("" for an empty set).
std::string primary_category(CategorySet set);

// The engine's saved state as JSON (nullopt when none is saved or it cannot be read).
std::optional<nlohmann::json> saved_engine(LedgerReports& ledger);
// The open local-outbound incident of a saved engine state as the status
// document shows it ({category, started, destinations[], recovered, deferrals,
// absorbed}), or null when none is open.
nlohmann::json open_incident(const nlohmann::json& engine);

// One destination with the episodes it had in a period: the ended ones whose
// first deferral lies in it (Ledger::episode_history) and the open one.
struct DestinationEpisodes {
    DestinationInfo destination;
    std::vector<Episode> episodes;  // oldest first; the open one (ended empty) last
};
// Every destination of the ledger that had an episode in [from, to].
Result<std::vector<DestinationEpisodes>> read_period(LedgerReports& ledger, TimePoint from, TimePoint to);

// The incidents of [from, now] (see report::incidents) from episodes already
// read, the engine's saved state and its count of incidents ever opened.
nlohmann::json incidents_from(const std::vector<DestinationEpisodes>& period, const config::Config& config,
                              const std::optional<nlohmann::json>& engine, std::int64_t opened_ever,
                              TimePoint from, TimePoint now);

}  // namespace retryguard::report::detail
