// privileges_test.cpp -- looking up the user a daemon drops to, refusing
// root as that user, and the drop itself (in a child process: the test
// runner keeps its own ids).
#include <grp.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/wait.h>
#include <unistd.h>

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
