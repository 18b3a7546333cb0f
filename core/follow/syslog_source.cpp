// syslog_source.cpp -- receives syslog datagrams (UNIX datagram socket, or UDP
// bound to loopback only) and yields them as log lines. A datagram cannot be
// read twice, so the position is only a counter; a batch the consumer refuses is
// kept in memory and offered again, and while it waits nothing more is read, so
// the kernel's socket buffer provides the back-pressure. It must never listen on
// a non-loopback address or keep an unbounded amount of data.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "retryguard/follow/follower.hpp"

namespace retryguard {
namespace {

using Clock = std::chrono::steady_clock;

class SyslogSource final : public LineSource {
  public:
    SyslogSource(int fd, std::string kind, std::string where, std::string unlink_path, std::uint16_t port,
                 FollowerSettings settings)
        : LineSource(std::move(settings), FollowerPosition{}),
          fd_(fd),
          unlink_path_(std::move(unlink_path)),
          port_(port) {
        committed_.source = fmt::format("syslog:{}:{}", kind == "syslog-unix" ? "unix" : "udp", where);
        counters_.source = committed_.source;
        counters_.kind = std::move(kind);
        counters_.path = std::move(where);
        limit_ = datagram_limit(settings_);
        buf_.resize(limit_ + 1);
    }

    ~SyslogSource() override {
        ::close(fd_);
        if (!unlink_path_.empty()) ::unlink(unlink_path_.c_str());
    }

    std::uint16_t port() const { return port_; }

  protected:
    Status fill(LineBatch& out, Clock::time_point deadline) override {
        std::uint64_t seen = committed_.offset;
        for (;;) {
            while (out.lines.size() < settings_.batch_max_lines && out.bytes < settings_.batch_max_bytes) {
                ssize_t n = ::recv(fd_, buf_.data(), buf_.size(), MSG_DONTWAIT | MSG_TRUNC);
                if (n < 0) {
                    if (errno == EINTR) continue;
                    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
                    return make_error(ErrorKind::io,
                                      fmt::format("recv {}: {}", counters_.path, std::strerror(errno)));
                }
                ++seen;
                bool cut = static_cast<std::size_t>(n) > limit_;
                std::size_t len = cut ? limit_ : static_cast<std::size_t>(n);
                auto line = syslog_datagram_to_line(std::string_view(buf_.data(), len),
                                                    settings_.syslog_default_host, settings_.max_line_bytes);
                if (!line) {
                    ++counters_.lines_skipped;
                    note_error(line.error().message);
                    continue;
                }
                bool truncated = cut || line->truncated;
                if (truncated) ++counters_.lines_truncated;
                out.bytes += line->line.size();
                out.lines.push_back(RawLine{std::move(line->line), seen, truncated});
            }
            if (!out.lines.empty() || stopped()) break;
            if (Clock::now() >= deadline) break;
            wait_readable(fd_, deadline);
        }
        // Malformed datagrams consumed without a line still advance the counter
        // (they are gone either way); the committed counter moves with the next batch.
        out.end.offset = seen;
        if (out.lines.empty()) committed_.offset = seen;
        return {};
    }

    void add_status(FollowerStatus& st) override { st.read_offset = st.offset; }

  private:
    int fd_;
    std::string unlink_path_;
    std::uint16_t port_ = 0;
    std::size_t limit_ = 0;  // datagram_limit(settings_)
    std::vector<char> buf_;
};

// Parses an IP address literal into `ss`; false for anything else (a name).
bool parse_ip(const std::string& address, sockaddr_storage& ss, socklen_t& len) {
    std::memset(&ss, 0, sizeof ss);
    auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
    if (::inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        len = sizeof(sockaddr_in);
        return true;
    }
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
    if (::inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        len = sizeof(sockaddr_in6);
        return true;
    }
    return false;
}

bool is_loopback(const sockaddr_storage& ss) {
    if (ss.ss_family == AF_INET)
        return (ntohl(reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr.s_addr) >> 24) == 127;
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr);
}

}  // namespace

Result<std::unique_ptr<LineSource>> open_syslog_unix_source(std::string path, FollowerSettings settings) {
    if (Status ok = validate(settings); !ok) return ok.error();
    sockaddr_un sun{};
    if (path.empty() || path.size() >= sizeof sun.sun_path)
        return make_error(ErrorKind::config,
                          fmt::format("syslog socket path '{}' is empty or too long", path));
    struct stat sb {};
    if (::lstat(path.c_str(), &sb) == 0) {
        // A stale socket from an earlier run is replaced; anything else is not ours to remove.
        if (!S_ISSOCK(sb.st_mode))
            return make_error(ErrorKind::config, fmt::format("{} exists and is not a socket", path));
        ::unlink(path.c_str());
    }
    int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return make_error(ErrorKind::io, fmt::format("socket: {}", std::strerror(errno)));
    sun.sun_family = AF_UNIX;
    std::memcpy(sun.sun_path, path.c_str(), path.size() + 1);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&sun), sizeof sun) != 0) {
        int e = errno;
        ::close(fd);
        return make_error(ErrorKind::io, fmt::format("bind {}: {}", path, std::strerror(e)));
    }
    try {
        return std::unique_ptr<LineSource>(
            std::make_unique<SyslogSource>(fd, "syslog-unix", path, path, 0, std::move(settings)));
    } catch (const std::exception& e) {
        ::close(fd);
        return make_error(ErrorKind::internal, e.what());
    }
}

Result<std::unique_ptr<LineSource>> open_syslog_udp_source(std::string address, std::uint16_t port,
                                                           FollowerSettings settings,
                                                           bool allow_non_loopback) {
    if (Status ok = validate(settings); !ok) return ok.error();
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (!parse_ip(address, ss, len))
        return make_error(ErrorKind::config,
                          fmt::format("syslog UDP address '{}' is not an IP address", address));
    if (!allow_non_loopback && !is_loopback(ss))
        return make_error(
            ErrorKind::config,
            fmt::format("syslog UDP address '{}' is not a loopback address (127.0.0.0/8 or ::1) "
                        "and allow_non_loopback is not set",
                        address));
    if (ss.ss_family == AF_INET)
        reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(port);
    else
        reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(port);
    int fd = ::socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return make_error(ErrorKind::io, fmt::format("socket: {}", std::strerror(errno)));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
        int e = errno;
        ::close(fd);
        return make_error(ErrorKind::io, fmt::format("bind {}:{}: {}", address, port, std::strerror(e)));
    }
    sockaddr_storage bound{};
    socklen_t blen = sizeof bound;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &blen);
    std::uint16_t actual =
        ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                         : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
    std::string where = ss.ss_family == AF_INET6 ? fmt::format("[{}]:{}", address, actual)
                                                 : fmt::format("{}:{}", address, actual);
    try {
        return std::unique_ptr<LineSource>(
            std::make_unique<SyslogSource>(fd, "syslog-udp", where, "", actual, std::move(settings)));
    } catch (const std::exception& e) {
        ::close(fd);
        return make_error(ErrorKind::internal, e.what());
    }
}

std::uint16_t bound_port(const LineSource& source) {
    auto* s = dynamic_cast<const SyslogSource*>(&source);
    return s ? s->port() : 0;
}

}  // namespace retryguard
