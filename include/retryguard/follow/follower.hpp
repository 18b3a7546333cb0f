// follower.hpp -- log line sources: a growing/rotating log file, the systemd
// journal, and a syslog datagram socket. A source yields batches of complete,
// raw log lines together with the FollowerPosition just past the batch's last
// line; it never interprets a line (the log parser does) and never advances past
// what its consumer has accepted. The consumer commits a batch's effects and its
// end position in one transaction; a source constructed with that position
// resumes exactly there, so ingest is exactly-once across restarts and kill -9
// (datagram sockets excepted: a datagram cannot be read twice, see
// docs/followers.md).
//
// Threading: everything except stop() is called from one thread (the daemon runs
// each source on its own thread, or the CLI drives one in its main loop); stop()
// may be called from any thread and makes a blocked next_batch() return promptly.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "retryguard/follow/position.hpp"
#include "retryguard/result.hpp"
#include "retryguard/time.hpp"

namespace retryguard {

// ---------------------------------------------------------------------------
// Settings

enum class LongLinePolicy {
    truncate,  // deliver the first max_line_bytes of the line, mark it truncated
    skip,      // drop the line entirely (still counted in the status)
};

struct FollowerSettings {
    std::size_t batch_max_lines = 1000;            // a batch holds at most this many lines ...
    std::size_t batch_max_bytes = 1 << 20;         // ... and at most about this many bytes of line text
    std::chrono::milliseconds poll_interval{250};  // re-check even without a notification
    std::size_t max_line_bytes = 64 * 1024;        // longer lines are truncated or skipped
    LongLinePolicy long_line = LongLinePolicy::truncate;
    // How long to back off after the consumer refused a batch (run() only).
    std::chrono::milliseconds refusal_backoff{200};

    // File sources.
    bool use_inotify = true;    // false: plain polling every poll_interval
    bool start_at_end = false;  // first run without a saved position: skip existing content
    // After the path was rotated away, the old file is drained to its end and then
    // watched this long for late writes (a writer that has not reopened yet) before
    // the follower switches to the new file.
    std::chrono::milliseconds rotation_grace{1000};
    std::size_t read_chunk_bytes = 256 * 1024;

    // Journal sources: entries whose SYSLOG_IDENTIFIER starts with one of these.
    // Postfix's own lines, and the milter's verdicts (refused resends, which
    // explain shows): what a file source finds in mail.log too.
    std::vector<std::string> journal_identifier_prefixes{"postfix", "retryguard/milter"};
    // ...and that match this (sources[].journal_match), as journalctl reads
    // matches: FIELD=value terms separated by spaces, all of which must hold,
    // "+" between groups of them for either group. Empty: every entry.
    std::string journal_match;

