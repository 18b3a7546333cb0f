// Log parser time stamps: year inference for RFC 3164 (reference time, New
// Year, late lines, forced year, Feb 29), RFC 3339 offsets and fractions, and
// the local time zone.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "retryguard/log/log_parser.hpp"

namespace retryguard {
namespace {

TimePoint at(int y, int m, int d, int hh = 0, int mm = 0, int ss = 0) {
    using namespace std::chrono;
    auto days = sys_days{year{y} / month{unsigned(m)} / day{unsigned(d)}};
    return time_point_cast<Duration>(days + hours{hh} + minutes{mm} + seconds{ss});
}

LogParser utc_parser(TimePoint reference, std::optional<int> year = std::nullopt) {
    LogParserOptions o;
    o.local_time = false;
    o.reference_time = reference;
    o.year = year;
    return LogParser(o);
}

std::string time_of(LogParser& p, const std::string& stamp) {
    Event ev = p.parse(stamp + " mx postfix/qmgr[1]: 3F1A22C0E1: removed");
    EXPECT_EQ(ev.kind, EventKind::queue_removed) << stamp << " " << ev.unknown_kind;
    return format_rfc3339(ev.time);
}

TEST(LogParserTime, YearComesFromTheReference) {
    LogParser p = utc_parser(at(2026, 11, 30));
    EXPECT_EQ(time_of(p, "Nov 29 20:38:50"), "2026-11-29T20:38:50Z");
}

TEST(LogParserTime, LinesSlightlyAfterTheReferenceStayInItsYear) {
    // Clock skew between the logger and the reader: up to a day ahead is this year.
    LogParser p = utc_parser(at(2026, 11, 29, 20, 0, 0));
    EXPECT_EQ(time_of(p, "Nov 29 23:00:00"), "2026-11-29T23:00:00Z");
}

TEST(LogParserTime, AnOldFileImportedAfterNewYearIsLastYears) {
    // mtime 2027-01-05, the file's first line is from December: December 2026.
    LogParser p = utc_parser(at(2027, 1, 5));
    EXPECT_EQ(time_of(p, "Dec 30 23:59:58"), "2026-12-30T23:59:58Z");
    EXPECT_EQ(time_of(p, "Dec 31 23:59:59"), "2026-12-31T23:59:59Z");
    // The stream crosses New Year: the year increments.
    EXPECT_EQ(time_of(p, "Jan  1 00:00:01"), "2027-01-01T00:00:01Z");
    // A line written just before midnight but logged late stays in the old year,
    EXPECT_EQ(time_of(p, "Dec 31 23:59:59"), "2026-12-31T23:59:59Z");
    // and does not pull the stream back.
    EXPECT_EQ(time_of(p, "Jan  1 00:00:02"), "2027-01-01T00:00:02Z");
    EXPECT_EQ(time_of(p, "Jan  4 10:00:00"), "2027-01-04T10:00:00Z");
}

TEST(LogParserTime, A_WholeYearOfLinesCrossesNewYearOnce) {
    LogParser p = utc_parser(at(2027, 3, 1));
    // First line from April: 2027-04 would be in the future -> 2026.
    EXPECT_EQ(time_of(p, "Apr  1 00:00:00"), "2026-04-01T00:00:00Z");
    EXPECT_EQ(time_of(p, "Aug  1 00:00:00"), "2026-08-01T00:00:00Z");
    EXPECT_EQ(time_of(p, "Dec 31 12:00:00"), "2026-12-31T12:00:00Z");
    EXPECT_EQ(time_of(p, "Jan  1 12:00:00"), "2027-01-01T12:00:00Z");
    EXPECT_EQ(time_of(p, "Feb 28 12:00:00"), "2027-02-28T12:00:00Z");
}

TEST(LogParserTime, ForcedYearAppliesToTheFirstLineAndStillRollsOver) {
    LogParser p = utc_parser(at(2026, 11, 30), 2020);
    EXPECT_EQ(time_of(p, "Dec 31 23:00:00"), "2020-12-31T23:00:00Z");
    EXPECT_EQ(time_of(p, "Jan  1 01:00:00"), "2021-01-01T01:00:00Z");
}

TEST(LogParserTime, February29thFindsALeapYear) {
    LogParser p = utc_parser(at(2025, 3, 1));
    EXPECT_EQ(time_of(p, "Feb 29 12:00:00"), "2024-02-29T12:00:00Z");
    LogParser forced = utc_parser(at(2025, 3, 1), 2025);
    EXPECT_EQ(forced.parse("Feb 29 12:00:00 mx postfix/qmgr[1]: 3F1A22C0E1: removed").unknown_kind,
              "bad-time");
}

TEST(LogParserTime, SetReferenceTimeRestartsInference) {
    LogParser p = utc_parser(at(2026, 11, 30));
    EXPECT_EQ(time_of(p, "Nov 29 20:00:00"), "2026-11-29T20:00:00Z");
    p.set_reference_time(at(2024, 12, 1));
    EXPECT_EQ(time_of(p, "Nov 29 20:00:00"), "2024-11-29T20:00:00Z");
}

TEST(LogParserTime, Rfc3339OffsetsFractionsAndZulu) {
    LogParser p = utc_parser(at(2026, 11, 30));
    EXPECT_EQ(time_of(p, "2026-11-29T20:38:50.123456+01:00"), "2026-11-29T19:38:50.123456Z");
    EXPECT_EQ(time_of(p, "2026-11-29T20:38:50-05:30"), "2026-11-30T02:08:50Z");
    EXPECT_EQ(time_of(p, "2026-11-29T20:38:50Z"), "2026-11-29T20:38:50Z");
    EXPECT_EQ(time_of(p, "2026-11-29T20:38:50.5Z"), "2026-11-29T20:38:50.500000Z");
    // Nanoseconds are cut to the model's microseconds.
    EXPECT_EQ(time_of(p, "2026-11-29T20:38:50.123456789+00:00"), "2026-11-29T20:38:50.123456Z");
    EXPECT_EQ(time_of(p, "2027-01-01T00:30:00+02:00"), "2026-12-31T22:30:00Z");
    // journalctl -o short-iso(-precise) writes the offset without a colon.
    EXPECT_EQ(time_of(p, "2026-11-29T20:38:50+0100"), "2026-11-29T19:38:50Z");
    EXPECT_EQ(time_of(p, "2026-11-29T20:38:50.250000-0130"), "2026-11-29T22:08:50.250000Z");
}

TEST(LogParserTime, BadTimeStampsAreCountedNotFatal) {
    LogParser p = utc_parser(at(2026, 11, 30));
    for (const char* bad : {"2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z", "2026-11-29T25:00:00Z",
                            "2026-11-29T20:38:50+1:00", "Foo 29 20:38:50", "Nov 32 20:38:50",
                            "Nov 29 20:61:00", "Nov 29 2026 20:38:50", "2026-11-29T20:38:50."}) {
        Event ev = p.parse(std::string(bad) + " mx postfix/qmgr[1]: 3F1A22C0E1: removed");
        EXPECT_EQ(ev.kind, EventKind::unknown) << bad;
        EXPECT_TRUE(ev.unknown_kind == "bad-time" || ev.unknown_kind == "not-syslog")
            << bad << ev.unknown_kind;
    }
    EXPECT_EQ(p.stats().unknown, 9u);
}

class ScopedTz {
  public:
    explicit ScopedTz(const char* tz) {
        const char* old = std::getenv("TZ");
        had_ = old != nullptr;
        if (had_) old_ = old;
        setenv("TZ", tz, 1);
        tzset();
    }
    ~ScopedTz() {
        if (had_)
            setenv("TZ", old_.c_str(), 1);
        else
            unsetenv("TZ");
        tzset();
    }

  private:
    bool had_ = false;
    std::string old_;
};

TEST(LogParserTime, LocalTimeFollowsTheZoneIncludingDst) {
    ScopedTz tz("Europe/Berlin");
    LogParserOptions o;
    o.reference_time = at(2026, 12, 1);
    LogParser p(o);
    EXPECT_EQ(time_of(p, "Nov 29 20:38:50"), "2026-11-29T19:38:50Z");  // CET, +01:00
    LogParser summer(o);
    EXPECT_EQ(time_of(summer, "Jul  1 12:00:00"), "2026-07-01T10:00:00Z");  // CEST, +02:00
    // An RFC 3339 stamp with an offset ignores the zone.
    EXPECT_EQ(time_of(p, "2026-11-29T20:38:50+00:00"), "2026-11-29T20:38:50Z");
}

}  // namespace
}  // namespace retryguard
