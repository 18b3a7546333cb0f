// verdict_log.hpp -- where verdict lines go: the mail log, next to Postfix's
// own lines, through the logging module (logging.hpp). Targets: syslog
// (facility mail by default), Postfix's postlogd socket (for sites that use
// maillog_file instead of syslog), a plain file, or standard error. Writing a verdict never fails the caller:
// errors are counted and the line is dropped (fail open).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

#include "retryguard/logging/logging.hpp"
#include "retryguard/result.hpp"
#include "retryguard/rules/verdict.hpp"

namespace retryguard {

struct VerdictLogTarget {
    enum class Kind { syslog, postlog, file, stderr_stream, none };
    Kind kind = Kind::syslog;
    std::string path;                  // postlog socket or file
    std::string ident = "retryguard";  // syslog tag, e.g. "retryguard/milter"
    std::string facility = "mail";
    std::string hostname;  // host field of postlog and file records ("" = this host's short name)
};

// "syslog", "syslog:local3", "postlog:/var/spool/postfix/public/postlog",
// "file:/var/log/retryguard.log", "stderr", "none".
Result<VerdictLogTarget> parse_verdict_log_target(std::string_view spec);

// How many of `pending` (verdict line texts, oldest first) the text `tail`
// (the end of a file target) already ends with, in order: the largest k such
// that the last k complete lines end with ": " + pending[0..k). A last line
// without its newline (cut mid-write) is `torn` and counts as not written.
struct FileTailMatch {
    std::size_t present = 0;
    bool torn = false;
};
FileTailMatch match_file_tail(std::string_view tail, std::span<const std::string> pending);

class VerdictLog {
  public:
    VerdictLog() = default;
    ~VerdictLog();
    VerdictLog(const VerdictLog&) = delete;
    VerdictLog& operator=(const VerdictLog&) = delete;

    Status open(const VerdictLogTarget& target);
    void write(const Verdict& v);
    void write_line(std::string_view message);  // "KEY: verdict=..." or any text

    // Lines a crash may have kept from this target (the verdict outbox), oldest
    // first. A file target is read back: lines it already ends with are not
    // written again, a torn last line is ended with a newline first, the rest
    // are written (exactly once). Other targets cannot be read back: every line
    // is written again (at least once; counted as `unchecked`). none: nothing.
    struct Replay {
        std::size_t found = 0;      // already in the file
        std::size_t unchecked = 0;  // written again without a check
        bool torn = false;          // the file ended in a cut line
    };
    Replay replay(std::span<const std::string> lines);

    std::uint64_t written() const noexcept { return written_.load(); }
    std::uint64_t failures() const noexcept { return failures_.load(); }

  private:
    std::mutex mu_;
    VerdictLogTarget target_;
    std::unique_ptr<logging::Sink> sink_;
    std::atomic<std::uint64_t> written_{0};
    std::atomic<std::uint64_t> failures_{0};
};

}  // namespace retryguard
