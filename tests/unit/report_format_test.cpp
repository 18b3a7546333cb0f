// report_format_test.cpp -- the formatting helpers of core/report: RFC 3339
// parsing, relative times, durations, local time with zone, aligned tables,
// and the worst-first ranking of ladder states.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>

#include "retryguard/report/report.hpp"

namespace {

using namespace retryguard;
using namespace retryguard::report;
using namespace std::chrono;

TimePoint at(const char* s) {
    auto t = parse_rfc3339(s);
    EXPECT_TRUE(static_cast<bool>(t)) << s;
    return t ? *t : TimePoint{};
}

TEST(ReportFormat, ParsesRfc3339WithZonesAndFractions) {
    EXPECT_EQ(format_rfc3339(at("2026-11-29T21:00:00Z")), "2026-11-29T21:00:00Z");
    EXPECT_EQ(at("2026-11-29T22:00:00+01:00"), at("2026-11-29T21:00:00Z"));
    EXPECT_EQ(at("2026-11-29T20:30:00-00:30"), at("2026-11-29T21:00:00Z"));
    EXPECT_EQ(at("2026-11-29T21:00:00.25Z") - at("2026-11-29T21:00:00Z"), milliseconds(250));
    for (const char* bad : {"", "yesterday", "2026-11-29", "2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z",
                            "2026-11-29T21:00:00", "2026-11-29T21:00:00+0100", "2026-11-29T21:00:00.Z",
                            "2026-11-29T21:00:00Zjunk"})
        EXPECT_FALSE(static_cast<bool>(parse_rfc3339(bad))) << bad;
}

TEST(ReportFormat, RelativeTimesUseOneUnit) {
    auto now = at("2026-11-29T21:00:00Z");
    EXPECT_EQ(format_relative(now - seconds(20), now), "just now");
    EXPECT_EQ(format_relative(now - minutes(5), now), "5 min ago");
    EXPECT_EQ(format_relative(now - hours(3) - minutes(59), now), "3 h ago");
    EXPECT_EQ(format_relative(now - hours(50), now), "2 d ago");
    EXPECT_EQ(format_relative(now + hours(2), now), "in 2 h");
    EXPECT_EQ(format_relative(now + seconds(10), now), "in under a minute");
}

TEST(ReportFormat, ShortDurations) {
    EXPECT_EQ(format_duration_short(seconds(12)), "12 s");
    EXPECT_EQ(format_duration_short(minutes(35)), "35 min");
    EXPECT_EQ(format_duration_short(hours(2)), "2 h");
    EXPECT_EQ(format_duration_short(hours(2) + minutes(5)), "2 h 5 min");
    EXPECT_EQ(format_duration_short(hours(28)), "1 d 4 h");
}

TEST(ReportFormat, LocalTimeCarriesTheZone) {
    const char* old = std::getenv("TZ");
    std::string saved = old ? old : "";
    ::setenv("TZ", "UTC", 1);
    ::tzset();
    EXPECT_EQ(format_local(at("2026-11-29T21:00:00Z")), "2026-11-29 21:00:00 UTC");
    EXPECT_EQ(format_when(at("2026-11-29T18:00:00Z"), at("2026-11-29T21:00:00Z")),
              "2026-11-29 18:00:00 UTC (3 h ago)");
    ::setenv("TZ", "Europe/Berlin", 1);
    ::tzset();
    EXPECT_EQ(format_local(at("2026-11-29T21:00:00Z")), "2026-11-29 22:00:00 CET");
    if (old)
        ::setenv("TZ", saved.c_str(), 1);
    else
        ::unsetenv("TZ");
    ::tzset();
}

TEST(ReportFormat, TablesAlignColumns) {
    Table t({"A", "LONGER"});
    t.add({"wide cell", "x"});
    t.add({"b", "yy"});
    EXPECT_EQ(t.render(), "A          LONGER\nwide cell  x\nb          yy\n");
    EXPECT_EQ(t.size(), 2u);
    EXPECT_EQ(t.render(true).substr(0, 4), "\x1b[1m");
}

// A cell wider than 80 characters is printed whole; the other rows keep a
// column of 80, not of its width.
TEST(ReportFormat, AnOverlongCellIsWholeAndWidensOnlyItsOwnRow) {
    Table t({"NAME", "STATE"});
    const std::string longest(3000, 'a');
    t.add({longest, "escalate"});
    t.add({"short.test", "watch"});
    const std::string out = t.render();
    EXPECT_NE(out.find(longest + "  escalate\n"), std::string::npos);
    EXPECT_NE(out.find("short.test" + std::string(80 - 10 + 2, ' ') + "watch\n"), std::string::npos);
    EXPECT_EQ(out.find("NAME" + std::string(80 - 4 + 2, ' ') + "STATE\n"), 0u);
}

TEST(ReportFormat, StatesRankWorstFirst) {
    EXPECT_LT(state_rank("escalate"), state_rank("watch"));
    EXPECT_LT(state_rank("watch"), state_rank("noted"));
    EXPECT_LT(state_rank("noted"), state_rank("recovered"));
    EXPECT_EQ(state_rank(""), state_rank("recovered"));
    EXPECT_EQ(kind_name(DestinationKind::relay), "mx");
    EXPECT_EQ(kind_name(DestinationKind::domain), "domain");
}

}  // namespace
