// LogFileReader: bounded lines from plain and gzip files, a partial last line,
// CRLF, a damaged gzip stream, and a missing file.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "retryguard/log_reader.hpp"

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

}  // namespace
}  // namespace retryguard
