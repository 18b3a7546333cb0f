// text.cpp -- the renderers of outside text (include/retryguard/text/text.hpp): JSON,
// terminal, verdict line, HTML, and cutting without splitting a character. One
// UTF-8 decoder and one "unsafe code point" predicate serve all of them, so the
// outputs cannot disagree about what a byte is. Never throws on content.
#include "retryguard/text/text.hpp"

namespace retryguard::text {
namespace {

constexpr char kHex[] = "0123456789abcdef";

void append_hex_byte(std::string& out, const char* prefix, unsigned char c) {
    out += prefix;
    out += kHex[c >> 4];
    out += kHex[c & 15];
}

// The code point of a well-formed sequence of `len` bytes at s[i].
char32_t decode(std::string_view s, std::size_t i, std::size_t len) noexcept {
    auto b = [&](std::size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[i + k])); };
    switch (len) {
        case 1: return b(0);
        case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
        case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
        default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    }
}

// Code points above ASCII that a terminal or a log viewer acts on instead of
// showing: the C1 controls (U+009B is CSI on terminals that honour 8-bit
// controls), the line and paragraph separators, and the bidirectional
// embeddings, overrides and isolates (they reorder what follows on screen).
bool unsafe_code_point(char32_t cp) noexcept {
    return (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 || (cp >= 0x202A && cp <= 0x202E) ||
           (cp >= 0x2066 && cp <= 0x2069);
}

void append_u_escape(std::string& out, char32_t cp) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(cp >> shift) & 15];
}

}  // namespace

std::size_t utf8_sequence_length(std::string_view s, std::size_t i) noexcept {
    if (i >= s.size()) return 0;
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) return 1;
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;  // overlong
        if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;  // overlong
        if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
        return 0;
    }
    if (i + len > s.size()) return 0;
    for (std::size_t k = 1; k < len; ++k) {
        const auto d = static_cast<unsigned char>(s[i + k]);
        if (k == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) return 0;
    }
    return len;
}

bool is_valid_utf8(std::string_view s) noexcept {
    for (std::size_t i = 0; i < s.size();) {
        const std::size_t len = utf8_sequence_length(s, i);
        if (len == 0) return false;
        i += len;
    }
    return true;
}

std::string replace_invalid_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size();) {
        const std::size_t len = utf8_sequence_length(s, i);
        if (len == 0) {
            out += "\xEF\xBF\xBD";
            ++i;
        } else {
            out.append(s.data() + i, len);
            i += len;
        }
    }
    return out;
}

// ---------------------------------------------------------------------------
// JSON

void append_json_string(std::string& out, std::string_view s) {
    out += '"';
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7f) {
            if (c == '"' || c == '\\') out += '\\';
            out += static_cast<char>(c);
            ++i;
            continue;
        }
        if (c < 0x80) {
            switch (c) {
                case '\n': out += "\\n"; break;
                case '\t': out += "\\t"; break;
                case '\r': out += "\\r"; break;
                case '\b': out += "\\b"; break;
                case '\f': out += "\\f"; break;
                default: append_hex_byte(out, "\\u00", c);  // other C0 controls and DEL
            }
            ++i;
            continue;
        }
        const std::size_t len = utf8_sequence_length(s, i);
        if (len == 0) {
            out += "\xEF\xBF\xBD";
            ++i;
            continue;
        }
        const char32_t cp = decode(s, i, len);
        if (unsafe_code_point(cp))
            append_u_escape(out, cp);  // valid JSON either way; escaped so no terminal acts on it
        else
            out.append(s.data() + i, len);
        i += len;
    }
    out += '"';
}

std::string json_string(std::string_view s) {
    std::string out;
    out.reserve(s.size() + 2);
    append_json_string(out, s);
    return out;
}

namespace {

void dump_value(std::string& out, const nlohmann::json& v, int indent, int level) {
    using value_t = nlohmann::json::value_t;
    auto newline = [&](int lvl) {
        if (indent < 0) return;
        out += '\n';
        out.append(static_cast<std::size_t>(indent) * static_cast<std::size_t>(lvl), ' ');
    };
    switch (v.type()) {
        case value_t::string: append_json_string(out, v.get_ref<const std::string&>()); return;
        case value_t::object: {
            if (v.empty()) {
                out += "{}";
                return;
            }
            out += '{';
            bool first = true;
            for (auto it = v.begin(); it != v.end(); ++it) {
                if (!first) out += ',';
                first = false;
                newline(level + 1);
                append_json_string(out, it.key());
                out += indent < 0 ? ":" : ": ";
                dump_value(out, it.value(), indent, level + 1);
            }
            newline(level);
            out += '}';
            return;
        }
        case value_t::array: {
            if (v.empty()) {
                out += "[]";
                return;
            }
            out += '[';
            bool first = true;
            for (const auto& e : v) {
                if (!first) out += ',';
                first = false;
                newline(level + 1);
                dump_value(out, e, indent, level + 1);
            }
            newline(level);
            out += ']';
            return;
        }
        default:
            // Numbers, booleans, null: nlohmann's own formatting (cannot throw:
            // only strings can hold invalid UTF-8).
            out += v.dump();
            return;
    }
}

}  // namespace

