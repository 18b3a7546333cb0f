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
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "live.hpp"
#include "retryguard/policy/ledger_decider.hpp"
#include "retryguard/report/report.hpp"
#include "retryguard/runtime/daemon_guard.hpp"
#include "retryguard/runtime/privileges.hpp"
#include "retryguard/runtime/runtime.hpp"
#include "retryguard/runtime/threads.hpp"
#include "server.hpp"

using namespace retryguard;
using namespace retryguard::policyd;
using boost::system::error_code;

namespace {

constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;
constexpr int kExitFailure = 1;

// Wraps a decider and makes every decision throw, as a broken invariant of
// ours would, to exercise errors.internal in tests and drills
// (--simulate-decider-error).
class FailingDecider final : public PolicyDecider {
  public:
    explicit FailingDecider(std::shared_ptr<PolicyDecider> inner) : inner_(std::move(inner)) {}
    Decision decide(const PolicyRequest&, PolicyDeadline) override {
        throw std::logic_error("simulated decider error");
    }
    bool may_block() const noexcept override { return inner_->may_block(); }
    Status reload() override { return inner_->reload(); }
    std::string describe() const override { return inner_->describe() + " (every decision fails)"; }

  private:
    std::shared_ptr<PolicyDecider> inner_;
};

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

// ledger.retention.*: prunes the ledger at start and then every
// ledger.retention.prune_interval (read again after a reload), on a thread and
// ledger connection of its own, so the log follower's thread never waits for
// a prune (with SQLite its writes may wait for one of the prune's bounded
// passes, within ledger.sqlite.busy_timeout; docs/ledger.md "Retention").
// Failures are logged and retried next interval.
class Pruner {
  public:
    Pruner(std::shared_ptr<config::ConfigHolder> config, Logger& log)
        : config_(std::move(config)), log_(log) {}
    ~Pruner() { stop(); }
    void start() {
        thread_ = std::thread([this] {
            set_thread_name("rg-prune");
            run();
        });
    }
    void stop() {
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        wake_.notify_all();
        if (thread_.joinable()) thread_.join();
    }

  private:
    void run() {
        std::unique_ptr<Ledger> ledger;
        for (;;) {
            const auto cfg = config_->current();
            if (!ledger) {
                auto opened = open_configured_ledger(*cfg);
                if (opened)
                    ledger = std::move(*opened);
                else
                    log_.warning("prune: cannot open the ledger: " + opened.error().message);
            }
            if (ledger) {
                const auto now = std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now());
                auto r = ledger->prune(report::retention_from(*cfg), now);
                if (r)
                    log_.info(fmt::format(
                        "prune done: messages={} recipients={} episodes={} flags={} seen_events={}",
                        r->messages, r->recipients, r->episodes, r->flags, r->seen_events));
                else
                    log_.warning("prune failed: " + r.error().message);
            }
            std::unique_lock lock(mutex_);
            if (wake_.wait_for(lock, cfg->ledger.retention_prune_interval, [this] { return stopping_; }))
                return;
        }
    }

    std::shared_ptr<config::ConfigHolder> config_;
    Logger& log_;
    std::thread thread_;
    std::mutex mutex_;
    std::condition_variable wake_;
    bool stopping_ = false;
};

// "unix:/path" / "tcp:host:port" as the server binds them, from a socket spec.
std::string listen_spec(const config::SocketSpec& sock) {
    if (sock.kind == config::SocketSpec::Kind::unix_path) return "unix:" + sock.path;
    if (sock.kind == config::SocketSpec::Kind::inet6) return fmt::format("tcp:[{}]:{}", sock.host, sock.port);
    return fmt::format("tcp:{}:{}", sock.host, sock.port);
}

// Verdict lines: log.verdicts when set, else where log.target sends the
// daemon's other lines (syslog wins for "both": verdicts belong in the mail log).
Result<VerdictLogTarget> verdict_target_from(const config::Config& c) {
    std::string spec = c.log.verdicts;
    if (spec.empty()) spec = c.log.target == config::LogTarget::stderr_ ? "stderr" : "syslog";
    auto t = parse_verdict_log_target(spec);
    if (!t) return make_error(ErrorKind::config, "log.verdicts: " + t.error().message);
    t->ident = c.log.ident + "/policyd";
    // The host field of stamped records (file, postlog): log.hostname, as on
    // every other line of the product, else this host's short name.
    t->hostname = c.log.hostname;
    if (spec == "syslog") t->facility = std::string(config::to_string(c.log.facility));
    return t;
}

