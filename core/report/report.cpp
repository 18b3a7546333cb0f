// report.cpp -- builds the reporting documents from the ledger and the config
// and renders them for people (the HTML page is html_report.cpp, the incidents
// of a period incidents.cpp). It reads; it never decides policy, and it never
// writes to the ledger (prune and flag clearing are the callers' explicit acts).
#include "retryguard/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <ctime>
#include <map>
#include <set>

#include "report/report_internal.hpp"
#include "retryguard/ingest.hpp"
#include "retryguard/postfix_wiring.hpp"
#include "retryguard/reply.hpp"
#include "retryguard/text.hpp"

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

std::optional<json> saved_engine(LedgerReports& ledger) {
    auto saved = ledger.get_state("engine");
    if (!saved || !*saved) return std::nullopt;
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
    auto list = ledger.list_destinations(DestinationFilter{});
    if (!list) return list.error();
    std::vector<DestinationEpisodes> out;
    for (auto& d : *list) {
        auto h = ledger.episode_history(d.kind, d.name, from, to);
        if (!h) return h.error();
        DestinationEpisodes de{std::move(d), std::move(*h)};
        if (de.destination.episode) de.episodes.push_back(*de.destination.episode);
        if (!de.episodes.empty()) out.push_back(std::move(de));
    }
    return out;
}

}  // namespace detail

