// identity_verdict_roundtrip_test.cpp -- the milter's verdict lines are read
// back by the project's own log parser with every key and value intact
// (principle: verdicts are log lines first, parseable by our parser).
#include <gtest/gtest.h>

#include "retryguard/identity/resend.hpp"
#include "retryguard/log/log_parser.hpp"

using namespace retryguard;
using namespace std::chrono;

TEST(IdentityVerdictRoundTrip, LogParserReadsEveryField) {
    PendingCopy p;
    p.recipient = "bob@defer.example";
    p.queue_id = "3F2A1B0C";
    p.destination = "defer.example";
    p.last_reply =
        "host mx[192.0.2.1] said: 451 4.3.5 \"quoted\" back\\slash=x (in reply to RCPT TO command)";
    p.arrival = sys_days{2026y / 11 / 29} + 20h;
    p.first_deferral = *p.arrival;
    p.last_attempt = *p.arrival + 5min;
    p.attempts = 3;
    p.matched_by_message_id = true;
    MessageFacts m;
    m.queue_id = "9ABCDEF01";
    m.path = SubmissionPath::sendmail;
    m.message_id = "id-1@client.example";
    m.sender = "alice@example.org";
    m.recipients = {"bob@defer.example", "carol@ok.example"};
    auto d = decide_resend(m, {p}, ResendPolicy{});
    std::string line =
        "Nov 29 21:53:16 sender retryguard/milter[4242]: " + verdict_line(m, d, ResendPolicy{});

    LogParser parser;
    Event e = parser.parse(line);
    ASSERT_EQ(e.kind, EventKind::verdict) << line;
    EXPECT_EQ(e.queue_id, "9ABCDEF01");
    std::map<std::string, std::string> f(e.fields.begin(), e.fields.end());
    EXPECT_EQ(f["verdict"], "drop_duplicates");
    EXPECT_EQ(f["path"], "sendmail");
    EXPECT_EQ(f["original"], "3F2A1B0C");
    EXPECT_EQ(f["duplicates"], "bob@defer.example");
    EXPECT_EQ(f["new"], "carol@ok.example");
    EXPECT_EQ(f["reply"], "451 4.3.5 \"quoted\" back\\slash=x");
    EXPECT_EQ(f["since"], "2026-11-29T20:00:00Z");
    EXPECT_EQ(f["message_id"], "id-1@client.example");
}
