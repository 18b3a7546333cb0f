// privileges_test.cpp -- looking up the user a daemon drops to, refusing
// root as that user, and the drop itself (in a child process: the test
// runner keeps its own ids), and root's CLI handing the ledger to the
// owner of its directory.
#include <grp.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "retryguard/runtime/privileges.hpp"

using retryguard::drop_privileges;
using retryguard::lookup_run_as;

TEST(Privileges, LooksUpUserAndGroupAndRefusesUnknownOrRoot) {
    auto who = lookup_run_as("nobody", "nogroup");
    ASSERT_TRUE(who.ok()) << who.error().message;
    EXPECT_EQ(who->uid, ::getpwnam("nobody")->pw_uid);
    EXPECT_EQ(who->gid, ::getgrnam("nogroup")->gr_gid);
    EXPECT_EQ(who->group, "nogroup");
    auto primary = lookup_run_as("nobody", "");  // the user's primary group
    ASSERT_TRUE(primary.ok());
    EXPECT_EQ(primary->gid, ::getpwnam("nobody")->pw_gid);

    EXPECT_FALSE(lookup_run_as("no-such-user-rg", "").ok());
    EXPECT_FALSE(lookup_run_as("nobody", "no-such-group-rg").ok());
    EXPECT_FALSE(lookup_run_as("root", "nogroup").ok());  // uid 0
    EXPECT_FALSE(lookup_run_as("nobody", "root").ok());   // gid 0
    EXPECT_FALSE(lookup_run_as("", "").ok());
}

TEST(Privileges, DropIsCompleteAndCannotBeUndone) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (CI runs the unit tests as root)";
    auto who = lookup_run_as("nobody", "nogroup");
    ASSERT_TRUE(who.ok());
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        // Exit codes say which check failed.
        if (!drop_privileges(*who).ok()) ::_exit(10);
        uid_t r, e, s;
        gid_t gr, ge, gs;
        ::getresuid(&r, &e, &s);
        ::getresgid(&gr, &ge, &gs);
        if (r != who->uid || e != who->uid || s != who->uid) ::_exit(11);
        if (gr != who->gid || ge != who->gid || gs != who->gid) ::_exit(12);
        if (::setuid(0) == 0 || ::seteuid(0) == 0 || ::setgid(0) == 0) ::_exit(13);
        gid_t groups[64];
        const int n = ::getgroups(64, groups);
        for (int i = 0; i < n; ++i)
            if (groups[i] == 0) ::_exit(14);
        ::_exit(0);
    }
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 0);
}

TEST(Privileges, DroppingToRootIsRefused) {
    retryguard::RunAs root;
    root.user = "root";
    EXPECT_FALSE(drop_privileges(root).ok());  // refused before any change
}

// Root's CLI leaves the ledger to the owner of its directory (the daemons'
// user), and gives away nothing else: not a link's target, not a file with a
// second name, not a file another user owns, nothing in root's own directory.
TEST(Privileges, RootGivesLedgerFilesToTheirDirectorysOwnerAndNothingElse) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (CI runs the unit tests as root)";
    namespace fs = std::filesystem;
    const fs::path base = fs::temp_directory_path() / ("rg-give-" + std::to_string(::getpid()));
    fs::remove_all(base);
    const fs::path theirs = base / "theirs", ours = base / "ours";
    fs::create_directories(theirs);
    fs::create_directories(ours);
    const passwd* nobody = ::getpwnam("nobody");
    const struct group* nogroup = ::getgrnam("nogroup");
    ASSERT_TRUE(nobody && nogroup);
    ASSERT_EQ(::chown(theirs.c_str(), nobody->pw_uid, nogroup->gr_gid), 0);
    auto touch = [](const fs::path& p) { std::ofstream(p) << "x"; };
    auto owner = [](const fs::path& p) {
        struct stat st {};
        EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
        return std::pair{st.st_uid, st.st_gid};
    };
    touch(theirs / "l.db");
    touch(theirs / "l.db-wal");
    touch(ours / "secret");
    fs::create_symlink(ours / "secret", theirs / "l.db-shm");  // a link: not followed
    touch(ours / "linked");
    fs::create_hard_link(ours / "linked", theirs / "l.db-journal");  // two names: left alone
    touch(theirs / "other");
    ASSERT_EQ(::chown((theirs / "other").c_str(), 1, 1), 0);  // not root's: left alone
    touch(ours / "l.db");                                     // root's directory: left alone

    auto given = retryguard::give_to_directory_owner(
        {(theirs / "l.db").string(), (theirs / "l.db-wal").string(), (theirs / "l.db-shm").string(),
         (theirs / "l.db-journal").string(), (theirs / "other").string(), (theirs / "missing").string(),
         (ours / "l.db").string()});
    ASSERT_TRUE(given.ok()) << given.error().message;
    EXPECT_EQ(given->paths,
              (std::vector<std::string>{(theirs / "l.db").string(), (theirs / "l.db-wal").string()}));
    EXPECT_EQ(given->owner, "nobody:nogroup");
    const std::pair<uid_t, gid_t> to_nobody{nobody->pw_uid, nogroup->gr_gid}, to_root{0, 0};
    EXPECT_EQ(owner(theirs / "l.db"), to_nobody);
    EXPECT_EQ(owner(theirs / "l.db-wal"), to_nobody);
    EXPECT_EQ(owner(ours / "secret"), to_root);
    EXPECT_EQ(owner(ours / "linked"), to_root);
    EXPECT_EQ(owner(theirs / "other"), (std::pair<uid_t, gid_t>{1, 1}));
    EXPECT_EQ(owner(ours / "l.db"), to_root);
    // Once given, nothing more to do.
    auto again = retryguard::give_to_directory_owner({(theirs / "l.db").string()});
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(again->paths.empty());
    fs::remove_all(base);
}
