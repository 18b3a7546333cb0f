// config_reload_test.cpp -- ConfigHolder swaps whole snapshots: a bad reload
// keeps the running config and returns its errors; a reader holding the old
// snapshot is unaffected by a swap; concurrent readers always see a whole one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "retryguard/config/config.hpp"

namespace cfg = retryguard::config;
using namespace std::chrono_literals;

namespace {

struct TempFile {
    std::string path;
    TempFile() {
        path = (std::filesystem::temp_directory_path() /
                ("rg-config-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++) + ".yaml"))
                   .string();
    }
    ~TempFile() { std::filesystem::remove(path); }
    void write(const std::string& text) const { std::ofstream(path, std::ios::trunc) << text; }
    static int& counter() {
        static int n = 0;
        return n;
    }
};

}  // namespace

TEST(ConfigReload, GoodReloadSwapsSnapshot) {
    TempFile f;
    f.write("retry:\n  min_interval: 40m\n");
    auto first = cfg::load_file(f.path);
    ASSERT_TRUE(first.ok());
    cfg::ConfigHolder holder(first.config);
    auto held = holder.current();  // work in progress keeps this one
    f.write("retry:\n  min_interval: 50m\n");
    EXPECT_TRUE(holder.reload().empty());
    EXPECT_EQ(holder.generation(), 2u);
    EXPECT_EQ(holder.current()->global.retry.min_interval, 50min);
    EXPECT_EQ(held->global.retry.min_interval, 40min);  // unaffected by the swap
    EXPECT_NE(held.get(), holder.current().get());
    EXPECT_GE(holder.current()->loaded_at, held->loaded_at);
    EXPECT_EQ(holder.current()->source, f.path);
}

TEST(ConfigReload, BadReloadKeepsRunningConfigAndReturnsErrors) {
    TempFile f;
    f.write("retry:\n  min_interval: 40m\n");
    cfg::ConfigHolder holder(cfg::load_file(f.path).config);
    auto before = holder.current();
    f.write("retry:\n  min_interval: 40\n  bogus: 1\n");
    auto errors = holder.reload();
    ASSERT_EQ(errors.size(), 2u);
    EXPECT_EQ(errors[0].to_string(),
              f.path +
                  ":2:17: error: bad duration '40' for 'retry.min_interval': a duration "
                  "needs a unit: ms, s, m, h, d or w (e.g. \"30m\")");
    EXPECT_EQ(errors[1].to_string(), f.path + ":3:3: error: unknown key 'retry.bogus'");
    EXPECT_EQ(holder.current().get(), before.get());
    EXPECT_EQ(holder.generation(), 1u);
    // Syntax error and a vanished file are bad reloads too.
    f.write("retry: [\n");
    EXPECT_FALSE(holder.reload().empty());
    EXPECT_FALSE(holder.reload("/nonexistent/x.yaml").empty());
    EXPECT_EQ(holder.current().get(), before.get());
}

TEST(ConfigReload, ReadersSeeWholeSnapshotsDuringSwaps) {
    TempFile a, b;
    a.write("retry:\n  min_interval: 40m\n  stalled_after: 4h\n");
    b.write("retry:\n  min_interval: 50m\n  stalled_after: 5h\n");
    cfg::ConfigHolder holder(cfg::load_file(a.path).config);
    std::atomic<bool> stop{false};
    std::atomic<long> torn{0}, reads{0};
    std::vector<std::thread> readers;
    for (int t = 0; t < 3; ++t)
        readers.emplace_back([&] {
            while (!stop.load()) {
                auto s = holder.current();
                auto m = s->global.retry.min_interval, st = s->global.retry.stalled_after;
                if (!((m == 40min && st == 4h) || (m == 50min && st == 5h))) ++torn;
                ++reads;
            }
        });
    while (reads.load() < 3) std::this_thread::yield();  // readers are running before the swaps start
    for (int i = 0; i < 40; ++i) ASSERT_TRUE(holder.reload(i % 2 ? a.path : b.path).empty());
    stop = true;
    for (auto& t : readers) t.join();
    EXPECT_EQ(torn.load(), 0);
    EXPECT_GE(reads.load(), 3);
    EXPECT_EQ(holder.generation(), 41u);
}

// A validator that finds a problem fails the reload as a whole: the running
// snapshot stays, even for the keys the new file changed correctly.
TEST(ConfigReload, ValidatorProblemKeepsWholeRunningConfig) {
    TempFile f;
    f.write("retry:\n  min_interval: 40m\n");
    cfg::ConfigHolder holder(cfg::load_file(f.path).config);
    auto before = holder.current();
    f.write("retry:\n  min_interval: 50m\n");
    int calls = 0;
    auto errors = holder.reload({}, [&](const cfg::Config& c) {
        ++calls;
        EXPECT_EQ(c.global.retry.min_interval, 50min);  // sees the new file
        return std::vector<cfg::Diagnostic>{{f.path, 2, 3, "refused"}};
    });
    EXPECT_EQ(calls, 1);
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_EQ(errors[0].to_string(), f.path + ":2:3: error: refused");
    EXPECT_EQ(holder.current().get(), before.get());
    EXPECT_EQ(holder.generation(), 1u);
    EXPECT_TRUE(holder.reload({}, [](const cfg::Config&) { return std::vector<cfg::Diagnostic>{}; }).empty());
    EXPECT_EQ(holder.current()->global.retry.min_interval, 50min);
}
