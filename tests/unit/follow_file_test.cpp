// follow_file_test.cpp -- the file follower on real files in a temporary
// directory: appends, both kinds of rotation (while running and while stopped),
// truncation, refused batches, restarts, huge lines and raw bytes.
#include <sys/stat.h>

#include <atomic>
#include <thread>

#include <fmt/format.h>

#include "unit/follow_util.hpp"

namespace retryguard {
namespace {

using namespace std::chrono_literals;
using test::append;
using test::drain;
using test::fast_settings;
using test::TempDir;
using test::texts;

using Lines = std::vector<std::string>;

std::unique_ptr<LineSource> follow(const std::string& path, FollowerPosition pos = {},
                                   FollowerSettings s = fast_settings()) {
    auto f = open_file_follower(path, std::move(pos), s);
    EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().message);
    return f.ok() ? std::move(*f) : nullptr;
}

TEST(FollowFile, DeliversAppendedLinesWithOffsetsAndEndPosition) {
    TempDir dir;
    auto log = dir / "mail.log";
    append(log, "one\ntwo\n");
    auto src = follow(log);
    auto got = drain(*src, 2);
    ASSERT_EQ(texts(got), (Lines{"one", "two"}));
    EXPECT_EQ(got[0].position, 0u);
    EXPECT_EQ(got[1].position, 4u);
    EXPECT_EQ(src->committed().offset, 8u);
    EXPECT_EQ(src->committed().lines, 2u);
    struct stat sb {};
    ::stat(log.c_str(), &sb);
    EXPECT_EQ(src->committed().inode, static_cast<std::uint64_t>(sb.st_ino));
    EXPECT_FALSE(src->committed().head_fingerprint.empty());

    append(log, "three\n");
    got = drain(*src, 1);
    ASSERT_EQ(texts(got), (Lines{"three"}));
    EXPECT_EQ(got[0].position, 8u);
    EXPECT_EQ(src->committed().offset, 14u);
    auto st = src->status();
    EXPECT_EQ(st.lines_read, 3u);
    EXPECT_EQ(st.file_size, 14u);
    EXPECT_EQ(st.lag_bytes, 0u);
    EXPECT_TRUE(st.inotify);
}

TEST(FollowFile, WaitsForTheNewlineOfAPartialLastLine) {
    TempDir dir;
    auto log = dir / "mail.log";
    append(log, "done\nhalf a li");
    auto src = follow(log);
    EXPECT_EQ(texts(drain(*src, 1)), (Lines{"done"}));
    auto b = src->next_batch(150ms);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(*b, nullptr) << "a line without its newline must not be delivered";
    EXPECT_EQ(src->committed().offset, 5u);
    EXPECT_EQ(src->status().lag_bytes, 9u);
    append(log, "ne\n");
    EXPECT_EQ(texts(drain(*src, 1)), (Lines{"half a line"}));
}

TEST(FollowFile, StopsAPartialLineAcrossRestartsToo) {
    TempDir dir;
    auto log = dir / "mail.log";
    append(log, "a\nb-start");
    FollowerPosition pos;
    {
        auto src = follow(log);
        drain(*src, 1);
        pos = src->committed();
    }
    append(log, "-end\n");
    auto src = follow(log, pos);
    EXPECT_EQ(texts(drain(*src, 1)), (Lines{"b-start-end"}));
}

TEST(FollowFile, BatchesRespectLineAndByteLimits) {
    TempDir dir;
    auto log = dir / "mail.log";
    std::string text;
    for (int i = 0; i < 10; ++i) text += fmt::format("line {}\n", i);
    append(log, text);
    auto s = fast_settings();
    s.batch_max_lines = 3;
    auto src = follow(log, {}, s);
    std::vector<std::size_t> sizes;
    for (int i = 0; i < 4; ++i) {
        auto b = src->next_batch(200ms);
        ASSERT_TRUE(b.ok() && *b);
        sizes.push_back((*b)->lines.size());
        src->commit();
    }
    EXPECT_EQ(sizes, (std::vector<std::size_t>{3, 3, 3, 1}));

    auto log2 = dir / "bytes.log";
    append(log2, std::string(1500, 'x') + "\n" + std::string(10, 'y') + "\n");
    s.batch_max_lines = 100;
    s.batch_max_bytes = 1024;
    auto src2 = follow(log2, {}, s);
    auto b = src2->next_batch(200ms);
    ASSERT_TRUE(b.ok() && *b);
    EXPECT_EQ((*b)->lines.size(), 1u) << "the byte limit closes the batch after the line that crosses it";
}

TEST(FollowFile, RefusedBatchIsOfferedAgainUnchanged) {
    TempDir dir;
    auto log = dir / "mail.log";
    append(log, "a\nb\nc\n");
    auto src = follow(log);
    int calls = 0;
    std::vector<Lines> seen;
    auto consumer = [&](const LineBatch& b) -> Status {
        seen.push_back(texts(b.lines));
        if (++calls <= 2) return make_error(ErrorKind::unavailable, "ledger busy");
        return {};
    };
    auto n = src->poll_once(consumer, 200ms);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 0u);
    EXPECT_EQ(src->committed().offset, 0u);
    append(log, "d\n");  // arrives while the batch waits: must not join or replace it
    n = src->poll_once(consumer, 200ms);
    EXPECT_EQ(*n, 0u);
    n = src->poll_once(consumer, 200ms);
    EXPECT_EQ(*n, 3u);
    ASSERT_EQ(seen.size(), 3u);
    EXPECT_EQ(seen[0], (Lines{"a", "b", "c"}));
    EXPECT_EQ(seen[1], seen[0]);
    EXPECT_EQ(seen[2], seen[0]);
    auto st = src->status();
    EXPECT_EQ(st.batches_refused, 2u);
    EXPECT_NE(st.last_error.find("ledger busy"), std::string::npos);
    EXPECT_EQ(texts(drain(*src, 1)), (Lines{"d"}));
}

