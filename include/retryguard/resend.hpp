// resend.hpp -- what to do with a message whose copy (for some of its
// recipients) is still pending in the queue: the decision, the reply text the
// submitter sees, and the verdict line for the mail log. Used by
// retryguard-milter at end of message; pure functions of their inputs (no I/O,
// no clock), so every outcome is unit-tested.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "retryguard/time.hpp"

namespace retryguard {

// Configured action for a resend (YAML: reject | hold | drop_duplicates | tag | log_only).
enum class ResendAction { reject, hold, drop_duplicates, tag, log_only };
std::string_view to_string(ResendAction a) noexcept;  // "reject", "drop_duplicates", ...
std::optional<ResendAction> resend_action_from_string(std::string_view s) noexcept;

// How the message arrived: SMTP (smtpd_milters) or the sendmail command
// (non_smtpd_milters: cleanup emulates the SMTP events for a pickup'ed file).
enum class SubmissionPath { smtp, sendmail };
std::string_view to_string(SubmissionPath p) noexcept;

// Postfix's non-SMTP milter events come from cleanup, which pretends the client
// "localhost" 127.0.0.1 with port 0 and, unlike smtpd, sends no {daemon_addr}
// macro. A real SMTP client always has a non-zero source port.
SubmissionPath classify_path(int client_port, bool have_daemon_addr) noexcept;

// One earlier copy still pending in the queue for one recipient of the new message.
struct PendingCopy {
    std::string recipient;                // as in the new message's RCPT TO (without <>)
    std::string queue_id;                 // the pending original (after postsuper -r: the current one)
    std::string destination;              // the recipient's domain or the nexthop the ledger tracks
    std::string reply;                    // the literal remote reply of the last deferral
    std::optional<TimePoint> since;       // first deferral of this copy
    std::optional<TimePoint> next_retry;  // estimate: last attempt + backoff
    std::string matched_by;               // "message-id" or "fingerprint"
};

struct ResendPolicy {
    ResendAction action = ResendAction::reject;
    // per destination domain: exact "example.org" or ".example.org" (subdomains)
    std::map<std::string, ResendAction, std::less<>> per_destination;
    std::string reject_code = "550";  // 5xx; 4xx allowed on SMTP only
    std::string reject_xcode = "5.7.1";
    std::string header_name = "X-Retryguard-Resend";

    ResendAction action_for(std::string_view recipient) const;
};

struct MessageFacts {
    std::string queue_id;  // {i}
    SubmissionPath path = SubmissionPath::smtp;
    std::string message_id;   // normalised, "" when absent
    std::string fingerprint;  // "" when disabled
    std::string sender;
    std::vector<std::string> recipients;
};

// What the milter does at end of message.
enum class MilterResult { accept, reject, discard, quarantine };

struct ResendDecision {
    std::string verdict;  // accept | reject | hold | drop_duplicates | tag | log_only
    MilterResult result = MilterResult::accept;
    std::vector<std::string> delete_recipients;       // smfi_delrcpt
    std::string reply_code, reply_xcode, reply_text;  // for reject
    std::string quarantine_reason;                    // for hold
    std::string header_name, header_value;            // for tag
    std::vector<PendingCopy> duplicates;              // the pending copies that matched
    std::vector<std::string> new_recipients;          // recipients with no pending copy
};

// pending: every pending copy found for the message's recipients (recipients
// without one are new). Rules, in docs/milter.md:
//  - no pending copy: accept;
//  - the strongest action over the duplicate recipients wins
//    (reject > hold > drop_duplicates > tag > log_only);
//  - new recipients are never refused: with any, reject becomes
//    drop_duplicates (the duplicates are deleted, the rest goes through);
//  - drop_duplicates with no new recipient discards the message silently;
//  - on the sendmail path a reject is always 5xx (cleanup bounces it to the
//    submitter with the reply text); a 4xx would make pickup retry it forever.
ResendDecision decide_resend(const MessageFacts& msg, const std::vector<PendingCopy>& pending,
                             const ResendPolicy& policy);

// The reply text for a refused resend: the original queue id, the
// destination, the literal remote reply, since when and the next retry.
// Printable ASCII only, bounded to fit an SMTP reply line.
std::string resend_reply_text(const std::vector<PendingCopy>& duplicates);

// One verdict line (without the syslog prefix):
// "QID: verdict=reject action=reject path=smtp original=QID1 duplicates=a@x ..."
// key=value, values with spaces, quotes or '=' double-quoted with \" and \\.
std::string verdict_line(const MessageFacts& msg, const ResendDecision& d);

// A verdict line for a fail-open accept (ledger error, internal error, bad input).
std::string failopen_line(std::string_view queue_id, SubmissionPath path, std::string_view reason,
                          std::string_view detail);

// key=value quoting used in verdict lines: bare when safe, else "..." escaped.
std::string quote_value(std::string_view v);

}  // namespace retryguard
