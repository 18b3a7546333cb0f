// time.cpp -- formatting of event time.
#include "retryguard/time.hpp"

#include <fmt/chrono.h>
#include <fmt/format.h>

namespace retryguard {

std::string format_rfc3339(TimePoint t) {
    using namespace std::chrono;
    auto secs = floor<seconds>(t);
    auto micros = (t - secs).count();
    auto days = floor<std::chrono::days>(secs);
    year_month_day ymd{days};
    hh_mm_ss hms{secs - days};
    std::string out =
        fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}", int(ymd.year()), unsigned(ymd.month()),
                    unsigned(ymd.day()), hms.hours().count(), hms.minutes().count(), hms.seconds().count());
    if (micros != 0) out += fmt::format(".{:06}", micros);
    out += 'Z';
    return out;
}

}  // namespace retryguard
