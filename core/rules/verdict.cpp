// verdict.cpp -- formatting and reading back of verdict lines. The quoting is
// the one contract between the verdict writer and the log parser: both
// directions live here (on top of the verdict renderer of core/text) so they
// cannot drift. Every part of the line that can hold outside text, the key
// included, goes through the same quoting.
#include "retryguard/rules/verdict.hpp"

#include "retryguard/text/text.hpp"

namespace retryguard {

std::string_view Verdict::field(std::string_view k) const noexcept {
    for (const auto& [name, value] : fields)
        if (name == k) return value;
    return {};
}

std::string quote_verdict_value(std::string_view value) {
    return text::verdict_value(value);
}

std::string quote_verdict_key(std::string_view key) {
    return text::verdict_key(key);
}

std::string format_verdict(const Verdict& v) {
    std::string out = quote_verdict_key(v.key);
    out += ": verdict=";
    out += quote_verdict_value(v.name);
    for (const auto& [k, value] : v.fields) {
        out += ' ';
        // Field names are the writer's own words; quoted anyway if one ever is not.
        out += quote_verdict_value(k);
        out += '=';
        out += quote_verdict_value(value);
    }
    return out;
}

bool parse_verdict_fields(std::string_view text, std::vector<std::pair<std::string, std::string>>& out) {
    std::size_t i = 0;
    const std::size_t n = text.size();
    std::string key, value;
    while (i < n) {
        while (i < n && text[i] == ' ') ++i;
        if (i >= n) break;
        if (text[i] == '"') {
            if (!text::read_verdict_value(text, i, key, '=')) return false;
            if (i >= n || text[i] != '=') return false;
        } else {
            const std::size_t eq = text.find('=', i);
            if (eq == std::string_view::npos || eq == i) return false;
            key.assign(text.substr(i, eq - i));
            if (key.find(' ') != std::string::npos) return false;
            i = eq;
        }
        ++i;  // '='
        if (!text::read_verdict_value(text, i, value)) return false;
        out.emplace_back(key, value);
    }
    return true;
}

bool parse_verdict_line(std::string_view text, VerdictLine& out) {
    out.key.clear();
    out.has_key = false;
    out.fields.clear();
    std::string_view rest = text;
    if (!rest.empty() && rest.front() == '"') {
        // A quoted key: read exactly what the writer quoted; it must end in ": ".
        std::size_t pos = 0;
        if (!text::read_verdict_value(rest, pos, out.key, ':')) return false;
        if (rest.substr(pos, 2) != ": ") return false;
        out.has_key = true;
        rest.remove_prefix(pos + 2);
    } else {
        // A bare key holds no space and no '=' (else it is quoted), so the first
        // ": " before any '=' ends it.
        const std::size_t colon = rest.find(": ");
        const std::size_t first_eq = rest.find('=');
        if (colon != std::string_view::npos && (first_eq == std::string_view::npos || colon < first_eq)) {
            std::string_view key = rest.substr(0, colon);
            if (key != "-") out.key.assign(key);
            out.has_key = true;
            rest.remove_prefix(colon + 2);
        }
    }
    return parse_verdict_fields(rest, out.fields);
}

}  // namespace retryguard
