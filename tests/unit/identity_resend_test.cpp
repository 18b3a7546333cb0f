// identity_resend_test.cpp -- the resend decision, its reply text and its
// verdict line.
#include <gtest/gtest.h>

#include "retryguard/identity/resend.hpp"

using namespace retryguard;
using namespace std::chrono;

namespace {

PendingCopy pending(std::string rcpt, std::string qid = "3F2A1B0C", bool by_message_id = true) {
    PendingCopy p;
    p.recipient = std::move(rcpt);
    p.queue_id = std::move(qid);
    p.first_queue_id = p.queue_id;
    p.destination = "defer.example";
    p.last_reply = "451 4.3.5 System config error";
    p.arrival = sys_days{2026y / 11 / 29} + 20h + 48min;
    p.first_deferral = *p.arrival;
    p.last_attempt = *p.arrival + 10min;
    p.attempts = 2;
    p.message_state = MessageState::deferred;
    p.matched_by_message_id = by_message_id;
    return p;
}

MessageFacts message(std::vector<std::string> rcpts, SubmissionPath path = SubmissionPath::smtp) {
    MessageFacts m;
    m.queue_id = "9ABCDEF01";
    m.path = path;
    m.message_id = "id-1@client.example";
    m.fingerprint = "0123456789abcdef0123456789abcdef01234567";
    m.sender = "alice@example.org";
    m.recipients = std::move(rcpts);
    return m;
}

ResendRule rule(ResendAction action, std::string header = "X-Retryguard-Resend", std::string text = "",
                bool dry_run = false) {
    ResendRule r;
    r.action = action;
    r.header_name = std::move(header);
    r.reply_template = std::move(text);
    r.dry_run = dry_run;
    return r;
}

}  // namespace

TEST(IdentityResend, NoPendingCopyAccepts) {
    auto d = decide_resend(message({"bob@defer.example"}), {}, ResendPolicy{});
    EXPECT_EQ(d.verdict, "accept");
    EXPECT_EQ(d.result, MilterResult::accept);
    EXPECT_TRUE(d.delete_recipients.empty());
    EXPECT_EQ(d.new_recipients, std::vector<std::string>{"bob@defer.example"});
}

TEST(IdentityResend, AllDuplicatesRejectWithExplanation) {
    auto d = decide_resend(message({"bob@defer.example"}), {pending("bob@defer.example")}, ResendPolicy{});
    EXPECT_EQ(d.verdict, "reject");
    EXPECT_EQ(d.result, MilterResult::reject);
    EXPECT_EQ(d.reply_code, "550");
    EXPECT_EQ(d.reply_xcode, "5.7.1");
    EXPECT_NE(d.reply_text.find("3F2A1B0C"), std::string::npos);
    EXPECT_NE(d.reply_text.find("defer.example"), std::string::npos);
    EXPECT_NE(d.reply_text.find("\"451 4.3.5 System config error\""), std::string::npos);
    EXPECT_NE(d.reply_text.find("since 2026-11-29T20:48:00Z"), std::string::npos);
    // last attempt 20:58 + max(age 10 min, minimal backoff 5 min)
    EXPECT_NE(d.reply_text.find("next retry about 2026-11-29T21:08:00Z"), std::string::npos) << d.reply_text;
}

TEST(IdentityResend, RecipientCaseDoesNotHideADuplicate) {
    auto d = decide_resend(message({"Bob@Defer.Example"}), {pending("bob@defer.example")}, ResendPolicy{});
    EXPECT_EQ(d.verdict, "reject");
}

TEST(IdentityResend, NewRecipientsAreNeverRefused) {
    auto d = decide_resend(message({"bob@defer.example", "carol@ok.example"}), {pending("bob@defer.example")},
                           ResendPolicy{});
    EXPECT_EQ(d.verdict, "drop_duplicates");
    EXPECT_EQ(d.result, MilterResult::accept);
    EXPECT_EQ(d.delete_recipients, std::vector<std::string>{"bob@defer.example"});
    EXPECT_EQ(d.new_recipients, std::vector<std::string>{"carol@ok.example"});
}

TEST(IdentityResend, DropDuplicatesWithoutNewRecipientsDiscards) {
    ResendPolicy p;
    p.action = ResendAction::drop_duplicates;
    auto d = decide_resend(message({"bob@defer.example"}), {pending("bob@defer.example")}, p);
    EXPECT_EQ(d.result, MilterResult::discard);
}

TEST(IdentityResend, HoldQuarantinesNamingTheOriginal) {
    ResendPolicy p;
    p.action = ResendAction::hold;
    auto d = decide_resend(message({"bob@defer.example"}), {pending("bob@defer.example")}, p);
    EXPECT_EQ(d.result, MilterResult::quarantine);
    EXPECT_NE(d.quarantine_reason.find("3F2A1B0C"), std::string::npos);
}