namespace {

using detail::grouped;
using detail::json_time;
using detail::primary_category;
using detail::saved_engine;
using detail::str_or;
using detail::time_or_null;

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
    const std::size_t total = rows.size();
    std::size_t end = total;
    if (p.offset >= total)
        end = p.offset;
    else if (p.limit && *p.limit < total - p.offset)
        end = p.offset + *p.limit;
    json shown = json::array();
    for (std::size_t i = p.offset; i < end; ++i) shown.push_back(std::move(rows[i]));
    doc["total"] = total;
    doc["offset"] = p.offset;
    doc["limit"] = p.limit ? json(*p.limit) : json(nullptr);
    doc[key] = std::move(shown);
}

}  // namespace

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
    for (std::size_t i = 0; i < headers_.size(); ++i) w[i] = text::display_width(headers_[i]);
    for (const auto& r : rows_)
        for (std::size_t i = 0; i < r.size() && i < w.size(); ++i)
            w[i] = std::max(w[i], text::display_width(r[i]));
    auto line = [&](const std::vector<std::string>& cells) {
        std::string out;
        for (std::size_t i = 0; i < w.size(); ++i) {
            std::string cell = i < cells.size() ? cells[i] : "";
            if (i + 1 == w.size())
                out += cell;
            else
                out += cell + std::string(w[i] - text::display_width(cell) + 2, ' ');
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

namespace {

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

}  // namespace

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

// ---------------------------------------------------------------------------

Result<json> status(LedgerReports& ledger, const StatusInputs& in, TimePoint now) {
    json doc{{"now", format_rfc3339(now)}};
    // Config.
    json cfg{{"file", in.config_path.empty() ? json(nullptr) : json(in.config_path)}};
    if (in.config && in.config->loaded_at.time_since_epoch().count() != 0)
        cfg["loaded_at"] = format_rfc3339(std::chrono::time_point_cast<Duration>(in.config->loaded_at));
    else
        cfg["loaded_at"] = nullptr;
    doc["config"] = cfg;

    // Followers: the configured sources' saved positions, plus any position the
    // ingest state knows (imports and sources no longer configured).
    std::map<std::string, json> followers;
    auto add_position = [&](const FollowerPosition& p, bool configured) {
        json j{{"source", p.source},
               {"offset", p.offset},
               {"lines", p.lines},
               {"cursor", p.cursor},
               {"configured", configured}};
        followers[p.source] = j;
    };
    if (in.config)
        for (const auto& s : in.config->sources) {
            auto p = ledger.load_position(s.name);
            if (!p) return p.error();
            if (*p)
                add_position(**p, true);
            else
                followers[s.name] = json{{"source", s.name},
                                         {"offset", nullptr},
                                         {"lines", 0},
                                         {"cursor", ""},
                                         {"configured", true}};
            // A file the policy daemon's user cannot read feeds nothing: say so
            // here, not only as "never read".
            json problem = nullptr;
            if (s.type == config::SourceType::file) {
                const WiringFinding f = check_source_readable(s, in.config->policy.user);
                if (f.level == WiringFinding::Level::error) problem = f.what + "; " + f.fix;
            }
            followers[s.name]["problem"] = problem;
        }
    json incident = nullptr;
    json engine_now = nullptr;
    auto saved = ledger.get_state("engine");
    if (!saved) return saved.error();
    if (*saved) {
        try {
            auto view = describe_saved_state(**saved);
            if (!view) throw std::runtime_error(view.error().message);
            for (const auto& p : view->positions) {
                if (p.source.empty() || followers.count(p.source)) continue;
                followers[p.source] = json{{"source", p.source},
                                           {"offset", p.offset},
                                           {"lines", p.lines},
                                           {"cursor", p.cursor},
                                           {"configured", false}};
            }
            auto e = json::parse(view->engine_json);
            if (e.contains("now") && e["now"].is_number_integer())
                engine_now = format_rfc3339(from_micros(e["now"].get<std::int64_t>()));
            incident = detail::open_incident(e);
        } catch (const std::exception& ex) {
            doc["engine_state_error"] = ex.what();
        }
    }
    json fl = json::array();
    for (auto& [k, v] : followers) fl.push_back(v);
    doc["followers"] = fl;
    doc["engine"] = json{{"saved", saved->has_value()},
                         {"event_time", engine_now},
                         {"local_incident_open", incident.is_object()},
                         {"incident", incident}};

    // Ledger.
    auto st = ledger.stats();
    if (!st) return st.error();
    doc["ledger"] = json{{"backend", st->backend},
                         {"location", st->location},
                         {"bytes", st->bytes},
                         {"schema_version", st->schema_version},
                         {"messages", st->messages},
                         {"pending_messages", st->pending_messages},
                         {"recipients", st->recipients},
                         {"destinations", st->destinations},
                         {"open_episodes", st->open_episodes},
                         {"episodes", st->episodes},
                         {"flags", st->flags},
                         {"seen_events", st->seen_events}};

    // Destinations by ladder state.
    auto all = ledger.list_destinations(DestinationFilter{});
    if (!all) return all.error();
    std::map<std::string, std::int64_t> by_state{{"escalate", 0}, {"watch", 0}, {"noted", 0}};
    for (const auto& d : *all) ++by_state[d.state.empty() ? "none" : d.state];
    doc["destinations_by_state"] = by_state;

    auto flags = ledger.list_flags(std::nullopt, now, false);
    if (!flags) return flags.error();
    json fa = json::array();
    for (const auto& f : *flags)
        fa.push_back(json{{"destination", f.destination},
                          {"reason", f.reason},
                          {"set_at", format_rfc3339(f.set_at)},
                          {"expires_at", time_or_null(f.expires_at)}});
    doc["flags"] = fa;

    auto c = ledger.counters();
    auto vc = ledger.verdict_counts();
    if (!vc) return vc.error();
    json verdicts = *vc;
    std::int64_t fail_open = 0;
    for (const auto& [k, n] : *vc)
        if (k.find("fail") != std::string::npos || k.find("error") != std::string::npos) fail_open += n;
    doc["counters"] = json{{"operations", c.operations},   {"failures", c.failures},
                           {"unavailable", c.unavailable}, {"reconnects", c.reconnects},
                           {"verdicts", verdicts},         {"fail_open_or_error_verdicts", fail_open}};
    return doc;
}

std::string render_status(const json& raw, const RenderOptions& ro) {
    // Outside text is rendered for the terminal once, before any of it is formatted.
    const json doc = text::terminal_document(raw);
    std::string out;
    auto heading = [&](std::string_view h) { out += "\n" + colour(ro, "1", h) + "\n"; };
    const auto& cfg = doc.at("config");
    out += fmt::format("Config:    {}", cfg.at("file").is_string() ? cfg["file"].get<std::string>()
                                                                   : std::string("(built-in defaults)"));
    if (auto t = json_time(cfg.at("loaded_at"))) out += fmt::format(", loaded {}", format_when(*t, ro.now));
    out += "\n";
    const auto& l = doc.at("ledger");
    out += fmt::format("Ledger:    {} {} ({} bytes, schema {})\n", l.at("backend").get<std::string>(),
                       l.at("location").get<std::string>(), l.at("bytes").get<std::int64_t>(),
                       l.at("schema_version").get<int>());
    out += fmt::format(
        "           {} messages ({} pending), {} recipients, {} destinations, {} open episodes, {} ended\n",
        l.at("messages").get<std::int64_t>(), l.at("pending_messages").get<std::int64_t>(),
        l.at("recipients").get<std::int64_t>(), l.at("destinations").get<std::int64_t>(),
        l.at("open_episodes").get<std::int64_t>(), l.at("episodes").get<std::int64_t>());
    const auto& e = doc.at("engine");
    if (auto t = json_time(e.at("event_time")))
        out += fmt::format("Engine:    last event {}\n", format_when(*t, ro.now));
    else
        out += "Engine:    no saved state\n";
    if (e.at("local_incident_open").get<bool>()) {
        const auto& i = e.at("incident");
        out += colour(ro, "1;31",
                      fmt::format("Local-outbound incident OPEN ({}) since {}", str_or(i, "category"),
                                  when_or_dash(i.at("started"), ro.now))) +
               "\n";
        // Its deferrals are counted here, not against the destinations it hit.
        out += fmt::format("           {} deferrals to {} destinations, {} taken back when it opened\n",
                           i.value("deferrals", std::int64_t{0}), i.at("destinations").size(),
                           i.value("absorbed", std::int64_t{0}));
    } else {
        out += "Local-outbound incident: none\n";
    }

    heading("Followers");
    const auto& fl = doc.at("followers");
    if (fl.empty()) {
        out += "  (none)\n";
    } else {
        Table t({"SOURCE", "OFFSET", "LINES", "CONFIGURED"});
        std::string problems;
        for (const auto& f : fl) {
            t.add({f.at("source").get<std::string>(),
                   f.at("offset").is_null() ? std::string("never read")
                                            : std::to_string(f["offset"].get<std::uint64_t>()),
                   std::to_string(f.at("lines").get<std::uint64_t>()),
                   f.at("configured").get<bool>() ? "yes" : "no"});
            if (f.contains("problem") && f["problem"].is_string())
                problems += "  ! " + f.at("source").get<std::string>() + ": " +
                            f["problem"].get<std::string>() + "\n";
        }
        out += t.render();
        out += problems;
    }

    heading("Destinations by state");
    {
        Table t({"STATE", "COUNT"});
        for (auto& [k, v] : doc.at("destinations_by_state").items())
            t.add({state_colour(ro, k), std::to_string(v.get<std::int64_t>())});
        out += t.render();
    }

    heading("Active flags");
    const auto& flags = doc.at("flags");
    if (flags.empty()) {
        out += "  (none)\n";
    } else {
        Table t({"DESTINATION", "SET", "EXPIRES", "REASON"});
        for (const auto& f : flags)
            t.add({f.at("destination").get<std::string>(), when_or_dash(f.at("set_at"), ro.now),
                   when_or_dash(f.at("expires_at"), ro.now), str_or(f, "reason")});
        out += t.render();
    }

    heading("Counters");
    const auto& c = doc.at("counters");
    out += fmt::format("  ledger operations {}, failures {}, unavailable (fail open) {}, reconnects {}\n",
                       c.at("operations").get<std::uint64_t>(), c.at("failures").get<std::uint64_t>(),
                       c.at("unavailable").get<std::uint64_t>(), c.at("reconnects").get<std::uint64_t>());
    const auto& v = c.at("verdicts");
    if (v.empty()) {
        out += "  verdicts: none recorded\n";
    } else {
        std::string line = "  verdicts:";
        for (auto& [k, n] : v.items()) line += fmt::format(" {}={}", k, n.get<std::int64_t>());
        out += line + "\n";
    }
    return out;
}

// ---------------------------------------------------------------------------

namespace {

std::optional<std::int64_t> int_at(const json& j, const char* key) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) return std::nullopt;
    return it->get<std::int64_t>();
}

json micros_time(const json& j, const char* key) {
    auto v = int_at(j, key);
    return v && *v > 0 ? json(format_rfc3339(from_micros(*v))) : json(nullptr);
}

// The category with the most deferrals in an engine episode ("" when none).
std::string dominant_of(const json& ep) {
    std::string best;
    std::int64_t n = 0;
    if (auto it = ep.find("by_category"); it != ep.end() && it->is_object())
        for (auto& [k, v] : it->items())
            if (v.is_number_integer() && v.get<std::int64_t>() > n) best = k, n = v.get<std::int64_t>();
    return best;
}

// What the engine's saved state knows about escalations: when the open one of
// each destination opened, and the closed ones (newest closed first) that
// closed at or after `from`.
struct EngineEscalations {
    std::map<std::string, json> opened;  // engine key ("example.com", "mx:host") -> time
    std::vector<json> closed;
};

EngineEscalations engine_escalations(LedgerReports& ledger, std::optional<TimePoint> from, TimePoint now) {
    EngineEscalations out;
    auto e = saved_engine(ledger);
    if (!e || !e->contains("dests") || !(*e)["dests"].is_array()) return out;
    for (const auto& d : (*e)["dests"]) {
        if (!d.is_object() || !d.contains("name") || !d["name"].is_string()) continue;
        const std::string key = d["name"].get<std::string>();
        const bool mx = d.value("is_mx", false);
        if (d.contains("open") && d["open"].is_object() && d["open"].value("ladder", "") == "escalate")
            out.opened[key] = micros_time(d["open"], "escalated_at");
        if (!from || !d.contains("history") || !d["history"].is_array()) continue;
        for (const auto& ep : d["history"]) {
            if (!ep.is_object() || ep.value("peak", "") != "escalate") continue;
            auto ended = int_at(ep, "ended");
            if (!ended || *ended <= 0 || from_micros(*ended) < *from || from_micros(*ended) > now) continue;
            json j{{"kind", mx ? "mx" : "domain"},
                   {"name", mx && key.starts_with("mx:") ? key.substr(3) : key},
                   {"status", "closed"},
                   {"opened", micros_time(ep, "escalated_at")},
                   {"closed", micros_time(ep, "ended")},
                   {"first_deferral", micros_time(ep, "first")},
                   {"last_deferral", micros_time(ep, "last")},
                   {"attempts", int_at(ep, "attempts").value_or(0)},
                   {"messages",
                    ep.contains("messages") && ep["messages"].is_array() ? ep["messages"].size() : 0},
                   {"category", dominant_of(ep)},
                   {"last_reply", ep.value("reply", "")},
                   {"last_relay", ep.value("relay", "")}};
            out.closed.push_back(std::move(j));
        }
    }
    std::stable_sort(out.closed.begin(), out.closed.end(), [](const json& a, const json& b) {
        return a.at("closed").get<std::string>() > b.at("closed").get<std::string>();
    });
    return out;
}

}  // namespace

