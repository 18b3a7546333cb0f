// cmd_follow.cpp -- `retryguard follow`: prints the raw lines a log follower
// delivers (file, journal or syslog socket), optionally resuming from and
// committing to positions in a state directory. A tool for checking what the
// daemon would ingest; it interprets nothing and decides nothing. On a terminal
// the lines are shown through the terminal renderer (core/text); piped, they
// are the bytes as delivered.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "commands.hpp"
#include "retryguard/follow/follower.hpp"
#include "retryguard/text/text.hpp"

namespace retryguard::cli {
namespace {

std::atomic<LineSource*> g_running{nullptr};

extern "C" void on_signal(int) {
    // stop() only stores an atomic and writes an eventfd: safe in a handler.
    if (LineSource* s = g_running.load()) s->stop();
}

struct FollowOptions {
    std::string file;
    std::string journal_dir;
    bool journal = false;
    std::string syslog_unix;
    std::string syslog_udp;  // ADDR:PORT
    std::string state_dir;
    bool once = false;
    bool status = false;
    std::size_t batch_lines = 1000;
    std::size_t max_line_bytes = 64 * 1024;
    bool from_end = false;
};

int run_follow(const FollowOptions& o) {
    int chosen = !o.file.empty() + o.journal + !o.syslog_unix.empty() + !o.syslog_udp.empty();
    if (chosen != 1) {
        std::fprintf(stderr,
                     "retryguard follow: give exactly one of FILE, --journal, --syslog-unix, --syslog-udp\n");
        return kExitUsage;
    }
    FollowerSettings s;
    s.batch_max_lines = o.batch_lines;
    s.max_line_bytes = o.max_line_bytes;
    s.start_at_end = o.from_end;
    if (Status ok = validate(s); !ok) {
        std::fprintf(stderr, "retryguard follow: %s\n", ok.error().message.c_str());
        return kExitUsage;
    }
    std::unique_ptr<FilePositionStore> store;
    if (!o.state_dir.empty()) store = std::make_unique<FilePositionStore>(o.state_dir);
    auto load = [&](const std::string& id) -> Result<FollowerPosition> {
        if (!store) {
            FollowerPosition p;
            p.source = id;
            return p;
        }
        return store->load(id);
    };

    Result<std::unique_ptr<LineSource>> src = make_error(ErrorKind::internal, "no source");
    if (!o.file.empty()) {
        auto pos = load(file_source_id(o.file));
        if (!pos)
            src = pos.error();
        else
            src = open_file_follower(o.file, *pos, s);
    } else if (o.journal) {
        auto pos = load(std::string(kJournalSourceId));
        if (!pos)
            src = pos.error();
        else
            src = open_journal_follower(o.journal_dir, *pos, s);
    } else if (!o.syslog_unix.empty()) {
        src = open_syslog_unix_source(o.syslog_unix, s);
    } else {
        auto colon = o.syslog_udp.rfind(':');
        unsigned long port = 0;
        std::string addr = colon == std::string::npos ? "" : o.syslog_udp.substr(0, colon);
        if (!addr.empty() && addr.front() == '[' && addr.back() == ']')
            addr = addr.substr(1, addr.size() - 2);
        try {
            port = colon == std::string::npos ? 70000 : std::stoul(o.syslog_udp.substr(colon + 1));
        } catch (const std::exception&) {
            port = 70000;
        }
        if (port > 65535) {
            std::fprintf(stderr, "retryguard follow: --syslog-udp wants ADDR:PORT\n");
            return kExitUsage;
        }
        src = open_syslog_udp_source(addr, static_cast<std::uint16_t>(port), s);
    }
    if (!src) {
        std::fprintf(stderr, "retryguard follow: %s\n", src.error().message.c_str());
        return src.error().kind == ErrorKind::config ? kExitUsage : kExitAttention;
    }
    LineSource& source = **src;
    g_running.store(&source);
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);

    int rc = kExitOk;
    const bool on_terminal = ::isatty(STDOUT_FILENO) == 1;
    while (!source.stopped()) {
        auto batch = source.next_batch(o.once ? s.poll_interval : std::chrono::milliseconds(1000));
        if (!batch) {
            std::fprintf(stderr, "retryguard follow: %s\n", batch.error().message.c_str());
            rc = kExitAttention;
            break;
        }
        if (!*batch) {
            if (o.once) break;
            continue;
        }
        for (const auto& line : (*batch)->lines) {
            if (on_terminal) {
                // A person is reading: log text goes through the terminal renderer.
                const std::string shown = text::terminal(line.text);
                std::fwrite(shown.data(), 1, shown.size(), stdout);
            } else {
                std::fwrite(line.text.data(), 1, line.text.size(), stdout);  // piped: the bytes as delivered
            }
            std::fputc('\n', stdout);
        }
        std::fflush(stdout);
        if (store) {
            if (Status saved = store->save((*batch)->end); !saved) {
                std::fprintf(stderr, "retryguard follow: %s\n", saved.error().message.c_str());
                rc = kExitAttention;
                break;
            }
        }
        source.commit();
    }
    g_running.store(nullptr);
    if (o.status) std::fprintf(stderr, "%s\n", format_status(source.status()).c_str());
    return rc;
}

}  // namespace

void add_follow_command(CLI::App& app) {
    auto opts = std::make_shared<FollowOptions>();
    auto* cmd = app.add_subcommand(
        "follow", "print the raw lines a log follower delivers (file, journal or syslog socket)");
    cmd->add_option("file", opts->file, "log file to follow (rotation and truncation are followed)");
    cmd->add_flag("--journal", opts->journal, "follow the systemd journal (Postfix identifiers)");
    cmd->add_option("--journal-dir", opts->journal_dir,
                    "read journal files from this directory instead of the local journal");
    cmd->add_option("--syslog-unix", opts->syslog_unix,
                    "receive syslog datagrams on a UNIX socket at this path");
    cmd->add_option("--syslog-udp", opts->syslog_udp,
                    "receive syslog datagrams on UDP, loopback only (127.0.0.1:5514, [::1]:5514)");
    cmd->add_option("--state-dir", opts->state_dir, "resume from and commit positions to this directory");
    cmd->add_flag("--once", opts->once, "stop when nothing new arrives (read to the current end)");
    cmd->add_flag("--from-end", opts->from_end, "first run without a saved position: skip existing lines");
    cmd->add_flag("--status", opts->status, "print the follower status to stderr at exit");
    cmd->add_option("--batch-lines", opts->batch_lines, "lines per batch")->capture_default_str();
    cmd->add_option("--max-line-bytes", opts->max_line_bytes, "longer lines are truncated")
        ->capture_default_str();
    cmd->callback([opts] {
        if (!opts->journal_dir.empty()) opts->journal = true;
        exit_code() = run_follow(*opts);
    });
}

}  // namespace retryguard::cli