TEST(IdentityResend, TagAddsAHeaderAndAccepts) {
    ResendPolicy p;
    p.action = ResendAction::tag;
    auto d = decide_resend(message({"bob@defer.example"}), {pending("bob@defer.example")}, p);
    EXPECT_EQ(d.result, MilterResult::accept);
    EXPECT_EQ(d.header_name, "X-Retryguard-Resend");
    EXPECT_EQ(d.header_value, "bob@defer.example queued as 3F2A1B0C");
}

TEST(IdentityResend, LogOnlyAccepts) {
    ResendPolicy p;
    p.action = ResendAction::log_only;
    auto d = decide_resend(message({"bob@defer.example"}), {pending("bob@defer.example")}, p);
    EXPECT_EQ(d.verdict, "log_only");
    EXPECT_EQ(d.result, MilterResult::accept);
    EXPECT_TRUE(d.header_name.empty());
}

TEST(IdentityResend, PerDestinationActionAndStrongestWins) {
    ResendPolicy p;
    p.action = ResendAction::log_only;
    p.per_destination.emplace("defer.example", rule(ResendAction::hold));
    p.per_destination.emplace(".corp.example", rule(ResendAction::tag));
    EXPECT_EQ(p.action_for("bob@defer.example"), ResendAction::hold);
    EXPECT_EQ(p.action_for("bob@mx.corp.example"), ResendAction::tag);
    EXPECT_EQ(p.action_for("bob@corp.example"), ResendAction::log_only);
    auto d = decide_resend(message({"bob@defer.example", "eve@mx.corp.example"}),
                           {pending("bob@defer.example"), pending("eve@mx.corp.example")}, p);
    EXPECT_EQ(d.verdict, "hold");
}

// dry_run: the decision is logged with dry_run=yes and the message goes
// through unchanged, whatever the action.
TEST(IdentityResend, DryRunLogsTheDecisionAndChangesNothing) {
    for (auto action :
         {ResendAction::reject, ResendAction::hold, ResendAction::drop_duplicates, ResendAction::tag}) {
        ResendPolicy p;
        p.action = action;
        p.dry_run = true;
        auto m = message({"bob@defer.example"});
        auto d = decide_resend(m, {pending("bob@defer.example")}, p);
        EXPECT_TRUE(d.dry_run);
        EXPECT_EQ(d.verdict, to_string(action));
        EXPECT_EQ(d.result, MilterResult::accept) << to_string(action);
        EXPECT_TRUE(d.delete_recipients.empty());
        EXPECT_TRUE(d.header_name.empty());
        EXPECT_TRUE(d.reply_code.empty());
        const auto line = verdict_line(m, d, p);
        EXPECT_NE(line.find("verdict=" + std::string(to_string(action)) + " "), std::string::npos) << line;
        EXPECT_NE(line.find(" dry_run=yes"), std::string::npos) << line;
        EXPECT_NE(line.find(" original=3F2A1B0C"), std::string::npos) << line;
    }
}

// dry_run on one destination: its duplicates stay in the message like new
// recipients; the other destinations' duplicates get their own action.
TEST(IdentityResend, DryRunDestinationLeavesItsRecipientsIn) {
    ResendPolicy p;
    p.per_destination.emplace("trial.example", rule(ResendAction::reject, "X-Retryguard-Resend", "", true));
    auto m = message({"bob@defer.example", "eve@trial.example"});
    auto d = decide_resend(m, {pending("bob@defer.example"), pending("eve@trial.example")}, p);
    EXPECT_FALSE(d.dry_run);
    EXPECT_EQ(d.verdict, "drop_duplicates") << "reject would refuse eve too";
    EXPECT_EQ(d.result, MilterResult::accept);
    EXPECT_EQ(d.delete_recipients, std::vector<std::string>{"bob@defer.example"});
    EXPECT_EQ(d.dry_run_recipients, std::vector<std::string>{"eve@trial.example"});
    EXPECT_NE(verdict_line(m, d, p).find(" dry_run_duplicates=eve@trial.example"), std::string::npos);

    auto only = decide_resend(message({"eve@trial.example"}), {pending("eve@trial.example")}, p);
    EXPECT_TRUE(only.dry_run);
    EXPECT_EQ(only.verdict, "reject");
    EXPECT_EQ(only.result, MilterResult::accept);
}

