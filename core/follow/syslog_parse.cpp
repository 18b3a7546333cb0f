// syslog_parse.cpp -- turns one syslog datagram (RFC 3164 or RFC 5424, as
// rsyslog and syslog-ng forward them) into a log line in the shape the log
// parser reads from files; the priority, RFC 5424's version, structured data
// and BOM are read as the log parser reads them (log/syslog_header.hpp). Input
// is untrusted: every field is bounded and checked, nothing is assumed about
// encoding, and it must never crash, loop or return a line holding a newline
// or NUL.
#include <fmt/format.h>

#include "log/syslog_header.hpp"
#include "retryguard/follow/follower.hpp"
#include "retryguard/time.hpp"

namespace retryguard {
namespace {

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

}  // namespace

Result<SyslogLine> syslog_datagram_to_line(std::string_view d, std::string_view default_host,
                                           std::size_t max_bytes) {
    while (!d.empty() && (d.back() == '\n' || d.back() == '\r' || d.back() == '\0')) d.remove_suffix(1);
    if (d.size() < 3 || d[0] != '<') return make_error(ErrorKind::invalid_input, "syslog: missing <PRI>");
    const auto pri = syslog_header::scan_priority(d);
    if (!pri || pri->value > 191) return make_error(ErrorKind::invalid_input, "syslog: bad <PRI>");
    std::string_view rest = d.substr(pri->length);
    SyslogLine out;
    out.facility = pri->value / 8;
    out.severity = pri->value % 8;
    if (default_host.empty()) default_host = "localhost";

    std::string line;
    if (syslog_header::take_rfc5424_version(rest)) {
        // RFC 5424: VERSION SP TIMESTAMP SP HOSTNAME SP APP-NAME SP PROCID SP MSGID SP SD [SP MSG]
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
        switch (syslog_header::skip_structured_data(rest)) {
            case syslog_header::StructuredData::skipped: break;
            case syslog_header::StructuredData::missing:
                return make_error(ErrorKind::invalid_input, "syslog: bad structured data");
            case syslog_header::StructuredData::unterminated:
                return make_error(ErrorKind::invalid_input, "syslog: unterminated structured data");
        }
        if (!rest.empty() && !eat_space(rest))
            return make_error(ErrorKind::invalid_input, "syslog: bad structured data");
        syslog_header::skip_bom(rest);
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
