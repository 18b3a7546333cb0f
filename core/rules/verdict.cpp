// verdict.cpp -- formatting and reading back of verdict lines. The quoting is
// the one contract between the verdict writer and the log parser: keep both
// directions here so they cannot drift.
#include "retryguard/verdict.hpp"

#include <fmt/format.h>

namespace retryguard {

std::string_view Verdict::field(std::string_view k) const noexcept {
    for (const auto& [name, value] : fields)
        if (name == k) return value;
    return {};
}

std::string quote_verdict_value(std::string_view value) {
    bool needs = value.empty();
    for (unsigned char c : value)
        if (c <= ' ' || c == '"' || c == '\\' || c == '=' || c == 0x7f) needs = true;
    if (!needs) return std::string(value);
    std::string out;
    out.reserve(value.size() + 2);
    out += '"';
    for (unsigned char c : value) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c < ' ' || c == 0x7f) {
            out += fmt::format("\\x{:02x}", c);
        } else {
            out += static_cast<char>(c);
        }
    }
    out += '"';
    return out;
}

std::string format_verdict(const Verdict& v) {
    std::string out = v.key.empty() ? std::string("-") : v.key;
    out += ": verdict=";
    out += quote_verdict_value(v.name);
    for (const auto& [k, value] : v.fields) {
        out += ' ';
        out += k;
        out += '=';
        out += quote_verdict_value(value);
    }
    return out;
}

namespace {
int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}
}  // namespace

bool parse_verdict_fields(std::string_view text, std::vector<std::pair<std::string, std::string>>& out) {
    size_t i = 0;
    const size_t n = text.size();
    while (i < n) {
        while (i < n && text[i] == ' ') ++i;
        if (i >= n) break;
        size_t eq = text.find('=', i);
        if (eq == std::string_view::npos || eq == i) return false;
        std::string key(text.substr(i, eq - i));
        if (key.find(' ') != std::string::npos) return false;
        i = eq + 1;
        std::string value;
        if (i < n && text[i] == '"') {
            ++i;
            bool closed = false;
            while (i < n) {
                char c = text[i++];
                if (c == '"') {
                    closed = true;
                    break;
                }
                if (c == '\\') {
                    if (i >= n) break;
                    char e = text[i++];
                    if (e == 'x') {
                        if (i + 2 > n) return false;
                        int hi = hex_value(text[i]), lo = hex_value(text[i + 1]);
                        if (hi < 0 || lo < 0) return false;
                        value += static_cast<char>(hi * 16 + lo);
                        i += 2;
                    } else {
                        value += e;
                    }
                } else {
                    value += c;
                }
            }
            // An unterminated quote at the end is a record cut by syslog's
            // length limit: keep what arrived rather than losing the verdict.
            if (closed && i < n && text[i] != ' ') return false;
        } else {
            size_t end = text.find(' ', i);
            if (end == std::string_view::npos) end = n;
            value.assign(text.substr(i, end - i));
            i = end;
        }
        out.emplace_back(std::move(key), std::move(value));
    }
    return true;
}

}  // namespace retryguard