// The tag header and the refusal text are those of the rule that chose the action.
TEST(IdentityResend, TheChosenRulesHeaderAndTextAreUsed) {
    ResendPolicy p;
    p.per_destination.emplace("defer.example", rule(ResendAction::tag, "X-Copy"));
    p.per_destination.emplace("texted.example",
                              rule(ResendAction::reject, "X-Retryguard-Resend", "queued: {original}"));
    auto tagged = decide_resend(message({"bob@defer.example"}), {pending("bob@defer.example")}, p);
    EXPECT_EQ(tagged.header_name, "X-Copy");
    auto refused = decide_resend(message({"bob@texted.example"}), {pending("bob@texted.example")}, p);
    EXPECT_EQ(refused.reply_text, "queued: 3F2A1B0C");
    auto global = decide_resend(message({"bob@other.example"}), {pending("bob@other.example")}, p);
    EXPECT_NE(global.reply_text.find("Not accepted again"), std::string::npos) << global.reply_text;
}

TEST(IdentityResend, SendmailPathNeverTempfails) {
    ResendPolicy p;
    p.reject_code = "451";
    p.reject_xcode = "4.7.1";
    auto smtp = decide_resend(message({"bob@defer.example"}), {pending("bob@defer.example")}, p);
    EXPECT_EQ(smtp.reply_code, "451");
    auto local = decide_resend(message({"bob@defer.example"}, SubmissionPath::sendmail),
                               {pending("bob@defer.example")}, p);
    EXPECT_EQ(local.result, MilterResult::reject);
    EXPECT_EQ(local.reply_code[0], '5');
    EXPECT_EQ(local.reply_xcode[0], '5');
}

TEST(IdentityResend, PathFromConnectFacts) {
    EXPECT_EQ(classify_path(true, 0), SubmissionPath::sendmail);  // cleanup's "localhost" 127.0.0.1 port 0
    EXPECT_EQ(classify_path(true, 40312), SubmissionPath::smtp);
    EXPECT_EQ(classify_path(false, 0), SubmissionPath::smtp);  // smtpd on a unix socket / unknown address
}

TEST(IdentityResend, ReplyTextIsPrintableAndBounded) {
    auto p = pending("bob@defer.example");
    p.last_reply = std::string("451 4.3.5 100% \x01broken\r\n") + std::string(2000, 'x');
    auto text = resend_reply_text({p}, ResendPolicy{});
    EXPECT_LE(text.size(), 400u);
    EXPECT_EQ(text.find('%'), std::string::npos);
    for (char c : text) EXPECT_TRUE(c >= 0x20 && c < 0x7f);
}

TEST(IdentityResend, VerdictLineIsKeyValueWithQuotedValues) {
    auto m = message({"bob@defer.example", "carol@ok.example"});
    auto d = decide_resend(m, {pending("bob@defer.example")}, ResendPolicy{});
    auto line = verdict_line(m, d, ResendPolicy{});
    EXPECT_EQ(
        line.rfind(
            "9ABCDEF01: verdict=drop_duplicates path=smtp original=3F2A1B0C duplicates=bob@defer.example "
            "new=carol@ok.example matched=message-id destination=defer.example",
            0),
        0u)
        << line;
    EXPECT_NE(line.find("reply=\"451 4.3.5 System config error\""), std::string::npos) << line;
    EXPECT_NE(line.find("message_id=id-1@client.example"), std::string::npos) << line;
    EXPECT_NE(line.find("since=2026-11-29T20:48:00Z"), std::string::npos) << line;
}

TEST(IdentityResend, QuoteValueEscapes) {
    EXPECT_EQ(quote_value("plain"), "plain");
    EXPECT_EQ(quote_value("a b"), "\"a b\"");
    EXPECT_EQ(quote_value("a\"b\\c"), "\"a\\\"b\\\\c\"");
    EXPECT_EQ(quote_value("k=v"), "\"k=v\"");
    EXPECT_EQ(quote_value(""), "\"\"");
}

TEST(IdentityResend, FailOpenLineSaysWhy) {
    auto line = failopen_line("ABC", SubmissionPath::sendmail, "ledger-error", "database is locked");
    EXPECT_EQ(line, "ABC: verdict=accept path=sendmail failopen=ledger-error detail=\"database is locked\"");
}

TEST(IdentityResend, ActionNamesRoundTrip) {
    for (auto a : {ResendAction::reject, ResendAction::hold, ResendAction::drop_duplicates, ResendAction::tag,
                   ResendAction::log_only})
        EXPECT_EQ(resend_action_from_string(to_string(a)), a);
    EXPECT_FALSE(resend_action_from_string("bounce"));
}

