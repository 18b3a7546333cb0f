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

#include "retryguard/ledger/ledger.hpp"
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
// "localhost" 127.0.0.1 with port 0 (Postfix 3.7 sends {daemon_name} and
// {daemon_addr} on both paths, so macros do not tell them apart). A real SMTP
// client over TCP always has a non-zero source port.
SubmissionPath classify_path(bool inet_client, int client_port) noexcept;

// Pending copies come from the ledger (ledger.hpp: PendingCopy, one per
// recipient with an earlier copy still queued). Only a copy that has been
// deferred at least once counts: a copy the queue has not tried yet (or whose
// delivery the log has not reached the ledger yet) is not "being retried".
bool counts_as_retrying(const PendingCopy& copy) noexcept;

// When Postfix will try a deferred copy next, estimated as its queue manager
// does: the backoff is the message's age in the queue, bounded by
// minimal_backoff_time and maximal_backoff_time, counted from the last attempt.
std::optional<TimePoint> next_retry_estimate(const PendingCopy& copy, Duration minimal_backoff,
                                             Duration maximal_backoff);

// reinjection.action, reinjection.tag_header, reinjection.reject_text and
// dry_run as they apply to one recipient: the global values, or those of the
// recipient's destination rule.
struct ResendRule {
    ResendAction action = ResendAction::reject;
    std::string header_name = "X-Retryguard-Resend";
    // reinjection.reject_text: the refusal's text with {recipient} {original}
    // {destination} {since} {reply} {next_retry} {more}; empty: the built-in text.
    std::string reply_template;
    // dry_run: the decision is made and logged (dry_run=yes) but not carried
    // out; the recipient goes through as if it were new.
    bool dry_run = false;

    bool operator==(const ResendRule&) const = default;
};

// The global rule (the base) and the destination rules.
struct ResendPolicy : ResendRule {
    // per destination domain: exact "example.org" or ".example.org" (subdomains)
    std::map<std::string, ResendRule, std::less<>> per_destination;
    std::string reject_code = "550";  // 5xx; 4xx allowed on SMTP only
    std::string reject_xcode = "5.7.1";
    // the sending Postfix's main.cf values, for the "next retry" estimate
    Duration minimal_backoff = std::chrono::seconds(300);
    Duration maximal_backoff = std::chrono::seconds(4000);

    // The rule for a recipient's domain: exact, then the longest "*." suffix,
    // then the global one.
    const ResendRule& rule_for(std::string_view recipient) const;
    ResendAction action_for(std::string_view recipient) const { return rule_for(recipient).action; }
};

struct MessageFacts {
    std::string queue_id;  // {i}
    SubmissionPath path = SubmissionPath::smtp;
    std::string message_id;   // normalised, "" when absent
    std::string fingerprint;  // "" when disabled
    std::string sender;
    std::vector<std::string> recipients;
    // A header marked it as sent by a program (marks_automated): identical
    // content is then a new message; only the same Message-ID is a resend.
    bool automated = false;
};

// The identity a message is looked up by: its Message-ID, and its
// fingerprint unless identical content from it is a new message by rule
// (automated mail, or the null sender of bounces and notifications).
// match_message_id false (reinjection.match: fingerprint) drops the Message-ID.
MessageFacts lookup_identity(const MessageFacts& msg, bool match_message_id);

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
    // Duplicates whose destination is in dry run: left in the message.
    std::vector<std::string> dry_run_recipients;
    // Every duplicate is in dry run: `verdict` is what would have been done,
    // `result` is accept and nothing is changed.
    bool dry_run = false;
};

// pending: every pending copy the ledger found for the message's recipients
// (recipients without one that counts_as_retrying() are new). Rules, in
// docs/milter.md:
//  - no pending copy: accept;
//  - the strongest action over the duplicate recipients wins
//    (reject > hold > drop_duplicates > tag > log_only);
//  - new recipients are never refused: with any, reject becomes
//    drop_duplicates (the duplicates are deleted, the rest goes through);
//  - drop_duplicates with no new recipient discards the message silently;
//  - on the sendmail path a reject is always 5xx (cleanup bounces it to the
//    submitter with the reply text); a 4xx would make pickup retry it forever.
//  - a duplicate whose destination is in dry run (dry_run, globally or per
//    destination) is left in the message like a new recipient; when every
//    duplicate is, the decision is only logged (dry_run=yes) and the message
//    accepted unchanged;
//  - the reply text and tag header are those of the rule that chose the action.
ResendDecision decide_resend(const MessageFacts& msg, const std::vector<PendingCopy>& pending,
                             const ResendPolicy& policy);

// The reply text for a refused resend: the original queue id, the
// destination, the literal remote reply, since when and the next retry.
// Printable ASCII only, bounded to fit an SMTP reply line.
// The text is reinjection.reject_text of `rule` (the policy's global rule when
// null), or the built-in text when that is empty.
std::string resend_reply_text(const std::vector<PendingCopy>& duplicates, const ResendPolicy& policy,
                              const ResendRule* rule = nullptr);

// One verdict line (without the syslog prefix):
// "QID: verdict=reject action=reject path=smtp original=QID1 duplicates=a@x ..."
// key=value, values with spaces, quotes or '=' double-quoted with \" and \\.
std::string verdict_line(const MessageFacts& msg, const ResendDecision& d, const ResendPolicy& policy);

// A verdict line for a fail-open accept (ledger error, internal error, bad input),
// or, when errors.* says tempfail (SMTP path only), for a temporary failure
// (verdict=tempfail).
std::string failopen_line(std::string_view queue_id, SubmissionPath path, std::string_view reason,
                          std::string_view detail, bool tempfail = false);

// key=value quoting used in verdict lines: bare when safe, else "..." escaped.
std::string quote_value(std::string_view v);

}  // namespace retryguard
