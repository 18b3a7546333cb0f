// report.cpp -- what every report shares: the helpers of report_internal.hpp,
// tables, time and duration formats, paging, sort names, retention. Each report
// has its file (report_status.cpp, report_destinations.cpp, report_escalations.cpp,
// report_explain.cpp, report_queue.cpp; the HTML page is html_report.cpp, the
// incidents of a period incidents.cpp). They read; they never decide policy, and
// never write to the ledger (prune and flag clearing are the callers' explicit acts).
#include "retryguard/report/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <ctime>
#include <map>
#include <set>

#include "report/report_internal.hpp"
#include "retryguard/ingest/ingest.hpp"
#include "retryguard/postfix/postfix_wiring.hpp"
#include "retryguard/reply/reply.hpp"
#include "retryguard/rules/engine.hpp"
#include "retryguard/text/text.hpp"
#include "text/cbor_reader.hpp"

namespace retryguard::report {

using nlohmann::json;

namespace detail {

json time_or_null(const std::optional<TimePoint>& t) {
    return t ? json(format_rfc3339(*t)) : json(nullptr);
}

std::optional<TimePoint> json_time(const json& j) {
    if (!j.is_string()) return std::nullopt;
    auto t = parse_rfc3339(j.get<std::string>());
    if (!t) return std::nullopt;
    return *t;
}

std::string str_or(const json& j, std::string_view key, std::string_view fallback) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string() || it->get<std::string>().empty()) return std::string(fallback);
    return it->get<std::string>();
}

