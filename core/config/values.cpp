// values.cpp -- text forms of the value types the key table declares:
// durations, sizes, socket specs, host:port, policy actions. Strict and
// bounded: anything not spelled exactly as documented is rejected with a
// reason. Must never throw and never consult the key table.
#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>
#include <string>

#include "config/values.hpp"

namespace retryguard::config {
namespace {

bool set_why(std::string* why, std::string text) {
    if (why) *why = std::move(text);
    return false;
}

std::optional<std::uint64_t> parse_digits(std::string_view s) {
    if (s.empty() || s.size() > 18) return std::nullopt;
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
    return v;
}

}  // namespace

std::optional<Duration> parse_duration(std::string_view text, bool bare_seconds, std::string* why) {
    static constexpr std::int64_t kMaxMs = 100LL * 365 * 24 * 3600 * 1000;  // a century is plenty
    if (text.empty()) return set_why(why, "empty duration"), std::nullopt;
    if (text.find_first_not_of("0123456789") == std::string_view::npos) {
        if (!bare_seconds)
            return set_why(why, "a duration needs a unit: ms, s, m, h, d or w (e.g. \"30m\")"), std::nullopt;
        auto v = parse_digits(text);
        if (!v || *v > static_cast<std::uint64_t>(kMaxMs / 1000))
            return set_why(why, "duration too large"), std::nullopt;
        return Duration(static_cast<std::int64_t>(*v) * 1000);
    }
    // One or more <digits><unit> groups, largest unit first is not required:
    // "1h30m" and "90m" are both fine.
    std::int64_t total = 0;
    std::size_t i = 0;
    while (i < text.size()) {
        std::size_t j = i;
        while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
        if (j == i) return set_why(why, "expected a number before the unit"), std::nullopt;
        auto n = parse_digits(text.substr(i, j - i));
        std::size_t k = j;
        while (k < text.size() && std::isalpha(static_cast<unsigned char>(text[k]))) ++k;
        std::string_view unit = text.substr(j, k - j);
        std::int64_t mult = 0;
        if (unit == "ms")
            mult = 1;
        else if (unit == "s")
            mult = 1000;
        else if (unit == "m")
            mult = 60LL * 1000;
        else if (unit == "h")
            mult = 3600LL * 1000;
        else if (unit == "d")
            mult = 86400LL * 1000;
        else if (unit == "w")
            mult = 7 * 86400LL * 1000;
        else if (unit.empty())
            return set_why(why, "missing unit after a number"), std::nullopt;
        else
            return set_why(why,
                           "unknown duration unit '" + std::string(unit) + "' (use ms, s, m, h, d or w)"),
                   std::nullopt;
        if (!n || *n > static_cast<std::uint64_t>(kMaxMs / mult) ||
            total > kMaxMs - static_cast<std::int64_t>(*n) * mult)
            return set_why(why, "duration too large"), std::nullopt;
        total += static_cast<std::int64_t>(*n) * mult;
        i = k;
    }
    return Duration(total);
}

std::string format_duration(Duration d) {
    std::int64_t ms = d.count();
    if (ms == 0) return "0s";
    struct U {
        std::int64_t ms;
        const char* name;
    };
    static constexpr U units[] = {{7 * 86400000LL, "w"}, {86400000LL, "d"}, {3600000LL, "h"},
                                  {60000LL, "m"},        {1000LL, "s"},     {1, "ms"}};
    // Up to two days read better in hours ("24h", "48h"), as the guidance writes them.
    for (const auto& u : units)
        if (ms % u.ms == 0 && !(u.ms >= 86400000LL && ms < 3 * 86400000LL))
            return std::to_string(ms / u.ms) + u.name;
    return std::to_string(ms) + "ms";
}

std::optional<std::uint64_t> parse_size(std::string_view text, std::string* why) {
    std::size_t j = 0;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    if (j == 0) return set_why(why, "a size is a number with a unit, e.g. \"64KiB\""), std::nullopt;
    auto n = parse_digits(text.substr(0, j));
    std::string_view unit = text.substr(j);
    std::uint64_t mult = 0;
    if (unit == "B")
        mult = 1;
    else if (unit == "KiB")
        mult = 1024;
    else if (unit == "MiB")
        mult = 1024 * 1024;
    else if (unit == "GiB")
        mult = 1024ULL * 1024 * 1024;
    else if (unit.empty())
        return set_why(why, "a size needs a unit: B, KiB, MiB or GiB (e.g. \"64KiB\")"), std::nullopt;
    else
        return set_why(why, "unknown size unit '" + std::string(unit) + "' (use B, KiB, MiB or GiB)"),
               std::nullopt;
    if (!n || *n > (1ULL << 50) / mult) return set_why(why, "size too large"), std::nullopt;
    return *n * mult;
}

std::string format_size(std::uint64_t bytes) {
    if (bytes != 0 && bytes % (1024ULL * 1024 * 1024) == 0) return std::to_string(bytes >> 30) + "GiB";
    if (bytes != 0 && bytes % (1024ULL * 1024) == 0) return std::to_string(bytes >> 20) + "MiB";
    if (bytes != 0 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + "KiB";
    return std::to_string(bytes) + "B";
}

namespace {

bool valid_hostname(std::string_view h) {
    if (h.empty() || h.size() > 253) return false;
    for (char c : h)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) return false;
    return true;
}

bool valid_host(std::string_view h, bool* is_v6 = nullptr) {
    std::string s(h);
    unsigned char buf[16];
    if (inet_pton(AF_INET6, s.c_str(), buf) == 1) {
        if (is_v6) *is_v6 = true;
        return true;
    }
    if (is_v6) *is_v6 = false;
    if (inet_pton(AF_INET, s.c_str(), buf) == 1) return true;
    return valid_hostname(h);
}

std::optional<std::uint16_t> parse_port(std::string_view p, std::string* why) {
    auto v = parse_digits(p);
    if (!v || *v > 65535) return set_why(why, "bad port '" + std::string(p) + "' (0-65535)"), std::nullopt;
    return static_cast<std::uint16_t>(*v);
}

bool safe_path(std::string_view p, std::string* why) {
    if (p.empty() || p.front() != '/') return set_why(why, "a socket path must be absolute");
    if (p.size() > 107) return set_why(why, "a UNIX socket path is at most 107 bytes");
    for (char c : p)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
            return set_why(why, "control character in path");
    return true;
}

}  // namespace

std::optional<SocketSpec> parse_socket(std::string_view text, std::string* why) {
    SocketSpec s;
    s.text = std::string(text);
    auto colon = text.find(':');
    if (colon == std::string_view::npos)
        return set_why(why, "expected unix:/path, local:/path, inet:port@host or inet6:port@host"),
               std::nullopt;
    std::string_view proto = text.substr(0, colon), rest = text.substr(colon + 1);
    if (proto == "unix" || proto == "local") {
        if (!safe_path(rest, why)) return std::nullopt;
        s.kind = SocketSpec::Kind::unix_path;
        s.path = std::string(rest);
        return s;
    }
    if (proto != "inet" && proto != "inet6")
        return set_why(why, "unknown socket type '" + std::string(proto) +
                                "' (expected unix, local, inet or inet6)"),
               std::nullopt;
    auto at = rest.find('@');
    if (at == std::string_view::npos)
        return set_why(why, std::string(proto) + " sockets are written " + std::string(proto) + ":port@host"),
               std::nullopt;
    auto port = parse_port(rest.substr(0, at), why);
    if (!port) return std::nullopt;
    if (*port == 0) return set_why(why, "port 0 is not a listen port"), std::nullopt;
    std::string_view host = rest.substr(at + 1);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    bool v6 = false;
    if (!valid_host(host, &v6)) return set_why(why, "bad host '" + std::string(host) + "'"), std::nullopt;
    unsigned char v4[4];
    if (proto == "inet6" && !v6 && inet_pton(AF_INET, std::string(host).c_str(), v4) == 1)
        return set_why(why, "inet6 needs an IPv6 address or a host name"), std::nullopt;
    if (proto == "inet" && v6) return set_why(why, "use inet6: for an IPv6 address"), std::nullopt;
    s.kind = proto == "inet" ? SocketSpec::Kind::inet : SocketSpec::Kind::inet6;
    s.host = std::string(host);
    s.port = *port;
    return s;
}

std::optional<HostPort> parse_host_port(std::string_view text, std::string* why) {
    HostPort hp;
    hp.text = std::string(text);
    std::string_view host, port;
    if (!text.empty() && text.front() == '[') {
        auto close = text.find(']');
        if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
            return set_why(why, "expected [v6-address]:port"), std::nullopt;
        host = text.substr(1, close - 1);
        port = text.substr(close + 2);
    } else {
        auto colon = text.rfind(':');
        if (colon == std::string_view::npos || text.find(':') != colon)
            return set_why(why, "expected host:port (or [v6-address]:port)"), std::nullopt;
        host = text.substr(0, colon);
        port = text.substr(colon + 1);
    }
    if (!valid_host(host)) return set_why(why, "bad host '" + std::string(host) + "'"), std::nullopt;
    auto p = parse_port(port, why);
    if (!p) return std::nullopt;
    hp.host = std::string(host);
    hp.port = *p;
    return hp;
}

bool is_ip_address(std::string_view host) {
    std::string s(host);
    unsigned char buf[16];
    return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

bool is_loopback(std::string_view host) {
    if (host == "localhost") return true;
    std::string s(host);
    unsigned char buf[16];
    if (inet_pton(AF_INET, s.c_str(), buf) == 1) return buf[0] == 127;
    if (inet_pton(AF_INET6, s.c_str(), buf) == 1) {
        static const unsigned char one[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
        return std::equal(buf, buf + 16, one);
    }
    return false;
}

bool check_placeholders(std::string_view text, std::span<const std::string_view> allowed, std::string* why) {
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '}') return set_why(why, "unmatched '}' in text");
        if (text[i] != '{') continue;
        auto close = text.find('}', i);
        if (close == std::string_view::npos) return set_why(why, "unclosed '{' in text");
        std::string_view name = text.substr(i + 1, close - i - 1);
        if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
            std::string list;
            for (auto a : allowed) list += (list.empty() ? "{" : ", {") + std::string(a) + "}";
            return set_why(why, "unknown placeholder '{" + std::string(name) + "}' (known: " + list + ")");
        }
        i = close;
    }
    return true;
}

