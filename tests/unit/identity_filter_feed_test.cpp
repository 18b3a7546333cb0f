// identity_filter_feed_test.cpp -- what keeps the milter's identity filter
// complete: the first rebuild before any lookup, the change stream's keys
// between rebuilds, and fail open (filter invalidated, counted, logged once)
// when the scan or the stream fails or throws, until they work again.
#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "retryguard/identity/identity_filter_feed.hpp"

using namespace retryguard;
using namespace std::chrono_literals;
using logging::Severity;

namespace {

// Waits for a condition another thread brings about; false if it never comes.
template <typename F>
bool eventually(F f) {
    for (int i = 0; i < 4000; ++i) {
        if (f()) return true;
        std::this_thread::sleep_for(5ms);
    }
    return f();
}

// The log lines a feed wrote, readable from the test's thread.
struct Lines {
    std::mutex mu;
    std::vector<std::pair<Severity, std::string>> lines;
    IdentityFilterFeed::Log sink() {
        return [this](Severity s, const std::string& t) {
            std::lock_guard lock(mu);
            lines.emplace_back(s, t);
        };
    }
    int count(Severity s, const std::string& part) {
        std::lock_guard lock(mu);
        int n = 0;
        for (const auto& [sev, text] : lines) n += sev == s && text.find(part) != std::string::npos;
        return n;
    }
};

// A change stream whose changes, failures and exceptions the test decides.
class FakeStream final : public IdentityStream {
  public:
    struct State {
        std::mutex mu;
        std::vector<std::string> listed;      // fingerprints a scan reports
        std::deque<std::string> changes;      // fingerprints read() reports
        int fail_reads = 0, throw_reads = 0;  // the next reads that fail or throw
        int marks = 0;
    };
    explicit FakeStream(State& s) : s_(s) {}
    Status mark() override {
        std::lock_guard lock(s_.mu);
        ++s_.marks;
        return {};
    }
    Status read(std::chrono::milliseconds wait, const Visitor& f) override {
        std::deque<std::string> got;
        {
            std::lock_guard lock(s_.mu);
            if (s_.throw_reads > 0) {
                --s_.throw_reads;
                throw std::runtime_error("stream exploded");
            }
            if (s_.fail_reads > 0) {
                --s_.fail_reads;
                return make_error(ErrorKind::unavailable, "stream trimmed");
            }
            got.swap(s_.changes);
        }
        if (got.empty()) std::this_thread::sleep_for(std::min(wait, std::chrono::milliseconds(5)));
        for (const auto& fp : got) f("", fp);
        return {};
    }
    Status scan(const Visitor& f) override {
        std::lock_guard lock(s_.mu);
        for (const auto& fp : s_.listed) f("", fp);
        return {};
    }

