// identity_message_test.cpp -- Message-ID normalisation and the content
// fingerprint: what must compare equal across a client's resend, and what
// must not.
#include <gtest/gtest.h>

#include <string>

#include "retryguard/identity/identity.hpp"
#include "retryguard/ledger/ledger.hpp"

using namespace retryguard;

TEST(IdentityMessageId, DomainCaseBracketsWhitespaceAndCommentsNormalise) {
    EXPECT_EQ(parse_message_id_header("<AbC.123@Example.COM>"), "AbC.123@example.com");
    EXPECT_EQ(parse_message_id_header("  <AbC.123@example.com>  "), "AbC.123@example.com");
    EXPECT_EQ(parse_message_id_header("AbC.123@Example.com"), "AbC.123@example.com");
    EXPECT_EQ(parse_message_id_header("(sent by (nested) client) <AbC.123@example.com> (trailing)"),
              "AbC.123@example.com");
    EXPECT_EQ(parse_message_id_header("\r\n\t<AbC.123@example.com>"), "AbC.123@example.com");
    EXPECT_EQ(parse_message_id_header("< AbC.123 @ example.com >"), "AbC.123@example.com");
}

TEST(IdentityMessageId, LeftPartKeepsItsCase) {
    EXPECT_NE(parse_message_id_header("<ABC@example.com>"), parse_message_id_header("<abc@example.com>"));
}

TEST(IdentityMessageId, TakesTheFirstOfSeveral) {
    EXPECT_EQ(parse_message_id_header("<one@x.org> <two@x.org>"), "one@x.org");
}

TEST(IdentityMessageId, RejectsEmptyUnbalancedAndControlCharacters) {
    EXPECT_FALSE(parse_message_id_header(""));
    EXPECT_FALSE(parse_message_id_header("<>"));
    EXPECT_FALSE(parse_message_id_header("   "));
    EXPECT_FALSE(parse_message_id_header("<abc@x.org"));
    EXPECT_FALSE(parse_message_id_header("abc@x.org>"));
    EXPECT_FALSE(parse_message_id_header("(unclosed <abc@x.org>"));
    EXPECT_FALSE(
        parse_message_id_header(std::string("<a\x01"
                                            "b@x.org>")));
    EXPECT_FALSE(parse_message_id_header("<" + std::string(kMaxMessageIdLength + 10, 'a') + "@x.org>"));
    // found by the fuzzer: a second '<' inside the first pair made the result unparseable
    EXPECT_FALSE(parse_message_id_header("<a@b\\O<c@d\\Q>O"));
}

TEST(IdentityMessageId, QuotedParenthesesAreNotComments) {
    EXPECT_EQ(parse_message_id_header("<\"a(b)\"@x.org>"), "\"a(b)\"@x.org");
}

namespace {

struct Msg {
    std::string sender = "alice@example.org";
    std::string subject = "Quarterly report";
    std::string content_type = "text/plain; charset=us-ascii";
    std::string body = "Hello Bob,\r\nthe report is attached.\r\n\r\nAlice\r\n";
};

std::string fp(const Msg& m, FingerprintParts parts = {}, std::size_t chunk = 0) {
    FingerprintBuilder b(parts);
    b.sender(m.sender);
    b.header("Date", "Mon, 30 Nov 2026 10:00:00 +0000");
    b.header("Subject", m.subject);
    b.header("Content-Type", m.content_type);
    if (chunk == 0) {
        b.body(m.body);
    } else {
        for (std::size_t i = 0; i < m.body.size(); i += chunk)
            b.body(std::string_view(m.body).substr(i, chunk));
    }
    return b.finish();
}

}  // namespace

TEST(IdentityFingerprint, IsHexAndStable) {
    Msg m;
    auto a = fp(m);
    EXPECT_EQ(a.size(), 40u);
    EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
    EXPECT_EQ(a, fp(m));
}

// Ledgers in the field hold fingerprints computed by earlier versions: the
// digest must not change with the SHA-1 implementation (this value came from
// the Boost.UUID SHA-1 the fingerprint used before libcrypto's).
TEST(IdentityFingerprint, DigestIsTheOneEarlierVersionsStored) {
    FingerprintBuilder b(FingerprintParts{}, 1 << 20);
    b.sender("<Alice@Example.org>");
    b.header("Subject", "  Quarterly   figures");
    b.header("Content-Type", "multipart/mixed; boundary=\"abc\"");
    b.body("--abc\r\nHello Bob,\r\n\r\nthe figures follow. =\r\nmore\r\n--abc--\r\n");
    EXPECT_EQ(b.finish(), "692281e2c83bfa620aba1e068c86c0140779fa8b");
}

TEST(IdentityFingerprint, ChunkingDoesNotMatter) {
    Msg m;
    EXPECT_EQ(fp(m), fp(m, {}, 1));
    EXPECT_EQ(fp(m), fp(m, {}, 7));
}

TEST(IdentityFingerprint, LineEndingsTrailingWhitespaceAndRewrapSurvive) {
    Msg a, b, c;
    b.body = "Hello Bob,   \nthe report is attached.\n\nAlice\n\n\n";
    c.body = "Hello Bob, the report\r\nis attached. Alice";
    EXPECT_EQ(fp(a), fp(b));
    EXPECT_EQ(fp(a), fp(c));
}

TEST(IdentityFingerprint, QuotedPrintableSoftBreaksSurvive) {
    Msg a, b;
    a.body = "A long line that a client wraps differently=\r\n each time it sends.\r\n";
    b.body = "A long line that a client wraps=\r\n differently each time it sends.\r\n";
    EXPECT_EQ(fp(a), fp(b));
}

