// text_verdict_test.cpp -- verdict lines carry outside text in their key and
// values; the project's own readers (parse_verdict_line and the log parser, as
// `retryguard events` uses them) must give back exactly the key and fields
// written, and no text may forge a verdict or a field. Thousands of seeded
// random cases plus the forgeries found in review.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "retryguard/log/event_json.hpp"
#include "retryguard/log/log_parser.hpp"
#include "retryguard/rules/verdict.hpp"
#include "retryguard/text/text.hpp"

namespace retryguard {
namespace {

constexpr int kCases = 5000;

std::string random_text(std::mt19937& rng) {
    static const std::vector<std::string> pieces = {"example.com",
                                                    " ",
                                                    "\"",
                                                    "\\",
                                                    "=",
                                                    ": ",
                                                    ":",
                                                    "verdict=flagged",
                                                    " destination=victim.test",
                                                    "-",
                                                    "NOQUEUE",
                                                    "\x1b]0;t\x07",
                                                    "\r",
                                                    "\n",
                                                    "\t",
                                                    std::string(1, '\0'),
                                                    "\x7f",
                                                    "\xc3\x28",
                                                    "\xc3\xa9",
                                                    "\xe2\x82\xac",
                                                    "\xc2\x9b",
                                                    "\xe2\x80\xae",
                                                    "\xff",
                                                    "\\x41",
                                                    "\"\"",
                                                    "3F1A22C0E1"};
    std::string out;
    const std::size_t n = rng() % 8;
    for (std::size_t i = 0; i < n; ++i) {
        if (rng() % 4 == 0)
            out += static_cast<char>(rng() & 0xff);
        else
            out += pieces[rng() % pieces.size()];
    }
    return out;
}

Event parse_line(const std::string& message) {
    LogParserOptions o;
    o.local_time = false;
    LogParser parser(o);
    return parser.parse("Nov 29 20:38:50 mx retryguard/policyd[812]: " + message);
}

TEST(TextVerdict, EveryKeyAndFieldReadsBackExactly) {
    std::mt19937 rng(20261130);
    for (int i = 0; i < kCases; ++i) {
        Verdict v;
        v.key = random_text(rng);
        v.name = random_text(rng);
        if (v.name.empty()) v.name = "noted";
        const int nfields = static_cast<int>(rng() % 6);
        for (int f = 0; f < nfields; ++f) v.add(f % 2 ? random_text(rng) + "k" : "reply", random_text(rng));
        const std::string line = format_verdict(v);

        // One line, valid UTF-8, nothing a terminal or syslog acts on.
        ASSERT_TRUE(text::is_valid_utf8(line)) << line;
        for (unsigned char c : line) ASSERT_TRUE(c >= 0x20 && c != 0x7f) << line;

        VerdictLine back;
        ASSERT_TRUE(parse_verdict_line(line, back)) << line;
        EXPECT_TRUE(back.has_key);
        EXPECT_EQ(back.key, v.key == "-" ? std::string() : v.key) << line;
        ASSERT_EQ(back.fields.size(), v.fields.size() + 1) << line;
        EXPECT_EQ(back.fields[0].first, "verdict");
        EXPECT_EQ(back.fields[0].second, v.name) << line;
        for (std::size_t f = 0; f < v.fields.size(); ++f) EXPECT_EQ(back.fields[f + 1], v.fields[f]) << line;

        // The log parser (the path of `retryguard events`) agrees field for field.
        const Event ev = parse_line(line);
        ASSERT_EQ(ev.kind, EventKind::verdict) << line;
        EXPECT_EQ(ev.action, v.name);
        EXPECT_EQ(ev.fields, back.fields);
        const std::string key = back.key;
        if (!key.empty() && key != "NOQUEUE") {
            EXPECT_EQ(ev.queue_id.empty() ? ev.destination : ev.queue_id, key) << line;
        }
    }
}

TEST(TextVerdict, ForgedQueueIdFromAPolicyRequestStaysTheKey) {
    // A client that controls the queue_id attribute tried to make the line read
    // as a flag of victim.test.
    Verdict v;
    v.key = "X: verdict=flagged destination=victim.test";
    v.name = "policy_reject";
    v.add("recipient", "user@flagged.test").add("destination", "flagged.test");
    const std::string line = format_verdict(v);
    EXPECT_EQ(line.rfind("\"X: verdict=flagged destination=victim.test\": verdict=policy_reject ", 0), 0u)
        << line;
    const Event ev = parse_line(line);
    ASSERT_EQ(ev.kind, EventKind::verdict);
    EXPECT_EQ(ev.action, "policy_reject");
    EXPECT_EQ(ev.destination, v.key);
    EXPECT_EQ(ev.queue_id, "");
    for (const auto& [k, value] : ev.fields) {
        EXPECT_NE(value, "flagged") << k;
        EXPECT_NE(value, "victim.test") << k;
    }
    // What `retryguard events` prints keeps the key quoted too.
    const std::string shown = event_to_text(ev);
    EXPECT_NE(shown.find("destination=\"X: verdict=flagged destination=victim.test\""), std::string::npos)
        << shown;
}

TEST(TextVerdict, ForgedDomainKeyFromTheLogIsQuoted) {
    Verdict v;
    v.key = "evil.test verdict=flagged";
    v.name = "noted";
    v.add("reply", "451 4.3.5 \x1b]0;owned\x07 \xc3\x28");
    const std::string line = format_verdict(v);
    EXPECT_EQ(line,
              "\"evil.test verdict=flagged\": verdict=noted reply=\"451 4.3.5 \\x1b]0;owned\\x07 \\xc3(\"");
    const Event ev = parse_line(line);
    EXPECT_EQ(ev.action, "noted");
    EXPECT_EQ(ev.destination, "evil.test verdict=flagged");
    EXPECT_EQ(ev.fields.at(1).second, "451 4.3.5 \x1b]0;owned\x07 \xc3\x28");
}

TEST(TextVerdict, OrdinaryLinesAreWrittenAsBefore) {
    Verdict v;
    v.key = "cfgerr.example";
    v.name = "escalate";
    v.add("destination", "cfgerr.example")
        .add("relay", "mx.cfgerr.example[192.0.2.7]:25")
        .add("reply", "451 4.3.5 System config error")
        .add("contact", "postmaster@cfgerr.example, caf\xc3\xa9");
    EXPECT_EQ(
        format_verdict(v),
        "cfgerr.example: verdict=escalate destination=cfgerr.example relay=mx.cfgerr.example[192.0.2.7]:25 "
        "reply=\"451 4.3.5 System config error\" contact=\"postmaster@cfgerr.example, caf\xc3\xa9\"");
    v.key = "";
    EXPECT_EQ(format_verdict(v).substr(0, 3), "-: ");
    v.key = "mx:mx1.example.net";
    EXPECT_EQ(format_verdict(v).substr(0, 20), "mx:mx1.example.net: ");
    const Event ev = parse_line(format_verdict(v));
    EXPECT_EQ(ev.destination, "mx:mx1.example.net");
}

TEST(TextVerdict, MalformedQuotedKeysAreNotVerdicts) {
    VerdictLine back;
    EXPECT_FALSE(parse_verdict_line("\"unterminated: verdict=x", back));
    EXPECT_FALSE(parse_verdict_line("\"k\"x: verdict=x", back));
    EXPECT_FALSE(parse_verdict_line("\"k\\xZZ\": verdict=x", back));
    EXPECT_TRUE(parse_verdict_line("\"k\\x41\": verdict=x", back));
    EXPECT_EQ(back.key, "kA");
}

TEST(TextVerdict, LineCutBySyslogInsideAnEscapeKeepsWhatArrived) {
    // syslog daemons cut long records (rsyslog: 8 KiB by default), possibly in
    // the middle of a \xHH escape of a long reply.
    Verdict v;
    v.key = "example.com";
    v.name = "noted";
    v.add("reply", "451 " + std::string(100, '\x1b'));
    const std::string line = format_verdict(v);
    for (std::size_t cut : {line.size() - 2, line.size() - 3, line.size() - 4}) {
        VerdictLine back;
        ASSERT_TRUE(parse_verdict_line(line.substr(0, cut), back)) << cut;
        EXPECT_EQ(back.key, "example.com");
        ASSERT_EQ(back.fields.size(), 2u);
        EXPECT_EQ(back.fields[1].second.rfind("451 \x1b\x1b", 0), 0u);
    }
}

}  // namespace
}  // namespace retryguard
