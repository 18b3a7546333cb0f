// LogFileReader: bounded lines from plain and gzip files, a partial last line,
// CRLF, a damaged gzip stream, and a missing file. read_log_file: each file's
// lines through a parser of its own, dated from the file's modification time.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "retryguard/log/log_reader.hpp"

namespace retryguard {
namespace {

namespace fs = std::filesystem;

class LogReader : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("rg-reader-" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    fs::path write(const std::string& name, const std::string& content) {
        fs::path p = dir_ / name;
        std::ofstream(p, std::ios::binary) << content;
        return p;
    }
    fs::path write_gz(const std::string& name, const std::string& content) {
        fs::path p = dir_ / name;
        gzFile f = gzopen(p.c_str(), "wb");
        gzwrite(f, content.data(), static_cast<unsigned>(content.size()));
        gzclose(f);
        return p;
    }
    static std::vector<std::string> all(LogFileReader& r) {
        std::vector<std::string> v;
        std::string_view line;
        for (;;) {
            auto more = r.next(line);
            EXPECT_TRUE(more.ok());
            if (!more.ok() || !*more) break;
            v.emplace_back(line);
        }
        return v;
    }
    fs::path dir_;
};

TEST_F(LogReader, HugeLineIsCutAndTheNextLineSurvives) {
    std::string big(10 * 1024 * 1024, 'x');
    fs::path p = write("mail.log", "first\n" + big + "\nlast line without newline");
    auto r = LogFileReader::open(p.string());
    ASSERT_TRUE(r.ok());
    r->max_line = 1000;
    auto lines = all(*r);
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_EQ(lines[0], "first");
    EXPECT_EQ(lines[1].size(), 1001u);  // max_line + 1: the parser sees it is too long
    EXPECT_EQ(lines[2], "last line without newline");
    EXPECT_GT(r->modified().time_since_epoch().count(), 0);
}

TEST_F(LogReader, GzipIsReadByContentAndCrlfIsLeftToTheParser) {
    std::string content;
    for (int i = 0; i < 100000; ++i) content += "line " + std::to_string(i) + "\r\n";
    fs::path p = write_gz("mail.log.2.gz", content);
    auto r = LogFileReader::open(p.string());
    ASSERT_TRUE(r.ok());
    auto lines = all(*r);
    ASSERT_EQ(lines.size(), 100000u);
    EXPECT_EQ(lines[99999], "line 99999\r");
}

TEST_F(LogReader, DamagedGzipAndMissingFilesAreErrors) {
    std::string content;
    for (int i = 0; i < 50000; ++i) content += "line " + std::to_string(i * 7919) + "\n";
    fs::path p = write_gz("cut.gz", content);
    auto size = fs::file_size(p);
    fs::resize_file(p, size / 2);
    auto r = LogFileReader::open(p.string());
    ASSERT_TRUE(r.ok());
    std::string_view line;
    bool failed = false;
    for (int i = 0; i < 100000; ++i) {
        auto more = r->next(line);
        if (!more.ok()) {
            failed = true;
            break;
        }
        if (!*more) break;
    }
    EXPECT_TRUE(failed);
    auto missing = LogFileReader::open((dir_ / "none").string());
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.error().kind, ErrorKind::io);
    EXPECT_FALSE(LogFileReader::open(dir_.string()).ok());
}

// A file's year-less time stamps are dated from its modification time, each
// file by a parser of its own: a log last written in 2019 stays in 2019.
TEST_F(LogReader, ReadLogFileHandsEveryLineAndTheFilesOwnParser) {
    const std::string line =
        "Mar  1 10:00:00 mx postfix/smtp[1]: 4BCD12345: to=<a@b.example>, relay=none, delay=1, "
        "delays=0/0/1/0, dsn=4.4.1, status=deferred (connect to b.example[192.0.2.1]:25: Connection refused)";
    fs::path old_log = write("old.log", line + "\nnot a syslog line\n");
    fs::path new_log = write_gz("new.log.gz", line + "\n");
    using namespace std::chrono;
    fs::last_write_time(old_log, fs::file_time_type::clock::now() - hours(24 * 365 * 7));

    LogParserOptions po;
    po.local_time = false;
    std::vector<std::string> lines;
    std::vector<int> years;
    const LogParser* first_parser = nullptr;
    bool same_parser_within_file = true;
    auto handler = [&](std::string_view l, LogParser& parser) {
        if (!first_parser) first_parser = &parser;
        same_parser_within_file = same_parser_within_file && first_parser == &parser;
        lines.emplace_back(l);
        Event ev;
        parser.parse(l, ev);
        years.push_back(int(year_month_day{floor<days>(ev.time)}.year()));
    };
    LogFileRead old_read = read_log_file(old_log.string(), po, handler);
    ASSERT_TRUE(old_read.status.ok());
    EXPECT_TRUE(same_parser_within_file);
    EXPECT_EQ(old_read.stats.lines, 2u);
    EXPECT_EQ(old_read.stats.recognised, 1u);
    EXPECT_EQ(old_read.stats.unknown, 1u);
    LogFileRead new_read = read_log_file(new_log.string(), po,
                                         [&](std::string_view l, LogParser& parser) { handler(l, parser); });
    ASSERT_TRUE(new_read.status.ok());
    EXPECT_EQ(new_read.stats.lines, 1u);
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_EQ(lines[0], line);
    EXPECT_EQ(lines[1], "not a syslog line");
    const int this_year = int(year_month_day{floor<days>(system_clock::now())}.year());
    EXPECT_LE(years[0], this_year - 6);  // the old file's year
    EXPECT_GE(years[2], this_year - 1);  // the new file's own, not the old one's
}

TEST_F(LogReader, ReadLogFileSaysWhyAFileCouldNotBeOpenedOrReadToItsEnd) {
    int calls = 0;
    LogFileRead missing =
        read_log_file((dir_ / "none").string(), {}, [&](std::string_view, LogParser&) { ++calls; });
    ASSERT_FALSE(missing.status.ok());
    EXPECT_EQ(missing.status.error().kind, ErrorKind::io);
    EXPECT_EQ(calls, 0);
    EXPECT_EQ(missing.stats.lines, 0u);

    std::string content;
    for (int i = 0; i < 50000; ++i) content += "line " + std::to_string(i * 7919) + "\n";
    fs::path p = write_gz("cut.gz", content);
    fs::resize_file(p, fs::file_size(p) / 2);
    LogFileRead cut = read_log_file(p.string(), {}, [&](std::string_view l, LogParser& parser) {
        ++calls;
        parser.parse(l);
    });
    EXPECT_FALSE(cut.status.ok());
    EXPECT_GT(calls, 0);  // the lines before the damage were handed over
    EXPECT_EQ(cut.stats.lines, static_cast<std::uint64_t>(calls));
}

// `retryguard import /var/log/mail.log*`: the shell names the newest file
// first. The files' first time stamps, years inferred from each file's
// modification time as the import does, put them oldest first, across New Year;
// files without a time stamp go last in the order given.
TEST_F(LogReader, RotatedFilesAreOrderedOldestFirstAcrossNewYear) {
    using namespace std::chrono;
    const std::string tail = " mx postfix/qmgr[7]: 4BCD12345: removed\n";
    auto at = [](int y, unsigned m, unsigned d) {
        return fs::file_time_type::clock::from_sys(
            sys_seconds{sys_days{year{y} / month{m} / day{d}} + hours{12}});
    };
    fs::path current = write("mail.log", "Jan  2 10:00:00" + tail);
    fs::path one = write("mail.log.1", "not a syslog line\nDec 30 10:00:00" + tail);
    fs::path ten = write_gz("mail.log.10.gz", "Dec 20 10:00:00" + tail);
    fs::path empty = write("empty.log", "");
    fs::path notes = write("notes.txt", "no time stamp here\n");
    fs::last_write_time(current, at(2027, 1, 2));
    fs::last_write_time(one, at(2026, 12, 31));
    fs::last_write_time(ten, at(2026, 12, 21));

    LogParserOptions po;
    po.local_time = false;
    const std::vector<fs::path> given = {current, notes, ten, empty, one};
    std::vector<std::optional<TimePoint>> starts;
    for (const auto& p : given) {
        auto t = first_log_time(p.string(), po);
        ASSERT_TRUE(t.ok()) << p;
        starts.push_back(*t);
    }
    ASSERT_TRUE(starts[0] && starts[2] && starts[4]);
    EXPECT_FALSE(starts[1]);
    EXPECT_FALSE(starts[3]);
    EXPECT_EQ(*starts[0], TimePoint{sys_days{year{2027} / January / 2} + hours{10}});
    EXPECT_EQ(*starts[4],
              TimePoint{sys_days{year{2026} / December / 30} + hours{10}});  // after its first line

    std::vector<fs::path> ordered;
    for (std::size_t i : chronological_order(starts)) ordered.push_back(given[i]);
    EXPECT_EQ(ordered, (std::vector<fs::path>{ten, one, current, notes, empty}));

    EXPECT_FALSE(first_log_time((dir_ / "none").string(), po).ok());
}

// Copied logs (every file the same modification time) read with --year: the
// order still comes from the inference (no line after its file was written),
// the first file gets --year and the next its year relative to it.
TEST_F(LogReader, AYearGivenIsTheFirstFilesAndTheNextOnesFollowAcrossNewYear) {
    using namespace std::chrono;
    const std::string tail = " mx postfix/qmgr[7]: 4BCD12345: removed\n";
    const auto copied = fs::file_time_type::clock::from_sys(sys_seconds{sys_days{year{2027} / March / 1}});
    fs::path current = write("mail.log", "Jan  2 10:00:00" + tail);
    fs::path one = write("mail.log.1", "Dec 30 10:00:00" + tail);
    fs::path two = write("mail.log.2", "Dec 20 10:00:00" + tail);
    for (const auto& p : {current, one, two}) fs::last_write_time(p, copied);

    LogParserOptions po;
    po.local_time = false;
    po.year = 2019;
    const std::vector<std::string> given = {current.string(), one.string(), two.string()};
    LogFilePlan plan = plan_log_files(given, po);
    EXPECT_TRUE(plan.reordered);
    EXPECT_EQ(plan.order, (std::vector<std::size_t>{2, 1, 0}));
    EXPECT_EQ(plan.year, (std::vector<std::optional<int>>{2020, 2019, 2019}));

    po.year.reset();  // without --year: each file's own inference
    plan = plan_log_files(given, po);
    EXPECT_EQ(plan.order, (std::vector<std::size_t>{2, 1, 0}));
    EXPECT_EQ(plan.year, (std::vector<std::optional<int>>{std::nullopt, std::nullopt, std::nullopt}));

    plan = plan_log_files({current.string(), "-", two.string()}, po);  // standard input: as given
    EXPECT_FALSE(plan.reordered);
    EXPECT_EQ(plan.order, (std::vector<std::size_t>{0, 1, 2}));
}

}  // namespace
}  // namespace retryguard
