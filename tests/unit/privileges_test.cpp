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

#include "retryguard/ledger/ledger.hpp"
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

// Root's CLI makes a new ledger for the owner of its directory (the daemons'
// user), and SQLite then gives that user the -wal and -shm files too; it
// gives away nothing that was root's: not a ledger root already owns (it
// warns), not a link's target, nothing in root's own directory.
TEST(Privileges, RootMakesANewLedgerForItsDirectorysOwnerAndGivesNothingAway) {
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
    auto owner = [](const fs::path& p) {
        struct stat st {};
        EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
        return std::pair{st.st_uid, st.st_gid};
    };
    const std::pair<uid_t, gid_t> to_nobody{nobody->pw_uid, nogroup->gr_gid}, to_root{0, 0};
    const std::string db = (theirs / "l.db").string();

    auto made = retryguard::create_ledger_for_directory_owner(db);
    ASSERT_TRUE(made.ok()) << made.error().message;
    EXPECT_NE(made->created.find("made " + db + " for nobody:nogroup"), std::string::npos) << made->created;
    EXPECT_TRUE(made->warning.empty());
    EXPECT_EQ(owner(db), to_nobody);
    {  // SQLite, as root, gives its -wal and -shm files the database file's owner
        auto ledger = retryguard::open_ledger("sqlite:" + db);
        ASSERT_TRUE(ledger.ok()) << ledger.error().message;
        EXPECT_EQ(owner(db + "-wal"), to_nobody);
        EXPECT_EQ(owner(db + "-shm"), to_nobody);
    }
    EXPECT_EQ(owner(db), to_nobody);
    auto again = retryguard::create_ledger_for_directory_owner(db);  // theirs already: nothing to say
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(again->created.empty());
    EXPECT_TRUE(again->warning.empty());

    // Root's from before: left to root, with the fix in the warning.
    ASSERT_EQ(::chown(db.c_str(), 0, 0), 0);
    auto roots = retryguard::create_ledger_for_directory_owner(db);
    ASSERT_TRUE(roots.ok());
    EXPECT_TRUE(roots->created.empty());
    EXPECT_NE(roots->warning.find("chown nobody:nogroup " + db + "*"), std::string::npos) << roots->warning;
    EXPECT_EQ(owner(db), to_root);

    // A link in the ledger's place: neither followed nor its target changed.
    std::ofstream(ours / "secret") << "x";
    fs::create_symlink(ours / "secret", theirs / "link.db");
    auto link = retryguard::create_ledger_for_directory_owner((theirs / "link.db").string());
    ASSERT_TRUE(link.ok());
    EXPECT_TRUE(link->created.empty());
    EXPECT_EQ(owner(ours / "secret"), to_root);

    // Root's own directory: nothing made.
    auto own = retryguard::create_ledger_for_directory_owner((ours / "l.db").string());
    ASSERT_TRUE(own.ok());
    EXPECT_TRUE(own->created.empty());
    EXPECT_FALSE(fs::exists(ours / "l.db"));
    fs::remove_all(base);
}
