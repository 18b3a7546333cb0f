// Files a program needs but cannot read are named with the reason and the
// user: "cannot read: Permission denied for user nobody (uid 65534)". A root
// test process cannot be denied, so it checks from a child that has dropped to
// nobody, as the daemons do.
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "retryguard/classify/classifier.hpp"
#include "retryguard/file_access.hpp"

namespace retryguard {
namespace {

std::filesystem::path private_dir() {
    std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("rg-file-access-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir / "share" / "retryguard");
    std::ofstream(dir / "share" / "retryguard" / "classifier.yaml") << "rules: []\n";
    ::chmod(dir.c_str(), 0700);  // like /root: nobody may not enter
    return dir;
}

// Runs `check` in a child as `nobody` (when this process is root) or as this
// user with the directory made unreadable; the child's exit code is the result.
template <typename Check>
int as_unprivileged(const std::filesystem::path& dir, Check check) {
    const pid_t pid = ::fork();
    if (pid == 0) {
        if (::geteuid() == 0) {
            const passwd* pw = ::getpwnam("nobody");
            if (!pw || ::setgid(pw->pw_gid) != 0 || ::setuid(pw->pw_uid) != 0) ::_exit(90);
        } else {
            ::chmod(dir.c_str(), 0);
        }
        ::_exit(check() ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ::chmod(dir.c_str(), 0700);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 99;
}

TEST(FileAccess, ReadableFileHasNoComplaint) {
    auto dir = private_dir();
    int err = -1;
    EXPECT_EQ(unreadable_file(dir / "share" / "retryguard" / "classifier.yaml", &err), "");
    EXPECT_EQ(err, 0);
    std::filesystem::remove_all(dir);
}

TEST(FileAccess, MissingFileSaysSo) {
    int err = 0;
    std::string why = unreadable_file("/nonexistent-rg/classifier.yaml", &err);
    EXPECT_EQ(err, ENOENT);
    EXPECT_NE(why.find("/nonexistent-rg/classifier.yaml: cannot read: No such file"), std::string::npos)
        << why;
}

TEST(FileAccess, PermissionDeniedNamesFileAndUser) {
    auto dir = private_dir();
    auto file = dir / "share" / "retryguard" / "classifier.yaml";
    int rc = as_unprivileged(dir, [&] {
        int err = 0;
        std::string why = unreadable_file(file, &err);
        const std::string user = ::geteuid() == 65534 ? "nobody" : "";
        return err == EACCES &&
               why.starts_with(file.string() + ": cannot read: Permission denied for user ") &&
               why.find("(uid " + std::to_string(::geteuid()) + ")") != std::string::npos &&
               why.find(user) != std::string::npos;
    });
    EXPECT_EQ(rc, 0);
    std::filesystem::remove_all(dir);
}

TEST(FileAccess, ShippedRulesThatCannotBeReadAreAnErrorNotASilentFallback) {
    auto dir = private_dir();
    int rc = as_unprivileged(dir, [&] {
        ::setenv("RETRYGUARD_DATADIR", (dir / "share" / "retryguard").c_str(), 1);
        auto found = find_shipped_rules();
        if (found.ok()) return false;
        const std::string& m = found.error().message;
        return m.find("classifier.yaml: cannot read: Permission denied for user ") != std::string::npos;
    });
    EXPECT_EQ(rc, 0);
    std::filesystem::remove_all(dir);
}

TEST(FileAccess, RuleFileThatCannotBeReadSaysWhy) {
    auto dir = private_dir();
    auto file = dir / "share" / "retryguard" / "classifier.yaml";
    int rc = as_unprivileged(dir, [&] {
        auto rules = parse_rules_file(file);
        return !rules.ok() && rules.error().message.find("Permission denied for user ") != std::string::npos;
    });
    EXPECT_EQ(rc, 0);
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace retryguard
