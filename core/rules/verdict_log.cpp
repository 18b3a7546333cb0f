// verdict_log.cpp -- writes verdict lines to syslog, postlogd, a file or stderr.
// The postlogd datagram has the shape Postfix's own msg_logger sends
// ("Mon DD HH:MM:SS host ident[pid]: text"), so the line lands in maillog_file
// exactly like Postfix's lines and the project's log parser reads it back.
#include "retryguard/verdict_log.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>
#include <vector>

namespace retryguard {
namespace {

constexpr std::size_t kMaxRecord = 2000;  // Postfix's MSG_LOGGER_RECLEN

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

int facility_value(std::string_view name) {
    for (const auto& f : kFacilities)
        if (f.name == name) return f.value;
    return -1;
}

// Peer text must not forge extra log lines.
std::string printable(std::string_view s) {
    std::string out;
    out.reserve(std::min(s.size(), kMaxRecord));
    for (unsigned char c : s) {
        if (out.size() >= kMaxRecord) break;
        out += (c < ' ' || c == 0x7f) ? '?' : static_cast<char>(c);
    }
    return out;
}

}  // namespace

Result<VerdictLogTarget> parse_verdict_log_target(std::string_view spec) {
    VerdictLogTarget t;
    auto colon = spec.find(':');
    std::string_view kind = spec.substr(0, colon);
    std::string_view arg = colon == std::string_view::npos ? std::string_view{} : spec.substr(colon + 1);
    if (kind == "syslog") {
        t.kind = VerdictLogTarget::Kind::syslog;
        if (!arg.empty()) {
            if (facility_value(arg) < 0)
                return make_error(ErrorKind::config, "unknown syslog facility '" + std::string(arg) + "'");
            t.facility = std::string(arg);
        }
    } else if (kind == "postlog" || kind == "file") {
        if (arg.empty() || arg.front() != '/')
            return make_error(ErrorKind::config, std::string(kind) + ": needs an absolute path");
        t.kind = kind == "postlog" ? VerdictLogTarget::Kind::postlog : VerdictLogTarget::Kind::file;
        t.path = std::string(arg);
    } else if (kind == "stderr" && arg.empty()) {
        t.kind = VerdictLogTarget::Kind::stderr_stream;
    } else if (kind == "none" && arg.empty()) {
        t.kind = VerdictLogTarget::Kind::none;
    } else {
        return make_error(ErrorKind::config, "bad verdict log target '" + std::string(spec) +
                                                 "' (expected syslog[:facility], postlog:/path, file:/path, "
                                                 "stderr or none)");
    }
    return t;
}

VerdictLog::~VerdictLog() {
    if (fd_ >= 0) ::close(fd_);
    if (target_.kind == VerdictLogTarget::Kind::syslog) ::closelog();
}

Status VerdictLog::open(const VerdictLogTarget& target) {
    std::lock_guard lock(mu_);
    if (fd_ >= 0) ::close(fd_), fd_ = -1;
    target_ = target;
    std::array<char, 256> host{};
    if (::gethostname(host.data(), host.size() - 1) == 0) {
        hostname_ = host.data();
        hostname_ = hostname_.substr(0, hostname_.find('.'));
    }
    if (hostname_.empty()) hostname_ = "localhost";
    switch (target.kind) {
        case VerdictLogTarget::Kind::syslog:
            // openlog keeps the pointer: the ident lives in target_.
            ::openlog(target_.ident.c_str(), LOG_PID | LOG_NDELAY, facility_value(target_.facility));
            return {};
        case VerdictLogTarget::Kind::postlog: {
            fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
            if (fd_ < 0) return make_error(ErrorKind::io, std::string("socket: ") + std::strerror(errno));
            sockaddr_un addr{};
            addr.sun_family = AF_UNIX;
            if (target.path.size() >= sizeof(addr.sun_path))
                return make_error(ErrorKind::config, "postlog socket path too long: " + target.path);
            std::memcpy(addr.sun_path, target.path.c_str(), target.path.size() + 1);
            if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
                int err = errno;
                ::close(fd_), fd_ = -1;
                return make_error(ErrorKind::io, "connect to " + target.path + ": " + std::strerror(err));
            }
            return {};
        }
        case VerdictLogTarget::Kind::file:
            fd_ = ::open(target.path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
            if (fd_ < 0)
                return make_error(ErrorKind::io, "open " + target.path + ": " + std::strerror(errno));
            return {};
        case VerdictLogTarget::Kind::stderr_stream:
        case VerdictLogTarget::Kind::none: return {};
    }
    return {};
}

FileTailMatch match_file_tail(std::string_view tail, std::span<const std::string> pending) {
    FileTailMatch m;
    m.torn = !tail.empty() && tail.back() != '\n';
    // Complete lines only, newest first; a cut last line is not one of them.
    std::vector<std::string_view> lines;
    if (const auto last_nl = tail.rfind('\n'); last_nl != std::string_view::npos) {
        std::string_view complete = tail.substr(0, last_nl);
        while (lines.size() < pending.size()) {
            const auto nl = complete.rfind('\n');
            if (nl == std::string_view::npos) {
                lines.push_back(complete);
                break;
            }
            lines.push_back(complete.substr(nl + 1));
            complete = complete.substr(0, nl);
        }
    }
    auto is = [](std::string_view line, const std::string& text) {
        const std::string want = printable(text);
        return line.size() >= want.size() + 2 && line.ends_with(want) &&
               line.substr(line.size() - want.size() - 2, 2) == ": ";
    };
    for (std::size_t k = std::min(lines.size(), pending.size()); k > 0; --k) {
        // lines[k-1] .. lines[0] (oldest to newest) against pending[0 .. k).
        bool all = true;
        for (std::size_t i = 0; i < k && all; ++i) all = is(lines[k - 1 - i], pending[i]);
        if (all) {
            m.present = k;
            break;
        }
    }
    return m;
}

VerdictLog::Replay VerdictLog::replay(std::span<const std::string> lines) {
    Replay r;
    if (lines.empty()) return r;
    switch (target_.kind) {
        case VerdictLogTarget::Kind::none: return r;
        case VerdictLogTarget::Kind::file: break;
        default:
            for (const auto& l : lines) write_line(l);
            r.unchecked = lines.size();
            return r;
    }
    {
        std::lock_guard lock(mu_);
        // Enough of the end of the file for every pending line with its prefix.
        std::size_t window = 4096;
        for (const auto& l : lines) window += std::min(l.size(), kMaxRecord) + 256;
        std::string tail;
        const int fd = ::open(target_.path.c_str(), O_RDONLY | O_CLOEXEC);
        struct stat st {};
        if (fd >= 0 && ::fstat(fd, &st) == 0 && st.st_size > 0) {
            const auto size = static_cast<std::size_t>(st.st_size);
            const std::size_t from = size > window ? size - window : 0;
            tail.resize(size - from);
            const ssize_t got = ::pread(fd, tail.data(), tail.size(), static_cast<off_t>(from));
            tail.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
        }
        if (fd >= 0) ::close(fd);
        const FileTailMatch m = match_file_tail(tail, lines);
        r.found = m.present;
        r.torn = m.torn;
        // The next line must start on a line of its own; a reader sees the cut
        // line, then the whole line written again below.
        if (m.torn && fd_ >= 0 && ::write(fd_, "\n", 1) != 1) failures_.fetch_add(1);
    }
    for (std::size_t i = r.found; i < lines.size(); ++i) write_line(lines[i]);
    return r;
}

void VerdictLog::write(const Verdict& v) {
    write_line(format_verdict(v));
}

void VerdictLog::write_line(std::string_view message) {
    std::string text = printable(message);
    std::lock_guard lock(mu_);
    bool ok = true;
    switch (target_.kind) {
        case VerdictLogTarget::Kind::none: return;
        case VerdictLogTarget::Kind::syslog: ::syslog(LOG_INFO, "%s", text.c_str()); break;
        case VerdictLogTarget::Kind::stderr_stream: {
            text += '\n';
            ok = ::write(STDERR_FILENO, text.data(), text.size()) == static_cast<ssize_t>(text.size());
            break;
        }
        case VerdictLogTarget::Kind::postlog:
        case VerdictLogTarget::Kind::file: {
            std::time_t now = std::time(nullptr);
            std::tm lt{};
            ::localtime_r(&now, &lt);
            char stamp[32];
            std::size_t n = std::strftime(stamp, sizeof stamp, "%b %d %H:%M:%S ", &lt);
            std::string record(stamp, n);
            record += hostname_;
            record += ' ';
            record += target_.ident;
            record += '[' + std::to_string(::getpid()) + "]: ";
            record += text;
            if (target_.kind == VerdictLogTarget::Kind::file) {
                record += '\n';
                ok = fd_ >= 0 &&
                     ::write(fd_, record.data(), record.size()) == static_cast<ssize_t>(record.size());
            } else {
                ok = fd_ >= 0 && ::send(fd_, record.data(), record.size(), MSG_DONTWAIT | MSG_NOSIGNAL) ==
                                     static_cast<ssize_t>(record.size());
            }
            break;
        }
    }
    (ok ? written_ : failures_).fetch_add(1);
}

}  // namespace retryguard
