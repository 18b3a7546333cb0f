// live.hpp -- the ingest thread of retryguard-policyd: follows the configured
// log sources, feeds one Ingestor (ledger + rules engine), writes verdicts, and
// publishes what the policy path reads (destination snapshot, metrics text).
//
// Owns the Ingestor, the engine and every ledger call of the daemon. Must never
// be called from the event loop except through the thread-safe entry points
// (request_reload, stop), and never block the policy path: it publishes
// immutable snapshots with atomic stores.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "retryguard/actions/actions.hpp"
#include "retryguard/config/config.hpp"
#include "retryguard/follow/follower.hpp"
#include "retryguard/ingest/ingest.hpp"
#include "retryguard/ledger/ledger.hpp"
#include "retryguard/logging/logging.hpp"
#include "retryguard/policy/ledger_decider.hpp"
#include "retryguard/policy/policy_service.hpp"
#include "retryguard/rules/verdict_log.hpp"

namespace retryguard::policyd {

using Logger = logging::Sink;

struct LiveOptions {
    std::chrono::milliseconds save_every{5000};
    std::chrono::milliseconds flags_every{10000};   // ledger flags and sync_flags
    std::chrono::milliseconds quiet_advance{2000};  // advance(now) after this long without lines
};

class LiveIngest {
  public:
    LiveIngest(std::unique_ptr<Ledger> ledger, std::shared_ptr<config::ConfigHolder> config,
               std::shared_ptr<const Classifier> classifier, LedgerDecider& decider, VerdictLog& verdicts,
               PolicyMetrics& metrics, Logger& log, LiveOptions options = {});
    ~LiveIngest();

    // Restores the engine, opens every configured source and starts the thread.
    Status start();
    // SIGHUP: the configuration holder has a new snapshot (or not); rebuild the
    // engine settings and the classifier on the ingest thread.
    void request_reload();
    // Stops the sources, joins the thread and saves the engine state.
    void stop();

  private:
    struct Source {
        std::string id;
        bool resumes = false;  // its batches carry a position to store (config::resumes_from_position)
        std::unique_ptr<LineSource> line_source;
        std::unique_ptr<LogParser> parser;
        std::uint64_t lines = 0;
        std::uint64_t batches = 0;
        std::string unreadable;  // the follower's last "cannot read" reason, "" when it reads
    };
    void run();
    // Notices and flushes the planner made from the last batch or tick: carried
    // out through the local Postfix, each done one a verdict line.
    void run_actions();
    bool first_deferral_in_ledger(const Event& e);
    void save_actions();
    void apply_reload();
    void refresh_flags(TimePoint now);
    void publish();
    bool check_sources();
    Status open_sources();

    std::unique_ptr<Ledger> ledger_;
    std::shared_ptr<config::ConfigHolder> config_;
    LedgerDecider& decider_;
    VerdictLog& verdicts_;
    PolicyMetrics& metrics_;
    Logger& log_;
    LiveOptions options_;
    std::unique_ptr<Ingestor> ingest_;
    std::unique_ptr<actions::Planner> planner_;
    std::unique_ptr<actions::ActionRunner> runner_;
    actions::NoticeTemplate notice_template_;
    bool actions_dirty_ = false;  // the planner's state changed since it was saved
    std::vector<Source> sources_;
    std::vector<Flag> flags_;  // active ledger flags, refreshed every flags_every
    std::map<std::string, std::uint64_t, std::less<>> verdict_counts_;
    std::uint64_t ledger_refusals_ = 0;
    std::uint64_t save_errors_ = 0;
    std::uint64_t reloads_ = 0;
    std::uint64_t loop_errors_ = 0;  // exceptions caught at the ingest thread's top level
    bool started_ = false;           // restore() succeeded: stop() may save
    std::string poison_context_;     // where the batch being ingested comes from (for the log)
    std::atomic<bool> stop_{false};
    std::atomic<bool> reload_{false};
    std::thread thread_;
};

}  // namespace retryguard::policyd
