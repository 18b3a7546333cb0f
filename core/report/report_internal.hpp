// report_internal.hpp -- helpers shared by the files of core/report (one file
// per report: report_status.cpp, report_destinations.cpp, report_escalations.cpp,
// report_explain.cpp, report_queue.cpp; the incidents in incidents.cpp, the HTML
// page in html_report.cpp; the helpers themselves in report.cpp), so each reads
// the ledger and the engine's saved state and renders cells the same way. Not part of the public API: nothing
// outside core/report includes it but the reports' tests.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "retryguard/config/config.hpp"
#include "retryguard/ledger/ledger.hpp"
#include "retryguard/report/report.hpp"
#include "retryguard/time.hpp"

namespace retryguard::report::detail {

nlohmann::json time_or_null(const std::optional<TimePoint>& t);
std::optional<TimePoint> json_time(const nlohmann::json& j);
// The integer at `key`, or nullopt when it is missing or not an integer.
std::optional<std::int64_t> int_at(const nlohmann::json& j, const char* key);
// The string at `key`, or `fallback` when it is missing, not a string or empty.
std::string str_or(const nlohmann::json& j, std::string_view key, std::string_view fallback = "-");
// 23481 -> "23,481"
std::string grouped(std::size_t n);
// The first category of the set that is not unknown ("" for an empty set).
std::string primary_category(CategorySet set);

// The engine's saved state as JSON (nullopt when none is saved or it cannot be read).
std::optional<nlohmann::json> saved_engine(LedgerReports& ledger);
// The same from saved bytes in the CBOR form; nullopt otherwise.
std::optional<nlohmann::json> saved_engine_reported(std::string_view saved);
// The ledger's row of the sending Postfix's own failures (kLocalDestination):
// the ledger keeps no deliveries under that name, so its episode comes from
// the engine's open one (or, once that ended, only the last failure's time).
void fill_local_destination(DestinationInfo& row, const std::optional<nlohmann::json>& engine);
// The open local-outbound incident of a saved engine state as the status
// document shows it ({category, started, destinations[], recovered, deferrals,
// absorbed}), or null when none is open.
nlohmann::json open_incident(const nlohmann::json& engine);

// A time cell relative to now, "-" for null.
std::string when_or_dash(const nlohmann::json& j, TimePoint now);
// text in the ANSI colour `code` when the output is coloured.
std::string colour(const RenderOptions& ro, std::string_view code, std::string_view text);
// An episode state, coloured by how urgent it is.
std::string state_colour(const RenderOptions& ro, const std::string& state);
// Bounded: replies are logged text; a table cell is not the place for a whole
// paragraph. Counted in characters and never cut inside one.
std::string clip(std::string_view s, std::size_t n);
// "domain:NAME" / "mx:NAME", the key a flag is stored under.
std::string flag_key_for(DestinationKind kind, std::string_view name);
nlohmann::json categories_json(CategorySet set);
// Rows offset.. (at most limit of them) into doc[key], with what a reader
// needs to know what was left out.
void put_page(nlohmann::json& doc, const char* key, nlohmann::json rows, const Page& p);
// The rows [first, end) of `total` that page `p` shows (first == end: none).
std::pair<std::size_t, std::size_t> page_range(std::size_t total, const Page& p);
// put_page for a caller that made only the rows page_range gave (`shown`) of `total`.
void put_page_rows(nlohmann::json& doc, const char* key, nlohmann::json shown, std::size_t total,
                   const Page& p);

// The active flags by destination key, and the one (if any) of a destination.
Result<std::map<std::string, Flag>> active_flags_by_key(LedgerReports& ledger, TimePoint now);
const Flag* find_flag(const std::map<std::string, Flag>& flags, DestinationKind kind,
                      const std::string& name);
// One destination row as the listings and the status show it.
nlohmann::json destination_json(const DestinationInfo& d, const Flag* flag);

// A destination of a listing and its active flag (null when none).
struct Listed {
    const DestinationInfo* d = nullptr;
    const Flag* flag = nullptr;
};
// Whether `a` comes before `b` in the `destinations` listing sorted by
// `sort`. A strict total order on a listing: it ends with kind and name.
bool listed_before(const Listed& a, const Listed& b, DestinationSort sort);

// One destination with the episodes it had in a period: the ended ones whose
// first deferral lies in it (Ledger::episode_history) and the open one.
struct DestinationEpisodes {
    DestinationInfo destination;
    std::vector<Episode> episodes;  // oldest first; the open one (ended empty) last
};
// Every destination of the ledger that had an episode in [from, to].
Result<std::vector<DestinationEpisodes>> read_period(LedgerReports& ledger, TimePoint from, TimePoint to);

// destinations() with the engine's saved state the caller already read (null:
// read it when the listing needs it).
Result<nlohmann::json> destinations_with(LedgerReports& ledger, const DestinationQuery& query, TimePoint now,
                                         const std::optional<nlohmann::json>* engine);
// report::escalations with the engine's saved state already read
// (saved_engine), for a report that needs it for more than that.
Result<nlohmann::json> escalations_with(LedgerReports& ledger, const config::Config& config, TimePoint now,
                                        const EscalationQuery& query,
                                        const std::optional<nlohmann::json>& engine);

// The incidents of [from, now] (see report::incidents) from episodes already
// read, the engine's saved state and its count of incidents ever opened.
nlohmann::json incidents_from(const std::vector<DestinationEpisodes>& period, const config::Config& config,
                              const std::optional<nlohmann::json>& engine, std::int64_t opened_ever,
                              TimePoint from, TimePoint now);

}  // namespace retryguard::report::detail
