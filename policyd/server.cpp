// server.cpp -- listeners, sessions, timeouts and the metrics endpoint of
// retryguard-policyd.
//
// One coroutine per connection reads whatever bytes arrive, lets the core
// parser cut them into requests (several per read when Postfix pipelines),
// answers each in order and writes all answers of one read at once. A
// per-connection watchdog enforces the idle and request timeouts without a
// timer syscall per request. Must never block the event loop: deciders that
// may block run on the worker pool under a deadline, and any failure answers
// DUNNO (fail-open), counted and logged.
#include "server.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include <fmt/format.h>

namespace retryguard::policyd {

namespace beast = boost::beast;
namespace http = beast::http;
using asio::awaitable;
using asio::use_awaitable;
using boost::system::error_code;

namespace {

// One warning (or error) through its limiter: written with the count of the
// lines held back since the last one, or only counted. The text is made only
// when the line is written: under a flood most are not.
template <typename Text>
void limited_line(Logger& log, WarningLimiter& limiter, Text text, bool error = false) {
    std::uint64_t suppressed = 0;
    if (!limiter.allow(suppressed)) return;
    const std::string line = fmt::format("{}; {} similar lines suppressed", text(), suppressed);
    if (error)
        log.error(line);
    else
        log.warning(line);
}

}  // namespace

// ---------------------------------------------------------------- sessions

struct Server::Conn {
    explicit Conn(const asio::any_io_executor& ex) : timer(ex) {}
    asio::steady_timer timer;
    PolicyClock::time_point deadline;
    std::function<void()> close;  // closes the session's socket
    bool open = true;
    bool idle = true;  // between requests: may be closed at once when draining
    bool timed_out = false;
};

Server::Server(asio::io_context& io, ServerOptions options, PolicyService& service,
               std::shared_ptr<PolicyDecider> decider, asio::thread_pool& workers, Logger& log,
               VerdictLog& verdicts)
    : io_(io),
      options_(std::move(options)),
      service_(service),
      decider_(std::move(decider)),
      workers_(workers),
      log_(log),
      verdicts_(verdicts),
      pending_decisions_(std::make_shared<std::atomic<std::size_t>>(0)) {}

Server::~Server() {
    for (const auto& path : unix_paths_) ::unlink(path.c_str());
}

namespace {

std::string peer_of(const asio::ip::tcp::socket& s) {
    error_code ec;
    const auto ep = s.remote_endpoint(ec);
    return ec ? std::string("unknown") : fmt::format("{}:{}", ep.address().to_string(), ep.port());
}
std::string peer_of(const asio::local::stream_protocol::socket&) {
    return "local";
}

// One line per answer other than DUNNO, in the project's verdict format
// (docs/verdicts.md), keyed by queue ID like Postfix's own lines; NOQUEUE, as
// Postfix writes, at the first RCPT before the queue file exists.
void log_verdict(VerdictLog& verdicts, const PolicyRequest& r, const Decision& d) {
    if (d.kind == ActionKind::dunno) return;
    const std::string_view qid = r.get(PolicyAttr::queue_id);
    Verdict v;
    v.key = qid.empty() ? "NOQUEUE" : std::string(qid);
    v.name = "policy_" + std::string(to_string(d.kind));
    v.add("action", d.action)
        .add("recipient", std::string(r.get(PolicyAttr::recipient)))
        .add("destination", std::string(r.recipient_domain()))
        .add("stage", std::string(r.get(PolicyAttr::protocol_state)))
        .add("client", std::string(r.get(PolicyAttr::client_address)))
        .add("instance", std::string(r.get(PolicyAttr::instance)));
    verdicts.write(v);
}

}  // namespace

awaitable<void> Server::watchdog(std::shared_ptr<Conn> conn) {
    error_code ec;
    while (conn->open) {
        conn->timer.expires_at(conn->deadline);
        co_await conn->timer.async_wait(asio::redirect_error(use_awaitable, ec));
        if (!conn->open) break;
        if (PolicyClock::now() >= conn->deadline) {
            conn->timed_out = true;
            if (conn->close) conn->close();
            break;
        }
    }
}

awaitable<void> Server::decide_offloaded(const PolicyRequest& request, std::string& out) {
    if (pending_decisions_->load(std::memory_order_relaxed) >= options_.max_pending_decisions) {
        service_.answer_fail_open(out, FailOpenReason::overload);
        limited_line(log_, fail_open_log_, [&] {
            return fmt::format("fail-open (overload: {} decisions pending) for recipient=<{}>",
                               options_.max_pending_decisions, request.get(PolicyAttr::recipient));
        });
        co_return;
    }
    struct State {
        explicit State(const asio::any_io_executor& ex) : timer(ex) {}
        asio::steady_timer timer;
        std::optional<Decision> result;
        bool failed = false;
    };
    auto state = std::make_shared<State>(co_await asio::this_coro::executor);
    const auto deadline = PolicyClock::now() + options_.decision_timeout;
    state->timer.expires_at(deadline);
    // The worker gets its own copy: on a timeout this coroutine moves on and
    // the parser reuses `request` while the worker may still read it.
    auto copy = std::make_shared<const PolicyRequest>(request);
    pending_decisions_->fetch_add(1, std::memory_order_relaxed);
    // A worker thread's top level: nothing may leave it (that would end the
    // process). Should the worker fail, the timer runs out and the answer is
    // the fail-open one.
    asio::post(workers_, [this, state, copy, deadline, decider = decider_, service = &service_,
                          pending = pending_decisions_, loop = io_.get_executor()] {
        run_guarded(
            "decision worker",
            [&] {
                bool failed = false;
                Decision d = service->decide_contained(*decider, *copy, deadline, failed);
                pending->fetch_sub(1, std::memory_order_relaxed);
                asio::post(loop, [state, d = std::move(d), failed]() mutable {
                    if (failed)
                        state->failed = true;
                    else
                        state->result = std::move(d);
                    state->timer.cancel();
                });
            },
            exceptions_caught_, guard_report());
    });
    // Only this thread runs the completion above, and it cannot run before
    // this wait starts, so a cancel is never lost.
    error_code ec;
    co_await state->timer.async_wait(asio::redirect_error(use_awaitable, ec));
    if (state->result) {
        service_.answer(out, *state->result);
        log_verdict(verdicts_, request, *state->result);
        co_return;
    }
    fail_open(request, state->failed ? FailOpenReason::decider_error : FailOpenReason::timeout, out);
}

void Server::fail_open(const PolicyRequest& request, FailOpenReason why, std::string& out) {
    const std::string_view verb = service_.answer_fail_open(out, why);
    limited_line(log_, fail_open_log_, [&] {
        return fmt::format("fail-open ({}) for recipient=<{}>: answered {}", to_string(why),
                           request.get(PolicyAttr::recipient), verb);
    });
}

template <typename Socket>
awaitable<void> Server::session(Socket socket) {
    auto conn = std::make_shared<Conn>(socket.get_executor());
    conn->close = [&socket] {
        error_code ignored;
        socket.close(ignored);
    };
    conn->deadline = PolicyClock::now() + options_.idle_timeout;
    conns_.insert(conn.get());
    service_.metrics().connection_opened();
    // Runs however the session ends, an exception included, so the drain
    // never waits for a connection that is gone.
    struct Cleanup {
        Server& server;
        Conn& conn;
        ~Cleanup() {
            conn.open = false;
            if (conn.close) conn.close();
            conn.close = nullptr;
            conn.timer.cancel();
            server.conns_.erase(&conn);
            server.service_.metrics().connection_closed();
            if (server.draining_ && server.conns_.empty()) server.io_.stop();
        }
    } cleanup{*this, *conn};
    asio::co_spawn(io_, watchdog(conn), guarded("connection watchdog"));

    PolicyParser parser(options_.limits);
    std::string out;
    out.reserve(256);
    char buf[16384];
    bool request_deadline_set = false;
    std::uint64_t completed = 0;         // requests answered on this connection
    std::uint64_t deadline_request = 0;  // `completed` when the request deadline was set
    for (;;) {
        if (draining_ && !parser.in_request()) break;
        error_code ec;
        const std::size_t n =
            co_await socket.async_read_some(asio::buffer(buf), asio::redirect_error(use_awaitable, ec));
        if (ec) {
            if (conn->timed_out) {
                service_.metrics().idle_timeout();
                log_.info(fmt::format("closing connection from {}: {} timeout", peer_of(socket),
                                      parser.in_request() ? "request" : "idle"));
            }
            break;
        }
        conn->idle = false;  // until every request of this read is answered
        std::string_view in(buf, n);
        out.clear();
        bool malformed = false;
        for (;;) {
            const PolicyParser::State st = parser.feed(in);
            if (st == PolicyParser::State::need_more) break;
            if (st == PolicyParser::State::error) {
                malformed = true;
                service_.metrics().malformed(parser.error());
                limited_line(log_, malformed_log_, [&] {
                    return fmt::format("malformed policy request from {}: {}; closing the connection",
                                       peer_of(socket), to_string(parser.error()));
                });
                break;
            }
            ++completed;
            const auto started = PolicyClock::now();
            const PolicyRequest& request = parser.request();
            if (!service_.wants_decision(request)) {
                service_.answer_dunno(out);
            } else if (!decider_->may_block()) {
                bool failed = false;
                const Decision d = service_.decide_contained(*decider_, request,
                                                             started + options_.decision_timeout, failed);
                if (failed) {
                    fail_open(request, FailOpenReason::decider_error, out);
                } else {
                    service_.answer(out, d);
                    log_verdict(verdicts_, request, d);
                }
            } else {
                co_await decide_offloaded(request, out);
            }
            service_.metrics().latency(static_cast<std::uint64_t>(
                std::chrono::duration_cast<std::chrono::microseconds>(PolicyClock::now() - started).count()));
        }
        // Answers to the requests before a malformed one still go out.
        if (!out.empty()) {
            co_await asio::async_write(socket, asio::buffer(out), asio::redirect_error(use_awaitable, ec));
            if (ec) break;
        }
        if (malformed) break;
        const auto now = PolicyClock::now();
        if (parser.in_request()) {
            // A new partial request (possibly after complete ones in the same
            // read) gets its own deadline.
            if (!request_deadline_set || deadline_request != completed) {
                const bool from_idle = !request_deadline_set;
                request_deadline_set = true;
                deadline_request = completed;
                conn->deadline = now + options_.request_timeout;
                // From the idle deadline the deadline usually moves earlier:
                // wake the watchdog to re-arm. Later moves it picks up lazily.
                if (from_idle) conn->timer.cancel();
            }
        } else {
            conn->idle = true;
            request_deadline_set = false;
            conn->deadline = now + options_.idle_timeout;  // the watchdog re-arms lazily
        }
    }
}

std::function<void(std::exception_ptr)> Server::guarded(std::string where) {
    return [this, where = std::move(where)](std::exception_ptr e) {
        if (e) caught(where, e);
    };
}

void Server::caught(std::string_view where, const std::exception_ptr& e) {
    exceptions_caught_.fetch_add(1, std::memory_order_relaxed);
    report_exception(where, describe_exception(e));
}

void Server::report_exception(std::string_view where, std::string_view what) {
    limited_line(
        log_, exception_log_,
        [&] { return fmt::format("{}: caught exception: {}; carrying on (fail-open)", where, what); }, true);
}

namespace {

bool out_of_descriptors(const error_code& ec) {
    return ec == asio::error::no_descriptors || ec == boost::system::errc::too_many_files_open_in_system ||
           ec == asio::error::no_buffer_space || ec == asio::error::no_memory;
}

}  // namespace

awaitable<void> Server::accept_failed(AcceptState& state, const error_code& ec) {
    const bool policy = std::string_view(state.listener) == "policy";
    ++(policy ? accept_errors_policy_ : accept_errors_metrics_);
    // A connection aborted before accept() is the client's business: retry at once.
    if (ec == asio::error::connection_aborted) co_return;
    state.backoff = state.backoff.count() == 0 ? std::chrono::milliseconds(100)
                                               : std::min(state.backoff * 2, std::chrono::milliseconds(1000));
    ++(policy ? accept_backoffs_policy_ : accept_backoffs_metrics_);
    if (++state.failures == 1) {
        std::uint64_t ignored_count = 0;
        accept_log_.allow(ignored_count);  // the next line about it comes 10 s later at the earliest
        log_.warning(
            fmt::format("{} accept: {}{}; retrying with back-off (100 ms up to 1 s), further errors "
                        "logged at most every 10 s",
                        state.listener, ec.message(), out_of_descriptors(ec) ? " (out of descriptors)" : ""));
    } else {
        limited_line(log_, accept_log_, [&] {
            return fmt::format("{} accept still failing: {} ({} failures so far)", state.listener,
                               ec.message(), state.failures);
        });
    }
    error_code ignored;
    asio::steady_timer pause(io_, state.backoff);
    co_await pause.async_wait(asio::redirect_error(use_awaitable, ignored));
}

void Server::accept_succeeded(AcceptState& state) {
    if (state.failures > 0) {
        const std::uint64_t held = accept_log_.take_suppressed(PolicyClock::now(), true);
        log_.info(fmt::format("{} accept recovered after {} failure(s); {} similar lines suppressed",
                              state.listener, state.failures, held));
    }
    state.failures = 0;
    state.backoff = std::chrono::milliseconds(0);
}

template <typename Acceptor>
awaitable<void> Server::accept_loop(Acceptor& acceptor) {
    AcceptState state{"policy"};
    for (;;) {
        error_code ec;
        auto socket = co_await acceptor.async_accept(asio::redirect_error(use_awaitable, ec));
        if (draining_ || !acceptor.is_open()) co_return;
        if (ec) {
            co_await accept_failed(state, ec);
            continue;
        }
        accept_succeeded(state);
        if (conns_.size() >= options_.max_connections) {
            service_.metrics().connection_refused();
            limited_line(log_, connection_limit_log_, [&] {
                return fmt::format("connection limit {} reached: refusing a connection",
                                   options_.max_connections);
            });
            continue;
        }
        if constexpr (std::is_same_v<decltype(socket), asio::ip::tcp::socket>)
            socket.set_option(asio::ip::tcp::no_delay(true), ec);
        asio::co_spawn(io_, session(std::move(socket)), guarded("policy connection"));
    }
}

// ----------------------------------------------------------------- metrics

awaitable<void> Server::http_session(asio::ip::tcp::socket socket) {
    // metrics_loop() counted this connection before spawning it.
    struct Release {
        std::size_t& open;
        ~Release() { --open; }
    } release{metrics_open_};
    asio::steady_timer guard(io_, std::chrono::seconds(5));
    guard.async_wait([&socket](const error_code& ec) {
        if (!ec) {
            error_code ignored;
            socket.close(ignored);
        }
    });
    beast::flat_buffer buffer(8192);
    http::request_parser<http::empty_body> parser;
    parser.header_limit(8192);
    error_code ec;
    co_await http::async_read(socket, buffer, parser, asio::redirect_error(use_awaitable, ec));
    if (!ec) {
        const auto& req = parser.get();
        http::response<http::string_body> res;
        res.version(req.version());
        res.keep_alive(false);
        const std::string_view target(req.target().data(), req.target().size());
        if (req.method() != http::verb::get && req.method() != http::verb::head) {
            res.result(http::status::method_not_allowed);
            res.body() = "GET only\n";
        } else if (target == "/metrics") {
            res.result(http::status::ok);
            res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
            res.body() = service_.metrics().render_prometheus();
            res.body() += fmt::format(
                "# HELP retryguard_verdict_log_failures_total Verdict lines that could not be written.\n"
                "# TYPE retryguard_verdict_log_failures_total counter\n"
                "retryguard_verdict_log_failures_total {}\n",
                verdicts_.failures());
            res.body() += render_metrics();
        } else if (target == "/health") {
            const auto problems = service_.metrics().problems();
            const bool sick = problems && !problems->empty();
            res.result(draining_ || sick ? http::status::service_unavailable : http::status::ok);
            res.set(http::field::content_type, "text/plain");
            res.body() = draining_ ? "draining\n" : sick ? "unhealthy\n" + *problems : "ok\n";
        } else {
            res.result(http::status::not_found);
            res.body() = "try /metrics or /health\n";
        }
        res.prepare_payload();
        co_await http::async_write(socket, res, asio::redirect_error(use_awaitable, ec));
        socket.shutdown(asio::ip::tcp::socket::shutdown_send, ec);
    }
    guard.cancel();
}

awaitable<void> Server::metrics_loop() {
    AcceptState state{"metrics"};
    for (;;) {
        error_code ec;
        auto socket = co_await metrics_acceptor_->async_accept(asio::redirect_error(use_awaitable, ec));
        if (draining_ || !metrics_acceptor_->is_open()) co_return;
        if (ec) {
            co_await accept_failed(state, ec);
            continue;
        }
        accept_succeeded(state);
        // A scraper needs one connection at a time; anything beyond the bound
        // is closed at once so it cannot hold descriptors the policy side needs.
        if (metrics_open_ >= options_.metrics_max_connections) {
            ++metrics_refused_;
            limited_line(log_, metrics_limit_log_, [&] {
                return fmt::format("metrics connection limit {} reached: refusing a connection",
                                   options_.metrics_max_connections);
            });
            socket.close(ec);
            continue;
        }
        ++metrics_open_;  // now, not when the coroutine first runs: the next accept sees it
        asio::co_spawn(io_, http_session(std::move(socket)), guarded("metrics connection"));
    }
}

awaitable<void> Server::suppressed_tick() {
    asio::steady_timer tick(io_);
    while (!draining_) {
        tick.expires_after(std::chrono::seconds(1));
        error_code ec;
        co_await tick.async_wait(asio::redirect_error(use_awaitable, ec));
        if (draining_) break;
        flush_suppressed(false);
    }
}

void Server::flush_suppressed(bool at_stop) {
    const auto now = PolicyClock::now();
    const std::pair<const char*, WarningLimiter*> limiters[] = {
        {"fail-open", &fail_open_log_},
        {"malformed-request", &malformed_log_},
        {"connection-limit", &connection_limit_log_},
        {"metrics-connection-limit", &metrics_limit_log_},
        {"exception", &exception_log_},
        {"accept-error", &accept_log_},
    };
    for (const auto& [kind, limiter] : limiters) {
        const std::uint64_t n = limiter->take_suppressed(now, at_stop);
        if (n > 0)
            log_.warning(
                fmt::format("{} similar {} warning(s) suppressed{}", n, kind, at_stop ? " (at stop)" : ""));
    }
}

std::string Server::render_metrics() const {
    const std::uint64_t suppressed = fail_open_log_.suppressed_total() + malformed_log_.suppressed_total() +
                                     connection_limit_log_.suppressed_total() +
                                     metrics_limit_log_.suppressed_total() +
                                     exception_log_.suppressed_total() + accept_log_.suppressed_total();
    return fmt::format(
        "# HELP retryguard_policyd_accept_errors_total Failed accept() calls (EMFILE and others), by "
        "listener.\n"
        "# TYPE retryguard_policyd_accept_errors_total counter\n"
        "retryguard_policyd_accept_errors_total{{listener=\"policy\"}} {}\n"
        "retryguard_policyd_accept_errors_total{{listener=\"metrics\"}} {}\n"
        "# HELP retryguard_policyd_accept_backoffs_total Pauses after a failed accept(), by listener.\n"
        "# TYPE retryguard_policyd_accept_backoffs_total counter\n"
        "retryguard_policyd_accept_backoffs_total{{listener=\"policy\"}} {}\n"
        "retryguard_policyd_accept_backoffs_total{{listener=\"metrics\"}} {}\n"
        "# HELP retryguard_policyd_metrics_connections_refused_total Metrics connections beyond "
        "metrics.max_connections.\n"
        "# TYPE retryguard_policyd_metrics_connections_refused_total counter\n"
        "retryguard_policyd_metrics_connections_refused_total {}\n"
        "# HELP retryguard_policyd_exceptions_caught_total Exceptions caught at the top of a thread, "
        "handler or coroutine (failed open).\n"
        "# TYPE retryguard_policyd_exceptions_caught_total counter\n"
        "retryguard_policyd_exceptions_caught_total {}\n"
        "# HELP retryguard_policyd_log_suppressed_total Warning lines dropped by the rate limits.\n"
        "# TYPE retryguard_policyd_log_suppressed_total counter\n"
        "retryguard_policyd_log_suppressed_total {}\n",
        accept_errors_policy_, accept_errors_metrics_, accept_backoffs_policy_, accept_backoffs_metrics_,
        metrics_refused_, exceptions_caught_.load(std::memory_order_relaxed), suppressed);
}

// ------------------------------------------------------------- listeners

namespace {

Result<asio::ip::tcp::endpoint> loopback_endpoint(std::string_view spec, bool allow_non_loopback = false) {
    const auto colon = spec.rfind(':');
    if (colon == std::string_view::npos) return make_error(ErrorKind::config, "expected HOST:PORT");
    std::string host(spec.substr(0, colon));
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (host == "localhost") host = "127.0.0.1";  // as the configuration check accepts it
    error_code ec;
    const auto addr = asio::ip::make_address(host, ec);
    if (ec) return make_error(ErrorKind::config, "bad address '" + host + "'");
    // The policy protocol has no authentication: loopback only.
    if (!addr.is_loopback() && !allow_non_loopback)
        return make_error(ErrorKind::config,
                          "'" + host + "' is not a loopback address (use 127.0.0.1 or ::1)");
    unsigned long port = 0;
    const std::string port_text(spec.substr(colon + 1));
    char* end = nullptr;
    port = std::strtoul(port_text.c_str(), &end, 10);
    if (port_text.empty() || *end != '\0' || port > 65535)
        return make_error(ErrorKind::config, "bad port '" + port_text + "'");
    return asio::ip::tcp::endpoint(addr, static_cast<unsigned short>(port));
}

std::string to_string(const asio::ip::tcp::endpoint& ep) {
    return ep.address().is_v6() ? fmt::format("[{}]:{}", ep.address().to_string(), ep.port())
                                : fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

}  // namespace

Result<std::vector<std::string>> Server::bind() {
    std::vector<std::string> bound;
    try {
        for (const std::string& spec : options_.listen) {
            if (spec.rfind("tcp:", 0) == 0) {
                auto ep = loopback_endpoint(std::string_view(spec).substr(4));
                if (!ep) return make_error(ErrorKind::config, spec + ": " + ep.error().message);
                auto acc = std::make_unique<asio::ip::tcp::acceptor>(io_);
                acc->open(ep->protocol());
                acc->set_option(asio::socket_base::reuse_address(true));
                acc->bind(*ep);
                acc->listen(asio::socket_base::max_listen_connections);
                bound.push_back("policy tcp:" + to_string(acc->local_endpoint()));
                tcp_acceptors_.push_back(std::move(acc));
            } else if (spec.rfind("unix:", 0) == 0) {
                const std::string path = spec.substr(5);
                if (path.empty() || path.size() >= sizeof(sockaddr_un::sun_path))
                    return make_error(ErrorKind::config, spec + ": bad socket path");
                struct stat st {};
                // A stale socket from an earlier run; never remove anything else.
                if (::lstat(path.c_str(), &st) == 0) {
                    if (!S_ISSOCK(st.st_mode))
                        return make_error(ErrorKind::config, spec + ": exists and is not a socket");
                    ::unlink(path.c_str());
                }
                auto acc = std::make_unique<asio::local::stream_protocol::acceptor>(io_);
                acc->open();
                acc->bind(asio::local::stream_protocol::endpoint(path));
                unix_paths_.push_back(path);
                if (::chmod(path.c_str(), options_.unix_mode) != 0)
                    return make_error(ErrorKind::io, spec + ": chmod failed");
                if ((options_.unix_uid >= 0 || options_.unix_gid >= 0) &&
                    ::chown(path.c_str(), static_cast<uid_t>(options_.unix_uid),
                            static_cast<gid_t>(options_.unix_gid)) != 0)
                    return make_error(ErrorKind::io, spec + ": chown failed: " + std::strerror(errno));
                acc->listen(asio::socket_base::max_listen_connections);
                bound.push_back("policy unix:" + path);
                unix_acceptors_.push_back(std::move(acc));
            } else {
                return make_error(ErrorKind::config, spec + ": expected unix:/path or tcp:HOST:PORT");
            }
        }
        if (!options_.metrics.empty()) {
            auto ep = loopback_endpoint(options_.metrics, options_.metrics_allow_non_loopback);
            if (!ep)
                return make_error(ErrorKind::config,
                                  "metrics " + options_.metrics + ": " + ep.error().message);
            metrics_acceptor_ = std::make_unique<asio::ip::tcp::acceptor>(io_);
            metrics_acceptor_->open(ep->protocol());
            metrics_acceptor_->set_option(asio::socket_base::reuse_address(true));
            metrics_acceptor_->bind(*ep);
            metrics_acceptor_->listen();
            bound.push_back("metrics " + to_string(metrics_acceptor_->local_endpoint()));
        }
    } catch (const boost::system::system_error& e) {
        return make_error(ErrorKind::io, std::string("listen: ") + e.what());
    }
    if (tcp_acceptors_.empty() && unix_acceptors_.empty())
        return make_error(ErrorKind::config, "nothing to listen on (set policy.socket)");
    return bound;
}

void Server::restart_later(std::function<void()> start) {
    auto pause = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(100));
    pause->async_wait([this, pause, start = std::move(start)](const error_code& ec) {
        if (!ec && !draining_) start();
    });
}

template <typename Acceptor>
void Server::spawn_accept_loop(Acceptor& acceptor) {
    asio::co_spawn(io_, accept_loop(acceptor), [this, &acceptor](std::exception_ptr e) {
        if (!e) return;
        caught("policy acceptor", e);
        if (acceptor.is_open()) restart_later([this, &acceptor] { spawn_accept_loop(acceptor); });
    });
}

void Server::spawn_metrics_loop() {
    asio::co_spawn(io_, metrics_loop(), [this](std::exception_ptr e) {
        if (!e) return;
        caught("metrics acceptor", e);
        if (metrics_acceptor_->is_open()) restart_later([this] { spawn_metrics_loop(); });
    });
}

void Server::start() {
    for (auto& acc : tcp_acceptors_) spawn_accept_loop(*acc);
    for (auto& acc : unix_acceptors_) spawn_accept_loop(*acc);
    if (metrics_acceptor_) spawn_metrics_loop();
    asio::co_spawn(io_, suppressed_tick(), guarded("log tick"));
}

void Server::drain() {
    if (draining_) return;
    draining_ = true;
    error_code ignored;
    for (auto& acc : tcp_acceptors_) acc->close(ignored);
    for (auto& acc : unix_acceptors_) acc->close(ignored);
    for (const auto& path : unix_paths_) ::unlink(path.c_str());
    unix_paths_.clear();
    if (metrics_acceptor_) metrics_acceptor_->close(ignored);
    log_.info(fmt::format("draining {} connection(s)", conns_.size()));
    // Idle connections close now; one in the middle of a request finishes it.
    for (Conn* c : conns_) {
        if (c->idle && c->close) c->close();
    }
    if (conns_.empty()) {
        io_.stop();
        return;
    }
    auto hard_stop = std::make_shared<asio::steady_timer>(io_, options_.drain_timeout);
    hard_stop->async_wait([this, hard_stop](const error_code& ec) {
        if (ec) return;
        log_.warning(fmt::format("drain timeout: closing {} connection(s) mid-request", conns_.size()));
        io_.stop();
    });
}

}  // namespace retryguard::policyd