TEST(FollowFile, RestartInTheMiddleOfARefusedBatchReoffersIt) {
    TempDir dir;
    auto log = dir / "mail.log";
    append(log, "1\n2\n3\n4\n5\n");
    auto s = fast_settings();
    s.batch_max_lines = 2;
    FollowerPosition committed;
    {
        auto src = follow(log, {}, s);
        ASSERT_EQ(texts(drain(*src, 2)), (Lines{"1", "2"}));
        committed = src->committed();
        auto b = src->next_batch(200ms);  // 3,4 offered, never accepted: the process dies here
        ASSERT_TRUE(b.ok() && *b);
        EXPECT_EQ(texts((*b)->lines), (Lines{"3", "4"}));
    }
    auto src = follow(log, committed, s);
    EXPECT_EQ(texts(drain(*src, 3)), (Lines{"3", "4", "5"}));
    EXPECT_EQ(src->committed().lines, 5u);
}

TEST(FollowFile, FollowsRenameAndCreateRotationWhileRunning) {
    TempDir dir;
    auto log = dir / "mail.log";
    append(log, "old1\nold2\n");
    auto src = follow(log);
    ASSERT_EQ(texts(drain(*src, 2)), (Lines{"old1", "old2"}));
    append(log, "old3\n");  // written before the rotation, not read yet
    ASSERT_EQ(::rename(log.c_str(), (log + ".1").c_str()), 0);
    append(log + ".1", "late\n");  // a writer that has not reopened yet
    append(log, "new1\nnew2\n");
    EXPECT_EQ(texts(drain(*src, 4)), (Lines{"old3", "late", "new1", "new2"}));
    auto st = src->status();
    EXPECT_EQ(st.rotations, 1u);
    EXPECT_EQ(st.reading, log);
    struct stat sb {};
    ::stat(log.c_str(), &sb);
    EXPECT_EQ(src->committed().inode, static_cast<std::uint64_t>(sb.st_ino));
    EXPECT_EQ(src->committed().offset, 10u);
}

TEST(FollowFile, ANewFileRotatedAwayBeforeTheFollowerOpenedItIsNotSkipped) {
    TempDir dir;
    auto log = dir / "mail.log";
    append(log, "a1\n");
    auto src = follow(log);
    ASSERT_EQ(texts(drain(*src, 1)), (Lines{"a1"}));
    ASSERT_EQ(::rename(log.c_str(), (log + ".1").c_str()), 0);  // no new file yet
    auto b = src->next_batch(200ms);                            // drains a, waits for the path
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(*b, nullptr);
    append(log, "b1\n");
    ::rename((log + ".1").c_str(), (log + ".2").c_str());
    ::rename(log.c_str(), (log + ".1").c_str());
    append(log, "c1\n");
    EXPECT_EQ(texts(drain(*src, 2)), (Lines{"b1", "c1"}));
}

