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
#include "retryguard/text/text.hpp"

namespace retryguard::report {

using nlohmann::json;
using namespace detail;

namespace {

struct Listed {
    DestinationInfo d;
    const Flag* flag = nullptr;
};

// escalate, flagged, watch, the rest: the order a postmaster works through.
int worst_rank(const Listed& l) {
    if (l.d.state == "escalate") return 0;
    if (l.flag) return 1;
    if (l.d.state == "watch") return 2;
    return 3;
}

void sort_listing(std::vector<Listed>& v, DestinationSort sort) {
    auto first = [](const Listed& l) {
        return l.d.episode ? std::optional<TimePoint>(l.d.episode->first_deferral) : std::nullopt;
    };
    auto by_name = [](const Listed& a, const Listed& b) {
        if (a.d.kind != b.d.kind) return a.d.kind == DestinationKind::domain;
        return a.d.name < b.d.name;
    };
    // Oldest open episode first; destinations without one after all that have one.
    auto by_age = [&](const Listed& a, const Listed& b, bool& decided) {
        auto fa = first(a), fb = first(b);
        decided = true;
        if (fa.has_value() != fb.has_value()) return fa.has_value();
        if (fa && *fa != *fb) return *fa < *fb;
        decided = false;
        return false;
    };
    std::stable_sort(v.begin(), v.end(), [&](const Listed& a, const Listed& b) {
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
                auto na = a.d.episode ? a.d.episode->attempts : 0,
                     nb = b.d.episode ? b.d.episode->attempts : 0;
                if (na != nb) return na > nb;
                break;
            }
            case DestinationSort::name: break;
        }
        return by_name(a, b);
    });
}

}  // namespace

Result<json> destinations(LedgerReports& ledger, const DestinationQuery& query, TimePoint now) {
    DestinationFilter f;
    f.kind = query.kind;
    if (query.state && *query.state != "none") f.state = query.state;
    // Every matching row: the order needs them all, and the page is cut here,
    // where the total is known and said.
    auto list = ledger.list_destinations(f);
    if (!list) return list.error();
    auto flags = active_flags_by_key(ledger, now);
    if (!flags) return flags.error();
    std::vector<Listed> v;
    for (auto& d : *list) {
        if (query.state && *query.state == "none" && !d.state.empty()) continue;
        if (query.category && !(d.episode && (d.episode->categories & category_bit(*query.category))))
            continue;
        const Flag* flag = find_flag(*flags, d.kind, d.name);
        v.push_back(Listed{std::move(d), flag});
    }
    sort_listing(v, query.sort);
    json arr = json::array();
    for (const auto& l : v) arr.push_back(destination_json(l.d, l.flag));
    std::size_t escalated = 0;
    for (const auto& l : v) escalated += l.d.state == "escalate";
    json doc{
        {"now", format_rfc3339(now)}, {"sort", std::string(to_string(query.sort))}, {"escalated", escalated}};
    put_page(doc, "destinations", std::move(arr), query.page);
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
