// report_explain.cpp -- `retryguard explain`: one message or recipient, what
// the ledger holds about it and what the guidance says to do. Reads only.
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

}  // namespace retryguard::report