TEST(FollowFile, RotationWithoutPollingNotification) {
    TempDir dir;
    auto log = dir / "mail.log";
    append(log, "a\n");
    auto s = fast_settings();
    s.use_inotify = false;
    auto src = follow(log, {}, s);
    EXPECT_FALSE(src->status().inotify);
    ASSERT_EQ(texts(drain(*src, 1)), (Lines{"a"}));
    append(log, "b\n");
    ::rename(log.c_str(), (log + ".1").c_str());
    append(log, "c\n");
    EXPECT_EQ(texts(drain(*src, 2)), (Lines{"b", "c"}));
}

TEST(FollowFile, FinishesTheRotatedFileFirstAfterRotationWhileStopped) {
    TempDir dir;
    auto log = dir / "mail.log";
    auto s = fast_settings();
    s.batch_max_lines = 1;
    append(log, "a1\na2\n");
    FollowerPosition pos;
    {
        auto src = follow(log, {}, s);
        ASSERT_EQ(texts(drain(*src, 1)), (Lines{"a1"}));
        pos = src->committed();
    }
    append(log, "a3\n");
    ASSERT_EQ(::rename(log.c_str(), (log + ".1").c_str()), 0);
    append(log, "b1\n");
    auto src = follow(log, pos, s);
    EXPECT_EQ(src->status().reading, log + ".1");
    EXPECT_GT(src->status().lag_bytes, 0u);
    EXPECT_EQ(texts(drain(*src, 3)), (Lines{"a2", "a3", "b1"}));
    EXPECT_EQ(src->status().rotations, 2u) << "into the rotated file, then on to the new one";
    EXPECT_EQ(src->status().reading, log);
}

TEST(FollowFile, ReadsEveryRotatedGenerationAfterTwoRotationsWhileStopped) {
    TempDir dir;
    auto log = dir / "mail.log";
    auto s = fast_settings();
    s.batch_max_lines = 1;
    append(log, "g1-a\ng1-b\n");
    FollowerPosition pos;
    {
        auto src = follow(log, {}, s);
        ASSERT_EQ(texts(drain(*src, 1)), (Lines{"g1-a"}));
        pos = src->committed();
    }
    ::rename(log.c_str(), (log + ".1").c_str());
    append(log, "g2-a\n");
    ::rename((log + ".1").c_str(), (log + ".2").c_str());
    ::rename(log.c_str(), (log + ".1").c_str());
    append(log, "g3-a\n");
    append(log + ".5", "unrelated older generation\n");
    auto src = follow(log, pos, s);
    EXPECT_EQ(texts(drain(*src, 3)), (Lines{"g1-b", "g2-a", "g3-a"}));
    EXPECT_EQ(texts(drain(*src, 1, 300ms)), Lines{});
}

// A restart while logrotate is renaming path.N to path.N+1: a listing taken
// during the renames is unusable, and the saved file may move between the
// listing and the open. Neither may make the follower give the saved file up
// and start over at the path, which would skip the rest of it and every newer
// generation.
TEST(FollowFile, RestartWhileRotationRenamesFilesResumesInTheSavedFile) {
    TempDir dir;
    auto log = dir / "mail.log";
    auto s = fast_settings();
    s.batch_max_lines = 1;
    append(log, "saved-1\nsaved-2\n");
    FollowerPosition pos;
    {
        auto src = follow(log, {}, s);
        ASSERT_EQ(texts(drain(*src, 1)), (Lines{"saved-1"}));
        pos = src->committed();
    }
    int generations = 0;
    auto rotate = [&] {
        for (int k = generations; k >= 1; --k)
            ::rename(fmt::format("{}.{}", log, k).c_str(), fmt::format("{}.{}", log, k + 1).c_str());
        ::rename(log.c_str(), (log + ".1").c_str());
        ++generations;
        append(log, fmt::format("gen {}\n", generations));
    };
    for (int i = 0; i < 30; ++i) rotate();
    std::atomic<bool> stop{false};
    // Rotations back to back, each followed by a quiet spell longer than the
    // rotation itself took, as after a real logrotate run: a directory that
    // never stops changing is not a rotation, and after about 2 s of it the
    // follower does give up (reported). At most 200 of them, so that the
    // generations (and the time each rotation takes) stay bounded.
    std::thread rotator([&] {
        for (int n = 0; n < 200 && !stop.load(); ++n) {
            auto began = std::chrono::steady_clock::now();
            rotate();
            std::this_thread::sleep_for(3ms + 2 * (std::chrono::steady_clock::now() - began));
        }
    });
    int restarts = 0;
    std::string wrong;
    for (auto until = std::chrono::steady_clock::now() + 1500ms;
         std::chrono::steady_clock::now() < until && wrong.empty(); ++restarts) {
        auto src = follow(log, pos, s);
        if (!src) break;
        auto got = drain(*src, 1, 3000ms);
        if (texts(got) != Lines{"saved-2"} || !src->status().last_error.empty())
            wrong = fmt::format("restart {}: got '{}', {}", restarts, got.empty() ? "" : got.front().text,
                                format_status(src->status()));
    }
    stop = true;
    rotator.join();
    EXPECT_EQ(wrong, "");
    EXPECT_GE(restarts, 3);
}

