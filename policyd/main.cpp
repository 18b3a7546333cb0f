// main.cpp -- retryguard-policyd: command line, process life cycle (daemon or
// foreground, systemd notify, SIGHUP reload, SIGTERM drain) and wiring.
//
// Owns choosing the decider and starting threads. Must never decide policy or
// touch the protocol: see server.cpp for I/O and the core for everything else.
#include <fcntl.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "live.hpp"
#include "retryguard/daemon_guard.hpp"
#include "retryguard/ledger_decider.hpp"
#include "retryguard/privileges.hpp"
#include "retryguard/runtime.hpp"
#include "server.hpp"

using namespace retryguard;
using namespace retryguard::policyd;
using boost::system::error_code;

namespace {

constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;
constexpr int kExitFailure = 1;

// Wraps a decider and makes every decision slow and off-loop, to exercise the
// deadline and fail-open path in tests and drills (--simulate-slow-decider).
class SlowDecider final : public PolicyDecider {
  public:
    SlowDecider(std::shared_ptr<PolicyDecider> inner, std::chrono::milliseconds delay)
        : inner_(std::move(inner)), delay_(delay) {}
    Decision decide(const PolicyRequest& request, PolicyDeadline deadline) override {
        std::this_thread::sleep_for(delay_);
        return inner_->decide(request, deadline);
    }
    bool may_block() const noexcept override { return true; }
    Status reload() override { return inner_->reload(); }
    std::string describe() const override {
        return inner_->describe() + fmt::format(" (slowed by {} ms)", delay_.count());
    }

  private:
    std::shared_ptr<PolicyDecider> inner_;
    std::chrono::milliseconds delay_;
};

// Answers DUNNO to everything: the decider when no table is given, so the
// daemon can be deployed and measured before any destination is flagged.
class DunnoDecider final : public PolicyDecider {
  public:
    Decision decide(const PolicyRequest&, PolicyDeadline) override { return {}; }
    bool may_block() const noexcept override { return false; }
    Status reload() override { return {}; }
    std::string describe() const override { return "no destination table (every answer is DUNNO)"; }
};

// Forks into the background before any thread or event loop exists (threads
// do not survive fork). The parent waits on a pipe until the child reports
// whether it could listen, so the exit status of the start command is true.
// Returns the child's end of that pipe, or -1 on failure.
int daemonize_begin() {
    int fds[2];
    if (::pipe(fds) != 0) return -1;
    const pid_t pid = ::fork();
    if (pid < 0) return -1;
    if (pid > 0) {
        ::close(fds[1]);
        char status = 1;
        const ssize_t n = ::read(fds[0], &status, 1);
        ::_exit(n == 1 ? status : 1);
    }
    ::close(fds[0]);
    if (::setsid() < 0 || ::chdir("/") != 0) return -1;
    return fds[1];
}

void daemonize_end(int fd, int status) {
    if (fd < 0) return;
    const char c = static_cast<char>(status);
    [[maybe_unused]] const ssize_t n = ::write(fd, &c, 1);
    ::close(fd);
    const int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
        ::dup2(null, 0);
        ::dup2(null, 1);
        ::dup2(null, 2);
        if (null > 2) ::close(null);
    }
}

void notify(const char* state) {
    sd_notify(0, state);
}

