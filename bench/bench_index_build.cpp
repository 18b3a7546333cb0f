// bench_index_build.cpp -- the index build at the end of a bulk import, with
// the database and the sorter's temporary files through the ledger's VFS
// (writes gathered, reads from read-ahead stretches) against the default
// VFS's own files, and with SQLite's sorter threads.
//
//   bench_index_build LEDGER [ROUNDS]
//
// LEDGER: a SQLite ledger (an import's, e.g. of gen_month_log --scale 10). In
// each round, in turn with the database and temporary files plain (the
// default VFS's), gathered and read ahead (the ledger's VFS), and the same
// with PRAGMA threads=2, one transaction drops every secondary index of
// messages, recipients and episodes (the ones bulk mode defers), builds them
// again as the ledger does at the end of bulk mode (temp_store=FILE, a 4 MiB
// page cache) and rolls back: the file is left as it was. WAL writes are
// gathered in all. Prints each build's wall and CPU seconds, the calls asked
// for and made to the files, and the ratios (higher: the second is faster).
#include <sqlite3.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "../core/ledger/sqlite_wal_writes.hpp"

namespace {

using retryguard::ledger_detail::index_build_io_counts;
using retryguard::ledger_detail::IndexBuildIoCounts;
using retryguard::ledger_detail::set_read_ahead;
using retryguard::ledger_detail::set_temp_file_gathering;
using retryguard::ledger_detail::wal_gathering_vfs;

double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

bool exec(sqlite3* db, const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) == SQLITE_OK) return true;
    std::fprintf(stderr, "bench_index_build: %s: %s\n", sql.c_str(), err ? err : sqlite3_errmsg(db));
    sqlite3_free(err);
    return false;
}

struct Run {
    double wall = 0, cpu = 0;
    IndexBuildIoCounts io;
};

bool build(const char* path, bool gathered, int threads, Run& out) {
    set_temp_file_gathering(gathered);
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, wal_gathering_vfs()) != SQLITE_OK) {
        std::fprintf(stderr, "bench_index_build: cannot open %s: %s\n", path, sqlite3_errmsg(db));
        sqlite3_close(db);
        return false;
    }
    std::vector<std::pair<std::string, std::string>> indexes;  // name, CREATE statement
    sqlite3_stmt* s = nullptr;
    sqlite3_prepare_v2(db,
                       "SELECT name, sql FROM sqlite_schema WHERE type = 'index' AND sql IS NOT NULL AND "
                       "tbl_name IN ('messages', 'recipients', 'episodes') ORDER BY name",
                       -1, &s, nullptr);
    while (sqlite3_step(s) == SQLITE_ROW)
        indexes.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)),
                             reinterpret_cast<const char*>(sqlite3_column_text(s, 1)));
    sqlite3_finalize(s);
    bool ok = !indexes.empty() && exec(db, "PRAGMA secure_delete=FAST; BEGIN IMMEDIATE");
    for (const auto& [name, create] : indexes) ok = ok && exec(db, "DROP INDEX " + name);
    ok = ok && exec(db, "PRAGMA temp_store=FILE; PRAGMA cache_size=-4096; PRAGMA threads=" +
                            std::to_string(threads));
    if (gathered) set_read_ahead(db, true);
    const IndexBuildIoCounts before = index_build_io_counts();
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    for (const auto& [name, create] : indexes) ok = ok && exec(db, create);
    if (gathered) set_read_ahead(db, false);
    out.cpu = cpu_seconds() - c0;
    out.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const IndexBuildIoCounts after = index_build_io_counts();
    out.io = {
        after.writes_requested - before.writes_requested,     after.writes_issued - before.writes_issued,
        after.reads_requested - before.reads_requested,       after.reads_issued - before.reads_issued,
        after.db_reads_requested - before.db_reads_requested, after.db_reads_issued - before.db_reads_issued};
    if (indexes.empty()) std::fprintf(stderr, "bench_index_build: %s has no index to build\n", path);
    exec(db, "ROLLBACK");
    sqlite3_close(db);
    return ok;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2 || argc > 3) {
        std::fprintf(stderr, "usage: bench_index_build LEDGER [ROUNDS]\n");
        return 2;
    }
    const int rounds = argc == 3 ? std::atoi(argv[2]) : 3;
    if (wal_gathering_vfs() == nullptr) {
        std::fprintf(stderr, "bench_index_build: the ledger's VFS did not register\n");
        return 1;
    }
    std::printf("%-6s %-19s %8s %8s %12s %12s %12s %12s %12s %12s\n", "round", "files", "wall s", "cpu s",
                "tmp writes", "issued", "tmp reads", "issued", "db reads", "issued");
    struct Variant {
        const char* name;
        bool gathered;
        int threads;
        double wall = 0, cpu = 0;
    };
    Variant variants[] = {{"plain", false, 0}, {"gathered", true, 0}, {"gathered, 2 threads", true, 2}};
    for (int r = 1; r <= rounds; ++r) {
        for (auto& v : variants) {
            Run run;
            if (!build(argv[1], v.gathered, v.threads, run)) return 1;
            std::printf("%-6d %-19s %8.2f %8.2f %12llu %12llu %12llu %12llu %12llu %12llu\n", r, v.name,
                        run.wall, run.cpu, run.io.writes_requested, run.io.writes_issued,
                        run.io.reads_requested, run.io.reads_issued, run.io.db_reads_requested,
                        run.io.db_reads_issued);
            v.wall += run.wall;
            v.cpu += run.cpu;
        }
    }
    std::printf(
        "plain / gathered: wall %.2fx, cpu %.2fx; gathered / gathered with 2 threads: wall %.2fx, cpu %.2fx "
        "(%d rounds)\n",
        variants[0].wall / variants[1].wall, variants[0].cpu / variants[1].cpu,
        variants[1].wall / variants[2].wall, variants[1].cpu / variants[2].cpu, rounds);
    return 0;
}