TEST(FollowFile, DatedRotationNamesAreFollowedInOrder) {
    TempDir dir;
    auto log = dir / "mail.log";
    append(log, "d1\nd2\n");
    FollowerPosition pos;
    {
        auto s = fast_settings();
        s.batch_max_lines = 1;
        auto src = follow(log, {}, s);
        drain(*src, 1);
        pos = src->committed();
    }
    ::rename(log.c_str(), (log + "-20261128").c_str());
    append(log, "e1\n");
    ::rename(log.c_str(), (log + "-20261129").c_str());
    append(log, "f1\n");
    auto src = follow(log, pos);
    EXPECT_EQ(texts(drain(*src, 3)), (Lines{"d2", "e1", "f1"}));
}

TEST(FollowFile, FollowsCopytruncate) {
    TempDir dir;
    auto log = dir / "mail.log";
    append(log, "before1\nbefore2\n");
    auto src = follow(log);
    ASSERT_EQ(texts(drain(*src, 2)), (Lines{"before1", "before2"}));
    std::filesystem::copy_file(log, log + ".1");
    ASSERT_EQ(::truncate(log.c_str(), 0), 0);
    append(log, "after1\n");
    EXPECT_EQ(texts(drain(*src, 1)), (Lines{"after1"}));
    EXPECT_EQ(src->status().truncations, 1u);
    EXPECT_EQ(src->committed().offset, 7u);
}

TEST(FollowFile, CopytruncateLinesNotYetReadAreTakenFromTheCopy) {
    TempDir dir;
    auto log = dir / "mail.log";
    append(log, "before1\n");
    auto src = follow(log);
    ASSERT_EQ(texts(drain(*src, 1)), (Lines{"before1"}));
    append(log, "before2\nbefore3 half");  // logged before the copy, not read yet
    append(log + ".2", "before1\nan older generation with the same first line\n");
    std::filesystem::copy_file(log, log + ".1");
    ASSERT_EQ(::truncate(log.c_str(), 0), 0);
    append(log, "after1\n");
    EXPECT_EQ(texts(drain(*src, 3)), (Lines{"before2", "before3 half", "after1"}));
    EXPECT_EQ(texts(drain(*src, 1, 200ms)), Lines{});
    EXPECT_EQ(src->status().truncations, 1u);
}

TEST(FollowFile, CopytruncateWhileStoppedFinishesFromTheCopy) {
    TempDir dir;
    auto log = dir / "mail.log";
    append(log, "c1\n");
    FollowerPosition pos;
    {
        auto src = follow(log);
        drain(*src, 1);
        pos = src->committed();
    }
    append(log, "c2\n");
    std::filesystem::copy_file(log, log + ".1");
    ASSERT_EQ(::truncate(log.c_str(), 0), 0);
    append(log, "d1\nd2\nd3 which makes the file longer than before\n");
    auto src = follow(log, pos);
    EXPECT_EQ(texts(drain(*src, 4)), (Lines{"c2", "d1", "d2", "d3 which makes the file longer than before"}));
    EXPECT_EQ(src->status().truncations, 1u);
}

TEST(FollowFile, DetectsTruncationFollowedByRegrowthThroughTheHead) {
    TempDir dir;
    auto log = dir / "mail.log";
    append(log, "first line of the old file\n");
    auto s = fast_settings();
    s.use_inotify = false;
    s.poll_interval = 500ms;  // the regrowth lands before the follower looks again
    auto src = follow(log, {}, s);
    ASSERT_EQ(drain(*src, 1).size(), 1u);
    ASSERT_EQ(::truncate(log.c_str(), 0), 0);
    append(log, "NEW first line, longer than the old one was\nnew second\n");
    EXPECT_EQ(texts(drain(*src, 2)), (Lines{"NEW first line, longer than the old one was", "new second"}));
    EXPECT_EQ(src->status().truncations, 1u);
}

