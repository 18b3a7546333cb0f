// main.cpp -- retryguard-milter: command line, socket, privileges, then
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
#include "retryguard/config.hpp"
#include "retryguard/daemon_guard.hpp"
#include "retryguard/resend_config.hpp"
#include "retryguard/runtime.hpp"

using namespace retryguard;
using namespace retryguard::milter;

namespace {

struct Options {
    std::string socket;
    std::string socket_mode = "0660";
    std::string socket_owner;
    std::string user;
    std::string ledger = "none";
    std::string action = "reject";
    std::vector<std::string> destination_actions;
    std::string fingerprint = "sender,subject,body";
    std::string log = "syslog";
    std::string log_hostname;
    std::string reject_code = "550";
    std::string reject_xcode = "5.7.1";
    std::string header_name = "X-Retryguard-Resend";
    int timeout = 30;
    int minimal_backoff = 300;
    std::size_t record_queue = 10000;
    int filter_rescan = 60;
    int maximal_backoff = 4000;
    bool check_only = false;
    std::string config_file;
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

// "user" or "user:group" -> uid, gid (group defaults to the user's primary group).
bool lookup_owner(const std::string& spec, uid_t& uid, gid_t& gid, std::string& user) {
    auto colon = spec.find(':');
    user = spec.substr(0, colon);
    passwd* pw = getpwnam(user.c_str());
    if (!pw) return false;
    uid = pw->pw_uid;
    gid = pw->pw_gid;
    if (colon != std::string::npos) {
        group* gr = getgrnam(spec.substr(colon + 1).c_str());
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

Result<FilterConfig> build_config(const Options& o) {
    FilterConfig c;
    auto a = resend_action_from_string(o.action);
    if (!a) return make_error(ErrorKind::config, "--action: unknown action \"" + o.action + "\"");
    c.policy.action = *a;
    for (const auto& da : o.destination_actions) {
        auto eq = da.find('=');
        auto act = eq == std::string::npos ? std::nullopt : resend_action_from_string(da.substr(eq + 1));
        if (!act || eq == 0)
            return make_error(ErrorKind::config,
                              "--destination-action: expected DOMAIN=ACTION, got \"" + da + "\"");
        std::string dom = da.substr(0, eq);
        for (char& ch : dom) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        c.policy.per_destination[dom] = *act;
    }
    if (o.reject_code.size() != 3 || (o.reject_code[0] != '4' && o.reject_code[0] != '5') ||
        o.reject_xcode.empty() || o.reject_xcode[0] != o.reject_code[0])
        return make_error(ErrorKind::config, "--reject-code/--reject-xcode: expected e.g. 550 and 5.7.1");
    c.policy.reject_code = o.reject_code;
    c.policy.reject_xcode = o.reject_xcode;
    c.policy.header_name = o.header_name;
    if (o.minimal_backoff < 1 || o.maximal_backoff < o.minimal_backoff)
        return make_error(ErrorKind::config,
                          "--minimal-backoff/--maximal-backoff: need 1 <= minimal <= maximal");
    c.policy.minimal_backoff = std::chrono::seconds(o.minimal_backoff);
    c.policy.maximal_backoff = std::chrono::seconds(o.maximal_backoff);
    c.fingerprint = FingerprintParts{false, false, false};
    if (o.fingerprint != "none") {
        std::string_view rest = o.fingerprint;
        while (!rest.empty()) {
            auto comma = rest.find(',');
            auto part = rest.substr(0, comma);
            if (part == "sender")
                c.fingerprint.sender = true;
            else if (part == "subject")
                c.fingerprint.subject = true;
            else if (part == "body")
                c.fingerprint.body = true;
            else
                return make_error(ErrorKind::config,
                                  "--fingerprint: unknown part \"" + std::string(part) + "\"");
            rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
        }
    }
    return c;
}

// Which settings the command line gave (they win over the -c file, also on reload).
struct Given {
    bool action, header_name, fingerprint;
};

// The filter's settings: the command line's, and the -c file's reinjection
// settings where the command line gave none.
Result<FilterConfig> filter_settings(const Options& o, const std::optional<ResendSettings>& from_file,
                                     const Given& given) {
    auto config = build_config(o);
    if (!config || !from_file) return config;
    if (!given.action && o.destination_actions.empty())
        config->policy.per_destination = from_file->policy.per_destination;
    if (!given.action) config->policy.action = from_file->policy.action;
    if (!given.header_name) config->policy.header_name = from_file->policy.header_name;
    if (!given.fingerprint) config->fingerprint = from_file->fingerprint;
    config->fingerprint_body_limit = from_file->fingerprint_body_limit;
    config->match_message_id = from_file->match_message_id;
    config->deadline = std::chrono::duration_cast<std::chrono::milliseconds>(from_file->deadline);
    config->errors = from_file->errors;
    return config;
}

// SIGUSR1: read the -c file again and replace the reinjection settings (the
// socket, user and ledger need a restart). libmilter owns SIGHUP, SIGTERM and
// SIGINT (each of them stops it), so reload takes SIGUSR1, as OpenDKIM does.
// A bad file keeps the running settings; both outcomes are counted and logged.
void reload(const Options& o, const Given& given) {
    if (o.config_file.empty()) {
        globals().log->write(Severity::info, "reload: no configuration file (-c): nothing to reload");
        return;
    }
    sd_notify(0, "RELOADING=1");
    auto loaded = config::load_file(o.config_file);
    std::string why;
    if (!loaded.ok()) {
        for (const auto& d : loaded.errors) why += (why.empty() ? "" : "; ") + d.to_string();
    } else if (auto settings = filter_settings(o, resend_settings_from(*loaded.config), given); !settings) {
        why = settings.error().message;
    } else {
        globals().config.store(std::make_shared<const FilterConfig>(std::move(*settings)));
        ++globals().counters.reloads;
        globals().log->write(Severity::info,
                             fmt::format("reloaded {}: action={} destination_rules={}", o.config_file,
                                         to_string(globals().config.load()->policy.action),
                                         globals().config.load()->policy.per_destination.size()));
    }
    if (!why.empty()) {
        ++globals().counters.reload_errors;
        globals().log->write(Severity::warning, "reload failed, keeping the running settings: " + why);
    }
    sd_notify(0, "READY=1");
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

}  // namespace

int main(int argc, char** argv) {
    Options o;
    CLI::App app{"retryguard-milter: refuse manual re-injection of messages Postfix is already retrying",
                 "retryguard-milter"};
    app.set_version_flag("--version", RETRYGUARD_VERSION);
    app.add_option("-c,--config", o.config_file,
                   "retryguard.yaml: socket, user, ledger and reinjection.* (options below override it)");
    app.add_option("-s,--socket", o.socket, "unix:/path, local:/path, inet:port@host or inet6:port@host");
    app.add_option("--socket-mode", o.socket_mode, "octal mode of a unix socket")->capture_default_str();
    app.add_option("--socket-owner", o.socket_owner, "USER[:GROUP] owning a unix socket");
    app.add_option("-u,--user", o.user, "USER[:GROUP] to run as (required when started as root)");
    app.add_option("--ledger", o.ledger, "ledger backend spec, or none")->capture_default_str();
    app.add_option("--action", o.action, "reject | hold | drop_duplicates | tag | log_only")
        ->capture_default_str();
    app.add_option("--destination-action", o.destination_actions,
                   "DOMAIN=ACTION (\".domain\": subdomains too)");
    app.add_option("--fingerprint", o.fingerprint,
                   "parts of the content fingerprint: sender,subject,body or none")
        ->capture_default_str();
    app.add_option("--log", o.log, "syslog | stderr | postlog:/var/spool/postfix/public/postlog")
        ->capture_default_str();
    app.add_option("--log-hostname", o.log_hostname,
                   "host field of postlog lines (default: this host's name)");
    app.add_option("--reject-code", o.reject_code)->capture_default_str();
    app.add_option("--reject-xcode", o.reject_xcode)->capture_default_str();
    app.add_option("--header-name", o.header_name, "header added by the tag action")->capture_default_str();
    app.add_option("--minimal-backoff", o.minimal_backoff,
                   "Postfix minimal_backoff_time, seconds (next-retry estimate)")
        ->capture_default_str();
    app.add_option("--maximal-backoff", o.maximal_backoff, "Postfix maximal_backoff_time, seconds")
        ->capture_default_str();
    app.add_option("--record-queue", o.record_queue,
                   "identities waiting to be recorded by the writer thread (0: record at end of message)")
        ->capture_default_str();
    app.add_option("--filter-rescan", o.filter_rescan,
                   "seconds between rebuilds of the identity filter from the ledger (0: no filter, every "
                   "message is looked up)")
        ->check(CLI::Range(0, 86400))
        ->capture_default_str();
    app.add_option("--timeout", o.timeout, "libmilter I/O timeout, seconds")->capture_default_str();
    app.add_flag("-n,--check", o.check_only, "check the options, open the ledger, and exit");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }

    // The YAML configuration gives every default; options on the command line win.
    std::optional<ResendSettings> from_file;
    if (!o.config_file.empty()) {
        auto loaded = config::load_file(o.config_file);
        if (!loaded.ok()) {
            std::string msg;
            for (const auto& d : loaded.errors) msg += "\n" + d.to_string();
            die(2, "configuration errors:" + msg);
        }
        const config::Config& c = *loaded.config;
        auto given = [&](const char* name) { return app.count(name) > 0; };
        if (!given("--socket")) o.socket = c.milter.socket.text;
        if (!given("--socket-mode")) o.socket_mode = fmt::format("{:04o}", c.milter.socket_mode);
        if (!given("--user") && !c.milter.user.empty()) o.user = c.milter.user + ":" + c.milter.group;
        if (!given("--socket-owner") && !c.milter.user.empty())
            o.socket_owner = c.milter.user + ":" + c.milter.group;
        if (!given("--ledger")) o.ledger = ledger_options_from(c).spec;
        if (!given("--log")) o.log = c.log.target == config::LogTarget::stderr_ ? "stderr" : "syslog";
        from_file = resend_settings_from(c);
    }
    if (o.socket.empty()) die(2, "no socket: give --socket or --config");

    std::string why;
    auto spec = config::parse_socket(o.socket, &why);
    if (!spec) die(2, "--socket " + o.socket + ": " + why);
    const Given given{app.count("--action") > 0, app.count("--header-name") > 0,
                      app.count("--fingerprint") > 0};
    auto config = filter_settings(o, from_file, given);
    if (!config) die(2, config.error().message);
    globals().config.store(std::make_shared<const FilterConfig>(std::move(*config)));

    if (o.log_hostname.empty()) {
        char host[256] = {};
        gethostname(host, sizeof host - 1);
        o.log_hostname = std::string(host).substr(0, std::string(host).find('.'));
    }
    auto sink = open_log_sink(o.log, "retryguard/milter", o.log_hostname);
    if (!sink) die(2, sink.error().message);
    globals().log = std::move(*sink);

    uid_t run_uid = getuid();
    gid_t run_gid = getgid();
    std::string run_user;
    if (!o.user.empty() && !lookup_owner(o.user, run_uid, run_gid, run_user))
        die(2, "--user: unknown user or group \"" + o.user + "\"");
    if (geteuid() == 0 && (o.user.empty() || run_uid == 0)) die(2, "refusing to run as root: give --user");

    // the store's own lines (the identity filter's rebuilds) go where the verdicts go
    const StoreLog store_log = [](Severity s, const std::string& text) {
        if (globals().log) globals().log->write(s, text);
    };
    if (o.check_only) {
        auto store =
            open_pending_store(o.ledger, o.record_queue, std::chrono::seconds(o.filter_rescan), store_log);
        if (!store) die(2, store.error().message);
        std::printf("retryguard-milter: configuration ok\n");
        return 0;
    }

    smfiDesc desc = filter_description();
    std::string conn = libmilter_spec(*spec);
    if (smfi_setconn(conn.data()) != MI_SUCCESS) die(2, "smfi_setconn failed for " + conn);
    if (smfi_settimeout(o.timeout) != MI_SUCCESS) die(2, "smfi_settimeout failed");
    if (smfi_register(desc) != MI_SUCCESS) die(2, "smfi_register failed");
    if (smfi_opensocket(true) != MI_SUCCESS) die(1, "cannot open the milter socket " + conn);
    if (spec->kind == config::SocketSpec::Kind::unix_path) {
        struct stat st {};
        if (::lstat(spec->path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
            g_socket = OwnSocket{spec->path, st.st_dev, st.st_ino};
            std::atexit(remove_own_socket);
        }
    }
    if (spec->kind == config::SocketSpec::Kind::unix_path) {
        char* end = nullptr;
        long mode = std::strtol(o.socket_mode.c_str(), &end, 8);
        if (!end || *end || mode < 0 || mode > 0777)
            die(2, "--socket-mode: expected an octal mode like 0660");
        if (chmod(spec->path.c_str(), static_cast<mode_t>(mode)) != 0)
            die(1, fmt::format("chmod {}: {}", spec->path, std::strerror(errno)));
        if (!o.socket_owner.empty()) {
            uid_t su;
            gid_t sg;
            std::string sname;
            if (!lookup_owner(o.socket_owner, su, sg, sname))
                die(2, "--socket-owner: unknown user or group \"" + o.socket_owner + "\"");
            if (chown(spec->path.c_str(), su, sg) != 0)
                die(1, fmt::format("chown {}: {}", spec->path, std::strerror(errno)));
        }
    }
    if (geteuid() == 0) {
        if (initgroups(run_user.c_str(), run_gid) != 0 || setgid(run_gid) != 0 || setuid(run_uid) != 0)
            die(1, fmt::format("cannot drop privileges to {}: {}", o.user, std::strerror(errno)));
        if (setuid(0) == 0) die(1, "privileges were not dropped");
    }

    // libmilter takes SIGTERM/SIGHUP/SIGINT with sigwait() in its own thread;
    // threads started before smfi_main() (the record writer) must block them
    // too, or the default action would kill the process without a clean stop.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGHUP);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    // SIGUSR1 (reload) has a thread of its own; libmilter never waits for it.
    std::thread([o, given] {
        sigset_t usr1;
        sigemptyset(&usr1);
        sigaddset(&usr1, SIGUSR1);
        for (;;) {
            int sig = 0;
            // This thread's top level: a reload that throws is a failed reload.
            if (sigwait(&usr1, &sig) == 0 && sig == SIGUSR1 &&
                !run_guarded(
                    "reload", [&] { reload(o, given); }, globals().counters.exceptions, milter_report())) {
                ++globals().counters.reload_errors;
                sd_notify(0, "READY=1");
            }
        }
    }).detach();

    auto store =
        open_pending_store(o.ledger, o.record_queue, std::chrono::seconds(o.filter_rescan), store_log);
    if (!store) die(2, store.error().message);
    globals().store = std::move(*store);

    globals().log->write(
        Severity::info,
        fmt::format("starting: socket={} ledger={} action={} fingerprint={} uid={}", conn,
                    globals().store ? globals().store->describe() : "none",
                    to_string(globals().config.load()->policy.action), o.fingerprint, getuid()));
    // Socket open, privileges dropped, ledger open: ready (systemd Type=notify).
    sd_notify(0, "READY=1");
    int rc = smfi_main();
    sd_notify(0, "STOPPING=1");
    if (globals().store) {
        globals().store->close();  // an asynchronous store writes what it still holds
        globals().counters.record_errors += globals().store->failed_records();
        globals().counters.lookups_filtered += globals().store->filtered_lookups();
        globals().counters.filter_errors += globals().store->filter_errors();
        globals().counters.exceptions += globals().store->exceptions_caught();
    }
    globals().log->write(Severity::info, "stopping: " + counters_line());
    remove_own_socket();
    return rc == MI_SUCCESS ? 0 : 1;
}
