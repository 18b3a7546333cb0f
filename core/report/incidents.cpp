// incidents.cpp -- the local-outbound incidents of a period for the reports.
// The rules engine keeps only the open incident; an ended one survives in the
// mail log's verdict lines and, as the episodes it caused, in the ledger. This
// file rebuilds ended incidents from those episodes with the engine's own
// spread rule and settings, bounded by how many the engine counted, and takes
// the open one from the engine as it is. It reads; it decides nothing.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <queue>
#include <set>

#include "report/report_internal.hpp"
#include "retryguard/report/report.hpp"

namespace retryguard::report {

using nlohmann::json;

namespace {

// The engine's spread key of a deferral: the MX host that answered, or the
// domain when none did (connections that failed log relay=none).
std::string spread_key(const Episode& e) {
    std::string host = e.last_relay.substr(0, e.last_relay.find('['));
    if (host.empty() || host == "none") return e.destination;
    return "mx:" + host;
}

struct Rebuilt {
    Category category = Category::unknown;
    TimePoint started{};
    std::optional<TimePoint> ended;
    std::set<std::string> domains;
    std::int64_t deferrals = 0;
};

// One class: the engine's rule replayed over the episodes' first deferrals
// (hits) and the deliveries that ended them (recoveries).
void rebuild_class(std::vector<const Episode*> eps, Category c, const config::Config& config, TimePoint now,
                   std::vector<Rebuilt>& out) {
    const Duration window = config.spread.window;
    const auto min_keys = static_cast<std::size_t>(std::max<std::int64_t>(config.spread.min_destinations, 1));
    const std::size_t half = (min_keys + 1) / 2;
    const Duration quiet = config.spread.quiet_period;
    std::stable_sort(eps.begin(), eps.end(), [](const Episode* a, const Episode* b) {
        return a->first_deferral < b->first_deferral;
    });
    std::size_t i = 0;
    while (i < eps.size()) {
        // The first point where enough distinct keys opened an episode within the window.
        std::map<std::string, int> keys;
        std::size_t lo = i, at = eps.size();
        for (std::size_t j = i; j < eps.size(); ++j) {
            while (eps[lo]->first_deferral < eps[j]->first_deferral - window) {
                auto k = keys.find(spread_key(*eps[lo]));
                if (--k->second == 0) keys.erase(k);
                ++lo;
            }
            ++keys[spread_key(*eps[j])];
            if (keys.size() >= min_keys) {
                at = j;
                break;
            }
        }
        if (at == eps.size()) return;
        Rebuilt inc;
        inc.category = c;
        inc.started = eps[at]->first_deferral;
        std::priority_queue<TimePoint, std::vector<TimePoint>, std::greater<>> recoveries;
        TimePoint last_hit = inc.started;
        auto join = [&](const Episode* e) {
            inc.domains.insert(e->destination);
            inc.deferrals += e->attempts;
            if (e->ended && *e->ended > inc.started) recoveries.push(*e->ended);
            // An episode of this class only was hit until its last deferral;
            // a mixed one may have gone on for its own reasons.
            const bool only_this = (e->categories & ~category_bit(Category::unknown)) == category_bit(c);
            last_hit = std::max(last_hit, only_this ? e->last_deferral : e->first_deferral);
        };
        for (std::size_t j = lo; j <= at; ++j) join(eps[j]);
        std::size_t next = at + 1, recovered = 0;
        for (;;) {
            const TimePoint quiet_end = last_hit + quiet;
            const bool more = next < eps.size();
            if (!recoveries.empty() && recoveries.top() <= quiet_end &&
                (!more || recoveries.top() <= eps[next]->first_deferral)) {
                const TimePoint t = recoveries.top();
                recoveries.pop();
                if (++recovered >= half) {
                    inc.ended = t;
                    break;
                }
                continue;
            }
            if (more && eps[next]->first_deferral <= quiet_end) {
                join(eps[next++]);
                continue;
            }
            if (quiet_end <= now) inc.ended = quiet_end;
            break;
        }
        out.push_back(std::move(inc));
        if (!out.back().ended) return;
        i = next;
        while (i < eps.size() && eps[i]->first_deferral <= *out.back().ended) ++i;
    }
}

}  // namespace

namespace detail {

json incidents_from(const std::vector<DestinationEpisodes>& period, const config::Config& config,
                    const std::optional<json>& engine, std::int64_t opened_ever, TimePoint from,
                    TimePoint now) {
    std::vector<Rebuilt> rebuilt;
    if (config.spread.enabled && opened_ever > 0) {
        for (Category c : config.spread.categories) {
            // The destination side of every deferral is its domain: one
            // episode per domain, so a deferral is counted once.
            std::vector<const Episode*> eps;
            for (const auto& de : period) {
                if (de.destination.kind != DestinationKind::domain) continue;
                for (const auto& e : de.episodes)
                    if ((e.categories & category_bit(c)) && e.first_deferral >= from) eps.push_back(&e);
            }
            rebuild_class(std::move(eps), c, config, now, rebuilt);
        }
    }
    json open = engine ? open_incident(*engine) : json(nullptr);
    std::optional<TimePoint> open_started = open.is_object() ? json_time(open.at("started")) : std::nullopt;
    // The engine's open incident replaces what was rebuilt of it.
    if (open.is_object()) {
        const auto c = category_from_string(open.value("category", ""));
        const TimePoint s = open_started.value_or(now);
        std::erase_if(rebuilt, [&](const Rebuilt& r) {
            return c && r.category == *c && r.ended.value_or(now) >= s - config.spread.window;
        });
    }
    // Never more than the engine opened: keep the widest.
    const std::int64_t room = std::max<std::int64_t>(opened_ever - (open.is_object() ? 1 : 0), 0);
    if (static_cast<std::int64_t>(rebuilt.size()) > room) {
        std::stable_sort(rebuilt.begin(), rebuilt.end(), [](const Rebuilt& a, const Rebuilt& b) {
            return a.domains.size() > b.domains.size();
        });
        rebuilt.resize(static_cast<std::size_t>(room));
    }
    std::vector<json> all;
    for (const auto& r : rebuilt) {
        json names = json::array();
        for (const auto& d : r.domains) names.push_back(d);
        all.push_back(json{{"category", std::string(to_string(r.category))},
                           {"started", format_rfc3339(r.started)},
                           {"ended", time_or_null(r.ended)},
                           {"destinations", r.domains.size()},
                           {"destination_names", std::move(names)},
                           {"deferrals", r.deferrals},
                           {"absorbed", nullptr},
                           {"source", "ledger"}});
    }
    if (open.is_object()) {
        json names = json::array();
        for (const auto& k : open.at("destinations"))
            if (k.is_string()) names.push_back(k);
        all.push_back(json{{"category", open.at("category")},
                           {"started", open.at("started")},
                           {"ended", nullptr},
                           {"destinations", names.size()},
                           {"destination_names", std::move(names)},
                           {"deferrals", open.at("deferrals")},
                           {"absorbed", open.at("absorbed")},
                           {"source", "engine"}});
    }
    std::stable_sort(all.begin(), all.end(), [](const json& a, const json& b) {
        return a.at("started").dump() < b.at("started").dump();
    });
    return json(std::move(all));
}

}  // namespace detail

Result<json> incidents(LedgerReports& ledger, const config::Config& config, TimePoint now, Duration since) {
    const TimePoint from = now - since;
    auto period = detail::read_period(ledger, from, now);
    if (!period) return period.error();
    auto counts = ledger.verdict_counts();
    if (!counts) return counts.error();
    auto it = counts->find("local_outbound_suspected");
    const std::int64_t opened = it == counts->end() ? 0 : it->second;
    return json{{"now", format_rfc3339(now)},
                {"from", format_rfc3339(from)},
                {"incidents",
                 detail::incidents_from(*period, config, detail::saved_engine(ledger), opened, from, now)}};
}

}  // namespace retryguard::report
