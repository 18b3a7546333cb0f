// bench_follow.cpp -- how fast the file follower delivers lines from a large
// file, against plain reads of the same file in the same run (the machines are
// shared and noisy: only the ratios mean something). The file is built from the
// Postfix 3.7 fixture lines, repeated to about 64 MiB.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "retryguard/follow/follower.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct BigFile {
    std::string path;
    std::size_t lines = 0;
    std::size_t bytes = 0;
    BigFile() {
        std::vector<std::string> sample;
        for (const auto& e : std::filesystem::directory_iterator(RETRYGUARD_FIXTURES "/postfix-3.7")) {
            std::ifstream in(e.path());
            for (std::string l; std::getline(in, l);)
                if (!l.empty() && l[0] != '#') sample.push_back(l + "\n");
        }
        if (sample.empty()) sample.push_back("Nov 29 20:48:20 sender postfix/smtpd[23758]: connect from x\n");
        path = (std::filesystem::temp_directory_path() / ("rg-bench-follow-" + std::to_string(::getpid())))
                   .string();
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        while (bytes < (64u << 20)) {
            for (const auto& l : sample) {
                out << l;
                bytes += l.size();
                ++lines;
            }
        }
    }
    ~BigFile() { std::filesystem::remove(path); }
};

BigFile& big() {
    static BigFile f;
    return f;
}

double g_plain_rate = 0;  // lines per second of the reference, set by the first benchmark

void finish(benchmark::State& state, std::size_t lines, Clock::duration spent, bool reference) {
    state.SetItemsProcessed(static_cast<std::int64_t>(lines));
    state.SetBytesProcessed(static_cast<std::int64_t>(big().bytes) * state.iterations());
    double rate = static_cast<double>(lines) / std::chrono::duration<double>(spent).count();
    if (reference) g_plain_rate = rate;
    if (g_plain_rate > 0) state.counters["x_plain_read"] = rate / g_plain_rate;
}

// Reference: read(2) in 256 KiB chunks and count newlines with memchr.
void BM_PlainReadCountLines(benchmark::State& state) {
    std::vector<char> buf(256 * 1024);
    std::size_t lines = 0;
    Clock::duration spent{};
    for (auto _ : state) {
        auto t = Clock::now();
        int fd = ::open(big().path.c_str(), O_RDONLY);
        ssize_t n;
        while ((n = ::read(fd, buf.data(), buf.size())) > 0) {
            const char* p = buf.data();
            const char* end = p + n;
            while ((p = static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)))))
                ++lines, ++p;
        }
        ::close(fd);
        spent += Clock::now() - t;
    }
    finish(state, lines, spent, true);
}

// Second reference: std::getline into a std::string, what a naive reader does.
void BM_GetlineReference(benchmark::State& state) {
    std::size_t lines = 0;
    Clock::duration spent{};
    for (auto _ : state) {
        auto t = Clock::now();
        std::ifstream in(big().path, std::ios::binary);
        std::string l;
        while (std::getline(in, l)) {
            benchmark::DoNotOptimize(l.data());
            ++lines;
        }
        spent += Clock::now() - t;
    }
    finish(state, lines, spent, false);
}

// The follower: open, take every batch, commit, until the whole file is read.
void BM_FileFollower(benchmark::State& state) {
    std::size_t lines = 0;
    Clock::duration spent{};
    retryguard::FollowerSettings s;
    s.use_inotify = false;
    s.batch_max_lines = static_cast<std::size_t>(state.range(0));
    for (auto _ : state) {
        auto t = Clock::now();
        auto src = retryguard::open_file_follower(big().path, {}, s);
        if (!src) {
            state.SkipWithError(src.error().message.c_str());
            return;
        }
        std::size_t got = 0;
        while (got < big().lines) {
            auto b = (*src)->next_batch(std::chrono::milliseconds(0));
            if (!b || !*b) break;
            got += (*b)->lines.size();
            benchmark::DoNotOptimize((*b)->lines.data());
            (*src)->commit();
        }
        lines += got;
        spent += Clock::now() - t;
        if (got != big().lines) state.SkipWithError("follower did not deliver every line");
    }
    finish(state, lines, spent, false);
}

BENCHMARK(BM_PlainReadCountLines)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_GetlineReference)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_FileFollower)->Arg(100)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
