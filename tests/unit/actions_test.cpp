// actions_test.cpp -- the "do not resend" notice and the recovery flush
// (core/actions/): who gets a notice and when, what it says and how outside
// text is carried into it, which queue ids a recovery flushes and how often,
// probes of escalated destinations, the command runner and the config keys.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "classify_util.hpp"
#include "retryguard/actions/actions.hpp"
#include "retryguard/config/config_engine.hpp"
#include "retryguard/ingest/ingest.hpp"
#include "retryguard/log/log_parser.hpp"

namespace retryguard::actions {
namespace {

namespace cfg = retryguard::config;
namespace fs = std::filesystem;

std::shared_ptr<const cfg::Config> config_with(std::vector<std::string> overrides, std::string yaml = "") {
    auto out = cfg::load_string(yaml, "<test>", overrides);
    if (!out.ok()) {
        for (const auto& e : out.errors) ADD_FAILURE() << e.to_string();
        return cfg::defaults();
    }
    return out.config;
}

// Log lines through the parser, the classifier, the engine and the planner,
// as the Ingestor's observer feeds them.
struct Rig {
    std::shared_ptr<const cfg::Config> config;
    Engine engine;
    Planner planner;
    LogParser parser;
    std::vector<Verdict> verdicts;

    explicit Rig(std::shared_ptr<const cfg::Config> c, Planner::FirstDeferral first = {})
        : config(c), engine(cfg::to_engine_settings(c)), planner(c, std::move(first)), parser([] {
              LogParserOptions o;
              o.year = 2026;
              o.local_time = false;
              return o;
          }()) {}