void notify_reloading() {
    // systemd >= 253 (Type=notify-reload) wants the monotonic time with RELOADING=1.
    struct timespec ts {};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const auto usec = static_cast<unsigned long long>(ts.tv_sec) * 1000000ull +
                      static_cast<unsigned long long>(ts.tv_nsec) / 1000ull;
    sd_notify(0, fmt::format("RELOADING=1\nMONOTONIC_USEC={}", usec).c_str());
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"retryguard-policyd: Postfix policy service of retryguard", "retryguard-policyd"};
    app.set_version_flag("--version", RETRYGUARD_VERSION);
    ServerOptions opt;
    std::string config_path, ledger_spec;
    std::string flagged, stages_text = "RCPT", unix_mode_text = "0660", ready_file, verdict_log_spec;
    bool foreground = false;
    std::size_t worker_threads = 2;
    long idle_s = 330, request_s = 10, decision_ms = 100, slow_ms = 0;
    app.add_option("-l,--listen", opt.listen,
                   "unix:/path or tcp:127.0.0.1:PORT (repeatable; port 0 = any free); default: policy.socket "
                   "of the configuration");
    app.add_option("-c,--config", config_path,
                   "YAML configuration: decide from the ledger and the rules engine, follow its sources");
    app.add_option("--ledger", ledger_spec,
                   "ledger spec overriding the configuration (sqlite:/path, redis://...)");
    app.add_option("--unix-mode", unix_mode_text, "octal mode of UNIX sockets")->capture_default_str();
    app.add_option("--metrics", opt.metrics, "HOST:PORT on loopback for /metrics and /health");
    app.add_option("--flagged", flagged, "destination table: lines 'domain ACTION [text]'");
    app.add_option("--stages", stages_text, "SMTP stages answered from the decider; others get DUNNO")
        ->capture_default_str();
    app.add_option("--idle-timeout", idle_s, "seconds a connection may sit idle between requests")
        ->capture_default_str();
    app.add_option("--request-timeout", request_s, "seconds from a request's first byte to its end")
        ->capture_default_str();
    app.add_option("--decision-timeout-ms", decision_ms, "deadline of an off-loop decision before DUNNO")
        ->capture_default_str();
    app.add_option("--max-line", opt.limits.max_line_bytes, "bytes per request line")->capture_default_str();
    app.add_option("--max-attributes", opt.limits.max_attributes, "attributes per request")
        ->capture_default_str();
    app.add_option("--max-request", opt.limits.max_request_bytes, "bytes per request")->capture_default_str();
    app.add_option("--max-connections", opt.max_connections, "open policy connections")
        ->capture_default_str();
    app.add_option("--metrics-max-connections", opt.metrics_max_connections,
                   "open metrics/health connections (further ones are closed at once)")
        ->capture_default_str();
    app.add_option("--worker-threads", worker_threads, "threads for deciders that may block")
        ->capture_default_str();
    app.add_option("--simulate-slow-decider", slow_ms, "testing aid: every decision sleeps this many ms");
    app.add_option("--verdict-log", verdict_log_spec,
                   "where verdict lines go: syslog[:FACILITY], postlog:/path, file:/path, stderr, none "
                   "(default: stderr with --foreground, else syslog)");
    app.add_option("--ready-file", ready_file, "write the bound endpoints and the pid here once listening");
    app.add_flag("--foreground", foreground, "stay in the foreground and log to stderr");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? kExitOk : kExitUsage;
    }

    Logger log(foreground);
    // A daemon runs in "/": relative paths must not change meaning (SIGHUP
    // re-reads the table by name).
    std::error_code path_error;
    if (!flagged.empty()) flagged = std::filesystem::absolute(flagged, path_error).string();
    if (!ready_file.empty()) ready_file = std::filesystem::absolute(ready_file, path_error).string();
    try {
        opt.unix_mode = static_cast<unsigned>(std::stoul(unix_mode_text, nullptr, 8)) & 07777u;
    } catch (const std::exception&) {
        log.error("--unix-mode: expected an octal mode such as 0660");
        return kExitUsage;
    }
    if (idle_s <= 0 || request_s <= 0 || decision_ms <= 0 || slow_ms < 0 || worker_threads == 0) {
        log.error("timeouts and --worker-threads must be positive");
        return kExitUsage;
    }
    opt.idle_timeout = std::chrono::seconds(idle_s);
    opt.request_timeout = std::chrono::seconds(request_s);
    opt.decision_timeout = std::chrono::milliseconds(decision_ms);
    auto stages = PolicyStageSet::parse(stages_text);
    if (!stages) {
        log.error("--stages: " + stages.error().message);
        return kExitUsage;
    }

    // With a configuration: the ledger-backed decider, fed by the log
    // followers this process hosts. Command-line options win over the file.
    std::optional<Runtime> runtime;
    std::shared_ptr<config::ConfigHolder> config_holder;
    if (!config_path.empty()) {
        if (!flagged.empty()) {
            log.error("--config and --flagged exclude each other");
            return kExitUsage;
        }
        config_path = std::filesystem::absolute(config_path, path_error).string();
        RuntimeOptions ro;
        ro.config_path = config_path;
        ro.ledger_spec = ledger_spec;
        auto rt = open_runtime(ro);
        if (!rt) {
            log.error(rt.error().message);
            return rt.error().kind == ErrorKind::config ? kExitUsage : kExitFailure;
        }
        runtime.emplace(std::move(*rt));
        config_holder = std::make_shared<config::ConfigHolder>(runtime->config);
        const config::Config& cfg = *runtime->config;
        if (opt.listen.empty()) {
            const auto& sock = cfg.policy.socket;
            if (sock.kind == config::SocketSpec::Kind::unix_path)
                opt.listen.push_back("unix:" + sock.path);
            else if (sock.kind == config::SocketSpec::Kind::inet6)
                opt.listen.push_back(fmt::format("tcp:[{}]:{}", sock.host, sock.port));
            else
                opt.listen.push_back(fmt::format("tcp:{}:{}", sock.host, sock.port));
        }
        if (!app.count("--unix-mode")) opt.unix_mode = cfg.policy.socket_mode & 07777u;
        if (!app.count("--idle-timeout"))
            opt.idle_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(cfg.policy.idle_timeout);
        if (!app.count("--decision-timeout-ms"))
            opt.decision_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(cfg.policy.deadline);
        if (!app.count("--max-line") && cfg.policy.max_line_length > 0)
            opt.limits.max_line_bytes = cfg.policy.max_line_length;
        if (!app.count("--max-attributes") && cfg.policy.max_attributes > 0)
            opt.limits.max_attributes = static_cast<std::size_t>(cfg.policy.max_attributes);
        if (!app.count("--max-request") && cfg.policy.max_request_size > 0)
            opt.limits.max_request_bytes = cfg.policy.max_request_size;
        if (!app.count("--max-connections") && cfg.policy.max_connections > 0)
            opt.max_connections = static_cast<std::size_t>(cfg.policy.max_connections);
        if (!app.count("--metrics") && cfg.metrics.enabled) {
            opt.metrics = cfg.metrics.listen.text;
            // The file's explicit opt-in, which check-config accepts too.
            opt.metrics_allow_non_loopback = cfg.metrics.allow_non_loopback;
        }
        if (!app.count("--metrics-max-connections") && cfg.metrics.max_connections > 0)
            opt.metrics_max_connections = static_cast<std::size_t>(cfg.metrics.max_connections);
        if (!app.count("--stages") && !cfg.policy.stages.empty()) {
            std::string names;
            for (auto st : cfg.policy.stages) {
                static constexpr const char* kNames[] = {"CONNECT", "HELO",           "MAIL", "RCPT",
                                                         "DATA",    "END-OF-MESSAGE", "VRFY", "ETRN"};
                names += std::string(names.empty() ? "" : ",") + kNames[static_cast<int>(st)];
            }
            auto parsed = PolicyStageSet::parse(names);
            if (!parsed) {
                log.error("policy.stages: " + parsed.error().message);
                return kExitUsage;
            }
            stages = std::move(parsed);
        }
        if (verdict_log_spec.empty() && !cfg.log.verdicts.empty()) verdict_log_spec = cfg.log.verdicts;
    }
    if (opt.listen.empty()) {
        log.error("nothing to listen on: give --listen or --config with policy.socket");
        return kExitUsage;
    }
    if (opt.metrics_max_connections == 0) {
        log.error("--metrics-max-connections must be positive");
        return kExitUsage;
    }

    // Started as root with a configuration: everything that needs root is
    // opened first (configuration, ledger, log sources, sockets, owned by
    // policy.user:policy.group), then root is given up for good before the
    // first request. The SIGHUP reload and every file reopened later run as
    // that user.
    std::optional<RunAs> run_as;
    if (::geteuid() == 0 && runtime) {
        auto who = lookup_run_as(runtime->config->policy.user, runtime->config->policy.group);
        if (!who) {
            log.error("policy.user/policy.group: " + who.error().message + "; refusing to run as root");
            return kExitUsage;
        }
        run_as = std::move(*who);
        opt.unix_uid = static_cast<long>(run_as->uid);
        opt.unix_gid = static_cast<long>(run_as->gid);
    }

    std::shared_ptr<PolicyDecider> decider;
    std::shared_ptr<LedgerDecider> ledger_decider;
    std::size_t destinations = 0;
    if (config_holder) {
        ledger_decider = std::make_shared<LedgerDecider>(
            config_holder, [&log](std::string_view line) { log.info(std::string(line)); });
        decider = ledger_decider;
    } else if (!flagged.empty()) {
        auto table = StaticDestinationDecider::load(flagged);
        if (!table) {
            log.error(table.error().message);
            return kExitUsage;
        }
        destinations = (*table)->size();
        decider = std::shared_ptr<StaticDestinationDecider>(std::move(*table));
    } else {
        decider = std::make_shared<DunnoDecider>();
    }
    const auto* table_decider = dynamic_cast<const StaticDestinationDecider*>(decider.get());
    if (slow_ms > 0) decider = std::make_shared<SlowDecider>(decider, std::chrono::milliseconds(slow_ms));

    auto verdict_target = parse_verdict_log_target(
        verdict_log_spec.empty() ? (foreground ? "stderr" : "syslog") : verdict_log_spec);
    if (!verdict_target) {
        log.error("--verdict-log: " + verdict_target.error().message);
        return kExitUsage;
    }
    verdict_target->ident = "retryguard/policyd";
    if (runtime && !app.count("--verdict-log") && runtime->config->log.verdicts.empty()) {
        verdict_target->ident = runtime->config->log.ident + "/policyd";
    }

    int daemon_fd = -1;
    if (!foreground && (daemon_fd = daemonize_begin()) < 0) {
        log.error("cannot become a daemon");
        return kExitFailure;
    }

    VerdictLog verdicts;
    if (auto st = verdicts.open(*verdict_target); !st) {
        log.error("verdict log: " + st.error().message);
        daemonize_end(daemon_fd, kExitUsage);
        return kExitUsage;
    }
    PolicyMetrics metrics;
    metrics.set_destinations(destinations);
    PolicyService service(*stages, metrics);
    // errors.timeout / errors.internal: DUNNO (accept) or DEFER_IF_PERMIT (tempfail).
    auto apply_error_settings = [&] {
        if (!config_holder) return;
        const auto cfg = config_holder->current();
        service.set_tempfail(cfg->errors.timeout == config::ErrorAction::tempfail,
                             cfg->errors.internal == config::ErrorAction::tempfail);
    };
    apply_error_settings();
    asio::io_context io(1);
    asio::thread_pool workers(worker_threads);
    Server server(io, opt, service, decider, workers, log, verdicts);
    auto bound = server.bind();
    if (!bound) {
        log.error(bound.error().message);
        const int rc = bound.error().kind == ErrorKind::config ? kExitUsage : kExitFailure;
        daemonize_end(daemon_fd, rc);
        return rc;
    }
    ::signal(SIGPIPE, SIG_IGN);

    // The log followers run on their own thread, started after the listeners
    // (and after the fork: threads do not survive it) and stopped after the
    // drain; they share nothing with the policy path but published snapshots.
    std::unique_ptr<LiveIngest> live;
    if (runtime) {
        live = std::make_unique<LiveIngest>(std::move(runtime->ledger), config_holder, runtime->classifier,
                                            *ledger_decider, verdicts, metrics, log);
        if (auto st = live->start(); !st) {
            log.error("ingest: " + st.error().message);
            const int rc = st.error().kind == ErrorKind::config ? kExitUsage : kExitFailure;
            daemonize_end(daemon_fd, rc);
            return rc;
        }
    }

    if (run_as) {
        // Files this process created as root go to the user it runs as: the
        // SQLite ledger (and its WAL files), a verdict log file.
        std::vector<std::string> owned;
        const std::string spec =
            !ledger_spec.empty() ? ledger_spec : ledger_options_from(*runtime->config).spec;
        if (spec.starts_with("sqlite:")) {
            const std::string db = spec.substr(7);
            owned = {db, db + "-wal", db + "-shm", db + "-journal"};
        }
        if (verdict_target->kind == VerdictLogTarget::Kind::file) owned.push_back(verdict_target->path);
        Status st;
        for (const auto& path : owned)
            if (st.ok()) st = give_to(path, *run_as);
        if (st.ok()) st = drop_privileges(*run_as);
        if (!st) {
            log.error(st.error().message);
            if (live) live->stop();
            daemonize_end(daemon_fd, kExitFailure);
            return kExitFailure;
        }
        log.info(fmt::format("running as {}:{} (uid {}, gid {})", run_as->user, run_as->group, run_as->uid,
                             run_as->gid));
    } else if (::geteuid() == 0) {
        log.warning("running as root: give a configuration (-c) with policy.user to drop privileges");
    }
    if (opt.metrics_allow_non_loopback && !opt.metrics.empty())
        log.warning("metrics.allow_non_loopback: the unauthenticated metrics endpoint " + opt.metrics +
                    " may be reachable from other hosts");

    asio::signal_set signals(io, SIGHUP, SIGTERM, SIGINT);
    std::function<void()> wait_signal;
    std::function<void(int)> on_signal;
    wait_signal = [&] {
        signals.async_wait([&](const error_code& ec, int sig) {
            if (ec) return;
            // An exception here would leave io.run(): count it, keep serving.
            const bool handled = run_guarded(
                "signal handler", [&] { on_signal(sig); }, server.exceptions_caught(), server.guard_report());
            if (!handled || sig == SIGHUP) wait_signal();
        });
    };
    on_signal = [&](int sig) {
        if (sig == SIGHUP) {
            notify_reloading();
            log.info("SIGHUP: reloading " + decider->describe());
            // Reading the table may take a while: off the event loop. The
            // decider swaps its table whole, so requests keep flowing.
            asio::post(workers, [&] {
                // A worker thread's top level: a reload that throws
                // fails, keeping the running table and configuration.
                Status st;
                if (!run_guarded(
                        "reload",
                        [&] {
                            st = decider->reload();
                            if (config_holder) {
                                // The classifier rules are compiled before the swap: a
                                // bad rule fails the whole reload and nothing changes.
                                const auto errors = config_holder->reload(config_path, runtime_checks);
                                if (!errors.empty()) {
                                    std::string all;
                                    for (const auto& e : errors)
                                        all += (all.empty() ? "" : "\n") + e.to_string();
                                    st = make_error(ErrorKind::config, all);
                                } else {
                                    apply_error_settings();
                                    if (live) live->request_reload();
                                }
                            }
                        },
                        server.exceptions_caught(), server.guard_report()))
                    st = make_error(ErrorKind::internal, "exception while reloading");
                asio::post(io, [&, st = std::move(st)] {
                    metrics.reload(st.ok());
                    if (table_decider) metrics.set_destinations(table_decider->size());
                    if (st.ok())
                        log.info("reload done: " + decider->describe());
                    else
                        log.error("reload failed, keeping the previous " +
                                  std::string(config_holder ? "configuration: " : "table: ") +
                                  st.error().message);
                    notify("READY=1");
                });
            });
            return;
        }
        log.info(sig == SIGTERM ? "SIGTERM: draining" : "SIGINT: draining");
        notify("STOPPING=1");
        server.drain();
    };
    wait_signal();

    server.start();
    for (const auto& line : *bound) log.info("listening: " + line);
    log.info(fmt::format("ready: {}; stages {}", decider->describe(), stages->to_string()));
    if (!ready_file.empty()) {
        const std::string tmp = ready_file + ".tmp";
        {
            std::ofstream f(tmp, std::ios::trunc);
            for (const auto& line : *bound) f << line << '\n';
            f << "pid " << ::getpid() << '\n';
        }
        std::rename(tmp.c_str(), ready_file.c_str());
    }
    notify("READY=1");
    daemonize_end(daemon_fd, kExitOk);

    // Every handler and coroutine is guarded; should an exception still leave
    // io.run(), it is counted and the loop runs on (asio allows re-entering
    // run() after a handler threw): answering DUNNO beats a dead socket.
    for (;;) {
        const bool done = run_guarded(
            "event loop", [&] { io.run(); }, server.exceptions_caught(), server.guard_report());
        if (done || io.stopped()) break;
    }
    server.flush_suppressed(true);
    workers.stop();
    workers.join();
    if (live) live->stop();
    log.info("stopped");
    return kExitOk;
}
