// events.hpp -- typed events parsed from Postfix log lines (and from
// retryguard's own verdict lines). The log parser (core/log/) produces them;
// the ledger and the rules engine consume them. Events carry their own time.
//
// One flat struct with a kind keeps the hot path free of allocation-heavy
// variants; which fields are meaningful for each kind is documented below and
// in docs/events.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "retryguard/reply/reply.hpp"
#include "retryguard/time.hpp"

namespace retryguard {

enum class EventKind {
    delivery,            // smtp/lmtp/local/virtual/pipe/error/retry: "QID: to=<...>, ... status=..."
    queue_active,        // qmgr: "QID: from=<s>, size=N, nrcpt=N (queue active)"
    queue_removed,       // qmgr: "QID: removed"; postsuper: "QID: removed"
    expired,             // qmgr: "QID: from=<s>, status=expired, returned to sender" (also force-expired)
    message_id,          // cleanup: "QID: message-id=<...>" / "resent-message-id=<...>"
    milter_action,       // cleanup/smtpd: milter-reject / milter-hold / milter-discard
    pickup,              // pickup: "QID: uid=N from=<s>" [orig_id=OLDQID]
    smtpd_client,        // smtpd: "QID: client=host[addr]"
    smtpd_action,        // smtpd: "NOQUEUE|QID: reject|warn|hold|info|discard|filter|redirect: ..."
    notification,        // bounce: "QID: sender non-delivery|delay|delivery status notification: NEWQID"
    queue_operation,     // postsuper: "QID: placed on hold|released from hold|requeued|expired"
    connection_problem,  // smtp without to=: "connect to H[A]:P: ...", "lost connection ...", TLS failures
    verdict,             // retryguard's own verdict line: "QID: verdict=... key=value ..."
    unknown,             // anything else (counted by UnknownKind, never fatal)
};
std::string_view to_string(EventKind kind) noexcept;

enum class DeliveryStatus { none, sent, deferred, bounced, expired, undeliverable };
std::string_view to_string(DeliveryStatus status) noexcept;

struct Event {
    EventKind kind = EventKind::unknown;
    TimePoint time{};
    std::string host;     // syslog host field ("sender")
    std::string program;  // full syslog tag without pid ("postfix/submission/smtpd", "postfix-out/smtp")
    std::string process;  // last component ("smtpd", "smtp", "qmgr")
    std::int64_t pid = 0;
    std::string queue_id;  // empty for NOQUEUE and lines without one

    // delivery (also: recipient/sender for smtpd_action, milter_action)
    std::string recipient;       // to=<...>, without brackets, as logged
    std::string orig_recipient;  // orig_to=<...>
    std::string relay;           // relay=host[addr]:port as logged ("none", "virtual", ...)
    std::string relay_host;      // host part, or relay when it has no [addr]
    std::string relay_addr;
    int relay_port = 0;
    std::string dsn;
    DeliveryStatus status = DeliveryStatus::none;
    double delay = 0;            // delay=
    std::string delays;          // delays=a/b/c/d
    std::string conn_use;        // conn_use=N
    std::string tls;             // tls=... when logged (Postfix >= 3.10 / smtp_tls_loglevel)
    std::string reason;          // the text in parentheses after status=..., verbatim
    std::optional<Reply> reply;  // reason parsed by parse_postfix_reason()

    // queue_active, pickup, expired, smtpd_action, milter_action
    std::string sender;
    std::int64_t size = -1;
    int nrcpt = -1;

    // message_id
    std::string message_id;  // with angle brackets as logged
    bool resent = false;     // resent-message-id=

    // pickup
    std::string orig_queue_id;  // postsuper -r requeue: orig_id=
    std::int64_t uid = -1;

    // smtpd_client / smtpd_action / milter_action / connection_problem
    std::string client;  // host[addr]
    std::string action;  // reject, warn, hold, info, discard, filter, redirect, milter-reject, ...
    std::string stage;   // "RCPT", "END-OF-MESSAGE", ... for smtpd/milter actions

    // notification: kind in `action` ("non-delivery", "delay", "success"), new queue id here
    std::string new_queue_id;

    // verdict: key=value pairs in log order (values unquoted). Other kinds: the
    // key=value items Postfix logged that have no field above (proto, helo,
    // sasl_username, ...), so nothing logged is lost.
    std::vector<std::pair<std::string, std::string>> fields;
    // verdict: the destination when the line is keyed by one instead of a QID
    std::string destination;

    // unknown: what kind of line was not recognised ("not-postfix", "bad-time", "qmgr-other", ...)
    std::string unknown_kind;

    std::string text;  // the message part of the line after "program[pid]: ", verbatim
    // the line exceeded kMaxLogLineLength (log_parser.hpp) and was cut
    bool truncated = false;
};

}  // namespace retryguard
