// daemon_guard.cpp -- the thread guard's helpers and the warning limiter
// (see daemon_guard.hpp).
#include "retryguard/runtime/daemon_guard.hpp"

namespace retryguard {

std::string describe_exception(const std::exception_ptr& e) noexcept {
    if (!e) return {};
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& ex) {
        try {
            return ex.what();
        } catch (...) {
        }
    } catch (...) {
    }
    return "unknown exception";
}

bool WarningLimiter::allow(std::uint64_t& suppressed, Clock::time_point now) noexcept {
    std::lock_guard lock(mu_);
    if (logged_ && now - last_ < interval_) {
        ++suppressed_;
        ++total_;
        return false;
    }
    logged_ = true;
    last_ = now;
    suppressed = suppressed_;
    suppressed_ = 0;
    return true;
}

std::uint64_t WarningLimiter::take_suppressed(Clock::time_point now, bool at_stop) noexcept {
    std::lock_guard lock(mu_);
    if (suppressed_ == 0 || (!at_stop && now - last_ < interval_)) return 0;
    const std::uint64_t n = suppressed_;
    suppressed_ = 0;
    // The limiter opened: the next warning is logged at once.
    logged_ = false;
    return n;
}

std::uint64_t WarningLimiter::suppressed_total() const noexcept {
    std::lock_guard lock(mu_);
    return total_;
}

}  // namespace retryguard