bool printable_text(std::string_view text, std::string* why) {
    for (char c : text)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
            return set_why(why, "control characters (newline, tab, ...) are not allowed here");
    return true;
}

std::optional<PolicyAction> parse_policy_action(std::string_view text,
                                                std::span<const std::string_view> verbs,
                                                std::span<const std::string_view> placeholders,
                                                std::string* why) {
    auto sp = text.find(' ');
    std::string_view verb = text.substr(0, sp);
    std::string_view rest = sp == std::string_view::npos ? std::string_view{} : text.substr(sp + 1);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    auto it = std::find(verbs.begin(), verbs.end(), verb);
    if (it == verbs.end()) {
        std::string list;
        for (auto v : verbs) list += (list.empty() ? "" : ", ") + std::string(v);
        return set_why(why, "unknown policy action '" + std::string(verb) + "' (expected " + list +
                                ", followed by text where Postfix allows it)"),
               std::nullopt;
    }
    PolicyAction a;
    a.verb = static_cast<PolicyAction::Verb>(it - verbs.begin());
    a.text = std::string(rest);
    if (!printable_text(rest, why)) return std::nullopt;
    if (rest.size() > 400) return set_why(why, "action text longer than 400 characters"), std::nullopt;
    if (a.verb == PolicyAction::Verb::dunno && !rest.empty())
        return set_why(why, "DUNNO takes no text"), std::nullopt;
    if (a.verb == PolicyAction::Verb::prepend) {
        auto colon = rest.find(':');
        bool ok = colon != std::string_view::npos && colon > 0;
        for (std::size_t i = 0; ok && i < colon; ++i) {
            unsigned char c = static_cast<unsigned char>(rest[i]);
            ok = c > 32 && c < 127 && c != ':';
        }
        if (!ok) return set_why(why, "PREPEND needs a header: \"PREPEND Header-Name: value\""), std::nullopt;
    }
    if (!check_placeholders(rest, placeholders, why)) return std::nullopt;
    return a;
}

