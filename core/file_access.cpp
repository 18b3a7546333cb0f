// file_access.cpp -- see file_access.hpp.
#include "retryguard/file_access.hpp"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace retryguard {

std::string user_name(uid_t uid) {
    std::vector<char> buf(16384);
    passwd pw{};
    passwd* found = nullptr;
    if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found) return found->pw_name;
    return std::to_string(uid);
}

std::string group_name(gid_t gid) {
    std::vector<char> buf(16384);
    group gr{};
    group* found = nullptr;
    if (::getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) == 0 && found) return found->gr_name;
    return std::to_string(gid);
}

void OwnedFd::reset() noexcept {
    if (fd >= 0) ::close(fd);
    fd = -1;
}

std::string file_error_reason(int err) {
    std::string reason = std::strerror(err);
    if (err != EACCES && err != EPERM) return reason;
    const uid_t uid = ::geteuid();
    return reason + " for user " + user_name(uid) + " (uid " + std::to_string(uid) + ")";
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
