// event_json.cpp -- Event -> JSON object / one text line. Owns the output field
// names of `retryguard events`. Must never throw on odd content: strings may hold
// any byte. Strings are rendered by core/text only: the JSON writer here and
// text::json_dump for the objects (invalid UTF-8 becomes U+FFFD), the terminal
// renderer for the text line.
#include "retryguard/log/event_json.hpp"

#include <fmt/format.h>

#include <cmath>
#include <iterator>

#include "retryguard/rules/verdict.hpp"
#include "retryguard/text/text.hpp"
#include "retryguard/time.hpp"

namespace retryguard {
namespace {

// One description of the JSON form, written to two sinks: an nlohmann object
// (event_to_json) and a direct string writer (append_event_json, the fast path
// of `retryguard events --json`). Tests hold the two equal.
struct ObjectSink {
    nlohmann::json j = nlohmann::json::object();
    void str(const char* k, std::string_view v) { j[k] = std::string(v); }
    void null(const char* k) { j[k] = nullptr; }
    void num(const char* k, std::int64_t v) { j[k] = v; }
    void real(const char* k, double v) { j[k] = v; }
    void boolean(const char* k, bool v) { j[k] = v; }
    void pairs(const char* k, const std::vector<std::pair<std::string, std::string>>& v) {
        nlohmann::json f = nlohmann::json::array();
        for (const auto& [a, b] : v) f.push_back(nlohmann::json::array({a, b}));
        j[k] = std::move(f);
    }
};

struct StringSink {
    std::string& out;
    bool first = true;
    void key(const char* k) {
        out += first ? '{' : ',';
        first = false;
        out += '"';
        out += k;
        out += "\":";
    }
    void str(const char* k, std::string_view v) {
        key(k);
        text::append_json_string(out, v);
    }
    void null(const char* k) {
        key(k);
        out += "null";
    }
    void num(const char* k, std::int64_t v) {
        key(k);
        fmt::format_to(std::back_inserter(out), "{}", v);
    }
    void real(const char* k, double v) {
        key(k);
        if (std::isfinite(v))
            fmt::format_to(std::back_inserter(out), "{}", v);
        else
            out += "null";
    }
    void boolean(const char* k, bool v) {
        key(k);
        out += v ? "true" : "false";
    }
    void pairs(const char* k, const std::vector<std::pair<std::string, std::string>>& v) {
        key(k);
        out += '[';
        for (std::size_t i = 0; i < v.size(); ++i) {
            if (i) out += ',';
            out += '[';
            text::append_json_string(out, v[i].first);
            out += ',';
            text::append_json_string(out, v[i].second);
            out += ']';
        }
        out += ']';
    }
};

template <typename Sink>
void put(Sink& j, const char* key, const std::string& v) {
    if (!v.empty()) j.str(key, v);
}

template <typename Sink>
void put_reply(Sink& j, const Event& ev, bool always) {
    if (ev.reply) {
        const Reply& r = *ev.reply;
        if (r.code == 0)
            j.null("reply_code");
        else
            j.num("reply_code", r.code);
        if (r.enhanced)
            j.str("reply_enhanced", r.enhanced->str());
        else
            j.null("reply_enhanced");
        j.str("reply_text", r.text);
        j.str("reply_local", to_string(r.local));
        put(j, "reply_host", r.remote_host);
        put(j, "reply_addr", r.remote_addr);
        if (r.truncated) j.boolean("reply_truncated", true);
    } else if (always) {
        j.null("reply_code");
        j.null("reply_enhanced");
        j.null("reply_text");
    }
}

template <typename Sink>
void emit(const Event& ev, Sink& j) {
    j.str("kind", to_string(ev.kind));
    if (ev.time == TimePoint{})
        j.null("time");
    else
        j.str("time", format_rfc3339(ev.time));
    put(j, "host", ev.host);
    put(j, "program", ev.program);
    if (ev.pid) j.num("pid", ev.pid);
    j.str("queue_id", ev.queue_id);

    switch (ev.kind) {
        case EventKind::delivery:
            j.str("recipient", ev.recipient);
            put(j, "orig_recipient", ev.orig_recipient);
            j.str("relay", ev.relay);
            put(j, "relay_host", ev.relay_host);
            put(j, "relay_addr", ev.relay_addr);
            if (ev.relay_port) j.num("relay_port", ev.relay_port);
            j.str("dsn", ev.dsn);
            j.str("status", to_string(ev.status));
            j.real("delay", ev.delay);
            put(j, "delays", ev.delays);
            put(j, "conn_use", ev.conn_use);
            put(j, "tls", ev.tls);
            j.str("reason", ev.reason);
            put_reply(j, ev, true);
            if (ev.reply)
                j.str("stage", to_string(ev.reply->stage));
            else
                j.null("stage");
            break;
        case EventKind::queue_active:
            j.str("sender", ev.sender);
            j.num("size", ev.size);
            j.num("nrcpt", ev.nrcpt);
            break;
        case EventKind::expired:
            j.str("sender", ev.sender);
            j.str("status", to_string(ev.status));
            j.str("action", ev.action);
            break;
        case EventKind::message_id:
            j.str("message_id", ev.message_id);
            j.boolean("resent", ev.resent);
            break;
        case EventKind::pickup:
            j.str("sender", ev.sender);
            j.num("uid", ev.uid);
            put(j, "orig_queue_id", ev.orig_queue_id);
            break;
        case EventKind::smtpd_client: j.str("client", ev.client); break;
        case EventKind::smtpd_action:
        case EventKind::milter_action:
            j.str("action", ev.action);
            j.str("stage", ev.stage);
            j.str("client", ev.client);
            j.str("sender", ev.sender);
            j.str("recipient", ev.recipient);
            put(j, "dsn", ev.dsn);
            j.str("reason", ev.reason);
            put_reply(j, ev, false);
            break;
        case EventKind::notification:
            j.str("action", ev.action);
            j.str("new_queue_id", ev.new_queue_id);
            break;
        case EventKind::queue_removed:
        case EventKind::queue_operation: put(j, "action", ev.action); break;
        case EventKind::connection_problem:
            j.str("action", ev.action);
            j.str("relay", ev.relay);
            put(j, "relay_host", ev.relay_host);
            put(j, "relay_addr", ev.relay_addr);
            if (ev.relay_port) j.num("relay_port", ev.relay_port);
            j.str("reason", ev.reason);
            put_reply(j, ev, false);
            if (ev.reply) j.str("stage", to_string(ev.reply->stage));
            break;
        case EventKind::verdict:
            j.str("verdict", ev.action);
            put(j, "destination", ev.destination);
            break;
        case EventKind::unknown:
            j.str("unknown_kind", ev.unknown_kind);
            j.str("text", ev.text);
            break;
    }
    if (!ev.fields.empty()) j.pairs("fields", ev.fields);
    if (ev.truncated) j.boolean("truncated", true);
}

}  // namespace

nlohmann::json event_to_json(const Event& ev) {
    ObjectSink sink;
    emit(ev, sink);
    return std::move(sink.j);
}

void append_event_json(const Event& ev, std::string& out) {
    StringSink sink{out};
    emit(ev, sink);
    out += '}';
}

std::string event_to_text(const Event& ev) {
    std::string out = ev.time == TimePoint{} ? std::string("-") : format_rfc3339(ev.time);
    out += ' ';
    out += to_string(ev.kind);
    out += ' ';
    if (ev.queue_id.empty())
        out += '-';
    else
        text::append_terminal(out, ev.queue_id);
    // Every piece of the line that comes from outside goes through the terminal
    // renderer: no control byte, no ESC, no invalid UTF-8 reaches a screen.
    auto kv = [&out](std::string_view k, std::string_view v) {
        if (v.empty()) return;
        out += ' ';
        text::append_terminal(out, k);
        out += '=';
        text::append_terminal(out, v);
    };
    auto reason = [&out](std::string_view r) {
        if (r.empty()) return;
        out += " (";
        text::append_terminal(out, r);
        out += ')';
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
            reason(ev.reason);
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
            reason(ev.reason);
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
            reason(ev.reason);
            break;
        case EventKind::verdict:
            // In the verdict line's own quoting, so a value cannot pose as a field.
            if (!ev.destination.empty()) kv("destination", quote_verdict_value(ev.destination));
            for (const auto& [k, v] : ev.fields) kv(quote_verdict_value(k), quote_verdict_value(v));
            break;
        case EventKind::unknown:
            kv("unknown", ev.unknown_kind);
            out += ' ';
            text::append_terminal(out, text::utf8_prefix(ev.text, 200));
            break;
    }
    return out;
}

}  // namespace retryguard
