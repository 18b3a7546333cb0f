// file_access.hpp -- why a file the program needs cannot be read, said for the
// admin who has to fix it: the path, the system's reason and, for permission
// errors, the user the program runs as (a daemon that dropped privileges, or a
// source tree in a private home, is the usual cause).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>

namespace retryguard {

// The name of `uid` / `gid` where the system has one, else the number
// (reentrant lookups: safe on any thread).
std::string user_name(uid_t uid);
std::string group_name(gid_t gid);

// A file descriptor of this scope's own, closed at its end or at reset().
struct OwnedFd {
    int fd = -1;
    OwnedFd() = default;
    explicit OwnedFd(int f) noexcept : fd(f) {}
    OwnedFd(const OwnedFd&) = delete;
    OwnedFd& operator=(const OwnedFd&) = delete;
    ~OwnedFd() { reset(); }
    void reset() noexcept;
};

// "Permission denied for user nobody (uid 65534)" for EACCES/EPERM, else strerror(err).
std::string file_error_reason(int err);

// "PATH: cannot read: REASON" when PATH exists (or may exist) but cannot be
// opened for reading by this process; "" when it can. `err` receives errno.
std::string unreadable_file(const std::filesystem::path& path, int* err = nullptr);

}  // namespace retryguard
