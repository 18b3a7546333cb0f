// identity_filter_test.cpp -- the milter's negative cache: it may say "maybe"
// too often, never "no" for a key it was given or a rebuild read.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "retryguard/identity/identity_filter.hpp"

using namespace retryguard;

namespace {

using Pairs = std::vector<std::pair<std::string, std::string>>;

IdentityFilter::Scan listing(Pairs pairs) {
    return [pairs = std::move(pairs)](const IdentityFilter::Visitor& v) -> Status {
        for (const auto& [mid, fp] : pairs) v(mid, fp);
        return {};
    };
}

TEST(IdentityFilter, BeforeTheFirstRebuildEveryMessageMayHaveACopy) {
    IdentityFilter f;
    EXPECT_FALSE(f.ready());
    EXPECT_TRUE(f.may_have_copy("never@seen", "never-seen"));
    f.add("a@b", "fp-a");  // adds alone do not make it complete
    EXPECT_TRUE(f.may_have_copy("other@b", "fp-other"));
}

TEST(IdentityFilter, AnswersFromTheKeysTheLedgerListed) {
    IdentityFilter f;
    auto r = f.rebuild(listing({{"m1@client.example", "fp-1"}, {"", "fp-2"}, {"m3@x", ""}}));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, 4u);
    EXPECT_TRUE(f.ready());
    EXPECT_TRUE(f.may_have_copy("m1@client.example", "new-fp"));  // by Message-ID
    EXPECT_TRUE(f.may_have_copy("new@x", "fp-2"));                // by fingerprint
    EXPECT_TRUE(f.may_have_copy("m3@x", ""));
    EXPECT_FALSE(f.may_have_copy("new@x", "new-fp"));
    EXPECT_FALSE(f.may_have_copy("", ""));
    // the header's form is normalised as the ledger normalises it
    EXPECT_TRUE(f.may_have_copy("<m1@Client.EXAMPLE>", ""));
    // a Message-ID and a fingerprint with the same text are different keys
    EXPECT_FALSE(f.may_have_copy("fp-1", ""));
    EXPECT_FALSE(f.may_have_copy("", "m3@x"));
}

TEST(IdentityFilter, AddedKeysCountAtOnceAndSurviveARebuildThatDidNotSeeThem) {
    IdentityFilter f;
    ASSERT_TRUE(f.rebuild(listing({})).ok());
    f.add("<New@Client.Example>", "fp-new");
    EXPECT_TRUE(f.may_have_copy("New@client.example", ""));
    EXPECT_TRUE(f.may_have_copy("", "fp-new"));
    // a key written while the scan runs, and missed by it, is kept
    auto r = f.rebuild([&](const IdentityFilter::Visitor& v) -> Status {
        v("listed@x", "");
        f.add("during@x", "fp-during");
        return {};
    });
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(f.may_have_copy("listed@x", ""));
    EXPECT_TRUE(f.may_have_copy("during@x", ""));
    EXPECT_TRUE(f.may_have_copy("", "fp-during"));
    // keys added before the scan began are the ledger's to list: a message
    // finished since then is dropped
    EXPECT_FALSE(f.may_have_copy("New@client.example", "fp-new"));
}

TEST(IdentityFilter, AFailedRebuildSendsEveryMessageToTheLedgerUntilOneSucceeds) {
    IdentityFilter f;
    ASSERT_TRUE(f.rebuild(listing({{"a@x", ""}})).ok());
    EXPECT_FALSE(f.may_have_copy("b@x", ""));
    auto r = f.rebuild([](const IdentityFilter::Visitor& v) -> Status {
        v("half@x", "");
        return make_error(ErrorKind::unavailable, "ledger gone");
    });
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().kind, ErrorKind::unavailable);
    EXPECT_FALSE(f.ready());
    EXPECT_TRUE(f.may_have_copy("b@x", ""));
    // a scan that throws is a failed rebuild too, not an escaped exception
    r = f.rebuild([](const IdentityFilter::Visitor&) -> Status { throw std::runtime_error("boom"); });
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("boom"), std::string::npos);
    ASSERT_TRUE(f.rebuild(listing({{"b@x", ""}})).ok());
    EXPECT_TRUE(f.ready());
    EXPECT_TRUE(f.may_have_copy("b@x", ""));
    EXPECT_FALSE(f.may_have_copy("a@x", ""));
}

}  // namespace