    void line(const std::string& l) {
        Event e;
        ASSERT_TRUE(parser.parse(l, e)) << l;
        const Category c = classify_event(test::shipped_classifier(), e);
        auto v = engine.on_event(e, c);
        planner.observe(&e, c, e.time, v, engine, false);
        verdicts.insert(verdicts.end(), v.begin(), v.end());
    }
    void tick(TimePoint t) {
        auto v = engine.advance(t);
        planner.observe(nullptr, Category::unknown, t, v, engine, false);
    }
};

std::string pickup(const std::string& time, const std::string& qid, const std::string& from) {
    return "Dec  1 " + time + " sender postfix/pickup[100]: " + qid + ": uid=1000 from=<" + from + ">";
}
std::string smtpd(const std::string& time, const std::string& qid, const std::string& extra) {
    return "Dec  1 " + time + " sender postfix/smtpd[101]: " + qid + ": client=client.example[192.0.2.9]" +
           extra;
}
std::string active(const std::string& time, const std::string& qid, const std::string& from) {
    return "Dec  1 " + time + " sender postfix/qmgr[102]: " + qid + ": from=<" + from +
           ">, size=400, nrcpt=1 (queue active)";
}
std::string deferred(const std::string& time, const std::string& qid, const std::string& to,
                     const std::string& reply = "451 4.3.5 System config error") {
    return "Dec  1 " + time + " sender postfix/smtp[103]: " + qid + ": to=<" + to +
           ">, relay=mx.defer.example[192.0.2.1]:25, delay=1, delays=0/0/0/1, dsn=" + reply.substr(4, 5) +
           ", status=deferred (host mx.defer.example[192.0.2.1] said: " + reply +
           " (in reply to RCPT TO command))";
}
std::string sent(const std::string& time, const std::string& qid, const std::string& to) {
    return "Dec  1 " + time + " sender postfix/smtp[103]: " + qid + ": to=<" + to +
           ">, relay=mx.defer.example[192.0.2.1]:25, delay=1, delays=0/0/0/1, dsn=2.0.0, status=sent (250 "
           "2.0.0 "
           "Ok: queued as 1234)";
}
std::string removed(const std::string& time, const std::string& qid) {
    return "Dec  1 " + time + " sender postfix/qmgr[102]: " + qid + ": removed";
}

std::shared_ptr<const cfg::Config> notify_on() {
    return config_with({"notify.enabled=true"});
}

TEST(ActionsNotice, FirstDeferralOfALocallySubmittedMessageGetsOneNotice) {
    Rig r(notify_on());
    r.line(pickup("10:00:00", "AAA0000001", "alice@sender.example"));
    r.line(active("10:00:00", "AAA0000001", "alice@sender.example"));
    r.line(deferred("10:00:01", "AAA0000001", "bob@defer.example"));
    r.line(deferred("10:00:01", "AAA0000001", "carol@defer.example"));
    auto notices = r.planner.take_notices();
    ASSERT_EQ(notices.size(), 1u);
    const Notice& n = notices[0];
    EXPECT_EQ(n.queue_id, "AAA0000001");
    EXPECT_EQ(n.sender, "alice@sender.example");
    EXPECT_EQ(n.destination, "defer.example");
    EXPECT_EQ(n.category, Category::receiver_config);
    EXPECT_EQ(n.recipients, (std::vector<std::string>{"bob@defer.example", "carol@defer.example"}));
    EXPECT_NE(n.reply.find("451 4.3.5 System config error"), std::string::npos) << n.reply;
    // Expiry: arrival plus postfix.maximal_queue_lifetime (5d); escalation: the
    // episode's start plus receiver_config's escalate_after (24h).
    EXPECT_EQ(format_rfc3339(n.expiry), "2026-12-06T10:00:00Z");
    ASSERT_TRUE(n.escalation);
    EXPECT_EQ(format_rfc3339(*n.escalation), "2026-12-02T10:00:01Z");

    // The next deferral of the same message: nothing more.
    r.line(active("10:05:00", "AAA0000001", "alice@sender.example"));
    r.line(deferred("10:05:01", "AAA0000001", "bob@defer.example"));
    EXPECT_TRUE(r.planner.take_notices().empty());
    EXPECT_EQ(r.planner.stats().notices_skipped.at("already_notified"), 1u);
}

TEST(ActionsNotice, SaslSubmitterIsNotifiedRemoteClientNullSenderAndRobotsAreNot) {
    Rig r(notify_on());
    r.line(smtpd("10:00:00", "BBB0000001", ", sasl_method=PLAIN, sasl_username=alice"));
    r.line(active("10:00:00", "BBB0000001", "alice@sender.example"));
    r.line(deferred("10:00:01", "BBB0000001", "bob@defer.example"));
    auto n = r.planner.take_notices();
    ASSERT_EQ(n.size(), 1u);
    EXPECT_EQ(n[0].sender, "alice@sender.example");

    r.line(smtpd("10:01:00", "BBB0000002", ""));  // relayed for a client in mynetworks: no login
    r.line(active("10:01:00", "BBB0000002", "dave@elsewhere.example"));
    r.line(deferred("10:01:01", "BBB0000002", "bob@other.example"));
    r.line(pickup("10:02:00", "BBB0000003", ""));  // the null sender (a bounce, a notice)
    r.line(active("10:02:00", "BBB0000003", ""));
    r.line(deferred("10:02:01", "BBB0000003", "bob@third.example"));
    r.line(pickup("10:03:00", "BBB0000004", "owner-list@sender.example"));
    r.line(active("10:03:00", "BBB0000004", "owner-list@sender.example"));
    r.line(deferred("10:03:01", "BBB0000004", "bob@fourth.example"));
    r.line(active("10:04:00", "BBB0000005", "eve@sender.example"));  // nothing tells where it came from
    r.line(deferred("10:04:01", "BBB0000005", "bob@fifth.example"));
    EXPECT_TRUE(r.planner.take_notices().empty());
    const auto& skipped = r.planner.stats().notices_skipped;
    EXPECT_EQ(skipped.at("remote_client"), 1u);
    EXPECT_EQ(skipped.at("null_sender"), 1u);
    EXPECT_EQ(skipped.at("automated_sender"), 1u);
    EXPECT_EQ(skipped.at("origin_unknown"), 1u);
}

TEST(ActionsNotice, OnlyTheConfiguredCategoriesAndDestinations) {
    // Off by default.
    {
        Rig r(cfg::defaults());
        r.line(pickup("10:00:00", "CCC0000001", "alice@sender.example"));
        r.line(deferred("10:00:01", "CCC0000001", "bob@defer.example"));
        EXPECT_TRUE(r.planner.take_notices().empty());
    }
    // Greylisting is not a problem to wait out in the guidance's sense.
    {
        Rig r(notify_on());
        r.line(pickup("10:00:00", "CCC0000002", "alice@sender.example"));
        r.line(
            deferred("10:00:01", "CCC0000002", "bob@defer.example", "450 4.7.1 Greylisted, try again later"));
        EXPECT_TRUE(r.planner.take_notices().empty());
    }
    // Per destination in YAML: on for one domain only, and one category more.
    {
        Rig r(config_with({},
                          "destinations:\n  - domain: defer.example\n    notify: {enabled: true, categories: "
                          "[receiver_config, greylisting]}\n"));
        r.line(pickup("10:00:00", "CCC0000003", "alice@sender.example"));
        r.line(
            deferred("10:00:01", "CCC0000003", "bob@defer.example", "450 4.7.1 Greylisted, try again later"));
        r.line(pickup("10:00:00", "CCC0000004", "alice@sender.example"));
        r.line(deferred("10:00:01", "CCC0000004", "bob@other.example"));
        auto n = r.planner.take_notices();
        ASSERT_EQ(n.size(), 1u);
        EXPECT_EQ(n[0].queue_id, "CCC0000003");
    }
}

TEST(ActionsNotice, OncePerSenderAndDestinationEpisode) {
    Rig r(notify_on());
    r.line(pickup("10:00:00", "DDD0000001", "alice@sender.example"));
    r.line(deferred("10:00:01", "DDD0000001", "bob@defer.example"));
    r.line(pickup("10:01:00", "DDD0000002", "alice@sender.example"));
    r.line(deferred("10:01:01", "DDD0000002", "carol@defer.example"));
    r.line(pickup("10:02:00", "DDD0000003", "frank@sender.example"));
    r.line(deferred("10:02:01", "DDD0000003", "carol@defer.example"));
    auto n = r.planner.take_notices();
    ASSERT_EQ(n.size(), 2u);
    EXPECT_EQ(n[0].queue_id, "DDD0000001");
    EXPECT_EQ(n[1].queue_id, "DDD0000003");
    EXPECT_EQ(r.planner.stats().notices_skipped.at("episode_notified"), 1u);
    // A new episode (the destination recovered in between) is worth a new notice.
    r.line(sent("11:00:00", "DDD0000009", "zed@defer.example"));
    r.line(pickup("11:01:00", "DDD0000004", "alice@sender.example"));
    r.line(deferred("11:01:01", "DDD0000004", "bob@defer.example"));
    EXPECT_EQ(r.planner.take_notices().size(), 1u);
}

TEST(ActionsNotice, TheLedgerSaysWhetherADeferralIsTheFirst) {
    // After a restart the planner has forgotten what it saw; the ledger has not.
    int asked = 0;
    Rig r(notify_on(), [&](const Event& e) {
        ++asked;
        return e.queue_id != "EEE0000001";
    });
    r.line(pickup("10:00:00", "EEE0000001", "alice@sender.example"));
    r.line(deferred("10:00:01", "EEE0000001", "bob@defer.example"));
    EXPECT_TRUE(r.planner.take_notices().empty());
    EXPECT_EQ(r.planner.stats().notices_skipped.at("not_first_deferral"), 1u);
    r.line(pickup("10:01:00", "EEE0000002", "alice@sender.example"));
    r.line(deferred("10:01:01", "EEE0000002", "bob@other.example"));
    EXPECT_EQ(r.planner.take_notices().size(), 1u);
    EXPECT_EQ(asked, 2);
}

TEST(ActionsNotice, ReplayedRecordsAreRememberedButNeverActedOn) {
    Rig r(notify_on());
    LogParser p([] {
        LogParserOptions o;
        o.year = 2026;
        o.local_time = false;
        return o;
    }());
    for (const auto& l : {pickup("10:00:00", "FFF0000001", "alice@sender.example"),
                          deferred("10:00:01", "FFF0000001", "bob@defer.example")}) {
        Event e;
        ASSERT_TRUE(p.parse(l, e));
        const Category c = classify_event(test::shipped_classifier(), e);
        auto v = r.engine.on_event(e, c);
        r.planner.observe(&e, c, e.time, v, r.engine, true);
    }
    EXPECT_TRUE(r.planner.take_notices().empty());
    // The message was deferred before the restart: its next deferral is not the first.
    r.line(deferred("10:05:01", "FFF0000001", "bob@defer.example"));
    EXPECT_TRUE(r.planner.take_notices().empty());
}

TEST(ActionsNotice, StateKeepsNotifiedMessagesAcrossARestart) {
    Rig a(notify_on());
    a.line(pickup("10:00:00", "ABC0000001", "alice@sender.example"));
    a.line(deferred("10:00:01", "ABC0000001", "bob@defer.example"));
    auto n = a.planner.take_notices();
    ASSERT_EQ(n.size(), 1u);
    a.planner.notice_done(n[0], true);
    const std::string state = a.planner.save_state();
    EXPECT_NE(state.find("ABC0000001"), std::string::npos);

    Rig b(notify_on());
    ASSERT_TRUE(b.planner.load_state(state));
    b.line(pickup("10:00:00", "ABC0000001", "alice@sender.example"));
    b.line(deferred("10:00:01", "ABC0000001", "bob@defer.example"));
    EXPECT_TRUE(b.planner.take_notices().empty());
    EXPECT_FALSE(b.planner.load_state("{not json"));
}

TEST(ActionsRender, TheNoticeQuotesTheReplySafely) {
    Notice n;
    n.queue_id = "ABD0000001";
    n.sender = "alice@sender.example";
    n.destination = "defer.example";
    n.category = Category::receiver_config;
    n.recipients = {"bob@defer.example"};
    n.reply =
        "host mx[192.0.2.1] said: 451 4.3.5 System config error\r\nBcc: victim@evil.example\x01\x1b[31m " +
        std::string(400, 'x') + " \xff end";
    n.time = TimePoint{std::chrono::seconds(1796112001)};
    n.expiry = n.time + std::chrono::hours(120);
    n.escalation = n.time + std::chrono::hours(24);
    const NoticeTemplate t = notice_template_from(*cfg::defaults());
    const std::string msg = render_notice(n, t);
    const auto split = msg.find("\n\n");
    ASSERT_NE(split, std::string::npos);
    const std::string head = msg.substr(0, split + 1), body = msg.substr(split + 2);
    EXPECT_NE(head.find("\nTo: <alice@sender.example>\n"), std::string::npos) << head;
    EXPECT_NE(head.find("\nAuto-Submitted: auto-generated\n"), std::string::npos);
    EXPECT_NE(head.find("\nPrecedence: bulk\n"), std::string::npos);
    EXPECT_NE(head.find("Subject: Delayed, do not resend: your message to defer.example is queued"),
              std::string::npos)
        << head;
    EXPECT_EQ(head.find("Bcc"), std::string::npos);
    // Outside text never starts a line of its own that looks like a header, and carries no control.
    std::istringstream lines(body);
    std::string l;
    bool saw_reply = false, saw_bcc_line = false;
    while (std::getline(lines, l)) {
        EXPECT_LE(l.size(), 78u) << l;
        for (unsigned char c : l) EXPECT_TRUE(c >= 0x20 && c != 0x7f) << l;
        if (l.rfind("Bcc:", 0) == 0) saw_bcc_line = true;
        if (l.find("451 4.3.5 System config error") != std::string::npos) saw_reply = true;
    }
    EXPECT_TRUE(saw_reply) << body;
    EXPECT_FALSE(saw_bcc_line) << body;
    EXPECT_NE(body.find("ABD0000001"), std::string::npos);
    EXPECT_NE(body.find("    bob@defer.example"), std::string::npos);
    EXPECT_NE(body.find("until 2026-12-06 "), std::string::npos) << body;
    EXPECT_NE(body.find("postmaster"), std::string::npos);
    EXPECT_NE(body.find("do not send it again"), std::string::npos);
    EXPECT_NE(body.find('?'), std::string::npos);  // the invalid byte
    EXPECT_EQ(body.find('{'), std::string::npos) << "unfilled placeholder: " << body;
}

TEST(ActionsRender, ALocalFailureIsNeverPromisedToARemotePostmaster) {
    Notice n;
    n.queue_id = "ABD0000002";
    n.sender = "alice@sender.example";
    n.destination = "far.example";
    n.recipients = {"bob@far.example"};
    n.reply = "delivery temporarily suspended: Host or domain name not found";
    n.time = TimePoint{std::chrono::seconds(1796112001)};
    n.expiry = n.time + std::chrono::hours(120);
    n.escalation = n.time + std::chrono::hours(4);
    const NoticeTemplate t = notice_template_from(*cfg::defaults());
    auto one_line = [&t](const Notice& notice) {  // the body is wrapped
        std::string s = render_notice(notice, t);
        std::replace(s.begin(), s.end(), '\n', ' ');
        return s;
    };
    for (bool escalated : {false, true}) {
        n.escalated = escalated;
        n.category = Category::local;
        const std::string local = one_line(n);
        EXPECT_EQ(local.find("postmaster"), std::string::npos) << local;
        EXPECT_NE(local.find("this mail server's administrator"), std::string::npos) << local;
        EXPECT_NE(local.find("Our own mail server reported:"), std::string::npos) << local;
        EXPECT_NE(local.find("This is a problem of our own mail server (local)"), std::string::npos) << local;
        EXPECT_EQ(local.find("receiving"), std::string::npos) << local;
        n.category = Category::receiver_system;
        const std::string remote = one_line(n);
        EXPECT_NE(remote.find("the recipient's postmaster"), std::string::npos) << remote;
        EXPECT_NE(remote.find("This is a problem on the receiving side (receiver-system)"), std::string::npos)
            << remote;
    }
}

TEST(ActionsRender, HeaderAddressesAndWrapping) {
    EXPECT_TRUE(safe_header_address("alice@sender.example"));
    EXPECT_TRUE(safe_header_address("alice+tag@sender.example"));
    EXPECT_FALSE(safe_header_address(""));
    EXPECT_FALSE(safe_header_address("alice"));
    EXPECT_FALSE(safe_header_address("@sender.example"));
    EXPECT_FALSE(safe_header_address("alice@"));
    EXPECT_FALSE(safe_header_address("alice@x\r\nBcc: y@z"));
    EXPECT_FALSE(safe_header_address("a b@x"));
    EXPECT_FALSE(safe_header_address("a@x>, <b@y"));
    EXPECT_EQ(mail_text("a\tb\r\nc\x7f\xc2\x85"
                        "d\xe2\x80\xae"
                        "e\xff"),
              "a bcde?");
    EXPECT_EQ(wrap_text("one two three four", 9, "> ", 10), "> one two\n> three\n> four");
    EXPECT_EQ(wrap_text(std::string(30, 'x'), 10, "", 2), "xxxxxxxxxx\nxxxxxxxxxx ...");
}

TEST(ActionsExplain, TheNoticesAndFlushesOfTheExplainedMessages) {
    Planner p(cfg::defaults());
    Notice n;
    n.queue_id = "ABE0000001";
    n.sender = "alice@sender.example";
    n.destination = "defer.example";
    n.recipients = {"bob@defer.example"};
    n.time = TimePoint{std::chrono::seconds(1796112001)};
    p.notice_done(n, true);
    Notice other = n;
    other.queue_id = "ABE0000002";
    p.notice_done(other, true);
    Notice failed = n;
    failed.queue_id = "ABE0000003";
    p.notice_done(failed, false);  // not sent: not shown
    Flush f;
    f.destination = "defer.example";
    f.queue_ids = {"ABE0000002", "ABE0000001"};
    f.time = n.time + std::chrono::hours(1);
    p.flush_done(f, true);
    const nlohmann::json doc = {{"chains", {{{"queue_ids", {"ABE0000001"}}}}}};
    const auto got = actions_for_explain(p.save_state(), doc);
    ASSERT_EQ(got.size(), 2u) << got.dump();
    EXPECT_EQ(got[0]["what"], "notified");
    EXPECT_EQ(got[0]["key"], "ABE0000001");
    EXPECT_EQ(got[0]["detail"],
              "notice to alice@sender.example for 1 recipient(s) at defer.example (unknown)");
    EXPECT_EQ(got[1]["what"], "flushed");
    EXPECT_EQ(got[1]["key"], "defer.example");
    const nlohmann::json none = {{"chains", {{{"queue_ids", {"ABE0000003"}}}}}};
    EXPECT_TRUE(actions_for_explain(p.save_state(), none).empty());
    EXPECT_TRUE(actions_for_explain("not json", doc).empty());
    EXPECT_EQ(p.stats().notices_sent, 2u);
    EXPECT_EQ(p.stats().notice_failures, 1u);
    EXPECT_EQ(p.stats().flushed_messages, 2u);
}

// Flushes -----------------------------------------------------------------

std::shared_ptr<const cfg::Config> watch_fast(std::vector<std::string> more = {}) {
    more.push_back("categories.receiver_config.watch_after_deferrals=2");
    return config_with(more);
}

TEST(ActionsFlush, RecoveryFromWatchFlushesTheEpisodesDeferredMessagesOnce) {
    Rig r(watch_fast());
    r.line(deferred("10:00:01", "ACA0000001", "bob@defer.example"));
    r.line(deferred("10:00:02", "ACA0000002", "carol@defer.example"));
    r.line(deferred("10:00:03", "ACA0000003", "dan@defer.example"));
    r.line(removed("10:00:04", "ACA0000003"));  // deleted by the admin meanwhile
    EXPECT_TRUE(r.planner.take_flushes().empty());
    r.line(sent("10:10:00", "ACA0000009", "zed@defer.example"));
    auto f = r.planner.take_flushes();
    // The domain and its MX host recover on the same delivery: one flush of each message.
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].destination, "defer.example");
    EXPECT_EQ(f[0].queue_ids, (std::vector<std::string>{"ACA0000001", "ACA0000002"}));
    EXPECT_FALSE(f[0].probe);
    const Verdict v = flushed_verdict(f[0], 2);
    EXPECT_EQ(format_verdict(v),
              "defer.example: verdict=flushed destination=defer.example type=domain count=2");

