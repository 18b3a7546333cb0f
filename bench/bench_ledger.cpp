// bench_ledger.cpp -- ledger throughput and the milter's duplicate lookup.
//
//   Ingest/sqlite      events recorded per second through Ledger::ingest (batches
//                      of 1000), against raw SQLite inserts of the same rows in
//                      one transaction measured in the same run (ratio).
//   Ingest/redis       the same through the Redis backend (private redis-server),
//                      against pipelined HSETs of the same rows.
//   Lookup/sqlite/N    find_pending_copies (Message-ID + fingerprint, 3
//                      recipients; half hits, half misses) with N messages in the
//                      ledger: p50/p99 in microseconds, against a primary-key
//                      SELECT on the same file (ratio of p99s).
//   Lookup/redis/N     the same on Redis.
// Figures and commands: docs/performance.md, section "Ledger".
#include <benchmark/benchmark.h>
#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "../tests/ledger/ledger_events.hpp"
#include "../tests/ledger/redis_server.hpp"
#include "retryguard/ledger/ledger.hpp"

namespace rg = retryguard;
using namespace retryguard::ledger_test;
using Clock = std::chrono::steady_clock;

namespace {

std::filesystem::path bench_dir() {
    static auto dir = [] {
        auto d =
            std::filesystem::temp_directory_path() / ("retryguard-bench-ledger-" + std::to_string(getpid()));
        std::filesystem::create_directories(d);
        return d;
    }();
    return dir;
}

double seconds(Clock::duration d) {
    return std::chrono::duration<double>(d).count();
}

// CPU seconds of this process: on a loaded shared machine wall time mostly
// measures the other tenants, CPU time what the code costs (SQLite runs in-process).
double cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
// This process's write(2)-family calls and bytes written so far (/proc/self/io):
// what a SQLite transaction costs the kernel, counted rather than timed.
std::pair<double, double> io_writes() {
    std::FILE* f = std::fopen("/proc/self/io", "r");
    if (!f) return {0, 0};
    char key[32];
    unsigned long long v = 0;
    double calls = 0, bytes = 0;
    while (std::fscanf(f, "%31s %llu", key, &v) == 2) {
        if (std::strcmp(key, "syscw:") == 0) calls = static_cast<double>(v);
        if (std::strcmp(key, "wchar:") == 0) bytes = static_cast<double>(v);
    }
    std::fclose(f);
    return {calls, bytes};
}
double g_raw_cpu_rate = 0;
double thread_cpu_us() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

RedisServer* redis() {
    return RedisServer::shared();
}

std::unique_ptr<rg::Ledger> open_backend(const std::string& backend, const std::string& name) {
    rg::LedgerOptions o;
    if (backend == "sqlite") {
        auto path = bench_dir() / (name + ".db");
        std::filesystem::remove(path);
        o.spec = "sqlite:" + path.string();
    } else {
        o.spec = redis()->spec();
        o.key_prefix = "bench:" + name + ":";
        o.command_timeout = std::chrono::milliseconds(30000);
    }
    auto l = rg::open_ledger(o);
    if (!l) {
        std::fprintf(stderr, "open %s: %s\n", backend.c_str(), l.error().message.c_str());
        std::exit(1);
    }
    return std::move(l).value();
}

// A fresh file for a raw-insert reference: WAL and synchronous=NORMAL, as the ledger.
sqlite3* open_raw_db(const char* file, const char* create_table) {
    auto path = bench_dir() / file;
    std::filesystem::remove(path);
    sqlite3* db = nullptr;
    sqlite3_open(path.c_str(), &db);
    sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", nullptr, nullptr, nullptr);
    sqlite3_exec(db, create_table, nullptr, nullptr, nullptr);
    return db;
}

// Reference for SQLite ingest: the same rows, one plain INSERT each, one transaction.
double raw_sqlite_rows_per_second(const std::vector<rg::IngestItem>& events) {
    sqlite3* db = open_raw_db("raw.db",
                              "CREATE TABLE raw(key INTEGER PRIMARY KEY, time INTEGER, queue_id TEXT, "
                              "recipient TEXT, reason TEXT)");
    sqlite3_stmt* s = nullptr;
    sqlite3_prepare_v2(db, "INSERT OR IGNORE INTO raw VALUES(?, ?, ?, ?, ?)", -1, &s, nullptr);
    auto start = Clock::now();
    double cpu_start = cpu_seconds();
    sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
    const rg::EventKeyer keyer{};  // the key costs what the ledger's does
    for (const auto& item : events) {
        const auto& e = item.event;
        sqlite3_bind_int64(s, 1, static_cast<sqlite3_int64>(rg::event_key(e, keyer)));
        sqlite3_bind_int64(s, 2, rg::to_micros(e.time));
        sqlite3_bind_text(s, 3, e.queue_id.data(), static_cast<int>(e.queue_id.size()), SQLITE_STATIC);
        sqlite3_bind_text(s, 4, e.recipient.data(), static_cast<int>(e.recipient.size()), SQLITE_STATIC);
        sqlite3_bind_text(s, 5, e.reason.data(), static_cast<int>(e.reason.size()), SQLITE_STATIC);
        sqlite3_step(s);
        sqlite3_reset(s);
    }
    sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
    g_raw_cpu_rate = static_cast<double>(events.size()) / (cpu_seconds() - cpu_start);
    double rate = static_cast<double>(events.size()) / seconds(Clock::now() - start);
    sqlite3_finalize(s);
    sqlite3_close(db);
    return rate;
}

// Reference for Redis ingest: one HSET per row, pipelined 1000 at a time.
double raw_redis_rows_per_second(const std::vector<rg::IngestItem>& events) {
    redisContext* c = redisConnect("127.0.0.1", redis()->port());
    auto start = Clock::now();
    std::size_t pending = 0;
    auto drain = [&] {
        for (; pending > 0; --pending) {
            void* r = nullptr;
            redisGetReply(c, &r);
            if (r) freeReplyObject(r);
        }
    };
    const rg::EventKeyer keyer{};  // the key costs what the ledger's does
    for (const auto& item : events) {
        const auto& e = item.event;
        auto key = "benchraw:" + std::to_string(rg::event_key(e, keyer));
        redisAppendCommand(c, "HSET %s q %b r %b t %b", key.c_str(), e.queue_id.data(), e.queue_id.size(),
                           e.recipient.data(), e.recipient.size(), e.reason.data(), e.reason.size());
        if (++pending == 1000) drain();
    }
    drain();
    double rate = static_cast<double>(events.size()) / seconds(Clock::now() - start);
    redisFree(c);
    return rate;
}

void BM_Ingest(benchmark::State& state, const std::string& backend) {
    if (backend == "redis" && !redis()) {
        state.SkipWithError("redis-server not available");
        return;
    }
    static const auto events = synthetic_stream(20000);
    double total_seconds = 0, total_cpu = 0;
    std::size_t total_events = 0;
    int round = 0;
    for (auto _ : state) {
        auto l = open_backend(backend, "ingest" + std::to_string(round++));
        auto start = Clock::now();
        double cpu_start = cpu_seconds();
        for (std::size_t i = 0; i < events.size(); i += 1000) {
            auto n = std::min<std::size_t>(1000, events.size() - i);
            auto r = l->ingest(std::span<const rg::IngestItem>(events.data() + i, n), std::nullopt);
            if (!r) state.SkipWithError(r.error().message.c_str());
        }
        auto took = seconds(Clock::now() - start);
        total_cpu += cpu_seconds() - cpu_start;
        state.SetIterationTime(took);
        total_seconds += took;
        total_events += events.size();
    }
    double rate = static_cast<double>(total_events) / total_seconds;
    double reference =
        backend == "sqlite" ? raw_sqlite_rows_per_second(events) : raw_redis_rows_per_second(events);
    state.counters["events_per_s"] = rate;
    state.counters["raw_rows_per_s"] = reference;
    state.counters["ratio_to_raw"] = rate / reference;
    if (backend == "sqlite") {
        state.counters["cpu_events_per_s"] = static_cast<double>(total_events) / total_cpu;
        state.counters["raw_cpu_rows_per_s"] = g_raw_cpu_rate;
    }
}

// Ledgers with N messages, each: Message-ID, fingerprint, sender and two
// recipients recorded by the milter, then one deferral per recipient from the
// log; a quarter of them delivered and removed.
rg::Ledger& populated(const std::string& backend, int n) {
    static std::map<std::pair<std::string, int>, std::unique_ptr<rg::Ledger>> cache;
    auto& slot = cache[{backend, n}];
    if (slot) return *slot;
    slot = open_backend(backend, "lookup" + std::to_string(n));
    auto start = Clock::now();
    double cpu_start = cpu_seconds();
    std::vector<rg::IngestItem> batch;
    std::vector<rg::MessageIdentity> identities;
    for (int i = 0; i < n; ++i) {
        auto qid = qid_for(i);
        std::string a = "a" + std::to_string(i) + "@d" + std::to_string(i % 500) + ".example";
        std::string b = "b" + std::to_string(i) + "@d" + std::to_string(i % 500) + ".example";
        std::string mid = "<m" + std::to_string(i) + "@client.example>";
        rg::MessageIdentity id{
            qid, mid, "fp" + std::to_string(i), "s@sender.example", {a, b}, at(1795000000 + i)};
        identities.push_back(std::move(id));
        // The milter recorded the identity; the log adds the deferrals (message-id
        // and queue-active lines change nothing the lookup reads).
        batch.push_back(deferred(qid, 1795000001 + i, a, "mx" + std::to_string(i % 50) + ".example.net"));
        batch.push_back(deferred(qid, 1795000001 + i, b, "mx" + std::to_string(i % 50) + ".example.net"));
        if (i % 4 == 1) {
            batch.push_back(sent(qid, 1795000900 + i, a));
            batch.push_back(sent(qid, 1795000900 + i, b));
            batch.push_back(removed(qid, 1795000900 + i));
        }
        if (batch.size() >= 5000 || i + 1 == n) {
            (void)slot->record_identities(identities);
            (void)slot->ingest(batch, std::nullopt);
            batch.clear();
            identities.clear();
        }
    }
    std::fprintf(stderr, "populated %s with %d messages in %.1f s (%.1f s CPU in this process)\n",
                 backend.c_str(), n, seconds(Clock::now() - start), cpu_seconds() - cpu_start);
    return *slot;
}

double percentile(std::vector<double>& v, double p) {
    if (v.empty()) return 0;
    auto k = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return v[k];
}

void BM_Lookup(benchmark::State& state, const std::string& backend) {
    if (backend == "redis" && !redis()) {
        state.SkipWithError("redis-server not available");
        return;
    }
    const int n = static_cast<int>(state.range(0));
    auto& l = populated(backend, n);
    std::mt19937 rng(42);
    std::vector<double> lookup_us, reference_us, lookup_cpu_us;
    std::size_t hits = 0;
    for (auto _ : state) {
        int i = static_cast<int>(rng() % static_cast<unsigned>(n));
        bool hit = (i % 2) == 0;  // odd: a message id nobody sent (a miss)
        rg::PendingCopyQuery q;
        q.message_id =
            hit ? "<m" + std::to_string(i) + "@client.example>" : "<new" + std::to_string(i) + "@x>";
        q.fingerprint = hit ? "fp" + std::to_string(i) : "fpnew" + std::to_string(i);
        q.recipients = {"a" + std::to_string(i) + "@d" + std::to_string(i % 500) + ".example",
                        "b" + std::to_string(i) + "@d" + std::to_string(i % 500) + ".example",
                        "new@x.example"};
        auto start = Clock::now();
        double cpu_start = thread_cpu_us();
        auto r = l.find_pending_copies(q);
        auto took = Clock::now() - start;
        lookup_cpu_us.push_back(thread_cpu_us() - cpu_start);
        if (!r) state.SkipWithError(r.error().message.c_str());
        hits += r->empty() ? 0 : 1;
        lookup_us.push_back(seconds(took) * 1e6);
        state.SetIterationTime(seconds(took));
        // Reference: the cheapest read the backend offers, on the same store.
        auto rs = Clock::now();
        auto m = l.get_message(qid_for(i));
        reference_us.push_back(seconds(Clock::now() - rs) * 1e6);
        benchmark::DoNotOptimize(m);
    }
    double p50 = percentile(lookup_us, 0.50), p99 = percentile(lookup_us, 0.99);
    double r50 = percentile(reference_us, 0.50), r99 = percentile(reference_us, 0.99);
    state.counters["p50_us"] = p50;
    state.counters["p99_us"] = p99;
    // SQLite answers in this thread, so its CPU time is the lookup's own cost
    // without the scheduler delays of a loaded machine (for Redis it excludes the server).
    state.counters["cpu_p50_us"] = percentile(lookup_cpu_us, 0.50);
    state.counters["cpu_p99_us"] = percentile(lookup_cpu_us, 0.99);
    state.counters["ref_get_message_p50_us"] = r50;
    state.counters["ref_get_message_p99_us"] = r99;
    state.counters["p99_ratio_to_ref"] = r99 > 0 ? p99 / r99 : 0;
    state.counters["hit_rate"] =
        lookup_us.empty() ? 0 : static_cast<double>(hits) / static_cast<double>(lookup_us.size());
}

// What the milter's record writer costs: batches of new identities (Message-ID,
// fingerprint, sender, one recipient, as the milter records them) written with
// record_identities into the ledger of N messages, in batches of 750 (what 100 ms
// gather at 7500 messages per second). Reference: the same rows as plain INSERTs
// into a one-table file in one transaction per batch (ratio of CPU per row).
double raw_identity_cpu_us(const std::vector<rg::MessageIdentity>& ids, std::size_t batch) {
    sqlite3* db = open_raw_db(
        "raw-identities.db",
        "CREATE TABLE raw(queue_id TEXT, message_id TEXT, fingerprint TEXT, sender TEXT, rcpt TEXT)");
    sqlite3_stmt* s = nullptr;
    sqlite3_prepare_v2(db, "INSERT INTO raw VALUES(?, ?, ?, ?, ?)", -1, &s, nullptr);
    double cpu_start = cpu_seconds();
    for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i % batch == 0) sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
        const auto& id = ids[i];
        sqlite3_bind_text(s, 1, id.queue_id.data(), static_cast<int>(id.queue_id.size()), SQLITE_STATIC);
        sqlite3_bind_text(s, 2, id.message_id.data(), static_cast<int>(id.message_id.size()), SQLITE_STATIC);
        sqlite3_bind_text(s, 3, id.fingerprint.data(), static_cast<int>(id.fingerprint.size()),
                          SQLITE_STATIC);
        sqlite3_bind_text(s, 4, id.sender.data(), static_cast<int>(id.sender.size()), SQLITE_STATIC);
        sqlite3_bind_text(s, 5, id.recipients[0].data(), static_cast<int>(id.recipients[0].size()),
                          SQLITE_STATIC);
        sqlite3_step(s);
        sqlite3_reset(s);
        if ((i + 1) % batch == 0 || i + 1 == ids.size())
            sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
    }
    double cpu = cpu_seconds() - cpu_start;
    sqlite3_finalize(s);
    sqlite3_close(db);
    return cpu * 1e6 / static_cast<double>(ids.size());
}

