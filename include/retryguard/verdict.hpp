// verdict.hpp -- a decision of retryguard, written as one line in the mail log.
//
// Format (docs/verdicts.md): `KEY: verdict=NAME key=value key="quoted value" ...`
// where KEY is the Postfix queue id when a message is involved, else the
// destination ("domain:example.com", "mx:mx1.example.net") or "-". Values that
// are empty or contain a space, a quote, a backslash or '=' are quoted with
// double quotes, with \" and \\ escaped; control bytes become \xHH. The
// project's own log parser reads these lines back (EventKind::verdict).
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

// Parse "k=v k=\"q v\" ..." back into fields; false on malformed quoting.
bool parse_verdict_fields(std::string_view text, std::vector<std::pair<std::string, std::string>>& out);

}  // namespace retryguard