ServerOptions server_options_from(const config::Config& c) {
    ServerOptions opt;
    opt.listen.push_back(listen_spec(c.policy.socket));
    for (const auto& extra : c.policy.extra_sockets)
        if (auto sock = config::parse_socket(extra)) opt.listen.push_back(listen_spec(*sock));
    opt.unix_mode = c.policy.socket_mode & 07777u;
    opt.idle_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(c.policy.idle_timeout);
    opt.request_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(c.policy.request_timeout);
    opt.decision_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(c.policy.deadline);
    opt.limits.max_line_bytes = c.policy.max_line_length;
    opt.limits.max_attributes = static_cast<std::size_t>(c.policy.max_attributes);
    opt.limits.max_request_bytes = c.policy.max_request_size;
    opt.max_connections = static_cast<std::size_t>(c.policy.max_connections);
    if (c.metrics.enabled) {
        opt.metrics = c.metrics.listen.text;
        // The file's explicit opt-in, which check-config accepts too.
        opt.metrics_allow_non_loopback = c.metrics.allow_non_loopback;
    }
    opt.metrics_max_connections = static_cast<std::size_t>(c.metrics.max_connections);
    return opt;
}

Result<PolicyStageSet> stages_from(const config::Config& c) {
    static constexpr const char* kNames[] = {"CONNECT", "HELO",           "MAIL", "RCPT",
                                             "DATA",    "END-OF-MESSAGE", "VRFY", "ETRN"};
    std::string names;
    for (auto st : c.policy.stages)
        names += std::string(names.empty() ? "" : ",") + kNames[static_cast<int>(st)];
    auto parsed = PolicyStageSet::parse(names.empty() ? "RCPT" : names);
    if (!parsed) return make_error(ErrorKind::config, "policy.stages: " + parsed.error().message);
    return parsed;
}

// What the command line says: which configuration, and the testing aids.
struct CommandLine {
    std::string config_path, flagged, ready_file;
    std::vector<std::string> overrides;
    bool foreground = false;
    long slow_ms = 0;
    bool failing = false;
};

int fail_early(const std::string& msg, int rc) {
    std::fprintf(stderr, "retryguard-policyd: error: %s\n", msg.c_str());
    return rc;
}

// false: exit with `rc` (--help, --version, a bad option or value).
bool parse_command_line(int argc, char** argv, CommandLine& o, int& rc) {
    CLI::App app{"retryguard-policyd: Postfix policy service of retryguard", "retryguard-policyd"};
    app.set_version_flag("--version", RETRYGUARD_VERSION);
    app.add_option("-c,--config", o.config_path,
                   std::string("configuration file (default ") + kDefaultConfigPath +
                       "; built-in defaults when it does not exist)");
    app.add_option("-o", o.overrides,
                   "KEY=VALUE: set a configuration key (dotted, as in the file; repeatable), e.g. "
                   "-o policy.socket=inet:10040@127.0.0.1");
    app.add_flag("--foreground", o.foreground, "do not detach (systemd, tests); logging follows log.target");
    app.add_option("--ready-file", o.ready_file, "write the bound endpoints and the pid here once listening");
    app.add_option("--flagged", o.flagged,
                   "testing and measuring aid: answer from a static table ('domain ACTION [text]' lines) "
                   "instead of the ledger; no log is followed");
    app.add_option("--simulate-slow-decider", o.slow_ms, "testing aid: every decision sleeps this many ms");
    app.add_flag("--simulate-decider-error", o.failing,
                 "testing aid: every decision fails as a bug of ours would (errors.internal applies)");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        rc = app.exit(e) == 0 ? kExitOk : kExitUsage;
        return false;
    }
    if (o.slow_ms < 0) {
        rc = fail_early("--simulate-slow-decider must not be negative", kExitUsage);
        return false;
    }
    // A daemon runs in "/": relative paths must not change meaning (SIGHUP
    // re-reads the configuration and the table by name).
    std::error_code path_error;
    if (!o.flagged.empty()) o.flagged = std::filesystem::absolute(o.flagged, path_error).string();
    if (!o.ready_file.empty()) o.ready_file = std::filesystem::absolute(o.ready_file, path_error).string();
    if (!o.config_path.empty()) o.config_path = std::filesystem::absolute(o.config_path, path_error).string();
    return true;
}