TEST(FollowFile, TruncatedToSmallerSizeWhileStoppedRestartsAtZero) {
    TempDir dir;
    auto log = dir / "mail.log";
    append(log, "aaaaaaaaaa\nbbbbbbbbbb\n");
    FollowerPosition pos;
    {
        auto src = follow(log);
        drain(*src, 2);
        pos = src->committed();
    }
    ASSERT_EQ(::truncate(log.c_str(), 0), 0);
    append(log, "c\n");
    auto src = follow(log, pos);
    EXPECT_EQ(texts(drain(*src, 1)), (Lines{"c"}));
    EXPECT_EQ(src->status().truncations, 1u);
    EXPECT_FALSE(src->status().last_error.empty());
}

TEST(FollowFile, ReusedInodeWithOtherContentIsReadFromItsStart) {
    TempDir dir;
    auto log = dir / "mail.log";
    append(log, "x1\nx2\n");
    FollowerPosition pos;
    {
        auto src = follow(log);
        drain(*src, 2);
        pos = src->committed();
    }
    // Same inode, larger than the saved offset, different bytes before it.
    ASSERT_EQ(::truncate(log.c_str(), 0), 0);
    append(log, "y1\ny2\ny3\n");
    auto src = follow(log, pos);
    EXPECT_EQ(texts(drain(*src, 3)), (Lines{"y1", "y2", "y3"}));
}

TEST(FollowFile, UnchangedFileResumesExactlyAtTheCommittedOffset) {
    TempDir dir;
    auto log = dir / "mail.log";
    append(log, "p\nq\n");
    FollowerPosition pos;
    {
        auto src = follow(log);
        drain(*src, 2);
        pos = src->committed();
    }
    append(log, "r\n");
    auto src = follow(log, pos);
    EXPECT_EQ(texts(drain(*src, 1)), (Lines{"r"}));
    EXPECT_EQ(texts(drain(*src, 1, 200ms)), Lines{});
    EXPECT_EQ(src->status().truncations, 0u);
    EXPECT_EQ(src->committed().lines, 3u);
}

TEST(FollowFile, TenMegabyteLineIsTruncatedAndDoesNotStall) {
    TempDir dir;
    auto log = dir / "mail.log";
    std::string huge(10u << 20, 'z');
    append(log, "before\n" + huge + "\nafter\n");
    auto src = follow(log);
    auto got = drain(*src, 3);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0].text, "before");
    EXPECT_TRUE(got[1].truncated);
    EXPECT_EQ(got[1].text.size(), 64u * 1024);
    EXPECT_EQ(got[1].position, 7u);
    EXPECT_EQ(got[2].text, "after");
    EXPECT_FALSE(got[2].truncated);
    EXPECT_EQ(src->status().lines_truncated, 1u);
    EXPECT_EQ(src->committed().offset, 7u + huge.size() + 1 + 6);
}

TEST(FollowFile, HugeLineWrittenInPiecesAndSkipPolicy) {
    TempDir dir;
    auto log = dir / "mail.log";
    auto s = fast_settings();
    s.long_line = LongLinePolicy::skip;
    s.max_line_bytes = 1000;
    append(log, "start\n");
    auto src = follow(log, {}, s);
    ASSERT_EQ(texts(drain(*src, 1)), (Lines{"start"}));
    for (int i = 0; i < 20; ++i) {
        append(log, std::string(100000, 'q'));
        auto b = src->next_batch(5ms);
        ASSERT_TRUE(b.ok());
        EXPECT_EQ(*b, nullptr);
    }
    append(log, "\nend\n");
    EXPECT_EQ(texts(drain(*src, 1)), (Lines{"end"}));
    EXPECT_EQ(src->status().lines_skipped, 1u);
    EXPECT_EQ(src->status().lines_truncated, 0u);
}

TEST(FollowFile, InvalidUtf8PassesThroughAsBytes) {
    TempDir dir;
    auto log = dir / "mail.log";
    std::string bad = "caf\xe9 \xff\xfe \xc3\x28 \xed\xa0\x80 nul:";
    bad += '\0';
    bad += "end\r";
    append(log, bad + "\n");
    auto src = follow(log);
    auto got = drain(*src, 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].text, bad);
}

