// syslog_parse.cpp -- turns one syslog datagram (RFC 3164 or RFC 5424, as
// rsyslog and syslog-ng forward them) into a log line in the shape the log
// parser reads from files. Input is untrusted: every field is bounded and
// checked, nothing is assumed about encoding, and it must never crash, loop
// or return a line holding a newline or NUL.
#include <fmt/format.h>

#include "retryguard/follower.hpp"
#include "retryguard/time.hpp"

namespace retryguard {
namespace {

bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
bool is_print(char c) {
    return c > 32 && c < 127;
}

// The time stamp shapes a datagram may start with (time.hpp reads both);
// their length, or 0. Ranges are the log parser's to check.
std::size_t rfc3164_timestamp(std::string_view s) {
    const auto p = scan_rfc3164(s);
    return p ? p->length : 0;
}
std::size_t rfc3339_timestamp(std::string_view s) {
    const auto p = scan_rfc3339(s);
    return p && p->has_zone ? p->length : 0;
}

// Next space-separated header token of at most `max` printable characters.
Result<std::string_view> token(std::string_view& rest, std::size_t max, const char* what) {
    std::size_t i = 0;
    while (i < rest.size() && rest[i] != ' ') {
        if (!is_print(rest[i]) || i >= max)
            return make_error(ErrorKind::invalid_input, fmt::format("syslog: bad {} field", what));
        ++i;
    }
    if (i == 0) return make_error(ErrorKind::invalid_input, fmt::format("syslog: empty {} field", what));
    std::string_view t = rest.substr(0, i);
    rest.remove_prefix(i);
    return t;
}

bool eat_space(std::string_view& rest) {
    if (rest.empty() || rest[0] != ' ') return false;
    rest.remove_prefix(1);
    return true;
}

// STRUCTURED-DATA: "-" or one or more "[id param="value" ...]" (values may hold
// escaped '"', '\' and ']').
Status skip_structured_data(std::string_view& rest) {
    if (!rest.empty() && rest[0] == '-') {
        rest.remove_prefix(1);
        return {};
    }
    if (rest.empty() || rest[0] != '[')
        return make_error(ErrorKind::invalid_input, "syslog: bad structured data");
    while (!rest.empty() && rest[0] == '[') {
        std::size_t i = 1;
        bool quoted = false, closed = false;
        for (; i < rest.size(); ++i) {
            char c = rest[i];
            if (quoted) {
                if (c == '\\')
                    ++i;
                else if (c == '"')
                    quoted = false;
            } else if (c == '"') {
                quoted = true;
            } else if (c == ']') {
                closed = true;
                break;
            }
        }
        if (!closed) return make_error(ErrorKind::invalid_input, "syslog: unterminated structured data");
        rest.remove_prefix(i + 1);
    }
    return {};
}

}  // namespace

Result<SyslogLine> syslog_datagram_to_line(std::string_view d, std::string_view default_host,
                                           std::size_t max_bytes) {
    while (!d.empty() && (d.back() == '\n' || d.back() == '\r' || d.back() == '\0')) d.remove_suffix(1);
    if (d.size() < 3 || d[0] != '<') return make_error(ErrorKind::invalid_input, "syslog: missing <PRI>");
    std::size_t i = 1;
    int pri = 0;
    while (i < d.size() && i <= 3 && is_digit(d[i])) pri = pri * 10 + (d[i++] - '0');
    if (i == 1 || i >= d.size() || d[i] != '>' || pri > 191)
        return make_error(ErrorKind::invalid_input, "syslog: bad <PRI>");
    std::string_view rest = d.substr(i + 1);
    SyslogLine out;
    out.facility = pri / 8;
    out.severity = pri % 8;
    if (default_host.empty()) default_host = "localhost";

    std::string line;
    if (rest.size() >= 2 && rest[0] == '1' && rest[1] == ' ') {
        // RFC 5424: VERSION SP TIMESTAMP SP HOSTNAME SP APP-NAME SP PROCID SP MSGID SP SD [SP MSG]
        rest.remove_prefix(2);
        auto ts = token(rest, 48, "timestamp");
        if (!ts) return ts.error();
        if (*ts != "-" && rfc3339_timestamp(*ts) != ts->size())
            return make_error(ErrorKind::invalid_input, "syslog: bad RFC 5424 timestamp");
        if (*ts == "-")
            return make_error(ErrorKind::invalid_input, "syslog: RFC 5424 datagram without timestamp");
        if (!eat_space(rest)) return make_error(ErrorKind::invalid_input, "syslog: truncated header");
        auto host = token(rest, 255, "hostname");
        if (!host || !eat_space(rest)) return make_error(ErrorKind::invalid_input, "syslog: bad hostname");
        auto app = token(rest, 48, "app-name");
        if (!app || !eat_space(rest)) return make_error(ErrorKind::invalid_input, "syslog: bad app-name");
        auto procid = token(rest, 128, "procid");
        if (!procid || !eat_space(rest)) return make_error(ErrorKind::invalid_input, "syslog: bad procid");
        auto msgid = token(rest, 32, "msgid");
        if (!msgid || !eat_space(rest)) return make_error(ErrorKind::invalid_input, "syslog: bad msgid");
        if (Status sd = skip_structured_data(rest); !sd) return sd.error();
        if (!rest.empty() && !eat_space(rest))
            return make_error(ErrorKind::invalid_input, "syslog: bad structured data");
        if (rest.substr(0, 3) == "\xEF\xBB\xBF") rest.remove_prefix(3);  // UTF-8 BOM
        line.reserve(ts->size() + host->size() + app->size() + procid->size() + rest.size() + 8);
        line.append(*ts).append(" ").append(*host == "-" ? default_host : *host).append(" ");
        line.append(*app == "-" ? std::string_view("-") : *app);
        if (*procid != "-") line.append("[").append(*procid).append("]");
        line.append(": ").append(rest);
    } else {
        std::size_t ts_len = rfc3164_timestamp(rest);
        if (ts_len == 0)
            ts_len = rfc3339_timestamp(rest);  // rsyslog's forward format: RFC 3339 without VERSION
        if (ts_len == 0 || rest.size() <= ts_len + 1 || rest[ts_len] != ' ')
            return make_error(ErrorKind::invalid_input, "syslog: no RFC 3164 or RFC 3339 timestamp");
        std::string_view ts = rest.substr(0, ts_len);
        std::string_view after = rest.substr(ts_len + 1);
        // The next word is a HOSTNAME unless it already is the TAG ("postfix/smtp[1]:"),
        // as when a local program writes to the socket directly.
        std::size_t end = after.find(' ');
        std::string_view word = after.substr(0, end);
        bool is_tag = word.empty() || word.back() == ':' || word.find('[') != std::string_view::npos;
        line.reserve(rest.size() + default_host.size() + 1);
        line.append(ts).append(" ");
        if (is_tag) line.append(default_host).append(" ");
        line.append(after);
    }
    for (char& c : line)
        if (c == '\n' || c == '\r' || c == '\0') c = ' ';
    if (line.size() > max_bytes) {
        line.resize(max_bytes);
        out.truncated = true;
    }
    out.line = std::move(line);
    return out;
}

}  // namespace retryguard
