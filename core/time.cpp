// time.cpp -- the RFC 3339 writer and reader shared by the log parser, the
// syslog datagram parser and the commands (docs in time.hpp).
#include "retryguard/time.hpp"

#include <fmt/chrono.h>
#include <fmt/format.h>

namespace retryguard {

namespace {

bool is_digit(char c) noexcept {
    return c >= '0' && c <= '9';
}

// n digits at `at` as a number; false when any is missing or not a digit.
bool number(std::string_view s, std::size_t at, std::size_t n, int& out) noexcept {
    if (s.size() < at + n) return false;
    out = 0;
    for (std::size_t i = at; i < at + n; ++i) {
        if (!is_digit(s[i])) return false;
        out = out * 10 + (s[i] - '0');
    }
    return true;
}

// "HH:MM:SS" at `pos`, then an optional "." or "," fraction of at least one
// digit (microseconds kept); advances pos.
bool scan_clock(std::string_view s, std::size_t& pos, int& h, int& m, int& sec,
                std::int64_t& micros) noexcept {
    if (!number(s, pos, 2, h) || s.size() <= pos + 2 || s[pos + 2] != ':' || !number(s, pos + 3, 2, m) ||
        s.size() <= pos + 5 || s[pos + 5] != ':' || !number(s, pos + 6, 2, sec))
        return false;
    pos += 8;
    micros = 0;
    if (pos < s.size() && (s[pos] == '.' || s[pos] == ',')) {
        const std::size_t start = ++pos;
        std::int64_t scale = 100000;
        while (pos < s.size() && is_digit(s[pos])) {
            if (scale > 0) micros += (s[pos] - '0') * scale, scale /= 10;
            ++pos;
        }
        if (pos == start) return false;
    }
    return true;
}

}  // namespace

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

std::optional<Rfc3339Parts> scan_rfc3339(std::string_view s) noexcept {
    Rfc3339Parts p;
    auto at = [&](std::size_t i, char c) { return s.size() > i && s[i] == c; };
    if (!number(s, 0, 4, p.year) || !at(4, '-') || !number(s, 5, 2, p.month) || !at(7, '-') ||
        !number(s, 8, 2, p.day) || !(at(10, 'T') || at(10, 't') || at(10, ' ')))
        return std::nullopt;
    std::size_t pos = 11;
    if (!scan_clock(s, pos, p.hour, p.minute, p.second, p.micros)) return std::nullopt;
    int oh = 0, om = 0;
    const std::size_t zone_at = pos;
    if (at(pos, 'Z') || at(pos, 'z')) {
        p.has_zone = true;
        pos += 1;
    } else if ((at(pos, '+') || at(pos, '-')) && number(s, pos + 1, 2, oh) && at(pos + 3, ':') &&
               number(s, pos + 4, 2, om)) {
        p.has_zone = true;
        pos += 6;
    } else if ((at(pos, '+') || at(pos, '-')) && number(s, pos + 1, 2, oh) && number(s, pos + 3, 2, om)) {
        p.has_zone = true;
        pos += 5;
    }
    if (p.has_zone && oh + om > 0) {
        const char sign = s[zone_at];
        p.offset_hours = oh;
        p.offset_minutes = om;
        p.offset_seconds = (oh * 3600 + om * 60) * (sign == '-' ? -1 : 1);
    }
    p.length = pos;
    return p;
}

std::optional<Rfc3164Parts> scan_rfc3164(std::string_view s) noexcept {
    static constexpr std::string_view kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    if (s.size() < 15 || s[3] != ' ' || s[6] != ' ') return std::nullopt;
    Rfc3164Parts p;
    for (int i = 0; i < 12; ++i)
        if (s.substr(0, 3) == kMonths[i]) p.month = i + 1;
    if (p.month == 0 || !is_digit(s[5])) return std::nullopt;
    if (s[4] == ' ')
        p.day = s[5] - '0';
    else if (!number(s, 4, 2, p.day))
        return std::nullopt;
    std::size_t pos = 7;
    if (!scan_clock(s, pos, p.hour, p.minute, p.second, p.micros)) return std::nullopt;
    p.length = pos;
    return p;
}

bool rfc3339_in_range(const Rfc3339Parts& p) noexcept {
    return days_from_civil(p.year, p.month, p.day).has_value() && p.hour <= 23 && p.minute <= 59 &&
           p.second <= 60;
}

std::optional<std::int64_t> days_from_civil(int y, int m, int d) noexcept {
    using namespace std::chrono;
    if (m < 1 || m > 12 || d < 1 || d > 31) return std::nullopt;
    const year_month_day ymd{year{y}, month{static_cast<unsigned>(m)}, day{static_cast<unsigned>(d)}};
    if (!ymd.ok()) return std::nullopt;
    return sys_days{ymd}.time_since_epoch().count();
}

Result<TimePoint> parse_rfc3339(std::string_view text) {
    auto bad = [&] {
        return make_error(ErrorKind::invalid_input, fmt::format("not an RFC 3339 time: '{}'", text));
    };
    if (text.size() < 20 || text.size() > 40) return bad();
    const auto p = scan_rfc3339(text);
    if (!p || p->length != text.size() || !p->has_zone || !rfc3339_in_range(*p)) return bad();
    // RFC 3339 itself, as the commands always took it: a "." fraction and an
    // offset with its colon (the log's "," and "+hhmm" are not RFC 3339).
    const char last = text.back();
    if (text[19] == ',' || (last != 'Z' && last != 'z' && text[text.size() - 3] != ':')) return bad();
    const std::int64_t days = *days_from_civil(p->year, p->month, p->day);
    const std::int64_t secs = days * 86400 + p->hour * 3600 + p->minute * 60 + p->second - p->offset_seconds;
    return TimePoint{Duration{secs * 1000000 + p->micros}};
}

}  // namespace retryguard