    // Syslog datagram sources.
    // Longer datagrams are cut here; 0: room for a max_line_bytes line and its
    // header (datagram_limit).
    std::size_t max_datagram_bytes = 0;
    std::string syslog_default_host = "localhost";  // for RFC 3164 datagrams without a host field
};

// Checks ranges (non-zero batch sizes, line limit >= 80, ...).
Status validate(const FollowerSettings& settings);

// The size a syslog source reads a datagram into: max_datagram_bytes when
// set, else a max_line_bytes line plus room for its header (<PRI>, version,
// time stamp, host, tag and pid, RFC 5424's structured data), at least 8 KiB
// and at most 65535 bytes (the most a datagram holds), so that a line is cut
// at max_line_bytes and not at a smaller datagram size.
std::size_t datagram_limit(const FollowerSettings& settings) noexcept;

// Whether `match` is a journal match as FollowerSettings::journal_match
// describes it (field names: upper case, digits, '_', not starting with a digit).
bool valid_journal_match(std::string_view match, std::string* why = nullptr);

// ---------------------------------------------------------------------------
// Batches and status

struct RawLine {
    std::string text;            // without the trailing newline; bytes as found (any encoding)
    std::uint64_t position = 0;  // file: byte offset of the line's start; socket: datagram number;
                                 // journal: entry number in this run (the cursor is in LineBatch::end)
    bool truncated = false;      // cut at max_line_bytes / max_datagram_bytes
};

struct LineBatch {
    std::vector<RawLine> lines;
    FollowerPosition end;   // commit this with the batch's effects
    std::size_t bytes = 0;  // sum of line lengths
    bool empty() const noexcept { return lines.empty(); }
};

struct FollowerStatus {
    std::string source;   // FollowerPosition::source
    std::string kind;     // "file", "journal", "syslog-unix", "syslog-udp"
    std::string path;     // file path, journal directory, socket path or address
    std::string reading;  // the file actually being read (differs from path while draining a rotated file)
    std::uint64_t device = 0;
    std::uint64_t inode = 0;
    std::uint64_t offset = 0;       // committed position (bytes for files, datagrams for sockets)
    std::uint64_t read_offset = 0;  // how far the source has read ahead of the commit
    std::uint64_t file_size = 0;
    std::uint64_t lag_bytes = 0;   // file_size - offset of the file being read (plus undrained rotated files)
    std::string cursor;            // journal
    std::uint64_t lines_read = 0;  // lines delivered and committed since start
    std::uint64_t lines_truncated = 0;  // cut at the line limit
    std::uint64_t lines_skipped = 0;    // dropped (LongLinePolicy::skip) or malformed datagrams
    std::uint64_t rotations = 0;        // rename-and-create rotations followed
    std::uint64_t truncations = 0;      // copytruncate / shrink events followed
    std::uint64_t batches_refused = 0;  // back-pressure: the consumer said "not now"
    bool pending = false;               // a batch is waiting for the consumer
    bool inotify = false;               // notified (true) or polling (false)
    std::uint64_t open_errors = 0;      // attempts to open the source that failed other than "not there yet"
    std::string unreadable;             // why the source cannot be read now (permission...), "" when it can
    std::string last_error;             // empty when none
    TimePoint last_error_time{};
    TimePoint last_line_time{};  // wall clock of the last delivered line (source liveness, not event time)
};

// One line per key=value, for logs and `retryguard status`.
std::string format_status(const FollowerStatus& status);

// ---------------------------------------------------------------------------
// Position store: the ledger implements it for the daemon; FilePositionStore
// serves tools and tests.

class PositionStore {
  public:
    virtual ~PositionStore() = default;
    // A source never seen yet loads as a default position with only `source` set.
    virtual Result<FollowerPosition> load(const std::string& source) = 0;
    virtual Status save(const FollowerPosition& position) = 0;
};

// One small file per source in a directory, replaced atomically (write a temp
// file, fsync, rename, fsync the directory), so a crash leaves either the old or
// the new position, never a torn one.
class FilePositionStore final : public PositionStore {
  public:
    // sync=false skips the fsyncs: still atomic against a killed process (the page
    // cache survives it), not against a power loss. For tests and throwaway runs.
    explicit FilePositionStore(std::string directory, bool sync = true);
    Result<FollowerPosition> load(const std::string& source) override;
    Status save(const FollowerPosition& position) override;
    std::string file_for(const std::string& source) const;

  private:
    std::string dir_;
    bool sync_ = true;
};

// Text form used by FilePositionStore (one key=value per line, values escaped).
std::string serialize_position(const FollowerPosition& position);
Result<FollowerPosition> parse_position(std::string_view text);

// ---------------------------------------------------------------------------
// Line sources

// Accept a batch: return ok after committing it; return an error to refuse
// ("not now"), and the same batch will be offered again.
using BatchConsumer = std::function<Status(const LineBatch&)>;

class LineSource {
  public:
    virtual ~LineSource();
    LineSource(const LineSource&) = delete;
    LineSource& operator=(const LineSource&) = delete;

    // The batch waiting for the consumer: the same one again if it was not
    // committed, else new lines, waiting up to `timeout` for them. nullptr when
    // nothing arrived in time or the source was stopped. The pointer stays valid
    // until commit() or the next call.
    Result<const LineBatch*> next_batch(std::chrono::milliseconds timeout);
    // The consumer has made the pending batch durable: advance past it.
    void commit();
    // The consumer refused the pending batch (counted; it stays pending).
    void refuse(const Error& why);

    // One step: next_batch(timeout), hand it to the consumer, commit on success.
    // Returns the number of lines committed (0: nothing or refused; a refusal
    // also shows in status().last_error).
    Result<std::size_t> poll_once(const BatchConsumer& consumer, std::chrono::milliseconds timeout);
    // Loops poll_once until stop(); backs off refusal_backoff after a refusal.
    // Returns the first hard error of the source itself (not of the consumer).
    Status run(const BatchConsumer& consumer);

    // Thread-safe; idempotent.
    void stop();
    bool stopped() const noexcept { return stop_requested_.load(); }

    const FollowerPosition& committed() const noexcept { return committed_; }
    FollowerStatus status();
    const FollowerSettings& settings() const noexcept { return settings_; }

