// policy_protocol_test.cpp -- the Postfix policy request parser: every
// attribute, xtext, pipelining, split reads, limits and hostile input.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "retryguard/policy/policy.hpp"

using namespace retryguard;

namespace {

// The example request of SMTPD_POLICY_README (Postfix 3.8), every attribute.
const std::string kFullRequest =
    "request=smtpd_access_policy\n"
    "protocol_state=RCPT\n"
    "protocol_name=SMTP\n"
    "helo_name=some.domain.tld\n"
    "queue_id=8045F2AB23\n"
    "sender=foo@bar.tld\n"
    "recipient=bar@foo.tld\n"
    "recipient_count=0\n"
    "client_address=1.2.3.4\n"
    "client_name=another.domain.tld\n"
    "reverse_client_name=another.domain.tld\n"
    "instance=123.456.7\n"
    "sasl_method=plain\n"
    "sasl_username=you\n"
    "sasl_sender=\n"
    "size=12345\n"
    "ccert_subject=solaris9.porcupine.org\n"
    "ccert_issuer=Wietse+20Venema\n"
    "ccert_fingerprint=C2:9D:F4:87:71:73:73:D9:18:E7:C2:F3:C1:DA:6E:04\n"
    "encryption_protocol=TLSv1/SSLv3\n"
    "encryption_cipher=DHE-RSA-AES256-SHA\n"
    "encryption_keysize=256\n"
    "etrn_domain=\n"
    "stress=\n"
    "ccert_pubkey_fingerprint=68:B3:29:DA:98:93:E3:40:99:C7:D8:AD:5C:B9:C9:40\n"
    "client_port=1234\n"
    "policy_context=submission\n"
    "server_address=10.3.2.1\n"
    "server_port=54321\n"
    "compatibility_level=major.minor.patch\n"
    "mail_version=3.8.0\n"
    "\n";

const std::vector<std::pair<PolicyAttr, std::string>> kExpected = {
    {PolicyAttr::request, "smtpd_access_policy"},
    {PolicyAttr::protocol_state, "RCPT"},
    {PolicyAttr::protocol_name, "SMTP"},
    {PolicyAttr::helo_name, "some.domain.tld"},
    {PolicyAttr::queue_id, "8045F2AB23"},
    {PolicyAttr::sender, "foo@bar.tld"},
    {PolicyAttr::recipient, "bar@foo.tld"},
    {PolicyAttr::recipient_count, "0"},
    {PolicyAttr::client_address, "1.2.3.4"},
    {PolicyAttr::client_name, "another.domain.tld"},
    {PolicyAttr::reverse_client_name, "another.domain.tld"},
    {PolicyAttr::instance, "123.456.7"},
    {PolicyAttr::sasl_method, "plain"},
    {PolicyAttr::sasl_username, "you"},
    {PolicyAttr::sasl_sender, ""},
    {PolicyAttr::size, "12345"},
    {PolicyAttr::ccert_subject, "solaris9.porcupine.org"},
    {PolicyAttr::ccert_issuer, "Wietse Venema"},
    {PolicyAttr::ccert_fingerprint, "C2:9D:F4:87:71:73:73:D9:18:E7:C2:F3:C1:DA:6E:04"},
    {PolicyAttr::encryption_protocol, "TLSv1/SSLv3"},
    {PolicyAttr::encryption_cipher, "DHE-RSA-AES256-SHA"},
    {PolicyAttr::encryption_keysize, "256"},
    {PolicyAttr::etrn_domain, ""},
    {PolicyAttr::stress, ""},
    {PolicyAttr::ccert_pubkey_fingerprint, "68:B3:29:DA:98:93:E3:40:99:C7:D8:AD:5C:B9:C9:40"},
    {PolicyAttr::client_port, "1234"},
    {PolicyAttr::policy_context, "submission"},
    {PolicyAttr::server_address, "10.3.2.1"},
    {PolicyAttr::server_port, "54321"},
    {PolicyAttr::compatibility_level, "major.minor.patch"},
    {PolicyAttr::mail_version, "3.8.0"},
};

void expect_full(const PolicyRequest& r) {
    ASSERT_EQ(kExpected.size(), kPolicyAttrCount);
    for (const auto& [attr, value] : kExpected) {
        EXPECT_TRUE(r.has(attr)) << to_string(attr);
        EXPECT_EQ(r.get(attr), value) << to_string(attr);
    }
    EXPECT_EQ(r.unknown_attributes(), 0u);
    EXPECT_EQ(r.attribute_count(), kPolicyAttrCount);
    EXPECT_EQ(r.recipient_domain(), "foo.tld");
}

std::string minimal(std::string_view extra = {}, std::string_view rcpt = "u@example.org") {
    std::string s = "request=smtpd_access_policy\nprotocol_state=RCPT\nrecipient=";
    s += rcpt;
    s += "\n";
    s += extra;
    s += "\n";
    return s;
}

template <std::size_t N>
std::string bytes(const char (&s)[N]) {
    return std::string(s, N - 1);
}

}  // namespace

