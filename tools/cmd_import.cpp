// cmd_import.cpp -- `retryguard import`: replays Postfix logs into the ledger
// and the rules engine through the same path as the live follower (Ingestor),
// printing the verdicts the history produces. Glue only.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "retryguard/config/config_engine.hpp"
#include "retryguard/ingest/ingest.hpp"
#include "retryguard/log/log_reader.hpp"
#include "retryguard/rules/verdict_log.hpp"
#include "retryguard/runtime/bulk_load.hpp"
#include "retryguard/runtime/runtime.hpp"
#include "retryguard/runtime/threads.hpp"

namespace retryguard::cli {
namespace {

struct ImportOptions {
    std::string config;
    std::vector<std::string> overrides;  // -o key=value
    std::vector<std::string> files;
    std::optional<int> year;
    std::vector<std::optional<int>> file_years;  // per file: the year of its first line (oldest_first)
    bool utc = false;
    bool quiet = false;
    bool to_log = false;
    std::string verdicts;   // a verdict log target the lines also go to
    std::size_t batch = 0;  // lines per ledger transaction; 0: the backend's default
};

// Default lines per ledger transaction. SQLite: each transaction rewrites every
// B-tree page it touches, and queue ids spread a batch's messages over the
// whole messages and recipients tables, so fewer, larger transactions write far
// less (docs/performance.md, "Importing a month of a relay's log"). Redis: one
// batch is one script, which blocks the server for everyone else while it runs
// and must finish within ledger.redis.timeout.
std::size_t default_batch(std::string_view backend) {
    return backend == "sqlite" ? 10000 : 2000;
}

// One batch on its way from the reading thread to the ledger thread.
struct ImportBatch {
    PreparedBatch prepared;
    std::size_t file = 0;  // index in ImportOptions::files
};

// The reading thread takes a free batch, fills it and hands it over full; the
// ledger thread takes the full ones in order and gives them back once the
// engine thread is done with them too. Four batches in all: one being filled,
// one waiting, one in the ledger, one with the engine, so memory stays
// bounded by four batches whatever the files' size. nullptr ends the stream.
class BatchPipe {
  public:
    BatchPipe() {
        for (auto& b : batches_) free_.push_back(&b);
    }
    ImportBatch* take_free() {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return !free_.empty(); });
        ImportBatch* b = free_.front();
        free_.pop_front();
        b->prepared.clear();
        return b;
    }
    void put_free(ImportBatch* b) { push(free_, b); }
    void put_full(ImportBatch* b) { push(full_, b); }
    ImportBatch* take_full() {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return !full_.empty(); });
        ImportBatch* b = full_.front();
        full_.pop_front();
        return b;
    }

  private:
    void push(std::deque<ImportBatch*>& q, ImportBatch* b) {
        {
            std::lock_guard lock(mutex_);
            q.push_back(b);
        }
        cv_.notify_all();
    }
    std::array<ImportBatch, 4> batches_;
    std::deque<ImportBatch*> free_, full_;
    std::mutex mutex_;
    std::condition_variable cv_;
};

