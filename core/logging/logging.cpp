// logging.cpp -- the sinks behind logging.hpp: syslog, standard error,
// postlogd datagrams, an appended file, and both syslog and standard error.
// Must never block mail: sends are non-blocking, a failed write is reported
// to the caller and dropped, never retried.
#include "retryguard/logging/logging.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <mutex>

namespace retryguard::logging {

namespace {

struct FacilityName {
    std::string_view name;
    int value;
};
constexpr std::array kFacilities = {
    FacilityName{"mail", LOG_MAIL},     FacilityName{"daemon", LOG_DAEMON},
    FacilityName{"user", LOG_USER},     FacilityName{"local0", LOG_LOCAL0},
    FacilityName{"local1", LOG_LOCAL1}, FacilityName{"local2", LOG_LOCAL2},
    FacilityName{"local3", LOG_LOCAL3}, FacilityName{"local4", LOG_LOCAL4},
    FacilityName{"local5", LOG_LOCAL5}, FacilityName{"local6", LOG_LOCAL6},
    FacilityName{"local7", LOG_LOCAL7},
};

bool write_all(int fd, std::string_view bytes) noexcept {
    return fd >= 0 && ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
}

// Drops records below the floor before they reach the target.
class Filtered : public Sink {
  public:
    explicit Filtered(Severity floor) : floor_(floor) {}
    bool write(Severity s, std::string_view text) noexcept final {
        if (static_cast<int>(s) < static_cast<int>(floor_)) return true;
        return emit(s, text);
    }

  protected:
    virtual bool emit(Severity s, std::string_view text) noexcept = 0;

  private:
    Severity floor_;
};

class SyslogSink final : public Filtered {
  public:
    SyslogSink(const Options& o, int facility) : Filtered(o.min_severity), facility_(facility) {
        open_syslog_once(o.program, facility);
    }
    bool emit(Severity s, std::string_view text) noexcept override {
        try {
            const std::string line = printable(text);
            ::syslog(facility_ | syslog_priority(s), "%s%s", severity_prefix(s).data(), line.c_str());
            return true;
        } catch (...) {
            return false;
        }
    }

  private:
    int facility_;
};

class StderrSink final : public Filtered {
  public:
    explicit StderrSink(const Options& o)
        : Filtered(o.min_severity),
          head_(o.stderr_program ? o.program + "[" + std::to_string(::getpid()) + "]: " : "") {}
    bool emit(Severity s, std::string_view text) noexcept override {
        try {
            std::string line = head_;
            line += severity_prefix(s);
            line += printable(text);
            line += '\n';
            std::lock_guard lock(mu_);
            return write_all(STDERR_FILENO, line);
        } catch (...) {
            return false;
        }
    }

  private:
    std::mutex mu_;
    std::string head_;
};

// postlogd takes one datagram per record; a file takes one line per record.
class StampedSink final : public Filtered {
  public:
    StampedSink(int fd, bool datagram, const Options& o)
        : Filtered(o.min_severity),
          fd_(fd),
          datagram_(datagram),
          program_(o.program),
          host_(o.hostname.empty() ? short_hostname() : o.hostname) {}
    ~StampedSink() override { ::close(fd_); }
    bool emit(Severity s, std::string_view text) noexcept override {
        try {
            std::string body(severity_prefix(s));
            body += printable(text);
            std::string record = format_record(std::time(nullptr), host_, program_, ::getpid(), body);
            if (datagram_)
                return ::send(fd_, record.data(), record.size(), MSG_DONTWAIT | MSG_NOSIGNAL) ==
                       static_cast<ssize_t>(record.size());
            record += '\n';
            std::lock_guard lock(mu_);
            return write_all(fd_, record);
        } catch (...) {
            return false;
        }
    }
    bool end_torn_line() noexcept override {
        if (datagram_) return true;
        std::lock_guard lock(mu_);
        return write_all(fd_, "\n");
    }

  private:
    std::mutex mu_;
    int fd_;
    bool datagram_;
    std::string program_, host_;
};

class TeeSink final : public Sink {
  public:
    TeeSink(std::unique_ptr<Sink> a, std::unique_ptr<Sink> b) : a_(std::move(a)), b_(std::move(b)) {}
    bool write(Severity s, std::string_view text) noexcept override {
        const bool one = a_->write(s, text);
        const bool two = b_->write(s, text);
        return one && two;
    }

  private:
    std::unique_ptr<Sink> a_, b_;
};

class NoneSink final : public Sink {
  public:
    bool write(Severity, std::string_view) noexcept override { return true; }
};

Result<int> connect_postlog(const std::string& path) {
    sockaddr_un addr{};
    if (path.size() >= sizeof addr.sun_path)
        return make_error(ErrorKind::config, "postlog socket path too long: " + path);
    addr.sun_family = AF_UNIX;
    path.copy(addr.sun_path, path.size());
    const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return make_error(ErrorKind::io, std::string("socket: ") + std::strerror(errno));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        const int err = errno;
        ::close(fd);
        return make_error(ErrorKind::io, "connect to " + path + ": " + std::strerror(err));
    }
    return fd;
}

}  // namespace

std::string_view severity_prefix(Severity s) noexcept {
    switch (s) {
        case Severity::info: return "";
        case Severity::warning: return "warning: ";
        case Severity::error: return "error: ";
    }
    return "";
}

int syslog_priority(Severity s) noexcept {
    switch (s) {
        case Severity::info: return LOG_INFO;
        case Severity::warning: return LOG_WARNING;
        case Severity::error: return LOG_ERR;
    }
    return LOG_INFO;
}

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