TEST(PolicyProtocol, AttributeNamesRoundTrip) {
    for (std::size_t i = 0; i < kPolicyAttrCount; ++i) {
        const auto attr = static_cast<PolicyAttr>(i);
        PolicyAttr back;
        ASSERT_TRUE(policy_attr_from_name(to_string(attr), back));
        EXPECT_EQ(back, attr);
    }
    PolicyAttr unused;
    EXPECT_FALSE(policy_attr_from_name("client_nonsense", unused));
}

TEST(PolicyProtocol, ParsesEveryAttributeOfPostfix38) {
    PolicyParser p;
    std::string_view in = kFullRequest;
    ASSERT_EQ(p.feed(in), PolicyParser::State::complete);
    EXPECT_TRUE(in.empty());
    expect_full(p.request());
}

TEST(PolicyProtocol, ParsesEveryAttributeWhateverTheSplit) {
    // Bytes arrive in pieces: every split point, and one byte at a time.
    for (std::size_t cut = 0; cut <= kFullRequest.size(); ++cut) {
        PolicyParser p;
        std::string_view a = std::string_view(kFullRequest).substr(0, cut);
        std::string_view b = std::string_view(kFullRequest).substr(cut);
        PolicyParser::State s = p.feed(a);
        if (cut < kFullRequest.size()) {
            ASSERT_EQ(s, PolicyParser::State::need_more) << cut;
            s = p.feed(b);
        }
        ASSERT_EQ(s, PolicyParser::State::complete) << cut;
        expect_full(p.request());
    }
    PolicyParser p;
    PolicyParser::State s = PolicyParser::State::need_more;
    for (std::size_t i = 0; i < kFullRequest.size(); ++i) {
        std::string_view one = std::string_view(kFullRequest).substr(i, 1);
        s = p.feed(one);
        EXPECT_TRUE(p.in_request() || s == PolicyParser::State::complete);
    }
    ASSERT_EQ(s, PolicyParser::State::complete);
    expect_full(p.request());
}

TEST(PolicyProtocol, PipelinedRequestsInOneReadComeOutInOrder) {
    std::string in;
    for (int i = 0; i < 5; ++i)
        in += minimal({}, "r" + std::to_string(i) + "@d" + std::to_string(i) + ".test");
    PolicyParser p;
    std::string_view v = in;
    for (int i = 0; i < 5; ++i) {
        ASSERT_EQ(p.feed(v), PolicyParser::State::complete);
        EXPECT_EQ(p.request().recipient_domain(), "d" + std::to_string(i) + ".test");
        // Attributes of the previous request must not leak into the next one.
        EXPECT_FALSE(p.request().has(PolicyAttr::sender));
    }
    EXPECT_TRUE(v.empty());
    EXPECT_EQ(p.feed(v), PolicyParser::State::need_more);
}

TEST(PolicyProtocol, SecondRequestDoesNotInheritFirstRequestsValues) {
    PolicyParser p;
    std::string in = kFullRequest + minimal();
    std::string_view v = in;
    ASSERT_EQ(p.feed(v), PolicyParser::State::complete);
    ASSERT_EQ(p.feed(v), PolicyParser::State::complete);
    EXPECT_FALSE(p.request().has(PolicyAttr::ccert_issuer));
    EXPECT_EQ(p.request().get(PolicyAttr::ccert_issuer), "");
    EXPECT_EQ(p.request().attribute_count(), 3u);
}

