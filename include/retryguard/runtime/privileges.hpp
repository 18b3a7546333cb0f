// privileges.hpp -- a daemon started as root gives root up: it looks up the
// configured user and group, hands files it created as root to them, and
// drops to them for good. Used by retryguard-policyd (policy.user,
// policy.group); the order (open as root, then drop) is the caller's.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "retryguard/result.hpp"

namespace retryguard {

struct RunAs {
    std::string user, group;
    uid_t uid = 0;
    gid_t gid = 0;
};

// `user` and `group` (empty: the user's primary group) by name. Errors:
// ErrorKind::config for an unknown user or group, or for one that is root
// (uid 0 or gid 0): a daemon never drops "to root".
Result<RunAs> lookup_run_as(const std::string& user, const std::string& group);

// chown(path, who) when `path` exists and belongs to root (a file this
// process created before the drop); anything else is left alone. Symbolic
// links are not followed.
Status give_to(const std::string& path, const RunAs& who);

// A command run as root (the CLI) that creates the SQLite ledger, or finds it
// owned by root, in a directory another user owns (the packaged
// /var/lib/retryguard, owned by the user the daemons run as) gives each of
// `paths` to the directory's owner and group: left to root, the daemons could
// no longer write their own ledger. Only a regular file with one link that
// root owns is changed (opened without following symbolic links, then
// fchown); a directory owned by root, or a process not running as root,
// changes nothing. Returns what was changed, for the caller to print.
// Errors: ErrorKind::io (the chown failed).
struct HandedOver {
    std::vector<std::string> paths;
    std::string owner;  // "user:group" they now belong to
};
Result<HandedOver> give_to_directory_owner(const std::vector<std::string>& paths);

// setgroups (the user's supplementary groups), setgid, setuid, then checks
// that the real, effective and saved ids are the user's and that neither
// root's uid nor gid can be regained. Errors: ErrorKind::io; the caller must
// exit (it may be half-dropped).
Status drop_privileges(const RunAs& who);

}  // namespace retryguard