// Records the files in rt's ledger, batch by batch.
int import_into(Runtime* rt, const ImportOptions& opt) {
    // Many batches in a row: let the ledger trade memory for fewer writes.
    rt->ledger->set_bulk_mode(true);
    const std::size_t batch_lines = opt.batch > 0 ? opt.batch : default_batch(rt->ledger->backend());
    VerdictLog log;
    if (opt.to_log) {
        VerdictLogTarget t;
        t.ident = rt->config->log.ident + "/import";
        if (auto st = log.open(t); !st)
            fmt::print(stderr, "retryguard import: verdict log: {}\n", st.error().message);
    }
    // --verdicts: one more target (a file is read back after a crash, see below).
    VerdictLog target;
    if (!opt.verdicts.empty()) {
        auto t = parse_verdict_log_target(opt.verdicts);
        if (!t) {
            fmt::print(stderr, "retryguard import: --verdicts: {}\n", t.error().message);
            return kExitUsage;
        }
        t->ident = rt->config->log.ident + "/import";
        if (auto st = target.open(*t); !st) {
            fmt::print(stderr, "retryguard import: --verdicts: {}\n", st.error().message);
            return kExitUsage;
        }
    }
    // Verdict lines are collected while the Ingestor applies a batch's effects
    // and written in one go right after each call returns: the lines of
    // effects that committed reach standard output at once, not when a stdio
    // buffer fills (a kill -9 in between would lose them; see ingest.hpp).
    std::string out;
    auto emit = [&out] {
        if (out.empty()) return;
        std::fwrite(out.data(), 1, out.size(), stdout);
        std::fflush(stdout);
        out.clear();
    };
    Ingestor ingestor(
        *rt->ledger, rt->classifier, config::to_engine_settings(rt->config), [&](const Verdict& v) {
            if (!opt.quiet)
                fmt::format_to(std::back_inserter(out), "{} {}\n", format_rfc3339(v.time), format_verdict(v));
            if (opt.to_log) log.write(v);
            if (!opt.verdicts.empty()) target.write(v);
        });
    ingestor.set_lines_done(emit);
    // Lines of the last effects commit before a crash (the verdict outbox): the
    // --verdicts target writes those it lacks; standard output and syslog
    // cannot be read back and print them again (at least once).
    ingestor.set_outbox_sink([&](std::span<const OutboxEntry> entries) {
        std::vector<std::string> lines;
        lines.reserve(entries.size());
        for (const auto& e : entries) {
            lines.push_back(e.line);
            if (!opt.quiet) fmt::format_to(std::back_inserter(out), "{} {}\n", format_rfc3339(e.at), e.line);
            if (opt.to_log) log.write_line(e.line);
        }
        Ingestor::OutboxReplay r;
        if (!opt.verdicts.empty()) {
            const VerdictLog::Replay t = target.replay(lines);
            r.found = t.found;
            r.unchecked = t.unchecked;
        }
        if (!opt.quiet || opt.to_log) r.unchecked = std::max(r.unchecked, lines.size() - r.found);
        return r;
    });
    ingestor.set_poison_sink([&](std::string_view what, std::uint64_t where, std::string_view why) {
        fmt::print(stderr, "retryguard import: {} {} skipped: {}\n", what, where, why);
    });
    // A state that cannot be restored stays as it is: nothing is imported or saved.
    auto restored = ingestor.restore();
    emit();
    if (!restored) {
        fmt::print(stderr, "retryguard import: {}\n", restored.error().message);
        return kExitAttention;
    }
    // A reading thread parses and classifies the files into batches
    // (Ingestor::add_line); this one records each batch in the ledger, in the
    // order read, and the Ingestor's engine thread feeds the engine one batch
    // behind (below). The batches are the same as one thread would cut
    // (batch_lines, and each file's last lines), so the ledger and the verdicts are too.
    BatchPipe pipe;
    std::atomic<int> rc_reader{kExitOk};
    std::jthread reader_thread([&] {
        set_thread_name("rg-import-read");
        const std::shared_ptr<const Classifier> classifier = rt->classifier;
        for (std::size_t f = 0; f < opt.files.size(); ++f) {
            const std::string& path = opt.files[f];
            LogParserOptions po;
            po.year = f < opt.file_years.size() ? opt.file_years[f] : opt.year;
            po.local_time = !opt.utc;
            std::uint64_t line_no = 0, first_line = 1;
            auto poison = [&](std::string_view, std::uint64_t where, std::string_view why) {
                fmt::print(stderr, "retryguard import: {}:{}: line skipped: {}\n", path, first_line + where,
                           why);
            };
            ImportBatch* b = nullptr;  // taken with the file's first line
            const LogFileRead read = read_log_file(path, po, [&](std::string_view line, LogParser& parser) {
                if (!b) b = pipe.take_free();
                ++line_no;
                Ingestor::add_line(b->prepared, parser, *classifier, line, poison);
                if (b->prepared.lines >= batch_lines) {
                    b->file = f;
                    Ingestor::seal_journal(b->prepared);
                    pipe.put_full(b);
                    first_line = line_no + 1;
                    b = pipe.take_free();
                }
            });
            if (!read.status) {
                fmt::print(stderr, "retryguard import: {}\n", read.status.error().message);
                rc_reader = kExitAttention;
            }
            // Recorded, but cut: say so, as `events` and the followers' counters do.
            if (read.stats.truncated > 0)
                fmt::print(stderr,
                           "retryguard import: {}: {} lines longer than {} bytes, cut to that length\n", path,
                           read.stats.truncated, kMaxLogLineLength);
            if (b) {
                b->file = f;
                Ingestor::seal_journal(b->prepared);
                pipe.put_full(b);  // possibly empty: returned unused
            }
        }
        pipe.put_full(nullptr);
    });
    int rc = kExitOk;
    SaveSchedule schedule;  // when the engine state is saved (it trims the journal a restart replays)
    std::optional<std::size_t> failed_file;  // the ledger refused a batch of it: its later ones are dropped
    auto report_save = [](const std::optional<Status>& sv) {
        if (sv && !*sv)
            fmt::print(stderr, "retryguard import: saving engine state: {}\n", sv->error().message);
    };
    // The ledger records a batch while the engine thread feeds the one before
    // (Ingestor::ingest_pipelined).
    std::size_t unrecorded = 0;  // lines of batches the ledger refused, and of their files' later batches
    while (ImportBatch* b = pipe.take_full()) {
        if (b->prepared.lines == 0 || b->file == failed_file) {
            unrecorded += b->prepared.lines;
            pipe.put_free(b);
            continue;
        }
        const std::size_t file = b->file;
        const std::size_t lines = b->prepared.lines;
        const bool save_due = schedule.due(lines, ingestor.saved_state_bytes());
        auto step = ingestor.ingest_pipelined(
            b->prepared, [&pipe, b](PreparedBatch&) { pipe.put_free(b); }, save_due);
        emit();
        report_save(step.saved);
        if (!step.ingest) {
            fmt::print(stderr, "retryguard import: {}: ledger: {}\n", opt.files[file],
                       step.ingest.error().message);
            failed_file = file;
            unrecorded += lines;
            rc = kExitAttention;
            continue;
        }
        schedule.done(lines, save_due);
    }
    report_save(ingestor.finish_pipeline());
    emit();
    reader_thread.join();
    if (rc_reader != kExitOk) rc = rc_reader;
    std::optional<TimePoint> last_time;
    if (ingestor.engine().now() > TimePoint{}) last_time = ingestor.engine().now();
    if (last_time) {
        auto st = ingestor.advance(*last_time);
        emit();
        if (!st) {
            fmt::print(stderr, "retryguard import: final evaluation: {}\n", st.error().message);
            rc = kExitAttention;
        }
    }
    auto saved = ingestor.save();
    emit();
    if (!saved) {
        fmt::print(stderr, "retryguard import: saving engine state: {}\n", saved.error().message);
        rc = kExitAttention;
    }
    // Ends bulk mode now (SQLite: builds the indexes an import into an empty
    // ledger deferred), so that its cost is part of the import.
    rt->ledger->set_bulk_mode(false);
    const auto& s = ingestor.stats();
    fmt::print(stderr, "retryguard import: {} lines, {} events, {} new, {} already known, {} verdicts\n",
               s.lines, s.events, s.applied, s.duplicates, s.verdicts);
    if (unrecorded > 0)
        fmt::print(stderr,
                   "retryguard import: {} lines not recorded: the ledger refused them (see above); once that "
                   "is fixed, import the same files again (what was recorded is recognised and skipped)\n",
                   unrecorded);
    if (s.outbox_pending > 0)
        fmt::print(
            stderr,
            "retryguard import: verdict outbox: {} pending lines, {} already written, {} written again "
            "unchecked\n",
            s.outbox_pending, s.outbox_found, s.verdict_lines_replayed);
    return rc;
}

