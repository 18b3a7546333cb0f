// A log the follower's user may not read (Debian's /var/log/mail.log is
// root:adm 0640; a daemon outside adm) is an error the admin sees: counted,
// named with the reason and the user in status(), not mistaken for a file
// that is "not there yet". Checked from a child that dropped to nobody.
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "follow_util.hpp"

namespace retryguard {
namespace {

TEST(FollowUnreadable, PermissionDeniedIsCountedAndNamedNotWaitedFor) {
    test::TempDir dir;
    const std::string log = dir / "mail.log";
    test::append(log, "Dec  1 10:00:00 mx postfix/qmgr[1]: ABC: removed\n");
    ::chmod(log.c_str(), 0600);
    ::chmod(dir.path.c_str(), 0755);
    const pid_t pid = ::fork();
    if (pid == 0) {
        if (::geteuid() == 0) {
            const passwd* pw = ::getpwnam("nobody");
            if (!pw || ::setgid(pw->pw_gid) != 0 || ::setuid(pw->pw_uid) != 0) ::_exit(90);
        }
        // (not root: the file is ours; make it unreadable to ourselves)
        else if (::chmod(log.c_str(), 0) != 0) {
            ::_exit(91);
        }
        auto f = open_file_follower(log, FollowerPosition{}, test::fast_settings());
        if (!f) ::_exit(92);
        for (int i = 0; i < 5; ++i) (void)(*f)->next_batch(std::chrono::milliseconds(30));
        FollowerStatus st = (*f)->status();
        const bool named = st.unreadable.find(log + ": cannot read: Permission denied for user ") == 0;
        const bool counted = st.open_errors >= 1;
        const bool in_text = format_status(st).find("unreadable=") != std::string::npos;
        const bool in_error = st.last_error == st.unreadable;
        ::_exit(named && counted && in_text && in_error ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(FollowUnreadable, MissingFileIsNotAnError) {
    test::TempDir dir;
    auto f = open_file_follower(dir / "absent.log", FollowerPosition{}, test::fast_settings());
    ASSERT_TRUE(f.ok());
    for (int i = 0; i < 3; ++i) (void)(*f)->next_batch(std::chrono::milliseconds(30));
    FollowerStatus st = (*f)->status();
    EXPECT_EQ(st.open_errors, 0u);
    EXPECT_EQ(st.unreadable, "");
}

}  // namespace
}  // namespace retryguard
