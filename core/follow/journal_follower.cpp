// journal_follower.cpp -- follows the systemd journal (libsystemd sd_journal),
// keeps entries whose SYSLOG_IDENTIFIER starts with a configured prefix, and
// rebuilds each as the log line rsyslog would have written, so the parser reads
// journal and file alike. Resumes after the committed cursor. It must never
// deliver an entry at or before the committed cursor twice, nor block stop().
#include <systemd/sd-journal.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "retryguard/file_access.hpp"
#include "retryguard/follow/follower.hpp"

namespace retryguard {

std::string journal_entry_to_line(const JournalEntry& e, std::size_t max_line_bytes, bool* truncated) {
    using namespace std::chrono;
    auto t = sys_time<microseconds>(microseconds(static_cast<std::int64_t>(e.realtime_usec)));
    auto days = floor<std::chrono::days>(t);
    year_month_day ymd{days};
    hh_mm_ss<microseconds> hms{t - days};
    std::string line = fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}+00:00 {} {}", int(ymd.year()),
                                   unsigned(ymd.month()), unsigned(ymd.day()), hms.hours().count(),
                                   hms.minutes().count(), hms.seconds().count(), hms.subseconds().count(),
                                   e.hostname.empty() ? "localhost" : e.hostname,
                                   e.identifier.empty() ? "unknown" : e.identifier);
    if (!e.pid.empty()) line += fmt::format("[{}]", e.pid);
    line += ": ";
    line += e.message;
    // Header fields come from the journal too: no byte of any field may split the line.
    for (char& c : line)
        if (c == '\n' || c == '\r' || c == '\0') c = ' ';
    bool cut = line.size() > max_line_bytes;
    if (cut) line.resize(max_line_bytes);
    if (truncated) *truncated = cut;
    return line;
}

namespace {

using Clock = std::chrono::steady_clock;

std::string field(sd_journal* j, const char* name) {
    const void* data = nullptr;
    std::size_t len = 0;
    if (sd_journal_get_data(j, name, &data, &len) < 0) return {};
    std::string_view v(static_cast<const char*>(data), len);
    std::size_t skip = std::strlen(name) + 1;  // "NAME="
    return v.size() >= skip ? std::string(v.substr(skip)) : std::string();
}

class JournalFollower final : public LineSource {
  public:
    JournalFollower(std::string directory, FollowerPosition start, FollowerSettings settings)
        : LineSource(std::move(settings), std::move(start)), dir_(std::move(directory)) {
        counters_.kind = "journal";
        counters_.path = dir_.empty() ? "(local journal)" : dir_;
    }

    ~JournalFollower() override {
        if (j_) sd_journal_close(j_);
    }

    void check_readable() { note_readable(); }

    Status init() {
        int r = dir_.empty() ? sd_journal_open(&j_, SD_JOURNAL_LOCAL_ONLY)
                             : sd_journal_open_directory(&j_, dir_.c_str(), 0);
        if (r < 0)
            return make_error(ErrorKind::io,
                              fmt::format("journal {}: {}", counters_.path, std::strerror(-r)));
        if (Status st = add_matches(); !st) return st;
        // Fields larger than this come back cut; lines are bounded anyway.
        sd_journal_set_data_threshold(j_, settings_.max_line_bytes + 64);
        if (!committed_.cursor.empty()) {
            r = sd_journal_seek_cursor(j_, committed_.cursor.c_str());
            if (r < 0)
                return make_error(ErrorKind::invalid_input,
                                  fmt::format("journal cursor: {}", std::strerror(-r)));
            check_cursor_ = true;
        } else if (settings_.start_at_end) {
            sd_journal_seek_tail(j_);
            sd_journal_previous(j_);  // positions on the last entry: next() then moves past it
        } else {
            sd_journal_seek_head(j_);
        }
        return {};
    }

