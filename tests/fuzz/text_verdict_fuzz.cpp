// text_verdict_fuzz.cpp -- libFuzzer target for the verdict-line renderer and
// its reader: the input is split at the byte 0x01 into a key, a name and field
// values (NUL and every other byte stay possible inside them). The line
// written must be one valid UTF-8 line without control bytes,
// and both the verdict reader and the log parser must give back exactly the key
// and fields written, never a verdict or field the writer did not write.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "retryguard/log/log_parser.hpp"
#include "retryguard/rules/verdict.hpp"
#include "retryguard/text/text.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace retryguard;
    std::string_view in(reinterpret_cast<const char*>(data), size);
    std::vector<std::string> parts;
    for (;;) {
        const std::size_t sep = in.find('\x01');
        parts.emplace_back(in.substr(0, sep));
        if (sep == std::string_view::npos || parts.size() == 40) break;
        in.remove_prefix(sep + 1);
    }
    Verdict v;
    v.key = parts[0];
    v.name = parts.size() > 1 && !parts[1].empty() ? parts[1] : "x";
    for (std::size_t i = 2; i < parts.size(); ++i)
        v.add(i % 3 == 0 ? parts[i] : "f" + std::to_string(i), parts[i]);
    for (auto& [k, value] : v.fields)
        if (k.empty()) k = "e";

    const std::string line = format_verdict(v);
    for (unsigned char c : line)
        if (c < 0x20 || c == 0x7f) std::abort();
    if (!text::is_valid_utf8(line)) std::abort();

    VerdictLine back;
    if (!parse_verdict_line(line, back)) std::abort();
    if (!back.has_key || back.key != (v.key == "-" ? std::string() : v.key)) std::abort();
    if (back.fields.size() != v.fields.size() + 1) std::abort();
    if (back.fields[0] != std::make_pair(std::string("verdict"), v.name)) std::abort();
    for (std::size_t i = 0; i < v.fields.size(); ++i)
        if (back.fields[i + 1] != v.fields[i]) std::abort();

    // The same line through the log parser, as `retryguard events` reads it
    // (longer lines are cut by the parser's own limit, tested elsewhere).
    if (line.size() > kMaxLogLineLength - 64) return 0;
    LogParserOptions o;
    o.local_time = false;
    LogParser parser(o);
    Event ev = parser.parse("Nov 29 20:38:50 mx retryguard/policyd[7]: " + line);
    if (ev.kind != EventKind::verdict || ev.action != v.name) std::abort();
    if (ev.fields.size() != std::min<std::size_t>(back.fields.size(), 64)) std::abort();
    for (std::size_t i = 0; i < ev.fields.size(); ++i)
        if (ev.fields[i] != back.fields[i]) std::abort();
    return 0;
}
