// Log parser over every real Postfix 3.7 log in tests/fixtures/postfix-3.7/:
// the kinds found per file must match an independent count by the text
// signatures of each line shape, and representative lines must yield exact fields.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "retryguard/log/log_parser.hpp"

namespace retryguard {
namespace {

namespace fs = std::filesystem;
const fs::path kDir = fs::path(RETRYGUARD_FIXTURES) / "postfix-3.7";

std::vector<std::string> read_lines(const fs::path& p) {
    std::ifstream in(p);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
}

bool has(const std::string& s, const char* needle) {
    return s.find(needle) != std::string::npos;
}

// What a person grepping the log would call each line, without the parser.
std::string signature_kind(const std::string& l) {
    if (l.empty() || l[0] == '#') return "unknown";
    if (has(l, "]: warning: ") || has(l, "]: error: ")) return "unknown";
    if (has(l, ": to=<") && has(l, ", status=")) return "delivery";
    if (has(l, "(queue active)")) return "queue_active";
    if (has(l, ", status=expired, returned to sender")) return "expired";
    if (l.size() > 9 && l.compare(l.size() - 9, 9, ": removed") == 0) return "queue_removed";
    if (has(l, ": message-id=<")) return "message_id";
    if (has(l, ": milter-")) return "milter_action";
    if (has(l, "/pickup[") && has(l, ": uid=")) return "pickup";
    if (has(l, ": client=")) return "smtpd_client";
    for (const char* a : {": reject: ", ": warn: ", ": hold: ", ": discard: ", ": info: "})
        if (has(l, "/smtpd[") && has(l, a)) return "smtpd_action";
    if (has(l, " notification: ")) return "notification";
    for (const char* a : {": placed on hold", ": released from hold", ": requeued"})
        if (has(l, "/postsuper[") && has(l, a)) return "queue_operation";
    if (has(l, "/smtp[") && has(l, "]: connect to ")) return "connection_problem";
    return "unknown";
}

LogParserOptions utc_options() {
    LogParserOptions o;
    o.local_time = false;
    o.reference_time = from_micros(1795996800000000);  // 2026-11-30T00:00:00Z, after the capture
    return o;
}

TEST(LogParserFixtures, EveryFileYieldsTheKindsItsLinesShow) {
    std::size_t files = 0, lines_total = 0;
    for (const auto& entry : fs::directory_iterator(kDir)) {
        if (entry.path().extension() != ".log") continue;
        ++files;
        LogParser parser(utc_options());
        std::map<std::string, int> expected, got;
        for (const auto& line : read_lines(entry.path())) {
            ++lines_total;
            Event ev = parser.parse(line);
            ++got[std::string(to_string(ev.kind))];
            ++expected[signature_kind(line)];
            if (ev.kind != EventKind::unknown) {
                EXPECT_EQ(format_rfc3339(ev.time).substr(0, 11), "2026-11-29T") << line;
                EXPECT_EQ(ev.program.substr(0, 8), "postfix/") << line;
                EXPECT_GT(ev.pid, 0) << line;
                EXPECT_FALSE(ev.host.empty()) << line;
            }
        }
        EXPECT_EQ(got, expected) << entry.path().filename();
        EXPECT_EQ(parser.stats().lines, parser.stats().recognised + parser.stats().unknown);
    }
    EXPECT_EQ(files, 77u);
    EXPECT_GE(lines_total, 1600u);
}

TEST(LogParserFixtures, UnknownLinesInTheLabLogsAreOnlyNoise) {
    // Everything Postfix logged in the lab that is not an event is one of these.
    const std::set<std::string> noise = {"comment",          "warning",          "error",
                                         "smtpd-connect",    "smtpd-disconnect", "smtpd-lost-connection",
                                         "postsuper-summary"};
    LogParser parser(utc_options());
    for (const auto& entry : fs::directory_iterator(kDir)) {
        if (entry.path().extension() != ".log") continue;
        for (const auto& line : read_lines(entry.path())) {
            Event ev = parser.parse(line);
            if (ev.kind == EventKind::unknown) {
                EXPECT_TRUE(noise.count(ev.unknown_kind)) << ev.unknown_kind << ": " << line;
            }
        }
    }
    EXPECT_EQ(parser.stats().unknown_by_kind.at("smtpd-connect"), 193u);
    EXPECT_EQ(parser.stats().unknown_by_kind.at("comment"), 77u);
}

std::map<EventKind, int> kinds_of(const std::string& file) {
    LogParser parser(utc_options());
    std::map<EventKind, int> n;
    for (const auto& line : read_lines(kDir / file)) ++n[parser.parse(line).kind];
    return n;
}

TEST(LogParserFixtures, PickupSentIsOneMessageLifecycle) {
    auto n = kinds_of("01-pickup-sent.sender.log");
    std::map<EventKind, int> want = {{EventKind::pickup, 1},        {EventKind::message_id, 1},
                                     {EventKind::queue_active, 1},  {EventKind::delivery, 1},
                                     {EventKind::queue_removed, 1}, {EventKind::unknown, 1}};
    EXPECT_EQ(n, want);
}

TEST(LogParserFixtures, ExpiredScenarioHasDeferralsThenExpiryAndNotification) {
    auto n = kinds_of("39-expired.expiry.log");
    EXPECT_EQ(n[EventKind::expired], 1);
    EXPECT_EQ(n[EventKind::notification], 1);
    EXPECT_GE(n[EventKind::delivery], 5);  // 4-5 deferrals and the DSN delivered
}

Event find_line(const std::string& file, const std::string& needle) {
    LogParser parser(utc_options());
    for (const auto& line : read_lines(kDir / file))
        if (line[0] != '#' && line.find(needle) != std::string::npos) return parser.parse(line);
    ADD_FAILURE() << needle << " not in " << file;
    return {};
}

TEST(LogParserFixtures, DeferredDeliveryCarriesEveryField) {
    Event ev = find_line("03-rcpt-451-4.3.5-server-configuration-error.sender.log", "status=deferred");
    ASSERT_EQ(ev.kind, EventKind::delivery);
    EXPECT_EQ(format_rfc3339(ev.time), "2026-11-29T20:48:23Z");
    EXPECT_EQ(ev.host, "sender");
    EXPECT_EQ(ev.program, "postfix/smtp");
    EXPECT_EQ(ev.process, "smtp");
    EXPECT_EQ(ev.pid, 23714);
    EXPECT_EQ(ev.queue_id, "1E661116375");
    EXPECT_EQ(ev.recipient, "user@cfgerr.lab.test");
    EXPECT_EQ(ev.relay, "127.0.0.1[127.0.0.1]:25602");
    EXPECT_EQ(ev.relay_host, "127.0.0.1");
    EXPECT_EQ(ev.relay_addr, "127.0.0.1");
    EXPECT_EQ(ev.relay_port, 25602);
    EXPECT_DOUBLE_EQ(ev.delay, 0.15);
    EXPECT_EQ(ev.delays, "0.01/0/0.08/0.06");
    EXPECT_EQ(ev.dsn, "4.3.5");
    EXPECT_EQ(ev.status, DeliveryStatus::deferred);
    EXPECT_EQ(ev.reason,
              "host 127.0.0.1[127.0.0.1] said: 451 4.3.5 <user@cfgerr.lab.test>: Recipient address rejected: "
              "Server configuration error (in reply to RCPT TO command)");
    ASSERT_TRUE(ev.reply.has_value());
    EXPECT_EQ(ev.reply->code, 451);
    ASSERT_TRUE(ev.reply->enhanced.has_value());
    EXPECT_EQ(ev.reply->enhanced->str(), "4.3.5");
    EXPECT_EQ(ev.reply->stage, SmtpStage::rcpt_to);
    EXPECT_EQ(ev.reply->remote_addr, "127.0.0.1");
}

TEST(LogParserFixtures, ConnUseAndOrigToAreKept) {
    Event ev = find_line("full-run.sender.log", "conn_use=2, delay=54");
    ASSERT_EQ(ev.kind, EventKind::delivery);
    EXPECT_EQ(ev.conn_use, "2");
    EXPECT_EQ(ev.recipient, "cfg435@policy.lab.test");
    Event local = find_line("full-run.rcv.log", "orig_to=<postmaster>");
    ASSERT_EQ(local.kind, EventKind::delivery);
    EXPECT_EQ(local.process, "virtual");
    EXPECT_EQ(local.orig_recipient, "postmaster");
    EXPECT_EQ(local.recipient, "postmaster@rcv.lab.test");
    EXPECT_EQ(local.relay, "virtual");
    EXPECT_EQ(local.relay_host, "virtual");
    EXPECT_EQ(local.status, DeliveryStatus::sent);
    EXPECT_EQ(local.reason, "delivered to maildir");
}

TEST(LogParserFixtures, QmgrPickupCleanupAndBounceLines) {
    Event active = find_line("01-pickup-sent.sender.log", "(queue active)");
    EXPECT_EQ(active.kind, EventKind::queue_active);
    EXPECT_EQ(active.sender, "alice+01@sender.lab.test");
    EXPECT_EQ(active.size, 366);
    EXPECT_EQ(active.nrcpt, 1);

    Event pickup = find_line("40-queue-ops.sender.log", "orig_id=");
    EXPECT_EQ(pickup.kind, EventKind::pickup);
    EXPECT_EQ(pickup.queue_id, "0343E1160BF");
    EXPECT_EQ(pickup.uid, 104);
    EXPECT_EQ(pickup.sender, "alice+40@sender.lab.test");
    EXPECT_EQ(pickup.orig_queue_id, "3E7F7116184");

    Event mid = find_line("01-pickup-sent.sender.log", "message-id=");
    EXPECT_EQ(mid.kind, EventKind::message_id);
    EXPECT_EQ(mid.message_id, "<lab-pickup-sent-1795985297-23603-1@client.lab.test>");
    EXPECT_FALSE(mid.resent);

    Event bounce = find_line("12-rcpt-554-5.7.1-access-reject.sender.log", "non-delivery notification");
    EXPECT_EQ(bounce.kind, EventKind::notification);
    EXPECT_EQ(bounce.queue_id, "167E91161A8");
    EXPECT_EQ(bounce.action, "non-delivery");
    EXPECT_EQ(bounce.new_queue_id, "216D51161BD");

    Event delay = find_line("41-lifecycle-deferred-retries-delay-warning.sender.log", "delay notification");
    EXPECT_EQ(delay.kind, EventKind::notification);
    EXPECT_EQ(delay.action, "delay");

    Event expired = find_line("39-expired.expiry.log", "status=expired");
    EXPECT_EQ(expired.kind, EventKind::expired);
    EXPECT_EQ(expired.queue_id, "584D911616B");
    EXPECT_EQ(expired.sender, "alice+39@expiry.lab.test");
    EXPECT_EQ(expired.status, DeliveryStatus::expired);
    EXPECT_EQ(expired.action, "expired");
}

TEST(LogParserFixtures, WarningsKeepTheirQueueId) {
    Event ev =
        find_line("14-eod-451-4.3.0-queue-file-write-error.rcv.log", "header_checks map lookup problem");
    EXPECT_EQ(ev.kind, EventKind::unknown);
    EXPECT_EQ(ev.unknown_kind, "warning");
    EXPECT_EQ(ev.queue_id.size(), 11u);
    EXPECT_NE(ev.text.find(ev.queue_id + ": header_checks"), std::string::npos);
}

TEST(LogParserFixtures, PostsuperOperations) {
    const std::string f = "40-queue-ops.sender.log";
    EXPECT_EQ(find_line(f, ": placed on hold").action, "placed on hold");
    EXPECT_EQ(find_line(f, ": released from hold").kind, EventKind::queue_operation);
    EXPECT_EQ(find_line(f, ": requeued").action, "requeued");
    Event removed = find_line(f, "postsuper[27821]: 0343E1160BF: removed");
    EXPECT_EQ(removed.kind, EventKind::queue_removed);
    EXPECT_EQ(removed.process, "postsuper");
    Event summary = find_line(f, "Deleted: 1 message");
    EXPECT_EQ(summary.kind, EventKind::unknown);
    EXPECT_EQ(summary.unknown_kind, "postsuper-summary");
}

TEST(LogParserFixtures, SmtpdAndMilterActions) {
    Event reject = find_line("03-rcpt-451-4.3.5-server-configuration-error.rcv.log", "NOQUEUE: reject:");
    ASSERT_EQ(reject.kind, EventKind::smtpd_action);
    EXPECT_EQ(reject.queue_id, "");
    EXPECT_EQ(reject.action, "reject");
    EXPECT_EQ(reject.stage, "RCPT");
    EXPECT_EQ(reject.client, "localhost[127.0.0.1]");
    EXPECT_EQ(reject.sender, "alice+03@sender.lab.test");
    EXPECT_EQ(reject.recipient, "user@cfgerr.lab.test");
    EXPECT_EQ(reject.dsn, "4.3.5");
    EXPECT_EQ(reject.reason,
              "451 4.3.5 <user@cfgerr.lab.test>: Recipient address rejected: Server configuration error");
    ASSERT_TRUE(reject.reply);
    EXPECT_EQ(reject.reply->code, 451);
    std::vector<std::pair<std::string, std::string>> tail = {{"proto", "ESMTP"}, {"helo", "sender.lab.test"}};
    EXPECT_EQ(reject.fields, tail);

    Event warn = find_line("21-policy-warn.rcv.log", "NOQUEUE: warn:");
    EXPECT_EQ(warn.kind, EventKind::smtpd_action);
    EXPECT_EQ(warn.action, "warn");
    EXPECT_EQ(warn.reason, "lab policy: suspicious but accepted");
    EXPECT_EQ(warn.recipient, "warn@policy.lab.test");

    Event hold = find_line("22-policy-hold.rcv.log", "NOQUEUE: hold:");
    EXPECT_EQ(hold.action, "hold");
    EXPECT_EQ(hold.reason, "<hold@policy.lab.test>: Recipient address lab policy: held for review");

    Event connect = find_line("15-milter-down-451-4.7.1.rcv.log", "milter-reject: CONNECT");
    EXPECT_EQ(connect.kind, EventKind::milter_action);
    EXPECT_EQ(connect.stage, "CONNECT");
    EXPECT_EQ(connect.reason, "451 4.7.1 Service unavailable - try again later");
    EXPECT_EQ(connect.sender, "");

    Event eom = find_line("16-milter-reject-eom.rcv.log", "milter-reject: END-OF-MESSAGE");
    EXPECT_EQ(eom.kind, EventKind::milter_action);
    EXPECT_EQ(eom.process, "cleanup");
    EXPECT_EQ(eom.queue_id, "06A591160C1");
    EXPECT_EQ(eom.stage, "END-OF-MESSAGE");
    EXPECT_EQ(eom.dsn, "5.7.1");
    EXPECT_EQ(eom.reason, "5.7.1 lab milter rejects this message");
    ASSERT_TRUE(eom.reply);
    EXPECT_EQ(eom.reply->enhanced->str(), "5.7.1");

    EXPECT_EQ(find_line("19-milter-hold.rcv.log", "milter-hold:").action, "milter-hold");
    EXPECT_EQ(find_line("20-milter-discard.rcv.log", "milter-discard:").action, "milter-discard");

    Event client = find_line("02-smtp-sent.sender.log", "client=");
    EXPECT_EQ(client.kind, EventKind::smtpd_client);
    EXPECT_EQ(client.client, "localhost[127.0.0.1]");
}

TEST(LogParserFixtures, ConnectionProblemAndLocalFailures) {
    Event refused = find_line("34-connection-refused.sender.log", "]: connect to ");
    ASSERT_EQ(refused.kind, EventKind::connection_problem);
    EXPECT_EQ(refused.action, "connect");
    EXPECT_EQ(refused.relay_host, "127.0.0.1");
    EXPECT_EQ(refused.relay_addr, "127.0.0.1");
    EXPECT_EQ(refused.relay_port, 25699);
    ASSERT_TRUE(refused.reply);
    EXPECT_EQ(refused.reply->local, LocalFailure::connection_refused);

    Event none = find_line("34-connection-refused.sender.log", "relay=none");
    EXPECT_EQ(none.relay, "none");
    EXPECT_EQ(none.dsn, "4.4.1");

    Event transport = find_line("35-sender-transport-unavailable.sender.log", "status=deferred");
    EXPECT_EQ(transport.process, "error");
    EXPECT_EQ(transport.reason, "mail transport unavailable");
    ASSERT_TRUE(transport.reply);
    EXPECT_EQ(transport.reply->local, LocalFailure::transport_unavailable);

    Event lost = find_line("33-fake-drop-lost-connection.sender.log", "lost connection");
    EXPECT_EQ(lost.dsn, "4.4.2");
    EXPECT_EQ(
        lost.reason,
        "lost connection with 127.0.0.1[127.0.0.1] while sending end of data -- message may be sent more "
        "than once");
}

}  // namespace
}  // namespace retryguard
