// file_access.cpp -- see file_access.hpp.
#include "retryguard/file_access.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace retryguard {

std::string file_error_reason(int err) {
    std::string reason = std::strerror(err);
    if (err != EACCES && err != EPERM) return reason;
    const uid_t uid = ::geteuid();
    std::string user = std::to_string(uid);
    if (const passwd* pw = ::getpwuid(uid)) user = pw->pw_name;
    return reason + " for user " + user + " (uid " + std::to_string(uid) + ")";
}

std::string unreadable_file(const std::filesystem::path& path, int* err) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd >= 0) {
        ::close(fd);
        if (err) *err = 0;
        return {};
    }
    const int e = errno;
    if (err) *err = e;
    return path.string() + ": cannot read: " + file_error_reason(e);
}

}  // namespace retryguard
