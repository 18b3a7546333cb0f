// time.hpp -- event time. Rules evaluate against the timestamps in the log,
// never the wall clock, so every event carries its own TimePoint.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

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

}  // namespace retryguard