int facility_code(std::string_view name) noexcept {
    for (const auto& f : kFacilities)
        if (f.name == name) return f.value;
    return -1;
}

std::string printable(std::string_view text) {
    std::string out;
    out.reserve(std::min(text.size(), kMaxRecord));
    for (unsigned char c : text) {
        if (out.size() >= kMaxRecord) break;
        out += (c < ' ' || c == 0x7f) ? '?' : static_cast<char>(c);
    }
    return out;
}

std::string format_record(std::time_t when, std::string_view host, std::string_view program, long pid,
                          std::string_view text) {
    std::tm lt{};
    ::localtime_r(&when, &lt);
    char stamp[32];
    const std::size_t n = std::strftime(stamp, sizeof stamp, "%b %d %H:%M:%S ", &lt);
    std::string record(stamp, n);
    record.reserve(n + host.size() + program.size() + text.size() + 16);
    record += host;
    record += ' ';
    record += program;
    record += '[' + std::to_string(pid) + "]: ";
    record += text;
    return record;
}

std::string short_hostname() {
    std::array<char, 256> host{};
    std::string name;
    if (::gethostname(host.data(), host.size() - 1) == 0) name = host.data();
    name = name.substr(0, name.find('.'));
    return name.empty() ? "localhost" : name;
}

Result<Target> parse_target(std::string_view spec) {
    Target t;
    const auto colon = spec.find(':');
    const std::string_view kind = spec.substr(0, colon);
    const std::string_view arg =
        colon == std::string_view::npos ? std::string_view{} : spec.substr(colon + 1);
    const bool bare = colon == std::string_view::npos;
    if (kind == "syslog") {
        t.kind = Target::Kind::syslog;
        if (!arg.empty()) {
            t.facility = facility_code(arg);
            if (t.facility < 0)
                return make_error(ErrorKind::config, "unknown syslog facility '" + std::string(arg) + "'");
        }
    } else if (kind == "postlog" || kind == "file") {
        if (arg.empty() || arg.front() != '/')
            return make_error(ErrorKind::config, std::string(kind) + ": needs an absolute path");
        t.kind = kind == "postlog" ? Target::Kind::postlog : Target::Kind::file;
        t.path = std::string(arg);
    } else if (kind == "stderr" && bare) {
        t.kind = Target::Kind::stderr_stream;
    } else if (kind == "both" && bare) {
        t.kind = Target::Kind::both;
    } else if (kind == "none" && bare) {
        t.kind = Target::Kind::none;
    } else {
        return make_error(ErrorKind::config, "bad log target '" + std::string(spec) +
                                                 "' (expected syslog[:facility], postlog:/path, file:/path, "
                                                 "stderr, both or none)");
    }
    return t;
}

void open_syslog_once(const std::string& ident, int facility) {
    static std::once_flag once;
    // openlog keeps the pointer: the ident lives as long as the process.
    static std::string kept;
    std::call_once(once, [&] {
        kept = ident;
        ::openlog(kept.c_str(), LOG_PID | LOG_NDELAY, facility);
    });
}

Result<std::unique_ptr<Sink>> open_sink(const Target& target, const Options& options) {
    const int facility = target.facility >= 0 ? target.facility : options.facility;
    switch (target.kind) {
        case Target::Kind::syslog: return std::unique_ptr<Sink>(new SyslogSink(options, facility));
        case Target::Kind::stderr_stream: return std::unique_ptr<Sink>(new StderrSink(options));
        case Target::Kind::both:
            return std::unique_ptr<Sink>(new TeeSink(std::make_unique<SyslogSink>(options, facility),
                                                     std::make_unique<StderrSink>(options)));
        case Target::Kind::none: return std::unique_ptr<Sink>(new NoneSink());
        case Target::Kind::postlog: {
            auto fd = connect_postlog(target.path);
            if (!fd) return fd.error();
            return std::unique_ptr<Sink>(new StampedSink(*fd, true, options));
        }
        case Target::Kind::file: {
            const int fd = ::open(target.path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
            if (fd < 0) return make_error(ErrorKind::io, "open " + target.path + ": " + std::strerror(errno));
            return std::unique_ptr<Sink>(new StampedSink(fd, false, options));
        }
    }
    return make_error(ErrorKind::internal, "unknown log target");
}

Target lines_target(const config::Config& c) {
    Target t;
    switch (c.log.target) {
        case config::LogTarget::syslog: t.kind = Target::Kind::syslog; break;
        case config::LogTarget::stderr_: t.kind = Target::Kind::stderr_stream; break;
        case config::LogTarget::both: t.kind = Target::Kind::both; break;
    }
    return t;
}

Result<Target> verdicts_target(const config::Config& c) {
    if (c.log.verdicts.empty()) {
        Target t;
        t.kind =
            c.log.target == config::LogTarget::stderr_ ? Target::Kind::stderr_stream : Target::Kind::syslog;
        return t;
    }
    auto t = parse_target(c.log.verdicts);
    if (!t) return make_error(ErrorKind::config, "log.verdicts: " + t.error().message);
    return t;
}

Options program_options(const config::Config& c, std::string_view name) {
    Options o;
    o.program = c.log.ident + "/" + std::string(name);
    o.hostname = c.log.hostname;
    o.facility = config::syslog_facility_code(c.log.facility);
    o.min_severity = severity_floor(c.log.level);
    return o;
}

}  // namespace retryguard::logging