Result<json> escalations(LedgerReports& ledger, const config::Config& config, TimePoint now,
                         const EscalationQuery& query) {
    DestinationQuery q;
    q.state = "escalate";
    auto d = destinations(ledger, q, now);
    if (!d) return d.error();
    std::optional<TimePoint> from;
    if (query.since) from = now - *query.since;
    EngineEscalations known = engine_escalations(ledger, from, now);
    json arr = json::array();
    for (auto dj : d->at("destinations")) {
        const std::string engine_key =
            (dj.at("kind").get<std::string>() == "mx" ? "mx:" : "") + dj.at("name").get<std::string>();
        auto op = known.opened.find(engine_key);
        dj["status"] = "open";
        dj["opened"] = op != known.opened.end() ? op->second : json(nullptr);
        dj["closed"] = nullptr;
        std::string name = dj.at("name").get<std::string>();
        bool mx = dj.at("kind").get<std::string>() == "mx";
        std::string relay = dj.at("last_relay").get<std::string>();
        // Relay "mx1.example.net[192.0.2.1]:25": the host name is what MX rules match.
        std::string relay_host = relay.substr(0, relay.find('['));
        auto res = mx ? config.resolve("", name) : config.resolve(name, relay_host);
        dj["contact"] = res.settings ? res.settings->contact : std::string();
        dj["rule"] = res.reason();
        std::string cat = dj.at("category").get<std::string>();
        if (auto c = category_from_string(cat)) {
            dj["fault"] = std::string(info(*c).fault);
            dj["guidance"] = std::string(info(*c).guidance);
            if (res.settings)
                dj["escalate_after_seconds"] = std::chrono::duration_cast<std::chrono::seconds>(
                                                   res.settings->thresholds(*c).escalate_after)
                                                   .count();
        }
        dj["note"] = escalation_note(dj);
        arr.push_back(std::move(dj));
    }
    const std::size_t open = arr.size();
    for (auto& c : known.closed) arr.push_back(std::move(c));
    json doc{
        {"now", format_rfc3339(now)},
        {"since", query.since ? json(std::chrono::duration_cast<std::chrono::seconds>(*query.since).count())
                              : json(nullptr)},
        {"open", open}};
    put_page(doc, "escalations", std::move(arr), query.page);
    return doc;
}

