// server.hpp -- retryguard-policyd's sockets: policy listeners (UNIX and
// loopback TCP), per-connection sessions, the metrics/health HTTP endpoint.
//
// Owns I/O, timeouts and threads only. Must never decide policy or parse the
// protocol itself: every request goes to the core (PolicyParser,
// PolicyService, PolicyDecider). Runs on one event-loop thread; a decider that
// may block runs on the worker pool, never on that thread.
#pragma once

// Boost 1.74's awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "retryguard/logging/logging.hpp"
#include "retryguard/policy/policy.hpp"
#include "retryguard/policy/policy_service.hpp"
#include "retryguard/rules/verdict_log.hpp"
#include "retryguard/runtime/daemon_guard.hpp"

namespace retryguard::policyd {

namespace asio = boost::asio;

// The daemon's own lines: the core's logging module (log.target, log.facility,
// log.ident + "/policyd", log.level as the least severity).
using Logger = logging::Sink;

struct ServerOptions {
    std::vector<std::string> listen;  // "unix:/path" or "tcp:127.0.0.1:10040" (port 0: any free port)
    unsigned unix_mode = 0660;
    std::string metrics;  // "127.0.0.1:9487" (metrics.listen), empty for none
    // metrics.allow_non_loopback: the configuration's explicit opt-in to serve
    // metrics on another address; without it only loopback is bound.
    bool metrics_allow_non_loopback = false;
    std::size_t metrics_max_connections = 16;  // further ones are closed at once
    // Owner and group of the UNIX sockets (policy.user/policy.group when
    // started as root); -1 keeps the creator's.
    long unix_uid = -1, unix_gid = -1;
    PolicyLimits limits;
    std::chrono::milliseconds idle_timeout{330'000};    // between requests (Postfix's max_idle is 300 s)
    std::chrono::milliseconds request_timeout{10'000};  // from a request's first byte to its last
    std::chrono::milliseconds decision_timeout{100};    // deadline for a decider that may block
    std::size_t max_connections = 4096;
    std::size_t max_pending_decisions = 1024;  // queued for the worker pool before failing open
    std::chrono::milliseconds drain_timeout{10'000};
};

class Server {
  public:
    Server(asio::io_context& io, ServerOptions options, PolicyService& service,
           std::shared_ptr<PolicyDecider> decider, asio::thread_pool& workers, Logger& log,
           VerdictLog& verdicts);
    ~Server();

    // Binds every listener; the endpoints actually bound (port 0 resolved)
    // come back as "policy <endpoint>" / "metrics <endpoint>" lines.
    Result<std::vector<std::string>> bind();
    void start();
    // SIGTERM: stop accepting, close idle connections, let each open request
    // finish; io.run() returns when the last connection is gone.
    void drain();
    bool draining() const noexcept { return draining_; }
    // Logs the count of every rate-limited warning dropped since its last line
    // once its limiter has opened again (a one-second tick calls this), and
    // everything still held when `at_stop`.
    void flush_suppressed(bool at_stop);
    // Logs an exception caught at the top of a thread, handler or coroutine
    // (rate-limited); the caller fails open. run_guarded(..., exceptions_caught(),
    // guard_report()) counts and reports; caught() does both for an exception_ptr.
    void report_exception(std::string_view where, std::string_view what);
    void caught(std::string_view where, const std::exception_ptr& e);
    GuardReport guard_report() {
        return [this](std::string_view where, std::string_view what) { report_exception(where, what); };
    }
    std::atomic<std::uint64_t>& exceptions_caught() noexcept { return exceptions_caught_; }
    // Series of the server itself (accept errors, back-offs, metrics
    // connections, exceptions caught, warnings suppressed) for /metrics.
    std::string render_metrics() const;

    struct Conn;

  private:
    template <typename Socket>
    asio::awaitable<void> session(Socket socket);
    template <typename Acceptor>
    asio::awaitable<void> accept_loop(Acceptor& acceptor);
    asio::awaitable<void> watchdog(std::shared_ptr<Conn> conn);
    asio::awaitable<void> decide_offloaded(const PolicyRequest& request, std::string& out);
    // The fail-open answer for `why` (errors.* chooses DUNNO or DEFER_IF_PERMIT)
    // and its rate-limited warning naming the verb sent.
    void fail_open(const PolicyRequest& request, FailOpenReason why, std::string& out);
    asio::awaitable<void> metrics_loop();
    asio::awaitable<void> http_session(asio::ip::tcp::socket socket);
    asio::awaitable<void> suppressed_tick();
    // Starts an accept loop; should it ever end by an exception, that is
    // counted and logged and the loop starts again 100 ms later: a listener
    // that stopped accepting would turn every Postfix lookup into a failure.
    template <typename Acceptor>
    void spawn_accept_loop(Acceptor& acceptor);
    void spawn_metrics_loop();
    void restart_later(std::function<void()> start);
    // Completion of a co_spawn'ed coroutine: an exception is counted and logged.
    std::function<void(std::exception_ptr)> guarded(std::string where);

    // What one acceptor does on accept errors: a warning when it starts to
    // fail, at most one more per 10 s while it keeps failing, a line when it
    // recovers; waits 100 ms, doubling up to 1 s, between failed accepts (an
    // EMFILE does not go away by retrying at once).
    struct AcceptState {
        const char* listener;        // "policy" or "metrics"
        std::uint64_t failures = 0;  // since the last success
        std::chrono::milliseconds backoff{0};
    };
    asio::awaitable<void> accept_failed(AcceptState& state, const boost::system::error_code& ec);
    void accept_succeeded(AcceptState& state);

    asio::io_context& io_;
    ServerOptions options_;
    PolicyService& service_;
    std::shared_ptr<PolicyDecider> decider_;
    asio::thread_pool& workers_;
    Logger& log_;
    VerdictLog& verdicts_;
    std::vector<std::unique_ptr<asio::ip::tcp::acceptor>> tcp_acceptors_;
    std::vector<std::unique_ptr<asio::local::stream_protocol::acceptor>> unix_acceptors_;
    std::vector<std::string> unix_paths_;
    std::unique_ptr<asio::ip::tcp::acceptor> metrics_acceptor_;
    std::unordered_set<Conn*> conns_;
    std::shared_ptr<std::atomic<std::size_t>> pending_decisions_;
    bool draining_ = false;
    std::size_t metrics_open_ = 0;

    // Rate-limited warnings (one line per second per kind; accept errors one
    // per 10 s), flushed by suppressed_tick() and at stop.
    WarningLimiter fail_open_log_;
    WarningLimiter malformed_log_;
    WarningLimiter connection_limit_log_;
    WarningLimiter metrics_limit_log_;
    WarningLimiter exception_log_;
    WarningLimiter accept_log_{std::chrono::seconds(10)};

    std::atomic<std::uint64_t> exceptions_caught_{0};
    std::uint64_t accept_errors_policy_ = 0, accept_errors_metrics_ = 0;
    std::uint64_t accept_backoffs_policy_ = 0, accept_backoffs_metrics_ = 0;
    std::uint64_t metrics_refused_ = 0;
};

}  // namespace retryguard::policyd
