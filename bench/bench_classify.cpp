// bench_classify.cpp -- replies classified per second on one thread, over a
// realistic mix: every status=... reason the Postfix 3.7 fixtures logged (with
// their repetitions) plus the collected provider and MTA replies. References
// measured in the same run: copying the strings (the floor any consumer pays)
// and parsing alone. Prints ratios against the copy baseline at the end.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "retryguard/classify/classifier.hpp"
#include "retryguard/reply/reply.hpp"

namespace {

struct Sample {
    std::string reason, dsn;
};

const std::vector<Sample>& mix() {
    static const std::vector<Sample> samples = [] {
        std::vector<Sample> out;
        const std::regex line_re(R"((?:dsn=([0-9.]+), )?status=[a-z]+ \((.*)\)$)");
        for (const auto& e : std::filesystem::directory_iterator(RETRYGUARD_FIXTURES "/postfix-3.7")) {
            if (e.path().extension() != ".log" || e.path().filename().string().rfind("full-run", 0) == 0)
                continue;
            std::ifstream in(e.path());
            std::string line;
            std::smatch m;
            while (std::getline(in, line))
                if (std::regex_search(line, m, line_re)) out.push_back({m[2], m[1]});
        }
        std::ifstream tsv(RETRYGUARD_FIXTURES "/replies/provider-replies.tsv");
        std::string line;
        while (std::getline(tsv, line)) {
            if (line.empty() || line[0] == '#') continue;
            auto t = line.find('\t', line.find('\t') + 1);
            out.push_back({line.substr(t + 1), ""});
        }
        return out;
    }();
    return samples;
}

const retryguard::Classifier& classifier() {
    static const retryguard::Classifier c = [] {
        auto r = retryguard::Classifier::load(std::filesystem::path(RETRYGUARD_SOURCE_DIR) / "conf" /
                                              "classifier.yaml");
        if (!r) {
            std::fprintf(stderr, "%s\n", r.error().message.c_str());
            std::exit(2);
        }
        return std::move(r).value();
    }();
    return c;
}

void BM_CopyStrings(benchmark::State& state) {
    const auto& m = mix();
    std::size_t i = 0;
    for (auto _ : state) {
        std::string copy = m[i].reason;
        benchmark::DoNotOptimize(copy.data());
        benchmark::ClobberMemory();
        if (++i == m.size()) i = 0;
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_ParseOnly(benchmark::State& state) {
    const auto& m = mix();
    std::size_t i = 0;
    for (auto _ : state) {
        retryguard::Reply r = retryguard::parse_postfix_reason(m[i].reason, m[i].dsn);
        benchmark::DoNotOptimize(r);
        if (++i == m.size()) i = 0;
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_ClassifyParsed(benchmark::State& state) {
    const auto& m = mix();
    std::vector<retryguard::Reply> parsed;
    for (const auto& s : m) parsed.push_back(retryguard::parse_postfix_reason(s.reason, s.dsn));
    const auto& c = classifier();
    std::size_t i = 0;
    for (auto _ : state) {
        retryguard::Classification r = c.classify(parsed[i]);
        benchmark::DoNotOptimize(r);
        if (++i == parsed.size()) i = 0;
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_ParseAndClassify(benchmark::State& state) {
    const auto& m = mix();
    const auto& c = classifier();
    std::size_t i = 0;
    for (auto _ : state) {
        retryguard::Classification r = c.classify_reason(m[i].reason, m[i].dsn);
        benchmark::DoNotOptimize(r);
        if (++i == m.size()) i = 0;
    }
    state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_CopyStrings);
BENCHMARK(BM_ParseOnly);
BENCHMARK(BM_ClassifyParsed);
BENCHMARK(BM_ParseAndClassify);

// Console output plus, at the end, each benchmark's rate as a ratio to the
// reference measured in the same run.
class RatioReporter : public benchmark::ConsoleReporter {
  public:
    void ReportRuns(const std::vector<Run>& runs) override {
        for (const auto& run : runs) {
            auto it = run.counters.find("items_per_second");
            // Single runs, or the median when --benchmark_repetitions is given.
            bool take =
                run.run_type == Run::RT_Iteration ? run.repetitions <= 1 : run.aggregate_name == "median";
            if (it != run.counters.end() && take)
                rates_.emplace_back(run.benchmark_name(), static_cast<double>(it->second));
        }
        ConsoleReporter::ReportRuns(runs);
    }
    void Finalize() override {
        ConsoleReporter::Finalize();
        double reference = 0;
        for (const auto& [name, rate] : rates_)
            if (name.rfind("BM_CopyStrings", 0) == 0) reference = rate;
        std::printf("\nmix: %zu replies (fixtures + providers)\n", mix().size());
        std::printf("%-28s %14s %16s\n", "benchmark", "replies/s", "vs copy baseline");
        for (const auto& [name, rate] : rates_)
            std::printf("%-28s %14.0f %15.3fx\n", name.c_str(), rate, reference > 0 ? rate / reference : 0.0);
    }

  private:
    std::vector<std::pair<std::string, double>> rates_;
};

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    (void)classifier();
    RatioReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    benchmark::Shutdown();
    return 0;
}
