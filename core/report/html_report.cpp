// html_report.cpp -- the period report: what went wrong in the last days and
// what to do about it, as a document (period_report) and as one self-contained
// HTML page (render_html_report). The document is assembled from the other
// reports (escalations with their notes, the destinations listing's order,
// incidents, flags) and the ledger's episodes of the period; it adds only the
// folding of what needs nothing (greylisting that delivered, single deferrals,
// an incident's episodes) and the order of the timelines. The page holds no
// script and loads nothing: inline CSS and SVG, readable at a phone's width.
// Outside text reaches the page only through text::html. The page's own markup
// avoids <b> and <script>, so a raw one in the page can only be a rendering bug
// (the hostile-input test looks for them).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <ctime>
#include <limits>
#include <map>
#include <set>

#include "report/report_internal.hpp"
#include "retryguard/report/report.hpp"
#include "retryguard/text/text.hpp"

namespace retryguard::report {

using detail::json_time;
using detail::str_or;
using detail::time_or_null;
using nlohmann::json;

namespace {

std::string key_of(std::string_view kind, std::string_view name) {
    return fmt::format("{}\t{}", kind, name);
}

// "mx1.example.net[192.0.2.1]:25" -> "mx1.example.net"
std::string relay_host(std::string_view relay) {
    return std::string(relay.substr(0, relay.find('[')));
}

constexpr CategorySet kUnknownBit = category_bit(Category::unknown);

// Only greylisting (the odd unclassified deferral beside it does not count).
bool greylisting_only(const Episode& e) {
    return (e.categories & ~kUnknownBit) == category_bit(Category::greylisting);
}

struct IncidentSpan {
    Category category;
    TimePoint from, to;
};

bool inside_incident(const Episode& e, const std::vector<IncidentSpan>& spans) {
    for (const auto& s : spans)
        if ((e.categories & ~kUnknownBit) == category_bit(s.category) && e.first_deferral >= s.from &&
            e.first_deferral <= s.to)
            return true;
    return false;
}

json episode_json(const Episode& e) {
    return json{{"first_deferral", format_rfc3339(e.first_deferral)},
                {"last_deferral", format_rfc3339(e.last_deferral)},
                {"ended", time_or_null(e.ended)},
                {"category", detail::primary_category(e.categories)},
                {"attempts", e.attempts},
                {"messages", e.messages},
                {"last_reply", e.last_reply}};
}

// Why a row is where it is, worst first.
enum class Rank { escalated, flagged, watch, escalation_closed, open_episode, ended };
constexpr const char* kRankNames[] = {"escalated",         "flagged",      "watch",
                                      "escalation closed", "open episode", "ended"};

}  // namespace

Result<json> period_report(LedgerReports& ledger, const config::Config& config, TimePoint now, int days,
                           std::size_t max_rows) {
    const Duration span = std::chrono::hours(24 * std::max(days, 1));
    const TimePoint from = now - span;
    auto period = detail::read_period(ledger, from, now);
    if (!period) return period.error();

    // The order of the listing the CLI shows (`destinations`, worst first)
    // and each row's state and flag, for the destinations of the period. The
    // listing's order is total, so among them it is the whole listing's,
    // without listing every destination the ledger knows.
    auto active_flags = detail::active_flags_by_key(ledger, now);
    if (!active_flags) return active_flags.error();
    std::map<std::string, std::size_t> listed_at;
    std::map<std::string, detail::Listed> listed;
    {
        std::vector<detail::Listed> order;
        order.reserve(period->size());
        for (const auto& de : *period)
            order.push_back({&de.destination,
                             detail::find_flag(*active_flags, de.destination.kind, de.destination.name)});
        std::sort(order.begin(), order.end(), [](const detail::Listed& a, const detail::Listed& b) {
            return detail::listed_before(a, b, DestinationSort::worst);
        });
        for (std::size_t i = 0; i < order.size(); ++i) {
            const std::string k = key_of(kind_name(order[i].d->kind), order[i].d->name);
            listed_at[k] = i;
            listed[k] = order[i];
        }
    }
    // As `destinations --kind domain` would count its rows delivered to since `from`.
    auto delivered = ledger.count_destinations_delivered(DestinationKind::domain, from);
    if (!delivered) return delivered.error();
    const auto delivered_to = static_cast<std::size_t>(*delivered);
    // A row's state and flag as the listing shows them ("none", false when not listed).
    auto listed_state = [&](const std::string& k) {
        auto it = listed.find(k);
        return it == listed.end() || it->second.d->state.empty() ? std::string("none") : it->second.d->state;
    };
    auto listed_flagged = [&](const std::string& k) {
        auto it = listed.find(k);
        return it != listed.end() && it->second.flag != nullptr;
    };

    // The engine's saved state, read once: escalations and incidents both need it.
    const std::optional<json> engine = detail::saved_engine(ledger);

    // Escalations open now and closed in the period, each with its note.
    EscalationQuery eq;
    eq.since = span;
    auto esc = detail::escalations_with(ledger, config, now, eq, engine);
    if (!esc) return esc.error();
    std::set<std::string> closed_escalations;
    for (auto& e : esc->at("escalations")) {
        if (!e.contains("note")) e["note"] = escalation_note(e);
        if (e.value("status", "open") == "closed")
            closed_escalations.insert(
                key_of(e.at("kind").get<std::string>(), e.at("name").get<std::string>()));
    }
    // An MX host's escalation over the same deferrals as its domain's (same
    // times, the domain's last reply from that host) is shown with the domain.
    json shown_escalations = json::array();
    std::vector<bool> twin(esc->at("escalations").size(), false);
    {
        auto& all = esc->at("escalations");
        for (auto& d : all) d["also_mx"] = json::array();
        for (std::size_t m = 0; m < all.size(); ++m) {
            if (all[m].at("kind") != "mx") continue;
            for (auto& d : all)
                if (d.at("kind") == "domain" && d.value("status", "") == all[m].value("status", "") &&
                    d.at("opened") == all[m].at("opened") && d.at("closed") == all[m].at("closed") &&
                    relay_host(str_or(d, "last_relay", "")) == all[m].at("name").get<std::string>()) {
                    d["also_mx"].push_back(all[m].at("name"));
                    twin[m] = true;
                    break;
                }
        }
        for (std::size_t k = 0; k < all.size(); ++k)
            if (!twin[k]) shown_escalations.push_back(std::move(all[k]));
    }

    // Flags set, expired and cleared in the period.
    auto all_flags = ledger.list_flags(std::nullopt, now, true);
    if (!all_flags) return all_flags.error();
    json flags_set = json::array(), flags_expired = json::array(), flags_cleared = json::array();
    std::size_t flags_active = 0;
    for (const auto& f : *all_flags) {
        json j{{"destination", f.destination},
               {"reason", f.reason},
               {"set_at", format_rfc3339(f.set_at)},
               {"expires_at", time_or_null(f.expires_at)},
               {"cleared_at", time_or_null(f.cleared_at)}};
        const bool in = f.set_at >= from && f.set_at <= now;
        const bool expired = f.expires_at && *f.expires_at >= from && *f.expires_at <= now &&
                             (!f.cleared_at || *f.cleared_at > *f.expires_at);
        const bool cleared = f.cleared_at && *f.cleared_at >= from && *f.cleared_at <= now;
        if (!f.cleared_at && (!f.expires_at || *f.expires_at > now)) ++flags_active;
        if (in) flags_set.push_back(j);
        if (expired) flags_expired.push_back(j);
        if (cleared) flags_cleared.push_back(j);
    }

    // Incidents, as `incidents` shows them.
    auto counts = ledger.verdict_counts();
    if (!counts) return counts.error();
    const auto opened_it = counts->find("local_outbound_suspected");
    json incidents = detail::incidents_from(*period, config, engine,
                                            opened_it == counts->end() ? 0 : opened_it->second, from, now);
    std::vector<IncidentSpan> spans;
    for (const auto& i : incidents) {
        auto c = category_from_string(i.value("category", ""));
        auto s = json_time(i.at("started"));
        if (!c || !s) continue;
        spans.push_back({*c, *s - config.spread.window, json_time(i.at("ended")).value_or(now)});
    }

    // Deferrals by category: every deferral is in its domain's episode (and in
    // its MX host's), so the domains' episodes count each one once.
    struct CategoryCount {
        std::int64_t deferrals = 0, episodes = 0;
        std::set<std::string> destinations;
    };
    std::map<std::string, CategoryCount> by_category;
    std::int64_t deferrals = 0, episodes = 0;
    std::size_t deferred_domains = 0;
    TimePoint first_activity = now;
    for (const auto& de : *period) {
        for (const auto& e : de.episodes) first_activity = std::min(first_activity, e.first_deferral);
        if (de.destination.kind != DestinationKind::domain) continue;
        ++deferred_domains;
        for (const auto& e : de.episodes) {
            std::string c = detail::primary_category(e.categories);
            auto& cc = by_category[c.empty() ? "unknown" : c];
            cc.deferrals += e.attempts;
            ++cc.episodes;
            cc.destinations.insert(de.destination.name);
            deferrals += e.attempts;
            ++episodes;
        }
    }
    json cats = json::array();
    for (const auto& [name, cc] : by_category) {
        json j{{"category", name},
               {"deferrals", cc.deferrals},
               {"episodes", cc.episodes},
               {"destinations", cc.destinations.size()}};
        auto c = category_from_string(name);
        j["fault"] = c ? std::string(info(*c).fault) : std::string();
        j["guidance"] = c ? std::string(info(*c).guidance) : std::string();
        cats.push_back(std::move(j));
    }
    std::stable_sort(cats.begin(), cats.end(), [](const json& a, const json& b) {
        return a.at("deferrals").get<std::int64_t>() > b.at("deferrals").get<std::int64_t>();
    });

    // Timelines: what is worth a look, worst first; the rest folded into counts.
    struct Row {
        Rank rank;
        std::size_t listed;
        bool open;
        Duration longest{0};
        const detail::DestinationEpisodes* de;
        std::vector<const Episode*> episodes;
        std::vector<std::string> via;  // MX hosts of this domain alone, drawn with it
        bool with_domain = false;      // an MX host drawn with its only domain
    };
    std::vector<Row> rows;
    std::size_t greylisted = 0, single = 0, incident_destinations = 0, incident_episodes = 0;
    const std::size_t unlisted = std::numeric_limits<std::size_t>::max();
    for (const auto& de : *period) {
        const std::string k = key_of(kind_name(de.destination.kind), de.destination.name);
        const std::string state = listed_state(k);
        const bool is_flagged = listed_flagged(k);
        Row r{Rank::ended,
              listed_at.count(k) ? listed_at[k] : unlisted,
              de.destination.episode.has_value(),
              Duration{0},
              &de,
              {},
              {},
              false};
        if (state == "escalate")
            r.rank = Rank::escalated;
        else if (is_flagged)
            r.rank = Rank::flagged;
        else if (state == "watch")
            r.rank = Rank::watch;
        else if (closed_escalations.count(k))
            r.rank = Rank::escalation_closed;
        else if (r.open)
            r.rank = Rank::open_episode;
        std::size_t own = 0;
        for (const auto& e : de.episodes) {
            if (inside_incident(e, spans)) {
                ++incident_episodes;
                continue;
            }
            r.episodes.push_back(&e);
            ++own;
        }
        if (own == 0) {
            if (r.rank >= Rank::open_episode) {
                incident_destinations += de.destination.kind == DestinationKind::domain;
                continue;
            }
            // Escalated or flagged: drawn whole, even what the incident also holds.
            for (const auto& e : de.episodes) r.episodes.push_back(&e);
        }
        if (r.rank == Rank::ended) {
            const bool harmless = std::all_of(r.episodes.begin(), r.episodes.end(), [](const Episode* e) {
                return e->ended && (greylisting_only(*e) || e->attempts == 1);
            });
            if (harmless) {
                // Counted once, as the domain (its MX host saw the same deferrals).
                if (de.destination.kind == DestinationKind::domain) {
                    bool grey = false;
                    for (const Episode* e : r.episodes) {
                        if (greylisting_only(*e))
                            grey = true;
                        else
                            ++single;
                    }
                    greylisted += grey;
                }
                continue;
            }
        }
        for (const Episode* e : r.episodes)
            r.longest = std::max(r.longest, e->ended.value_or(now) - e->first_deferral);
        rows.push_back(std::move(r));
    }
    // An MX host that answered for one domain only tells what its domain's
    // row tells: drawn with the domain, not as a row of its own.
    std::map<std::string, std::set<std::string>> mx_domains;
    for (const auto& de : *period)
        if (de.destination.kind == DestinationKind::domain)
            for (const auto& e : de.episodes)
                if (std::string host = relay_host(e.last_relay); !host.empty() && host != "none")
                    mx_domains[host].insert(de.destination.name);
    {
        std::map<std::string, Row*> domain_rows;
        for (auto& r : rows)
            if (r.de->destination.kind == DestinationKind::domain) domain_rows[r.de->destination.name] = &r;
        for (auto& r : rows) {
            if (r.de->destination.kind != DestinationKind::relay) continue;
            auto m = mx_domains.find(r.de->destination.name);
            if (m == mx_domains.end() || m->second.size() != 1) continue;
            auto d = domain_rows.find(*m->second.begin());
            if (d == domain_rows.end() || d->second->rank > r.rank) continue;
            d->second->via.push_back(r.de->destination.name);
            r.with_domain = true;
        }
    }
    const std::size_t mx_with_domain = static_cast<std::size_t>(
        std::count_if(rows.begin(), rows.end(), [](const Row& r) { return r.with_domain; }));
    std::erase_if(rows, [](const Row& r) { return r.with_domain; });
    std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
        if (a.rank != b.rank) return a.rank < b.rank;
        // The listing's order among open episodes (oldest first), then the longest.
        const std::size_t la = a.open ? a.listed : unlisted, lb = b.open ? b.listed : unlisted;
        if (la != lb) return la < lb;
        if (a.longest != b.longest) return a.longest > b.longest;
        return a.listed < b.listed;
    });
    json drawn = json::array();
    for (std::size_t i = 0; i < rows.size() && i < max_rows; ++i) {
        const Row& r = rows[i];
        const std::string k = key_of(kind_name(r.de->destination.kind), r.de->destination.name);
        json eps = json::array();
        for (const Episode* e : r.episodes) eps.push_back(episode_json(*e));
        drawn.push_back(json{{"kind", std::string(kind_name(r.de->destination.kind))},
                             {"name", r.de->destination.name},
                             {"state", listed_state(k)},
                             {"flagged", listed_flagged(k)},
                             {"why", kRankNames[static_cast<int>(r.rank)]},
                             {"via", r.via},
                             {"episodes", std::move(eps)}});
    }

    // Categories over time: episodes opened per category, on the timelines' axis.
    TimePoint axis_from = std::max(from, first_activity);
    for (const auto& s : spans) axis_from = std::min(axis_from, std::max(from, s.from));
    if (now - axis_from < std::chrono::hours(1)) axis_from = now - std::chrono::hours(1);
    constexpr int kBuckets = 48;
    std::map<std::string, std::vector<std::int64_t>> over_time;
    for (const auto& de : *period) {
        if (de.destination.kind != DestinationKind::domain) continue;
        for (const auto& e : de.episodes) {
            std::string c = detail::primary_category(e.categories);
            auto& v = over_time[c.empty() ? "unknown" : c];
            v.resize(kBuckets, 0);
            const double at =
                static_cast<double>((std::max(e.first_deferral, axis_from) - axis_from).count()) /
                static_cast<double>((now - axis_from).count());
            ++v[std::clamp(static_cast<int>(at * kBuckets), 0, kBuckets - 1)];
        }
    }

    auto stats = ledger.stats();
    if (!stats) return stats.error();
    // Finished messages leave the ledger after their retention: deliveries are
    // counted only as far back as the ledger still holds them, and the page says so.
    TimePoint deliveries_from = from;
    if (config.ledger.retention_finished_messages.count() > 0)
        deliveries_from = std::max(from, now - config.ledger.retention_finished_messages);
    auto deliveries = ledger.count_deliveries(deliveries_from, now);
    if (!deliveries) return deliveries.error();
    return json{
        {"now", format_rfc3339(now)},
        {"from", format_rfc3339(from)},
        {"days", days},
        {"summary",
         {{"deliveries", *deliveries},
          {"deliveries_since", format_rfc3339(deliveries_from)},
          {"deferrals", deferrals},
          {"episodes", episodes},
          {"destinations_deferred", deferred_domains},
          {"destinations_delivered", delivered_to},
          {"messages", stats->messages},
          {"pending_messages", stats->pending_messages},
          {"categories", std::move(cats)}}},
        {"escalations", std::move(shown_escalations)},
        {"flags",
         {{"set", std::move(flags_set)},
          {"expired", std::move(flags_expired)},
          {"cleared", std::move(flags_cleared)},
          {"active", flags_active}}},
        {"incidents", std::move(incidents)},
        {"axis", {{"from", format_rfc3339(axis_from)}, {"to", format_rfc3339(now)}}},
        {"timelines",
         {{"rows", std::move(drawn)},
          {"total", rows.size()},
          {"not_drawn", rows.size() - std::min(rows.size(), max_rows)}}},
        {"folded",
         {{"greylisted", greylisted},
          {"single_deferrals", single},
          {"incident_destinations", incident_destinations},
          {"incident_episodes", incident_episodes},
          {"mx_with_domain", mx_with_domain}}},
        {"over_time", over_time},
    };
}