  private:
    State& s_;
};

IdentityFilterFeed::Options fast(std::chrono::milliseconds rescan = std::chrono::hours(1)) {
    IdentityFilterFeed::Options o;
    o.rescan = rescan;
    o.stream_wait = 5ms;
    o.retry = 5ms;
    return o;
}

TEST(IdentityFilterFeed, WithoutAStreamTheFirstRebuildIsDoneBeforeStartReturns) {
    IdentityFilter filter;
    Lines log;
    IdentityFilterFeed feed(
        filter,
        [](const IdentityFilter::Visitor& v) -> Status {
            v("m1@client.example", "fp-1");
            return {};
        },
        nullptr, fast(), log.sink());
    EXPECT_FALSE(feed.has_stream());
    feed.start();
    EXPECT_TRUE(filter.ready());
    EXPECT_TRUE(filter.may_have_copy("", "fp-1"));
    EXPECT_FALSE(filter.may_have_copy("other@x", "fp-other"));
    EXPECT_EQ(log.count(Severity::info, "identity filter: 2 keys read"), 1);
    EXPECT_EQ(feed.errors(), 0u);
    feed.stop();
}

TEST(IdentityFilterFeed, AFailedScanLeavesEveryMessageLookedUpAndIsCountedEachTime) {
    IdentityFilter filter;
    Lines log;
    std::mutex mu;
    bool fail = true;
    int scans = 0;
    IdentityFilterFeed feed(
        filter,
        [&](const IdentityFilter::Visitor& v) -> Status {
            std::lock_guard lock(mu);
            ++scans;
            if (fail) return make_error(ErrorKind::unavailable, "ledger down");
            v("", "fp-back");
            return {};
        },
        nullptr, fast(5ms), log.sink());
    feed.start();
    EXPECT_FALSE(filter.ready());
    EXPECT_TRUE(filter.may_have_copy("never@seen", "never-seen"));  // fail open
    ASSERT_TRUE(eventually([&] { return feed.errors() >= 2; }));
    // one warning for the whole failure, not one per rescan
    EXPECT_EQ(log.count(Severity::warning, "rebuild failed"), 1);
    {
        std::lock_guard lock(mu);
        fail = false;
    }
    ASSERT_TRUE(eventually([&] { return filter.ready(); }));
    EXPECT_TRUE(filter.may_have_copy("", "fp-back"));
    EXPECT_FALSE(filter.may_have_copy("", "fp-other"));
    feed.stop();
}

TEST(IdentityFilterFeed, TheStreamBringsKeysWrittenElsewhereBetweenRebuilds) {
    IdentityFilter filter;
    FakeStream::State state;
    state.listed = {"fp-listed"};
    Lines log;
    IdentityFilterFeed feed(
        filter,
        [](const IdentityFilter::Visitor&) -> Status {
            ADD_FAILURE() << "with a stream, the stream's own scan is used";
            return {};
        },
        std::make_unique<FakeStream>(state), fast(), log.sink());
    EXPECT_TRUE(feed.has_stream());
    feed.start();
    EXPECT_TRUE(filter.ready());
    EXPECT_EQ(state.marks, 1);  // the mark comes before the scan
    EXPECT_TRUE(filter.may_have_copy("", "fp-listed"));
    EXPECT_FALSE(filter.may_have_copy("", "fp-late"));
    {
        std::lock_guard lock(state.mu);
        state.changes.push_back("fp-late");
    }
    EXPECT_TRUE(eventually([&] { return filter.may_have_copy("", "fp-late"); }));
    EXPECT_EQ(feed.errors(), 0u);
    feed.stop();
}

TEST(IdentityFilterFeed, ABrokenStreamInvalidatesTheFilterUntilAMarkAndScanSucceed) {
    IdentityFilter filter;
    FakeStream::State state;
    state.listed = {"fp-listed"};
    Lines log;
    IdentityFilterFeed feed(filter, {}, std::make_unique<FakeStream>(state), fast(), log.sink());
    feed.start();
    ASSERT_TRUE(filter.ready());
    {
        std::lock_guard lock(state.mu);
        state.fail_reads = 1;
        state.listed.push_back("fp-missed");  // written while the stream was broken
    }
    ASSERT_TRUE(eventually([&] { return log.count(Severity::info, "change stream read again") == 1; }));
    EXPECT_EQ(feed.errors(), 1u);
    EXPECT_EQ(log.count(Severity::warning, "change stream failed"), 1);
    EXPECT_TRUE(filter.ready());
    EXPECT_TRUE(filter.may_have_copy("", "fp-missed"));  // the new scan read it
    {
        std::lock_guard lock(state.mu);
        EXPECT_GE(state.marks, 2);
    }
    feed.stop();
}

TEST(IdentityFilterFeed, AThrowingStreamIsCaughtCountedAndFollowedAgain) {
    IdentityFilter filter;
    FakeStream::State state;
    Lines log;
    IdentityFilterFeed feed(filter, {}, std::make_unique<FakeStream>(state), fast(), log.sink());
    feed.start();
    {
        std::lock_guard lock(state.mu);
        state.throw_reads = 1;
    }
    ASSERT_TRUE(eventually([&] {
        return log.count(Severity::error, "identity filter: caught exception: stream exploded") == 1;
    }));
    EXPECT_EQ(feed.exceptions_caught(), 1u);
    {
        std::lock_guard lock(state.mu);
        state.changes.push_back("fp-after");
    }
    EXPECT_TRUE(eventually([&] { return filter.may_have_copy("", "fp-after") && filter.ready(); }));
    EXPECT_GE(feed.errors(), 1u);
    feed.stop();
}

}  // namespace
