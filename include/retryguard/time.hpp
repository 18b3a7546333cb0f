// time.hpp -- event time: the one TimePoint, the one RFC 3339 writer and the
// one RFC 3339 reader (log lines, syslog datagrams, the commands' --now).
// Rules evaluate against the timestamps in the log, never the wall clock, so
// every event carries its own TimePoint.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "retryguard/result.hpp"

namespace retryguard {

using TimePoint = std::chrono::sys_time<std::chrono::microseconds>;
using Duration = std::chrono::microseconds;

inline std::int64_t to_micros(TimePoint t) noexcept {
    return t.time_since_epoch().count();
}
inline TimePoint from_micros(std::int64_t us) noexcept {
    return TimePoint{Duration{us}};
}

// RFC 3339 in UTC with microseconds when non-zero: "2026-11-29T20:48:23Z".
std::string format_rfc3339(TimePoint t);

// The parts of an RFC 3339 time stamp as found at the start of a text, before
// any range check: "YYYY-MM-DD" then "T", "t" or a space, "HH:MM:SS", an
// optional fraction ("." or "," and at least one digit; microseconds kept),
// and an optional zone: "Z"/"z", "+hh:mm"/"-hh:mm", or "+hhmm"/"-hhmm" (as
// journalctl -o short-iso writes it). Without a zone the time is local.
struct Rfc3339Parts {
    int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
    std::int64_t micros = 0;
    bool has_zone = false;
    int offset_seconds = 0;  // east of UTC
    int offset_hours = 0, offset_minutes = 0;
    std::size_t length = 0;  // characters read
};
std::optional<Rfc3339Parts> scan_rfc3339(std::string_view text) noexcept;

// Month 1-12, a day of that month, hour <= 23, minute <= 59, second <= 60
// (a leap second). The offset is not checked here (callers differ).
bool rfc3339_in_range(const Rfc3339Parts& p) noexcept;

// The parts of a syslog (RFC 3164) time stamp at the start of a text, before
// any range check: "Nov 29 20:38:50", "Nov  9 20:38:50" or "Nov 09 20:38:50"
// (Postfix's own maillog_file), with an optional fraction as above. No year.
struct Rfc3164Parts {
    int month = 0, day = 0, hour = 0, minute = 0, second = 0;
    std::int64_t micros = 0;
    std::size_t length = 0;  // characters read
};
std::optional<Rfc3164Parts> scan_rfc3164(std::string_view text) noexcept;

// Days since 1970-01-01 of a valid civil date; nullopt otherwise.
std::optional<std::int64_t> days_from_civil(int year, int month, int day) noexcept;

// A whole text that is one RFC 3339 time stamp with its zone, in range:
// "2026-11-29T23:05:58Z", "2026-11-29 23:05:58.25+01:00".
Result<TimePoint> parse_rfc3339(std::string_view text);

}  // namespace retryguard
