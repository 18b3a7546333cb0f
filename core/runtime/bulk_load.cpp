// bulk_load.cpp -- the bulk load of an empty Redis ledger around an import
// (retryguard/runtime/bulk_load.hpp): the claim, the temporary directory and
// ledger, the early copy's wiring, the copy, and what is said of each.
#include "retryguard/runtime/bulk_load.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "retryguard/config/config.hpp"

namespace retryguard {

BulkLoadOutcome run_bulk_load(Runtime& rt, const std::function<int(Runtime&)>& import,
                              const std::function<void(const std::string&)>& say) {
    using Kind = BulkLoadOutcome::Kind;
    BulkLoadOutcome out;
    // The temporary ledger's directory is named in the marker: an import
    // killed before the copy was complete leaves both, and the next one on
    // this host resumes that ledger (an SQLite import's own resume: what it
    // has is skipped, its verdict lines are written once) and copies it again.
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "?");
    const auto now = std::chrono::time_point_cast<TimePoint::duration>(std::chrono::system_clock::now());
    const char* tmp_env = std::getenv("TMPDIR");
    // Made once the ledger is claimed, so that no attempt leaves an empty one.
    const std::string dir =
        fmt::format("{}/retryguard-bulk-load.{}.{}", tmp_env && *tmp_env ? tmp_env : "/var/tmp",
                    static_cast<long>(getpid()), to_micros(now));
    const std::string owner =
        fmt::format("{} {} {} {}", host, static_cast<long>(getpid()), to_micros(now), dir);
    auto claim = rt.ledger->bulk_load_claim(owner);
    if (!claim) {
        say(fmt::format("bulk load: {}; importing batch by batch", claim.error().message));
        return out;
    }
    if (claim->outcome == BulkLoadClaim::Outcome::busy) {
        say(
            fmt::format("another bulk load of this ledger has not finished (owner: {}); if that process is "
                        "gone, run this import on its host, which resumes it",
                        claim->detail));
        out.kind = Kind::attention;
        return out;
    }
    if (claim->outcome == BulkLoadClaim::Outcome::not_empty) return out;
    if (claim->wiped_keys > 0)
        say(fmt::format("bulk load: removed {} keys an unfinished copy into Redis had written",
                        claim->wiped_keys));
    // Resuming: the unfinished load's directory (its ledger, if it made one).
    if (claim->dir != dir) say(fmt::format("bulk load: resuming the unfinished bulk load in {}", claim->dir));
    struct RemoveDir {
        std::string dir;
        bool keep = true;
        ~RemoveDir() {
            std::error_code ec;
            if (!keep) std::filesystem::remove_all(dir, ec);
        }
    } work{claim->dir, true};
    if (mkdir(claim->dir.c_str(), 0700) != 0 && errno != EEXIST) {
        say(fmt::format("bulk load: cannot make {}: {}; importing batch by batch", claim->dir,
                        std::strerror(errno)));
        (void)rt.ledger->bulk_load_release(claim->owner);
        return out;
    }
    auto config = std::make_shared<config::Config>(*rt.config);
    config->ledger.backend = config::LedgerBackend::sqlite;
    config->ledger.sqlite_path = claim->dir + "/ledger.db";
    LedgerOptions lo = ledger_options_from(*config);
    lo.new_event_keyer = claim->keyer;
    lo.sqlite_bulk_build_indexes = false;  // the copy reads in rowid order
    // The rows no later line changes are copied while the import runs.
    if (auto feed = rt.ledger->bulk_load_early(config->ledger.sqlite_path, claim->owner)) {
        lo.sqlite_bulk_settled = std::move(feed->settled);
        lo.sqlite_bulk_unsettled = std::move(feed->unsettled);
    }
    auto ledger = open_configured_ledger(lo);
    if (!ledger) {
        say(fmt::format("bulk load: {}; importing batch by batch", ledger.error().message));
        (void)rt.ledger->bulk_load_release(claim->owner);
        work.keep = false;
        return out;
    }
    Runtime local;
    local.config = config;
    local.ledger = std::move(ledger.value());
    local.classifier = rt.classifier;
    out.import_rc = import(local);
    local.ledger.reset();  // closed: its WAL is in the file
    const auto copy_from = std::chrono::steady_clock::now();
    auto copied = rt.ledger->bulk_load_copy(config->ledger.sqlite_path, claim->owner);
    if (copied && copied->refused) {
        work.keep = false;
        say(
            fmt::format("bulk load: {}; importing the files again, batch by batch (their verdict lines are "
                        "written again)",
                        copied->refused_why));
        out.kind = Kind::refused;
        return out;
    }
    if (!copied) {
        say(fmt::format("bulk load: copying into Redis: {}", copied.error().message));
        say(
            fmt::format("bulk load: {} is kept; run the same import again on this host: it removes what was "
                        "copied and copies again",
                        claim->dir));
        out.kind = Kind::attention;
        return out;
    }
    work.keep = false;
    out.kind = Kind::done;
    out.stats = *copied;
    out.copy_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - copy_from).count();
    return out;
}

}  // namespace retryguard