std::string escalation_note(const json& raw) {
    // The note is plain text for a person (and an email): every field of it is
    // rendered like terminal output, so a reply cannot add lines or headers.
    const json e = text::terminal_document(raw);
    std::string name = e.at("name").get<std::string>();
    bool mx = e.at("kind").get<std::string>() == "mx";
    std::string out;
    out +=
        fmt::format("Subject: Mail to {} has been deferred since {}\n\n", name, str_or(e, "first_deferral"));
    out += "Hello postmaster,\n\n";
    out += fmt::format("our mail server has been unable to deliver mail to {} {}.\n",
                       mx ? "the mail server" : "the domain", name);
    out += fmt::format("First deferral:  {}\n", str_or(e, "first_deferral"));
    out += fmt::format("Last deferral:   {}\n", str_or(e, "last_deferral"));
    out += fmt::format("Attempts:        {}\n", e.at("attempts").get<std::int64_t>());
    out += fmt::format("Messages:        {}\n", e.at("messages").get<std::int64_t>());
    out += fmt::format("Answering host:  {}\n", str_or(e, "last_relay"));
    out += fmt::format("Reply received:  {}\n", str_or(e, "last_reply"));
    if (e.contains("guidance"))
        out += fmt::format("\nThis reply indicates: {} (category {}).\n", str_or(e, "fault"),
                           str_or(e, "category"));
    out += "\nCould you please have a look? The messages stay queued and will be retried.\n";
    return out;
}

std::string render_escalations(const json& raw, const RenderOptions& ro) {
    // Outside text is rendered for the terminal once, before any of it is formatted.
    const json doc = text::terminal_document(raw);
    const auto& arr = doc.at("escalations");
    if (doc.value("total", arr.size()) == 0)
        return doc.value("since", json()).is_null()
                   ? "No destination is escalated.\n"
                   : "No destination is escalated, and none was in that period.\n";
    std::string out;
    Table closed({"KIND", "DESTINATION", "OPENED", "CLOSED", "CATEGORY", "ATTEMPTS", "LAST REPLY"});
    for (const auto& e : arr) {
        if (e.value("status", "open") == "closed") {
            closed.add({e.at("kind").get<std::string>(), e.at("name").get<std::string>(),
                        when_or_dash(e.at("opened"), ro.now), when_or_dash(e.at("closed"), ro.now),
                        str_or(e, "category"), std::to_string(e.at("attempts").get<std::int64_t>()),
                        clip(str_or(e, "last_reply"), 70)});
            continue;
        }
        out += colour(ro, "1;31",
                      fmt::format("== {} {} ==", e.at("kind").get<std::string>(),
                                  e.at("name").get<std::string>())) +
               "\n";
        out += fmt::format("Deferred since {}, {} attempts, {} messages\n",
                           when_or_dash(e.at("first_deferral"), ro.now), e.at("attempts").get<std::int64_t>(),
                           e.at("messages").get<std::int64_t>());
        out +=
            fmt::format("Contact: {}\n", str_or(e, "contact", "(none configured: destinations[].contact)"));
        if (e.contains("guidance")) out += fmt::format("Guidance: {}\n", e.at("guidance").get<std::string>());
        // Rebuilt from the rendered fields: the document's note holds line breaks
        // that terminal_document showed as \x0a.
        out += "\n" + escalation_note(e) + "\n";
    }
    if (closed.size() > 0) out += colour(ro, "1", "Closed escalations") + "\n" + closed.render(ro.colour);
    return out + page_footer(doc, "escalations");
}