std::string PolicyAction::to_string() const {
    static constexpr const char* verbs[] = {"DUNNO",           "WARN",  "INFO", "PREPEND", "HOLD",
                                            "DEFER_IF_PERMIT", "REJECT"};
    std::string out = verbs[static_cast<int>(verb)];
    if (!text.empty()) out += " " + text;
    return out;
}

std::optional<std::string> glob_to_regex(std::string_view glob, std::size_t* literal_chars,
                                         std::string* why) {
    std::string re = "(?i)";
    std::size_t literals = 0;
    for (std::size_t i = 0; i < glob.size(); ++i) {
        char c = glob[i];
        if (c == '*') {
            re += ".*";
        } else if (c == '?') {
            re += ".";
        } else if (c == '[') {
            auto close = glob.find(']', i + 2);  // "[]a]" style: first ']' is literal
            if (close == std::string_view::npos)
                return set_why(why, "unclosed '[' in glob '" + std::string(glob) + "'"), std::nullopt;
            std::string_view cls = glob.substr(i + 1, close - i - 1);
            re += "[";
            std::size_t k = 0;
            if (!cls.empty() && (cls[0] == '!' || cls[0] == '^')) re += "^", k = 1;
            for (; k < cls.size(); ++k) {
                char d = cls[k];
                if (d == '\\' || d == '[' || d == ']' || d == '^') re += '\\';
                re += d;
            }
            re += "]";
            i = close;
        } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') {
            re += c;
            ++literals;
        } else if (c == '.') {
            re += "\\.";
            ++literals;
        } else {
            return set_why(why, std::string("character '") + c + "' is not allowed in a host glob"),
                   std::nullopt;
        }
    }
    if (literal_chars) *literal_chars = literals;
    return re;
}

}  // namespace retryguard::config
