// logging.hpp -- where every program's lines go: its own lines (the milter's,
// the policy daemon's) and the verdict lines. One module for every target:
// syslog (one openlog per process), standard error, Postfix's postlogd socket
// (for hosts that log with maillog_file) and a plain file. Records that carry
// a time stamp (postlog, file) have the shape Postfix's own msg_logger writes,
// "Mon DD HH:MM:SS host program[pid]: text", so they land next to Postfix's
// lines and the project's log parser reads them back. Writing never fails the
// caller and never blocks mail: a failed write is counted by the caller from
// the returned bool and the record dropped, never retried.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <string_view>

#include "retryguard/config/config.hpp"
#include "retryguard/result.hpp"

namespace retryguard::logging {

enum class Severity { info, warning, error };

// Postfix's own prefixes: "" for info, "warning: ", "error: ".
std::string_view severity_prefix(Severity s) noexcept;
int syslog_priority(Severity s) noexcept;  // LOG_INFO, LOG_WARNING, LOG_ERR
// log.level as the three severities: debug and info keep every line, notice
// and warning keep warnings and errors, error keeps errors.
Severity severity_floor(config::LogLevel level) noexcept;

// "mail", "daemon", "user", "local0".."local7" as syslog(3) codes; -1 otherwise.
int facility_code(std::string_view name) noexcept;

constexpr std::size_t kMaxRecord = 2000;  // Postfix's MSG_LOGGER_RECLEN

// Text from outside (peer replies, addresses) must not forge extra lines:
// control characters become '?', and the text is cut at kMaxRecord bytes.
std::string printable(std::string_view text);

// One record as Postfix's msg_logger writes it (local time, "%b %d %H:%M:%S"):
// "Mon DD HH:MM:SS host program[pid]: text", without a newline.
std::string format_record(std::time_t when, std::string_view host, std::string_view program, long pid,
                          std::string_view text);

// This host's name as Postfix logs it: up to the first dot; "localhost" when
// the name is not known.
std::string short_hostname();

struct Target {
    enum class Kind { syslog, stderr_stream, both, postlog, file, none };
    Kind kind = Kind::syslog;
    std::string path;   // postlog socket or file
    int facility = -1;  // syslog:FACILITY; -1: the one of Options
};

// "syslog", "syslog:local3", "stderr", "both" (syslog and stderr),
// "postlog:/var/spool/postfix/public/postlog", "file:/var/log/x.log", "none".
Result<Target> parse_target(std::string_view spec);

struct Options {
    std::string program = "retryguard";  // syslog ident and program field
    std::string hostname;                // host field of stamped records ("" = short_hostname())
    int facility = 2 << 3;               // LOG_MAIL, unless the target names one
    Severity min_severity = Severity::info;
    // Standard error lines start "program[pid]: "; verdict lines on standard
    // error are the bare text (one verdict a line, for a pipe to read).
    bool stderr_program = true;
};

class Sink {
  public:
    virtual ~Sink() = default;
    // False when the record could not be written; it is then dropped.
    // A record below Options::min_severity is dropped and counts as written.
    virtual bool write(Severity s, std::string_view text) noexcept = 0;
    // A file target whose last line was cut mid-write: end it with a newline
    // so the next record starts a line of its own. Other targets: nothing.
    virtual bool end_torn_line() noexcept { return true; }

    void info(std::string_view text) noexcept { (void)write(Severity::info, text); }
    void warning(std::string_view text) noexcept { (void)write(Severity::warning, text); }
    void error(std::string_view text) noexcept { (void)write(Severity::error, text); }
};

// Opens the target (the postlog socket is connected, the file opened for
// appending) before privileges are dropped. Thread-safe writes.
Result<std::unique_ptr<Sink>> open_sink(const Target& target, const Options& options);

// syslog(3) has one identity per process: the first call opens it (LOG_PID,
// LOG_NDELAY), later calls keep it. Records for another facility pass it in
// their priority instead of reopening.
void open_syslog_once(const std::string& ident, int facility);

// The programs' targets from the configuration: log.target for their own
// lines; verdict lines go to log.verdicts when set, else where log.target
// sends the other lines (syslog wins for "both": verdicts belong in the mail log).
Target lines_target(const config::Config& c);
Result<Target> verdicts_target(const config::Config& c);
// Options for program `name` ("milter", "policyd"): log.ident + "/" + name,
// log.facility, log.level, log.hostname.
Options program_options(const config::Config& c, std::string_view name);

}  // namespace retryguard::logging
