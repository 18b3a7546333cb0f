// reply.cpp -- parses remote SMTP replies and the reason texts Postfix logs
// after status=... into the Reply model (include/retryguard/reply/reply.hpp).
//
// Owns: the wire syntax (RFC 5321 reply lines, RFC 3463 codes) and the fixed
// phrases Postfix 3.x writes (smtp_proto.c, smtp_connect.c, smtp_trouble.c,
// dns_lookup.c, qmgr), plus the wrappers other MTAs put around a reply (DSN
// Diagnostic-Code, Exim, Exchange, qmail-remote, Sendmail) and their own
// failure texts when no server replied. Never decides what a reply means
// (that is the classifier's job), never throws, never reads past
// kMaxReplyLength.
#include "retryguard/reply/reply.hpp"
#include "retryguard/text/text.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <string>

namespace retryguard {
namespace {

bool is_digit(char c) noexcept {
    return c >= '0' && c <= '9';
}
bool is_space(char c) noexcept {
    return c == ' ' || c == '\t';
}

char lower(char c) noexcept {
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

std::size_t find_ci(std::string_view s, std::string_view needle) noexcept {
    if (needle.empty()) return 0;
    if (needle.size() > s.size()) return std::string_view::npos;
    const char first = lower(needle[0]);
    const std::size_t last = s.size() - needle.size();
    for (std::size_t i = 0; i <= last; ++i) {
        if (lower(s[i]) != first) continue;
        if (text::istarts_with(s.substr(i + 1), needle.substr(1))) return i;
    }
    return std::string_view::npos;
}

// Length of an enhanced code at the start of s, followed by whitespace or the
// end; 0 when there is none.
std::size_t enhanced_code_length(std::string_view s) noexcept {
    std::size_t i = 0;
    if (s.empty() || (s[0] != '2' && s[0] != '4' && s[0] != '5')) return 0;
    i = 1;
    for (int part = 0; part < 2; ++part) {
        if (i >= s.size() || s[i] != '.') return 0;
        ++i;
        std::size_t digits = 0;
        while (i < s.size() && is_digit(s[i]) && digits < 4) ++i, ++digits;
        if (digits == 0 || digits > 3) return 0;
    }
    if (i < s.size() && !is_space(s[i])) return 0;
    return i;
}

// A basic reply code at the start of s: three digits, first 2-5, second 0-5
// (RFC 5321 4.2), followed by ' ', '-' or the end. Returns the code or 0.
int basic_code(std::string_view s) noexcept {
    if (s.size() < 3 || !is_digit(s[0]) || !is_digit(s[1]) || !is_digit(s[2])) return 0;
    if (s[0] < '2' || s[0] > '5' || s[1] > '5') return 0;
    if (s.size() > 3 && s[3] != ' ' && s[3] != '-' && s[3] != '\t') return 0;
    return (s[0] - '0') * 100 + (s[1] - '0') * 10 + (s[2] - '0');
}

void append_text(std::string& out, std::string_view piece) {
    piece = text::trim(piece);
    if (piece.empty()) return;
    if (!out.empty()) out.push_back(' ');
    out.append(piece);
}

// Strips a leading enhanced code equal to (or, when none is known yet, any
// valid one) from a line's text.
std::string_view strip_enhanced(std::string_view text, std::optional<EnhancedCode>& enhanced) {
    text = text::trim(text);
    std::size_t n = enhanced_code_length(text);
    if (n == 0) return text;
    auto code = parse_enhanced_code(text.substr(0, n));
    if (!code) return text;
    if (!enhanced)
        enhanced = code;
    else if (!(*enhanced == *code))
        return text;  // a different code is part of the text
    return text::trim(text.substr(n));
}

// qmail and some appliances carry the code in the text: "#5.1.1 ..." or
// "... (#5.7.1)". Used only when the reply has no leading enhanced code.
std::optional<EnhancedCode> embedded_enhanced(std::string_view text) noexcept {
    if (!text.empty() && text[0] == '#') {
        std::size_t n = enhanced_code_length(text.substr(1));
        if (n) return parse_enhanced_code(text.substr(1, n));
    }
    std::size_t pos = text.find("(#");
    while (pos != std::string_view::npos) {
        std::string_view rest = text.substr(pos + 2);
        std::size_t close = rest.find(')');
        if (close != std::string_view::npos && close <= 11)
            if (auto c = parse_enhanced_code(rest.substr(0, close))) return c;
        pos = text.find("(#", pos + 2);
    }
    return std::nullopt;
}

// Postfix joins a multi-line reply into one logged line, keeping the
// continuation prefixes: "550-5.1.1 The email ... 550-5.1.1 double-checking
// ... 550 5.1.1 https://...". Removes the repeated "CODE-X.Y.Z"/"CODE X.Y.Z"
// markers so the text reads as one sentence.
std::string strip_joined_continuations(std::string_view text, int code,
                                       const std::optional<EnhancedCode>& enh, bool continued) {
    std::array<char, 4> digits{};
    digits[0] = static_cast<char>('0' + code / 100);
    digits[1] = static_cast<char>('0' + code / 10 % 10);
    digits[2] = static_cast<char>('0' + code % 10);
    std::string_view code_str(digits.data(), 3);
    if (text.find(code_str) == std::string_view::npos) return std::string(text);
    std::string enh_str = enh ? enh->str() : std::string();
    std::string out;
    out.reserve(text.size());
    std::size_t i = 0;
    while (i < text.size()) {
        bool at_word = (i == 0 || is_space(text[i - 1]));
        if (at_word && text.substr(i, 3) == code_str && i + 3 < text.size() &&
            (text[i + 3] == '-' || text[i + 3] == ' ')) {
            std::size_t j = i + 4;
            // "CODE-" always marks a joined line; "CODE " only with the enhanced
            // code after it or once a continuation was seen (the final line).
            bool marker = text[i + 3] == '-' || continued;
            if (text[i + 3] == '-') continued = true;
            if (!enh_str.empty() && text.substr(j, enh_str.size()) == enh_str &&
                (j + enh_str.size() == text.size() || is_space(text[j + enh_str.size()]))) {
                j += enh_str.size();
                marker = true;
            }
            if (marker) {
                while (j < text.size() && is_space(text[j])) ++j;
                while (!out.empty() && is_space(out.back())) out.pop_back();
                if (!out.empty()) out.push_back(' ');
                i = j;
                continue;
            }
        }
        out.push_back(text[i]);
        ++i;
    }
    while (!out.empty() && is_space(out.back())) out.pop_back();
    return out;
}

// "H[A]" or "H[A]:P" at the start of s: fills host and address.
void parse_host_addr(std::string_view s, Reply& r) {
    std::size_t open = s.find('[');
    if (open == std::string_view::npos || open == 0) return;
    std::size_t close = s.find(']', open);
    if (close == std::string_view::npos) return;
    std::string_view host = s.substr(0, open);
    if (host.find(' ') != std::string_view::npos) return;
    r.remote_host = std::string(host);
    r.remote_addr = std::string(s.substr(open + 1, close - open - 1));
}

SmtpStage stage_from_command(std::string_view command) noexcept {
    // The exact phrases of Postfix's smtp_proto.c first; the scan below is for variants.
    if (command == "RCPT TO") return SmtpStage::rcpt_to;
    if (command == "end of DATA") return SmtpStage::end_of_data;
    if (command == "MAIL FROM") return SmtpStage::mail_from;
    if (command == "DATA") return SmtpStage::data;
    if (find_ci(command, "end of DATA") != std::string_view::npos ||
        find_ci(command, "end of data") != std::string_view::npos ||
        find_ci(command, "BDAT") != std::string_view::npos ||
        find_ci(command, "message body") != std::string_view::npos)
        return find_ci(command, "message body") != std::string_view::npos ? SmtpStage::data
                                                                          : SmtpStage::end_of_data;
    if (find_ci(command, "RCPT") != std::string_view::npos) return SmtpStage::rcpt_to;
    if (find_ci(command, "MAIL") != std::string_view::npos) return SmtpStage::mail_from;
    if (find_ci(command, "DATA") != std::string_view::npos) return SmtpStage::data;
    if (find_ci(command, "STARTTLS") != std::string_view::npos ||
        find_ci(command, "TLS") != std::string_view::npos)
        return SmtpStage::starttls;
    if (find_ci(command, "EHLO") != std::string_view::npos ||
        find_ci(command, "HELO") != std::string_view::npos ||
        find_ci(command, "LHLO") != std::string_view::npos)
        return SmtpStage::helo;
    if (find_ci(command, "AUTH") != std::string_view::npos ||
        find_ci(command, "SASL") != std::string_view::npos)
        return SmtpStage::auth;
    if (find_ci(command, "QUIT") != std::string_view::npos) return SmtpStage::quit;
    if (find_ci(command, "greeting") != std::string_view::npos ||
        find_ci(command, "CONNECT") != std::string_view::npos)
        return SmtpStage::connect;
    return SmtpStage::other;
}

// Splits "... (in reply to X command)" off the end.
std::string_view take_in_reply_to(std::string_view s, SmtpStage& stage) {
    s = text::trim(s);
    static constexpr std::string_view kMarker = "(in reply to ";
    if (s.empty() || s.back() != ')') return s;
    std::size_t pos = s.rfind(kMarker);
    if (pos == std::string_view::npos) return s;
    std::string_view command = s.substr(pos + kMarker.size(), s.size() - 1 - pos - kMarker.size());
    stage = stage_from_command(command);
    return text::trim(s.substr(0, pos));
}

// A reply as logged on one line (possibly a joined multi-line reply).
Reply parse_logged_reply(std::string_view text) {
    Reply r;
    auto parsed = parse_smtp_reply(text);
    if (parsed.ok()) {
        r = std::move(parsed).value();
        std::string_view t = text::trim(text);
        r.text = strip_joined_continuations(r.text, r.code, r.enhanced, t.size() > 3 && t[3] == '-');
    } else {
        r.text = std::string(text::trim(text));
        r.local = LocalFailure::other;
    }
    return r;
}

LocalFailure failure_from_errno_text(std::string_view text) noexcept {
    if (find_ci(text, "Connection refused") != std::string_view::npos)
        return LocalFailure::connection_refused;
    if (find_ci(text, "timed out") != std::string_view::npos) return LocalFailure::connection_timed_out;
    if (find_ci(text, "Network is unreachable") != std::string_view::npos ||
        find_ci(text, "No route to host") != std::string_view::npos ||
        find_ci(text, "Host is unreachable") != std::string_view::npos)
        return LocalFailure::network_unreachable;
    if (find_ci(text, "Connection reset") != std::string_view::npos) return LocalFailure::lost_connection;
    if (find_ci(text, "Name or service not known") != std::string_view::npos ||
        find_ci(text, "not found") != std::string_view::npos)
        return LocalFailure::host_not_found;
    return LocalFailure::other;
}

SmtpStage stage_from_while(std::string_view rest) noexcept {
    std::size_t pos = find_ci(rest, " while ");
    if (pos == std::string_view::npos) return SmtpStage::none;
    std::string_view what = rest.substr(pos + 7);
    if (find_ci(what, "initial server greeting") != std::string_view::npos ||
        find_ci(what, "initial protocol handshake") != std::string_view::npos)
        return SmtpStage::connect;
    if (find_ci(what, "TLS") != std::string_view::npos) return SmtpStage::starttls;
    return stage_from_command(what);
}

// ---------------------------------------------------------------- other MTAs
// Bounces and logs of other MTAs wrap the remote reply in their own phrases;
// these find it so the code and the enhanced code are read, never guessed.

// "smtp; 550 5.1.1 ..." / "X-Notes; User ..." / "#5.0.0 smtp;550 ...": drops
// a leading diagnostic type (RFC 3464 section 2.3.6) and Exchange's status.
std::string_view strip_diagnostic_type(std::string_view s) noexcept {
    s = text::trim(s);
    if (!s.empty() && s[0] == '#') {  // Exchange 2003: "#5.0.0 smtp;550 ..."
        std::size_t n = enhanced_code_length(s.substr(1));
        if (n) s = text::trim(s.substr(1 + n));
    }
    std::size_t i = 0;
    while (i < s.size() && i < 32 &&
           ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || is_digit(s[i]) || s[i] == '-'))
        ++i;
    if (i > 0 && i < s.size() && s[i] == ';' && !is_digit(s[0])) return text::trim(s.substr(i + 1));
    return s;
}

// Where the wrapped reply starts, and what the wrapper says about it.
struct Unwrapped {
    std::string_view inner;
    SmtpStage stage = SmtpStage::none;
    std::string_view host, addr;
};

std::optional<Unwrapped> unwrap_foreign(std::string_view s) {
    Unwrapped u;
    // RFC 3464 DSN field: "Diagnostic-Code: smtp; 550 5.1.1 ..." (also behind
    // "Remote-MTA: dns; mx.example.net" on the same line).
    if (std::size_t p = find_ci(s, "Diagnostic-Code:"); p != std::string_view::npos) {
        u.inner = strip_diagnostic_type(s.substr(p + 16));
        return u;
    }
    // Exim (transports/smtp.c): "SMTP error from remote mail server after RCPT
    // TO:<a>: host H [A]: 550 ..." ("remote mailer" in older releases).
    if (std::size_t p = find_ci(s, "SMTP error from remote mail"); p != std::string_view::npos) {
        std::string_view rest = s.substr(p);
        std::size_t after = find_ci(rest, " after ");
        if (after == std::string_view::npos) return std::nullopt;
        rest = rest.substr(after + 7);
        std::size_t colon = rest.find(": ");
        if (colon == std::string_view::npos) return std::nullopt;
        u.stage = stage_from_command(rest.substr(0, colon));
        rest = text::trim(rest.substr(colon + 2));
        if (text::istarts_with(rest, "host ")) {
            std::size_t end = rest.find("]: ");
            if (end != std::string_view::npos) {
                std::string_view hp = rest.substr(5, end - 5);
                std::size_t open = hp.find(" [");
                if (open != std::string_view::npos) {
                    u.host = hp.substr(0, open);
                    u.addr = hp.substr(open + 2);
                }
                rest = text::trim(rest.substr(end + 3));
            }
        }
        u.inner = rest;
        return u;
    }
    // Exchange: "Remote Server returned '550 5.1.1 ...'" and
    // "#550 5.1.1 RESOLVER.ADR.RecipNotFound; not found ##".
    if (std::size_t p = find_ci(s, "Remote Server returned '"); p != std::string_view::npos) {
        std::string_view rest = s.substr(p + 24);
        std::size_t close = rest.rfind('\'');
        if (close != std::string_view::npos) rest = rest.substr(0, close);
        rest = text::trim(rest);
        if (rest.size() > 2 && rest.front() == '<' && rest.back() == '>')
            rest = text::trim(rest.substr(1, rest.size() - 2));
        u.inner = strip_diagnostic_type(rest);
        return u;
    }
    if (s.size() > 4 && s[0] == '#' && basic_code(s.substr(1)) != 0) {
        std::string_view rest = s.substr(1);
        if (rest.size() >= 2 && rest.substr(rest.size() - 2) == "##") rest.remove_suffix(2);
        u.inner = text::trim(rest);
        return u;
    }
    // qmail-remote: "A does not like recipient. Remote host said: 550 ...
    // Giving up on A." (and "Connected to A but sender was rejected.", ...).
    if (std::size_t p = find_ci(s, "Remote host said: "); p != std::string_view::npos) {
        std::string_view before = s.substr(0, p);
        if (find_ci(before, "does not like recipient") != std::string_view::npos)
            u.stage = SmtpStage::rcpt_to;
        else if (find_ci(before, "sender was rejected") != std::string_view::npos)
            u.stage = SmtpStage::mail_from;
        else if (find_ci(before, "my name was rejected") != std::string_view::npos)
            u.stage = SmtpStage::helo;
        else if (find_ci(before, "greeting failed") != std::string_view::npos)
            u.stage = SmtpStage::connect;
        else if (find_ci(before, "failed on DATA") != std::string_view::npos)
            u.stage = SmtpStage::data;
        else if (find_ci(before, "after I sent the message") != std::string_view::npos)
            u.stage = SmtpStage::end_of_data;
        std::string_view rest = s.substr(p + 18);
        if (std::size_t g = find_ci(rest, " Giving up on "); g != std::string_view::npos)
            rest = rest.substr(0, g);
        u.inner = text::trim(rest);
        return u;
    }
    // Sendmail transcript: "... while talking to H.: >>> RCPT To:<a> <<< 550 ...".
    if (std::size_t p = s.rfind("<<< "); p != std::string_view::npos && basic_code(s.substr(p + 4)) != 0) {
        std::size_t cmd = s.rfind(">>> ", p);
        if (cmd != std::string_view::npos) u.stage = stage_from_command(s.substr(cmd + 4, p - cmd - 4));
        u.inner = text::trim(s.substr(p + 4));
        return u;
    }
    // Sendmail: "<a>... Deferred: Connection refused by H." / "Deferred: 451 ...".
    if (std::size_t p = find_ci(s, "Deferred: "); p != std::string_view::npos) {
        u.inner = text::trim(s.substr(p + 10));
        return u;
    }
    // Sendmail: "<a>... User unknown" (the address, then the reason).
    if (!s.empty() && s[0] == '<') {
        std::size_t p = s.find(">... ");
        if (p != std::string_view::npos && p < 320) {
            u.inner = text::trim(s.substr(p + 5));
            return u;
        }
    }
    return std::nullopt;
}

// The sending MTA's own failure when no server replied, in the words of
// qmail-remote, Sendmail, Exim, Haraka and OpenSMTPD (Postfix's own texts
// are recognised where they are parsed). Phrases, not single words: "not
// found" alone would also match "User not found".
LocalFailure foreign_failure(std::string_view s) noexcept {
    struct Phrase {
        std::string_view text;
        LocalFailure kind;
    };
    static constexpr Phrase kPhrases[] = {
        {"couldn't find any host", LocalFailure::host_not_found},            // qmail-remote (#5.1.2 / #4.1.2)
        {"couldn't find a mail exchanger", LocalFailure::no_mx_or_address},  // netqmail null MX
        {"Host unknown (Name server", LocalFailure::host_not_found},         // sendmail
        {"host name lookup failure", LocalFailure::host_not_found},          // sendmail
        {"Name server timeout", LocalFailure::host_not_found},               // sendmail
        {"host address lookups failed", LocalFailure::host_not_found},       // exim
        {"MX records point to non-existent hosts", LocalFailure::host_not_found},  // exim
        {"indicated no SMTP service", LocalFailure::no_mx_or_address},             // exim, null MX
        {"TLS session", LocalFailure::tls_failure},                                // exim
        {"did not offer TLS", LocalFailure::tls_failure},
        {"certificate verify failed", LocalFailure::tls_failure},
        {"wasn't able to establish an SMTP connection", LocalFailure::connection_refused},  // qmail-remote
        {"but connection died", LocalFailure::lost_connection},                             // qmail-remote
        {"Remote host closed connection", LocalFailure::lost_connection},                   // exim
        {"SMTP timeout after", LocalFailure::conversation_timeout},                         // exim
        {"socket timeout", LocalFailure::conversation_timeout},                             // haraka
        {"Timeout while waiting for a reply", LocalFailure::conversation_timeout},          // courier
        {"ECONNREFUSED", LocalFailure::connection_refused},  // haraka (node errno)
        {"ETIMEDOUT", LocalFailure::connection_timed_out},
        {"EHOSTUNREACH", LocalFailure::network_unreachable},
        {"Connection refused", LocalFailure::connection_refused},
        {"Connection timed out", LocalFailure::connection_timed_out},
        {"Operation timed out", LocalFailure::connection_timed_out},
        {"Network is unreachable", LocalFailure::network_unreachable},
        {"No route to host", LocalFailure::network_unreachable},
        {"Connection reset", LocalFailure::lost_connection},
    };
    for (const auto& p : kPhrases)
        if (find_ci(s, p.text) != std::string_view::npos) return p.kind;
    return LocalFailure::other;
}

Reply parse_reason_impl(std::string_view s, int depth) {
    Reply r;
    s = text::trim(s);

    // "delivery temporarily suspended: <the reason of the earlier failure>"
    static constexpr std::string_view kSuspended = "delivery temporarily suspended: ";
    if (depth < 2 && text::istarts_with(s, kSuspended))
        return parse_reason_impl(s.substr(kSuspended.size()), depth + 1);

    // Another MTA's wrapper around the reply (DSN, Exim, Exchange, qmail, Sendmail).
    if (depth < 3 && !text::istarts_with(s, "host ") && basic_code(s) == 0) {
        if (auto u = unwrap_foreign(s); u && !u->inner.empty()) {
            Reply inner = parse_reason_impl(u->inner, depth + 1);
            if (inner.stage == SmtpStage::none) inner.stage = u->stage;
            if (inner.remote_host.empty() && !u->host.empty()) {
                inner.remote_host = std::string(u->host);
                inner.remote_addr = std::string(u->addr);
            }
            return inner;
        }
    }

    // "host H[A] said: REPLY (in reply to X command)" and
    // "host H[A] refused to talk to me: REPLY" (greeting). Postfix writes
    // nothing before it; bytes that are no words (control bytes, an escape
    // sequence: a damaged or forged line) are passed over, so that the remote
    // reply still decides and its words are not read as Postfix's own.
    if (std::size_t h = find_ci(s, "host "); h != 0 && h != std::string_view::npos && h <= 32) {
        auto letter = [](char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; };
        bool words = false;
        for (std::size_t i = 1; i < h && !words; ++i) words = letter(s[i]) && letter(s[i - 1]);
        if (!words) s = s.substr(h);
    }
    if (text::istarts_with(s, "host ")) {
        std::string_view rest = s.substr(5);
        std::size_t said = rest.find(" said: ");
        std::size_t refused = rest.find(" refused to talk to me: ");
        std::size_t cut = std::min(said, refused);
        if (cut != std::string_view::npos) {
            std::size_t skip = cut == said ? 7 : 24;
            SmtpStage stage = cut == refused ? SmtpStage::connect : SmtpStage::none;
            std::string_view reply_text = take_in_reply_to(rest.substr(cut + skip), stage);
            r = parse_logged_reply(reply_text);
            r.stage = stage;
            parse_host_addr(rest.substr(0, cut), r);
            return r;
        }
    }

    // TLS trouble: "TLS is required, but was not offered by host H[A]",
    // "TLS is required, but host H[A] refused to start TLS: 454 4.7.0 ...",
    // "Cannot start TLS: handshake failure", "Server certificate not verified".
    if (text::istarts_with(s, "TLS is required") || text::istarts_with(s, "Cannot start TLS") ||
        text::istarts_with(s, "Server certificate not") ||
        (s.find("TLS") != std::string_view::npos &&
         (find_ci(s, "TLS handshake") != std::string_view::npos ||
          find_ci(s, "refused to start TLS") != std::string_view::npos))) {
        std::size_t h = find_ci(s, "host ");
        std::size_t colon = s.find(": ", h == std::string_view::npos ? 0 : h);
        if (colon != std::string_view::npos && basic_code(s.substr(colon + 2)) != 0) {
            r = parse_logged_reply(s.substr(colon + 2));
        } else {
            r.text = std::string(s);
        }
        r.local = LocalFailure::tls_failure;
        r.stage = SmtpStage::starttls;
        if (h != std::string_view::npos) parse_host_addr(s.substr(h + 5), r);
        if (r.code != 0) r.local = LocalFailure::tls_failure;
        return r;
    }

    // A bare reply, as Postfix logs on status=sent: "250 2.0.0 Ok: queued as X".
    if (basic_code(s) != 0) {
        SmtpStage stage = SmtpStage::none;
        std::string_view reply_text = take_in_reply_to(s, stage);
        Reply bare = parse_logged_reply(reply_text);
        bare.stage = stage;
        return bare;
    }

    r.text = std::string(s);

    // "connect to H[A]:P: Connection refused" (and timed out, unreachable, ...)
    if (text::istarts_with(s, "connect to ")) {
        std::string_view rest = s.substr(11);
        parse_host_addr(rest, r);
        std::size_t close = rest.find("]:");
        std::size_t colon = rest.find(": ", close == std::string_view::npos ? 0 : close + 2);
        std::string_view why = colon == std::string_view::npos ? rest : rest.substr(colon + 2);
        r.local = failure_from_errno_text(why);
        if (r.local == LocalFailure::host_not_found || r.local == LocalFailure::other)
            r.local = find_ci(why, "not found") != std::string_view::npos ? LocalFailure::host_not_found
                                                                          : LocalFailure::other;
        r.stage = SmtpStage::connect;
        return r;
    }
    // "lost connection with H[A] while sending end of data -- message may be sent more than once"
    if (text::istarts_with(s, "lost connection with ")) {
        parse_host_addr(s.substr(21), r);
        r.local = LocalFailure::lost_connection;
        r.stage = stage_from_while(s);
        return r;
    }
    // "conversation with H[A] timed out while receiving the initial server greeting"
    if (text::istarts_with(s, "conversation with ")) {
        parse_host_addr(s.substr(18), r);
        r.local = LocalFailure::conversation_timeout;
        r.stage = stage_from_while(s);
        return r;
    }
    // dns_lookup.c / smtp_addr.c: "Host or domain name not found. Name service
    // error for name=example.com type=MX: Host not found, try again",
    // "Host found but no data record of requested type", "unable to look up host".
    if (text::istarts_with(s, "Host or domain name not found") ||
        text::istarts_with(s, "Name service error") || text::istarts_with(s, "unable to look up host") ||
        find_ci(s, "Name service error for name=") != std::string_view::npos) {
        std::size_t name = find_ci(s, "name=");
        if (name != std::string_view::npos) {
            std::string_view n = s.substr(name + 5);
            std::size_t end = n.find(' ');
            r.remote_host = std::string(n.substr(0, end));
        }
        r.local = (find_ci(s, "no data record") != std::string_view::npos ||
                   find_ci(s, "no MX host") != std::string_view::npos)
                      ? LocalFailure::no_mx_or_address
                      : LocalFailure::host_not_found;
        return r;
    }
    if (find_ci(s, "has no MX or A record") != std::string_view::npos ||
        find_ci(s, "has null MX") != std::string_view::npos ||
        find_ci(s, "no MX host for") != std::string_view::npos ||
        find_ci(s, "MX host") != std::string_view::npos) {
        r.local = LocalFailure::no_mx_or_address;
        return r;
    }
    if (find_ci(s, "mail transport unavailable") != std::string_view::npos ||
        find_ci(s, "unknown mail transport error") != std::string_view::npos) {
        r.local = LocalFailure::transport_unavailable;
        return r;
    }
    if (text::istarts_with(s, "message expired") || text::istarts_with(s, "expired") ||
        find_ci(s, "message is too old") != std::string_view::npos) {
        r.local = LocalFailure::expired;
        return r;
    }
    // Local deliveries and Postfix's own troubles ("delivered to maildir",
    // "mail for x loops back to myself", "Command died with status 1", "alias
    // database unavailable", "cannot update mailbox ...").
    if (text::istarts_with(s, "delivered to ") || text::istarts_with(s, "delivered via ") ||
        text::istarts_with(s, "forwarded as ") || text::istarts_with(s, "discarded")) {
        r.local = LocalFailure::none;
        return r;
    }
    if (find_ci(s, "loops back to myself") != std::string_view::npos ||
        find_ci(s, "Command died") != std::string_view::npos ||
        find_ci(s, "Command time limit exceeded") != std::string_view::npos ||
        find_ci(s, "database unavailable") != std::string_view::npos ||
        find_ci(s, "cannot update mailbox") != std::string_view::npos ||
        find_ci(s, "cannot open file") != std::string_view::npos ||
        find_ci(s, "table lookup") != std::string_view::npos ||
        find_ci(s, "lookup error") != std::string_view::npos ||
        find_ci(s, "server configuration") != std::string_view::npos ||
        find_ci(s, "unable to create") != std::string_view::npos ||
        find_ci(s, "queue file write error") != std::string_view::npos ||
        find_ci(s, "service unavailable") != std::string_view::npos ||
        find_ci(s, "unknown user") != std::string_view::npos) {
        r.local = find_ci(s, "unknown user") != std::string_view::npos ? LocalFailure::other
                                                                       : LocalFailure::local_config;
        return r;
    }

    // Another MTA's own failure text, and qmail's "... (#5.1.1)" code suffix.
    r.local = foreign_failure(s);
    if (!r.enhanced) r.enhanced = embedded_enhanced(s);
    return r;
}

}  // namespace

std::string EnhancedCode::str() const {
    std::string out;
    out.reserve(9);
    out += std::to_string(klass);
    out += '.';
    out += std::to_string(subject);
    out += '.';
    out += std::to_string(detail);
    return out;
}

std::optional<EnhancedCode> parse_enhanced_code(std::string_view text) noexcept {
    if (text.size() < 5 || text.size() > 9) return std::nullopt;
    if (text[0] != '2' && text[0] != '4' && text[0] != '5') return std::nullopt;
    if (text[1] != '.') return std::nullopt;
    EnhancedCode code;
    code.klass = static_cast<std::uint8_t>(text[0] - '0');
    std::size_t i = 2;
    std::uint16_t* parts[2] = {&code.subject, &code.detail};
    for (int part = 0; part < 2; ++part) {
        std::size_t digits = 0;
        unsigned value = 0;
        while (i < text.size() && is_digit(text[i])) {
            if (++digits > 3) return std::nullopt;
            value = value * 10 + static_cast<unsigned>(text[i] - '0');
            ++i;
        }
        if (digits == 0) return std::nullopt;
        *parts[part] = static_cast<std::uint16_t>(value);
        if (part == 0) {
            if (i >= text.size() || text[i] != '.') return std::nullopt;
            ++i;
        }
    }
    if (i != text.size()) return std::nullopt;
    return code;
}

std::string_view to_string(SmtpStage stage) noexcept {
    switch (stage) {
        case SmtpStage::none: return "none";
        case SmtpStage::connect: return "connect";
        case SmtpStage::helo: return "helo";
        case SmtpStage::starttls: return "starttls";
        case SmtpStage::auth: return "auth";
        case SmtpStage::mail_from: return "mail-from";
        case SmtpStage::rcpt_to: return "rcpt-to";
        case SmtpStage::data: return "data";
        case SmtpStage::end_of_data: return "end-of-data";
        case SmtpStage::quit: return "quit";
        case SmtpStage::other: return "other";
    }
    return "other";
}

std::string_view to_string(LocalFailure failure) noexcept {
    switch (failure) {
        case LocalFailure::none: return "none";
        case LocalFailure::connection_refused: return "connection-refused";
        case LocalFailure::connection_timed_out: return "connection-timed-out";
        case LocalFailure::network_unreachable: return "network-unreachable";
        case LocalFailure::lost_connection: return "lost-connection";
        case LocalFailure::conversation_timeout: return "conversation-timeout";
        case LocalFailure::host_not_found: return "host-not-found";
        case LocalFailure::no_mx_or_address: return "no-mx-or-address";
        case LocalFailure::tls_failure: return "tls-failure";
        case LocalFailure::transport_unavailable: return "transport-unavailable";
        case LocalFailure::local_config: return "local-config";
        case LocalFailure::expired: return "expired";
        case LocalFailure::other: return "other";
    }
    return "other";
}

Result<Reply> parse_smtp_reply(std::string_view text) {
    Reply r;
    if (text.size() > kMaxReplyLength) {
        text = text.substr(0, kMaxReplyLength);
        r.truncated = true;
    }
    std::string_view rest = text::trim(text);
    if (rest.empty()) return make_error(ErrorKind::invalid_input, "empty reply");
    bool first = true;
    bool last_seen = false;
    while (!rest.empty()) {
        std::size_t eol = rest.find('\n');
        std::string_view line = rest.substr(0, eol);
        rest = eol == std::string_view::npos ? std::string_view{} : rest.substr(eol + 1);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (text::trim(line).empty()) continue;
        if (last_seen) return make_error(ErrorKind::invalid_input, "text after the last line of the reply");
        int code = basic_code(line);
        if (code == 0) {
            if (first)
                return make_error(ErrorKind::invalid_input,
                                  "reply does not start with a 3-digit code (200-559)");
            return make_error(ErrorKind::invalid_input, "a reply line lacks the 3-digit code");
        }
        if (first)
            r.code = code;
        else if (code != r.code)
            return make_error(ErrorKind::invalid_input, "reply lines carry different codes (" +
                                                            std::to_string(r.code) + " and " +
                                                            std::to_string(code) + ")");
        bool continued = line.size() > 3 && line[3] == '-';
        if (!continued) last_seen = true;
        std::string_view body = line.size() > 4 ? line.substr(4) : std::string_view{};
        append_text(r.text, strip_enhanced(body, r.enhanced));
        first = false;
    }
    if (!r.enhanced) r.enhanced = embedded_enhanced(r.text);
    return r;
}

Reply parse_postfix_reason(std::string_view reason, std::string_view dsn) {
    bool truncated = false;
    if (reason.size() > kMaxReplyLength) {
        reason = reason.substr(0, kMaxReplyLength);
        truncated = true;
    }
    Reply r = parse_reason_impl(reason, 0);
    if (!r.enhanced && !dsn.empty()) r.enhanced = parse_enhanced_code(text::trim(dsn));
    r.truncated = r.truncated || truncated;
    return r;
}

}  // namespace retryguard
