// log_reader.hpp -- reads a whole log file (plain or gzip, or standard input)
// line by line with bounded memory, for `retryguard events` and imports of old
// logs. Not a follower: it reads to the end once and never waits for more.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

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

}  // namespace retryguard