// ---------------------------------------------------------------------------
// The page.

namespace {

std::string h(std::string_view s) {
    return text::html(s);
}

// Our own multi-line text (the escalation note): line breaks kept, each line
// rendered as HTML text.
std::string html_lines(std::string_view s) {
    std::string out;
    std::size_t pos = 0;
    while (pos <= s.size()) {
        std::size_t nl = s.find('\n', pos);
        if (nl == std::string_view::npos) nl = s.size();
        out += text::html(s.substr(pos, nl - pos));
        if (nl < s.size()) out += '\n';
        pos = nl + 1;
    }
    return out;
}

const char* category_colour(std::string_view name) {
    auto c = category_from_string(name);
    switch (c.value_or(Category::unknown)) {
        case Category::receiver_config: return "#d62728";
        case Category::receiver_system: return "#ff7f0e";
        case Category::greylisting: return "#2ca02c";
        case Category::rate_limited: return "#bcbd22";
        case Category::policy: return "#9467bd";
        case Category::network: return "#1f77b4";
        case Category::routing: return "#17becf";
        case Category::local: return "#8c564b";
        case Category::mailbox: return "#e377c2";
        case Category::receiver_config_permanent: return "#8b0000";
        case Category::address: return "#6b4c9a";
        case Category::content: return "#393b79";
        case Category::expired: return "#000000";
        default: return "#7f7f7f";
    }
}

std::string when(const json& j) {
    auto t = json_time(j);
    return t ? h(format_local(*t)) : std::string("-");
}

std::string num(const json& j) {
    return j.is_number()
               ? detail::grouped(static_cast<std::size_t>(std::max<std::int64_t>(j.get<std::int64_t>(), 0)))
               : std::string("-");
}

std::string plural(std::size_t n, std::string_view one, std::string_view many) {
    return fmt::format("{} {}", detail::grouped(n), n == 1 ? one : many);
}

// The shared date axis: at most six ticks on whole hours or days (of the
// local time zone), labelled with the date at midnight and the time otherwise.
struct Axis {
    TimePoint from, to;
    double at(TimePoint t) const {  // 0..1000
        const double f = static_cast<double>((t - from).count()) / static_cast<double>((to - from).count());
        return std::clamp(f, 0.0, 1.0) * 1000.0;
    }
    std::vector<std::pair<double, std::string>> ticks() const {
        using namespace std::chrono;
        const std::array<hours, 10> steps{hours(1),       hours(2),      hours(3),  hours(6),
                                          hours(12),      hours(24),     hours(48), hours(24 * 7),
                                          hours(24 * 14), hours(24 * 28)};
        hours step = steps.back();
        for (auto s : steps)
            if ((to - from) / s <= 5) {
                step = s;
                break;
            }
        const auto secs = [](TimePoint t) { return duration_cast<seconds>(t.time_since_epoch()).count(); };
        std::time_t t0 = static_cast<std::time_t>(secs(from));
        std::tm tm{};
        localtime_r(&t0, &tm);
        const std::int64_t offset = tm.tm_gmtoff, st = duration_cast<seconds>(step).count();
        std::int64_t first = ((secs(from) + offset + st - 1) / st) * st - offset;
        std::vector<std::pair<double, std::string>> out;
        for (std::int64_t s = first; s <= secs(to); s += st) {
            std::time_t tt = static_cast<std::time_t>(s);
            std::tm lt{};
            localtime_r(&tt, &lt);
            char buf[32];
            const bool midnight = lt.tm_hour == 0 && lt.tm_min == 0;
            std::size_t n = std::strftime(buf, sizeof buf, midnight ? "%b %d" : "%H:%M", &lt);
            out.emplace_back(at(TimePoint{duration_cast<Duration>(seconds(s))}), std::string(buf, n));
        }
        return out;
    }
};

constexpr const char* kStyle =
    "*{box-sizing:border-box}"
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;padding:1em;max-width:72em;"
    "color:#222;line-height:1.4;font-size:15px}"
    "h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin:1.6em 0 .5em;border-bottom:1px solid #ddd}"
    "h3{font-size:1em;margin:1em 0 .3em}"
    ".scroll{overflow-x:auto;max-width:100%}"
    "table{border-collapse:collapse;min-width:100%}"
    "td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;font-size:13px;vertical-align:top}"
    "td.n,th.n{text-align:right}"
    "pre{background:#f6f6f6;padding:8px;white-space:pre-wrap;overflow-wrap:anywhere;font-size:12px}"
    ".bad{color:#b00;font-weight:bold}.ok{color:#2a7}"
    ".figures{display:grid;grid-template-columns:repeat(auto-fill,minmax(10.5em,1fr));gap:8px;padding:0;"
    "list-style:none}"
    ".figures li{border:1px solid #ddd;border-radius:6px;padding:6px 10px}"
    ".figures strong{display:block;font-size:1.3em}"
    "table.cats{min-width:0;width:100%;max-width:50em}"
    ".cats tr.g td{border-top:0;color:#555;font-size:12px;padding-top:0}"
    ".todo li{margin:.3em 0}"
    ".tl{display:grid;grid-template-columns:minmax(0,17em) minmax(0,1fr);gap:3px 10px;align-items:center}"
    ".tl .lab{font-size:13px;overflow-wrap:anywhere}.tl .lab small{color:#666}"
    ".tl svg{display:block;width:100%;height:16px}"
    ".tl details{font-size:12px}"
    ".axis{position:relative;height:1.5em;font-size:11px;color:#555;overflow:hidden}"
    ".axis span{position:absolute;top:0;white-space:nowrap;padding-left:2px;border-left:1px solid #aaa}"
    ".legend span{display:inline-block;margin-right:1em;font-size:12px}"
    ".more{font-style:italic}"
    "@media (max-width:640px){body{padding:.5em;font-size:14px}"
    ".tl{grid-template-columns:minmax(0,1fr)}.tl .pad{display:none}.tl .lab{margin-top:.4em}"
    "td,th{padding:3px 4px;font-size:12px}"
    ".figures{grid-template-columns:repeat(2,minmax(0,1fr))}.figures li{padding:4px 6px;font-size:13px}}";

std::string axis_row(const Axis& axis) {
    std::string out = "<div class=\"pad\"></div><div class=\"axis\">";
    for (const auto& [x, label] : axis.ticks())
        out += fmt::format("<span style=\"left:{:.1f}%\">{}</span>", x / 10.0, h(label));
    return out + "</div>\n";
}

// A timeline strip: grid lines at the ticks, then the bars.
std::string strip_open(std::string_view id, std::string_view label, const Axis& axis) {
    std::string out = fmt::format(
        "<svg id=\"{}\" viewBox=\"0 0 1000 16\" preserveAspectRatio=\"none\" role=\"img\" aria-label=\"{}\">"
        "<rect x=\"0\" y=\"7\" width=\"1000\" height=\"2\" fill=\"#eee\"/>",
        h(id), h(label));
    for (const auto& [x, l] : axis.ticks())
        out += fmt::format(
            "<line x1=\"{:.1f}\" y1=\"0\" x2=\"{:.1f}\" y2=\"16\" stroke=\"#ddd\" "
            "vector-effect=\"non-scaling-stroke\"/>",
            x, x);
    return out;
}

std::string bar(const Axis& axis, TimePoint a, TimePoint b, std::string_view colour, bool faded,
                std::string_view title) {
    double x1 = axis.at(a), x2 = axis.at(b);
    if (x2 - x1 < 3) x2 = std::min(1000.0, x1 + 3);
    if (x2 - x1 < 3) x1 = x2 - 3;
    return fmt::format(
        "<rect x=\"{:.1f}\" y=\"1\" width=\"{:.1f}\" height=\"14\" fill=\"{}\" "
        "opacity=\"{}\"><title>{}</title></rect>",
        x1, x2 - x1, colour, faded ? "0.55" : "0.95", title);
}

// " · via mx1.example.net" for the MX hosts drawn with their domain.
std::string via_text(const json& via) {
    std::string out;
    for (const auto& m : via) out += (out.empty() ? " &middot; via " : ", ") + h(m.get<std::string>());
    return out;
}

// One row's episodes as bars. Episodes of one category closer than two
// thousandths of the axis merge into one bar (a busy domain has hundreds of
// short ones, and a bar narrower than a pixel tells nothing), its tooltip
// saying how many it holds.
std::string episode_bars(const Axis& axis, const json& episodes, TimePoint now) {
    struct Bar {
        std::string category;
        TimePoint from, to;
        bool ended = true;
        std::int64_t count = 0, attempts = 0, messages = 0;
        std::string reply;
    };
    std::string out;
    std::optional<Bar> cur;
    auto flush = [&] {
        if (!cur) return;
        const std::string title =
            cur->count == 1 ? fmt::format("{}: {} attempts, {} messages, {}", h(cur->category),
                                          num(json(cur->attempts)), num(json(cur->messages)), h(cur->reply))
                            : fmt::format("{}: {} episodes, {} attempts, last reply: {}", h(cur->category),
                                          num(json(cur->count)), num(json(cur->attempts)), h(cur->reply));
        out += bar(axis, cur->from, cur->to, category_colour(cur->category), cur->ended, title);
        cur.reset();
    };
    for (const auto& e : episodes) {
        const std::string category = e.at("category").get<std::string>();
        const TimePoint a = json_time(e.at("first_deferral")).value_or(now);
        const TimePoint b = json_time(e.at("ended")).value_or(now);
        if (cur && (cur->category != category || axis.at(a) - axis.at(cur->to) >= 2.0)) flush();
        if (!cur) cur = Bar{category, a, b, true, 0, 0, 0, {}};
        cur->to = std::max(cur->to, b);
        cur->ended = cur->ended && !e.at("ended").is_null();
        ++cur->count;
        cur->attempts += e.at("attempts").get<std::int64_t>();
        cur->messages += e.at("messages").get<std::int64_t>();
        cur->reply = e.at("last_reply").get<std::string>();
    }
    flush();
    return out;
}

std::string incident_label(const json& i) {
    return fmt::format("local outage ({}), {}", h(i.value("category", "")),
                       plural(i.at("destinations").get<std::size_t>(), "destination", "destinations"));
}

std::string destination_details(const json& i) {
    std::string out =
        fmt::format("<details><summary>{}</summary><ul>",
                    plural(i.at("destinations").get<std::size_t>(), "destination", "destinations"));
    for (const auto& n : i.at("destination_names")) out += "<li>" + h(n.get<std::string>()) + "</li>";
    return out + "</ul></details>";
}

}  // namespace

