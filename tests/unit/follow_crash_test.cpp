// follow_crash_test.cpp -- exactly-once across kill -9: a child process follows a
// log file and commits each batch (its lines appended to an output file, then the
// position saved with FilePositionStore); the test SIGKILLs it at random points
// while the log grows and rotates, restarts it, and finally checks that every
// line arrived exactly once, in order. Also the position store on its own.
#include <signal.h>
#include <sys/wait.h>

#include <sys/stat.h>

#include <algorithm>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "unit/follow_util.hpp"

namespace retryguard {
namespace {

using namespace std::chrono_literals;
using test::append;
using test::TempDir;

// The consumer's transaction, done the way a store without transactions must:
// effects first, position second; on start, effects beyond the committed
// position (lines > position.lines) are rolled back.
[[noreturn]] void follow_and_commit(const std::string& log, const std::string& out,
                                    const std::string& store_dir, std::uint64_t stop_after, unsigned seed) {
    // No fsync: a killed process loses nothing the kernel already has.
    FilePositionStore store(store_dir, false);
    auto pos = store.load(file_source_id(log));
    if (!pos) _exit(3);
    std::string have = test::slurp(out);
    std::size_t keep = 0;
    for (std::uint64_t n = 0; n < pos->lines; ++n) {
        auto nl = have.find('\n', keep);
        if (nl == std::string::npos) _exit(4);  // the output lost a committed line
        keep = nl + 1;
    }
    if (::truncate(out.c_str(), static_cast<off_t>(keep)) != 0 && !have.empty()) _exit(5);
    FollowerSettings s;
    s.poll_interval = 10ms;
    s.rotation_grace = 30ms;
    s.batch_max_lines = 1 + seed % 13;
    auto src = open_file_follower(log, *pos, s);
    if (!src) _exit(6);
    int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    for (;;) {
        auto b = (*src)->next_batch(50ms);
        if (!b) _exit(7);
        if (*b == nullptr) continue;
        std::string text;
        for (const auto& l : (*b)->lines) text += l.text + "\n";
        if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) _exit(8);
        if (!store.save((*b)->end)) _exit(9);
        (*src)->commit();
        if (stop_after && (*src)->committed().lines >= stop_after) _exit(0);
    }
}

TEST(FollowCrash, KillNineAtRandomPointsLosesAndRepeatsNoLine) {
    TempDir dir;
    auto log = dir / "mail.log";
    auto out = dir / "consumed.txt";
    auto store_dir = dir / "positions";
    std::mt19937 rng(std::random_device{}());
    int written = 0, generations = 0;
    auto write_some = [&](int n) {
        std::string text;
        for (int i = 0; i < n; ++i, ++written)
            text += fmt::format("Nov 29 20:38:50 host postfix/smtp[{}]: 4B{:05X}: line {}\n", written % 977,
                                written, written);
        append(log, text);
    };
    auto rotate = [&] {
        for (int k = generations; k >= 1; --k)
            ::rename(fmt::format("{}.{}", log, k).c_str(), fmt::format("{}.{}", log, k + 1).c_str());
        ::rename(log.c_str(), (log + ".1").c_str());
        ++generations;
    };
    write_some(50);
    // A follower without any saved position starts at the file now at the path;
    // commit once before the kills so that lines rotated away before the first
    // commit are not outside the test's reach.
    {
        pid_t first = ::fork();
        ASSERT_GE(first, 0);
        if (first == 0) follow_and_commit(log, out, store_dir, 50, 12);
        int status = 0;
        ASSERT_EQ(::waitpid(first, &status, 0), first);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
    }
    int kills = 0;
    for (int round = 0; round < 12; ++round) {
        pid_t child = ::fork();
        ASSERT_GE(child, 0);
        if (child == 0) follow_and_commit(log, out, store_dir, 0, static_cast<unsigned>(rng()));
        auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(rng() % 120);
        while (std::chrono::steady_clock::now() < until) {
            write_some(1 + static_cast<int>(rng() % 40));
            if (rng() % 25 == 0) rotate();
            std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
        }
        if (rng() % 4 == 0) rotate();  // sometimes rotate while the child is dead
        ASSERT_EQ(::kill(child, SIGKILL), 0);
        int status = 0;
        ASSERT_EQ(::waitpid(child, &status, 0), child);
        ASSERT_TRUE(WIFSIGNALED(status)) << "child exited early with " << WEXITSTATUS(status);
        ++kills;
        if (rng() % 3 == 0) rotate();
    }
    write_some(25);
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) follow_and_commit(log, out, store_dir, static_cast<std::uint64_t>(written), 12);
    int status = 0;
    auto deadline = std::chrono::steady_clock::now() + 60s;
    pid_t r = 0;
    while ((r = ::waitpid(child, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(10ms);
    if (r == 0) {
        ::kill(child, SIGKILL);
        ::waitpid(child, &status, 0);
        std::string listing;
        for (const auto& e : std::filesystem::directory_iterator(dir.path))
            listing += fmt::format(" {}({}b,ino {})", e.path().filename().string(),
                                   e.is_regular_file() ? e.file_size() : 0, [&] {
                                       struct stat sb {};
                                       ::stat(e.path().c_str(), &sb);
                                       return sb.st_ino;
                                   }());
        std::string consumed = test::slurp(out);
        std::size_t lines = static_cast<std::size_t>(std::count(consumed.begin(), consumed.end(), '\n'));
        auto last_nl = consumed.rfind('\n', consumed.size() >= 2 ? consumed.size() - 2 : 0);
        FAIL() << "final follower did not catch up: written=" << written << " consumed=" << lines << " last='"
               << consumed.substr(last_nl == std::string::npos ? 0 : last_nl + 1) << "' files:" << listing
               << " position:\n"
               << serialize_position(
                      FilePositionStore(store_dir).load(file_source_id(log)).value_or(FollowerPosition{}));
    }
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;

    // The consumer's committed view: its output cut back to the committed count.
    FilePositionStore store(store_dir);
    auto pos = store.load(file_source_id(log));
    ASSERT_TRUE(pos.ok());
    ASSERT_EQ(pos->lines, static_cast<std::uint64_t>(written));
    std::string consumed = test::slurp(out);
    std::string expected;
    for (int i = 0; i < written; ++i)
        expected += fmt::format("Nov 29 20:38:50 host postfix/smtp[{}]: 4B{:05X}: line {}\n", i % 977, i, i);
    ASSERT_EQ(consumed.size(), expected.size()) << "kills=" << kills << " generations=" << generations;
    EXPECT_TRUE(consumed == expected) << "every line exactly once and in order";
    EXPECT_EQ(kills, 12);
}

TEST(FollowPositionStore, RoundTripsEveryFieldAndEscapes) {
    TempDir dir;
    FilePositionStore store(dir / "pos");
    FollowerPosition p;
    p.source = "file:/var/log/odd name\nwith=newline\\";
    p.device = 65024;
    p.inode = 18446744073709551615ull;
    p.offset = 123456789;
    p.head_fingerprint = "0123abcd4567ef89";
    p.cursor = "s=abc;i=1f;b=00;m=12;t=5f;x=99";
    p.lines = 42;
    ASSERT_TRUE(store.save(p).ok());
    auto back = store.load(p.source);
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->source, p.source);
    EXPECT_EQ(back->device, p.device);
    EXPECT_EQ(back->inode, p.inode);
    EXPECT_EQ(back->offset, p.offset);
    EXPECT_EQ(back->head_fingerprint, p.head_fingerprint);
    EXPECT_EQ(back->cursor, p.cursor);
    EXPECT_EQ(back->lines, p.lines);
    EXPECT_FALSE(std::filesystem::exists(store.file_for(p.source) + ".tmp"));
}

TEST(FollowPositionStore, UnknownSourceLoadsAsFreshPosition) {
    TempDir dir;
    FilePositionStore store(dir / "never-created");
    auto p = store.load("journal");
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->source, "journal");
    EXPECT_EQ(p->inode, 0u);
    EXPECT_EQ(p->lines, 0u);
}

TEST(FollowPositionStore, TornOrForeignFilesAreErrorsNotZeroPositions) {
    TempDir dir;
    FilePositionStore store(dir.path);
    FollowerPosition p;
    p.source = "file:/a";
    p.offset = 10;
    ASSERT_TRUE(store.save(p).ok());
    std::string text = test::slurp(store.file_for("file:/a"));
    {
        std::ofstream o(store.file_for("file:/a"), std::ios::trunc);
        o << text.substr(0, text.size() - 3);  // cut mid-line
    }
    EXPECT_FALSE(store.load("file:/a").ok());
    EXPECT_FALSE(parse_position("retryguard-position 1\nsource=x\noffset=12ab\n").ok());
    EXPECT_FALSE(parse_position("something else\n").ok());
    EXPECT_FALSE(parse_position("retryguard-position 1\nsource=x\\q\n").ok());
    auto ok = parse_position("retryguard-position 1\nsource=x\nfuture_key=1\noffset=7\n");
    ASSERT_TRUE(ok.ok());
    EXPECT_EQ(ok->offset, 7u);
}

}  // namespace
}  // namespace retryguard
