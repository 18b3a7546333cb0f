// daemon_guard.hpp -- what the daemons (policyd, milter) use to stay up and
// quiet under hostile input: a guard for the top level of every thread and
// event-loop entry point, and a limiter for repeated warnings.
//
// Owns no I/O: the caller gives the logging function. Nothing here throws.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

namespace retryguard {

// Called with the entry point's name and the exception's text when a guarded
// entry point threw.
using GuardReport = std::function<void(std::string_view where, std::string_view what)>;

// Runs `fn` and catches whatever it throws: the exception is counted in
// `caught` and reported, and the caller carries on (fail open). Returns false
// when `fn` threw. A report that throws itself is swallowed: nothing leaves.
template <typename F>
bool run_guarded(std::string_view where, F&& fn, std::atomic<std::uint64_t>& caught,
                 const GuardReport& report) noexcept {
    std::string what;
    try {
        std::forward<F>(fn)();
        return true;
    } catch (const std::exception& e) {
        try {
            what = e.what();
        } catch (...) {
        }
    } catch (...) {
        what = "unknown exception";
    }
    caught.fetch_add(1, std::memory_order_relaxed);
    try {
        if (report) report(where, what);
    } catch (...) {
    }
    return false;
}

// The text of an exception_ptr (as asio's co_spawn completion gives it).
std::string describe_exception(const std::exception_ptr& e) noexcept;

// At most one warning of a kind per `interval`; the others are counted. The
// count dropped since the last line comes back when the limiter opens again:
// with the next allowed line (allow), or on its own once the interval has
// passed with nothing new (take_suppressed, from a periodic tick and at stop),
// so no count is lost. Safe to share between threads.
class WarningLimiter {
  public:
    using Clock = std::chrono::steady_clock;
    explicit WarningLimiter(std::chrono::milliseconds interval = std::chrono::seconds(1)) noexcept
        : interval_(interval) {}

    // True: log this warning now, with `suppressed` lines dropped before it.
    bool allow(std::uint64_t& suppressed, Clock::time_point now = Clock::now()) noexcept;
    // The lines dropped since the last one logged, once the interval since it
    // has passed (always when `at_stop`); 0 otherwise. Resets the count.
    std::uint64_t take_suppressed(Clock::time_point now = Clock::now(), bool at_stop = false) noexcept;
    // Every line ever dropped.
    std::uint64_t suppressed_total() const noexcept;

  private:
    mutable std::mutex mu_;
    std::chrono::milliseconds interval_;
    Clock::time_point last_{};
    bool logged_ = false;
    std::uint64_t suppressed_ = 0;
    std::uint64_t total_ = 0;
};

}  // namespace retryguard
