// log_sink.cpp -- syslog, stderr and postlogd sinks for the milter's lines.
// Must never block mail: a failed write is dropped, never retried.
#include "log_sink.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

namespace retryguard::milter {

namespace {

int syslog_priority(Severity s) {
    switch (s) {
        case Severity::info: return LOG_INFO;
        case Severity::warning: return LOG_WARNING;
        case Severity::error: return LOG_ERR;
    }
    return LOG_INFO;
}

std::string_view prefix(Severity s) {
    switch (s) {
        case Severity::info: return "";
        case Severity::warning: return "warning: ";
        case Severity::error: return "error: ";
    }
    return "";
}

class SyslogSink final : public LogSink {
  public:
    SyslogSink(std::string program, int facility) : program_(std::move(program)) {
        openlog(program_.c_str(), LOG_PID | LOG_NDELAY, facility);
    }
    void write(Severity s, std::string_view text) noexcept override {
        syslog(syslog_priority(s), "%s%.*s", prefix(s).data(), static_cast<int>(text.size()), text.data());
    }

  private:
    std::string program_;  // openlog keeps the pointer
};

class StderrSink final : public LogSink {
  public:
    explicit StderrSink(std::string program) : program_(std::move(program)) {}
    void write(Severity s, std::string_view text) noexcept override {
        std::lock_guard lock(mu_);
        std::fprintf(stderr, "%s[%d]: %s%.*s\n", program_.c_str(), static_cast<int>(getpid()),
                     prefix(s).data(), static_cast<int>(text.size()), text.data());
        std::fflush(stderr);
    }

  private:
    std::mutex mu_;
    std::string program_;
};

// postlogd takes one datagram per line, already formatted the way Postfix's own
// programs send it: "Mon DD HH:MM:SS host program[pid]: text".
class PostlogSink final : public LogSink {
  public:
    PostlogSink(int fd, std::string program, std::string host)
        : fd_(fd), program_(std::move(program)), host_(std::move(host)) {}
    ~PostlogSink() override { ::close(fd_); }
    void write(Severity s, std::string_view text) noexcept override {
        try {
            char stamp[32];
            std::time_t now = std::time(nullptr);
            std::tm tm{};
            localtime_r(&now, &tm);
            std::strftime(stamp, sizeof stamp, "%b %e %H:%M:%S", &tm);
            std::string line = fmt::format("{} {} {}[{}]: {}{}", stamp, host_, program_, getpid(), prefix(s),
                                           text.substr(0, 4000));
            (void)::send(fd_, line.data(), line.size(), MSG_DONTWAIT);
        } catch (...) {
        }
    }

  private:
    int fd_;
    std::string program_, host_;
};

// Both syslog and stderr (log.target: both).
class TeeSink final : public LogSink {
  public:
    TeeSink(std::unique_ptr<LogSink> a, std::unique_ptr<LogSink> b) : a_(std::move(a)), b_(std::move(b)) {}
    void write(Severity s, std::string_view text) noexcept override {
        a_->write(s, text);
        b_->write(s, text);
    }

  private:
    std::unique_ptr<LogSink> a_, b_;
};

// Drops lines below log.level before they reach the sink.
class LevelSink final : public LogSink {
  public:
    LevelSink(std::unique_ptr<LogSink> inner, Severity floor) : inner_(std::move(inner)), floor_(floor) {}
    void write(Severity s, std::string_view text) noexcept override {
        if (static_cast<int>(s) >= static_cast<int>(floor_)) inner_->write(s, text);
    }

  private:
    std::unique_ptr<LogSink> inner_;
    Severity floor_;
};

Result<std::unique_ptr<LogSink>> open_unfiltered(std::string_view spec, const LogSinkOptions& o) {
    const std::string& program = o.program;
    if (spec == "syslog") return std::unique_ptr<LogSink>(new SyslogSink(program, o.facility));
    if (spec == "stderr") return std::unique_ptr<LogSink>(new StderrSink(program));
    if (spec == "both")
        return std::unique_ptr<LogSink>(new TeeSink(std::make_unique<SyslogSink>(program, o.facility),
                                                    std::make_unique<StderrSink>(program)));
    if (spec.starts_with("postlog:")) {
        std::string path(spec.substr(8));
        sockaddr_un addr{};
        if (path.empty() || path.size() >= sizeof addr.sun_path)
            return make_error(ErrorKind::config, "log: bad postlog socket path \"" + path + "\"");
        addr.sun_family = AF_UNIX;
        path.copy(addr.sun_path, path.size());
        int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return make_error(ErrorKind::io, "log: socket: " + std::string(std::strerror(errno)));
        if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
            std::string why = std::strerror(errno);
            ::close(fd);
            return make_error(ErrorKind::io, "log: connect " + path + ": " + why);
        }
        return std::unique_ptr<LogSink>(new PostlogSink(fd, program, o.hostname));
    }
    return make_error(ErrorKind::config,
                      "log.verdicts: the milter writes to syslog, stderr or postlog:/path, got \"" +
                          std::string(spec) + "\"");
}

}  // namespace

Severity severity_floor(config::LogLevel level) noexcept {
    switch (level) {
        case config::LogLevel::debug:
        case config::LogLevel::info: return Severity::info;
        case config::LogLevel::notice:
        case config::LogLevel::warning: return Severity::warning;
        case config::LogLevel::error: return Severity::error;
    }
    return Severity::info;
}

Result<std::unique_ptr<LogSink>> open_log_sink(std::string_view spec, const LogSinkOptions& options) {
    auto sink = open_unfiltered(spec, options);
    if (!sink || options.min_severity == Severity::info) return sink;
    return std::unique_ptr<LogSink>(new LevelSink(std::move(*sink), options.min_severity));
}

}  // namespace retryguard::milter