// ledger.redis.bulk_load: into an empty Redis ledger, the files go into a
// temporary SQLite ledger whose rows are copied into Redis
// (retryguard/runtime/bulk_load.hpp). nullopt: not done, import batch by batch.
std::optional<int> bulk_load(Runtime& rt, const ImportOptions& opt) {
    using Kind = BulkLoadOutcome::Kind;
    const auto out = run_bulk_load(
        rt, [&](Runtime& local) { return import_into(&local, opt); },
        [](const std::string& line) { fmt::print(stderr, "retryguard import: {}\n", line); });
    switch (out.kind) {
        case Kind::not_done: return std::nullopt;
        case Kind::refused: return import_into(&rt, opt);
        case Kind::attention: return kExitAttention;
        case Kind::done: break;
    }
    const auto& c = out.stats;
    fmt::print(
        stderr,
        "retryguard import: bulk load: copied {} messages, {} recipients, {} destinations, {} episodes and "
        "{} replay keys into Redis ({} commands, {} messages while importing{}; {:.2f} s after the "
        "import)\n",
        c.messages, c.recipients, c.destinations, c.episodes, c.seen_keys, c.commands, c.messages_early,
        c.early_redone ? ", removed and copied again" : "", out.copy_seconds);
    return out.import_rc;
}