namespace {

// Keys from a change stream come as the ledger stores them: hashed as they
// are, like a rebuild's, so a Message-ID the milter normalises to the same
// text matches.
TEST(IdentityFilter, StreamedKeysAreTakenAsTheLedgerStoresThem) {
    IdentityFilter f;
    ASSERT_TRUE(f.rebuild(listing({})).ok());
    f.add_normalised("m@client.example", "fp-s");
    EXPECT_TRUE(f.may_have_copy("<m@Client.Example>", ""));
    EXPECT_TRUE(f.may_have_copy("", "fp-s"));
    EXPECT_FALSE(f.may_have_copy("other@client.example", "fp-other"));
}

// A broken change stream: keys may be missing, so until a rebuild that
// started afterwards succeeds, every message may have a copy.
TEST(IdentityFilter, InvalidatedItSendsEveryMessageToTheLedgerUntilTheNextRebuild) {
    IdentityFilter f;
    ASSERT_TRUE(f.rebuild(listing({{"a@x", ""}})).ok());
    EXPECT_FALSE(f.may_have_copy("b@x", ""));
    f.invalidate();
    EXPECT_FALSE(f.ready());
    EXPECT_TRUE(f.may_have_copy("b@x", ""));
    ASSERT_TRUE(f.rebuild(listing({{"a@x", ""}})).ok());
    EXPECT_TRUE(f.ready());
    EXPECT_FALSE(f.may_have_copy("b@x", ""));
    // invalidated while a rebuild runs: that rebuild may have read the ledger
    // before the lost keys were written, so it does not count
    auto r = f.rebuild([&](const IdentityFilter::Visitor& v) -> Status {
        v("a@x", "");
        f.invalidate();
        return {};
    });
    EXPECT_FALSE(r.ok());
    EXPECT_FALSE(f.ready());
    EXPECT_TRUE(f.may_have_copy("b@x", ""));
    ASSERT_TRUE(f.rebuild(listing({})).ok());
    EXPECT_FALSE(f.may_have_copy("b@x", ""));
}

}  // namespace

// Identical content: a fingerprint whose lookup found no copy for these
// recipients is answered "no copy" for a moment, then looked up again; a
// known Message-ID, other recipients or another fingerprint are never covered.
TEST(IdentityFilter, AFingerprintFoundClearIsRememberedBriefly) {
    using namespace std::chrono;
    IdentityFilter f;
    ASSERT_TRUE(f.rebuild(listing({{"orig@client.example", "fp-alert"}})).ok());
    const std::vector<std::string> ops = {"<ops@example.org>", "oncall@Example.ORG"};
    const auto key = IdentityFilter::content_key("fp-alert", ops);
    EXPECT_NE(key, 0u);
    EXPECT_EQ(key, IdentityFilter::content_key("fp-alert", {"oncall@example.org", "ops@example.org"}));
    EXPECT_NE(key, IdentityFilter::content_key("fp-alert", {"ops@example.org"}));
    EXPECT_EQ(IdentityFilter::content_key("", ops), 0u);

    const auto t0 = steady_clock::time_point{} + hours(1);
    EXPECT_TRUE(f.may_have_copy("alert-2@host", "fp-alert", key, t0));  // not known clear yet
    f.note_no_fingerprint_copy(key, t0);
    EXPECT_FALSE(f.may_have_copy("alert-3@host", "fp-alert", key, t0 + milliseconds(100)));
    EXPECT_FALSE(f.may_have_copy("", "fp-alert", key, t0 + milliseconds(249)));
    EXPECT_TRUE(f.may_have_copy("alert-4@host", "fp-alert", key, t0 + IdentityFilter::kFingerprintClearFor));
    // a Message-ID the ledger holds is always looked up
    EXPECT_TRUE(f.may_have_copy("orig@client.example", "fp-alert", key, t0 + milliseconds(100)));
    // other recipients: another key, not remembered
    const auto other = IdentityFilter::content_key("fp-alert", {"boss@example.org"});
    EXPECT_TRUE(f.may_have_copy("alert-5@host", "fp-alert", other, t0 + milliseconds(100)));
    // a clock that went backwards does not extend the answer
    EXPECT_TRUE(f.may_have_copy("alert-6@host", "fp-alert", key, t0 - milliseconds(1)));
    // without a content key the remembered answer never applies
    EXPECT_TRUE(f.may_have_copy("alert-7@host", "fp-alert", 0, t0 + milliseconds(100)));
}