TEST(IdentityFingerprint, MimeBoundariesChosenPerSendSurvive) {
    Msg a, b;
    a.content_type = "multipart/mixed; boundary=\"----=_Part_1_111.222\"";
    a.body =
        "------=_Part_1_111.222\r\nContent-Type: multipart/alternative;\r\n\tboundary=\"alt-AAAA\"\r\n\r\n"
        "--alt-AAAA\r\nContent-Type: text/plain\r\n\r\nHi\r\n--alt-AAAA--\r\n------=_Part_1_111.222--\r\n";
    b.content_type = "multipart/mixed; boundary=\"----=_Part_9_999.888\"";
    b.body =
        "------=_Part_9_999.888\r\nContent-Type: multipart/alternative;\r\n\tboundary=\"alt-BBBBBB\"\r\n\r\n"
        "--alt-BBBBBB\r\nContent-Type: "
        "text/plain\r\n\r\nHi\r\n--alt-BBBBBB--\r\n------=_Part_9_999.888--\r\n";
    EXPECT_EQ(fp(a), fp(b));
    Msg c = b;
    c.body.replace(c.body.find("Hi"), 2, "Ho");
    EXPECT_NE(fp(a), fp(c));
}

TEST(IdentityFingerprint, DifferentContentSenderOrSubjectDiffer) {
    Msg a, body, sender, subject;
    body.body = "Hello Bob,\r\nthe report is NOT attached.\r\n";
    sender.sender = "mallory@example.org";
    subject.subject = "Re: Quarterly report";
    EXPECT_NE(fp(a), fp(body));
    EXPECT_NE(fp(a), fp(sender));
    EXPECT_NE(fp(a), fp(subject));
}

TEST(IdentityFingerprint, SubjectCaseAndWhitespaceAndSenderCaseDoNotMatter) {
    Msg a, b;
    b.subject = "  quarterly\r\n   REPORT ";
    b.sender = "<Alice@Example.ORG>";
    EXPECT_EQ(fp(a), fp(b));
}

TEST(IdentityFingerprint, PartsAreConfigurable) {
    Msg a, b;
    b.subject = "A different subject";
    FingerprintParts no_subject{.sender = true, .subject = false, .body = true};
    EXPECT_NE(fp(a), fp(b));
    EXPECT_EQ(fp(a, no_subject), fp(b, no_subject));
    FingerprintParts none{.sender = false, .subject = false, .body = false};
    EXPECT_EQ(fp(a, none), "");
}

TEST(IdentityFingerprint, BodyLimitBoundsWhatCounts) {
    FingerprintBuilder a({}, 10), b({}, 10);
    a.body("0123456789 tail one");
    b.body("0123456789 tail two");
    EXPECT_EQ(a.finish(), b.finish());
}

TEST(IdentityFingerprint, VeryLongLinesAreHashedNotBuffered) {
    Msg a, b;
    a.body = std::string(100000, 'x') + "\r\nend\r\n";
    b.body = std::string(100000, 'x') + "\r\nend\r\n";
    EXPECT_EQ(fp(a, {}, 4096), fp(b, {}, 1000));
    b.body[50000] = 'y';
    EXPECT_NE(fp(a), fp(b));
}

TEST(IdentitySubject, PrefixesAreKept) {
    EXPECT_EQ(normalize_subject(" Re:  [list]  Hello\r\n World "), "re: [list] hello world");
}

TEST(IdentityMessageId, AgreesWithTheLedgerNormalisation) {
    // the milter records what this returns; the ledger normalises what Postfix
    // logs (message-id=<...>): both must land on the same key
    for (const char* logged : {"<AbC.123@Example.COM>", "<x-1@client.e2e.test>"}) {
        auto parsed = parse_message_id_header(logged);
        ASSERT_TRUE(parsed);
        EXPECT_EQ(*parsed, normalize_message_id(logged));
        EXPECT_EQ(normalize_message_id(*parsed), *parsed);
    }
}

// Mail a program sends repeats identical content by nature: these headers
// make identical content a new message (docs/milter.md, "Identical content").
TEST(Automated, HeadersThatMarkMailSentByAProgram) {
    EXPECT_TRUE(marks_automated("Auto-Submitted", "auto-generated"));
    EXPECT_TRUE(marks_automated("auto-submitted", " Auto-Replied; owner-email=\"a@b\""));
    EXPECT_TRUE(marks_automated("Auto-Submitted", "auto-notified (comment)"));
    EXPECT_FALSE(marks_automated("Auto-Submitted", "no"));
    EXPECT_FALSE(marks_automated("Auto-Submitted", " NO (typed by a person)"));
    EXPECT_FALSE(marks_automated("Auto-Submitted", ""));
    EXPECT_TRUE(marks_automated("Precedence", "bulk"));
    EXPECT_TRUE(marks_automated("PRECEDENCE", " List"));
    EXPECT_TRUE(marks_automated("Precedence", "junk"));
    EXPECT_FALSE(marks_automated("Precedence", "first-class"));
    EXPECT_FALSE(marks_automated("Precedence", "bulkier"));
    EXPECT_TRUE(marks_automated("List-Id", "Ops <ops.lists.example.org>"));
    EXPECT_TRUE(marks_automated("List-Unsubscribe", "<mailto:leave@example.org>"));
    EXPECT_TRUE(marks_automated("list-post", "<mailto:ops@example.org>"));
    EXPECT_FALSE(marks_automated("Subject", "Precedence: bulk"));
    EXPECT_FALSE(marks_automated("X-Auto-Submitted", "auto-generated"));
}
