// privileges.cpp -- user/group lookup, handing root-created files over and
// the privilege drop (see privileges.hpp).
#include "retryguard/runtime/privileges.hpp"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "retryguard/file_access.hpp"

namespace retryguard {

Result<RunAs> lookup_run_as(const std::string& user, const std::string& group) {
    RunAs who;
    who.user = user;
    std::vector<char> buf(16384);
    passwd pw{};
    passwd* pwp = nullptr;
    if (user.empty() || ::getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &pwp) != 0 || !pwp)
        return make_error(ErrorKind::config, "unknown user '" + user + "'");
    who.uid = pw.pw_uid;
    who.gid = pw.pw_gid;
    if (!group.empty()) {
        std::vector<char> gbuf(16384);
        struct group gr {};
        struct group* grp = nullptr;
        if (::getgrnam_r(group.c_str(), &gr, gbuf.data(), gbuf.size(), &grp) != 0 || !grp)
            return make_error(ErrorKind::config, "unknown group '" + group + "'");
        who.gid = gr.gr_gid;
        who.group = group;
    } else {
        struct group gr {};
        struct group* grp = nullptr;
        std::vector<char> gbuf(16384);
        if (::getgrgid_r(who.gid, &gr, gbuf.data(), gbuf.size(), &grp) == 0 && grp) who.group = gr.gr_name;
    }
    if (who.uid == 0 || who.gid == 0)
        return make_error(ErrorKind::config, "user '" + user + "' / group '" + who.group +
                                                 "' is root: give an unprivileged user and group");
    return who;
}

Status give_to(const std::string& path, const RunAs& who) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return {};  // not there: nothing to hand over
    if (st.st_uid != 0 || S_ISLNK(st.st_mode)) return {};
    if (::lchown(path.c_str(), who.uid, who.gid) != 0)
        return make_error(ErrorKind::io, "chown " + path + ": " + std::strerror(errno));
    return {};
}

Result<LedgerFileOwner> create_ledger_for_directory_owner(const std::string& db_path) {
    LedgerFileOwner out;
    const std::filesystem::path path(db_path);
    const std::string name = path.filename().string();
    if (::geteuid() != 0 || name.empty()) return out;
    const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
    const OwnedFd directory(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    const int dfd = directory.fd;
    if (dfd < 0) return out;  // not there: opening the ledger reports it
    struct stat dst {};
    if (::fstat(dfd, &dst) != 0 || dst.st_uid == 0) return out;
    const std::string owner = user_name(dst.st_uid) + ":" + group_name(dst.st_gid);
    // The file is made here, by this process, or not at all.
    const int fd = ::openat(dfd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) {
        const bool given = ::fchown(fd, dst.st_uid, dst.st_gid) == 0;
        const int err = errno;
        ::close(fd);
        if (!given) {
            ::unlinkat(dfd, name.c_str(), 0);
            return make_error(ErrorKind::io, "chown " + db_path + ": " + std::strerror(err));
        }
        out.created = "made " + db_path + " for " + owner +
                      ", the owner of its directory, so that the daemons running as that user can write the "
                      "ledger";
        return out;
    }
    if (errno != EEXIST) return out;  // opening the ledger reports it
    for (const char* suffix : {"", "-wal", "-shm"}) {
        const std::string file = name + suffix;
        struct stat st {};
        if (::fstatat(dfd, file.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            st.st_uid == 0) {
            out.warning = (dir / file).string() + " belongs to root, in a directory of " + owner +
                          ": the daemons running as that user cannot write the ledger; as root, run: chown " +
                          owner + " " + db_path + "*";
            break;
        }
    }
    return out;
}

Status drop_privileges(const RunAs& who) {
    auto fail = [&](const char* step) {
        return make_error(ErrorKind::io, std::string("cannot drop privileges to ") + who.user + ":" +
                                             who.group + ": " + step + ": " + std::strerror(errno));
    };
    if (who.uid == 0 || who.gid == 0) {
        errno = EINVAL;
        return fail("target is root");
    }
    // Supplementary groups first (needs root), then the group, then the user:
    // after setuid nothing else may change.
    if (::initgroups(who.user.c_str(), who.gid) != 0) return fail("setgroups");
    if (::setgid(who.gid) != 0) return fail("setgid");
    if (::setuid(who.uid) != 0) return fail("setuid");
    uid_t ruid, euid, suid;
    gid_t rgid, egid, sgid;
    if (::getresuid(&ruid, &euid, &suid) != 0 || ::getresgid(&rgid, &egid, &sgid) != 0)
        return fail("getresuid");
    if (ruid != who.uid || euid != who.uid || suid != who.uid || rgid != who.gid || egid != who.gid ||
        sgid != who.gid) {
        errno = EPERM;
        return fail("ids differ after the drop");
    }
    // Root must be out of reach now: each of these must fail.
    if (::setuid(0) == 0 || ::seteuid(0) == 0 || ::setgid(0) == 0 || ::setegid(0) == 0) {
        errno = EPERM;
        return fail("root could be regained");
    }
    std::vector<gid_t> groups(static_cast<std::size_t>(std::max(::getgroups(0, nullptr), 0)));
    if (!groups.empty() && ::getgroups(static_cast<int>(groups.size()), groups.data()) < 0)
        return fail("getgroups");
    for (gid_t g : groups) {
        if (g == 0) {
            errno = EPERM;
            return fail("still in group root");
        }
    }
    return {};
}

}  // namespace retryguard
