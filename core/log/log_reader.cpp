// log_reader.cpp -- plain/gzip log files read in large blocks through zlib
// (gzread passes uncompressed files through unchanged). Owns bounded line
// framing for whole-file reads; must never hold more than one block plus one
// capped line in memory, whatever the file contains; and read_log_file(), the
// loop `retryguard events` and `retryguard import` run over each file.
#include "retryguard/log/log_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <vector>

namespace retryguard {

struct LogFileReader::Impl {
    gzFile file = nullptr;
    std::string path;
    std::vector<char> block = std::vector<char>(256 * 1024);
    std::size_t begin = 0, end = 0;
    bool eof = false;
    std::string line;  // a line that spans blocks
    ~Impl() {
        if (file) gzclose(file);
    }
};

LogFileReader::LogFileReader(LogFileReader&&) noexcept = default;
LogFileReader& LogFileReader::operator=(LogFileReader&&) noexcept = default;
LogFileReader::~LogFileReader() = default;

Result<LogFileReader> LogFileReader::open(const std::string& path) {
    LogFileReader r;
    r.impl_ = std::make_unique<Impl>();
    r.impl_->path = path;
    int fd = path == "-" ? dup(STDIN_FILENO) : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return make_error(ErrorKind::io, path + ": " + std::strerror(errno));
    struct stat st {};
    if (path != "-" && fstat(fd, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            close(fd);
            return make_error(ErrorKind::io, path + ": is a directory");
        }
        r.modified_ =
            TimePoint{Duration{std::int64_t(st.st_mtim.tv_sec) * 1000000 + st.st_mtim.tv_nsec / 1000}};
    } else {
        r.modified_ = std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now());
    }
    r.impl_->file = gzdopen(fd, "rb");
    if (!r.impl_->file) {
        close(fd);
        return make_error(ErrorKind::io, path + ": cannot open");
    }
    gzbuffer(r.impl_->file, 256 * 1024);
    return r;
}

Result<bool> LogFileReader::next(std::string_view& out) {
    Impl& s = *impl_;
    s.line.clear();
    bool spanning = false;
    bool overlong = false;
    for (;;) {
        if (s.begin == s.end) {
            if (s.eof) {
                if (!spanning) return false;
                out = s.line;
                return true;
            }
            int n = gzread(s.file, s.block.data(), static_cast<unsigned>(s.block.size()));
            if (n < 0) {
                int err = 0;
                const char* msg = gzerror(s.file, &err);
                return make_error(ErrorKind::io, s.path + ": " + (msg ? msg : "read error"));
            }
            if (n == 0) {
                // A truncated gzip stream ends without an error from gzread;
                // zlib reports it as Z_BUF_ERROR ("unexpected end of file").
                int err = 0;
                const char* msg = gzerror(s.file, &err);
                if (err == Z_BUF_ERROR) return make_error(ErrorKind::io, s.path + ": truncated gzip stream");
                if (err != Z_OK) return make_error(ErrorKind::io, s.path + ": " + (msg ? msg : "read error"));
                s.eof = true;
                continue;
            }
            s.begin = 0;
            s.end = static_cast<std::size_t>(n);
        }
        const char* start = s.block.data() + s.begin;
        const char* nl = static_cast<const char*>(std::memchr(start, '\n', s.end - s.begin));
        std::size_t len = nl ? static_cast<std::size_t>(nl - start) : s.end - s.begin;
        if (!spanning && nl) {
            s.begin += len + 1;
            if (len > max_line + 1) len = max_line + 1;
            out = std::string_view(start, len);
            return true;
        }
        spanning = true;
        if (!overlong) {
            std::size_t room = max_line + 1 - std::min(s.line.size(), max_line + 1);
            s.line.append(start, std::min(len, room));
            overlong = s.line.size() > max_line;
        }
        s.begin += len + (nl ? 1 : 0);
        if (nl) {
            out = s.line;
            return true;
        }
    }
}

LogFileRead read_log_file(const std::string& path, LogParserOptions options, const LogLineHandler& on_line) {
    LogFileRead read;
    auto reader = LogFileReader::open(path);
    if (!reader) {
        read.status = reader.error();
        return read;
    }
    options.reference_time = reader->modified();
    LogParser parser(options);
    std::string_view line;
    for (;;) {
        auto more = reader->next(line);
        if (!more) {
            read.status = more.error();
            break;
        }
        if (!*more) break;
        on_line(line, parser);
    }
    read.stats = parser.stats();
    return read;
}

Result<std::optional<TimePoint>> first_log_time(const std::string& path, LogParserOptions options,
                                                std::size_t max_lines) {
    auto reader = LogFileReader::open(path);
    if (!reader) return reader.error();
    options.reference_time = reader->modified();
    options.parse_replies = false;  // only the time stamp is wanted
    LogParser parser(options);
    Event ev;
    std::string_view line;
    for (std::size_t n = 0; n < max_lines; ++n) {
        auto more = reader->next(line);
        if (!more) return more.error();
        if (!*more) break;
        ev = Event{};
        parser.parse(line, ev);
        if (ev.time != TimePoint{}) return std::optional<TimePoint>(ev.time);
    }
    return std::optional<TimePoint>();
}

std::vector<std::size_t> chronological_order(const std::vector<std::optional<TimePoint>>& starts) {
    std::vector<std::size_t> order(starts.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    // stable: equal starts, and files without a time stamp (last), keep the given order
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        if (!starts[a] || !starts[b]) return starts[a].has_value() && !starts[b].has_value();
        return *starts[a] < *starts[b];
    });
    return order;
}

namespace {

// The calendar year of t as the parser reads the file's lines: local or UTC.
int year_of(TimePoint t, bool local_time) {
    const std::time_t secs = std::chrono::system_clock::to_time_t(t);
    std::tm tm{};
    if (local_time ? ::localtime_r(&secs, &tm) == nullptr : ::gmtime_r(&secs, &tm) == nullptr) return 0;
    return tm.tm_year + 1900;
}

}  // namespace

LogFilePlan plan_log_files(const std::vector<std::string>& paths, const LogParserOptions& options) {
    LogFilePlan plan;
    plan.year.assign(paths.size(), options.year);
    plan.order.resize(paths.size());
    for (std::size_t i = 0; i < paths.size(); ++i) plan.order[i] = i;
    if (paths.size() < 2 || std::find(paths.begin(), paths.end(), "-") != paths.end()) return plan;
    LogParserOptions inferred = options;
    inferred.year.reset();  // each file's own year, from its modification time
    std::vector<std::optional<TimePoint>> starts;
    for (const auto& p : paths) {
        auto t = first_log_time(p, inferred);  // unreadable: the reader says why when it gets there
        starts.push_back(t ? *t : std::nullopt);
    }
    plan.order = chronological_order(starts);
    plan.reordered = !std::is_sorted(plan.order.begin(), plan.order.end());
    if (!options.year) return plan;
    // --year names the year of the first line: the first file with a time
    // stamp has it; the others keep their distance in years from that file.
    std::optional<int> first;
    for (std::size_t i : plan.order) {
        if (!starts[i]) continue;
        const int y = year_of(*starts[i], options.local_time);
        if (!first) first = y;
        plan.year[i] = *options.year + (y - *first);
    }
    return plan;
}

}  // namespace retryguard
