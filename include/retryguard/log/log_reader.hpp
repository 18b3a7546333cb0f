// log_reader.hpp -- reads a whole log file (plain or gzip, or standard input)
// line by line with bounded memory, for `retryguard events` and imports of old
// logs, and the one loop both run over a file: open it, parse its lines with a
// parser of its own. Not a follower: it reads to the end once and never waits
// for more.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "retryguard/log/log_parser.hpp"
#include "retryguard/result.hpp"
#include "retryguard/time.hpp"

namespace retryguard {

class LogFileReader {
  public:
    // path "-" reads standard input. gzip is detected by content, not by name.
    static Result<LogFileReader> open(const std::string& path);

    LogFileReader(LogFileReader&&) noexcept;
    LogFileReader& operator=(LogFileReader&&) noexcept;
    ~LogFileReader();

    // Next line without its newline, valid until the next call. A line longer
    // than max_line is returned cut to max_line + 1 bytes (so the parser sees
    // and counts it as too long) and the rest of it is skipped. Returns false at
    // the end; an I/O or decompression error is an Error.
    Result<bool> next(std::string_view& line);

    // The file's modification time (the reference for year inference); the
    // current time for standard input.
    TimePoint modified() const noexcept { return modified_; }

    std::size_t max_line = 64 * 1024;

  private:
    LogFileReader() = default;
    struct Impl;
    std::unique_ptr<Impl> impl_;
    TimePoint modified_{};
};

// What reading one file with read_log_file() came to.
struct LogFileRead {
    Status status;         // why the file could not be opened, or read to its end
    LogParserStats stats;  // its parser's, for the lines handed over before any error
};

using LogLineHandler = std::function<void(std::string_view line, LogParser& parser)>;

// Opens `path` (LogFileReader::open: plain, gzip, "-" for standard input),
// makes a LogParser for it from `options` with the file's modification time as
// the reference for year inference (the file's own parser: years are inferred
// per file), and hands each line and that parser to on_line, in order, until
// the end or a read error. The handler parses (or not) as it needs.
LogFileRead read_log_file(const std::string& path, LogParserOptions options, const LogLineHandler& on_line);

// The time of the first of the file's first `max_lines` lines that carries one,
// with the year inference read_log_file() applies to it (the file's
// modification time, or options.year); nullopt when none does. An Error when
// the file cannot be opened or read. Not for standard input (it would consume it).
Result<std::optional<TimePoint>> first_log_time(const std::string& path, LogParserOptions options,
                                                std::size_t max_lines = 1000);

// The order to read log files in, given each one's first_log_time(): oldest
// first; equal times keep the given order, and files without a time stamp come
// last in the given order. `retryguard import /var/log/mail.log*` names the
// newest file first (and mail.log.10.gz before mail.log.2.gz): replaying a log
// out of order would end episodes before they begin.
std::vector<std::size_t> chronological_order(const std::vector<std::optional<TimePoint>>& starts);

// How to read several log files as one history.
struct LogFilePlan {
    std::vector<std::size_t> order;        // indexes of the files given, oldest first
    std::vector<std::optional<int>> year;  // per file given: LogParserOptions::year for it
    bool reordered = false;                // order is not the order given
};

// Orders `paths` (chronological_order) by their first time stamps, each year
// inferred from its file's modification time: the files of a rotated set lie
// before the time they were last written, so a set that spans New Year is
// ordered right even when copying gave them all the same time. With
// options.year (`--year`: the year of the first line) the first file gets that
// year and each later file its year relative to the first by the same
// inference, so a set read with --year crosses New Year as one log does.
// Standard input ("-") among them: the order given, every file with options.year.
LogFilePlan plan_log_files(const std::vector<std::string>& paths, const LogParserOptions& options);

}  // namespace retryguard
