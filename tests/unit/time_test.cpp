// The one RFC 3339 / syslog time stamp reader (time.hpp) with the inputs each
// of its callers accepted: the commands' --now (whole text, zone required,
// RFC 3339 proper: "." fraction, offset with its colon), the log parser
// (fractions with "." or ",", "+hhmm", no zone = local time),
// and the syslog datagram parser (shape only, zone required).
#include "retryguard/time.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace retryguard {
namespace {

using namespace std::chrono;

TimePoint utc(int y, unsigned mo, unsigned d, int h, int mi, int s, std::int64_t us = 0) {
    return TimePoint{duration_cast<Duration>(
        (sys_days{year{y} / month{mo} / day{d}} + hours{h} + minutes{mi} + seconds{s} + microseconds{us})
            .time_since_epoch())};
}

TEST(Time, ParsesZonesAndFractions) {
    EXPECT_EQ(*parse_rfc3339("2026-11-29T20:38:50Z"), utc(2026, 11, 29, 20, 38, 50));
    EXPECT_EQ(*parse_rfc3339("2026-11-29t20:38:50z"), utc(2026, 11, 29, 20, 38, 50));
    EXPECT_EQ(*parse_rfc3339("2026-11-29 20:38:50Z"), utc(2026, 11, 29, 20, 38, 50));
    EXPECT_EQ(*parse_rfc3339("2026-11-29T21:38:50+01:00"), utc(2026, 11, 29, 20, 38, 50));
    EXPECT_EQ(*parse_rfc3339("2026-11-29T15:08:50-05:30"), utc(2026, 11, 29, 20, 38, 50));
    EXPECT_EQ(*parse_rfc3339("2026-11-29T20:38:50.5Z"), utc(2026, 11, 29, 20, 38, 50, 500000));
    // More than microseconds: the rest is cut, not rounded.
    EXPECT_EQ(*parse_rfc3339("2026-11-29T20:38:50.123456789Z"), utc(2026, 11, 29, 20, 38, 50, 123456));
    // A leap second counts into the next minute for an exact instant.
    EXPECT_EQ(*parse_rfc3339("2016-12-31T23:59:60Z"), utc(2017, 1, 1, 0, 0, 0));
    // The round trip of the writer.
    const TimePoint t = utc(2026, 2, 28, 1, 2, 3, 456);
    EXPECT_EQ(*parse_rfc3339(format_rfc3339(t)), t);
}

TEST(Time, RefusesWhatIsNotOneTimeStamp) {
    for (std::string_view bad :
         {"", "2026-11-29T20:38:50", "2026-11-29T20:38:50Zx", "2026-11-29T20:38:50.Z", "2026-13-01T00:00:00Z",
          "2026-02-30T00:00:00Z", "2026-11-29T24:00:00Z", "2026-11-29T20:60:00Z", "2026-11-29X20:38:50Z",
          "2026-11-29T20:38:50+01", "Nov 29 20:38:50", "2026-11-29T21:38:50+0100", "2026-11-29T20:38:50,25Z",
          "2026-11-29T20:38:50.1234567890123456789012Z"})
        EXPECT_FALSE(parse_rfc3339(bad).ok()) << bad;
    EXPECT_NE(parse_rfc3339("yesterday").error().message.find("not an RFC 3339 time: 'yesterday'"),
              std::string::npos);
}

TEST(Time, ScansAPrefixWithOrWithoutZone) {
    // What log lines carry besides RFC 3339 proper: a "," fraction, "+hhmm".
    auto c = scan_rfc3339("2026-11-29T20:38:50,25+0100 x");
    ASSERT_TRUE(c);
    EXPECT_EQ(c->micros, 250000);
    EXPECT_EQ(c->offset_seconds, 3600);
    EXPECT_EQ(c->length, 27u);
    auto p = scan_rfc3339("2026-11-29T20:38:50.000123+01:00 host prog: x");
    ASSERT_TRUE(p);
    EXPECT_EQ(p->length, 32u);
    EXPECT_TRUE(p->has_zone);
    EXPECT_EQ(p->offset_seconds, 3600);
    EXPECT_EQ(p->micros, 123);
    p = scan_rfc3339("2026-11-29 20:38:50 host prog: x");  // local time, as some log files have it
    ASSERT_TRUE(p);
    EXPECT_FALSE(p->has_zone);
    EXPECT_EQ(p->length, 19u);
    p = scan_rfc3339("2026-11-29T20:38:50-0130 h");  // journalctl -o short-iso
    ASSERT_TRUE(p);
    EXPECT_EQ(p->length, 24u);
    EXPECT_EQ(p->offset_seconds, -5400);
    // Shape only: ranges are the caller's (the syslog parser passes them on).
    p = scan_rfc3339("2026-99-99T99:99:99Z");
    ASSERT_TRUE(p);
    EXPECT_FALSE(rfc3339_in_range(*p));
    EXPECT_FALSE(scan_rfc3339("2026-11-29T20:38"));
    EXPECT_FALSE(scan_rfc3339("2026-11-29T20:38:50,Z"));
}

TEST(Time, ScansSyslogStamps) {
    auto p = scan_rfc3164("Nov 29 20:38:50 mx postfix/smtp[1]: x");
    ASSERT_TRUE(p);
    EXPECT_EQ(p->month, 11);
    EXPECT_EQ(p->day, 29);
    EXPECT_EQ(p->second, 50);
    EXPECT_EQ(p->length, 15u);
    p = scan_rfc3164("Mar  5 07:08:09 mx");
    ASSERT_TRUE(p);
    EXPECT_EQ(p->day, 5);
    p = scan_rfc3164("Mar 05 07:08:09.250 mx");  // Postfix's own maillog_file pads with 0
    ASSERT_TRUE(p);
    EXPECT_EQ(p->day, 5);
    EXPECT_EQ(p->micros, 250000);
    EXPECT_EQ(p->length, 19u);
    for (std::string_view bad :
         {"Foo 29 20:38:50", "Nov 2x 20:38:50", "Nov 29 20:38", "nov 29 20:38:50", "Nov 29"})
        EXPECT_FALSE(scan_rfc3164(bad)) << bad;
}

TEST(Time, DaysFromCivil) {
    EXPECT_EQ(days_from_civil(1970, 1, 1), 0);
    EXPECT_EQ(days_from_civil(2024, 2, 29), 19782);
    EXPECT_FALSE(days_from_civil(2026, 2, 29));
    EXPECT_FALSE(days_from_civil(2026, 0, 1));
}

}  // namespace
}  // namespace retryguard