  protected:
    Status fill(LineBatch& out, Clock::time_point deadline) override {
        for (;;) {
            if (stopped()) return {};
            std::string last_cursor;
            while (out.lines.size() < settings_.batch_max_lines && out.bytes < settings_.batch_max_bytes) {
                int r = sd_journal_next(j_);
                if (r < 0) return make_error(ErrorKind::io, fmt::format("journal: {}", std::strerror(-r)));
                if (r == 0) break;
                if (check_cursor_) {
                    check_cursor_ = false;
                    // seek_cursor lands on the committed entry when it still exists
                    // (skip it: it was consumed), else on the next one (keep it).
                    if (sd_journal_test_cursor(j_, committed_.cursor.c_str()) > 0) continue;
                }
                JournalEntry e;
                e.identifier = field(j_, "SYSLOG_IDENTIFIER");
                if (e.identifier.empty()) e.identifier = field(j_, "_COMM");
                if (!wanted(e.identifier)) continue;
                std::uint64_t usec = 0;
                sd_journal_get_realtime_usec(j_, &usec);
                e.realtime_usec = usec;
                e.hostname = field(j_, "_HOSTNAME");
                e.pid = field(j_, "SYSLOG_PID");
                if (e.pid.empty()) e.pid = field(j_, "_PID");
                e.message = field(j_, "MESSAGE");
                char* cursor = nullptr;
                if (sd_journal_get_cursor(j_, &cursor) < 0 || !cursor) continue;
                last_cursor = cursor;
                std::free(cursor);
                bool cut = false;
                std::string line = journal_entry_to_line(e, settings_.max_line_bytes, &cut);
                if (cut) {
                    if (settings_.long_line == LongLinePolicy::skip) {
                        ++counters_.lines_skipped;
                        continue;
                    }
                    ++counters_.lines_truncated;
                }
                out.bytes += line.size();
                out.lines.push_back(RawLine{std::move(line), ++seq_, cut});
            }
            if (!last_cursor.empty() || !out.lines.empty()) {
                if (!last_cursor.empty()) out.end.cursor = std::move(last_cursor);
                if (!out.lines.empty()) return {};
            }
            note_readable();
            auto now = Clock::now();
            if (now >= deadline) return {};
            int fd = sd_journal_get_fd(j_);
            wait_readable(fd, std::min(deadline, now + settings_.poll_interval));
            sd_journal_process(j_);
        }
    }

    void add_status(FollowerStatus& st) override { st.read_offset = seq_; }

  private:
    // sd_journal_open() succeeds when this user may read no journal file at
    // all (journalctl's "insufficient permissions"): then nothing ever comes.
    // That is an error the admin must see, as an unreadable log file is:
    // counted, in status, logged once per change; cleared once files can be read.
    // While nothing can be read the journal is opened again at each check: a
    // journal that never opened a file watches no directory, so it would not
    // notice that access was granted.
    void note_readable() {
        if (!dir_.empty()) return;
        if (!counters_.unreadable.empty() && j_) {
            sd_journal_close(j_);
            j_ = nullptr;
            if (Status st = init(); !st) note_error(st.error().message);
            if (!j_) return;
        }
        const bool any = sd_journal_has_runtime_files(j_) > 0 || sd_journal_has_persistent_files(j_) > 0;
        if (any) {
            counters_.unreadable.clear();
            return;
        }
        std::string why = "journal: no journal file can be read: " + file_error_reason(EACCES) +
                          " (journald not running, or the user is in neither group systemd-journal nor adm)";
        if (why != counters_.unreadable) {
            ++counters_.open_errors;
            counters_.unreadable = why;
            note_error(why);
        }
    }

    Status add_matches() {
        std::string_view rest = settings_.journal_match;
        while (!rest.empty()) {
            const auto space = rest.find(' ');
            const std::string term(rest.substr(0, space));
            rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
            if (term.empty()) continue;
            const int r = term == "+" ? sd_journal_add_disjunction(j_)
                                      : sd_journal_add_match(j_, term.data(), term.size());
            if (r < 0)
                return make_error(ErrorKind::config,
                                  fmt::format("journal_match '{}': {}", term, std::strerror(-r)));
        }
        return {};
    }

    bool wanted(const std::string& identifier) const {
        for (const auto& p : settings_.journal_identifier_prefixes)
            if (identifier.compare(0, p.size(), p) == 0) return true;
        return false;
    }

    std::string dir_;
    sd_journal* j_ = nullptr;
    bool check_cursor_ = false;
    std::uint64_t seq_ = 0;
};

}  // namespace

Result<std::unique_ptr<LineSource>> open_journal_follower(std::string directory, FollowerPosition start,
                                                          FollowerSettings settings) {
    if (Status ok = validate(settings); !ok) return ok.error();
    if (start.source.empty()) start.source = std::string(kJournalSourceId);
    try {
        auto follower =
            std::make_unique<JournalFollower>(std::move(directory), std::move(start), std::move(settings));
        if (Status ok = follower->init(); !ok) return ok.error();
        follower->check_readable();
        return std::unique_ptr<LineSource>(std::move(follower));
    } catch (const std::exception& e) {
        return make_error(ErrorKind::internal, fmt::format("journal follower: {}", e.what()));
    }
}

bool valid_journal_match(std::string_view match, std::string* why) {
    while (!match.empty()) {
        const auto space = match.find(' ');
        const std::string_view term = match.substr(0, space);
        match = space == std::string_view::npos ? std::string_view() : match.substr(space + 1);
        if (term.empty() || term == "+") continue;
        const auto eq = term.find('=');
        bool ok = eq != std::string_view::npos && eq > 0 && !(term[0] >= '0' && term[0] <= '9');
        for (std::size_t i = 0; ok && i < eq; ++i)
            ok = (term[i] >= 'A' && term[i] <= 'Z') || (term[i] >= '0' && term[i] <= '9') || term[i] == '_';
        if (!ok) {
            if (why) *why = "'" + std::string(term) + "' is not FIELD=value (field: A-Z, 0-9, _)";
            return false;
        }
    }
    return true;
}

}  // namespace retryguard