// The endpoints bound and the pid, for whoever waits on the daemon (tests,
// scripts); written whole, then renamed into place.
void write_ready_file(const std::string& path, const std::vector<std::string>& bound) {
    if (path.empty()) return;
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::trunc);
        for (const auto& line : bound) f << line << '\n';
        f << "pid " << ::getpid() << '\n';
    }
    std::rename(tmp.c_str(), path.c_str());
}

// Files this process created as root go to the user it runs as (the SQLite
// ledger and its WAL files, a verdict log file), then root is given up.
Status hand_over_and_drop(const config::Config& cfg, bool ledger_files,
                          const VerdictLogTarget& verdict_target, const RunAs& run_as) {
    std::vector<std::string> owned;
    const std::string spec = ledger_options_from(cfg).spec;
    if (ledger_files && spec.starts_with("sqlite:")) {
        const std::string db = spec.substr(7);
        owned = {db, db + "-wal", db + "-shm", db + "-journal"};
    }
    if (verdict_target.kind == VerdictLogTarget::Kind::file) owned.push_back(verdict_target.path);
    for (const auto& path : owned)
        if (Status st = give_to(path, run_as); !st) return st;
    return drop_privileges(run_as);
}

// The daemon's state, in the order it is built (and torn down in reverse):
// main() runs the steps below one after the other. Once the process has
// forked, a failing step reports its exit status to the waiting parent
// (fail()) before it returns.
struct Policyd {
    CommandLine cl;
    std::optional<Runtime> runtime;
    std::shared_ptr<config::ConfigHolder> config_holder;
    std::unique_ptr<Logger> log_sink;
    ServerOptions opt;
    std::optional<PolicyStageSet> stages;
    std::optional<RunAs> run_as;
    std::shared_ptr<PolicyDecider> decider;
    std::shared_ptr<LedgerDecider> ledger_decider;
    const StaticDestinationDecider* table_decider = nullptr;
    std::size_t destinations = 0;
    VerdictLogTarget verdict_target;
    int daemon_fd = -1;
    VerdictLog verdicts;
    PolicyMetrics metrics;
    std::optional<PolicyService> service;
    std::optional<asio::io_context> io;
    std::optional<asio::thread_pool> workers;
    std::optional<Server> server;
    std::vector<std::string> bound;
    std::unique_ptr<LiveIngest> live;
    std::unique_ptr<Pruner> pruner;
    std::optional<asio::signal_set> signals;
    // One reload at a time: two SIGHUPs in quick succession must not read
    // the files in one order and swap them in the other, nor count their
    // results out of order.
    std::mutex reload_mutex;

    Logger& log() { return *log_sink; }
    const config::Config& cfg() const { return *runtime->config; }

    // After the fork: the parent exits with rc too.
    int fail(int rc) {
        daemonize_end(daemon_fd, rc);
        return rc;
    }

    // The configuration (file, or built-in defaults, with the -o overrides),
    // the ledger and the classifier, opened as every program opens them, and
    // where the daemon's lines go. A static table (--flagged) needs neither
    // ledger nor classifier. 0, or the exit status.
    int open_configuration() {
        RuntimeOptions ro;
        ro.config_path = cl.config_path;
        ro.overrides = cl.overrides;
        ro.open_ledger = cl.flagged.empty();
        ro.load_classifier = cl.flagged.empty();
        auto rt = open_runtime(ro);
        if (!rt)
            return fail_early(rt.error().message,
                              rt.error().kind == ErrorKind::config ? kExitUsage : kExitFailure);
        runtime.emplace(std::move(*rt));
        cl.config_path = runtime->config_path;
        config_holder = std::make_shared<config::ConfigHolder>(runtime->config, cl.overrides);
        auto sink =
            logging::open_sink(logging::lines_target(cfg()), logging::program_options(cfg(), "policyd"));
        if (!sink) return fail_early("log: " + sink.error().message, kExitUsage);
        log_sink = std::move(*sink);
        opt = server_options_from(cfg());
        auto st = stages_from(cfg());
        if (!st) {
            log().error(st.error().message);
            return kExitUsage;
        }
        stages = std::move(*st);
        return 0;
    }

