// log_sink.hpp -- where retryguard-milter's lines go: syslog (facility mail,
// next to Postfix's own lines), stderr, or straight into Postfix's postlogd
// socket ("postlog:/var/spool/postfix/public/postlog") for hosts that log with
// maillog_file. Opened before privileges are dropped; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "retryguard/config.hpp"
#include "retryguard/result.hpp"

namespace retryguard::milter {

enum class Severity { info, warning, error };

class LogSink {
  public:
    virtual ~LogSink() = default;
    virtual void write(Severity s, std::string_view text) noexcept = 0;
};

struct LogSinkOptions {
    std::string program = "retryguard/milter";  // syslog ident / program field (log.ident + "/milter")
    std::string hostname;                       // host field of postlog lines (log.hostname)
    int facility = 2 << 3;                      // syslog facility code (LOG_MAIL; log.facility)
    Severity min_severity = Severity::info;     // lines below it are dropped (log.level)
};

// log.level as the milter's three severities: debug and info keep every line,
// notice and warning keep warnings and errors, error keeps errors.
Severity severity_floor(config::LogLevel level) noexcept;

// spec: "syslog", "stderr", "both" (syslog and stderr) or
// "postlog:/path/to/public/postlog".
Result<std::unique_ptr<LogSink>> open_log_sink(std::string_view spec, const LogSinkOptions& options);

}  // namespace retryguard::milter
