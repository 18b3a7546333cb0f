// daemon_guard_test.cpp -- the daemons' thread guard catches, counts and
// reports whatever an entry point throws; the warning limiter drops repeats
// and gives their count back when it opens again, or at stop.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "retryguard/runtime/daemon_guard.hpp"

using retryguard::run_guarded;
using retryguard::WarningLimiter;
using namespace std::chrono_literals;

TEST(DaemonGuard, ReturnsTrueAndReportsNothingWhenNothingThrows) {
    std::atomic<std::uint64_t> caught{0};
    int reports = 0, ran = 0;
    EXPECT_TRUE(run_guarded(
        "entry", [&] { ++ran; }, caught, [&](auto, auto) { ++reports; }));
    EXPECT_EQ(ran, 1);
    EXPECT_EQ(reports, 0);
    EXPECT_EQ(caught.load(), 0u);
}

TEST(DaemonGuard, CatchesCountsAndReportsStdAndOtherExceptions) {
    std::atomic<std::uint64_t> caught{0};
    std::vector<std::string> lines;
    auto report = [&](std::string_view where, std::string_view what) {
        lines.push_back(std::string(where) + ": " + std::string(what));
    };
    EXPECT_FALSE(run_guarded(
        "writer", [] { throw std::runtime_error("disk on fire"); }, caught, report));
    EXPECT_FALSE(run_guarded(
        "reload", [] { throw 42; }, caught, report));
    EXPECT_EQ(caught.load(), 2u);
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(lines[0], "writer: disk on fire");
    EXPECT_EQ(lines[1], "reload: unknown exception");
}

TEST(DaemonGuard, AReportThatThrowsIsSwallowedAndAThreadSurvives) {
    std::atomic<std::uint64_t> caught{0};
    bool returned = true;
    // An exception leaving a std::thread's function would call std::terminate.
    std::thread t([&] {
        returned = run_guarded(
            "thread", [] { throw std::logic_error("bug"); }, caught,
            [](auto, auto) { throw std::runtime_error("log broken"); });
    });
    t.join();
    EXPECT_FALSE(returned);
    EXPECT_EQ(caught.load(), 1u);
}

TEST(DaemonGuard, DescribeExceptionPtr) {
    EXPECT_EQ(retryguard::describe_exception(nullptr), "");
    EXPECT_EQ(retryguard::describe_exception(std::make_exception_ptr(std::runtime_error("x"))), "x");
    EXPECT_EQ(retryguard::describe_exception(std::make_exception_ptr(7)), "unknown exception");
}

TEST(WarningLimiter, OneLinePerIntervalWithTheSuppressedCountInTheNext) {
    WarningLimiter lim(1000ms);
    const auto t0 = WarningLimiter::Clock::time_point{} + 100h;
    std::uint64_t suppressed = 99;
    EXPECT_TRUE(lim.allow(suppressed, t0));
    EXPECT_EQ(suppressed, 0u);
    EXPECT_FALSE(lim.allow(suppressed, t0 + 10ms));
    EXPECT_FALSE(lim.allow(suppressed, t0 + 999ms));
    EXPECT_TRUE(lim.allow(suppressed, t0 + 1000ms));
    EXPECT_EQ(suppressed, 2u);
    EXPECT_EQ(lim.suppressed_total(), 2u);
}

TEST(WarningLimiter, SuppressedCountComesBackWhenTheLimiterOpensWithoutANewWarning) {
    WarningLimiter lim(1000ms);
    const auto t0 = WarningLimiter::Clock::time_point{} + 100h;
    std::uint64_t suppressed = 0;
    EXPECT_TRUE(lim.allow(suppressed, t0));
    for (int i = 0; i < 5; ++i) EXPECT_FALSE(lim.allow(suppressed, t0 + 100ms));
    EXPECT_EQ(lim.take_suppressed(t0 + 500ms), 0u);  // still closed: kept for later
    EXPECT_EQ(lim.take_suppressed(t0 + 1500ms), 5u);
    EXPECT_EQ(lim.take_suppressed(t0 + 3000ms), 0u);  // given once
    // Opened: the next warning is logged at once, and has nothing to report.
    EXPECT_TRUE(lim.allow(suppressed, t0 + 1600ms));
    EXPECT_EQ(suppressed, 0u);
    EXPECT_EQ(lim.suppressed_total(), 5u);
}

TEST(WarningLimiter, AtStopTheCountIsGivenEvenInsideTheInterval) {
    WarningLimiter lim(10s);
    const auto t0 = WarningLimiter::Clock::time_point{} + 100h;
    std::uint64_t suppressed = 0;
    EXPECT_TRUE(lim.allow(suppressed, t0));
    EXPECT_FALSE(lim.allow(suppressed, t0 + 1ms));
    EXPECT_FALSE(lim.allow(suppressed, t0 + 2ms));
    EXPECT_EQ(lim.take_suppressed(t0 + 3ms), 0u);
    EXPECT_EQ(lim.take_suppressed(t0 + 3ms, true), 2u);
    EXPECT_EQ(lim.take_suppressed(t0 + 3ms, true), 0u);
}