// ---------------------------------------------------------------------------

namespace {

json recipient_json(const RecipientInfo& r, const Classifier& classifier, const config::Config& config,
                    const std::optional<TimePoint>& arrival, bool message_finished,
                    const ExplainOptions& opt) {
    json j{{"address", r.address},
           {"state", std::string(to_string(r.state))},
           {"attempts", r.attempts},
           {"first_attempt", time_or_null(r.first_attempt)},
           {"first_deferral", time_or_null(r.first_deferral)},
           {"last_attempt", time_or_null(r.last_attempt)},
           {"reply_code", r.reply_code},
           {"enhanced", r.enhanced},
           {"reply", r.reply_text},
           {"relay", r.relay},
           {"stage", r.stage}};
    Category cat = r.category;
    std::optional<std::chrono::seconds> retry_after;
    if (!r.reply_text.empty()) {
        auto c = classifier.classify_reason(r.reply_text, r.enhanced);
        cat = c.category;
        retry_after = c.retry_after;
        j["classified_by"] = std::string(to_string(c.decided_by));
        j["rule"] = std::string(c.rule);
    }
    j["category"] = std::string(to_string(cat));
    j["fault"] = std::string(info(cat).fault);
    j["guidance"] = std::string(info(cat).guidance);
    json next = nullptr;
    if (r.state == RecipientState::pending && !message_finished) {
        std::string relay_host = r.relay.substr(0, r.relay.find('['));
        auto res = config.resolve(domain_of(r.address), relay_host);
        next = json::object();
        if (r.last_attempt) {
            Duration gap =
                retry_after ? std::chrono::duration_cast<Duration>(*retry_after) : opt.retry_estimate;
            next["retry_estimate"] = format_rfc3339(*r.last_attempt + gap);
        } else {
            next["retry_estimate"] = nullptr;
        }
        if (r.first_deferral && res.settings)
            next["escalation"] =
                format_rfc3339(*r.first_deferral + res.settings->thresholds(cat).escalate_after);
        else
            next["escalation"] = nullptr;
        next["expiry"] = arrival ? json(format_rfc3339(*arrival + opt.queue_lifetime)) : json(nullptr);
        next["rule"] = res.reason();
    }
    j["next"] = next;
    return j;
}

json message_json(const MessageInfo& m) {
    return json{{"queue_id", m.queue_id},
                {"previous_queue_id", m.previous_queue_id},
                {"next_queue_id", m.next_queue_id},
                {"message_id", m.message_id},
                {"sender", m.sender},
                {"size", m.size},
                {"nrcpt", m.nrcpt},
                {"arrival", time_or_null(m.arrival)},
                {"state", std::string(to_string(m.state))},
                {"updated", format_rfc3339(m.updated)},
                {"finished", time_or_null(m.finished)},
                {"host", m.host}};
}

}  // namespace

