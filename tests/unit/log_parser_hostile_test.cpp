// Log parser under hostile input: huge lines, NULs, invalid UTF-8, unbalanced
// parentheses and brackets, pathological repetition. Nothing may crash, and
// the work per line must stay linear (a 64 KiB line parses in milliseconds).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "retryguard/log/event_json.hpp"
#include "retryguard/log/log_parser.hpp"

namespace retryguard {
namespace {

const std::string kHead = "Nov 29 20:38:50 mx postfix/smtp[1]: 3F1A22C0E1: ";

LogParser make_parser() {
    LogParserOptions o;
    o.local_time = false;
    o.reference_time = from_micros(1795996800000000);
    return LogParser(o);
}

// Parses and serialises; returns the elapsed wall time in milliseconds.
double timed_parse(LogParser& p, const std::string& line, Event& ev) {
    auto start = std::chrono::steady_clock::now();
    p.parse(line, ev);
    // Serialising must survive whatever bytes the line held.
    std::string json = event_to_json(ev).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    EXPECT_FALSE(json.empty());
    EXPECT_FALSE(event_to_text(ev).empty());
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

TEST(LogParserHostile, TenMegabyteLineIsTruncatedAndCounted) {
    LogParser p = make_parser();
    std::string line = kHead + "to=<a@b.example>, relay=none, dsn=4.0.0, status=deferred (" +
                       std::string(10 * 1024 * 1024, 'x') + ")";
    Event ev;
    double ms = timed_parse(p, line, ev);
    EXPECT_TRUE(ev.truncated);
    EXPECT_EQ(p.stats().truncated, 1u);
    // Still a delivery: the cut only lost the end of the reason.
    EXPECT_EQ(ev.kind, EventKind::delivery);
    EXPECT_LE(ev.text.size(), kMaxLogLineLength);
    EXPECT_LT(ms, 2000.0);
}

TEST(LogParserHostile, PathologicalRepetitionsStayLinear) {
    const std::size_t n = kMaxLogLineLength;
    const std::vector<std::string> bodies = {
        "to=" + std::string(n, '<'),
        [&] {
            std::string s = "to=";
            while (s.size() < n) s += "<a, x=";
            return s;
        }(),
        [&] {
            std::string s = "to=<a>, ";
            while (s.size() < n) s += "k=v, ";
            return s + "status=deferred (" + std::string(1000, '(');
        }(),
        [&] {
            std::string s = "reject: RCPT from h[1.2.3.4]: 450 x";
            while (s.size() < n) s += "; ";
            return s;
        }(),
        [&] {
            std::string s = "reject: RCPT from h[1.2.3.4]: 450 x; from=<a> ";
            while (s.size() < n) s += "to=<";
            return s;
        }(),
        [&] {
            std::string s = "reject: header Subject: ";
            while (s.size() < n) s += " from h[";
            return s + "; from=<a>";
        }(),
        [&] {
            std::string s = "host ";
            while (s.size() < n) s += "x[";
            return s;
        }(),
        [&] {
            std::string s = "host h[1.2.3.4] said: ";
            while (s.size() < n) s += "host h[1.2.3.4] said: ";
            return s;
        }(),
        std::string(n, ')'),
        std::string(n, ':'),
        std::string(n, ' '),
    };
    LogParser p = make_parser();
    Event ev;
    for (const auto& body : bodies) {
        for (const std::string& prefix :
             {kHead, std::string("Nov 29 20:38:50 mx postfix/smtpd[1]: NOQUEUE: "),
              std::string("Nov 29 20:38:50 mx postfix/cleanup[1]: 3F1A22C0E1: "),
              std::string("Nov 29 20:38:50 mx retryguard[1]: 3F1A22C0E1: verdict=x "),
              std::string("Nov 29 20:38:50 mx postfix/smtp[1]: "), std::string("<13>1 - - - - - ")}) {
            double ms = timed_parse(p, prefix + body, ev);
            EXPECT_LT(ms, 250.0) << prefix << body.substr(0, 40);
        }
    }
}

TEST(LogParserHostile, FieldsPerEventAreBounded) {
    LogParser p = make_parser();
    std::string line = "Nov 29 20:38:50 mx retryguard[1]: 3F1A22C0E1: verdict=x";
    for (int i = 0; i < 5000; ++i) line += " k=v";
    Event ev = p.parse(line);
    EXPECT_EQ(ev.kind, EventKind::verdict);
    EXPECT_EQ(ev.fields.size(), 64u);
}

TEST(LogParserHostile, NulsAndInvalidUtf8AreCarriedNotTrusted) {
    LogParser p = make_parser();
    using namespace std::string_literals;
    std::string line =
        kHead + "to=<a\0b@\xff\xfe.example>, relay=h\x80[1.2.3.4]:25, dsn=4.0.0, status=deferred (\xc3("s;
    Event ev;
    timed_parse(p, line, ev);
    EXPECT_EQ(ev.kind, EventKind::delivery);
    EXPECT_NE(ev.recipient.find('\0'), std::string::npos);
    std::string json = event_to_json(ev).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    EXPECT_NE(json.find("\\u0000"), std::string::npos);
    // The text form never passes control characters to a terminal.
    EXPECT_EQ(event_to_text(ev).find('\0'), std::string::npos);

    std::string nul_header(64, '\0');
    EXPECT_EQ(p.parse(nul_header).kind, EventKind::unknown);
}

TEST(LogParserHostile, MalformedShapesBecomeUnknownByKind) {
    LogParser p = make_parser();
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"", "empty"},
        {"hello world", "not-syslog"},
        {"<999999>Nov 29 20:38:50 mx postfix/smtp[1]: x", "not-syslog"},
        {"<224>", "not-syslog"},  // found by logline_fuzz: a priority and nothing after it
        {"Nov 29 20:38:50", "bad-time"},
        {"Nov 29 20:38:50 mx", "not-syslog"},
        {"Nov 29 20:38:50 mx postfix/smtp[abc]: x", "not-syslog"},
        {"Nov 29 20:38:50 mx postfix/smtp[1]: 3F1A22C0E1: to=", "delivery-malformed"},
        {"Nov 29 20:38:50 mx postfix/qmgr[1]: 3F1A22C0E1: from=<a>, size=", "qmgr-other"},
        {"Nov 29 20:38:50 mx postfix/smtpd[1]: NOQUEUE: reject: RCPT from nobracket: 450 x", "smtpd-other"},
        {"Nov 29 20:38:50 mx postfix/smtp[1]: 3F1A22C0E1: host (", "smtp-other"},
        {"Nov 29 20:38:50 mx postfix/master[1]: daemon started -- version 3.7.11", "postfix-other"},
    };
    for (const auto& [line, kind] : cases) {
        Event ev = p.parse(line);
        EXPECT_EQ(ev.kind, EventKind::unknown) << line;
        EXPECT_EQ(ev.unknown_kind, kind) << line;
    }
    EXPECT_EQ(p.stats().unknown, cases.size());
    EXPECT_EQ(p.stats().unknown_by_kind.at("not-syslog"), 5u);
}

}  // namespace
}  // namespace retryguard