    // Deferred again and recovered again within flush.min_interval (10m): rate limited.
    r.line(deferred("10:12:01", "ACA0000004", "bob@defer.example"));
    r.line(deferred("10:12:02", "ACA0000005", "bob@defer.example"));
    r.line(sent("10:13:00", "ACA0000010", "zed@defer.example"));
    EXPECT_TRUE(r.planner.take_flushes().empty());
    EXPECT_GE(r.planner.stats().flushes_rate_limited, 1u);
    // After the interval, the next recovery flushes again.
    r.line(deferred("10:30:01", "ACA0000006", "bob@defer.example"));
    r.line(deferred("10:30:02", "ACA0000007", "bob@defer.example"));
    r.line(sent("10:31:00", "ACA0000011", "zed@defer.example"));
    f = r.planner.take_flushes();
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].queue_ids, (std::vector<std::string>{"ACA0000006", "ACA0000007"}));
}

TEST(ActionsFlush, ABlipOrADisabledFlushDoesNothing) {
    {
        Rig r(cfg::defaults());  // watch after 3 deferrals: one deferral stays `noted`
        r.line(deferred("10:00:01", "ACB0000001", "bob@defer.example"));
        r.line(sent("10:10:00", "ACB0000009", "zed@defer.example"));
        EXPECT_TRUE(r.planner.take_flushes().empty());
    }
    {
        Rig r(watch_fast({"flush.enabled=false"}));
        r.line(deferred("10:00:01", "ACB0000001", "bob@defer.example"));
        r.line(deferred("10:00:02", "ACB0000002", "bob@defer.example"));
        r.line(sent("10:10:00", "ACB0000009", "zed@defer.example"));
        EXPECT_TRUE(r.planner.take_flushes().empty());
    }
}