TEST(PolicyProtocol, UnknownAttributesAreAcceptedAndCounted) {
    PolicyParser p;
    const std::string in = minimal("future_attribute=1\nanother_one=x=y\n");
    std::string_view v = in;
    ASSERT_EQ(p.feed(v), PolicyParser::State::complete);
    EXPECT_EQ(p.request().unknown_attributes(), 2u);
    EXPECT_EQ(p.request().attribute_count(), 5u);
}

TEST(PolicyProtocol, ValueMayContainEqualsAndUtf8) {
    PolicyParser p;
    const std::string in = minimal("sender=a=b@d\xc3\xa9.test\n");
    std::string_view v = in;
    ASSERT_EQ(p.feed(v), PolicyParser::State::complete);
    EXPECT_EQ(p.request().get(PolicyAttr::sender), "a=b@d\xc3\xa9.test");
}

TEST(PolicyProtocol, CrLfLinesAreTolerated) {
    PolicyParser p;
    const std::string in = "request=smtpd_access_policy\r\nrecipient=a@b.test\r\n\r\n";
    std::string_view v = in;
    ASSERT_EQ(p.feed(v), PolicyParser::State::complete);
    EXPECT_EQ(p.request().recipient_domain(), "b.test");
}

TEST(PolicyProtocol, XtextDecoding) {
    std::string out;
    EXPECT_TRUE(xtext_decode("Wietse+20Venema", out));
    EXPECT_EQ(out, "Wietse Venema");
    EXPECT_TRUE(xtext_decode("a+2Bb+3Dc", out));
    EXPECT_EQ(out, "a+b=c");
    EXPECT_TRUE(xtext_decode("", out));
    EXPECT_EQ(out, "");
    EXPECT_FALSE(xtext_decode("trailing+2", out));
    EXPECT_FALSE(xtext_decode("trailing+", out));
    EXPECT_FALSE(xtext_decode("lower+2b", out));
    EXPECT_FALSE(xtext_decode("bad+G0", out));
}

TEST(PolicyProtocol, XtextOnlyForCertificateNames) {
    PolicyParser p;
    const std::string in = minimal("ccert_subject=CN+3Dmx+2C+20O+3DExample\nsasl_username=a+20b\n");
    std::string_view v = in;
    ASSERT_EQ(p.feed(v), PolicyParser::State::complete);
    EXPECT_EQ(p.request().get(PolicyAttr::ccert_subject), "CN=mx, O=Example");
    EXPECT_EQ(p.request().get(PolicyAttr::sasl_username), "a+20b");
}

struct BadCase {
    const char* name;
    std::string input;
    PolicyError error;
};

class PolicyProtocolBad : public testing::TestWithParam<BadCase> {};

TEST_P(PolicyProtocolBad, RefusedWithClearError) {
    const BadCase& c = GetParam();
    PolicyParser p;
    std::string_view v = c.input;
    ASSERT_EQ(p.feed(v), PolicyParser::State::error);
    EXPECT_EQ(p.error(), c.error) << to_string(p.error());
    // Sticky: nothing more is parsed on this connection.
    std::string_view more = "request=smtpd_access_policy\n\n";
    EXPECT_EQ(p.feed(more), PolicyParser::State::error);
}