TEST(FollowFile, WaitsForAFileThatDoesNotExistYet) {
    TempDir dir;
    auto log = dir / "mail.log";
    auto src = follow(log);
    auto b = src->next_batch(50ms);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(*b, nullptr);
    append(log, "hello\n");
    EXPECT_EQ(texts(drain(*src, 1)), (Lines{"hello"}));
}

TEST(FollowFile, StartAtEndSkipsExistingContentOnFirstRunOnly) {
    TempDir dir;
    auto log = dir / "mail.log";
    append(log, "history\nmore history\npartial");
    auto s = fast_settings();
    s.start_at_end = true;
    auto src = follow(log, {}, s);
    append(log, " tail\nfresh\n");
    EXPECT_EQ(texts(drain(*src, 2)), (Lines{"partial tail", "fresh"}));
}

TEST(FollowFile, StopWakesABlockedNextBatchPromptly) {
    TempDir dir;
    auto log = dir / "mail.log";
    append(log, "");
    auto src = follow(log);
    std::atomic<bool> returned{false};
    auto started = std::chrono::steady_clock::now();
    std::thread t([&] {
        auto b = src->next_batch(30s);
        EXPECT_TRUE(b.ok());
        returned = true;
    });
    std::this_thread::sleep_for(50ms);
    src->stop();
    t.join();
    EXPECT_TRUE(returned);
    EXPECT_LT(std::chrono::steady_clock::now() - started, 2s);
}

TEST(FollowFile, RunLoopBacksOffOnRefusalAndStops) {
    TempDir dir;
    auto log = dir / "mail.log";
    append(log, "r1\nr2\n");
    auto s = fast_settings();
    s.refusal_backoff = 10ms;
    auto src = follow(log, {}, s);
    Lines accepted;
    int refusals = 0;
    // Only stop() may be called from another thread (follower.hpp): this
    // thread learns of progress through the consumer, not committed().
    std::atomic<std::size_t> seen{0};
    std::thread t([&] {
        Status st = src->run([&](const LineBatch& b) -> Status {
            if (refusals < 3) {
                ++refusals;
                return make_error(ErrorKind::unavailable, "slow");
            }
            for (const auto& l : b.lines) accepted.push_back(l.text);
            seen = accepted.size();
            return {};
        });
        EXPECT_TRUE(st.ok());
    });
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < deadline && seen < 2) std::this_thread::sleep_for(5ms);
    src->stop();
    t.join();
    EXPECT_EQ(refusals, 3);
    EXPECT_EQ(accepted, (Lines{"r1", "r2"}));
}

TEST(FollowFile, ManySmallAppendsWhileRotatingLoseAndRepeatNothing) {
    TempDir dir;
    auto log = dir / "mail.log";
    constexpr int kLines = 6000;
    auto s = fast_settings();
    s.batch_max_lines = 97;
    auto src = follow(log, {}, s);
    std::thread writer([&] {
        int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        for (int i = 0; i < kLines; ++i) {
            std::string line = fmt::format("Nov 29 20:38:50 host postfix/smtp[{}]: line {}\n", i % 100, i);
            // Split some lines over two writes: the reader must wait for the newline.
            if (i % 7 == 0) {
                ASSERT_EQ(::write(fd, line.data(), 10), 10);
                ASSERT_EQ(::write(fd, line.data() + 10, line.size() - 10),
                          static_cast<ssize_t>(line.size() - 10));
            } else {
                ASSERT_EQ(::write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
            }
            if (i % 1000 == 999) {  // rename-and-create, like logrotate + HUP (keeping every generation)
                for (int k = i / 1000; k >= 1; --k)
                    ::rename(fmt::format("{}.{}", log, k).c_str(), fmt::format("{}.{}", log, k + 1).c_str());
                ::rename(log.c_str(), (log + ".1").c_str());
                ::close(fd);
                fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
            }
            if (i % 50 == 0) std::this_thread::sleep_for(1ms);
        }
        ::close(fd);
    });
    auto got = drain(*src, kLines, 30s);
    writer.join();
    ASSERT_EQ(got.size(), static_cast<std::size_t>(kLines)) << format_status(src->status());
    for (int i = 0; i < kLines; ++i)
        ASSERT_EQ(got[i].text, fmt::format("Nov 29 20:38:50 host postfix/smtp[{}]: line {}", i % 100, i));
    EXPECT_EQ(texts(drain(*src, 1, 1000ms)), Lines{});
    EXPECT_EQ(src->status().rotations, 6u);
}

}  // namespace
}  // namespace retryguard
