// ledger_events.hpp -- builders of Postfix events for the ledger tests and the
// ledger benchmark: the fields the log parser fills, with a text unique to
// each line so that event keys behave as for real log lines.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "retryguard/ledger/ledger.hpp"

namespace retryguard::ledger_test {

inline TimePoint at(std::int64_t seconds) {
    return from_micros(seconds * 1000000);
}

inline Event base(EventKind kind, const std::string& qid, std::int64_t t, const std::string& process, int pid,
                  std::string text) {
    Event e;
    e.kind = kind;
    e.time = at(t);
    e.host = "sender";
    e.program = "postfix/" + process;
    e.process = process;
    e.pid = pid;
    e.queue_id = qid;
    e.text = qid.empty() ? text : qid + ": " + text;
    return e;
}

inline IngestItem pickup(const std::string& qid, std::int64_t t, const std::string& sender,
                         const std::string& orig = {}) {
    auto e = base(EventKind::pickup, qid, t, "pickup", 100,
                  "uid=0 from=<" + sender + ">" + (orig.empty() ? "" : " orig_id=" + orig));
    e.sender = sender;
    e.orig_queue_id = orig;
    return {e, Category::unknown};
}

inline IngestItem client(const std::string& qid, std::int64_t t) {
    return {base(EventKind::smtpd_client, qid, t, "smtpd", 101, "client=localhost[127.0.0.1]"),
            Category::unknown};
}

inline IngestItem message_id(const std::string& qid, std::int64_t t, const std::string& mid) {
    auto e = base(EventKind::message_id, qid, t, "cleanup", 102, "message-id=" + mid);
    e.message_id = mid;
    return {e, Category::unknown};
}

inline IngestItem queue_active(const std::string& qid, std::int64_t t, const std::string& sender,
                               int size = 470, int nrcpt = 1) {
    auto e = base(EventKind::queue_active, qid, t, "qmgr", 103,
                  "from=<" + sender + ">, size=" + std::to_string(size) + ", nrcpt=" + std::to_string(nrcpt) +
                      " (queue active)");
    e.sender = sender;
    e.size = size;
    e.nrcpt = nrcpt;
    return {e, Category::unknown};
}

// A delivery attempt answered by `mx` (a host name; relay=mx[addr]:25).
inline IngestItem delivery(const std::string& qid, std::int64_t t, const std::string& rcpt,
                           DeliveryStatus status, const std::string& mx, int code,
                           const std::string& enhanced, const std::string& text, Category category) {
    std::string reason = "host " + mx + "[192.0.2.1] said: " + std::to_string(code) + " " + enhanced + " " +
                         text + " (in reply to RCPT TO command)";
    std::string st = status == DeliveryStatus::sent       ? "sent"
                     : status == DeliveryStatus::deferred ? "deferred"
                     : status == DeliveryStatus::bounced  ? "bounced"
                                                          : "other";
    auto e = base(EventKind::delivery, qid, t, "smtp", 104,
                  "to=<" + rcpt + ">, relay=" + mx + "[192.0.2.1]:25, dsn=" + enhanced + ", status=" + st +
                      " (" + reason + ")");
    e.recipient = rcpt;
    e.relay = mx + "[192.0.2.1]:25";
    e.relay_host = mx;
    e.relay_addr = "192.0.2.1";
    e.relay_port = 25;
    e.dsn = enhanced;
    e.status = status;
    e.reason = reason;
    Reply r;
    r.code = code;
    unsigned k = 0, s = 0, d = 0;
    if (std::sscanf(enhanced.c_str(), "%u.%u.%u", &k, &s, &d) == 3)
        r.enhanced = EnhancedCode{static_cast<std::uint8_t>(k), static_cast<std::uint16_t>(s),
                                  static_cast<std::uint16_t>(d)};
    r.text = text;
    r.stage = SmtpStage::rcpt_to;
    r.remote_host = mx;
    r.remote_addr = "192.0.2.1";
    e.reply = r;
    return {e, category};
}

inline IngestItem deferred(const std::string& qid, std::int64_t t, const std::string& rcpt,
                           const std::string& mx = "mx.example.net") {
    return delivery(qid, t, rcpt, DeliveryStatus::deferred, mx, 451, "4.3.5", "System config error",
                    Category::receiver_config);
}
inline IngestItem sent(const std::string& qid, std::int64_t t, const std::string& rcpt,
                       const std::string& mx = "mx.example.net") {
    return delivery(qid, t, rcpt, DeliveryStatus::sent, mx, 250, "2.0.0", "Ok: queued", Category::unknown);
}

inline IngestItem removed(const std::string& qid, std::int64_t t) {
    return {base(EventKind::queue_removed, qid, t, "qmgr", 103, "removed"), Category::unknown};
}
inline IngestItem expired(const std::string& qid, std::int64_t t, const std::string& sender) {
    auto e = base(EventKind::expired, qid, t, "qmgr", 103,
                  "from=<" + sender + ">, status=expired, returned to sender");
    e.sender = sender;
    return {e, Category::expired};
}
inline IngestItem queue_op(const std::string& qid, std::int64_t t, const std::string& what) {
    auto e = base(EventKind::queue_operation, qid, t, "postsuper", 105, what);
    e.action = what;
    return {e, Category::unknown};
}

inline std::string qid_for(int i) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%010X", static_cast<unsigned>(i) * 2654435761u);
    return buf;
}

// A deterministic stream: message i arrives, is deferred for two recipients on
// domain (i % domains), retried once, then (for 3 in 4 messages) delivered and
// removed. About 9 events per message.
inline std::vector<IngestItem> synthetic_stream(int messages, int domains = 50,
                                                std::int64_t t0 = 1795000000) {
    std::vector<IngestItem> out;
    out.reserve(static_cast<std::size_t>(messages) * 9);
    for (int i = 0; i < messages; ++i) {
        auto qid = qid_for(i);
        std::int64_t t = t0 + i * 2;
        std::string domain = "d" + std::to_string(i % domains) + ".example";
        std::string mx = "mx" + std::to_string(i % (domains / 5 + 1)) + ".example.net";
        std::string a = "a" + std::to_string(i) + "@" + domain, b = "b" + std::to_string(i) + "@" + domain;
        out.push_back(client(qid, t));
        out.push_back(message_id(qid, t, "<m" + std::to_string(i) + "@client.example>"));
        out.push_back(queue_active(qid, t + 1, "s@sender.example", 1000 + i, 2));
        out.push_back(deferred(qid, t + 1, a, mx));
        out.push_back(deferred(qid, t + 1, b, mx));
        out.push_back(deferred(qid, t + 600, a, mx));
        if (i % 4 != 0) {
            out.push_back(sent(qid, t + 1800, a, mx));
            out.push_back(sent(qid, t + 1800, b, mx));
            out.push_back(removed(qid, t + 1800));
        } else {
            out.push_back(deferred(qid, t + 600, b, mx));
        }
    }
    return out;
}

}  // namespace retryguard::ledger_test
