// `retryguard events` end to end: the built binary over a fixture as a plain
// file, as gzip and on standard input, in text and JSON forms.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
const fs::path kFixture =
    fs::path(RETRYGUARD_FIXTURES) / "postfix-3.7" / "03-rcpt-451-4.3.5-server-configuration-error.sender.log";

struct CliRun {
    int status = -1;
    std::string out;
    std::string err;
};

class LogEventsCli : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("rg-events-" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    CliRun run(const std::string& args) {
        fs::path err = dir_ / "stderr";
        std::string cmd = std::string(RETRYGUARD_CLI) + " events " + args + " 2>" + err.string();
        CliRun r;
        FILE* p = popen(cmd.c_str(), "r");
        if (!p) return r;
        std::array<char, 65536> buf{};
        std::size_t n;
        while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
        int st = pclose(p);
        r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        std::ifstream e(err);
        std::stringstream ss;
        ss << e.rdbuf();
        r.err = ss.str();
        return r;
    }

    static std::vector<nlohmann::json> json_lines(const std::string& out) {
        std::vector<nlohmann::json> v;
        std::istringstream in(out);
        for (std::string l; std::getline(in, l);) v.push_back(nlohmann::json::parse(l));
        return v;
    }

    fs::path dir_;
};

TEST_F(LogEventsCli, JsonLinesCarryTheDeliveryContract) {
    CliRun r = run("--json --utc " + kFixture.string());
    ASSERT_EQ(r.status, 0) << r.err;
    auto events = json_lines(r.out);
    ASSERT_EQ(events.size(), 7u);  // 6 log lines + the scenario comment
    std::map<std::string, int> kinds;
    for (const auto& e : events) ++kinds[e.at("kind").get<std::string>()];
    EXPECT_EQ(kinds["delivery"], 1);
    EXPECT_EQ(kinds["smtpd_client"], 1);
    EXPECT_EQ(kinds["unknown"], 3);
    const nlohmann::json* deferred = nullptr;
    for (const auto& e : events)
        if (e.at("kind") == "delivery" && e.at("status") == "deferred") deferred = &e;
    ASSERT_NE(deferred, nullptr);
    const auto& d = *deferred;
    EXPECT_EQ(d.at("time"), "2026-11-29T20:48:23Z");
    EXPECT_EQ(d.at("queue_id"), "1E661116375");
    EXPECT_EQ(d.at("recipient"), "user@cfgerr.lab.test");
    EXPECT_EQ(d.at("relay"), "127.0.0.1[127.0.0.1]:25602");
    EXPECT_EQ(d.at("dsn"), "4.3.5");
    EXPECT_EQ(d.at("reply_code"), 451);
    EXPECT_EQ(d.at("reply_enhanced"), "4.3.5");
    EXPECT_EQ(d.at("reply_text"),
              "<user@cfgerr.lab.test>: Recipient address rejected: Server configuration error");
    EXPECT_EQ(d.at("stage"), "rcpt-to");
    EXPECT_EQ(events.front().at("unknown_kind"), "comment");
    EXPECT_NE(r.err.find("7 lines, 4 events, 3 unknown"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("unknown smtpd-connect: 1"), std::string::npos) << r.err;
}

TEST_F(LogEventsCli, GzipAndStdinGiveTheSameEventsAsThePlainFile) {
    std::ifstream in(kFixture, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string content = ss.str();
    fs::path gz = dir_ / "mail.log.1.gz";
    gzFile f = gzopen(gz.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, content.data(), static_cast<unsigned>(content.size())), int(content.size()));
    gzclose(f);

    CliRun plain = run("--json --utc --year 2026 " + kFixture.string());
    CliRun zipped = run("--json --utc --year 2026 " + gz.string());
    CliRun piped = run("--json --utc --year 2026 < " + kFixture.string());
    ASSERT_EQ(plain.status, 0);
    EXPECT_EQ(zipped.status, 0) << zipped.err;
    EXPECT_EQ(piped.status, 0) << piped.err;
    EXPECT_FALSE(plain.out.empty());
    EXPECT_EQ(zipped.out, plain.out);
    EXPECT_EQ(piped.out, plain.out);
}

TEST_F(LogEventsCli, TextFormYearOptionAndMissingFile) {
    CliRun r = run("--utc --year 2019 " + kFixture.string());
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("2019-11-29T20:48:23Z delivery 1E661116375 to=user@cfgerr.lab.test"),
              std::string::npos)
        << r.out;
    CliRun missing = run((dir_ / "no-such.log").string());
    EXPECT_EQ(missing.status, 1);
    EXPECT_NE(missing.err.find("no-such.log"), std::string::npos);
    CliRun bad = run("--year 12 " + kFixture.string());
    EXPECT_EQ(bad.status, 2);
}

}  // namespace
