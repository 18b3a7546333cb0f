// verdict_log.hpp -- where verdict lines go: the mail log, next to Postfix's
// own lines. Targets: syslog (facility mail by default), Postfix's postlogd
// socket (for sites that use maillog_file instead of syslog), a plain file,
// or standard error. Writing a verdict never fails the caller: errors are
// counted and the line is dropped (fail open).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "retryguard/result.hpp"
#include "retryguard/verdict.hpp"

namespace retryguard {

struct VerdictLogTarget {
    enum class Kind { syslog, postlog, file, stderr_stream, none };
    Kind kind = Kind::syslog;
    std::string path;                  // postlog socket or file
    std::string ident = "retryguard";  // syslog tag, e.g. "retryguard/milter"
    std::string facility = "mail";
};

// "syslog", "syslog:local3", "postlog:/var/spool/postfix/public/postlog",
// "file:/var/log/retryguard.log", "stderr", "none".
Result<VerdictLogTarget> parse_verdict_log_target(std::string_view spec);

class VerdictLog {
  public:
    VerdictLog() = default;
    ~VerdictLog();
    VerdictLog(const VerdictLog&) = delete;
    VerdictLog& operator=(const VerdictLog&) = delete;

    Status open(const VerdictLogTarget& target);
    void write(const Verdict& v);
    void write_line(std::string_view message);  // "KEY: verdict=..." or any text

    std::uint64_t written() const noexcept { return written_.load(); }
    std::uint64_t failures() const noexcept { return failures_.load(); }

  private:
    std::mutex mu_;
    VerdictLogTarget target_;
    int fd_ = -1;
    std::string hostname_;
    std::atomic<std::uint64_t> written_{0};
    std::atomic<std::uint64_t> failures_{0};
};

}  // namespace retryguard