std::string grouped(std::size_t n) {
    std::string digits = std::to_string(n), out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

std::string primary_category(CategorySet set) {
    auto cats = categories_in(set);
    for (auto c : cats)
        if (c != Category::unknown) return std::string(to_string(c));
    return cats.empty() ? std::string() : std::string(to_string(cats.front()));
}

namespace {

// What a report takes of one saved destination: an open episode (its ladder
// and escalation time) or a closed one that escalated (the escalations of a
// period). The others, most of a large state, are decoded one at a time
// (so that a damaged one is still an error) and dropped.
bool reported(const json& d) {
    if (!d.is_object()) return false;
    if (d.contains("open") && d["open"].is_object()) return true;
    if (!d.contains("history") || !d["history"].is_array()) return false;
    for (const auto& ep : d["history"])
        if (ep.is_object() && ep.value("peak", "") == "escalate") return true;
    return false;
}

// A decoded item as the reports see it: text that is not UTF-8 replaced (as
// the JSON text of describe_saved_state had it).
json as_text(const json& j) {
    return json::parse(j.dump(-1, ' ', false, json::error_handler_t::replace), nullptr, false);
}

}  // namespace

// The saved engine read one destination at a time, keeping those reported():
// the whole state's tree took ten times its bytes and most of `status`'s
// time on a large ledger. nullopt when the bytes are not a CBOR state.
std::optional<json> saved_engine_reported(std::string_view saved) {
    auto engine = saved_engine_cbor(saved);
    if (!engine) return std::nullopt;
    json e = json::object();
    json dests = json::array();
    const bool ok = cbor::for_each_entry(*engine, [&](std::string_view key, std::string_view value) {
        if (key != "dests") {
            json v = json::from_cbor(value, true, false);
            if (v.is_discarded()) return false;
            e[std::string(key)] = as_text(v);
            return true;
        }
        return cbor::for_each_item(value, [&](std::string_view item) {
            json d = json::from_cbor(item, true, false);
            if (d.is_discarded()) return false;
            if (reported(d)) dests.push_back(as_text(d));
            return true;
        });
    });
    if (!ok) return std::nullopt;
    e["dests"] = std::move(dests);
    return e;
}

std::optional<json> saved_engine(LedgerReports& ledger) {
    auto saved = ledger.get_state("engine");
    if (!saved || !*saved) return std::nullopt;
    if (auto e = saved_engine_reported(**saved)) return e;
    auto view = describe_saved_state(**saved);
    if (!view) return std::nullopt;
    json e = json::parse(view->engine_json, nullptr, false);
    if (e.is_discarded() || !e.is_object()) return std::nullopt;
    return e;
}

json open_incident(const json& e) {
    if (!e.contains("incident") || !e["incident"].is_object()) return nullptr;
    const auto& i = e["incident"];
    return json{{"category", i.value("category", "")},
                {"started", i.contains("started") && i["started"].is_number_integer()
                                ? json(format_rfc3339(from_micros(i["started"].get<std::int64_t>())))
                                : json(nullptr)},
                {"destinations", i.value("destinations", json::array())},
                {"recovered", i.contains("recovered") && i["recovered"].is_array() ? i["recovered"].size()
                                                                                   : std::size_t{0}},
                {"deferrals", i.value("deferrals", std::int64_t{0})},
                {"absorbed", i.value("absorbed", std::int64_t{0})}};
}

Result<std::vector<DestinationEpisodes>> read_period(LedgerReports& ledger, TimePoint from, TimePoint to) {
    // The period's ended episodes in one read, the destinations with an open
    // episode in another; the other destinations' rows are read one by one,
    // only for those that had an episode in the period.
    auto ended = ledger.episodes_between(from, to);
    if (!ended) return ended.error();
    DestinationFilter open_only;
    open_only.open_episode_only = true;
    auto open = ledger.list_destinations(open_only);
    if (!open) return open.error();
    // Both come in the ledger's listing order (kind, name): merged in it.
    auto before = [](DestinationKind ak, const std::string& an, DestinationKind bk, const std::string& bn) {
        const std::string_view ka = to_string(ak), kb = to_string(bk);
        return ka != kb ? ka < kb : an < bn;
    };
    std::vector<Episode>& eps = *ended;
    std::vector<DestinationInfo>& opens = *open;
    std::vector<DestinationEpisodes> out;
    std::size_t e = 0, o = 0;
    while (e < eps.size() || o < opens.size()) {
        std::optional<DestinationInfo> d;
        if (o < opens.size() &&
            (e == eps.size() || !before(eps[e].kind, eps[e].destination, opens[o].kind, opens[o].name))) {
            d = std::move(opens[o++]);
        } else {
            auto row = ledger.get_destination(eps[e].kind, eps[e].destination);
            if (!row) return row.error();
            d = std::move(*row);
            if (!d) {
                // Episodes whose destination's row is gone (retention): no
                // listing holds that destination, so neither does the period.
                const Episode& gone = eps[e];
                const DestinationKind kind = gone.kind;
                const std::string name = gone.destination;
                while (e < eps.size() && eps[e].kind == kind && eps[e].destination == name) ++e;
                continue;
            }
        }
        DestinationEpisodes de{std::move(*d), {}};
        for (; e < eps.size() && eps[e].kind == de.destination.kind &&
               eps[e].destination == de.destination.name;
             ++e)
            de.episodes.push_back(std::move(eps[e]));
        if (de.destination.episode) de.episodes.push_back(*de.destination.episode);
        if (!de.episodes.empty()) out.push_back(std::move(de));
    }
    return out;
}

// Shared by the files of core/report (report_internal.hpp).

std::string when_or_dash(const json& j, TimePoint now) {
    auto t = json_time(j);
    return t ? format_when(*t, now) : std::string("-");
}

std::string colour(const RenderOptions& ro, std::string_view code, std::string_view text) {
    if (!ro.colour) return std::string(text);
    return fmt::format("\x1b[{}m{}\x1b[0m", code, text);
}

std::string state_colour(const RenderOptions& ro, const std::string& state) {
    if (state == "escalate") return colour(ro, "1;31", state);
    if (state == "watch") return colour(ro, "33", state);
    return state;
}

// Bounded: replies are logged text; a table cell is not the place for a whole
// paragraph. Counted in characters and never cut inside one.
std::string clip(std::string_view s, std::size_t n) {
    return text::clip(s, n);
}

std::string flag_key_for(DestinationKind kind, std::string_view name) {
    return fmt::format("{}:{}", kind == DestinationKind::relay ? "mx" : "domain", name);
}

json categories_json(CategorySet set) {
    json a = json::array();
    for (auto c : categories_in(set)) a.push_back(std::string(to_string(c)));
    return a;
}

// Rows offset.. (at most limit of them) into doc[key], with what a reader
// needs to know what was left out.
void put_page(json& doc, const char* key, json rows, const Page& p) {
    const auto [first, end] = page_range(rows.size(), p);
    json shown = json::array();
    for (std::size_t i = first; i < end; ++i) shown.push_back(std::move(rows[i]));
    put_page_rows(doc, key, std::move(shown), rows.size(), p);
}

std::pair<std::size_t, std::size_t> page_range(std::size_t total, const Page& p) {
    if (p.offset >= total) return {total, total};
    if (p.limit && *p.limit < total - p.offset) return {p.offset, p.offset + *p.limit};
    return {p.offset, total};
}

void put_page_rows(json& doc, const char* key, json shown, std::size_t total, const Page& p) {
    doc["total"] = total;
    doc["offset"] = p.offset;
    doc["limit"] = p.limit ? json(*p.limit) : json(nullptr);
    doc[key] = std::move(shown);
}

Result<std::map<std::string, Flag>> active_flags_by_key(LedgerReports& ledger, TimePoint now) {
    auto fl = ledger.list_flags(std::nullopt, now, false);
    if (!fl) return fl.error();
    std::map<std::string, Flag> out;
    for (auto& f : *fl) out.emplace(f.destination, f);
    return out;
}

const Flag* find_flag(const std::map<std::string, Flag>& flags, DestinationKind kind,
                      const std::string& name) {
    if (auto it = flags.find(flag_key_for(kind, name)); it != flags.end()) return &it->second;
    if (auto it = flags.find(name); it != flags.end()) return &it->second;
    return nullptr;
}

json destination_json(const DestinationInfo& d, const Flag* flag) {
    json j{{"kind", std::string(kind_name(d.kind))},
           {"name", d.name},
           {"state", d.state.empty() ? std::string("none") : d.state},
           {"state_changed", time_or_null(d.state_changed)},
           {"last_success", time_or_null(d.last_success)},
           {"last_deferral", time_or_null(d.last_deferral)}};
    if (d.episode) {
        const auto& e = *d.episode;
        j["episode_open"] = true;
        j["first_deferral"] = format_rfc3339(e.first_deferral);
        j["last_deferral"] = format_rfc3339(e.last_deferral);
        j["attempts"] = e.attempts;
        j["messages"] = e.messages;
        j["categories"] = categories_json(e.categories);
        j["category"] = primary_category(e.categories);
        j["last_reply"] = e.last_reply;
        j["last_relay"] = e.last_relay;
    } else {
        j["episode_open"] = false;
        j["first_deferral"] = nullptr;
        j["attempts"] = 0;
        j["messages"] = 0;
        j["categories"] = json::array();
        j["category"] = "";
        j["last_reply"] = "";
        j["last_relay"] = "";
    }
    j["flagged"] = flag != nullptr;
    j["flag_reason"] = flag ? flag->reason : std::string();
    j["flag_expires"] = flag ? time_or_null(flag->expires_at) : json(nullptr);
    return j;
}

std::optional<std::int64_t> int_at(const json& j, const char* key) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) return std::nullopt;
    return it->get<std::int64_t>();
}

