// The two JSON forms of an event (nlohmann object and the direct writer used by
// `retryguard events --json`) must say the same thing for every fixture line,
// and the direct writer must produce valid JSON whatever bytes a line holds.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "retryguard/log/event_json.hpp"
#include "retryguard/log/log_parser.hpp"

namespace retryguard {
namespace {

namespace fs = std::filesystem;

TEST(LogEventJson, DirectWriterEqualsTheObjectForEveryFixtureLine) {
    LogParserOptions o;
    o.local_time = false;
    o.reference_time = from_micros(1795996800000000);
    std::size_t lines = 0;
    for (const auto& entry : fs::directory_iterator(fs::path(RETRYGUARD_FIXTURES) / "postfix-3.7")) {
        if (entry.path().extension() != ".log") continue;
        LogParser parser(o);
        std::ifstream in(entry.path());
        Event ev;
        for (std::string line; std::getline(in, line);) {
            parser.parse(line, ev);
            std::string out;
            append_event_json(ev, out);
            nlohmann::json parsed = nlohmann::json::parse(out);
            EXPECT_EQ(parsed, event_to_json(ev)) << line << "\n" << out;
            ++lines;
        }
    }
    EXPECT_GE(lines, 1600u);
}

TEST(LogEventJson, EscapesControlsAndReplacesInvalidUtf8) {
    LogParser parser;
    using namespace std::string_literals;
    Event ev = parser.parse(
        "Nov 29 20:38:50 mx retryguard[1]: 3F1A22C0E1: verdict=x q=\"a\\\"b\\\\c\" t=\x01\x1f\x7f "
        "u=\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 bad=\xc3\x28\xed\xa0\x80\xf5\xff\xc0\xaf z=\0end"s);
    ASSERT_EQ(ev.kind, EventKind::verdict);
    std::string out;
    append_event_json(ev, out);
    nlohmann::json j = nlohmann::json::parse(out);  // throws on invalid JSON or UTF-8
    const auto& f = j.at("fields");
    EXPECT_EQ(f.at(1).at(1), "a\"b\\c");
    EXPECT_EQ(f.at(2).at(1), "\x01\x1f\x7f");
    EXPECT_EQ(f.at(3).at(1), "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");  // valid UTF-8 passes unchanged
    std::string bad = f.at(4).at(1);
    EXPECT_EQ(bad.find('\xff'), std::string::npos);
    EXPECT_NE(bad.find("\xef\xbf\xbd"), std::string::npos);
    EXPECT_EQ(f.at(5).at(1), "\0end"s);
}

}  // namespace
}  // namespace retryguard
