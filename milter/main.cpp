// main.cpp -- retryguard-milter: configuration, socket, privileges, then
// libmilter's loop. Order matters: the log sink and the socket are opened as
// root, the socket gets its mode and owner, privileges are dropped, and only
// then is the ledger opened (its files belong to the unprivileged user).
#include <grp.h>
#include <libmilter/mfapi.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <systemd/sd-daemon.h>
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "filter.hpp"
#include "retryguard/config/config.hpp"
#include "retryguard/identity/resend_config.hpp"
#include "retryguard/runtime/daemon_guard.hpp"
#include "retryguard/runtime/runtime.hpp"

using namespace retryguard;
using namespace retryguard::milter;

namespace {

// Everything on the command line is about which configuration to read: the
// settings themselves are keys of /etc/retryguard/retryguard.yaml (or -c),
// overridden by -o key=value, read through the same core path as the other
// programs (open_runtime).
struct Options {
    std::string config_file;             // "" = kDefaultConfigPath when it exists, else built-in defaults
    std::vector<std::string> overrides;  // -o key=value
    bool check_only = false;
};

// The UNIX socket this process created, removed on every way out (die(),
// std::exit, the end of main) so that no stale socket is left for Postfix to
// connect to. Only that socket: the same inode, not one a newer instance made.
struct OwnSocket {
    std::string path;
    dev_t dev = 0;
    ino_t ino = 0;
} g_socket;

void remove_own_socket() {
    if (g_socket.path.empty()) return;
    struct stat st {};
    if (::lstat(g_socket.path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == g_socket.dev &&
        st.st_ino == g_socket.ino && ::unlink(g_socket.path.c_str()) != 0)
        std::fprintf(stderr, "retryguard-milter: cannot remove %s: %s\n", g_socket.path.c_str(),
                     std::strerror(errno));
    g_socket.path.clear();
}

[[noreturn]] void die(int code, const std::string& msg) {
    if (globals().log) globals().log->write(Severity::error, msg);
    std::fprintf(stderr, "retryguard-milter: %s\n", msg.c_str());
    remove_own_socket();
    std::exit(code);
}

// user, group -> uid, gid (group empty: the user's primary group).
bool lookup_owner(const std::string& user, const std::string& group_name, uid_t& uid, gid_t& gid) {
    passwd* pw = getpwnam(user.c_str());
    if (!pw) return false;
    uid = pw->pw_uid;
    gid = pw->pw_gid;
    if (!group_name.empty()) {
        group* gr = getgrnam(group_name.c_str());
        if (!gr) return false;
        gid = gr->gr_gid;
    }
    return true;
}

// The spec as smfi_setconn() takes it (the config's parser accepts the same syntax).
std::string libmilter_spec(const config::SocketSpec& s) {
    switch (s.kind) {
        case config::SocketSpec::Kind::unix_path: return "unix:" + s.path;
        case config::SocketSpec::Kind::inet: return fmt::format("inet:{}@{}", s.port, s.host);
        case config::SocketSpec::Kind::inet6: return fmt::format("inet6:{}@{}", s.port, s.host);
    }
    return s.text;
}

// The filter's settings from one configuration snapshot (reinjection.*,
// milter.*, errors.*; destination rules through resend_settings_from).
FilterConfig filter_settings(const config::Config& c) {
    const ResendSettings r = resend_settings_from(c);
    FilterConfig f;
    f.policy = r.policy;
    f.policy.reject_code = c.milter.reject_code;
    f.policy.reject_xcode = c.milter.reject_xcode;
    f.policy.minimal_backoff = std::chrono::duration_cast<Duration>(c.milter.minimal_backoff);
    f.policy.maximal_backoff = std::chrono::duration_cast<Duration>(c.milter.maximal_backoff);
    f.fingerprint = r.fingerprint;
    f.fingerprint_body_limit = r.fingerprint_body_limit;
    f.subject_ignore = r.subject_ignore;
    f.match_message_id = r.match_message_id;
    f.deadline = std::chrono::duration_cast<std::chrono::milliseconds>(r.deadline);
    f.errors = r.errors;
    return f;
}

Result<std::shared_ptr<const config::Config>> load_config(const Options& o) {
    RuntimeOptions ro;
    ro.config_path = o.config_file;
    ro.overrides = o.overrides;
    ro.open_ledger = false;
    ro.load_classifier = false;
    auto rt = open_runtime(ro);
    if (!rt) return std::move(rt).error();
    return rt->config;
}

// SIGUSR1: read the configuration again (with the same -o overrides) and
// replace the reinjection settings (the socket, user and ledger need a
// restart). libmilter owns SIGHUP, SIGTERM and SIGINT (each of them stops it),
// so reload takes SIGUSR1, as OpenDKIM does. A bad file keeps the running
// settings; both outcomes are counted and logged.
void reload(const Options& o) {
    sd_notify(0, "RELOADING=1");
    auto loaded = load_config(o);
    if (!loaded) {
        ++globals().counters.reload_errors;
        globals().log->write(Severity::warning,
                             "reload failed, keeping the running settings: " + loaded.error().message);
    } else {
        globals().config.store(std::make_shared<const FilterConfig>(filter_settings(**loaded)));
        ++globals().counters.reloads;
        globals().log->write(Severity::info,
                             fmt::format("reloaded {}: action={} destination_rules={}", (*loaded)->source,
                                         to_string(globals().config.load()->policy.action),
                                         globals().config.load()->policy.per_destination.size()));
    }
    sd_notify(0, "READY=1");
}

// Where the milter's lines go: log.verdicts when set (it carries the verdicts,
// and the milter's other lines belong next to them), else log.target.
// "none" would drop every line of the milter's, warnings and errors too.
Result<logging::Target> log_target(const config::Config& c) {
    if (c.log.verdicts.empty()) return logging::lines_target(c);
    auto t = logging::verdicts_target(c);
    if (t && t->kind == logging::Target::Kind::none)
        return make_error(ErrorKind::config,
                          "log.verdicts: none would drop all of the milter's lines; set log.target instead");
    return t;
}

// An exception caught at the top of one of the milter's own threads.
GuardReport milter_report() {
    return [](std::string_view where, std::string_view what) {
        if (globals().log)
            globals().log->write(
                Severity::error,
                fmt::format("{}: caught exception: {}; carrying on (fail-open)", where, what));
    };
}

// The user and group the milter runs as: milter.user / milter.group when
// started as root (the packaged service); a milter started by an ordinary user
// keeps that user.
struct RunAs {
    uid_t uid = getuid();
    gid_t gid = getgid();
    bool as_root = geteuid() == 0;
};

RunAs run_as_from(const config::Config& c) {
    RunAs r;
    if (!r.as_root) return r;
    if (!lookup_owner(c.milter.user, c.milter.group, r.uid, r.gid))
        die(2, "milter.user/milter.group: unknown user or group \"" + c.milter.user + ":" + c.milter.group +
                   "\"");
    if (r.uid == 0) die(2, "refusing to run as root: set milter.user to an unprivileged user");
    return r;
}

// The milter's lines go to their sink from here on; returns the host name its
// stamped lines carry (log.hostname, else this host's short name), which is
// also the name the store records messages under.
std::string open_logging(const config::Config& c) {
    const logging::Options log_options = logging::program_options(c, "milter");
    auto target = log_target(c);
    if (!target) die(2, target.error().message);
    auto sink = logging::open_sink(*target, log_options);
    if (!sink) die(2, "log: " + sink.error().message);
    globals().log = std::move(*sink);
    return log_options.hostname.empty() ? logging::short_hostname() : log_options.hostname;
}

// Registers the filter and opens its socket (as root: the socket gets its
// mode and owner before privileges are dropped); returns libmilter's spec.
std::string open_milter_socket(const config::Config& c, const RunAs& run) {
    const config::SocketSpec& spec = c.milter.socket;
    smfiDesc desc = filter_description();
    std::string conn = libmilter_spec(spec);
    if (smfi_setconn(conn.data()) != MI_SUCCESS) die(2, "smfi_setconn failed for " + conn);
    const auto timeout_s = std::chrono::duration_cast<std::chrono::seconds>(c.milter.timeout).count();
    if (smfi_settimeout(static_cast<int>(timeout_s)) != MI_SUCCESS) die(2, "smfi_settimeout failed");
    if (smfi_register(desc) != MI_SUCCESS) die(2, "smfi_register failed");
    if (smfi_opensocket(true) != MI_SUCCESS) die(1, "cannot open the milter socket " + conn);
    if (spec.kind != config::SocketSpec::Kind::unix_path) return conn;
    struct stat st {};
    if (::lstat(spec.path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
        g_socket = OwnSocket{spec.path, st.st_dev, st.st_ino};
        std::atexit(remove_own_socket);
    }
    if (chmod(spec.path.c_str(), static_cast<mode_t>(c.milter.socket_mode)) != 0)
        die(1, fmt::format("chmod {}: {}", spec.path, std::strerror(errno)));
    if (run.as_root && chown(spec.path.c_str(), run.uid, run.gid) != 0)
        die(1, fmt::format("chown {}: {}", spec.path, std::strerror(errno)));
    return conn;
}

void drop_root(const config::Config& c, const RunAs& run) {
    if (!run.as_root) return;
    if (initgroups(c.milter.user.c_str(), run.gid) != 0 || setgid(run.gid) != 0 || setuid(run.uid) != 0)
        die(1, fmt::format("cannot drop privileges to {}: {}", c.milter.user, std::strerror(errno)));
    if (setuid(0) == 0) die(1, "privileges were not dropped");
}

// libmilter takes SIGTERM/SIGHUP/SIGINT with sigwait() in its own thread;
// threads started before smfi_main() (the record writer) must block them too,
// or the default action would kill the process without a clean stop. SIGUSR1
// (reload) has a thread of its own; libmilter never waits for it.
void start_reload_thread(const Options& o) {
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGHUP);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    std::thread([o] {
        sigset_t usr1;
        sigemptyset(&usr1);
        sigaddset(&usr1, SIGUSR1);
        for (;;) {
            int sig = 0;
            // This thread's top level: a reload that throws is a failed reload.
            if (sigwait(&usr1, &sig) == 0 && sig == SIGUSR1 &&
                !run_guarded(
                    "reload", [&] { reload(o); }, globals().counters.exceptions, milter_report())) {
                ++globals().counters.reload_errors;
                sd_notify(0, "READY=1");
            }
        }
    }).detach();
}

// An asynchronous store writes what it still holds; its counts join the
// milter's for the last line.
void close_store() {
    if (!globals().store) return;
    globals().store->close();
    globals().counters.record_errors += globals().store->failed_records();
    globals().counters.lookups_filtered += globals().store->filtered_lookups();
    globals().counters.filter_errors += globals().store->filter_errors();
    globals().counters.exceptions += globals().store->exceptions_caught();
}

// false: exit with `rc` (--help, --version, a bad option).
bool parse_command_line(int argc, char** argv, Options& o, int& rc) {
    CLI::App app{"retryguard-milter: refuse manual re-injection of messages Postfix is already retrying",
                 "retryguard-milter"};
    app.set_version_flag("--version", RETRYGUARD_VERSION);
    app.add_option("-c,--config", o.config_file,
                   std::string("configuration file (default ") + kDefaultConfigPath +
                       "; built-in defaults when it does not exist)");
    app.add_option("-o", o.overrides,
                   "KEY=VALUE: set a configuration key (dotted, as in the file; repeatable), e.g. "
                   "-o milter.socket=inet:8891@127.0.0.1");
    app.add_flag("-n,--check", o.check_only, "check the configuration, open the ledger, and exit");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        rc = app.exit(e) == 0 ? 0 : 2;
        return false;
    }
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    if (int rc = 0; !parse_command_line(argc, argv, o, rc)) return rc;
    auto loaded = load_config(o);
    if (!loaded) die(2, "configuration errors:\n" + loaded.error().message);
    const config::Config& c = **loaded;
    globals().config.store(std::make_shared<const FilterConfig>(filter_settings(c)));
    const std::string log_hostname = open_logging(c);
    const RunAs run = run_as_from(c);

    // the store's own lines (the identity filter's rebuilds) go where the verdicts go
    const StoreLog store_log = [](Severity s, const std::string& text) {
        if (globals().log) globals().log->write(s, text);
    };
    const LedgerOptions ledger_options = ledger_options_from(c);
    auto open_store = [&] {
        auto ledger = open_configured_ledger(c);
        if (!ledger) die(2, ledger.error().message);
        return open_pending_store(std::move(*ledger), ledger_options.spec,
                                  static_cast<std::size_t>(c.milter.record_queue),
                                  std::chrono::duration_cast<std::chrono::seconds>(c.milter.filter_rescan),
                                  store_log, log_hostname);
    };
    if (o.check_only) {
        auto store = open_store();
        if (!store) die(2, store.error().message);
        std::printf("retryguard-milter: configuration ok\n");
        return 0;
    }

    const std::string conn = open_milter_socket(c, run);
    drop_root(c, run);
    start_reload_thread(o);
    auto store = open_store();
    if (!store) die(2, store.error().message);
    globals().store = std::move(*store);

    globals().log->write(
        Severity::info,
        fmt::format("starting: socket={} ledger={} action={} fingerprint={} uid={}", conn,
                    globals().store ? globals().store->describe() : "none",
                    to_string(globals().config.load()->policy.action),
                    config::show_setting(c.global, "reinjection.fingerprint.parts"), getuid()));
    // Socket open, privileges dropped, ledger open: ready (systemd Type=notify).
    sd_notify(0, "READY=1");
    int rc = smfi_main();
    sd_notify(0, "STOPPING=1");
    close_store();
    globals().log->write(Severity::info, "stopping: " + counters_line());
    remove_own_socket();
    return rc == MI_SUCCESS ? 0 : 1;
}
