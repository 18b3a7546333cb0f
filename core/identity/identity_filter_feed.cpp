// identity_filter_feed.cpp -- keeps an IdentityFilter complete: rebuilds on a
// thread of its own, and the ledger's change stream between them (see
// identity_filter_feed.hpp). Fail open throughout: whenever keys may have been
// missed the filter is invalidated, so every message is looked up.
#include "retryguard/identity/identity_filter_feed.hpp"

#include <fmt/format.h>

#include "retryguard/runtime/daemon_guard.hpp"

namespace retryguard {

using logging::Severity;

IdentityFilterFeed::IdentityFilterFeed(IdentityFilter& filter, IdentityFilter::Scan scan,
                                       std::unique_ptr<IdentityStream> stream, Options options, Log log)
    : filter_(filter),
      scan_(std::move(scan)),
      stream_(std::move(stream)),
      options_(options),
      log_(std::move(log)) {}

IdentityFilterFeed::~IdentityFilterFeed() {
    stop();
}

void IdentityFilterFeed::start() {
    if (thread_.joinable()) return;
    if (stream_) {
        stream_ok_ = mark_and_rebuild();
        thread_ = std::thread([this] { run_guarded_loop([this] { follow_loop(); }); });
    } else {
        rebuild();
        thread_ = std::thread([this] { run_guarded_loop([this] { rescan_loop(); }); });
    }
}

void IdentityFilterFeed::stop() {
    {
        std::lock_guard lock(mu_);
        stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
}

void IdentityFilterFeed::log(Severity s, const std::string& text) const {
    if (log_) log_(s, text);
}

bool IdentityFilterFeed::rebuild() {
    auto t0 = std::chrono::steady_clock::now();
    // with a stream, on its connection: the lookups keep theirs to themselves
    auto r = filter_.rebuild(
        [this](const IdentityFilter::Visitor& v) { return stream_ ? stream_->scan(v) : scan_(v); });
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    if (!r) {
        // with a stream, counted once per failure of the stream (stream_failed)
        if (!stream_) ++errors_;
        if (!failing_)
            log(Severity::warning,
                fmt::format("identity filter: rebuild failed, every message is looked up until one "
                            "succeeds: {}",
                            r.error().message));
        failing_ = true;
        return false;
    }
    if (failing_ || first_)
        log(Severity::info, fmt::format("identity filter: {} keys read in {} ms", *r, ms.count()));
    failing_ = first_ = false;
    return true;
}

// The thread's top level: a loop that throws counts as a failed rebuild (the
// filter is not used: every message is looked up) and starts again.
template <typename Loop>
void IdentityFilterFeed::run_guarded_loop(Loop loop) {
    const GuardReport report = [this](std::string_view where, std::string_view what) {
        log(Severity::error, fmt::format("{}: caught exception: {}; carrying on (fail-open)", where, what));
    };
    while (!run_guarded("identity filter", loop, exceptions_, report)) {
        filter_.invalidate();
        ++errors_;
        stream_ok_ = false;
        if (wait(options_.retry)) return;
    }
}

// Sleeps up to d; true when stopping.
bool IdentityFilterFeed::wait(std::chrono::milliseconds d) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, d, [this] { return stop_; });
}

void IdentityFilterFeed::rescan_loop() {
    while (!wait(options_.rescan)) rebuild();
}

// Without a stream the ledger's keys are read every rescan. With one: a mark,
// then a scan, then every change after the mark as it comes; a broken stream
// (or failed mark) invalidates the filter, logged once per change of state,
// and the mark and scan are tried again every retry interval.
bool IdentityFilterFeed::mark_and_rebuild() {
    auto st = stream_->mark();
    if (!st) {
        stream_failed(st.error());
        return false;
    }
    if (rebuild()) return true;
    stream_failed(make_error(ErrorKind::unavailable, "the scan after the mark failed"));
    return false;
}

// Counted and logged once per failure, not per retry: a Redis down for an hour
// is one error, as it is one state of the filter.
void IdentityFilterFeed::stream_failed(const Error& e) {
    filter_.invalidate();
    if (!stream_failing_) {
        ++errors_;
        log(Severity::warning,
            fmt::format("identity filter: change stream failed, every message is looked up until it is "
                        "read again: {}",
                        e.message));
    }
    stream_failing_ = true;
}

void IdentityFilterFeed::follow_loop() {
    auto next_rebuild = std::chrono::steady_clock::now() + options_.rescan;
    for (;;) {
        {
            std::lock_guard lock(mu_);
            if (stop_) return;
        }
        if (!stream_ok_ || std::chrono::steady_clock::now() >= next_rebuild) {
            stream_ok_ = mark_and_rebuild();
            next_rebuild = std::chrono::steady_clock::now() + options_.rescan;
            if (!stream_ok_) {
                if (wait(options_.retry)) return;
                continue;
            }
            if (stream_failing_) log(Severity::info, "identity filter: change stream read again");
            stream_failing_ = false;
        }
        auto st = stream_->read(options_.stream_wait, [this](std::string_view mid, std::string_view fp) {
            filter_.add_normalised(mid, fp);
        });
        if (!st) {
            stream_failed(st.error());
            stream_ok_ = false;
        }
    }
}

}  // namespace retryguard
