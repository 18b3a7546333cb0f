// bench_parse.cpp -- log parser throughput, lines per second on one core, over
// a realistic mix: every line of the Postfix 3.7 lab logs (tests/fixtures),
// repeated. References measured in the same run: splitting the same buffer into
// lines with memchr, and copying each line (the least any parser must do).
// Prints each figure and its ratio to the references.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "retryguard/log/log_parser.hpp"

namespace {

const std::string& corpus() {
    static const std::string text = [] {
        std::string all;
        for (const auto& e :
             std::filesystem::directory_iterator(std::string(RETRYGUARD_FIXTURES) + "/postfix-3.7")) {
            if (e.path().extension() != ".log") continue;
            std::ifstream in(e.path());
            for (std::string l; std::getline(in, l);)
                if (!l.empty() && l[0] != '#') all += l + '\n';
        }
        std::string big;
        while (big.size() < (16u << 20)) big += all;  // ~16 MiB: well past the caches
        return big;
    }();
    return text;
}

template <typename F>
void for_each_line(const std::string& text, F&& f) {
    const char* p = text.data();
    const char* end = p + text.size();
    while (p < end) {
        const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)));
        if (!nl) nl = end;
        f(std::string_view(p, static_cast<std::size_t>(nl - p)));
        p = nl + 1;
    }
}

void BM_ReferenceSplitLines(benchmark::State& state) {
    const std::string& text = corpus();
    std::int64_t lines = 0;
    for (auto _ : state) {
        std::size_t bytes = 0;
        for_each_line(text, [&](std::string_view l) {
            bytes += l.size();
            ++lines;
        });
        benchmark::DoNotOptimize(bytes);
    }
    state.SetItemsProcessed(lines);
}

void BM_ReferenceCopyLines(benchmark::State& state) {
    const std::string& text = corpus();
    std::int64_t lines = 0;
    std::string copy;
    for (auto _ : state) {
        for_each_line(text, [&](std::string_view l) {
            copy.assign(l);
            benchmark::DoNotOptimize(copy.data());
            ++lines;
        });
    }
    state.SetItemsProcessed(lines);
}

void parse_bench(benchmark::State& state, bool replies) {
    const std::string& text = corpus();
    retryguard::LogParserOptions o;
    o.local_time = false;
    o.parse_replies = replies;
    o.reference_time = retryguard::from_micros(1795996800000000);
    std::int64_t lines = 0, recognised = 0;
    retryguard::Event ev;
    for (auto _ : state) {
        retryguard::LogParser parser(o);
        for_each_line(text, [&](std::string_view l) {
            recognised += parser.parse(l, ev);
            ++lines;
        });
    }
    state.SetItemsProcessed(lines);
    state.counters["recognised_share"] = double(recognised) / double(lines);
}

void BM_ParseEvents(benchmark::State& state) {
    parse_bench(state, false);
}
void BM_ParseEventsWithReplies(benchmark::State& state) {
    parse_bench(state, true);
}

BENCHMARK(BM_ReferenceSplitLines)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_ReferenceCopyLines)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_ParseEvents)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_ParseEventsWithReplies)->Unit(benchmark::kMillisecond)->MinTime(2.0);

class RatioReporter : public benchmark::ConsoleReporter {
  public:
    void ReportRuns(const std::vector<Run>& runs) override {
        ConsoleReporter::ReportRuns(runs);
        for (const auto& r : runs) {
            auto it = r.counters.find("items_per_second");
            if (it != r.counters.end()) rates[r.benchmark_name()] = it->second.value;
        }
    }
    std::map<std::string, double> rates;
};

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    RatioReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    auto rate = [&](const char* prefix) {
        for (const auto& [name, v] : reporter.rates)
            if (name.rfind(prefix, 0) == 0) return v;
        return 0.0;
    };
    double split = rate("BM_ReferenceSplitLines"), copy = rate("BM_ReferenceCopyLines");
    std::printf("\nlines/s (one core), corpus %.1f MiB of lab log lines:\n", corpus().size() / 1048576.0);
    for (const char* name :
         {"BM_ReferenceSplitLines", "BM_ReferenceCopyLines", "BM_ParseEvents", "BM_ParseEventsWithReplies"}) {
        double v = rate(name);
        if (v <= 0) continue;
        std::printf("  %-28s %12.0f lines/s  %6.3f x split  %6.3f x copy\n", name, v,
                    split > 0 ? v / split : 0, copy > 0 ? v / copy : 0);
    }
    benchmark::Shutdown();
    return 0;
}