INSTANTIATE_TEST_SUITE_P(
    Hostile, PolicyProtocolBad,
    testing::Values(
        BadCase{"NoEquals", "request=smtpd_access_policy\nhello\n\n", PolicyError::malformed_line},
        BadCase{"EmptyName", "request=smtpd_access_policy\n=value\n\n", PolicyError::malformed_line},
        BadCase{"NulByte", bytes("request=smtpd_access_policy\nsender=a\0b\n\n"), PolicyError::binary_data},
        BadCase{"Escape", "request=smtpd_access_policy\nsender=\x1b[31m\n\n", PolicyError::binary_data},
        BadCase{"Binary", bytes("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n"), PolicyError::binary_data},
        BadCase{"BinaryWithoutNewline", bytes("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"),
                PolicyError::binary_data},
        BadCase{"BadXtext", "request=smtpd_access_policy\nccert_issuer=a+zz\n\n", PolicyError::bad_xtext},
        BadCase{"Duplicate", "request=smtpd_access_policy\nrecipient=a@b\nrecipient=c@d\n\n",
                PolicyError::duplicate_attribute},
        BadCase{"NoRequestType", "recipient=a@b\n\n", PolicyError::bad_request_type},
        BadCase{"WrongRequestType", "request=junk\n\n", PolicyError::bad_request_type},
        BadCase{"BareEmptyLine", "\n", PolicyError::bad_request_type},
        BadCase{"HttpRequest", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", PolicyError::malformed_line},
        BadCase{"LongLine", "request=smtpd_access_policy\nsender=" + std::string(5000, 'a') + "\n\n",
                PolicyError::line_too_long},
        BadCase{"LongLineNoNewline", std::string(5000, 'a'), PolicyError::line_too_long}),
    [](const testing::TestParamInfo<BadCase>& info) { return info.param.name; });

TEST(PolicyProtocol, LineLimitHoldsAcrossSplitReads) {
    PolicyLimits limits;
    limits.max_line_bytes = 64;
    PolicyParser p(limits);
    std::string_view a = "request=smtpd_access_policy\nsender=";
    ASSERT_EQ(p.feed(a), PolicyParser::State::need_more);
    const std::string chunk(20, 'x');
    PolicyParser::State s = PolicyParser::State::need_more;
    int pieces = 0;
    while (s == PolicyParser::State::need_more && pieces < 10) {
        std::string_view v = chunk;
        s = p.feed(v);
        ++pieces;
    }
    EXPECT_EQ(s, PolicyParser::State::error);
    EXPECT_EQ(p.error(), PolicyError::line_too_long);
    EXPECT_EQ(pieces, 3);  // 7 + 3*20 > 64
}

TEST(PolicyProtocol, LineOfExactlyTheLimitIsAccepted) {
    PolicyLimits limits;
    limits.max_line_bytes = 40;
    PolicyParser p(limits);
    std::string line = "sender=" + std::string(40 - 8, 'a') + "\n";  // 40 bytes with the newline
    ASSERT_EQ(line.size(), 40u);
    std::string in = "request=smtpd_access_policy\n" + line + "\n";
    std::string_view v = in;
    EXPECT_EQ(p.feed(v), PolicyParser::State::complete);
    PolicyParser q(limits);
    in = "request=smtpd_access_policy\n" + std::string("sender=") + std::string(33, 'a') + "\n\n";
    v = in;
    EXPECT_EQ(q.feed(v), PolicyParser::State::error);
    EXPECT_EQ(q.error(), PolicyError::line_too_long);
}

TEST(PolicyProtocol, AttributeCountLimit) {
    PolicyLimits limits;
    limits.max_attributes = 10;
    std::string in = "request=smtpd_access_policy\n";
    for (int i = 0; i < 9; ++i) in += "x" + std::to_string(i) + "=1\n";
    PolicyParser ok(limits);
    std::string good = in + "\n";
    std::string_view v = good;
    EXPECT_EQ(ok.feed(v), PolicyParser::State::complete);
    PolicyParser bad(limits);
    std::string over = in + "x9=1\n\n";
    v = over;
    EXPECT_EQ(bad.feed(v), PolicyParser::State::error);
    EXPECT_EQ(bad.error(), PolicyError::too_many_attributes);
}

TEST(PolicyProtocol, RequestSizeLimitCountsEveryByteOfOneRequestOnly) {
    PolicyLimits limits;
    limits.max_request_bytes = 200;
    limits.max_attributes = 1000;
    std::string big = "request=smtpd_access_policy\n";
    while (big.size() < 250) big += "unknown_attr=vvvvvvvvvv\n";
    big += "\n";
    PolicyParser p(limits);
    std::string_view v = big;
    EXPECT_EQ(p.feed(v), PolicyParser::State::error);
    EXPECT_EQ(p.error(), PolicyError::request_too_large);

    // Many small requests on one connection never add up to the limit.
    PolicyParser q(limits);
    for (int i = 0; i < 100; ++i) {
        std::string r = minimal();
        std::string_view rv = r;
        ASSERT_EQ(q.feed(rv), PolicyParser::State::complete) << i;
    }
}

TEST(PolicyProtocol, PartialRequestIsReportedInProgress) {
    PolicyParser p;
    EXPECT_FALSE(p.in_request());
    std::string_view v = "request=smtpd_";
    EXPECT_EQ(p.feed(v), PolicyParser::State::need_more);
    EXPECT_TRUE(p.in_request());
    v = "access_policy\n\n";
    EXPECT_EQ(p.feed(v), PolicyParser::State::complete);
    EXPECT_FALSE(p.in_request());
}

TEST(PolicyProtocol, AnswerFormat) {
    std::string out;
    format_policy_answer(out, "DUNNO");
    format_policy_answer(out, "REJECT 5.7.1 no");
    EXPECT_EQ(out, "action=DUNNO\n\naction=REJECT 5.7.1 no\n\n");
}

TEST(PolicyProtocol, RandomBytesNeverCrashAndEndInAKnownState) {
    // A cheap in-suite fuzz; the libFuzzer target goes further.
    std::uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int round = 0; round < 2000; ++round) {
        std::string buf;
        const int n = static_cast<int>(x % 300);
        for (int i = 0; i < n; ++i) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            const char alphabet[] = "request=smtpd_access_policy\n=\n+2\x01\xff abc";
            buf.push_back(alphabet[x % (sizeof(alphabet) - 1)]);
        }
        PolicyParser p;
        std::string_view v = buf;
        for (int guard = 0; guard < 400 && !v.empty(); ++guard) {
            const auto s = p.feed(v);
            if (s == PolicyParser::State::error) {
                EXPECT_NE(p.error(), PolicyError::none);
                break;
            }
        }
        x += 0x9E3779B97F4A7C15ull;
    }
}