TEST(ActionsFlush, MaxMessagesCapsOneFlush) {
    Rig r(watch_fast({"flush.max_messages=1"}));
    r.line(deferred("10:00:01", "ACC0000001", "bob@defer.example"));
    r.line(deferred("10:00:02", "ACC0000002", "bob@defer.example"));
    r.line(sent("10:10:00", "ACC0000009", "zed@defer.example"));
    auto f = r.planner.take_flushes();
    // The domain's flush takes one; its MX host's (recovered by the same
    // delivery) may take the other, never one flushed already.
    ASSERT_FALSE(f.empty());
    EXPECT_EQ(f[0].destination, "defer.example");
    std::set<std::string> all;
    for (const auto& one : f) {
        EXPECT_EQ(one.queue_ids.size(), 1u) << one.destination;
        for (const auto& q : one.queue_ids) EXPECT_TRUE(all.insert(q).second) << q;
    }
}

TEST(ActionsFlush, AnEscalatedDestinationIsProbedNoMoreOftenThanTheInterval) {
    Rig r(config_with({"flush.probe=true", "categories.receiver_config.escalate_after=1h"}));
    r.line(deferred("10:00:01", "ACD0000001", "bob@defer.example"));
    r.line(deferred("10:00:02", "ACD0000002", "bob@defer.example"));
    const TimePoint t0 = r.verdicts.front().time;
    r.tick(t0 + std::chrono::minutes(61));  // escalates
    EXPECT_TRUE(r.planner.take_flushes().empty());
    r.tick(t0 + std::chrono::minutes(80));  // 19 minutes after the escalation: too early
    EXPECT_TRUE(r.planner.take_flushes().empty());
    r.tick(t0 + std::chrono::minutes(92));  // 31 minutes after it
    auto f = r.planner.take_flushes();
    ASSERT_EQ(f.size(), 2u);  // the domain and its MX host, one message each
    EXPECT_TRUE(f[0].probe);
    EXPECT_EQ(f[0].queue_ids.size(), 1u);
    r.tick(t0 + std::chrono::minutes(110));
    EXPECT_TRUE(r.planner.take_flushes().empty());
    r.tick(t0 + std::chrono::minutes(123));
    EXPECT_EQ(r.planner.take_flushes().size(), 2u);
    // The probe interval cannot be set below 30 minutes.
    EXPECT_FALSE(cfg::load_string("", "<test>", {"flush.probe_interval=10m"}).ok());
}

