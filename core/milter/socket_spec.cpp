// socket_spec.cpp -- parsing of the milter socket spec (see socket_spec.hpp).
// Must never open anything: libmilter does that.
#include "retryguard/socket_spec.hpp"

#include <charconv>

namespace retryguard {

std::string SocketSpec::libmilter_spec() const {
    switch (kind) {
        case Kind::unix_path: return "unix:" + path;
        case Kind::inet: return "inet:" + std::to_string(port) + (host.empty() ? "" : "@" + host);
        case Kind::inet6: return "inet6:" + std::to_string(port) + (host.empty() ? "" : "@" + host);
    }
    return {};
}

Result<SocketSpec> parse_socket_spec(std::string_view spec) {
    auto bad = [&](std::string_view why) {
        return make_error(ErrorKind::config,
                          "socket spec \"" + std::string(spec.substr(0, 200)) + "\": " + std::string(why));
    };
    auto colon = spec.find(':');
    if (colon == std::string_view::npos)
        return bad("expected unix:/path, local:/path, inet:port@host or inet6:port@host");
    std::string_view scheme = spec.substr(0, colon), rest = spec.substr(colon + 1);
    SocketSpec s;
    if (scheme == "unix" || scheme == "local") {
        if (rest.empty() || rest.front() != '/') return bad("the socket path must be absolute");
        if (rest.size() > 100) return bad("the socket path is longer than a unix socket address allows");
        s.kind = SocketSpec::Kind::unix_path;
        s.path = std::string(rest);
        return s;
    }
    if (scheme != "inet" && scheme != "inet6") return bad("unknown scheme (unix, local, inet, inet6)");
    s.kind = scheme == "inet" ? SocketSpec::Kind::inet : SocketSpec::Kind::inet6;
    auto at = rest.find('@');
    std::string_view port = rest.substr(0, at);
    int value = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value < 1 || value > 65535)
        return bad("the port must be a number from 1 to 65535");
    s.port = value;
    if (at != std::string_view::npos) {
        s.host = std::string(rest.substr(at + 1));
        if (s.host.empty()) return bad("empty host after '@'");
        if (s.host.size() > 255) return bad("host too long");
        if (s.host.front() == '[' && s.host.back() == ']') s.host = s.host.substr(1, s.host.size() - 2);
    }
    return s;
}

}  // namespace retryguard