TEST(PolicyProtocol, AttributeOrderDoesNotMatterAcrossRequests) {
    // The parser guesses each attribute from the order seen before; a
    // different order (another Postfix version) must parse the same.
    std::vector<std::string> lines;
    {
        std::string_view all = kFullRequest;
        while (!all.empty()) {
            const auto nl = all.find('\n');
            if (nl > 0) lines.emplace_back(all.substr(0, nl + 1));
            all.remove_prefix(nl + 1);
        }
    }
    std::string reversed;
    for (auto it = lines.rbegin(); it != lines.rend(); ++it) reversed += *it;
    reversed += "\n";
    PolicyParser p;
    const std::string* inputs[] = {&kFullRequest, &reversed, &kFullRequest, &reversed};
    for (const std::string* in : inputs) {
        std::string_view v = *in;
        ASSERT_EQ(p.feed(v), PolicyParser::State::complete);
        expect_full(p.request());
    }
}

TEST(PolicyProtocol, ControlByteFoundAtEveryPositionAndHighBytesAllowed) {
    // The scan works eight bytes at a time: probe every offset and length.
    for (std::size_t len = 1; len <= 20; ++len) {
        for (std::size_t at = 0; at < len; ++at) {
            for (unsigned char bad : {0x00, 0x01, 0x0d, 0x1b, 0x1f, 0x7f}) {
                if (bad == 0x0d && at + 1 == len) continue;  // that is a CRLF line end
                std::string value(len, 'a');
                value[at] = static_cast<char>(bad);
                const std::string in = "request=smtpd_access_policy\nsender=" + value + "\n\n";
                PolicyParser p;
                std::string_view v = in;
                ASSERT_EQ(p.feed(v), PolicyParser::State::error) << len << " " << at << " " << int(bad);
                EXPECT_EQ(p.error(), PolicyError::binary_data);
            }
            for (unsigned char fine : {0x09, 0x20, 0x7e, 0x80, 0xc3, 0xff}) {
                std::string value(len, 'a');
                value[at] = static_cast<char>(fine);
                const std::string in = "request=smtpd_access_policy\nsender=" + value + "\n\n";
                PolicyParser p;
                std::string_view v = in;
                ASSERT_EQ(p.feed(v), PolicyParser::State::complete) << len << " " << at << " " << int(fine);
                EXPECT_EQ(p.request().get(PolicyAttr::sender), value);
            }
        }
    }
}