std::string json_dump(const nlohmann::json& doc, int indent) {
    std::string out;
    dump_value(out, doc, indent, 0);
    return out;
}

// ---------------------------------------------------------------------------
// Terminal

void append_terminal(std::string& out, std::string_view s) {
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7f) {
            out += static_cast<char>(c);
            ++i;
            continue;
        }
        const std::size_t len = c < 0x80 ? 0 : utf8_sequence_length(s, i);
        if (len == 0) {  // C0 control, DEL, or a byte of invalid UTF-8
            append_hex_byte(out, "\\x", c);
            ++i;
            continue;
        }
        const char32_t cp = decode(s, i, len);
        if (unsafe_code_point(cp))
            append_u_escape(out, cp);
        else
            out.append(s.data() + i, len);
        i += len;
    }
}

std::string terminal(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    append_terminal(out, s);
    return out;
}

nlohmann::json terminal_document(const nlohmann::json& doc) {
    switch (doc.type()) {
        case nlohmann::json::value_t::string: return terminal(doc.get_ref<const std::string&>());
        case nlohmann::json::value_t::object: {
            nlohmann::json out = nlohmann::json::object();
            for (auto it = doc.begin(); it != doc.end(); ++it)
                out[terminal(it.key())] = terminal_document(*it);
            return out;
        }
        case nlohmann::json::value_t::array: {
            nlohmann::json out = nlohmann::json::array();
            for (const auto& e : doc) out.push_back(terminal_document(e));
            return out;
        }
        default: return doc;
    }
}

// ---------------------------------------------------------------------------
// Verdict lines

namespace {

// Bytes [i, i+len) that must be written as \xHH inside quotes: C0, DEL, invalid
// UTF-8 (len 1) and the code points the terminal renderer escapes.
std::size_t escaped_run(std::string_view s, std::size_t i) noexcept {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return 1;
    if (c < 0x80) return 0;
    const std::size_t len = utf8_sequence_length(s, i);
    if (len == 0) return 1;
    return unsafe_code_point(decode(s, i, len)) ? len : 0;
}

bool needs_quoting(std::string_view s) noexcept {
    if (s.empty()) return true;
    for (std::size_t i = 0; i < s.size(); ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c <= ' ' || c == '"' || c == '\\' || c == '=' || c == 0x7f) return true;
        if (c >= 0x80) {
            if (escaped_run(s, i) != 0) return true;
            i += utf8_sequence_length(s, i) - 1;
        }
    }
    return false;
}

int hex_value(char c) noexcept {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

}  // namespace

std::string verdict_value(std::string_view value) {
    if (!needs_quoting(value)) return std::string(value);
    std::string out;
    out.reserve(value.size() + 2);
    out += '"';
    for (std::size_t i = 0; i < value.size();) {
        const auto c = static_cast<unsigned char>(value[i]);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
            ++i;
            continue;
        }
        if (std::size_t run = escaped_run(value, i)) {
            for (std::size_t k = 0; k < run; ++k)
                append_hex_byte(out, "\\x", static_cast<unsigned char>(value[i + k]));
            i += run;
            continue;
        }
        const std::size_t len = c < 0x80 ? 1 : utf8_sequence_length(value, i);
        out.append(value.data() + i, len);
        i += len;
    }
    out += '"';
    return out;
}

std::string verdict_key(std::string_view key) {
    if (key.empty()) return "-";
    return verdict_value(key);
}

