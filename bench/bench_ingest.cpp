// bench_ingest.cpp -- the whole ingest path, end to end: Postfix log lines
// parsed, classified, recorded in the SQLite ledger (one transaction per batch,
// as the follower commits) and fed to the rules engine. Reference in the same
// run: the parser alone over the same lines, so the figure reads as "what the
// ledger and the engine cost on top of parsing".
//
// Lines: every line of the sender-side fixture logs, repeated with queue ids
// and pids made unique per repetition, so the ledger sees new messages rather
// than replays it would skip.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "retryguard/ingest/ingest.hpp"
#include "retryguard/log/log_parser.hpp"

namespace {

namespace fs = std::filesystem;
using namespace retryguard;

const std::vector<std::string>& lines() {
    static const std::vector<std::string> all = [] {
        std::vector<std::string> base;
        std::ifstream in(std::string(RETRYGUARD_FIXTURES) + "/postfix-3.7/full-run.sender.log");
        for (std::string l; std::getline(in, l);)
            if (!l.empty() && l[0] != '#') base.push_back(l);
        std::vector<std::string> out;
        const std::regex qid(R"(\b[0-9A-F]{10,11}\b)"), pid(R"(\[(\d+)\]:)");
        for (int rep = 0; out.size() < 60000; ++rep) {
            char tag[8];
            std::snprintf(tag, sizeof tag, "%03X", rep & 0xfff);
            for (const auto& l : base) {
                std::string s = std::regex_replace(l, qid, std::string(tag) + "$&");
                s = std::regex_replace(s, pid, "[" + std::to_string(rep) + "$1]:");
                out.push_back(std::move(s));
            }
        }
        return out;
    }();
    return all;
}

LogParserOptions options() {
    LogParserOptions o;
    o.year = 2026;
    o.local_time = false;
    return o;
}

void BM_ReferenceParseOnly(benchmark::State& state) {
    const auto& ls = lines();
    for (auto _ : state) {
        LogParser parser(options());
        Event ev;
        std::size_t known = 0;
        for (const auto& l : ls) known += parser.parse(l, ev);
        benchmark::DoNotOptimize(known);
    }
    state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(ls.size()));
}

void BM_IngestSqlite(benchmark::State& state) {
    const auto& ls = lines();
    const std::size_t batch = static_cast<std::size_t>(state.range(0));
    auto classifier = std::make_shared<const Classifier>(std::move(Classifier::load().value()));
    int run = 0;
    for (auto _ : state) {
        state.PauseTiming();
        fs::path dir = fs::temp_directory_path() /
                       ("rg-bench-ingest-" + std::to_string(::getpid()) + "-" + std::to_string(run++));
        fs::remove_all(dir);
        fs::create_directories(dir);
        auto ledger = std::move(open_ledger("sqlite:" + (dir / "ledger.db").string()).value());
        std::uint64_t verdicts = 0;
        Ingestor ingestor(*ledger, classifier, EngineSettings{}, [&](const Verdict&) { ++verdicts; });
        LogParser parser(options());
        FollowerPosition pos;
        pos.source = "file:/var/log/mail.log";
        state.ResumeTiming();
        for (std::size_t i = 0; i < ls.size(); i += batch) {
            std::span<const std::string> b(ls.data() + i, std::min(batch, ls.size() - i));
            pos.offset += b.size();
            if (!ingestor.ingest_lines(parser, b, pos).ok()) state.SkipWithError("ledger refused a batch");
        }
        (void)ingestor.save();
        state.PauseTiming();
        state.counters["verdicts"] = static_cast<double>(verdicts);
        state.counters["events"] = static_cast<double>(ingestor.stats().applied);
        ledger.reset();
        fs::remove_all(dir);
        state.ResumeTiming();
    }
    state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(ls.size()));
}

BENCHMARK(BM_ReferenceParseOnly)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_IngestSqlite)->Arg(512)->Arg(2000)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
