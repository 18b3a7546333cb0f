// event_json.cpp -- Event -> JSON object / one text line. Owns the output field
// names of `retryguard events`. Must never throw on odd content: strings may hold
// any byte (callers dump with error_handler_t::replace for invalid UTF-8).
#include "retryguard/event_json.hpp"

#include <fmt/format.h>

#include "retryguard/time.hpp"

namespace retryguard {
namespace {

void put(nlohmann::json& j, const char* key, const std::string& v) {
    if (!v.empty()) j[key] = v;
}

void put_reply(nlohmann::json& j, const Event& ev, bool always) {
    if (ev.reply) {
        const Reply& r = *ev.reply;
        j["reply_code"] = r.code == 0 ? nlohmann::json(nullptr) : nlohmann::json(r.code);
        j["reply_enhanced"] = r.enhanced ? nlohmann::json(r.enhanced->str()) : nlohmann::json(nullptr);
        j["reply_text"] = r.text;
        j["reply_local"] = std::string(to_string(r.local));
        if (!r.remote_host.empty()) j["reply_host"] = r.remote_host;
        if (!r.remote_addr.empty()) j["reply_addr"] = r.remote_addr;
        if (r.truncated) j["reply_truncated"] = true;
    } else if (always) {
        j["reply_code"] = nullptr;
        j["reply_enhanced"] = nullptr;
        j["reply_text"] = nullptr;
    }
}

}  // namespace

nlohmann::json event_to_json(const Event& ev) {
    nlohmann::json j = nlohmann::json::object();
    j["kind"] = std::string(to_string(ev.kind));
    j["time"] = ev.time == TimePoint{} ? nlohmann::json(nullptr) : nlohmann::json(format_rfc3339(ev.time));
    put(j, "host", ev.host);
    put(j, "program", ev.program);
    if (ev.pid) j["pid"] = ev.pid;
    j["queue_id"] = ev.queue_id;

    switch (ev.kind) {
        case EventKind::delivery:
            j["recipient"] = ev.recipient;
            put(j, "orig_recipient", ev.orig_recipient);
            j["relay"] = ev.relay;
            put(j, "relay_host", ev.relay_host);
            put(j, "relay_addr", ev.relay_addr);
            if (ev.relay_port) j["relay_port"] = ev.relay_port;
            j["dsn"] = ev.dsn;
            j["status"] = std::string(to_string(ev.status));
            j["delay"] = ev.delay;
            put(j, "delays", ev.delays);
            put(j, "conn_use", ev.conn_use);
            put(j, "tls", ev.tls);
            j["reason"] = ev.reason;
            put_reply(j, ev, true);
            j["stage"] =
                ev.reply ? nlohmann::json(std::string(to_string(ev.reply->stage))) : nlohmann::json(nullptr);
            break;
        case EventKind::queue_active:
            j["sender"] = ev.sender;
            j["size"] = ev.size;
            j["nrcpt"] = ev.nrcpt;
            break;
        case EventKind::expired:
            j["sender"] = ev.sender;
            j["status"] = std::string(to_string(ev.status));
            j["action"] = ev.action;
            break;
        case EventKind::message_id:
            j["message_id"] = ev.message_id;
            j["resent"] = ev.resent;
            break;
        case EventKind::pickup:
            j["sender"] = ev.sender;
            j["uid"] = ev.uid;
            put(j, "orig_queue_id", ev.orig_queue_id);
            break;
        case EventKind::smtpd_client: j["client"] = ev.client; break;
        case EventKind::smtpd_action:
        case EventKind::milter_action:
            j["action"] = ev.action;
            j["stage"] = ev.stage;
            j["client"] = ev.client;
            j["sender"] = ev.sender;
            j["recipient"] = ev.recipient;
            put(j, "dsn", ev.dsn);
            j["reason"] = ev.reason;
            put_reply(j, ev, false);
            break;
        case EventKind::notification:
            j["action"] = ev.action;
            j["new_queue_id"] = ev.new_queue_id;
            break;
        case EventKind::queue_removed:
        case EventKind::queue_operation: put(j, "action", ev.action); break;
        case EventKind::connection_problem:
            j["action"] = ev.action;
            j["relay"] = ev.relay;
            put(j, "relay_host", ev.relay_host);
            put(j, "relay_addr", ev.relay_addr);
            if (ev.relay_port) j["relay_port"] = ev.relay_port;
            j["reason"] = ev.reason;
            put_reply(j, ev, false);
            if (ev.reply) j["stage"] = std::string(to_string(ev.reply->stage));
            break;
        case EventKind::verdict:
            j["verdict"] = ev.action;
            put(j, "destination", ev.destination);
            break;
        case EventKind::unknown:
            j["unknown_kind"] = ev.unknown_kind;
            j["text"] = ev.text;
            break;
    }
    if (!ev.fields.empty()) {
        nlohmann::json f = nlohmann::json::array();
        for (const auto& [k, v] : ev.fields) f.push_back(nlohmann::json::array({k, v}));
        j["fields"] = std::move(f);
    }
    if (ev.truncated) j["truncated"] = true;
    return j;
}

std::string event_to_text(const Event& ev) {
    std::string out = ev.time == TimePoint{} ? std::string("-") : format_rfc3339(ev.time);
    out += ' ';
    out += to_string(ev.kind);
    out += ' ';
    out += ev.queue_id.empty() ? "-" : ev.queue_id;
    auto kv = [&out](std::string_view k, std::string_view v) {
        if (v.empty()) return;
        out += ' ';
        out += k;
        out += '=';
        out += v;
    };
    switch (ev.kind) {
        case EventKind::delivery:
            kv("to", ev.recipient);
            kv("orig_to", ev.orig_recipient);
            kv("relay", ev.relay);
            kv("dsn", ev.dsn);
            kv("status", to_string(ev.status));
            if (ev.reply && ev.reply->code) kv("reply", fmt::format("{}", ev.reply->code));
            if (ev.reply && ev.reply->stage != SmtpStage::none) kv("stage", to_string(ev.reply->stage));
            if (!ev.reason.empty()) out += fmt::format(" ({})", ev.reason);
            break;
        case EventKind::queue_active:
            kv("from", "<" + ev.sender + ">");
            kv("size", fmt::format("{}", ev.size));
            kv("nrcpt", fmt::format("{}", ev.nrcpt));
            break;
        case EventKind::expired: kv("from", "<" + ev.sender + ">"), kv("status", ev.action); break;
        case EventKind::message_id: kv(ev.resent ? "resent-message-id" : "message-id", ev.message_id); break;
        case EventKind::pickup:
            kv("uid", fmt::format("{}", ev.uid));
            kv("from", "<" + ev.sender + ">");
            kv("orig_id", ev.orig_queue_id);
            break;
        case EventKind::smtpd_client: kv("client", ev.client); break;
        case EventKind::smtpd_action:
        case EventKind::milter_action:
            kv("action", ev.action);
            kv("stage", ev.stage);
            kv("client", ev.client);
            kv("from", ev.sender);
            kv("to", ev.recipient);
            kv("dsn", ev.dsn);
            if (!ev.reason.empty()) out += fmt::format(" ({})", ev.reason);
            break;
        case EventKind::notification:
            kv("type", ev.action);
            kv("new_queue_id", ev.new_queue_id);
            break;
        case EventKind::queue_removed:
        case EventKind::queue_operation: kv("action", ev.action); break;
        case EventKind::connection_problem:
            kv("action", ev.action);
            kv("relay", ev.relay);
            if (!ev.reason.empty()) out += fmt::format(" ({})", ev.reason);
            break;
        case EventKind::verdict:
            kv("destination", ev.destination);
            for (const auto& [k, v] : ev.fields)
                kv(k, v.find(' ') == std::string::npos ? v : "\"" + v + "\"");
            break;
        case EventKind::unknown:
            kv("unknown", ev.unknown_kind);
            out += ' ';
            out += ev.text.substr(0, 200);
            break;
    }
    // Peer text may hold control characters; never let them reach a terminal.
    for (char& c : out)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    return out;
}

}  // namespace retryguard
