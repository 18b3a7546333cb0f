// Log parser on line shapes the lab did not produce: other delivery agents,
// other statuses, smtpd/cleanup actions, smtp trouble without to=, bounce
// variants, retryguard's own verdict lines, header formats and process names.
#include <gtest/gtest.h>

#include <string>

#include "retryguard/follow/follower.hpp"
#include "retryguard/log/log_parser.hpp"

namespace retryguard {
namespace {

Event parse(const std::string& line) {
    LogParserOptions o;
    o.local_time = false;
    o.reference_time = from_micros(1795996800000000);  // 2026-11-30T00:00:00Z
    LogParser parser(o);
    return parser.parse(line);
}

const std::string kHead = "Nov 29 20:38:50 mx ";

TEST(LogParserFormats, LmtpDeliveryToUnixSocketWithLongQueueId) {
    Event ev = parse(kHead +
                     "postfix/lmtp[1234]: 4QWr3T0bWqz9tLb: to=<bob@example.org>, "
                     "relay=mail.example.org[private/dovecot-lmtp], delay=0.1, delays=0.05/0.01/0.01/0.03, "
                     "dsn=2.0.0, status=sent (250 2.0.0 <bob@example.org> nV3bF0bWqz9tLb Saved)");
    ASSERT_EQ(ev.kind, EventKind::delivery);
    EXPECT_EQ(ev.queue_id, "4QWr3T0bWqz9tLb");
    EXPECT_EQ(ev.process, "lmtp");
    EXPECT_EQ(ev.relay_host, "mail.example.org");
    EXPECT_EQ(ev.relay_addr, "private/dovecot-lmtp");
    EXPECT_EQ(ev.relay_port, 0);
    EXPECT_EQ(ev.status, DeliveryStatus::sent);
    ASSERT_TRUE(ev.reply);
    EXPECT_EQ(ev.reply->code, 250);
}

TEST(LogParserFormats, LocalPipeErrorRetryDiscardAgents) {
    Event local = parse(kHead +
                        "postfix/local[2001]: 3F1A22C0E1: to=<root@mx.example>, orig_to=<root>, relay=local, "
                        "delay=0.02, delays=0.01/0/0/0.01, dsn=2.0.0, status=sent (delivered to mailbox)");
    EXPECT_EQ(local.kind, EventKind::delivery);
    EXPECT_EQ(local.orig_recipient, "root");
    EXPECT_EQ(local.relay, "local");

    Event pipe = parse(kHead +
                       "postfix/pipe[2002]: 3F1A22C0E1: to=<u@example.com>, relay=dovecot, delay=0.1, "
                       "delays=0.05/0/0/0.05, dsn=4.3.0, status=deferred (temporary failure. Command output: "
                       "lda: Error: quota exceeded (mailbox full))");
    EXPECT_EQ(pipe.kind, EventKind::delivery);
    EXPECT_EQ(pipe.relay, "dovecot");
    EXPECT_EQ(pipe.reason, "temporary failure. Command output: lda: Error: quota exceeded (mailbox full)");

    Event error = parse(kHead +
                        "postfix/error[2003]: 3F1A22C0E1: to=<x@example.net>, relay=none, delay=0.01, "
                        "delays=0/0/0/0, dsn=5.0.0, status=bounced (User unknown in virtual alias table)");
    EXPECT_EQ(error.status, DeliveryStatus::bounced);
    EXPECT_EQ(error.dsn, "5.0.0");

    Event retry =
        parse(kHead +
              "postfix/retry[2004]: 3F1A22C0E1: to=<x@example.net>, relay=none, delay=3600, "
              "delays=3600/0/0/0, dsn=4.4.1, status=deferred (delivery temporarily suspended: connect "
              "to mx.example.net[192.0.2.1]:25: Connection timed out)");
    EXPECT_EQ(retry.kind, EventKind::delivery);
    EXPECT_DOUBLE_EQ(retry.delay, 3600);
    EXPECT_EQ(retry.status, DeliveryStatus::deferred);

    Event discard = parse(kHead +
                          "postfix/discard[2005]: 3F1A22C0E1: to=<spam@example.net>, relay=none, delay=0.1, "
                          "delays=0.1/0/0/0, dsn=2.0.0, status=sent (discarded)");
    EXPECT_EQ(discard.kind, EventKind::delivery);
}

TEST(LogParserFormats, ToWithoutBracketsTlsAndUnknownKeys) {
    Event ev =
        parse(kHead +
              "postfix-out/smtp[77]: A1B2C3D4E5: to=user@example.com, relay=mx.example.com[2001:db8::25]:25, "
              "conn_use=3, delay=1.2, delays=0.1/0/0.5/0.6, tls=TLSv1.3, dsn=2.0.0, "
              "status=sent (250 2.0.0 Ok: queued as 4QWr3T0)");
    ASSERT_EQ(ev.kind, EventKind::delivery);
    EXPECT_EQ(ev.program, "postfix-out/smtp");
    EXPECT_EQ(ev.recipient, "user@example.com");
    EXPECT_EQ(ev.relay_addr, "2001:db8::25");
    EXPECT_EQ(ev.relay_port, 25);
    EXPECT_EQ(ev.conn_use, "3");
    EXPECT_EQ(ev.tls, "TLSv1.3");
}

TEST(LogParserFormats, BouncedExpiredUndeliverableStatuses) {
    Event undeliverable =
        parse(kHead +
              "postfix/smtp[9]: 5E6F7A8B9C: to=<probe@example.com>, relay=mx.example.com[192.0.2.7]:25, "
              "delay=1, delays=0/0/0.5/0.5, dsn=5.1.1, status=undeliverable (host mx.example.com[192.0.2.7] "
              "said: 550 5.1.1 unknown user (in reply to RCPT TO command))");
    EXPECT_EQ(undeliverable.status, DeliveryStatus::undeliverable);
    ASSERT_TRUE(undeliverable.reply);
    EXPECT_EQ(undeliverable.reply->code, 550);

    Event expired = parse(kHead +
                          "postfix/smtp[9]: 5E6F7A8B9C: to=<a@example.com>, relay=none, delay=432000, "
                          "delays=432000/0/0/0, dsn=4.4.7, status=expired, returned to sender");
    EXPECT_EQ(expired.kind, EventKind::delivery);
    EXPECT_EQ(expired.status, DeliveryStatus::expired);
    EXPECT_EQ(expired.reason, "returned to sender");

    Event force =
        parse(kHead +
              "postfix/qmgr[5]: 5E6F7A8B9C: from=<a@example.org>, status=force-expired, returned to sender");
    EXPECT_EQ(force.kind, EventKind::expired);
    EXPECT_EQ(force.action, "force-expired");
    EXPECT_EQ(force.sender, "a@example.org");

    Event postsuper = parse(kHead + "postfix/postsuper[6]: 5E6F7A8B9C: expired");
    EXPECT_EQ(postsuper.kind, EventKind::queue_operation);
    EXPECT_EQ(postsuper.action, "expired");
}

TEST(LogParserFormats, SmtpdActionsWithAndWithoutQueueId) {
    Event reject =
        parse(kHead +
              "postfix/submission/smtpd[31]: 4D2B11C0EE: reject: RCPT from unknown[198.51.100.7]: 550 "
              "5.7.1 <spam@example.com>: Recipient address rejected: Access denied; "
              "from=<x@example.net> to=<spam@example.com> proto=ESMTP helo=<bad>");
    ASSERT_EQ(reject.kind, EventKind::smtpd_action);
    EXPECT_EQ(reject.program, "postfix/submission/smtpd");
    EXPECT_EQ(reject.process, "smtpd");
    EXPECT_EQ(reject.queue_id, "4D2B11C0EE");
    EXPECT_EQ(reject.client, "unknown[198.51.100.7]");
    EXPECT_EQ(reject.dsn, "5.7.1");

    struct Case {
        const char* text;
        const char* action;
    };
    for (
        const Case& c : {
            Case{
                "NOQUEUE: discard: RCPT from h.example[192.0.2.1]: <a@b.example>: Recipient address triggers "
                "DISCARD action; from=<s@x.example> to=<a@b.example> proto=ESMTP helo=<h>",
                "discard"},
            Case{"4D2B11C0EE: filter: RCPT from h.example[192.0.2.1]: <s@x.example>: Sender address triggers "
                 "FILTER smtp-amavis:[127.0.0.1]:10024; from=<s@x.example> to=<r@y.example> proto=SMTP "
                 "helo=<h>",
                 "filter"},
            Case{"4D2B11C0EE: redirect: RCPT from h.example[192.0.2.1]: <r@y.example>: Recipient address "
                 "triggers "
                 "REDIRECT quarantine@example.com; from=<s@x.example> to=<r@y.example> proto=ESMTP helo=<h>",
                 "redirect"},
            Case{"NOQUEUE: info: RCPT from h.example[192.0.2.1]: <r@y.example>: Recipient address lab info; "
                 "from=<s@x.example> to=<r@y.example> proto=ESMTP helo=<h>",
                 "info"},
            Case{
                "NOQUEUE: reject_warning: RCPT from h.example[192.0.2.1]: 450 4.7.1 <r@y.example>: "
                "Recipient address rejected: maybe; from=<s@x.example> to=<r@y.example> proto=ESMTP helo=<h>",
                "reject_warning"},
            Case{
                "4D2B11C0EE: hold: RCPT from h.example[192.0.2.1]: <r@y.example>: Recipient address triggers "
                "HOLD action; from=<s@x.example> to=<r@y.example> proto=ESMTP helo=<h>",
                "hold"},
        }) {
        Event ev = parse(kHead + "postfix/smtpd[31]: " + c.text);
        EXPECT_EQ(ev.kind, EventKind::smtpd_action) << c.text;
        EXPECT_EQ(ev.action, c.action) << c.text;
        EXPECT_EQ(ev.stage, "RCPT");
        EXPECT_EQ(ev.client, "h.example[192.0.2.1]");
        EXPECT_EQ(ev.sender, "s@x.example");
        std::string text = c.text;
        std::size_t to = text.find("; from=<s@x.example> to=<");
        ASSERT_NE(to, std::string::npos);
        std::size_t start = to + 25;
        EXPECT_EQ(ev.recipient, text.substr(start, text.find('>', start) - start)) << c.text;
    }
}

TEST(LogParserFormats, PostscreenRejectWithPortAndCommaTail) {
    Event ev =
        parse(kHead +
              "postfix/postscreen[12]: NOQUEUE: reject: RCPT from [198.51.100.9]:40123: 550 5.7.1 Service "
              "unavailable; client [198.51.100.9] blocked using zen.example; from=<s@x.example>, "
              "to=<r@y.example>, proto=ESMTP, helo=<h.example>");
    ASSERT_EQ(ev.kind, EventKind::smtpd_action);
    EXPECT_EQ(ev.client, "[198.51.100.9]:40123");
    EXPECT_EQ(ev.reason, "550 5.7.1 Service unavailable; client [198.51.100.9] blocked using zen.example");
    EXPECT_EQ(ev.sender, "s@x.example");
    EXPECT_EQ(ev.recipient, "r@y.example");
    std::vector<std::pair<std::string, std::string>> tail = {{"proto", "ESMTP"}, {"helo", "h.example"}};
    EXPECT_EQ(ev.fields, tail);
    EXPECT_EQ(ev.dsn, "5.7.1");
}

TEST(LogParserFormats, MilterActionsInSmtpdAndCleanupHeaderChecks) {
    Event hold =
        parse(kHead +
              "postfix/smtpd[31]: 4D2B11C0EE: milter-hold: END-OF-MESSAGE from h.example[192.0.2.1]: "
              "milter triggers HOLD action; from=<s@x.example> to=<r@y.example> proto=ESMTP helo=<h>");
    EXPECT_EQ(hold.kind, EventKind::milter_action);
    EXPECT_EQ(hold.action, "milter-hold");
    EXPECT_EQ(hold.reason, "milter triggers HOLD action");

    Event discard =
        parse(kHead +
              "postfix/smtpd[31]: NOQUEUE: milter-discard: RCPT from h.example[192.0.2.1]: milter "
              "triggers DISCARD action; from=<s@x.example> to=<r@y.example> proto=ESMTP helo=<h>");
    EXPECT_EQ(discard.kind, EventKind::milter_action);

    Event header =
        parse(kHead +
              "postfix/cleanup[40]: 4D2B11C0EE: reject: header Subject: buy now; from me from "
              "h.example[192.0.2.1]; from=<s@x.example> to=<r@y.example> proto=ESMTP helo=<h>: 5.7.1 "
              "message content rejected");
    ASSERT_EQ(header.kind, EventKind::smtpd_action);
    EXPECT_EQ(header.stage, "header");
    EXPECT_EQ(header.client, "h.example[192.0.2.1]");
    EXPECT_EQ(header.sender, "s@x.example");
    EXPECT_EQ(header.recipient, "r@y.example");
    EXPECT_EQ(header.reason, "5.7.1 message content rejected");
    EXPECT_EQ(header.dsn, "5.7.1");

    Event resent = parse(kHead + "postfix/cleanup[40]: 4D2B11C0EE: resent-message-id=<abc@example.org>");
    EXPECT_EQ(resent.kind, EventKind::message_id);
    EXPECT_TRUE(resent.resent);
    EXPECT_EQ(resent.message_id, "<abc@example.org>");

    Event sasl =
        parse(kHead +
              "postfix/submission/smtpd[31]: 4D2B11C0EE: client=h.example[192.0.2.1], sasl_method=PLAIN, "
              "sasl_username=alice");
    EXPECT_EQ(sasl.kind, EventKind::smtpd_client);
    EXPECT_EQ(sasl.client, "h.example[192.0.2.1]");
    ASSERT_EQ(sasl.fields.size(), 2u);
    EXPECT_EQ(sasl.fields[1].second, "alice");
}

TEST(LogParserFormats, BounceNotificationVariants) {
    Event success =
        parse(kHead + "postfix/bounce[7]: 4D2B11C0EE: sender delivery status notification: 5A6B7C8D9E");
    EXPECT_EQ(success.kind, EventKind::notification);
    EXPECT_EQ(success.action, "success");
    EXPECT_EQ(success.new_queue_id, "5A6B7C8D9E");
    Event postmaster =
        parse(kHead + "postfix/bounce[7]: 4D2B11C0EE: postmaster non-delivery notification: 5A6B7C8D9F");
    EXPECT_EQ(postmaster.action, "non-delivery");
    EXPECT_EQ(postmaster.fields.at(0).second, "postmaster");
    EXPECT_EQ(
        parse(kHead + "postfix/bounce[7]: 4D2B11C0EE: sender non-delivery notification: not a qid").kind,
        EventKind::unknown);
}

TEST(LogParserFormats, SmtpTroubleWithoutToIsAttachedToTheServer) {
    struct Case {
        const char* text;
        const char* action;
        const char* host;
        const char* addr;
        int port;
        const char* qid;
    };
    for (const Case& c : {
             Case{"connect to mx.example.com[2001:db8::25]:25: Network is unreachable", "connect",
                  "mx.example.com", "2001:db8::25", 25, ""},
             Case{"4D2B11C0EE: host mx.example.com[203.0.113.5] said: 421 4.7.0 Try again later (in reply to "
                  "MAIL "
                  "FROM command)",
                  "said", "mx.example.com", "203.0.113.5", 0, "4D2B11C0EE"},
             Case{"4D2B11C0EE: host mx.example.com[203.0.113.5] refused to talk to me: 554 5.7.1 Service "
                  "unavailable",
                  "refused", "mx.example.com", "203.0.113.5", 0, "4D2B11C0EE"},
             Case{"4D2B11C0EE: lost connection with mx.example.com[203.0.113.5] while receiving the initial "
                  "server "
                  "greeting",
                  "lost-connection", "mx.example.com", "203.0.113.5", 0, "4D2B11C0EE"},
             Case{"4D2B11C0EE: conversation with mx.example.com[203.0.113.5] timed out while sending end of "
                  "data -- "
                  "message may be sent more than once",
                  "timeout", "mx.example.com", "203.0.113.5", 0, "4D2B11C0EE"},
             Case{"SSL_connect error to mx.example.com[203.0.113.5]:25: lost connection", "tls",
                  "mx.example.com", "203.0.113.5", 25, ""},
             Case{"server certificate verification failed for mx.example.com[203.0.113.5]:25: "
                  "num=10:certificate "
                  "has expired",
                  "tls", "mx.example.com", "203.0.113.5", 25, ""},
             Case{"4D2B11C0EE: TLS is required, but was not offered by host mx.example.com[203.0.113.5]",
                  "tls", "mx.example.com", "203.0.113.5", 0, "4D2B11C0EE"},
         }) {
        Event ev = parse(kHead + "postfix/smtp[99]: " + c.text);
        ASSERT_EQ(ev.kind, EventKind::connection_problem) << c.text;
        EXPECT_EQ(ev.action, c.action) << c.text;
        EXPECT_EQ(ev.relay_host, c.host) << c.text;
        EXPECT_EQ(ev.relay_addr, c.addr) << c.text;
        EXPECT_EQ(ev.relay_port, c.port) << c.text;
        EXPECT_EQ(ev.queue_id, c.qid) << c.text;
        EXPECT_TRUE(ev.reply.has_value());
    }
    Event said = parse(kHead +
                       "postfix/smtp[99]: 4D2B11C0EE: host mx.example.com[203.0.113.5] said: 421 4.7.0 Try "
                       "again later (in reply to MAIL FROM command)");
    EXPECT_EQ(said.reply->code, 421);
    EXPECT_EQ(said.reply->stage, SmtpStage::mail_from);
    Event tls_ok =
        parse(kHead +
              "postfix/smtp[99]: Untrusted TLS connection established to mx.example.com[203.0.113.5]:25: "
              "TLSv1.3 with cipher TLS_AES_256_GCM_SHA384 (256/256 bits)");
    EXPECT_EQ(tls_ok.unknown_kind, "tls-established");
}

TEST(LogParserFormats, RetryguardVerdictLines) {
    Event ev = parse(kHead +
                     "retryguard-milter[4242]: 3F1A22C0E1: verdict=reinjection action=reject recipients=2 "
                     "reply=\"451 4.7.1 already queued as \\\"ABC\\\"\" note=x=y");
    ASSERT_EQ(ev.kind, EventKind::verdict);
    EXPECT_EQ(ev.queue_id, "3F1A22C0E1");
    EXPECT_EQ(ev.action, "reinjection");
    std::vector<std::pair<std::string, std::string>> want = {{"verdict", "reinjection"},
                                                             {"action", "reject"},
                                                             {"recipients", "2"},
                                                             {"reply", "451 4.7.1 already queued as \"ABC\""},
                                                             {"note", "x=y"}};
    EXPECT_EQ(ev.fields, want);

    Event dest = parse(kHead +
                       "retryguard[77]: example.org: verdict=escalate category=receiver-config "
                       "first=2026-11-28T10:00:00Z");
    ASSERT_EQ(dest.kind, EventKind::verdict);
    EXPECT_EQ(dest.queue_id, "");
    EXPECT_EQ(dest.destination, "example.org");
    EXPECT_EQ(dest.fields.at(2).second, "2026-11-28T10:00:00Z");

    Event open_quote = parse(kHead + "retryguard[77]: NOQUEUE: verdict=watch text=\"never closed");
    EXPECT_EQ(open_quote.kind, EventKind::verdict);
    EXPECT_EQ(open_quote.fields.at(1).second, "never closed");

    EXPECT_EQ(parse(kHead + "retryguard[77]: starting, version 0.1.0").unknown_kind, "retryguard-other");
}

TEST(LogParserFormats, ProcessNamesAndSyslogNames) {
    const std::string rest = "[5]: 3F1A22C0E1: removed";
    for (const char* program :
         {"postfix/qmgr", "postfix-out/qmgr", "postfix.mail-out.example/qmgr", "mta/qmgr"}) {
        Event ev = parse(kHead + program + rest);
        EXPECT_EQ(ev.kind, EventKind::queue_removed) << program;
        EXPECT_EQ(ev.program, program);
        EXPECT_EQ(ev.process, "qmgr");
    }
    EXPECT_EQ(parse(kHead + "sshd[5]: 3F1A22C0E1: removed").unknown_kind, "not-postfix");
    EXPECT_EQ(parse(kHead + "dovecot/imap[5]: 3F1A22C0E1: removed").unknown_kind, "not-postfix");
}

TEST(LogParserFormats, HeaderVariants) {
    const std::string msg = "postfix/qmgr[5]: 3F1A22C0E1: removed";
    // RFC 3339 as Debian 12's rsyslog writes it.
    Event rsyslog = parse("2026-11-29T20:38:50.123456+01:00 mx " + msg);
    ASSERT_EQ(rsyslog.kind, EventKind::queue_removed);
    EXPECT_EQ(format_rfc3339(rsyslog.time), "2026-11-29T19:38:50.123456Z");
    EXPECT_EQ(rsyslog.host, "mx");
    // A local syslog(3) datagram: priority, no host.
    Event datagram = parse("<22>Nov 29 20:38:50 " + msg);
    ASSERT_EQ(datagram.kind, EventKind::queue_removed);
    EXPECT_EQ(datagram.host, "");
    EXPECT_EQ(datagram.pid, 5);
    EXPECT_EQ(format_rfc3339(datagram.time), "2026-11-29T20:38:50Z");
    // Single-digit day padded with a space.
    Event padded = parse("Dec  1 01:02:03 mx " + msg);
    EXPECT_EQ(format_rfc3339(padded.time), "2025-12-01T01:02:03Z");
    // ... or with a zero, as Postfix's maillog_file (and the daemons' postlog lines) write it.
    Event zero = parse("Dec 01 01:02:03 mx " + msg);
    ASSERT_EQ(zero.kind, EventKind::queue_removed);
    EXPECT_EQ(format_rfc3339(zero.time), "2025-12-01T01:02:03Z");
    // RFC 5424 from a forwarding daemon.
    Event rfc5424 =
        parse("<22>1 2026-11-29T20:38:50.5Z mx postfix/qmgr 5 - [meta x=\"]\"] 3F1A22C0E1: removed");
    ASSERT_EQ(rfc5424.kind, EventKind::queue_removed);
    EXPECT_EQ(rfc5424.program, "postfix/qmgr");
    EXPECT_EQ(rfc5424.pid, 5);
    EXPECT_EQ(format_rfc3339(rfc5424.time), "2026-11-29T20:38:50.500000Z");
    // Two spaces between host and tag.
    EXPECT_EQ(parse("Nov 29 20:38:50 mx  " + msg).kind, EventKind::queue_removed);
    // Tag without a pid.
    Event nopid = parse("Nov 29 20:38:50 mx postfix/postsuper: 3F1A22C0E1: removed");
    EXPECT_EQ(nopid.kind, EventKind::queue_removed);
    EXPECT_EQ(nopid.pid, 0);
}

// A header as received on a socket is read by the log parser as the datagram
// reader (core/follow) reads it: the same priority shapes, structured data
// (escapes inside quoted values, "]" quoted) and byte-order mark.
TEST(LogParserFormats, SyslogHeaderIsReadAsTheDatagramReaderReadsIt) {
    const std::string datagram =
        "<22>1 2026-11-29T20:38:50Z mx postfix/qmgr 5 - [a x=\"q\\\"]\\\\\"][b@1 y=\"]\"] "
        "\xEF\xBB\xBF"
        "3F1A22C0E1: removed";
    Event direct = parse(datagram);
    ASSERT_EQ(direct.kind, EventKind::queue_removed) << direct.unknown_kind;
    EXPECT_EQ(direct.text, "3F1A22C0E1: removed");
    auto line = syslog_datagram_to_line(datagram, "fallback", 65536);
    ASSERT_TRUE(line.ok()) << line.error().message;
    EXPECT_EQ(line->facility, 2);
    EXPECT_EQ(line->severity, 6);
    Event via = parse(line->line);
    ASSERT_EQ(via.kind, EventKind::queue_removed) << line->line;
    EXPECT_EQ(via.text, direct.text);
    EXPECT_EQ(via.host, direct.host);
    EXPECT_EQ(via.program, direct.program);
    EXPECT_EQ(via.pid, direct.pid);
    EXPECT_EQ(via.time, direct.time);
    // A priority is one to three digits in angle brackets; both refuse the rest.
    for (const std::string bad : {"<>1 2026-11-29T20:38:50Z mx postfix/qmgr 5 - - 3F1A22C0E1: removed",
                                  "<1234>1 2026-11-29T20:38:50Z mx postfix/qmgr 5 - - 3F1A22C0E1: removed",
                                  "<2x>Nov 29 20:38:50 mx postfix/qmgr[5]: 3F1A22C0E1: removed"}) {
        Event ev = parse(bad);
        EXPECT_EQ(ev.kind, EventKind::unknown) << bad;
        EXPECT_EQ(ev.unknown_kind, "not-syslog") << bad;
        EXPECT_FALSE(syslog_datagram_to_line(bad, "fallback", 65536).ok()) << bad;
    }
}

TEST(LogParserFormats, JournaldRecordsSkipTheHeader) {
    LogParserOptions o;
    o.local_time = false;
    LogParser parser(o);
    LogRecord r;
    r.time = from_micros(1795985297000000);
    r.host = "mx";
    r.identifier = "postfix/submission/smtpd";
    r.pid = 42;
    r.message = "3F1A22C0E1: client=h.example[192.0.2.1]";
    Event ev;
    EXPECT_TRUE(parser.parse_record(r, ev));
    EXPECT_EQ(ev.kind, EventKind::smtpd_client);
    EXPECT_EQ(ev.time, r.time);
    EXPECT_EQ(ev.process, "smtpd");
    EXPECT_EQ(ev.pid, 42);
}

TEST(LogParserFormats, EventObjectIsFullyResetBetweenLines) {
    LogParser parser;
    Event ev;
    parser.parse(kHead +
                     "postfix/smtp[1]: 3F1A22C0E1: to=<a@b.example>, relay=none, delay=1, delays=1/0/0/0, "
                     "dsn=4.4.1, status=deferred (connect to x[192.0.2.1]:25: Connection refused)",
                 ev);
    EXPECT_EQ(ev.kind, EventKind::delivery);
    parser.parse(kHead + "postfix/qmgr[2]: 3F1A22C0E1: removed", ev);
    EXPECT_EQ(ev.kind, EventKind::queue_removed);
    EXPECT_TRUE(ev.recipient.empty());
    EXPECT_TRUE(ev.reason.empty());
    EXPECT_FALSE(ev.reply.has_value());
    EXPECT_EQ(ev.status, DeliveryStatus::none);
    EXPECT_EQ(ev.delay, 0);
}

}  // namespace
}  // namespace retryguard
