// identity_filter_feed.hpp -- keeps an IdentityFilter (identity_filter.hpp)
// complete while a daemon runs: a thread of its own rebuilds it from the
// ledger's keys every `rescan`, which is how keys written by other processes
// (the follower's `message-id=` lines) reach it. With a change stream
// (Ledger::open_identity_stream; Redis: other hosts' milters and followers) the
// same thread reads the stream between rebuilds, so their keys arrive within
// milliseconds; when the stream breaks, the filter is invalidated (every
// message looked up: fail open) until a new mark and scan succeed.
//
// Owns no ledger and no I/O of its own: the caller gives the scan, the stream
// and where lines go. Never throws; an exception from the scan or the stream
// is caught at the top of its thread, counted, and the loop starts again.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "retryguard/identity/identity_filter.hpp"
#include "retryguard/ledger/ledger.hpp"
#include "retryguard/logging/logging.hpp"

namespace retryguard {

class IdentityFilterFeed {
  public:
    using Log = std::function<void(logging::Severity, const std::string&)>;

    struct Options {
        std::chrono::milliseconds rescan{std::chrono::seconds(60)};  // > 0
        // A stream read waits this long for a change: how long stop() may wait.
        std::chrono::milliseconds stream_wait{100};
        // Between attempts to mark and scan again after a failure.
        std::chrono::milliseconds retry{1000};
    };

    // scan: the ledger's keys (Ledger::for_each_open_identity); used when there
    // is no stream (with one, its own scan() reads them on its connection).
    // stream: null when the ledger has none. log: the rebuilds' and the
    // stream's changes of state (may be empty).
    IdentityFilterFeed(IdentityFilter& filter, IdentityFilter::Scan scan,
                       std::unique_ptr<IdentityStream> stream, Options options, Log log);
    ~IdentityFilterFeed();
    IdentityFilterFeed(const IdentityFilterFeed&) = delete;
    IdentityFilterFeed& operator=(const IdentityFilterFeed&) = delete;

    // The first rebuild (with a stream: mark, then scan), before the first
    // message so that its lookups are filtered too; then the thread.
    void start();
    // Ends the thread (waits at most about stream_wait or one rebuild).
    void stop();

    bool has_stream() const noexcept { return stream_ != nullptr; }
    // Failed rebuilds (with a stream: failures of the stream, once each) and
    // loops that threw.
    std::uint64_t errors() const noexcept { return errors_; }
    std::uint64_t exceptions_caught() const noexcept { return exceptions_; }

  private:
    bool rebuild();
    bool mark_and_rebuild();
    void stream_failed(const Error& e);
    template <typename Loop>
    void run_guarded_loop(Loop loop);
    bool wait(std::chrono::milliseconds d);
    void rescan_loop();
    void follow_loop();
    void log(logging::Severity s, const std::string& text) const;

    IdentityFilter& filter_;
    IdentityFilter::Scan scan_;
    std::unique_ptr<IdentityStream> stream_;
    Options options_;
    Log log_;
    std::atomic<std::uint64_t> errors_{0}, exceptions_{0};
    bool failing_ = false, first_ = true;  // rebuild()'s, which runs on one thread at a time
    // the thread's, once it runs (start()'s before)
    bool stream_ok_ = false, stream_failing_ = false;
    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace retryguard