TEST(IdentityResend, ACopyNotYetDeferredDoesNotCount) {
    auto p = pending("bob@defer.example");
    p.first_deferral.reset();
    p.last_attempt.reset();
    p.attempts = 0;
    p.message_state = MessageState::incoming;
    auto d = decide_resend(message({"bob@defer.example"}), {p}, ResendPolicy{});
    EXPECT_EQ(d.verdict, "accept");
}

TEST(IdentityResend, NextRetryIsBoundedByTheBackoffSettings) {
    auto p = pending("bob@defer.example");
    p.last_attempt = *p.arrival + 10h;  // old message: the maximal backoff applies
    EXPECT_EQ(next_retry_estimate(p, 300s, 4000s), *p.last_attempt + 4000s);
    p.last_attempt = *p.arrival + 1min;  // young message: the minimal backoff applies
    EXPECT_EQ(next_retry_estimate(p, 300s, 4000s), *p.last_attempt + 300s);
    p.last_attempt.reset();
    EXPECT_FALSE(next_retry_estimate(p, 300s, 4000s));
}

TEST(IdentityResend, FingerprintMatchIsNamedInTheVerdict) {
    auto m = message({"bob@defer.example"});
    auto d = decide_resend(m, {pending("bob@defer.example", "AAA111", false)}, ResendPolicy{});
    EXPECT_NE(verdict_line(m, d, ResendPolicy{}).find("matched=fingerprint"), std::string::npos);
}

TEST(IdentityResend, ReplyIsTheRemoteServersWordsWithoutPostfixFraming) {
    auto p = pending("bob@defer.example");
    p.last_reply =
        "host mx.defer.example[192.0.2.1] said: 451 4.3.5 System config error (in reply to RCPT TO command)";
    auto m = message({"bob@defer.example"});
    auto d = decide_resend(m, {p}, ResendPolicy{});
    EXPECT_NE(d.reply_text.find("after \"451 4.3.5 System config error\","), std::string::npos)
        << d.reply_text;
    EXPECT_NE(verdict_line(m, d, ResendPolicy{}).find(" reply=\"451 4.3.5 System config error\""),
              std::string::npos);
    p.last_reply = "connect to mx.defer.example[192.0.2.1]:25: Connection refused";
    d = decide_resend(m, {p}, ResendPolicy{});
    EXPECT_NE(d.reply_text.find("after \"connect to mx.defer.example[192.0.2.1]:25: Connection refused\""),
              std::string::npos);
}

namespace {

// What a message is looked up by: identical content counts only for mail a
// person sent; the Message-ID always counts unless the match is set to
// fingerprint only.
TEST(LookupIdentity, FingerprintOnlyForPersonSentMail) {
    MessageFacts m;
    m.queue_id = "Q1";
    m.message_id = "a@b";
    m.fingerprint = "fp";
    m.sender = "alice@example.org";
    auto q = lookup_identity(m, true);
    EXPECT_EQ(q.message_id, "a@b");
    EXPECT_EQ(q.fingerprint, "fp");
    q = lookup_identity(m, false);
    EXPECT_EQ(q.message_id, "");
    EXPECT_EQ(q.fingerprint, "fp");
    m.automated = true;
    q = lookup_identity(m, true);
    EXPECT_EQ(q.message_id, "a@b");
    EXPECT_EQ(q.fingerprint, "");
    m.automated = false;
    m.sender.clear();  // the null sender: bounces and notifications
    q = lookup_identity(m, true);
    EXPECT_EQ(q.fingerprint, "");
}

}  // namespace

// A fleet shares one ledger: the refusal and its verdict name the host that
// holds the retrying copy, so the user and the admin know where to look.
TEST(IdentityResend, TheHostHoldingTheCopyIsNamed) {
    auto p = pending("bob@defer.example");
    p.host = "mx-a";
    auto m = message({"bob@defer.example"});
    auto d = decide_resend(m, {p}, ResendPolicy{});
    EXPECT_NE(d.reply_text.find("already queued as 3F2A1B0C on mx-a for defer.example"), std::string::npos)
        << d.reply_text;
    auto line = verdict_line(m, d, ResendPolicy{});
    EXPECT_NE(line.find(" original=3F2A1B0C original_host=mx-a "), std::string::npos) << line;

    ResendPolicy templated;
    templated.reply_template = "queued as {original}{on_host}.";
    EXPECT_EQ(resend_reply_text({p}, templated), "queued as 3F2A1B0C on mx-a.");
    p.host.clear();
    EXPECT_EQ(resend_reply_text({p}, templated), "queued as 3F2A1B0C.");
    EXPECT_EQ(verdict_line(m, decide_resend(m, {p}, ResendPolicy{}), ResendPolicy{}).find("original_host"),
              std::string::npos);
}
