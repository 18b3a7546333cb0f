// report.hpp -- what the reporting commands (status, destinations, explain,
// escalations, flags, prune) show, built from the ledger and the config as
// JSON documents with stable keys, and rendered for people from those same
// documents so the two outputs can never disagree. The documents hold outside
// text (replies, addresses, Message-IDs) as stored; the render_* functions,
// the escalation note and the HTML page show it only through the renderers of
// core/text (include/retryguard/text/text.hpp). Read-only except prune and
// flag clearing, which the caller asks for explicitly; nothing here decides
// policy (that is the rules engine's job).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "retryguard/classify/classifier.hpp"
#include "retryguard/config/config.hpp"
#include "retryguard/ledger/ledger.hpp"
#include "retryguard/result.hpp"
#include "retryguard/time.hpp"

namespace retryguard::report {

// ---------------------------------------------------------------------------
// Formatting helpers for people.

// "2026-11-29 23:05:58 UTC" in the process's local time zone (TZ).
std::string format_local(TimePoint t);
// "3 h ago", "in 2 d", "just now": one unit, rounded down.
std::string format_relative(TimePoint t, TimePoint now);
// "2026-11-29 23:05:58 UTC (3 h ago)"
std::string format_when(TimePoint t, TimePoint now);
// "1 d 4 h", "35 min", "12 s"
std::string format_duration_short(Duration d);

// Reads "2026-11-29T23:05:58Z" / "...+01:00" / with fractions (the hidden --now
// of the commands): the core's one reader (time.hpp).
using retryguard::parse_rfc3339;

// A left-aligned text table; every column as wide as its widest cell.
class Table {
  public:
    explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
    void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
    std::size_t size() const noexcept { return rows_.size(); }
    // `bold_header`: ANSI bold on the header line (only for terminals).
    std::string render(bool bold_header = false) const;