void fill_local_destination(DestinationInfo& d, const std::optional<json>& engine) {
    if (!engine || !engine->contains("dests") || !(*engine)["dests"].is_array()) return;
    for (const auto& e : (*engine)["dests"]) {
        if (!e.is_object() || e.value("is_mx", false) || !e.contains("name") ||
            e["name"] != kLocalDestination)
            continue;
        auto when = [](const json& ep, const char* key) -> std::optional<TimePoint> {
            auto v = int_at(ep, key);
            if (!v || *v <= 0) return std::nullopt;
            return from_micros(*v);
        };
        if (e.contains("open") && e["open"].is_object()) {
            const json& ep = e["open"];
            Episode x;
            x.kind = DestinationKind::domain;
            x.destination = d.name;
            x.first_deferral = when(ep, "first").value_or(TimePoint{});
            x.last_deferral = when(ep, "last").value_or(x.first_deferral);
            x.attempts = int_at(ep, "attempts").value_or(0);
            x.messages = ep.contains("messages") && ep["messages"].is_array()
                             ? static_cast<std::int64_t>(ep["messages"].size())
                             : 0;
            if (auto it = ep.find("by_category"); it != ep.end() && it->is_object())
                for (const auto& [k, v] : it->items())
                    if (auto c = category_from_string(k);
                        c && v.is_number_integer() && v.get<std::int64_t>() > 0)
                        x.categories |= category_bit(*c);
            x.last_reply = ep.value("reply", "");
            x.last_relay = ep.value("relay", "");
            d.last_deferral = x.last_deferral;
            d.episode = std::move(x);
        } else if (e.contains("history") && e["history"].is_array() && !e["history"].empty() &&
                   e["history"].back().is_object()) {
            d.episode.reset();
            if (auto last = when(e["history"].back(), "last")) d.last_deferral = last;
        }
        return;
    }
}

}  // namespace detail

using namespace detail;

std::string page_footer(const json& doc, std::string_view key) {
    auto it = doc.find(key);
    std::size_t shown = it != doc.end() && it->is_array() ? it->size() : 0;
    // A document without the counts (built by hand) is a whole listing.
    auto total = doc.value("total", shown);
    auto offset = doc.value("offset", std::size_t{0});
    if (total == 0 || shown == total) return {};
    if (shown == 0)
        return fmt::format("showing none of {}: --offset {} is past the end\n", grouped(total), offset);
    std::string out =
        fmt::format("showing {}-{} of {}", grouped(offset + 1), grouped(offset + shown), grouped(total));
    if (offset + shown < total) out += fmt::format("; --offset {} for more", offset + shown);
    return out + "\n";
}

std::optional<DestinationSort> destination_sort_from_string(std::string_view name) noexcept {
    for (auto s :
         {DestinationSort::worst, DestinationSort::name, DestinationSort::age, DestinationSort::deferrals})
        if (to_string(s) == name) return s;
    return std::nullopt;
}