// The runner -------------------------------------------------------------

TEST(ActionsRunner, CommandLinesAndFailuresReportedOncePerChange) {
    std::vector<std::vector<std::string>> calls;
    std::vector<std::string> inputs;
    Status next;
    std::vector<std::string> logged;
    RunnerSettings s;
    s.config_directory = "/etc/postfix-out";
    s.pause_after_failure = std::chrono::milliseconds(0);
    ActionRunner runner(
        s, [&](bool error, std::string_view m) { logged.push_back((error ? "E " : "I ") + std::string(m)); },
        [&](const std::vector<std::string>& argv, std::string_view input, std::chrono::milliseconds) {
            calls.push_back(argv);
            inputs.emplace_back(input);
            return next;
        });
    EXPECT_EQ(runner.sendmail_argv(), (std::vector<std::string>{"/usr/sbin/sendmail", "-C",
                                                                "/etc/postfix-out", "-f", "", "-t", "-i"}));
    EXPECT_EQ(runner.postqueue_argv("ABC123"),
              (std::vector<std::string>{"/usr/sbin/postqueue", "-c", "/etc/postfix-out", "-i", "ABC123"}));
    Notice n;
    n.queue_id = "ACE0000001";
    n.sender = "alice@sender.example";
    n.recipients = {"bob@defer.example"};
    ASSERT_TRUE(runner.send(n, notice_template_from(*cfg::defaults())));
    ASSERT_EQ(inputs.size(), 1u);
    EXPECT_NE(inputs[0].find("To: <alice@sender.example>"), std::string::npos);
    next = make_error(ErrorKind::unavailable, "cannot run /usr/sbin/sendmail: No such file or directory");
    EXPECT_FALSE(runner.send(n, notice_template_from(*cfg::defaults())));
    EXPECT_FALSE(runner.send(n, notice_template_from(*cfg::defaults())));
    next = Status{};
    EXPECT_TRUE(runner.send(n, notice_template_from(*cfg::defaults())));
    ASSERT_EQ(logged.size(), 2u);
    EXPECT_EQ(logged[0].rfind("E sendmail failed: cannot run /usr/sbin/sendmail", 0), 0u) << logged[0];
    EXPECT_EQ(logged[1], "I sendmail works again");
    // A sender not fit for a header is never handed to sendmail.
    n.sender = "x@y\nBcc: z@w";
    EXPECT_FALSE(runner.send(n, notice_template_from(*cfg::defaults())));
    EXPECT_EQ(calls.size(), 4u);

    Flush f;
    f.destination = "defer.example";
    f.queue_ids = {"ABC123", "-rf", "DEF456"};  // not a queue id: never an argument
    EXPECT_EQ(runner.flush(f), 2u);
    EXPECT_EQ(calls.size(), 6u);
    EXPECT_EQ(calls.back().back(), "DEF456");
    // A failing postqueue ends the flush at once: the rest are not tried.
    next = make_error(ErrorKind::timeout, "/usr/sbin/postqueue did not finish within 10000 ms");
    f.queue_ids = {"ABC123", "DEF456", "ABC789"};
    EXPECT_EQ(runner.flush(f), 0u);
    EXPECT_EQ(calls.size(), 7u);
}