Result<json> explain(LedgerReports& ledger, const Classifier& classifier, const config::Config& config,
                     std::string_view query, TimePoint now, const ExplainOptions& opt) {
    constexpr std::size_t kMaxChain = 32;  // postsuper -r loops are not expected; bound anyway
    constexpr std::size_t kMaxMessages = 50;
    std::string matched_by;
    std::vector<std::string> start_ids;
    auto direct = ledger.get_message(query);
    if (!direct) return direct.error();
    if (*direct) {
        matched_by = "queue_id";
        start_ids.push_back((*direct)->queue_id);
    }
    if (start_ids.empty()) {
        auto by_id = ledger.find_messages_by_message_id(normalize_message_id(query));
        if (!by_id) return by_id.error();
        for (const auto& m : *by_id) start_ids.push_back(m.queue_id);
        if (!start_ids.empty()) matched_by = "message_id";
    }
    if (start_ids.empty() && query.find('@') != std::string_view::npos) {
        auto by_addr = ledger.find_recipients_by_address(normalize_address(query), kMaxMessages);
        if (!by_addr) return by_addr.error();
        for (const auto& r : *by_addr)
            if (std::find(start_ids.begin(), start_ids.end(), r.queue_id) == start_ids.end())
                start_ids.push_back(r.queue_id);
        if (!start_ids.empty()) matched_by = "address";
    }
    if (start_ids.empty())
        return make_error(
            ErrorKind::invalid_input,
            fmt::format("no message in the ledger for '{}' (queue id, Message-ID or address)", query));

    // Group by requeue chain: walk back to the first queue id, then forward.
    std::set<std::string> seen;
    json chains = json::array();
    for (const auto& start : start_ids) {
        if (seen.count(start) || chains.size() >= kMaxMessages) continue;
        std::string head = start;
        for (std::size_t i = 0; i < kMaxChain; ++i) {
            auto m = ledger.get_message(head);
            if (!m) return m.error();
            if (!*m || (*m)->previous_queue_id.empty()) break;
            auto prev = ledger.get_message((*m)->previous_queue_id);
            if (!prev) return prev.error();
            if (!*prev) break;
            head = (*m)->previous_queue_id;
        }
        json chain = json::array();
        json timeline = json::array();
        std::optional<TimePoint> arrival;
        std::string qid = head;
        for (std::size_t i = 0; i < kMaxChain && !qid.empty() && !seen.count(qid); ++i) {
            seen.insert(qid);
            auto m = ledger.get_message(qid);
            if (!m) return m.error();
            if (!*m) break;
            const auto& mi = **m;
            if (!arrival) arrival = mi.arrival;
            json mj = message_json(mi);
            auto rc = ledger.get_recipients(qid);
            if (!rc) return rc.error();
            json rj = json::array();
            for (const auto& r : *rc)
                rj.push_back(recipient_json(r, classifier, config, arrival, mi.finished.has_value(), opt));
            mj["recipients"] = rj;
            if (mi.arrival)
                timeline.push_back(json{{"time", format_rfc3339(*mi.arrival)},
                                        {"queue_id", qid},
                                        {"what", i == 0 ? "submitted" : "requeued (new queue id)"},
                                        {"detail", mi.sender.empty() ? "" : "from " + mi.sender}});
            for (const auto& r : rj) {
                if (r.at("first_deferral").is_string())
                    timeline.push_back(json{{"time", r["first_deferral"]},
                                            {"queue_id", qid},
                                            {"what", "first deferral"},
                                            {"detail", r["address"].get<std::string>()}});
                if (r.at("last_attempt").is_string())
                    timeline.push_back(json{
                        {"time", r["last_attempt"]},
                        {"queue_id", qid},
                        {"what", fmt::format("attempt {} (last recorded), recipient {}",
                                             r["attempts"].get<int>(), r["state"].get<std::string>())},
                        {"detail", fmt::format("{} via {}: {} [{}]", r["address"].get<std::string>(),
                                               r["relay"].get<std::string>(), r["reply"].get<std::string>(),
                                               r["category"].get<std::string>())}});
            }
            if (mi.finished)
                timeline.push_back(
                    json{{"time", format_rfc3339(*mi.finished)},
                         {"queue_id", qid},
                         {"what", std::string(to_string(mi.state))},
                         {"detail", mi.next_queue_id.empty() ? "" : "now " + mi.next_queue_id}});
            chain.push_back(std::move(mj));
            qid = mi.next_queue_id;
        }
        // Other copies with the same Message-ID that were refused (resends).
        json refused = json::array();
        if (!chain.empty()) {
            std::string mid = chain.front().at("message_id").get<std::string>();
            if (!mid.empty()) {
                auto copies = ledger.find_messages_by_message_id(mid);
                if (!copies) return copies.error();
                for (const auto& c : *copies) {
                    if (seen.count(c.queue_id)) continue;
                    if (c.state == MessageState::rejected) {
                        refused.push_back(message_json(c));
                        seen.insert(c.queue_id);
                        timeline.push_back(json{{"time", format_rfc3339(c.finished.value_or(c.updated))},
                                                {"queue_id", c.queue_id},
                                                {"what", "resend refused"},
                                                {"detail", "same Message-ID"}});
                    }
                }
            }
        }
        std::stable_sort(timeline.begin(), timeline.end(), [](const json& a, const json& b) {
            return a.at("time").get<std::string>() < b.at("time").get<std::string>();
        });
        chains.push_back(json{{"queue_ids",
                               [&] {
                                   json ids = json::array();
                                   for (const auto& m : chain) ids.push_back(m.at("queue_id"));
                                   return ids;
                               }()},
                              {"messages", chain},
                              {"refused_resends", refused},
                              {"timeline", timeline}});
    }
    return json{{"now", format_rfc3339(now)},
                {"query", std::string(query)},
                {"matched_by", matched_by},
                {"queue_lifetime_seconds",
                 std::chrono::duration_cast<std::chrono::seconds>(opt.queue_lifetime).count()},
                {"chains", chains}};
}