std::string_view to_string(DestinationSort sort) noexcept {
    switch (sort) {
        case DestinationSort::worst: return "worst";
        case DestinationSort::name: return "name";
        case DestinationSort::age: return "age";
        case DestinationSort::deferrals: return "deferrals";
    }
    return "worst";
}

// ---------------------------------------------------------------------------

std::string format_local(TimePoint t) {
    auto secs = std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
    std::time_t tt = static_cast<std::time_t>(secs);
    std::tm tm{};
    if (!localtime_r(&tt, &tm)) return format_rfc3339(t);
    char buf[64];
    std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %Z", &tm);
    return n ? std::string(buf, n) : format_rfc3339(t);
}

std::string format_duration_short(Duration d) {
    using namespace std::chrono;
    auto s = duration_cast<seconds>(d).count();
    if (s < 0) s = -s;
    if (s < 60) return fmt::format("{} s", s);
    if (s < 3600) return fmt::format("{} min", s / 60);
    if (s < 86400) {
        auto h = s / 3600, m = (s % 3600) / 60;
        return m ? fmt::format("{} h {} min", h, m) : fmt::format("{} h", h);
    }
    auto dd = s / 86400, h = (s % 86400) / 3600;
    return h ? fmt::format("{} d {} h", dd, h) : fmt::format("{} d", dd);
}

std::string format_relative(TimePoint t, TimePoint now) {
    using namespace std::chrono;
    auto diff = duration_cast<seconds>(now - t).count();
    bool future = diff < 0;
    auto s = future ? -diff : diff;
    if (s < 60) return future ? "in under a minute" : "just now";
    std::string amount;
    if (s < 3600)
        amount = fmt::format("{} min", s / 60);
    else if (s < 86400)
        amount = fmt::format("{} h", s / 3600);
    else
        amount = fmt::format("{} d", s / 86400);
    return future ? "in " + amount : amount + " ago";
}

std::string format_when(TimePoint t, TimePoint now) {
    return fmt::format("{} ({})", format_local(t), format_relative(t, now));
}

std::string Table::render(bool bold_header) const {
    std::vector<std::size_t> w(headers_.size(), 0);
    // Widths in characters: cells hold UTF-8 and our own colour sequences.
    // A column is padded to at most kMaxPaddedWidth: a longer cell (a
    // hostile destination name of thousands of characters) is printed whole
    // and pushes only its own row out of line, not every row of the listing.
    constexpr std::size_t kMaxPaddedWidth = 80;
    for (std::size_t i = 0; i < headers_.size(); ++i) w[i] = text::display_width(headers_[i]);
    for (const auto& r : rows_)
        for (std::size_t i = 0; i < r.size() && i < w.size(); ++i)
            w[i] = std::max(w[i], std::min(text::display_width(r[i]), kMaxPaddedWidth));
    auto line = [&](const std::vector<std::string>& cells) {
        std::string out;
        for (std::size_t i = 0; i < w.size(); ++i) {
            std::string cell = i < cells.size() ? cells[i] : "";
            if (i + 1 == w.size())
                out += cell;
            else
                out += cell + std::string(w[i] - std::min(text::display_width(cell), w[i]) + 2, ' ');
        }
        while (!out.empty() && out.back() == ' ') out.pop_back();
        return out + "\n";
    };
    std::string head = line(headers_);
    if (bold_header) head = "\x1b[1m" + head.substr(0, head.size() - 1) + "\x1b[0m\n";
    std::string out = head;
    for (const auto& r : rows_) out += line(r);
    return out;
}

// ---------------------------------------------------------------------------

int state_rank(std::string_view state) noexcept {
    if (state == "escalate") return 0;
    if (state == "watch") return 1;
    if (state == "noted") return 2;
    return 3;
}

std::string_view kind_name(DestinationKind kind) noexcept {
    return kind == DestinationKind::relay ? "mx" : "domain";
}

RetentionPolicy retention_from(const config::Config& config) {
    RetentionPolicy p;
    if (config.ledger.retention_finished_messages.count() > 0)
        p.finished_messages = config.ledger.retention_finished_messages;
    if (config.ledger.retention_episodes.count() > 0) p.episodes = config.ledger.retention_episodes;
    if (config.ledger.retention_events.count() > 0) {
        p.seen_events = config.ledger.retention_events;
        p.stale_messages = std::max(p.stale_messages, Duration{config.ledger.retention_events});
    }
    return p;
}

json prune_to_json(const PruneResult& r) {
    return json{{"messages", r.messages},
                {"recipients", r.recipients},
                {"episodes", r.episodes},
                {"flags", r.flags},
                {"seen_events", r.seen_events}};
}

}  // namespace retryguard::report
