// verdict.hpp -- a decision of retryguard, written as one line in the mail log.
//
// Format (docs/verdicts.md): `KEY: verdict=NAME key=value key="quoted value" ...`
// where KEY is the Postfix queue id when a message is involved, else the
// destination ("domain:example.com", "mx:mx1.example.net") or "-". The key and
// every value use one quoting (text::verdict_value, include/retryguard/text/text.hpp):
// empty values, values with a space, a quote, a backslash, '=' or a control
// byte are quoted with double quotes, with \" and \\ escaped and control
// bytes, invalid UTF-8 and the C1/bidi code points as \xHH. The project's own
// log parser reads these lines back (EventKind::verdict) byte for byte.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "retryguard/time.hpp"

namespace retryguard {

struct Verdict {
    TimePoint time{};
    std::string key;   // queue id, destination, or "-"
    std::string name;  // "noted", "watch", "escalate", "recovered", "flagged", ...
    std::vector<std::pair<std::string, std::string>> fields;
    // A change of ledger state that is not written as a line: `absorbed` resets
    // the ladder state of a destination whose deferrals a local incident took
    // back (the incident's own line says how many), so a detection is one line,
    // not one per destination.
    bool silent = false;

    Verdict& add(std::string k, std::string v) {
        fields.emplace_back(std::move(k), std::move(v));
        return *this;
    }
    // The value of the first field named k, or "" when absent.
    std::string_view field(std::string_view k) const noexcept;
};

// The message part of the log line: "KEY: verdict=NAME k=v ...".
std::string format_verdict(const Verdict& v);

// Quote a value for a verdict line when it needs it (see above).
std::string quote_verdict_value(std::string_view value);
// The key as written before ": verdict=": "-" when empty, quoted when needed.
std::string quote_verdict_key(std::string_view key);

// Parse "k=v k=\"q v\" ..." back into fields; false on malformed quoting.
bool parse_verdict_fields(std::string_view text, std::vector<std::pair<std::string, std::string>>& out);

// A verdict line's message part read back: the key exactly as the writer had
// it ("" for "-"), whether the line had a key at all, and the fields in order
// (the first is verdict=NAME for lines written by format_verdict).
struct VerdictLine {
    std::string key;
    bool has_key = false;
    std::vector<std::pair<std::string, std::string>> fields;
};
// The one reader of format_verdict's output; false on malformed quoting.
bool parse_verdict_line(std::string_view text, VerdictLine& out);

}  // namespace retryguard
