// bench_config.cpp -- cost of Config::resolve(), which the policy daemon and the
// milter call for every recipient, with 1000 exact rules, 200 wildcards and 50
// MX globs loaded. Reference in the same run: one unordered_map lookup of the
// lower-cased domain (the least an exact-rule lookup can cost). Also the cost of
// loading the shipped default file (a SIGHUP reload).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <unordered_map>

#include "retryguard/config/config.hpp"

namespace cfg = retryguard::config;

namespace {

std::shared_ptr<const cfg::Config> big_config() {
    static std::shared_ptr<const cfg::Config> c = [] {
        std::string y = "destinations:\n";
        for (int i = 0; i < 1000; ++i)
            y += "  - {domain: d" + std::to_string(i) + ".example, dry_run: true}\n";
        for (int i = 0; i < 200; ++i)
            y += "  - {domain: \"*.w" + std::to_string(i) + ".example\", dry_run: true}\n";
        for (int i = 0; i < 50; ++i) y += "  - {mx: \"mx*.p" + std::to_string(i) + ".net\", dry_run: true}\n";
        auto out = cfg::load_string(y, "bench.yaml");
        if (!out.ok()) std::fprintf(stderr, "%s\n", out.errors[0].to_string().c_str());
        return out.config;
    }();
    return c;
}

void BM_Reference_HashLookup(benchmark::State& st) {
    std::unordered_map<std::string, std::size_t> m;
    for (int i = 0; i < 1000; ++i) m.emplace("d" + std::to_string(i) + ".example", i);
    std::string_view in = "D500.Example";
    for (auto _ : st) {
        std::string key(in);
        for (auto& c : key)
            if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        benchmark::DoNotOptimize(m.find(key));
    }
}

void BM_Resolve_Exact(benchmark::State& st) {
    auto c = big_config();
    for (auto _ : st) benchmark::DoNotOptimize(c->resolve("D500.Example", ""));
}

void BM_Resolve_Wildcard(benchmark::State& st) {
    auto c = big_config();
    for (auto _ : st) benchmark::DoNotOptimize(c->resolve("mail.in.w150.example", ""));
}

void BM_Resolve_MxGroup(benchmark::State& st) {
    auto c = big_config();
    for (auto _ : st) benchmark::DoNotOptimize(c->resolve("customer.test", "mx3.p49.net"));
}

void BM_Resolve_NoMatch(benchmark::State& st) {
    auto c = big_config();
    for (auto _ : st) benchmark::DoNotOptimize(c->resolve("unrelated.example.org", "mx1.unrelated.org"));
}

void BM_Load_ShippedFile(benchmark::State& st) {
    std::ifstream in(std::string(RETRYGUARD_SOURCE_DIR) + "/conf/retryguard.yaml");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    for (auto _ : st) benchmark::DoNotOptimize(cfg::load_string(text, "retryguard.yaml"));
}

BENCHMARK(BM_Reference_HashLookup);
BENCHMARK(BM_Resolve_Exact);
BENCHMARK(BM_Resolve_Wildcard);
BENCHMARK(BM_Resolve_MxGroup);
BENCHMARK(BM_Resolve_NoMatch);
BENCHMARK(BM_Load_ShippedFile)->Unit(benchmark::kMillisecond);

// Prints every result as a ratio to the reference measured in the same run.
// CPU time, not wall time: on a shared machine wall time mostly measures the
// other processes.
class RatioReporter : public benchmark::ConsoleReporter {
  public:
    void ReportRuns(const std::vector<Run>& runs) override {
        ConsoleReporter::ReportRuns(runs);
        for (const auto& r : runs)
            if (!r.error_occurred) ns_[r.benchmark_name()] = r.GetAdjustedCPUTime() * to_ns(r.time_unit);
    }
    void Finalize() override {
        ConsoleReporter::Finalize();
        auto ref = ns_.find("BM_Reference_HashLookup");
        if (ref == ns_.end() || ref->second <= 0) return;
        std::printf("\nCPU time, ratio to BM_Reference_HashLookup (%.1f ns):\n", ref->second);
        for (const auto& [name, ns] : ns_)
            std::printf("  %-28s %10.1f ns  x%.1f\n", name.c_str(), ns, ns / ref->second);
    }

  private:
    static double to_ns(benchmark::TimeUnit u) {
        switch (u) {
            case benchmark::kNanosecond: return 1;
            case benchmark::kMicrosecond: return 1e3;
            case benchmark::kMillisecond: return 1e6;
            default: return 1e9;
        }
    }
    std::map<std::string, double> ns_;
};

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    RatioReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    benchmark::Shutdown();
    return 0;
}