std::string render_explain(const json& raw, const RenderOptions& ro) {
    // Outside text is rendered for the terminal once, before any of it is formatted.
    const json doc = text::terminal_document(raw);
    std::string out;
    for (const auto& c : doc.at("chains")) {
        std::string ids;
        for (const auto& q : c.at("queue_ids")) ids += (ids.empty() ? "" : " -> ") + q.get<std::string>();
        out += colour(ro, "1", "Message " + ids) + "\n";
        const auto& first = c.at("messages").at(0);
        out += fmt::format("  Message-ID: {}\n  Sender:     {}\n", str_or(first, "message_id"),
                           str_or(first, "sender"));
        // The host holding the chain's queue ids (a fleet shares one ledger):
        // one name when they agree, else each queue id with its own.
        std::vector<std::pair<std::string, std::string>> held;  // queue id, host
        for (const auto& m : c.at("messages"))
            if (auto h = str_or(m, "host", ""); !h.empty()) held.emplace_back(str_or(m, "queue_id", ""), h);
        if (!held.empty()) {
            const bool one = std::all_of(held.begin(), held.end(),
                                         [&](const auto& p) { return p.second == held.front().second; });
            std::string hosts = one ? held.front().second : std::string();
            for (std::size_t i = 0; !one && i < held.size(); ++i)
                hosts += fmt::format("{}{} on {}", i ? ", " : "", held[i].first, held[i].second);
            out += fmt::format("  Host:       {}\n", hosts);
        }
        out += "\nTimeline:\n";
        for (const auto& e : c.at("timeline")) {
            auto t = json_time(e.at("time"));
            out += fmt::format(
                "  {}  {}  {}{}\n", t ? format_when(*t, ro.now) : std::string("-"),
                e.at("queue_id").get<std::string>(), e.at("what").get<std::string>(),
                e.at("detail").get<std::string>().empty() ? "" : ": " + e.at("detail").get<std::string>());
        }
        for (const auto& m : c.at("messages")) {
            for (const auto& r : m.at("recipients")) {
                out += fmt::format("\n  {} ({}, {} attempts, queue id {})\n",
                                   r.at("address").get<std::string>(), r.at("state").get<std::string>(),
                                   r.at("attempts").get<int>(), m.at("queue_id").get<std::string>());
                if (!r.at("reply").get<std::string>().empty())
                    out += fmt::format("    reply:    {}\n", r.at("reply").get<std::string>());
                out += fmt::format("    category: {} ({})\n", r.at("category").get<std::string>(),
                                   r.at("fault").get<std::string>());
                out += fmt::format("    guidance: {}\n", r.at("guidance").get<std::string>());
                const auto& n = r.at("next");
                if (n.is_object()) {
                    out += fmt::format("    next retry (estimate): {}\n",
                                       when_or_dash(n.at("retry_estimate"), ro.now));
                    out += fmt::format("    escalation:            {}\n",
                                       when_or_dash(n.at("escalation"), ro.now));
                    out +=
                        fmt::format("    expiry:                {}\n", when_or_dash(n.at("expiry"), ro.now));
                }
            }
        }
        for (const auto& r : c.at("refused_resends"))
            out += fmt::format("\n  Refused resend: queue id {} at {}\n", r.at("queue_id").get<std::string>(),
                               when_or_dash(r.at("finished"), ro.now));
        out += "\n";
    }
    // What retryguard-policyd did about these messages (core/actions/), when the caller added it.
    if (doc.contains("actions") && !doc.at("actions").empty()) {
        out += "Actions:\n";
        for (const auto& a : doc.at("actions"))
            out += fmt::format("  {}  {} {}: {}\n", a.at("time").get<std::string>(),
                               a.at("what").get<std::string>(), a.at("key").get<std::string>(),
                               a.at("detail").get<std::string>());
        out += "\n";
    }
    return out;
}

// ---------------------------------------------------------------------------

namespace {
// qshape's default buckets, in minutes: T 5 10 20 40 80 160 320 640 1280 1280+.
constexpr std::array<int, 9> kBucketMinutes = {5, 10, 20, 40, 80, 160, 320, 640, 1280};
std::size_t bucket_of(Duration age) {
    auto m = std::chrono::duration_cast<std::chrono::minutes>(age).count();
    for (std::size_t i = 0; i < kBucketMinutes.size(); ++i)
        if (m < kBucketMinutes[i]) return i;
    return kBucketMinutes.size();
}
}  // namespace