  private:
    std::vector<std::string> headers_;
    std::vector<std::vector<std::string>> rows_;
};

struct RenderOptions {
    TimePoint now{};
    bool colour = false;  // ANSI colours: only when stdout is a terminal
};

// ---------------------------------------------------------------------------
// Destinations.

// escalate > watch > noted > anything else: lower rank is worse.
int state_rank(std::string_view state) noexcept;

// The ledger's destination name for a kind: "mx" on the command line and in
// JSON, DestinationKind::relay in the ledger.
std::string_view kind_name(DestinationKind kind) noexcept;

// Which rows of a listing to show: every row unless the caller asks for a
// page. A listing that leaves rows out always says so: its document carries
// "total" (rows that matched), "offset" and "limit" (null: no limit), and the
// rendered text ends with "showing 1-100 of 23,481; --offset 100 for more".
struct Page {
    std::size_t offset = 0;
    std::optional<std::size_t> limit;
};

// The listing's order. worst: escalated, then flagged, then watch, then the
// rest; within each, the oldest open episode first (none last), then by name.
// name: kind then name. age: oldest open episode first. deferrals: most
// deferrals in the open episode first.
enum class DestinationSort { worst, name, age, deferrals };
std::optional<DestinationSort> destination_sort_from_string(std::string_view name) noexcept;
std::string_view to_string(DestinationSort sort) noexcept;

struct DestinationQuery {
    std::optional<std::string> state;
    std::optional<Category> category;
    std::optional<DestinationKind> kind;
    DestinationSort sort = DestinationSort::worst;
    Page page;
};

// {"now", "total", "offset", "limit", "sort", "destinations": [{kind, name,
//   state, state_changed, categories[], category, first_deferral,
//   last_deferral, attempts, messages_pending, last_reply, last_relay,
//   last_success, flagged, flag_reason}]} in the query's order.
Result<nlohmann::json> destinations(LedgerReports& ledger, const DestinationQuery& query, TimePoint now);
std::string render_destinations(const nlohmann::json& doc, const RenderOptions& ro);

// The line a paged listing ends with ("" when every row is shown): what was
// shown of how many, and the --offset that shows the next page. `key` names
// the document's array of rows.
std::string page_footer(const nlohmann::json& doc, std::string_view key);

// ---------------------------------------------------------------------------
// Status: one screen about everything.
struct StatusInputs {
    const config::Config* config = nullptr;
    std::string config_path;  // "" for built-in defaults
};
Result<nlohmann::json> status(LedgerReports& ledger, const StatusInputs& in, TimePoint now);
std::string render_status(const nlohmann::json& doc, const RenderOptions& ro);

// ---------------------------------------------------------------------------
// Escalations: destinations in state escalate, each with a note ready to send
// to the receiving side's postmaster.
// Open escalations come first (worst first), each with "status": "open";
// with `since`, escalations that closed (the destination recovered) within that
// long before now follow, newest first, with "status": "closed". Every entry
// has "opened" and "closed" (null while open), read from the rules engine's
// saved state (its bounded episode history per destination); "opened" is null
// when that state does not know it.
struct EscalationQuery {
    std::optional<Duration> since;
    Page page;
};
Result<nlohmann::json> escalations(LedgerReports& ledger, const config::Config& config, TimePoint now,
                                   const EscalationQuery& query = {});
std::string render_escalations(const nlohmann::json& doc, const RenderOptions& ro);
// The note itself (plain text, times in UTC so it reads the same anywhere).
std::string escalation_note(const nlohmann::json& escalation);

// ---------------------------------------------------------------------------
// Explain: one message's timeline, found by queue id, Message-ID or address.
struct ExplainOptions {
    Duration queue_lifetime = std::chrono::hours(24 * 5);  // Postfix maximal_queue_lifetime
    Duration retry_estimate = std::chrono::minutes(
        30);  // assumed gap to the next retry when unknown (Postfix: between minimal and maximal backoff)
};
Result<nlohmann::json> explain(LedgerReports& ledger, const Classifier& classifier,
                               const config::Config& config, std::string_view query, TimePoint now,
                               const ExplainOptions& options = {});
std::string render_explain(const nlohmann::json& doc, const RenderOptions& ro);

// ---------------------------------------------------------------------------
// Queue: `postqueue -j` output (one JSON object per line) by destination domain
// and age bucket like qshape, each recipient's delay_reason classified, joined
// with the ledger's ladder state of the domain. Bounded: at most kMaxQueueLines
// lines of at most kMaxQueueLineBytes each; bad lines are counted, not fatal.
inline constexpr std::size_t kMaxQueueLines = 1000000;
inline constexpr std::size_t kMaxQueueLineBytes = 1 << 20;
Result<nlohmann::json> queue(std::string_view postqueue_json, const Classifier& classifier,
                             LedgerReports* ledger, TimePoint now, const Page& page = {});
std::string render_queue(const nlohmann::json& doc, const RenderOptions& ro);

// ---------------------------------------------------------------------------
// Local-outbound incidents of a period: times when deferrals of one class
// spread over many unrelated destinations at once, so the sending side's own
// path was the suspect (docs/guidance.md). The open one comes from the rules
// engine's saved state, exactly as `status` shows it (its destinations are
// the engine's spread keys). Ended ones are not kept by the engine: they are
// rebuilt from the ledger's episodes with the engine's spread rule
// (config spread.*: so many destinations opening an episode of the class
// within the window; ended when half that many delivered again or none was
// hit for the quiet period), never more of them than the engine counted
// (verdict local_outbound_suspected). The mail log's local_outbound_* verdict
// lines stay the authority on their exact times.
// {"now", "from", "incidents": [{category, started, ended (null: open),
//   destinations (count), destination_names[], deferrals, absorbed (null when
//   rebuilt), source ("engine" | "ledger")}]} oldest first.
Result<nlohmann::json> incidents(LedgerReports& ledger, const config::Config& config, TimePoint now,
                                 Duration since);

// ---------------------------------------------------------------------------
// The period report: what went wrong in the last `days` and what to do about
// it, as one document the HTML page is rendered from. Built from the
// documents above (escalations with their notes, open and closed in the
// period; flags; incidents; the destinations listing's worst-first order)
// and the ledger's episodes of the period:
//   "summary": deferrals and episodes by category, destinations deferred and
//     delivered to, messages in the ledger;
//   "escalations" (an MX host's escalation over the same deferrals as its
//     domain's is listed in the domain's "also_mx"), "flags" {set, expired,
//     cleared, active}, "incidents";
//   "timelines": one row per destination worth a look, worst first
//     (escalated, flagged, watch, escalation closed in the period, open
//     episode, the rest; the listing's order, then the longest episode), at
//     most `max_rows` drawn and the rest counted ("not_drawn"); an MX host
//     that answered for one domain only is drawn with it ("via");
//   "folded": what is not drawn because it needs nothing: destinations whose
//     episodes were only greylisting that ended in a delivery, single
//     deferrals followed by a delivery, and episodes of an incident's class
//     inside that incident (shown once, as the incident).
inline constexpr std::size_t kReportTimelineRows = 40;
Result<nlohmann::json> period_report(LedgerReports& ledger, const config::Config& config, TimePoint now,
                                     int days = 30, std::size_t max_rows = kReportTimelineRows);

// One self-contained HTML page of the period report (no script, nothing loaded
// from outside; inline CSS and SVG that fit a phone's width), in this order:
// summary with what to do, deferrals by category, escalations with their
// notes, flags, incidents, timelines on one date axis, categories over time.
std::string render_html_report(const nlohmann::json& period);
Result<std::string> html_report(LedgerReports& ledger, const config::Config& config, TimePoint now,
                                int days = 30);

// ---------------------------------------------------------------------------
// Flags and pruning.
Result<nlohmann::json> flags(LedgerReports& ledger, TimePoint now, bool include_inactive,
                             const Page& page = {});
std::string render_flags(const nlohmann::json& doc, const RenderOptions& ro);

RetentionPolicy retention_from(const config::Config& config);
nlohmann::json prune_to_json(const PruneResult& result);

}  // namespace retryguard::report
