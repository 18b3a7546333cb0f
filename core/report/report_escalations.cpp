// report_escalations.cpp -- `retryguard escalations`: the open and closed
// escalations with the literal reply text, ready to hand to a recipient's admin.
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

namespace {

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

EngineEscalations engine_escalations(const std::optional<json>& e, std::optional<TimePoint> from,
                                     TimePoint now) {
    EngineEscalations out;
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
                   {"side", !mx && key == kLocalDestination ? "local" : "remote"},
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
    return detail::escalations_with(ledger, config, now, query, saved_engine(ledger));
}

namespace detail {

Result<json> escalations_with(LedgerReports& ledger, const config::Config& config, TimePoint now,
                              const EscalationQuery& query, const std::optional<json>& engine) {
    DestinationQuery q;
    q.state = "escalate";
    auto d = destinations_with(ledger, q, now, &engine);
    if (!d) return d.error();
    std::optional<TimePoint> from;
    if (query.since) from = now - *query.since;
    EngineEscalations known = engine_escalations(engine, from, now);
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
        const bool local = !mx && name == kLocalDestination;
        dj["side"] = local ? "local" : "remote";
        // The sending Postfix's own failures: the defaults' ladder, no
        // destination rule and no remote contact.
        auto res = mx ? config.resolve("", name) : config.resolve(local ? "" : name, local ? "" : relay_host);
        dj["contact"] = res.settings && !local ? res.settings->contact : std::string();
        dj["rule"] = local ? std::string() : res.reason();
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

}  // namespace detail

std::string escalation_note(const json& raw) {
    // The note is plain text for a person (and an email): every field of it is
    // rendered like terminal output, so a reply cannot add lines or headers.
    const json e = text::terminal_document(raw);
    std::string name = e.at("name").get<std::string>();
    bool mx = e.at("kind").get<std::string>() == "mx";
    std::string out;
    if (e.value("side", "remote") == "local") {
        // No remote postmaster can fix the sending side: the note is for this
        // host's own administrator.
        out += fmt::format("Subject: This mail server has failed to send mail itself since {}\n\n",
                           str_or(e, "first_deferral"));
        out += "To this mail server's administrator,\n\n";
        out += "the sending Postfix has been failing on its own side (no receiving server was reached\n";
        out += "or blamed), so nobody at a receiving side can fix it.\n";
        out += fmt::format("First failure:   {}\n", str_or(e, "first_deferral"));
        out += fmt::format("Last failure:    {}\n", str_or(e, "last_deferral"));
        out += fmt::format("Attempts:        {}\n", e.at("attempts").get<std::int64_t>());
        out += fmt::format("Messages:        {}\n", e.at("messages").get<std::int64_t>());
        out += fmt::format("Last error:      {}\n", str_or(e, "last_reply"));
        out +=
            "\nLook for this error in the mail log and fix its cause on this host. The messages stay\n"
            "queued and will be retried; do not resend them.\n";
        return out;
    }
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
        const bool local = e.value("side", "remote") == "local";
        out += colour(ro, "1;31",
                      local ? fmt::format("== {} (the sending Postfix itself) ==",
                                          e.at("name").get<std::string>())
                            : fmt::format("== {} {} ==", e.at("kind").get<std::string>(),
                                          e.at("name").get<std::string>())) +
               "\n";
        out += fmt::format("{} since {}, {} attempts, {} messages\n", local ? "Failing" : "Deferred",
                           when_or_dash(e.at("first_deferral"), ro.now), e.at("attempts").get<std::int64_t>(),
                           e.at("messages").get<std::int64_t>());
        if (local)
            out += "Contact: this host's own administrator (the sending Postfix's own failures)\n";
        else
            out += fmt::format("Contact: {}\n",
                               str_or(e, "contact", "(none configured: destinations[].contact)"));
        if (e.contains("guidance")) out += fmt::format("Guidance: {}\n", e.at("guidance").get<std::string>());
        // Rebuilt from the rendered fields: the document's note holds line breaks
        // that terminal_document showed as \x0a.
        out += "\n" + escalation_note(e) + "\n";
    }
    if (closed.size() > 0) out += colour(ro, "1", "Closed escalations") + "\n" + closed.render(ro.colour);
    return out + page_footer(doc, "escalations");
}

}  // namespace retryguard::report
