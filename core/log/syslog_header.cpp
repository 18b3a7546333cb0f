// syslog_header.cpp -- see syslog_header.hpp. Bounded: each function looks at
// each byte of the header once.
#include "log/syslog_header.hpp"

namespace retryguard::syslog_header {

std::optional<Priority> scan_priority(std::string_view s) noexcept {
    if (s.empty() || s[0] != '<') return std::nullopt;
    std::size_t i = 1;
    int value = 0;
    while (i < s.size() && i <= 3 && s[i] >= '0' && s[i] <= '9') value = value * 10 + (s[i++] - '0');
    if (i == 1 || i >= s.size() || s[i] != '>') return std::nullopt;
    return Priority{value, i + 1};
}

bool take_rfc5424_version(std::string_view& s) noexcept {
    if (s.size() < 2 || s[0] != '1' || s[1] != ' ') return false;
    s.remove_prefix(2);
    return true;
}

StructuredData skip_structured_data(std::string_view& s) noexcept {
    if (!s.empty() && s[0] == '-') {
        s.remove_prefix(1);
        return StructuredData::skipped;
    }
    if (s.empty() || s[0] != '[') return StructuredData::missing;
    while (!s.empty() && s[0] == '[') {
        std::size_t i = 1;
        bool quoted = false, closed = false;
        for (; i < s.size(); ++i) {
            const char c = s[i];
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
        if (!closed) {
            s = {};
            return StructuredData::unterminated;
        }
        s.remove_prefix(i + 1);
    }
    return StructuredData::skipped;
}

void skip_bom(std::string_view& s) noexcept {
    if (s.substr(0, 3) == "\xEF\xBB\xBF") s.remove_prefix(3);
}

}  // namespace retryguard::syslog_header
