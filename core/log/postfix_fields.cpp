// postfix_fields.cpp -- the small readers the Postfix message shapes are made
// of: numbers, queue ids, host[addr]:port, comma lists and space-separated
// key=value tails, enhanced status codes, Postfix's daemon names.
//
// Must never: throw, allocate in proportion to anything but the (capped) line,
// or backtrack. Peer-controlled text (addresses, replies) may contain any byte;
// only delimiters Postfix itself writes are trusted for splitting.
#include <array>
#include <charconv>

#include "log/log_parser_internal.hpp"

namespace retryguard::log_detail {

// Fixed-width decimal field; false unless every char is a digit.
bool digits(sv s, int& out) {
    if (s.empty() || s.size() > 9) return false;
    int v = 0;
    for (char c : s) {
        if (!is_digit(c)) return false;
        v = v * 10 + (c - '0');
    }
    out = v;
    return true;
}

bool parse_int64(sv s, std::int64_t& out) {
    if (s.empty() || s.size() > 18) return false;
    std::int64_t v = 0;
    for (char c : s) {
        if (!is_digit(c)) return false;
        v = v * 10 + (c - '0');
    }
    out = v;
    return true;
}

bool parse_double(sv s, double& out) {
    if (s.empty() || s.size() > 32) return false;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc{} && p == s.data() + s.size();
}

// Postfix queue ids. Short: upper-case hex, microseconds (5 digits) + inode.
// Long (enable_long_queue_ids): 10 base-52 chars of time, 'z', inode chars.
bool is_queue_id(sv s) {
    if (s.size() >= 6 && s.size() <= 20) {
        bool hex = true;
        for (char c : s) hex = hex && is_upper_hex(c);
        if (hex) return true;
    }
    if (s.size() >= 12 && s.size() <= 24 && s[10] == 'z' && is_digit(s[0])) {
        for (std::size_t i = 0; i < s.size(); ++i) {
            if (!is_alnum(s[i])) return false;
            if (i < 10 && s[i] == 'z') return false;
        }
        return true;
    }
    return false;
}

// host[addr] or host[addr]:port at the start of s. Returns consumed length, 0 if
// s does not start with one. The address may be IPv6 ("[2001:db8::1]") or a
// UNIX socket path (lmtp "[private/dovecot-lmtp]").
std::size_t parse_host_addr(sv s, sv& host, sv& addr, int& port) {
    std::size_t open = 0;
    while (open < s.size() && s[open] != '[' && s[open] != ' ' && s[open] != ',') ++open;
    if (open == 0 || open >= s.size() || s[open] != '[') return 0;
    std::size_t close = s.find(']', open + 1);
    if (close == npos) return 0;
    host = s.substr(0, open);
    addr = s.substr(open + 1, close - open - 1);
    port = 0;
    std::size_t end = close + 1;
    if (end + 1 < s.size() && s[end] == ':' && is_digit(s[end + 1])) {
        std::size_t p = end + 1;
        while (p < s.size() && is_digit(s[p]) && p - end <= 6) ++p;
        int v = 0;
        if (digits(s.substr(end + 1, p - end - 1), v) && v <= 65535) {
            port = v;
            end = p;
        }
    }
    return end;
}

void set_relay(Event& ev, sv relay) {
    ev.relay.assign(relay);
    sv host, addr;
    int port = 0;
    if (parse_host_addr(relay, host, addr, port) != 0) {
        ev.relay_host.assign(host);
        ev.relay_addr.assign(addr);
        ev.relay_port = port;
    } else {
        ev.relay_host.assign(relay);
    }
}

sv strip_brackets(sv v) {
    if (v.size() >= 2 && v.front() == '<' && v.back() == '>') return v.substr(1, v.size() - 2);
    return v;
}

bool next_comma_item(sv s, CommaScan& scan, sv& key, sv& value) {
    std::size_t& pos = scan.pos;
    while (pos < s.size() && s[pos] == ' ') ++pos;
    if (pos >= s.size()) return false;
    std::size_t eq = pos;
    while (eq < s.size() && (is_lower(s[eq]) || s[eq] == '_' || is_digit(s[eq]) || s[eq] == '-')) ++eq;
    if (eq == pos || eq >= s.size() || s[eq] != '=') return false;
    key = s.substr(pos, eq - pos);
    std::size_t v = eq + 1;
    std::size_t end;
    if (v < s.size() && s[v] == '<') {
        if (!scan.close_valid || (scan.close != npos && scan.close < v)) {
            scan.close = s.find(">, ", v);
            scan.close_valid = true;
        }
        std::size_t close = scan.close;
        if (close == npos) {
            close = (!s.empty() && s.back() == '>') ? s.size() - 1 : npos;
            end = close == npos ? s.find(", ", v) : close + 1;
        } else {
            end = close + 1;
        }
    } else {
        end = s.find(", ", v);
    }
    if (end == npos) end = s.size();
    value = s.substr(v, end - v);
    pos = end;
    if (pos < s.size() && s[pos] == ',') ++pos;
    return true;
}

// Space-separated "key=value" tail of smtpd/cleanup action lines
// ("from=<a> to=<b> proto=ESMTP helo=<h>"). Stops at ": " after a token, which
// is where cleanup header/body checks put their reason.
void parse_space_tail(sv s, Event& ev, sv* trailing_reason) {
    std::size_t pos = 0;
    while (pos < s.size()) {
        while (pos < s.size() && s[pos] == ' ') ++pos;
        if (pos >= s.size()) break;
        if (s[pos] == ':' && trailing_reason) {
            std::size_t r = pos + 1;
            while (r < s.size() && s[r] == ' ') ++r;
            *trailing_reason = s.substr(r);
            return;
        }
        std::size_t eq = pos;
        while (eq < s.size() && (is_lower(s[eq]) || s[eq] == '_')) ++eq;
        if (eq == pos || eq >= s.size() || s[eq] != '=') {
            std::size_t sp = s.find(' ', pos);
            pos = sp == npos ? s.size() : sp;
            continue;
        }
        sv key = s.substr(pos, eq - pos);
        std::size_t v = eq + 1, end;
        if (v < s.size() && s[v] == '<') {
            end = s.find('>', v);
            end = end == npos ? s.size() : end + 1;
        } else {
            end = v;
            while (end < s.size() && s[end] != ' ' && !(s[end] == ':' && end + 1 == s.size()) &&
                   !(s[end] == ':' && s[end + 1] == ' '))
                ++end;
        }
        sv value = s.substr(v, end - v);
        // postscreen separates its tail with ", ".
        if (!value.empty() && value.back() == ',' && value.front() != '<') value.remove_suffix(1);
        if (key == "from")
            ev.sender.assign(strip_brackets(value));
        else if (key == "to")
            ev.recipient.assign(strip_brackets(value));
        else
            add_field(ev, std::string(key), std::string(strip_brackets(value)));
        pos = end;
    }
}

// "4.7.1" at the start of s (cleanup milter replies log the enhanced code
// alone) or after a 3-digit code ("451 4.7.1 ...").
sv leading_dsn(sv s) {
    std::size_t p = 0;
    if (s.size() >= 4 && is_digit(s[0]) && is_digit(s[1]) && is_digit(s[2]) && s[3] == ' ') p = 4;
    std::size_t q = p;
    if (q >= s.size() || !(s[q] == '2' || s[q] == '4' || s[q] == '5')) return {};
    ++q;
    for (int part = 0; part < 2; ++part) {
        if (q >= s.size() || s[q] != '.') return {};
        ++q;
        std::size_t start = q;
        while (q < s.size() && is_digit(s[q]) && q - start < 3) ++q;
        if (q == start) return {};
    }
    if (q < s.size() && s[q] != ' ' && s[q] != ';') return {};
    return s.substr(p, q - p);
}

bool is_delivery_agent_like(sv process) {
    return process == "smtp" || process == "lmtp";
}

bool is_postfix_process(sv p) {
    static constexpr std::array<sv, 40> names = {
        "smtp",       "lmtp",      "local",           "virtual",   "pipe",
        "error",      "retry",     "discard",         "qmgr",      "oqmgr",
        "nqmgr",      "cleanup",   "pickup",          "smtpd",     "bounce",
        "defer",      "trace",     "postsuper",       "postqueue", "sendmail",
        "postdrop",   "master",    "anvil",           "scache",    "tlsmgr",
        "postscreen", "dnsblog",   "tlsproxy",        "verify",    "showq",
        "flush",      "proxymap",  "trivial-rewrite", "postlogd",  "postfix-script",
        "postmap",    "postalias", "postlog",         "spawn",     "qmqpd"};
    for (sv n : names)
        if (p == n) return true;
    return false;
}

}  // namespace retryguard::log_detail