    // Started as root: everything that needs root is opened first
    // (configuration, ledger, log sources, sockets, owned by
    // policy.user:policy.group), then root is given up for good before the
    // first request. The SIGHUP reload and every file reopened later run as
    // that user.
    int resolve_user() {
        if (::geteuid() != 0) return 0;
        auto who = lookup_run_as(cfg().policy.user, cfg().policy.group);
        if (!who) {
            log().error("policy.user/policy.group: " + who.error().message + "; refusing to run as root");
            return kExitUsage;
        }
        run_as = std::move(*who);
        opt.unix_uid = static_cast<long>(run_as->uid);
        opt.unix_gid = static_cast<long>(run_as->gid);
        return 0;
    }

    // The ledger (with the live follower) or the static table of --flagged,
    // slowed down for drills with --simulate-slow-decider.
    int make_decider() {
        if (cl.flagged.empty()) {
            Logger* lines = log_sink.get();
            ledger_decider = std::make_shared<LedgerDecider>(
                config_holder, [lines](std::string_view line) { lines->info(std::string(line)); });
            decider = ledger_decider;
        } else {
            auto table = StaticDestinationDecider::load(cl.flagged);
            if (!table) {
                log().error(table.error().message);
                return kExitUsage;
            }
            destinations = (*table)->size();
            decider = std::shared_ptr<StaticDestinationDecider>(std::move(*table));
        }
        table_decider = dynamic_cast<const StaticDestinationDecider*>(decider.get());
        if (cl.slow_ms > 0)
            decider = std::make_shared<SlowDecider>(decider, std::chrono::milliseconds(cl.slow_ms));
        if (cl.failing) decider = std::make_shared<FailingDecider>(decider);
        auto target = verdict_target_from(cfg());
        if (!target) {
            log().error(target.error().message);
            return kExitUsage;
        }
        verdict_target = std::move(*target);
        return 0;
    }

    // Forks (unless --foreground), opens the verdict log and binds the
    // listeners: the parent's exit status says whether this worked.
    int bind_listeners() {
        if (!cl.foreground && (daemon_fd = daemonize_begin()) < 0) {
            log().error("cannot become a daemon");
            return kExitFailure;
        }
        if (auto st = verdicts.open(verdict_target); !st) {
            log().error("verdict log: " + st.error().message);
            return fail(kExitUsage);
        }
        metrics.set_destinations(destinations);
        service.emplace(*stages, metrics);
        apply_error_settings();
        io.emplace(1);
        workers.emplace(static_cast<std::size_t>(cfg().policy.worker_threads));
        server.emplace(*io, opt, *service, decider, *workers, log(), verdicts);
        auto b = server->bind();
        if (!b) {
            log().error(b.error().message);
            return fail(b.error().kind == ErrorKind::config ? kExitUsage : kExitFailure);
        }
        bound = std::move(*b);
        ::signal(SIGPIPE, SIG_IGN);
        return 0;
    }

    // errors.timeout / errors.internal: DUNNO (accept) or DEFER_IF_PERMIT (tempfail).
    void apply_error_settings() {
        const auto c = config_holder->current();
        service->set_tempfail(c->errors.timeout == config::ErrorAction::tempfail,
                              c->errors.internal == config::ErrorAction::tempfail);
    }

    int drop_root() {
        if (run_as) {
            if (Status st = hand_over_and_drop(cfg(), ledger_decider != nullptr, verdict_target, *run_as);
                !st) {
                log().error(st.error().message);
                return fail(kExitFailure);
            }
            log().info(fmt::format("running as {}:{} (uid {}, gid {})", run_as->user, run_as->group,
                                   run_as->uid, run_as->gid));
        }
        if (opt.metrics_allow_non_loopback && !opt.metrics.empty())
            log().warning("metrics.allow_non_loopback: the unauthenticated metrics endpoint " + opt.metrics +
                          " may be reachable from other hosts");
        return 0;
    }