void BM_RecordIdentities(benchmark::State& state, const std::string& backend) {
    if (backend == "redis" && !redis()) {
        state.SkipWithError("redis-server not available");
        return;
    }
    const int n = static_cast<int>(state.range(0));
    const auto kBatch = static_cast<std::size_t>(state.range(1));
    auto& l = populated(backend, n);
    static int serial = 0;
    std::vector<rg::MessageIdentity> ids(kBatch);
    for (std::size_t i = 0; i < kBatch; ++i) {
        ids[i].sender = "s@sender.example";
        ids[i].recipients = {"bob" + std::to_string(i % 97) + "@defer.example"};
        ids[i].time = at(1796000000 + static_cast<int>(i));
    }
    double cpu_total = 0, write_calls = 0, write_bytes = 0;
    std::size_t rows = 0;
    std::vector<rg::MessageIdentity> all;
    for (auto _ : state) {
        state.PauseTiming();
        for (std::size_t i = 0; i < kBatch; ++i) {
            const int k = serial++;
            // 64-bit-looking fingerprints, as the milter's (hex of a hash)
            char fp[24];
            std::snprintf(
                fp, sizeof fp, "%016llx",
                static_cast<unsigned long long>(static_cast<std::uint64_t>(k) * 0x9E3779B97F4A7C15ull));
            ids[i].queue_id = "R" + std::to_string(1000000 + k);
            ids[i].message_id = std::string("<r") + fp + "@client.example>";
            ids[i].fingerprint = fp;
        }
        state.ResumeTiming();
        auto start = Clock::now();
        double cpu_start = cpu_seconds();
        auto io_start = io_writes();
        auto st = l.record_identities(ids);
        cpu_total += cpu_seconds() - cpu_start;
        auto io_end = io_writes();
        write_calls += io_end.first - io_start.first;
        write_bytes += io_end.second - io_start.second;
        state.SetIterationTime(seconds(Clock::now() - start));
        if (!st) state.SkipWithError(st.error().message.c_str());
        rows += ids.size();
        all.insert(all.end(), ids.begin(), ids.end());
    }
    const double per_row = cpu_total * 1e6 / static_cast<double>(rows);
    state.counters["cpu_us_per_identity"] = per_row;
    state.counters["writes_per_identity"] = write_calls / static_cast<double>(rows);
    state.counters["kib_written_per_identity"] = write_bytes / 1024.0 / static_cast<double>(rows);
    if (backend == "sqlite") {
        const double raw = raw_identity_cpu_us(all, kBatch);
        state.counters["raw_cpu_us_per_row"] = raw;
        state.counters["ratio_to_raw"] = raw > 0 ? per_row / raw : 0;
    }
}

}  // namespace

BENCHMARK_CAPTURE(BM_RecordIdentities, sqlite, std::string("sqlite"))
    ->UseManualTime()
    ->Iterations(20)
    ->Args({100000, 750})
    ->Args({100000, 7500})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_RecordIdentities, redis, std::string("redis"))
    ->UseManualTime()
    ->Iterations(20)
    ->Args({100000, 750})
    ->Unit(benchmark::kMillisecond);

BENCHMARK_CAPTURE(BM_Ingest, sqlite, std::string("sqlite"))
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Ingest, redis, std::string("redis"))
    ->UseManualTime()
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Lookup, sqlite, std::string("sqlite"))
    ->UseManualTime()
    ->Iterations(20000)
    ->Arg(10000)
    ->Arg(100000)
    ->Arg(1000000)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Lookup, redis, std::string("redis"))
    ->UseManualTime()
    ->Iterations(20000)
    ->Arg(10000)
    ->Arg(100000)
    ->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    RedisServer::stop_shared();
    std::error_code ec;
    std::filesystem::remove_all(bench_dir(), ec);
    return 0;
}
