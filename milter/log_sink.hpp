// log_sink.hpp -- where retryguard-milter's lines go: syslog (facility mail,
// next to Postfix's own lines), stderr, or straight into Postfix's postlogd
// socket ("postlog:/var/spool/postfix/public/postlog") for hosts that log with
// maillog_file. Opened before privileges are dropped; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "retryguard/result.hpp"

namespace retryguard::milter {

enum class Severity { info, warning, error };

class LogSink {
  public:
    virtual ~LogSink() = default;
    virtual void write(Severity s, std::string_view text) noexcept = 0;
};

// spec: "syslog", "stderr" or "postlog:/path/to/public/postlog".
// hostname: the host field of postlog lines (Postfix writes its myhostname there).
Result<std::unique_ptr<LogSink>> open_log_sink(std::string_view spec, std::string_view program,
                                               std::string_view hostname);

}  // namespace retryguard::milter
