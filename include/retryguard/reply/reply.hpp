// reply.hpp -- the remote reply model: what a receiving server (or Postfix
// itself) said about a delivery attempt, parsed strictly (RFC 5321, RFC 3463).
//
// Two entry points: parse_smtp_reply() for a reply as it appears on the wire
// ("451 4.3.5 System config error", multi-line "451-..."), and
// parse_postfix_reason() for the text Postfix logs in parentheses after
// status=... ("host H[A] said: 451 4.3.5 ... (in reply to RCPT TO command)",
// "connect to H[A]:25: Connection refused", "mail transport unavailable", ...).
// Neither ever throws; input longer than kMaxReplyLength is truncated and
// flagged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "retryguard/result.hpp"

namespace retryguard {

inline constexpr std::size_t kMaxReplyLength = 8192;

// RFC 3463 enhanced status code: class.subject.detail. class is 2, 4 or 5;
// subject and detail have 1-3 digits (0-999), as dsn_valid() in Postfix.
struct EnhancedCode {
    std::uint8_t klass = 0;
    std::uint16_t subject = 0;
    std::uint16_t detail = 0;

    std::string str() const;  // "4.3.5"
    friend bool operator==(const EnhancedCode&, const EnhancedCode&) = default;
};

// Strict: "4.3.5" -> code; "6.1.1", "4..1", "4.1234.1", "4.3.5x" -> nullopt.
std::optional<EnhancedCode> parse_enhanced_code(std::string_view text) noexcept;

// The SMTP command the reply answered (Postfix: "(in reply to X command)").
enum class SmtpStage {
    none,     // not known / not logged
    connect,  // greeting / initial connection
    helo,     // HELO or EHLO
    starttls,
    auth,
    mail_from,
    rcpt_to,
    data,         // the DATA command itself
    end_of_data,  // after the final "."
    quit,
    other,
};
std::string_view to_string(SmtpStage stage) noexcept;  // "rcpt-to", "end-of-data", ...

// What kind of failure Postfix reported when there is no remote SMTP reply.
enum class LocalFailure {
    none,                   // a remote server replied (code > 0)
    connection_refused,     // "connect to H[A]:P: Connection refused"
    connection_timed_out,   // "connect to ...: Connection timed out"
    network_unreachable,    // "... Network is unreachable" / "No route to host"
    lost_connection,        // "lost connection with H[A] while ..."
    conversation_timeout,   // "conversation with H[A] timed out while ..."
    host_not_found,         // "Host or domain name not found. Name service error ..."
    no_mx_or_address,       // "... has no MX or A record" variants
    tls_failure,            // "TLS is required, but was not offered", handshake failures
    transport_unavailable,  // "mail transport unavailable" (the sending Postfix)
    local_config,           // other failures of the sending Postfix
    expired,                // qmgr: "message expired" / status=expired
    other,
};
std::string_view to_string(LocalFailure failure) noexcept;

struct Reply {
    int code = 0;  // basic SMTP code 200-599, 0 when none (a local failure)
    std::optional<EnhancedCode> enhanced;
    std::string text;  // the reply text without codes, lines joined by a single space
    SmtpStage stage = SmtpStage::none;
    LocalFailure local = LocalFailure::none;
    std::string remote_host;  // "host H[A] said:" / "connect to H[A]" -> H
    std::string remote_addr;  //                                      -> A
    bool truncated = false;   // the input exceeded kMaxReplyLength
};

// A reply as sent on the wire, one or more lines ("451-first\r\n451 last").
// Errors: empty input, no 3-digit code, inconsistent codes across lines.
Result<Reply> parse_smtp_reply(std::string_view text);

// The parenthesised reason Postfix logs after status=..., without the
// surrounding parentheses. Never fails: an unrecognised text becomes
// Reply{local = other, text = the input}. dsn (e.g. "4.3.5" from "dsn=4.3.5")
// fills `enhanced` when the text carries none.
Reply parse_postfix_reason(std::string_view reason, std::string_view dsn = {});

}  // namespace retryguard