TEST(ActionsRunner, AFailedCommandIsPausedSoAHungSendmailCannotStallTheFollower) {
    int calls = 0;
    Status next = make_error(ErrorKind::timeout, "/usr/sbin/sendmail did not finish within 10000 ms");
    RunnerSettings s;
    s.pause_after_failure = std::chrono::hours(1);
    ActionRunner runner(s, {},
                        [&](const std::vector<std::string>&, std::string_view, std::chrono::milliseconds) {
                            ++calls;
                            return next;
                        });
    Notice n;
    n.sender = "alice@sender.example";
    const auto t = notice_template_from(*cfg::defaults());
    EXPECT_FALSE(runner.send(n, t));
    next = Status{};
    auto second = runner.send(n, t);
    ASSERT_FALSE(second);
    EXPECT_NE(second.error().message.find("failed recently"), std::string::npos) << second.error().message;
    EXPECT_EQ(calls, 1);
    // postqueue has its own state: it still runs.
    Flush f;
    f.queue_ids = {"ABC123"};
    EXPECT_EQ(runner.flush(f), 1u);
    EXPECT_EQ(calls, 2);
}

TEST(ActionsRunner, RunsARealCommandWithInputAndReportsHowItEnded) {
    const fs::path dir = fs::temp_directory_path() / ("rg-actions-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string out = (dir / "in.txt").string();
    ASSERT_TRUE(run_command({"/bin/sh", "-c", "cat > \"$0\"", out}, "To: <a@b>\n\nbody\n",
                            std::chrono::milliseconds(10000)));
    std::ifstream in(out);
    std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(got, "To: <a@b>\n\nbody\n");

    auto failed = run_command({"/bin/sh", "-c", "echo 'postdrop: fatal: no queue' >&2; exit 75"}, "x",
                              std::chrono::milliseconds(10000));
    ASSERT_FALSE(failed);
    EXPECT_EQ(failed.error().message, "/bin/sh exited with status 75: postdrop: fatal: no queue");
    // A child that reads nothing and exits: no SIGPIPE reaches the caller.
    auto closed = run_command({"/bin/sh", "-c", "exec 0<&-; exit 0"}, std::string(1 << 20, 'x'),
                              std::chrono::milliseconds(10000));
    EXPECT_TRUE(closed) << closed.error().message;
    auto missing = run_command({(dir / "no-such-sendmail").string()}, "", std::chrono::milliseconds(1000));
    ASSERT_FALSE(missing);
    EXPECT_NE(missing.error().message.find("No such file"), std::string::npos) << missing.error().message;
    auto relative = run_command({"sendmail"}, "", std::chrono::milliseconds(1000));
    EXPECT_FALSE(relative);
    auto hung = run_command({"/bin/sleep", "30"}, "", std::chrono::milliseconds(200));
    ASSERT_FALSE(hung);
    EXPECT_EQ(hung.error().kind, ErrorKind::timeout);
    fs::remove_all(dir);
}

// The configuration keys reach the planner and the runner.
TEST(ActionsConfig, KeysReachThePlannerAndTheRunner) {
    const auto d = cfg::defaults();
    EXPECT_FALSE(d->global.notify.enabled);
    EXPECT_TRUE(d->global.flush.enabled);
    const RunnerSettings base = runner_settings_from(*d);
    EXPECT_EQ(base.sendmail_path, "/usr/sbin/sendmail");
    EXPECT_EQ(base.postqueue_path, "/usr/sbin/postqueue");
    EXPECT_EQ(base.config_directory, "");
    const auto c =
        config_with({"postfix.sendmail_path=/opt/pf/sendmail", "postfix.postqueue_path=/opt/pf/postqueue",
                     "postfix.config_directory=/etc/postfix-out", "postfix.command_timeout=3s"});
    const RunnerSettings rs = runner_settings_from(*c);
    EXPECT_EQ(rs.sendmail_path, "/opt/pf/sendmail");
    EXPECT_EQ(rs.postqueue_path, "/opt/pf/postqueue");
    EXPECT_EQ(rs.config_directory, "/etc/postfix-out");
    EXPECT_EQ(rs.timeout, std::chrono::milliseconds(3000));

    // Text keys reach the rendered notice; unknown placeholders are refused.
    const auto t = notice_template_from(
        *config_with({"notify.from=Postmaster <postmaster>", "notify.subject=Queued: {queue_id}",
                      "notify.template=Held {queue_id} for {destination}, until {expiry}. {sender}"}));
    Notice n;
    n.queue_id = "ACF0000001";
    n.sender = "alice@sender.example";
    n.destination = "defer.example";
    n.expiry = TimePoint{std::chrono::seconds(1796112000)};
    const std::string msg = render_notice(n, t);
    EXPECT_NE(msg.find("From: Postmaster <postmaster>\n"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Subject: Queued: ACF0000001\n"), std::string::npos) << msg;
    EXPECT_NE(msg.find("\n\nHeld ACF0000001 for defer.example, until 2026-12-01 "), std::string::npos) << msg;
    EXPECT_FALSE(cfg::load_string("", "<test>", {"notify.template=see {queue}"}).ok());
    auto lines = cfg::load_string("notify:\n  template: \"line one\\nline two {queue_id}\"\n");
    ASSERT_TRUE(lines.ok()) << lines.errors[0].to_string();
    EXPECT_EQ(lines.config->notice.body, "line one\nline two {queue_id}");
    EXPECT_FALSE(cfg::load_string("notify:\n  template: \"bell \\a\"\n").ok());

    // Expiry follows postfix.maximal_queue_lifetime.
    Rig r(config_with(
        {"notify.enabled=true", "postfix.maximal_queue_lifetime=2d", "notify.categories=[receiver_system]"}));
    r.line(pickup("10:00:00", "ADA0000001", "alice@sender.example"));
    r.line(deferred("10:00:01", "ADA0000001", "bob@defer.example"));  // receiver_config: not listed now
    r.line(pickup("10:00:00", "ADA0000002", "alice@sender.example"));
    r.line(deferred("10:00:01", "ADA0000002", "bob@sys.example", "451 4.3.0 Temporary system problem"));
    auto notices = r.planner.take_notices();
    ASSERT_EQ(notices.size(), 1u);
    EXPECT_EQ(notices[0].queue_id, "ADA0000002");
    EXPECT_EQ(format_rfc3339(notices[0].expiry), "2026-12-03T10:00:00Z");

    // flush.min_interval: 0 lets every recovery flush.
    Rig f(watch_fast({"flush.min_interval=0s"}));
    for (int round = 0; round < 2; ++round) {
        const std::string m = std::to_string(10 + round);
        f.line(deferred(m + ":00:01", "ADB000000" + std::to_string(2 * round), "bob@defer.example"));
        f.line(deferred(m + ":00:02", "ADB000000" + std::to_string(2 * round + 1), "bob@defer.example"));
        f.line(sent(m + ":01:00", "ADB0000009", "zed@defer.example"));
        EXPECT_EQ(f.planner.take_flushes().size(), 1u) << round;
    }
    // flush.probe_interval: one hour between probes.
    Rig p(config_with(
        {"flush.probe=true", "flush.probe_interval=1h", "categories.receiver_config.escalate_after=1h"}));
    p.line(deferred("10:00:01", "ADC0000001", "bob@defer.example"));
    const TimePoint t0 = p.verdicts.front().time;
    p.tick(t0 + std::chrono::minutes(61));
    p.tick(t0 + std::chrono::minutes(95));
    EXPECT_TRUE(p.planner.take_flushes().empty());
    p.tick(t0 + std::chrono::minutes(122));
    EXPECT_FALSE(p.planner.take_flushes().empty());
}

}  // namespace
}  // namespace retryguard::actions
