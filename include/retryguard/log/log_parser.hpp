// log_parser.hpp -- turns one Postfix log line (or one journald/syslog record)
// into a typed Event (events.hpp). Owns line framing limits, time stamp parsing
// and year inference for time stamps without a year. It never reads files,
// never blocks and never throws: every line yields an Event, and whatever is not
// recognised becomes EventKind::unknown, counted by kind in stats().
//
// One LogParser per stream (file, journal, socket): the year inference state
// and the counters belong to that stream. Not thread-safe; cheap to construct.
//
// Work per line is linear in the line length; lines longer than
// kMaxLogLineLength are truncated (Event::truncated, stats().truncated).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "retryguard/log/events.hpp"
#include "retryguard/time.hpp"

namespace retryguard {

// Postfix itself caps a log record at a few KiB (line_length_limit, 2048 for
// SMTP; syslog daemons usually at 8 KiB); 64 KiB leaves room for any real line.
inline constexpr std::size_t kMaxLogLineLength = 64 * 1024;

struct LogParserOptions {
    // Anchor for RFC 3164 time stamps, which carry no year: a line that would lie
    // more than a day after this time belongs to the year before. Use the file's
    // modification time for imports and the current time for live logs. Unset:
    // the current time when the parser is constructed.
    std::optional<TimePoint> reference_time;
    // Forces the year of the first RFC 3164 line (later lines still roll over at
    // New Year). Overrides reference_time for the year.
    std::optional<int> year;
    // RFC 3164 time stamps (and RFC 3339 ones without an offset) are in the
    // logging host's local time, as syslog writes them; false reads them as UTC.
    bool local_time = true;
    // Fill Event::reply from the reason with parse_postfix_reason(). Off only for
    // callers that never look at the reply (it is the costliest step).
    bool parse_replies = true;
};

struct LogParserStats {
    std::uint64_t lines = 0;       // every call of parse()/parse_record()
    std::uint64_t recognised = 0;  // events with kind != unknown
    std::uint64_t unknown = 0;
    std::uint64_t truncated = 0;  // lines longer than kMaxLogLineLength
    std::map<std::string, std::uint64_t, std::less<>> unknown_by_kind;
};

// A record whose header was already split by its transport (journald fields:
// __REALTIME_TIMESTAMP, _HOSTNAME, SYSLOG_IDENTIFIER, _PID, MESSAGE).
struct LogRecord {
    TimePoint time{};
    std::string_view host;
    std::string_view identifier;  // "postfix/smtp", "postfix-out/smtp", "retryguard"
    std::int64_t pid = 0;
    std::string_view message;  // the text after "identifier[pid]: "
};

class LogParser {
  public:
    explicit LogParser(LogParserOptions options = {});

    // Parses one line (without or with its trailing newline) into `out`,
    // reusing out's string capacity: the fast path for followers. Returns true
    // when the line was recognised (out.kind != EventKind::unknown).
    bool parse(std::string_view line, Event& out);
    Event parse(std::string_view line);

    // Parses a record whose header the transport already split (journald).
    bool parse_record(const LogRecord& record, Event& out);

    // Re-anchors year inference, e.g. when a follower moves to another file.
    void set_reference_time(TimePoint reference);

    const LogParserStats& stats() const noexcept { return stats_; }
    const LogParserOptions& options() const noexcept { return options_; }

  private:
    bool parse_line(std::string_view line, Event& out);
    void dispatch(std::string_view program, std::string_view text, Event& out);
    bool finish(Event& out);
    void mark_unknown(Event& out, std::string_view kind);
    bool convert_3164(int month, int day, std::int64_t seconds_of_day, std::int64_t micros, TimePoint& out);
    bool local_to_utc(std::int64_t local_seconds, std::int64_t& utc_seconds);
    void note_time(TimePoint t, int year);

    LogParserOptions options_;
    LogParserStats stats_;
    TimePoint reference_{};
    // Year inference: the latest time stamp seen on this stream and its year.
    bool have_last_ = false;
    TimePoint last_time_{};
    int last_year_ = 0;
    // Local time conversion cache: offset valid for one local hour.
    std::int64_t cached_local_hour_ = INT64_MIN;
    std::int64_t cached_offset_ = 0;
};

}  // namespace retryguard