Result<json> queue(std::string_view text, const Classifier& classifier, LedgerReports* ledger, TimePoint now,
                   const Page& page) {
    struct Dest {
        std::int64_t total = 0;
        std::vector<std::int64_t> buckets = std::vector<std::int64_t>(kBucketMinutes.size() + 1, 0);
        std::map<std::string, std::int64_t> categories;
    };
    std::map<std::string, Dest> dests;
    std::map<std::string, std::int64_t> by_category;
    std::map<std::string, std::int64_t> by_queue;
    std::int64_t messages = 0, recipients = 0, bad_lines = 0;
    std::size_t lines = 0;
    std::size_t pos = 0;
    while (pos < text.size()) {
        auto nl = text.find('\n', pos);
        std::string_view line =
            text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
        pos = nl == std::string_view::npos ? text.size() : nl + 1;
        if (line.empty()) continue;
        if (++lines > kMaxQueueLines)
            return make_error(ErrorKind::limit,
                              fmt::format("postqueue output has more than {} lines", kMaxQueueLines));
        if (line.size() > kMaxQueueLineBytes) {
            ++bad_lines;
            continue;
        }
        json m = json::parse(line, nullptr, false);
        if (m.is_discarded() || !m.is_object() || !m.contains("recipients") || !m["recipients"].is_array()) {
            ++bad_lines;
            continue;
        }
        ++messages;
        std::string qname = m.value("queue_name", "");
        ++by_queue[qname];
        TimePoint arrival = now;
        if (m.contains("arrival_time") && m["arrival_time"].is_number_integer())
            arrival = TimePoint{std::chrono::seconds(m["arrival_time"].get<std::int64_t>())};
        std::size_t b = bucket_of(now - arrival);
        for (const auto& r : m["recipients"]) {
            if (!r.is_object()) continue;
            ++recipients;
            std::string domain = domain_of(r.value("address", ""));
            if (domain.empty()) domain = "(local)";
            std::string reason = r.value("delay_reason", "");
            std::string cat = "none";
            if (!reason.empty())
                cat = std::string(to_string(classifier.classify_reason(reason).category));
            else if (qname == "active" || qname == "incoming")
                cat = "in-flight";
            else if (qname == "hold")
                cat = "on-hold";
            auto& d = dests[domain];
            ++d.total;
            ++d.buckets[b];
            ++d.categories[cat];
            ++by_category[cat];
        }
    }
    json labels = json::array();
    for (int m : kBucketMinutes) labels.push_back(fmt::format("<{}m", m));
    labels.push_back(fmt::format(">={}m", kBucketMinutes.back()));
    std::vector<std::pair<std::string, Dest>> sorted(dests.begin(), dests.end());
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto& a, const auto& b) { return a.second.total > b.second.total; });
    // The ledger is asked only about the rows shown.
    json da = json::array();
    for (std::size_t i = 0; i < sorted.size(); ++i) {
        const auto& [name, d] = sorted[i];
        json j{{"domain", name}, {"total", d.total}, {"buckets", d.buckets}, {"categories", d.categories}};
        j["state"] = nullptr;
        const bool shown = i >= page.offset && (!page.limit || i - page.offset < *page.limit);
        if (ledger && shown && name != "(local)") {
            auto info = ledger->get_destination(DestinationKind::domain, name);
            if (!info) return info.error();
            if (*info) j["state"] = (*info)->state.empty() ? std::string("none") : (*info)->state;
        }
        da.push_back(std::move(j));
    }
    json ca = json::array();
    for (const auto& [cat, n] : by_category) {
        json j{{"category", cat}, {"recipients", n}};
        if (auto c = category_from_string(cat)) {
            j["fault"] = std::string(info(*c).fault);
            j["guidance"] = std::string(info(*c).guidance);
        } else {
            j["fault"] = "";
            j["guidance"] = cat == "in-flight" ? "Being delivered now; nothing to do."
                            : cat == "on-hold" ? "On hold: released only by an operator (postsuper -H)."
                                               : "";
        }
        ca.push_back(std::move(j));
    }
    json doc{{"now", format_rfc3339(now)},
             {"messages", messages},
             {"recipients", recipients},
             {"bad_lines", bad_lines},
             {"queues", by_queue},
             {"bucket_labels", labels},
             {"categories", ca}};
    put_page(doc, "destinations", std::move(da), page);
    return doc;
}

std::string render_queue(const json& raw, const RenderOptions& ro) {
    // Outside text is rendered for the terminal once, before any of it is formatted.
    const json doc = text::terminal_document(raw);
    std::string out =
        fmt::format("{} messages, {} recipients in the queue", doc.at("messages").get<std::int64_t>(),
                    doc.at("recipients").get<std::int64_t>());
    if (doc.at("bad_lines").get<std::int64_t>() > 0)
        out += fmt::format(" ({} unreadable lines skipped)", doc.at("bad_lines").get<std::int64_t>());
    out += "\n\n";
    if (doc.at("destinations").empty() && doc.value("total", std::size_t{0}) == 0) return out;
    std::vector<std::string> head{"DOMAIN", "STATE", "TOTAL"};
    for (const auto& l : doc.at("bucket_labels")) head.push_back(l.get<std::string>());
    head.push_back("CATEGORIES");
    Table t(head);
    for (const auto& d : doc.at("destinations")) {
        std::vector<std::string> row{
            d.at("domain").get<std::string>(),
            d.at("state").is_string() ? state_colour(ro, d["state"].get<std::string>()) : "-",
            std::to_string(d.at("total").get<std::int64_t>())};
        for (const auto& b : d.at("buckets")) row.push_back(std::to_string(b.get<std::int64_t>()));
        std::string cats;
        for (auto& [k, v] : d.at("categories").items())
            cats += (cats.empty() ? "" : " ") + fmt::format("{}={}", k, v.get<std::int64_t>());
        row.push_back(cats);
        t.add(std::move(row));
    }
    if (t.size() > 0) out += t.render(ro.colour);
    out += page_footer(doc, "destinations");
    out += "\n" + colour(ro, "1", "By category") + "\n";
    for (const auto& c : doc.at("categories")) {
        out += fmt::format(
            "  {} ({} recipients){}\n", c.at("category").get<std::string>(),
            c.at("recipients").get<std::int64_t>(),
            c.at("fault").get<std::string>().empty() ? "" : ": " + c.at("fault").get<std::string>());
        if (!c.at("guidance").get<std::string>().empty())
            out += fmt::format("    {}\n", c.at("guidance").get<std::string>());
    }
    return out;
}

// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------

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
