// status_codes.cpp -- the IANA SMTP Enhanced Status Codes registry as a table.
// Owns the names and references only; never decides a category. Entries follow
// the registry (RFC 3463, 3886, 4468, 4954, 5248, 6531, 6710, 7293, 7372, 7505,
// draft-levine-mailbomb-header X.7.28, RFC 8617 X.7.29, RFC 8689 X.7.30).
#include "retryguard/classify/status_codes.hpp"

#include <array>
#include <string>

namespace retryguard {
namespace {

constexpr std::array<EnhancedCodeEntry, 3> kClasses = {{
    {"2.XXX.YYY", "Success", "RFC 3463"},
    {"4.XXX.YYY", "Persistent Transient Failure", "RFC 3463"},
    {"5.XXX.YYY", "Permanent Failure", "RFC 3463"},
}};

constexpr std::array<EnhancedCodeEntry, 8> kSubjects = {{
    {"X.0.YYY", "Other or Undefined Status", "RFC 3463"},
    {"X.1.YYY", "Addressing Status", "RFC 3463"},
    {"X.2.YYY", "Mailbox Status", "RFC 3463"},
    {"X.3.YYY", "Mail System Status", "RFC 3463"},
    {"X.4.YYY", "Network and Routing Status", "RFC 3463"},
    {"X.5.YYY", "Mail Delivery Protocol Status", "RFC 3463"},
    {"X.6.YYY", "Message Content or Media Status", "RFC 3463"},
    {"X.7.YYY", "Security or Policy Status", "RFC 3463"},
}};

constexpr EnhancedCodeEntry kCodes[] = {
    {"X.0.0", "Other undefined Status", "RFC 3463"},
    {"X.1.0", "Other address status", "RFC 3463"},
    {"X.1.1", "Bad destination mailbox address", "RFC 3463"},
    {"X.1.2", "Bad destination system address", "RFC 3463"},
    {"X.1.3", "Bad destination mailbox address syntax", "RFC 3463"},
    {"X.1.4", "Destination mailbox address ambiguous", "RFC 3463"},
    {"X.1.5", "Destination address valid", "RFC 3463"},
    {"X.1.6", "Destination mailbox has moved, No forwarding address", "RFC 3463"},
    {"X.1.7", "Bad sender's mailbox address syntax", "RFC 3463"},
    {"X.1.8", "Bad sender's system address", "RFC 3463"},
    {"X.1.9", "Message relayed to non-compliant mailer", "RFC 3886"},
    {"X.1.10", "Recipient address has null MX", "RFC 7505"},
    {"X.2.0", "Other or undefined mailbox status", "RFC 3463"},
    {"X.2.1", "Mailbox disabled, not accepting messages", "RFC 3463"},
    {"X.2.2", "Mailbox full", "RFC 3463"},
    {"X.2.3", "Message length exceeds administrative limit", "RFC 3463"},
    {"X.2.4", "Mailing list expansion problem", "RFC 3463"},
    {"X.3.0", "Other or undefined mail system status", "RFC 3463"},
    {"X.3.1", "Mail system full", "RFC 3463"},
    {"X.3.2", "System not accepting network messages", "RFC 3463"},
    {"X.3.3", "System not capable of selected features", "RFC 3463"},
    {"X.3.4", "Message too big for system", "RFC 3463"},
    {"X.3.5", "System incorrectly configured", "RFC 3463"},
    {"X.3.6", "Requested priority was changed", "RFC 6710"},
    {"X.4.0", "Other or undefined network or routing status", "RFC 3463"},
    {"X.4.1", "No answer from host", "RFC 3463"},
    {"X.4.2", "Bad connection", "RFC 3463"},
    {"X.4.3", "Directory server failure", "RFC 3463"},
    {"X.4.4", "Unable to route", "RFC 3463"},
    {"X.4.5", "Mail system congestion", "RFC 3463"},
    {"X.4.6", "Routing loop detected", "RFC 3463"},
    {"X.4.7", "Delivery time expired", "RFC 3463"},
    {"X.5.0", "Other or undefined protocol status", "RFC 3463"},
    {"X.5.1", "Invalid command", "RFC 3463"},
    {"X.5.2", "Syntax error", "RFC 3463"},
    {"X.5.3", "Too many recipients", "RFC 3463"},
    {"X.5.4", "Invalid command arguments", "RFC 3463"},
    {"X.5.5", "Wrong protocol version", "RFC 3463"},
    {"X.5.6", "Authentication Exchange line is too long", "RFC 4954"},
    {"X.6.0", "Other or undefined media error", "RFC 3463"},
    {"X.6.1", "Media not supported", "RFC 3463"},
    {"X.6.2", "Conversion required and prohibited", "RFC 3463"},
    {"X.6.3", "Conversion required but not supported", "RFC 3463"},
    {"X.6.4", "Conversion with loss performed", "RFC 3463"},
    {"X.6.5", "Conversion Failed", "RFC 3463"},
    {"X.6.6", "Message content not available", "RFC 4468"},
    {"X.6.7", "Non-ASCII addresses not permitted for that sender/recipient", "RFC 6531"},
    {"X.6.8", "UTF-8 string reply is required, but not permitted by the SMTP client", "RFC 6531"},
    {"X.6.9", "UTF-8 header message cannot be transferred to one or more recipients", "RFC 6531"},
    {"X.6.10", "Duplicate of X.6.8 (deprecated)", "RFC 6531"},
    {"X.7.0", "Other or undefined security status", "RFC 3463"},
    {"X.7.1", "Delivery not authorized, message refused", "RFC 3463"},
    {"X.7.2", "Mailing list expansion prohibited", "RFC 3463"},
    {"X.7.3", "Security conversion required but not possible", "RFC 3463"},
    {"X.7.4", "Security features not supported", "RFC 3463"},
    {"X.7.5", "Cryptographic failure", "RFC 3463"},
    {"X.7.6", "Cryptographic algorithm not supported", "RFC 3463"},
    {"X.7.7", "Message integrity failure", "RFC 3463"},
    {"X.7.8", "Authentication credentials invalid", "RFC 4954"},
    {"X.7.9", "Authentication mechanism is too weak", "RFC 4954"},
    {"X.7.10", "Encryption Needed", "RFC 5248"},
    {"X.7.11", "Encryption required for requested authentication mechanism", "RFC 4954"},
    {"X.7.12", "A password transition is needed", "RFC 4954"},
    {"X.7.13", "User Account Disabled", "RFC 5248"},
    {"X.7.14", "Trust relationship required", "RFC 5248"},
    {"X.7.15", "Priority Level is too low", "RFC 6710"},
    {"X.7.16", "Message is too big for the specified priority", "RFC 6710"},
    {"X.7.17", "Mailbox owner has changed", "RFC 7293"},
    {"X.7.18", "Domain owner has changed", "RFC 7293"},
    {"X.7.19", "RRVS test cannot be completed", "RFC 7293"},
    {"X.7.20", "No passing DKIM signature found", "RFC 7372"},
    {"X.7.21", "No acceptable DKIM signature found", "RFC 7372"},
    {"X.7.22", "No valid author-matched DKIM signature found", "RFC 7372"},
    {"X.7.23", "SPF validation failed", "RFC 7372"},
    {"X.7.24", "SPF validation error", "RFC 7372"},
    {"X.7.25", "Reverse DNS validation failed", "RFC 7372"},
    {"X.7.26", "Multiple authentication checks failed", "RFC 7372"},
    {"X.7.27", "Sender address has null MX", "RFC 7505"},
    {"X.7.28", "Mail flood detected", "draft-levine-mailbomb-header"},
    {"X.7.29", "ARC validation failure", "RFC 8617"},
    {"X.7.30", "REQUIRETLS support required", "RFC 8689"},
};

// "X.S.D" -> (S, D), computed once so lookups are integer compares: the
// classifier names the code of every reply it sees.
struct Parsed {
    unsigned subject, detail;
};
constexpr Parsed parse_entry(std::string_view code) {
    unsigned s = 0, d = 0;
    std::size_t i = 2;
    while (i < code.size() && code[i] != '.') s = s * 10 + static_cast<unsigned>(code[i++] - '0');
    ++i;
    while (i < code.size()) d = d * 10 + static_cast<unsigned>(code[i++] - '0');
    return {s, d};
}
constexpr auto kParsed = [] {
    std::array<Parsed, std::size(kCodes)> out{};
    for (std::size_t i = 0; i < std::size(kCodes); ++i) out[i] = parse_entry(kCodes[i].code);
    return out;
}();

const EnhancedCodeEntry* find_exact(const EnhancedCode& code) noexcept {
    for (std::size_t i = 0; i < kParsed.size(); ++i)
        if (kParsed[i].subject == code.subject && kParsed[i].detail == code.detail) return &kCodes[i];
    return nullptr;
}

}  // namespace

std::span<const EnhancedCodeEntry> enhanced_code_registry() noexcept {
    return kCodes;
}
std::span<const EnhancedCodeEntry> enhanced_subject_registry() noexcept {
    return kSubjects;
}
std::span<const EnhancedCodeEntry> enhanced_class_registry() noexcept {
    return kClasses;
}

bool is_registered(const EnhancedCode& code) noexcept {
    return find_exact(code) != nullptr;
}

const EnhancedCodeEntry* lookup_enhanced_code(const EnhancedCode& code) noexcept {
    if (const EnhancedCodeEntry* e = find_exact(code)) return e;
    if (code.subject < kSubjects.size()) return &kSubjects[code.subject];
    return nullptr;
}

std::string_view enhanced_code_name(const EnhancedCode& code) noexcept {
    const EnhancedCodeEntry* e = lookup_enhanced_code(code);
    return e ? e->name : std::string_view{};
}

}  // namespace retryguard
