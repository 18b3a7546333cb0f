// report_destinations.cpp -- `retryguard destinations` and `retryguard flags`:
// the destinations the ledger knows, worst first, and the flags set on them.
// Reads only.
#include "retryguard/report/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>

#include "report/report_internal.hpp"
#include "retryguard/ingest/ingest.hpp"
#include "retryguard/postfix/postfix_wiring.hpp"
#include "retryguard/reply/reply.hpp"
#include "retryguard/rules/engine.hpp"
#include "retryguard/text/text.hpp"

namespace retryguard::report {

using nlohmann::json;
using namespace detail;

namespace detail {

namespace {

// escalate, flagged, watch, the rest: the order a postmaster works through.
int worst_rank(const Listed& l) {
    if (l.d->state == "escalate") return 0;
    if (l.flag) return 1;
    if (l.d->state == "watch") return 2;
    return 3;
}

std::optional<TimePoint> open_since(const Listed& l) {
    return l.d->episode ? std::optional<TimePoint>(l.d->episode->first_deferral) : std::nullopt;
}

}  // namespace

bool listed_before(const Listed& a, const Listed& b, DestinationSort sort) {
    // Oldest open episode first; destinations without one after all that have one.
    auto by_age = [](const Listed& x, const Listed& y, bool& decided) {
        auto fx = open_since(x), fy = open_since(y);
        decided = true;
        if (fx.has_value() != fy.has_value()) return fx.has_value();
        if (fx && *fx != *fy) return *fx < *fy;
        decided = false;
        return false;
    };
    bool decided = false;
    switch (sort) {
        case DestinationSort::worst: {
            int ra = worst_rank(a), rb = worst_rank(b);
            if (ra != rb) return ra < rb;
            bool r = by_age(a, b, decided);
            if (decided) return r;
            break;
        }
        case DestinationSort::age: {
            bool r = by_age(a, b, decided);
            if (decided) return r;
            break;
        }
        case DestinationSort::deferrals: {
            auto na = a.d->episode ? a.d->episode->attempts : 0,
                 nb = b.d->episode ? b.d->episode->attempts : 0;
            if (na != nb) return na > nb;
            break;
        }
        case DestinationSort::name: break;
    }
    if (a.d->kind != b.d->kind) return a.d->kind == DestinationKind::domain;
    return a.d->name < b.d->name;
}

}  // namespace detail

Result<json> destinations(LedgerReports& ledger, const DestinationQuery& query, TimePoint now) {
    return detail::destinations_with(ledger, query, now, nullptr);
}

Result<json> detail::destinations_with(LedgerReports& ledger, const DestinationQuery& query, TimePoint now,
                                       const std::optional<json>* engine) {
    DestinationFilter f;
    f.kind = query.kind;
    if (query.state && *query.state != "none") f.state = query.state;
    // Every matching row: the order and the total need them all. Only the
    // rows up to the page's end are put in order, and only the page's rows
    // become JSON.
    auto list = ledger.list_destinations(f);
    if (!list) return list.error();
    // The sending Postfix's own failures: their episode is the engine's, read
    // only when the listing holds that row (unless the caller has it), before
    // filters and order.
    for (auto& d : *list) {
        if (d.kind != DestinationKind::domain || d.name != kLocalDestination) continue;
        if (engine)
            fill_local_destination(d, *engine);
        else
            fill_local_destination(d, saved_engine(ledger));
    }
    auto flags = active_flags_by_key(ledger, now);
    if (!flags) return flags.error();
    std::vector<Listed> v;
    std::size_t escalated = 0;
    for (const auto& d : *list) {
        if (query.state && *query.state == "none" && !d.state.empty()) continue;
        if (query.category && !(d.episode && (d.episode->categories & category_bit(*query.category))))
            continue;
        v.push_back(Listed{&d, find_flag(*flags, d.kind, d.name)});
        escalated += d.state == "escalate";
    }
    const auto [first, end] = page_range(v.size(), query.page);
    // listed_before ends with kind and name, unique in a listing: a total
    // order, so a partial sort puts the first rows where a full sort would.
    auto before = [&](const Listed& a, const Listed& b) { return listed_before(a, b, query.sort); };
    if (end < v.size())
        std::partial_sort(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(end), v.end(), before);
    else
        std::sort(v.begin(), v.end(), before);
    json shown = json::array();
    for (std::size_t i = first; i < end; ++i) shown.push_back(destination_json(*v[i].d, v[i].flag));
    json doc{
        {"now", format_rfc3339(now)}, {"sort", std::string(to_string(query.sort))}, {"escalated", escalated}};
    put_page_rows(doc, "destinations", std::move(shown), v.size(), query.page);
    return doc;
}

std::string render_destinations(const json& raw, const RenderOptions& ro) {
    // Outside text is rendered for the terminal once, before any of it is formatted.
    const json doc = text::terminal_document(raw);
    const auto& arr = doc.at("destinations");
    if (arr.empty() && doc.value("total", arr.size()) == 0) return "No destinations match.\n";
    Table t({"KIND", "DESTINATION", "STATE", "CATEGORY", "FIRST DEFERRAL", "LAST DEFERRAL", "ATTEMPTS",
             "MSGS", "FLAG", "LAST REPLY"});
    for (const auto& d : arr) {
        t.add({d.at("kind").get<std::string>(), d.at("name").get<std::string>(),
               state_colour(ro, d.at("state").get<std::string>()), str_or(d, "category"),
               when_or_dash(d.at("first_deferral"), ro.now), when_or_dash(d.at("last_deferral"), ro.now),
               std::to_string(d.at("attempts").get<std::int64_t>()),
               std::to_string(d.at("messages").get<std::int64_t>()),
               d.at("flagged").get<bool>() ? "yes" : "-", clip(str_or(d, "last_reply"), 70)});
    }
    return (arr.empty() ? std::string() : t.render(ro.colour)) + page_footer(doc, "destinations");
}

Result<json> flags(LedgerReports& ledger, TimePoint now, bool include_inactive, const Page& page) {
    auto fl = ledger.list_flags(std::nullopt, now, include_inactive);
    if (!fl) return fl.error();
    json arr = json::array();
    for (const auto& f : *fl)
        arr.push_back(json{{"id", f.id},
                           {"destination", f.destination},
                           {"reason", f.reason},
                           {"set_at", format_rfc3339(f.set_at)},
                           {"expires_at", time_or_null(f.expires_at)},
                           {"cleared_at", time_or_null(f.cleared_at)}});
    json doc{{"now", format_rfc3339(now)}};
    put_page(doc, "flags", std::move(arr), page);
    return doc;
}

std::string render_flags(const json& raw, const RenderOptions& ro) {
    // Outside text is rendered for the terminal once, before any of it is formatted.
    const json doc = text::terminal_document(raw);
    const auto& arr = doc.at("flags");
    if (doc.value("total", arr.size()) == 0) return "No flags.\n";
    Table t({"DESTINATION", "SET", "EXPIRES", "CLEARED", "REASON"});
    for (const auto& f : arr)
        t.add({f.at("destination").get<std::string>(), when_or_dash(f.at("set_at"), ro.now),
               when_or_dash(f.at("expires_at"), ro.now), when_or_dash(f.at("cleared_at"), ro.now),
               str_or(f, "reason")});
    return (arr.empty() ? std::string() : t.render(ro.colour)) + page_footer(doc, "flags");
}

}  // namespace retryguard::report
