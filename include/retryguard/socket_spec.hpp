// socket_spec.hpp -- the milter's listening socket, spelled as OpenDKIM and
// libmilter spell it: "unix:/path", "local:/path" (the same), "inet:port@host",
// "inet6:port@host" ("inet:port" alone listens on every address; the project's
// tests and docs always name a host). Parsing only; libmilter opens the socket.
#pragma once

#include <string>
#include <string_view>

#include "retryguard/result.hpp"

namespace retryguard {

struct SocketSpec {
    enum class Kind { unix_path, inet, inet6 } kind = Kind::unix_path;
    std::string path;                    // unix_path
    int port = 0;                        // inet, inet6
    std::string host;                    // inet, inet6 ("" = any)
    std::string libmilter_spec() const;  // what smfi_setconn() takes
};

// Strict: unknown scheme, relative path, port outside 1-65535, empty host after '@'
// are errors (ErrorKind::config).
Result<SocketSpec> parse_socket_spec(std::string_view spec);

}  // namespace retryguard