bool read_verdict_value(std::string_view text, std::size_t& pos, std::string& value, char after) {
    const std::size_t n = text.size();
    std::size_t i = pos;
    value.clear();
    if (i < n && text[i] == '"') {
        ++i;
        bool closed = false;
        while (i < n) {
            const char c = text[i++];
            if (c == '"') {
                closed = true;
                break;
            }
            if (c != '\\') {
                value += c;
                continue;
            }
            if (i >= n) break;
            const char e = text[i++];
            if (e == 'x') {
                if (i + 2 > n) {  // cut inside an escape: the record ends here
                    i = n;
                    break;
                }
                const int hi = hex_value(text[i]), lo = hex_value(text[i + 1]);
                if (hi < 0 || lo < 0) return false;
                value += static_cast<char>(hi * 16 + lo);
                i += 2;
            } else {
                value += e;
            }
        }
        // An unterminated quote at the end is a record cut by syslog's length
        // limit: keep what arrived rather than losing the verdict.
        if (closed && i < n && text[i] != after) return false;
    } else {
        std::size_t end = text.find(' ', i);
        if (end == std::string_view::npos) end = n;
        value.assign(text.substr(i, end - i));
        i = end;
    }
    pos = i;
    return true;
}

// ---------------------------------------------------------------------------
// HTML

std::string html(std::string_view s) {
    const std::string shown = terminal(s);
    std::string out;
    out.reserve(shown.size());
    for (char c : shown) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    return out;
}

// ---------------------------------------------------------------------------
// Policy answers

void append_policy_text(std::string& out, std::string_view s, std::size_t max_bytes) {
    s = utf8_prefix(s, max_bytes);
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c < 0x80) {
            out += c < 0x20 || c == 0x7f ? ' ' : static_cast<char>(c);
            ++i;
            continue;
        }
        const std::size_t len = utf8_sequence_length(s, i);
        if (len == 0 || unsafe_code_point(decode(s, i, len))) {
            // One '?' per unit: never longer than the input, so the limit holds.
            out += '?';
            i += len == 0 ? 1 : len;
            continue;
        }
        out.append(s.data() + i, len);
        i += len;
    }
}

std::string policy_text(std::string_view s, std::size_t max_bytes) {
    std::string out;
    append_policy_text(out, s, max_bytes);
    return out;
}

// ---------------------------------------------------------------------------
// Cutting and measuring

std::string_view utf8_prefix(std::string_view s, std::size_t max_bytes) noexcept {
    if (s.size() <= max_bytes) return s;
    // Walk back from the cut to the start of the unit it falls in: at most 3
    // continuation bytes, then check that the unit really is a sequence that
    // would not fit.
    std::size_t cut = max_bytes;
    std::size_t start = cut;
    for (std::size_t back = 0; back < 3 && start > 0; ++back) {
        const auto c = static_cast<unsigned char>(s[start]);
        if ((c & 0xC0) != 0x80) break;  // s[start] begins a unit: cutting here splits nothing
        --start;
        const std::size_t len = utf8_sequence_length(s, start);
        if (len != 0) return s.substr(0, start + len <= cut ? cut : start);
    }
    return s.substr(0, cut);
}

std::string clip(std::string_view s, std::size_t max_chars) {
    if (display_width(s) <= max_chars) return std::string(s);
    const std::size_t keep = max_chars > 3 ? max_chars - 3 : 0;
    std::size_t i = 0, chars = 0;
    while (i < s.size() && chars < keep) {
        const std::size_t len = utf8_sequence_length(s, i);
        i += len == 0 ? 1 : len;
        ++chars;
    }
    return std::string(s.substr(0, i)) + "...";
}

std::size_t display_width(std::string_view s) noexcept {
    std::size_t w = 0;
    for (std::size_t i = 0; i < s.size();) {
        if (s[i] == '\x1b' && i + 1 < s.size() && s[i + 1] == '[') {
            i += 2;
            while (i < s.size() && !(s[i] >= 0x40 && s[i] <= 0x7e)) ++i;
            if (i < s.size()) ++i;
            continue;
        }
        const std::size_t len = utf8_sequence_length(s, i);
        i += len == 0 ? 1 : len;
        ++w;
    }
    return w;
}

char ascii_lower(char c) noexcept {
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

std::string ascii_lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = ascii_lower(c);
    return out;
}

bool iequals(std::string_view a, std::string_view b) noexcept {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
    return true;
}

bool istarts_with(std::string_view s, std::string_view prefix) noexcept {
    return s.size() >= prefix.size() && iequals(s.substr(0, prefix.size()), prefix);
}

std::string_view trim(std::string_view s) noexcept {
    auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
    while (!s.empty() && blank(s.front())) s.remove_prefix(1);
    while (!s.empty() && blank(s.back())) s.remove_suffix(1);
    return s;
}

}  // namespace retryguard::text
