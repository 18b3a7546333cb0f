// The logging module: Postfix's record format, target specs, severities, and
// the sinks that work without root (file, stderr, a datagram socket standing
// in for postlogd).
#include "retryguard/logging/logging.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

namespace retryguard::logging {
namespace {

// A directory of one test's files, removed when the test ends.
class TempDir {
  public:
    explicit TempDir(std::string_view name)
        : path_(std::filesystem::temp_directory_path() /
                ("rg-logging-" + std::string(name) + "-" + std::to_string(::getpid()))) {
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::filesystem::path operator/(std::string_view leaf) const { return path_ / leaf; }

  private:
    std::filesystem::path path_;
};

std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Runs with TZ=UTC so that a fixed time_t has a known local rendering.
class UtcClock : public ::testing::Test {
  protected:
    void SetUp() override {
        const char* tz = std::getenv("TZ");
        had_tz_ = tz != nullptr;
        if (had_tz_) old_tz_ = tz;
        ::setenv("TZ", "UTC", 1);
        ::tzset();
    }
    void TearDown() override {
        if (had_tz_)
            ::setenv("TZ", old_tz_.c_str(), 1);
        else
            ::unsetenv("TZ");
        ::tzset();
    }

  private:
    bool had_tz_ = false;
    std::string old_tz_;
};

using LoggingFormat = UtcClock;

TEST_F(LoggingFormat, RecordHasPostfixShapeWithZeroPaddedDay) {
    // 2026-03-05 07:08:09 UTC: Postfix's msg_logger writes "%b %d", so the
    // day is "05", not " 5".
    EXPECT_EQ(format_record(1772694489, "mx1", "retryguard/milter", 4242, "text here"),
              "Mar 05 07:08:09 mx1 retryguard/milter[4242]: text here");
    EXPECT_EQ(format_record(1795076661, "sender", "retryguard/policyd", 7, "warning: x"),
              "Nov 19 08:24:21 sender retryguard/policyd[7]: warning: x");
}

TEST(Logging, PrintableReplacesControlsAndCuts) {
    EXPECT_EQ(printable("a\nb\rc\x7f"
                        "d\te"),
              "a?b?c?d?e");
    EXPECT_EQ(printable(std::string(kMaxRecord + 50, 'x')).size(), kMaxRecord);
    EXPECT_EQ(printable("héllo"), "héllo");  // bytes above 0x7f pass
}

TEST(Logging, SeveritiesFollowPostfixAndLogLevel) {
    EXPECT_EQ(severity_prefix(Severity::info), "");
    EXPECT_EQ(severity_prefix(Severity::warning), "warning: ");
    EXPECT_EQ(severity_prefix(Severity::error), "error: ");
    EXPECT_EQ(severity_floor(config::LogLevel::debug), Severity::info);
    EXPECT_EQ(severity_floor(config::LogLevel::info), Severity::info);
    EXPECT_EQ(severity_floor(config::LogLevel::notice), Severity::warning);
    EXPECT_EQ(severity_floor(config::LogLevel::warning), Severity::warning);
    EXPECT_EQ(severity_floor(config::LogLevel::error), Severity::error);
    EXPECT_EQ(facility_code("mail"), 2 << 3);
    EXPECT_EQ(facility_code("local3"), 19 << 3);
    EXPECT_EQ(facility_code("kern"), -1);
}

TEST(Logging, ParsesTargets) {
    EXPECT_EQ(parse_target("syslog")->kind, Target::Kind::syslog);
    EXPECT_EQ(parse_target("syslog")->facility, -1);
    EXPECT_EQ(parse_target("syslog:local3")->facility, 19 << 3);
    EXPECT_EQ(parse_target("stderr")->kind, Target::Kind::stderr_stream);
    EXPECT_EQ(parse_target("both")->kind, Target::Kind::both);
    EXPECT_EQ(parse_target("none")->kind, Target::Kind::none);
    EXPECT_EQ(parse_target("postlog:/var/spool/postfix/public/postlog")->path,
              "/var/spool/postfix/public/postlog");
    EXPECT_EQ(parse_target("file:/var/log/rg.log")->kind, Target::Kind::file);
    for (std::string_view bad :
         {"", "syslog:nosuch", "postlog:relative", "file:", "stderr:x", "both:x", "pigeon"})
        EXPECT_FALSE(parse_target(bad).ok()) << bad;
}

TEST(Logging, TargetsFromConfiguration) {
    config::Config c;
    c.log.ident = "rg";
    c.log.target = config::LogTarget::both;
    c.log.level = config::LogLevel::warning;
    c.log.facility = config::SyslogFacility::local2;
    EXPECT_EQ(lines_target(c).kind, Target::Kind::both);
    EXPECT_EQ(verdicts_target(c)->kind, Target::Kind::syslog);  // verdicts belong in the mail log
    c.log.target = config::LogTarget::stderr_;
    EXPECT_EQ(verdicts_target(c)->kind, Target::Kind::stderr_stream);
    c.log.verdicts = "file:/tmp/x.log";
    EXPECT_EQ(verdicts_target(c)->path, "/tmp/x.log");
    c.log.verdicts = "file:relative";
    ASSERT_FALSE(verdicts_target(c).ok());
    EXPECT_NE(verdicts_target(c).error().message.find("log.verdicts"), std::string::npos);
    const Options o = program_options(c, "milter");
    EXPECT_EQ(o.program, "rg/milter");
    EXPECT_EQ(o.facility, 18 << 3);
    EXPECT_EQ(o.min_severity, Severity::warning);
}

TEST(Logging, ShortHostnameHasNoDomain) {
    const std::string h = short_hostname();
    EXPECT_FALSE(h.empty());
    EXPECT_EQ(h.find('.'), std::string::npos);
}

const std::regex kRecord(R"([A-Z][a-z]{2} \d{2} \d{2}:\d{2}:\d{2} mx retryguard/test\[\d+\]: .*)");

// A file sink for "retryguard/test" on host "mx".
Result<std::unique_ptr<Sink>> open_file_sink(const std::filesystem::path& path,
                                             Severity floor = Severity::info) {
    Target t;
    t.kind = Target::Kind::file;
    t.path = path;
    Options o;
    o.program = "retryguard/test";
    o.hostname = "mx";
    o.min_severity = floor;
    return open_sink(t, o);
}

TEST(LoggingSinks, FileSinkAppendsStampedLinesAndDropsBelowFloor) {
    const TempDir dir("file");
    auto path = dir / "mail.log";
    auto sink = open_file_sink(path, Severity::warning);
    ASSERT_TRUE(sink.ok()) << sink.error().message;
    EXPECT_TRUE((*sink)->write(Severity::info, "dropped below the floor"));
    EXPECT_TRUE((*sink)->write(Severity::warning, "disk\nforged line"));
    EXPECT_TRUE((*sink)->write(Severity::error, "failed"));
    std::istringstream in(slurp(path));
    std::string one, two, extra;
    ASSERT_TRUE(std::getline(in, one));
    ASSERT_TRUE(std::getline(in, two));
    EXPECT_FALSE(std::getline(in, extra));
    EXPECT_TRUE(std::regex_match(one, kRecord)) << one;
    EXPECT_TRUE(one.ends_with("]: warning: disk?forged line")) << one;
    EXPECT_TRUE(two.ends_with("]: error: failed")) << two;
}

TEST(LoggingSinks, FileSinkEndsATornLine) {
    const TempDir dir("torn");
    auto path = dir / "mail.log";
    { std::ofstream(path) << "cut mid-wr"; }
    auto sink = open_file_sink(path);
    ASSERT_TRUE(sink.ok());
    EXPECT_TRUE((*sink)->end_torn_line());
    (*sink)->info("whole");
    const std::string text = slurp(path);
    EXPECT_TRUE(text.starts_with("cut mid-wr\n")) << text;
    EXPECT_TRUE(text.ends_with("]: whole\n")) << text;
}

TEST(LoggingSinks, FileSinkReportsAnUnopenablePath) {
    Target t;
    t.kind = Target::Kind::file;
    t.path = "/nonexistent-dir-for-rg/mail.log";
    EXPECT_FALSE(open_sink(t, Options{}).ok());
}

TEST(LoggingSinks, PostlogSinkSendsOneDatagramPerRecord) {
    const TempDir dir("postlog");
    auto path = dir / "postlog";
    const int server = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(server, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    ASSERT_EQ(::bind(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    auto t = parse_target("postlog:" + path.string());
    ASSERT_TRUE(t.ok());
    Options o;
    o.program = "retryguard/test";
    o.hostname = "mx";
    auto sink = open_sink(*t, o);
    ASSERT_TRUE(sink.ok()) << sink.error().message;
    EXPECT_TRUE((*sink)->write(Severity::info, "KEY: verdict=watch"));
    EXPECT_TRUE((*sink)->write(Severity::warning, "second"));
    char buf[4096];
    const ssize_t n1 = ::recv(server, buf, sizeof buf, MSG_DONTWAIT);
    ASSERT_GT(n1, 0);
    const std::string first(buf, static_cast<std::size_t>(n1));
    const ssize_t n2 = ::recv(server, buf, sizeof buf, MSG_DONTWAIT);
    ASSERT_GT(n2, 0);
    const std::string second(buf, static_cast<std::size_t>(n2));
    EXPECT_TRUE(std::regex_match(first, kRecord)) << first;
    EXPECT_TRUE(first.ends_with("]: KEY: verdict=watch")) << first;
    EXPECT_TRUE(second.ends_with("]: warning: second")) << second;
    ::close(server);
    // The reader went away: the write reports failure and never blocks.
    std::filesystem::remove(path);
    EXPECT_FALSE((*sink)->write(Severity::info, "lost"));
}

TEST(LoggingSinks, PostlogWithoutAReaderFailsToOpen) {
    const TempDir dir("nopostlog");
    auto t = parse_target("postlog:" + (dir / "absent").string());
    ASSERT_TRUE(t.ok());
    EXPECT_FALSE(open_sink(*t, Options{}).ok());
}

// Standard error redirected to a file for the duration of one test.
class StderrCapture {
  public:
    explicit StderrCapture(const std::filesystem::path& p) : path_(p) {
        saved_ = ::dup(STDERR_FILENO);
        const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ::dup2(fd, STDERR_FILENO);
        ::close(fd);
    }
    std::string finish() {
        ::dup2(saved_, STDERR_FILENO);
        ::close(saved_);
        return slurp(path_);
    }

  private:
    std::filesystem::path path_;
    int saved_;
};

TEST(LoggingSinks, StderrSinkNamesTheProgramUnlessBare) {
    const TempDir dir("stderr");
    Options o;
    o.program = "retryguard/test";
    auto named = open_sink(*parse_target("stderr"), o);
    o.stderr_program = false;
    auto bare = open_sink(*parse_target("stderr"), o);
    ASSERT_TRUE(named.ok() && bare.ok());
    StderrCapture cap(dir / "err");
    EXPECT_TRUE((*named)->write(Severity::warning, "slow\nledger"));
    EXPECT_TRUE((*bare)->write(Severity::info, "KEY: verdict=watch"));
    const std::string out = cap.finish();
    EXPECT_EQ(out, "retryguard/test[" + std::to_string(::getpid()) +
                       "]: warning: slow?ledger\nKEY: verdict=watch\n");
}

TEST(LoggingSinks, NoneWritesNothingAndSucceeds) {
    auto sink = open_sink(*parse_target("none"), Options{});
    ASSERT_TRUE(sink.ok());
    EXPECT_TRUE((*sink)->write(Severity::error, "x"));
}

}  // namespace
}  // namespace retryguard::logging