// The files oldest first, each with the year of its first line
// (plan_log_files: the shell names `mail.log*` newest first), said on
// standard error when that is not the order given.
ImportOptions oldest_first(ImportOptions opt) {
    LogParserOptions po;
    po.year = opt.year;
    po.local_time = !opt.utc;
    const LogFilePlan plan = plan_log_files(opt.files, po);
    std::vector<std::string> files;
    for (std::size_t i : plan.order) {
        files.push_back(opt.files[i]);
        opt.file_years.push_back(plan.year[i]);
    }
    if (plan.reordered)
        fmt::print(stderr,
                   "retryguard import: reading the files oldest first (by their first time stamp): {}\n",
                   fmt::join(files, ", "));
    opt.files = std::move(files);
    return opt;
}

int run_import(const ImportOptions& given) {
    const ImportOptions opt = oldest_first(given);
    RuntimeOptions ro;
    ro.config_path = opt.config;
    ro.overrides = opt.overrides;
    ro.ledger_to_directory_owner = true;
    auto rt = open_runtime(ro);
    if (!rt) {
        fmt::print(stderr, "retryguard import: {}\n", rt.error().message);
        return kExitUsage;
    }
    for (const auto& n : rt->notices) fmt::print(stderr, "retryguard import: {}\n", n);
    if (rt->config->ledger.backend == config::LedgerBackend::redis && rt->config->ledger.redis_bulk_load)
        if (auto done = bulk_load(*rt, opt)) return *done;
    return import_into(&*rt, opt);
}

}  // namespace

void add_import_command(CLI::App& app) {
    auto opt = std::make_shared<ImportOptions>();
    auto* cmd = app.add_subcommand("import", "Replay Postfix logs into the ledger and the rules engine");
    cmd->add_option("files", opt->files, "Log files (plain or .gz; - for standard input)")->required();
    cmd->add_option("-c,--config", opt->config,
                    "Configuration file (default /etc/retryguard/retryguard.yaml)");
    cmd->add_option("-o", opt->overrides,
                    "KEY=VALUE: set a configuration key (repeatable), e.g. -o ledger.sqlite.path=/tmp/l.db")
        ->allow_extra_args(false);  // one KEY=VALUE per -o: the words after it are arguments
    cmd->add_option("--year", opt->year, "Year of the first line for time stamps without one");
    cmd->add_flag("--utc", opt->utc, "Time stamps without a zone are UTC (default: local time)");
    cmd->add_flag("-q,--quiet", opt->quiet, "Do not print the verdicts");
    cmd->add_flag("--log", opt->to_log, "Also write the verdicts to the mail log (syslog)");
    cmd->add_option("--verdicts", opt->verdicts,
                    "Also write the verdict lines to this target (file:/path, syslog[:facility], "
                    "postlog:/path, stderr); a file is read back after a crash so each line is written once");
    cmd->add_option("--batch", opt->batch, "Lines per ledger transaction (default: 10000 SQLite, 2000 Redis)")
        ->check(CLI::Range(1, 1000000));
    cmd->callback([opt] { exit_code() = run_import(*opt); });
}

}  // namespace retryguard::cli
