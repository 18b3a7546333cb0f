// privileges.hpp -- a daemon started as root gives root up: it looks up the
// configured user and group, hands files it created as root to them, and
// drops to them for good. Used by retryguard-policyd (policy.user,
// policy.group); the order (open as root, then drop) is the caller's. And the
// CLI run as root makes a new SQLite ledger for its directory's owner.
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

// Run as root (the CLI), before the SQLite ledger at `db_path` is opened:
// when the file is not there yet and its directory belongs to another user
// (the packaged /var/lib/retryguard, owned by the user the daemons run as),
// creates it empty (O_EXCL, in the directory opened first, never through a
// link) and gives it to that directory's owner and group. SQLite, running as
// root, then gives the -wal and -shm files it makes the database file's owner
// too. Left to root, the daemons could no longer write their own ledger.
// A ledger file root already owns there is not changed: giving a file that
// was root's away in a directory another user controls is what
// systemd-tmpfiles refuses as an "unsafe path transition". The result says
// what was done, or what the admin should do, for the caller to print; a
// process not running as root, a directory owned by root or a missing
// directory changes nothing.
struct LedgerFileOwner {
    std::string created;  // "made <path> for <user:group>, ..." or empty
    std::string warning;  // a root-owned ledger file the daemons cannot write, and the fix
};
Result<LedgerFileOwner> create_ledger_for_directory_owner(const std::string& db_path);

// setgroups (the user's supplementary groups), setgid, setuid, then checks
// that the real, effective and saved ids are the user's and that neither
// root's uid nor gid can be regained. Errors: ErrorKind::io; the caller must
// exit (it may be half-dropped).
Status drop_privileges(const RunAs& who);

}  // namespace retryguard