    // The log followers run on their own thread, started after the listeners
    // (and after the fork: threads do not survive it) and stopped after the
    // drain; they share nothing with the policy path but published snapshots.
    // They open their sources after the drop: a log the service user may not
    // read is refused now, as under the unit, not first after a rotation.
    // The pruner's ledger connection is the unprivileged user's too.
    int start_followers() {
        if (!ledger_decider) return 0;
        live = std::make_unique<LiveIngest>(std::move(runtime->ledger), config_holder, runtime->classifier,
                                            *ledger_decider, verdicts, metrics, log());
        if (auto st = live->start(); !st) {
            log().error("ingest: " + st.error().message);
            return fail(st.error().kind == ErrorKind::config ? kExitUsage : kExitFailure);
        }
        pruner = std::make_unique<Pruner>(config_holder, log());
        pruner->start();
        return 0;
    }

    void wait_signal() {
        signals->async_wait([this](const error_code& ec, int sig) {
            if (ec) return;
            // An exception here would leave io.run(): count it, keep serving.
            const bool handled = run_guarded(
                "signal handler", [&] { on_signal(sig); }, server->exceptions_caught(),
                server->guard_report());
            if (!handled || sig == SIGHUP) wait_signal();
        });
    }

    void on_signal(int sig) {
        if (sig == SIGHUP) {
            notify_reloading();
            log().info("SIGHUP: reloading " + decider->describe());
            // Reading the table may take a while: off the event loop. The
            // decider swaps its table whole, so requests keep flowing.
            asio::post(*workers, [this] { reload(); });
            return;
        }
        log().info(sig == SIGTERM ? "SIGTERM: draining" : "SIGINT: draining");
        notify("STOPPING=1");
        server->drain();
    }

    // A worker thread's top level: a reload that throws fails, keeping the
    // running table and configuration.
    void reload() {
        const std::lock_guard lock(reload_mutex);
        Status st;
        if (!run_guarded(
                "reload",
                [&] {
                    // A table that does not load keeps the previous table
                    // and the previous configuration.
                    st = decider->reload();
                    if (!st.ok()) return;
                    // The classifier rules are compiled before the swap: a
                    // bad rule fails the whole reload and nothing changes.
                    const auto errors = config_holder->reload(cl.config_path, runtime_checks);
                    if (!errors.empty()) {
                        std::string all;
                        for (const auto& e : errors) all += (all.empty() ? "" : "\n") + e.to_string();
                        st = make_error(ErrorKind::config, all);
                    } else {
                        apply_error_settings();
                        if (live) live->request_reload();
                    }
                },
                server->exceptions_caught(), server->guard_report()))
            st = make_error(ErrorKind::internal, "exception while reloading");
        asio::post(*io, [this, st = std::move(st)] {
            metrics.reload(st.ok());
            if (table_decider) metrics.set_destinations(table_decider->size());
            if (st.ok())
                log().info("reload done: " + decider->describe());
            else
                log().error("reload failed, keeping the previous configuration: " + st.error().message);
            notify("READY=1");
        });
    }

    // Signals handled, listeners accepting: ready (systemd, the waiting
    // parent, --ready-file).
    void announce_ready() {
        signals.emplace(*io, SIGHUP, SIGTERM, SIGINT);
        wait_signal();
        server->start();
        for (const auto& line : bound) log().info("listening: " + line);
        log().info(fmt::format("ready: {}; stages {}", decider->describe(), stages->to_string()));
        write_ready_file(cl.ready_file, bound);
        notify("READY=1");
        daemonize_end(daemon_fd, kExitOk);
    }

    // Every handler and coroutine is guarded; should an exception still leave
    // io.run(), it is counted and the loop runs on (asio allows re-entering
    // run() after a handler threw): answering DUNNO beats a dead socket.
    void serve() {
        for (;;) {
            const bool done = run_guarded(
                "event loop", [&] { io->run(); }, server->exceptions_caught(), server->guard_report());
            if (done || io->stopped()) break;
        }
    }

    void stop() {
        server->flush_suppressed(true);
        workers->stop();
        workers->join();
        if (live) live->stop();
        if (pruner) pruner->stop();
        log().info("stopped");
    }
};

}  // namespace

int main(int argc, char** argv) {
    Policyd d;
    if (int rc = 0; !parse_command_line(argc, argv, d.cl, rc)) return rc;
    for (auto step : {&Policyd::open_configuration, &Policyd::resolve_user, &Policyd::make_decider,
                      &Policyd::bind_listeners, &Policyd::drop_root, &Policyd::start_followers})
        if (int rc = (d.*step)(); rc != 0) return rc;
    d.announce_ready();
    d.serve();
    d.stop();
    return kExitOk;
}