  protected:
    LineSource(FollowerSettings settings, FollowerPosition start);
    // Fill `out` with at least one line, waiting up to the deadline; an empty
    // `out` means nothing arrived in time (or stopped). `out.end` must be set
    // when lines are returned.
    virtual Status fill(LineBatch& out, std::chrono::steady_clock::time_point deadline) = 0;
    virtual void on_commit(const LineBatch& /*batch*/) {}
    virtual void add_status(FollowerStatus& status) = 0;
    // Sleep until the deadline, a readable fd (-1: none) or stop(); true when fd readable.
    bool wait_readable(int fd, std::chrono::steady_clock::time_point deadline);
    void note_error(std::string message);

    FollowerSettings settings_;
    FollowerPosition committed_;
    FollowerStatus counters_;  // the counters part of the status, maintained by sources
    std::atomic<bool> stop_requested_{false};

  private:
    LineBatch pending_;
    bool has_pending_ = false;
    int wake_fd_ = -1;  // eventfd written by stop()
};

// Follows a log file by path. `start` is the last committed position (from a
// PositionStore); a default position starts at the beginning of the file (or its
// end with settings.start_at_end). Never fails on a missing file: it waits for it.
// start.source names the positions it gives (default file_source_id(path); a
// configured source's name, config::position_id).
Result<std::unique_ptr<LineSource>> open_file_follower(std::string path, FollowerPosition start,
                                                       FollowerSettings settings = {});
std::string file_source_id(const std::string& path);  // "file:/var/log/mail.log"

// Follows the systemd journal: the local one when `directory` is empty, else the
// journal files in `directory` (sd_journal_open_directory). Resumes after
// start.cursor.
Result<std::unique_ptr<LineSource>> open_journal_follower(std::string directory, FollowerPosition start,
                                                          FollowerSettings settings = {});
inline constexpr std::string_view kJournalSourceId = "journal";

// One journal entry's fields, as the follower reads them.
struct JournalEntry {
    std::uint64_t realtime_usec = 0;  // __REALTIME_TIMESTAMP
    std::string hostname;             // _HOSTNAME
    std::string identifier;           // SYSLOG_IDENTIFIER (falls back to _COMM)
    std::string pid;                  // SYSLOG_PID (falls back to _PID)
    std::string message;              // MESSAGE (may be binary)
};
// "2026-11-29T20:38:50.123456+00:00 host postfix/smtp[123]: message": the shape
// rsyslog writes on Debian 12, so the parser reads journal and file alike.
// Newlines and NULs inside the message become spaces; the result is bounded by
// max_line_bytes (truncated flag set through `truncated`).
std::string journal_entry_to_line(const JournalEntry& entry, std::size_t max_line_bytes = 64 * 1024,
                                  bool* truncated = nullptr);

// Receives syslog datagrams forwarded by rsyslog / syslog-ng on a UNIX datagram
// socket (created at `path`, removed on destruction) ...
Result<std::unique_ptr<LineSource>> open_syslog_unix_source(std::string path, FollowerSettings settings = {});
// ... or on UDP: `address` is an IP address literal ("127.0.0.1", "::1"), on
// loopback unless allow_non_loopback (sources[].allow_non_loopback: anyone who
// can reach the address can feed lines); port 0 picks a free port (see
// bound_port()).
Result<std::unique_ptr<LineSource>> open_syslog_udp_source(std::string address, std::uint16_t port,
                                                           FollowerSettings settings = {},
                                                           bool allow_non_loopback = false);
// The UDP port a syslog UDP source listens on (0 for other sources).
std::uint16_t bound_port(const LineSource& source);

// RFC 3164 / RFC 5424 datagram -> log line for the parser, PRI stripped:
//   "<22>Nov 29 20:38:50 host postfix/smtp[1]: m"           -> "Nov 29 20:38:50 host postfix/smtp[1]: m"
//   "<22>Nov 29 20:38:50 postfix/smtp[1]: m" (no host)      -> host inserted from default_host
//   "<22>2026-11-29T20:38:50.1Z host postfix/smtp[1]: m"    -> as is, PRI stripped (rsyslog forward format)
//   "<22>1 2026-11-29T20:38:50.1Z host postfix/smtp 1 - - m" -> "2026-11-29T20:38:50.1Z host postfix/smtp[1]:
//   m"
// Strict and bounded: invalid PRI, version or header, and an RFC 5424 nil
// timestamp ("-": events carry their own time, the clock must not invent one)
// -> invalid_input; the result never holds a newline, CR or NUL and is at most
// max_bytes long.
struct SyslogLine {
    std::string line;
    int facility = 0;
    int severity = 0;
    bool truncated = false;
};
Result<SyslogLine> syslog_datagram_to_line(std::string_view datagram,
                                           std::string_view default_host = "localhost",
                                           std::size_t max_bytes = 64 * 1024);

}  // namespace retryguard
