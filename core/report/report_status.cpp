// report_status.cpp -- `retryguard status`: the one-screen summary of the
// ledger, the engine's saved state, the follower positions and the wiring.
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
            const std::string id = config::position_id(s);
            auto p = ledger.load_position(id);
            if (!p) return p.error();
            if (*p)
                add_position(**p, true);
            else
                followers[id] = json{
                    {"source", id}, {"offset", nullptr}, {"lines", 0}, {"cursor", ""}, {"configured", true}};
            // A file the policy daemon's user cannot read feeds nothing: say so
            // here, not only as "never read".
            json problem = nullptr;
            if (s.type == config::SourceType::file) {
                const WiringFinding f = check_source_readable(s, in.config->policy.user);
                if (f.level == WiringFinding::Level::error) problem = f.what + "; " + f.fix;
            }
            followers[id]["problem"] = problem;
        }
    json incident = nullptr;
    json engine_now = nullptr;
    auto saved = ledger.get_state("engine");
    if (!saved) return saved.error();
    if (*saved) {
        try {
            // A CBOR state carries no positions: its engine read without the
            // destinations status does not show (detail::saved_engine_reported).
            std::optional<json> reported = detail::saved_engine_reported(**saved);
            json e;
            if (reported) {
                e = std::move(*reported);
            } else {
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
                e = json::parse(view->engine_json);
            }
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

    // Destinations by ladder state, counted by the ledger (the rows are not read).
    auto counts = ledger.count_destinations_by_state();
    if (!counts) return counts.error();
    std::map<std::string, std::int64_t> by_state{{"escalate", 0}, {"watch", 0}, {"noted", 0}};
    for (const auto& [state, n] : *counts) by_state[state.empty() ? "none" : state] += n;
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

}  // namespace retryguard::report