std::string render_html_report(const json& doc) {
    const auto now = json_time(doc.at("now")).value_or(TimePoint{});
    const auto& sum = doc.at("summary");
    const auto& escs = doc.at("escalations");
    const auto& flags = doc.at("flags");
    const auto& incs = doc.at("incidents");
    const auto& tl = doc.at("timelines");
    const auto& folded = doc.at("folded");
    std::size_t open_esc = 0, closed_esc = 0;
    for (const auto& e : escs) (e.value("status", "open") == "closed" ? closed_esc : open_esc)++;
    const json* open_incident = nullptr;
    for (const auto& i : incs)
        if (i.at("ended").is_null()) open_incident = &i;

    std::string out;
    out +=
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
        "<title>retryguard report</title>\n<style>";
    out += kStyle;
    out += "</style>\n</head><body>\n";
    out += fmt::format("<h1>retryguard report</h1>\n<p>{} to {} ({}) &middot; generated {}</p>\n",
                       when(doc.at("from")), when(doc.at("now")),
                       plural(doc.at("days").get<std::size_t>(), "day", "days"), h(format_local(now)));

    // 1. Summary and what to do.
    out += "<section id=\"summary\"><h2>Summary</h2>\n<ul class=\"figures\">";
    auto figure = [&](std::string_view value, std::string_view label) {
        out += fmt::format("<li><strong>{}</strong>{}</li>", value, label);
    };
    figure(num(sum.at("deliveries")),
           sum.at("deliveries_since") == doc.at("from")
               ? std::string("recipients delivered in the period")
               : fmt::format("recipients delivered since {} (the ledger's retention)",
                             when(sum.at("deliveries_since"))));
    figure(num(sum.at("deferrals")),
           fmt::format("deferrals in {} at {}",
                       plural(sum.at("episodes").get<std::size_t>(), "episode", "episodes"),
                       plural(sum.at("destinations_deferred").get<std::size_t>(), "domain", "domains")));
    figure(num(sum.at("destinations_delivered")), "domains delivered to in the period");
    figure(num(sum.at("messages")),
           fmt::format("messages in the ledger, {} still queued", num(sum.at("pending_messages"))));
    figure(fmt::format("{} / {}", open_esc, closed_esc), "escalations open now / closed in the period");
    figure(fmt::format("{} / {} / {}", flags.at("set").size(), flags.at("expired").size(),
                       flags.at("cleared").size()),
           fmt::format("flags set / expired / cleared ({} active)", num(flags.at("active"))));
    figure(detail::grouped(incs.size()),
           open_incident ? "incidents, one open now" : "local-outbound incidents");
    out += "</ul>\n<h3>What to do</h3>\n<ul class=\"todo\">";
    std::size_t todo = 0;
    if (open_incident) {
        ++todo;
        auto c = category_from_string(open_incident->value("category", ""));
        out += fmt::format(
            "<li class=\"bad\">A local-outbound incident ({}) is open since {}: deferrals at {} look like "
            "our own "
            "side's problem. {}</li>",
            h(open_incident->value("category", "")), when(open_incident->at("started")),
            plural(open_incident->at("destinations").get<std::size_t>(), "destination", "destinations"),
            c ? h(info(*c).guidance) : std::string());
    }
    std::size_t n = 0;
    for (const auto& e : escs) {
        ++n;
        if (e.value("status", "open") != "open") continue;
        ++todo;
        if (e.value("side", "remote") == "local") {
            out += fmt::format(
                "<li><span class=\"bad\">The sending Postfix</span> has been failing on its own side: fix it "
                "on this host (<a href=\"#escalation-{}\">its note</a>). {}</li>",
                n, h(str_or(e, "guidance", "")));
            continue;
        }
        out += fmt::format(
            "<li><span class=\"bad\">{} {}</span> is escalated: send <a href=\"#escalation-{}\">its note</a> "
            "to "
            "{}. {}</li>",
            h(e.at("kind").get<std::string>()), h(e.at("name").get<std::string>()), n,
            h(str_or(e, "contact", "the receiving side's postmaster (no contact configured)")),
            h(str_or(e, "guidance", "")));
    }
    if (flags.at("active").get<std::size_t>() > 0) {
        ++todo;
        out += fmt::format(
            "<li>{} flagged as repeat offenders: see <a href=\"#flags\">Flags</a> "
            "(<code>retryguard flags</code>).</li>",
            plural(flags.at("active").get<std::size_t>(), "destination is", "destinations are"));
    }
    if (todo == 0) out += "<li class=\"ok\">Nothing needs doing: no open escalation, flag or incident.</li>";
    out += "</ul>\n";
    out += fmt::format(
        "<p id=\"folded\">Not drawn because they need nothing: {}; {}.{}</p>\n",
        plural(folded.at("greylisted").get<std::size_t>(), "destination greylisted and delivered",
               "destinations greylisted and delivered"),
        plural(folded.at("single_deferrals").get<std::size_t>(), "single deferral resolved",
               "single deferrals resolved"),
        folded.at("incident_destinations").get<std::size_t>() > 0
            ? fmt::format(" {} only hit by an incident are shown once, as the incident.",
                          plural(folded.at("incident_destinations").get<std::size_t>(), "domain", "domains"))
            : std::string());
    out += "</section>\n";

    // 2. Deferrals by category.
    out += "<section id=\"deferrals-by-category\"><h2>Deferrals by category</h2>\n";
    if (sum.at("categories").empty()) {
        out += "<p>No deferrals in the period.</p>\n";
    } else {
        out +=
            "<div class=\"scroll\"><table class=\"cats\"><tr><th>Category</th><th class=\"n\">Deferrals</th>"
            "<th class=\"n\">Episodes</th><th class=\"n\">Domains</th></tr>\n";
        for (const auto& c : sum.at("categories")) {
            out += fmt::format(
                "<tr><td><span style=\"color:{}\">&#9632;</span> <strong>{}</strong></td><td "
                "class=\"n\">{}</td>"
                "<td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
                category_colour(c.at("category").get<std::string>()), h(c.at("category").get<std::string>()),
                num(c.at("deferrals")), num(c.at("episodes")), num(c.at("destinations")));
            if (!c.value("guidance", "").empty())
                out += fmt::format("<tr class=\"g\"><td colspan=\"4\">{}</td></tr>\n",
                                   h(c.value("guidance", "")));
        }
        out += "</table></div>\n";
    }
    out += "</section>\n";

    // 3. Escalations with their notes.
    out += "<section id=\"escalations\"><h2>Escalations</h2>\n";
    if (escs.empty()) out += "<p>None open, none closed in the period.</p>\n";
    n = 0;
    for (const auto& e : escs) {
        ++n;
        const bool open = e.value("status", "open") == "open";
        std::string also;
        for (const auto& m : e.value("also_mx", json::array()))
            also += (also.empty() ? " (and mx " : ", ") + h(m.get<std::string>());
        const bool local = e.value("side", "remote") == "local";
        out += fmt::format("<h3 id=\"escalation-{}\" class=\"{}\">{} {}{} &middot; {}</h3>\n", n,
                           open ? "bad" : "",
                           local ? std::string("the sending Postfix,") : h(e.at("kind").get<std::string>()),
                           h(e.at("name").get<std::string>()), also.empty() ? also : also + ")",
                           open ? std::string("open") : "closed " + when(e.at("closed")));
        out += fmt::format("<p>Escalated {} &middot; {} since {} &middot; {} attempts, {} messages{}</p>\n",
                           when(e.at("opened")), local ? "failing" : "deferred", when(e.at("first_deferral")),
                           num(e.at("attempts")), num(e.at("messages")),
                           !open   ? std::string()
                           : local ? std::string(" &middot; contact: this host's own administrator")
                                   : " &middot; contact: " + h(str_or(e, "contact", "(none configured)")));
        out += fmt::format("<details{}><summary>Escalation note</summary><pre>{}</pre></details>\n",
                           open ? " open" : "", html_lines(e.at("note").get<std::string>()));
    }
    out += "</section>\n";

    // 4. Flags.
    out += "<section id=\"flags\"><h2>Flags</h2>\n";
    if (flags.at("set").empty() && flags.at("expired").empty() && flags.at("cleared").empty()) {
        out += "<p>None set, expired or cleared in the period.</p>\n";
    } else {
        out +=
            "<div class=\"scroll\"><table><tr><th>Destination</th><th>In the period</th><th>Set</th>"
            "<th>Expires</th><th>Reason</th></tr>\n";
        for (const char* what : {"set", "expired", "cleared"})
            for (const auto& f : flags.at(what))
                out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                                   h(f.at("destination").get<std::string>()), what, when(f.at("set_at")),
                                   when(f.at("expires_at")), h(f.at("reason").get<std::string>()));
        out += "</table></div>\n";
    }
    out += "</section>\n";

    // 5. Incidents, one row each with their destinations folded in.
    out += "<section id=\"incidents\"><h2>Local-outbound incidents</h2>\n";
    if (incs.empty()) {
        out += "<p>None in the period.</p>\n";
    } else {
        out +=
            "<div class=\"scroll\"><table><tr><th>Started</th><th>Ended</th><th>Class</th><th>Destinations "
            "hit</th>"
            "<th class=\"n\">Deferrals</th></tr>\n";
        std::size_t k = 0;
        for (const auto& i : incs)
            out += fmt::format(
                "<tr id=\"incident-{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td "
                "class=\"n\">{}{}</td></tr>\n",
                ++k, when(i.at("started")),
                i.at("ended").is_null() ? "<strong class=\"bad\">open</strong>" : when(i.at("ended")),
                h(i.value("category", "")), destination_details(i), num(i.at("deferrals")),
                i.at("absorbed").is_number() ? fmt::format(" ({} taken back)", num(i.at("absorbed")))
                                             : std::string());
        out +=
            "</table></div>\n<p><small>Ended incidents are rebuilt from the ledger's episodes with the "
            "spread "
            "rule; the mail log's local_outbound_* verdict lines give their exact times.</small></p>\n";
    }
    out += "</section>\n";

    // 6. Timelines on one date axis.
    Axis axis{json_time(doc.at("axis").at("from")).value_or(now),
              json_time(doc.at("axis").at("to")).value_or(now)};
    if (axis.to <= axis.from) axis.to = axis.from + std::chrono::hours(1);
    out += "<section id=\"timelines\"><h2>Timelines, worst first</h2>\n<div class=\"tl\">\n";
    out += axis_row(axis);
    std::size_t k = 0;
    for (const auto& i : incs) {
        ++k;
        const auto s = json_time(i.at("started")).value_or(now);
        const auto e = json_time(i.at("ended")).value_or(now);
        out += fmt::format("<div class=\"lab\"><strong>{}</strong>{}</div>", incident_label(i),
                           destination_details(i));
        out += strip_open(fmt::format("timeline-incident-{}", k), incident_label(i), axis);
        out += bar(axis, s, e, category_colour(i.value("category", "")), !i.at("ended").is_null(),
                   fmt::format("{} deferrals", num(i.at("deferrals"))));
        out += "</svg>\n";
    }
    for (const auto& r : tl.at("rows")) {
        const std::string kind = r.at("kind").get<std::string>(), name = r.at("name").get<std::string>();
        const std::string state = r.at("state").get<std::string>();
        out += fmt::format(
            "<div class=\"lab\"><span class=\"{}\">{}</span> <small>{} &middot; {}{}{}</small></div>",
            state == "escalate" ? "bad" : "", h(name), h(kind), h(state),
            r.at("flagged").get<bool>() ? " &middot; flagged" : "", via_text(r.value("via", json::array())));
        out += strip_open(fmt::format("timeline-{}-{}", kind, name), kind + " " + name, axis);
        out += episode_bars(axis, r.at("episodes"), now);
        out += "</svg>\n";
    }
    out += "</div>\n";
    if (tl.at("rows").empty() && incs.empty()) out += "<p>Nothing to draw in the period.</p>\n";
    if (const auto more = tl.at("not_drawn").get<std::size_t>(); more > 0)
        out += fmt::format(
            "<p class=\"more\" id=\"not-drawn\">{} not drawn; see <code>retryguard "
            "destinations</code>.</p>\n",
            plural(more, "more destination", "more destinations"));
    out += "<p class=\"legend\">";
    for (const auto& c : all_categories())
        out += fmt::format("<span><span style=\"color:{}\">&#9632;</span> {}</span>", category_colour(c.name),
                           h(c.name));
    out += "<span>(faded: ended)</span></p>\n</section>\n";

    // 7. Categories over time: episodes opened per category on the same axis.
    out +=
        "<section id=\"over-time\"><h2>Episodes opened, by category</h2>\n<div class=\"tl\" "
        "id=\"categories-over-time\">\n";
    out += axis_row(axis);
    std::int64_t maxc = 1;
    for (const auto& [c, v] : doc.at("over_time").items())
        for (const auto& x : v) maxc = std::max(maxc, x.get<std::int64_t>());
    for (const auto& [c, v] : doc.at("over_time").items()) {
        std::int64_t total = 0;
        for (const auto& x : v) total += x.get<std::int64_t>();
        out += fmt::format("<div class=\"lab\">{} <small>{}</small></div>", h(c), num(json(total)));
        out += fmt::format(
            "<svg viewBox=\"0 0 1000 16\" preserveAspectRatio=\"none\" role=\"img\" aria-label=\"{}\">",
            h(c));
        const double bw = 1000.0 / static_cast<double>(std::max<std::size_t>(v.size(), 1));
        for (std::size_t i = 0; i < v.size(); ++i) {
            const auto count = v[i].get<std::int64_t>();
            if (count == 0) continue;
            const double ht = std::max(1.5, 16.0 * static_cast<double>(count) / static_cast<double>(maxc));
            out += fmt::format(
                "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"><title>{} "
                "episodes"
                "</title></rect>",
                i * bw, 16.0 - ht, std::max(bw - 1.0, 1.0), ht, category_colour(c), count);
        }
        out += "</svg>\n";
    }
    out += "</div>\n</section>\n</body></html>\n";
    return out;
}

Result<std::string> html_report(LedgerReports& ledger, const config::Config& config, TimePoint now,
                                int days) {
    auto doc = period_report(ledger, config, now, days);
    if (!doc) return doc.error();
    return render_html_report(*doc);
}

}  // namespace retryguard::report
