// ingest.hpp -- the one path from Postfix log lines to the ledger and the
// rules engine, shared by the live follower (retryguard-policyd) and by
// `retryguard import`, so that a replayed log and a live follow give the same
// ledger and the same verdicts.
//
// Per batch: parse each line (LogParser), classify each reply (Classifier),
// record the batch and its follower position in the ledger in one transaction,
// feed the engine, apply its verdicts to the ledger (ladder state, flags,
// counters) and hand them to the verdict sink (the mail log).
//
// Exactly once: the ledger skips events it has seen (event keys). The engine's
// state is saved with the follower position it covers; a follower resumes from
// that position (resume_position), so lines between the engine's save and the
// ledger's position are re-read: the ledger ignores them as duplicates and the
// engine, which has not seen them, processes them. An import (no position)
// feeds the engine only the events the ledger had not seen.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "retryguard/classifier.hpp"
#include "retryguard/engine.hpp"
#include "retryguard/ledger.hpp"
#include "retryguard/log_parser.hpp"
#include "retryguard/position.hpp"
#include "retryguard/result.hpp"
#include "retryguard/verdict.hpp"

namespace retryguard {

struct IngestStats {
    std::uint64_t batches = 0;
    std::uint64_t lines = 0;
    std::uint64_t events = 0;      // recognised lines
    std::uint64_t applied = 0;     // new to the ledger
    std::uint64_t duplicates = 0;  // already in the ledger
    std::uint64_t verdicts = 0;
    std::uint64_t ledger_errors = 0;  // batches the ledger refused (the caller retries them)
    std::map<std::string, std::uint64_t, std::less<>> by_category;  // deferrals by category
};

class Ingestor {
  public:
    using VerdictSink = std::function<void(const Verdict&)>;

    Ingestor(Ledger& ledger, std::shared_ptr<const Classifier> classifier, EngineSettings settings,
             VerdictSink sink = {});

    // Loads the engine state and its positions from the ledger.
    Status restore();

    // Where a follower of `source` must start so that neither the ledger nor the
    // engine misses a line (nullopt: no saved position, start as configured).
    std::optional<FollowerPosition> resume_position(std::string_view source) const;

    // One batch of lines from `parser`'s stream. `end`: the follower position
    // just past the last line (nullopt for imports). On a ledger error nothing
    // of the batch is applied and the error returns: offer the batch again.
    Status ingest_lines(LogParser& parser, std::span<const std::string> lines,
                        const std::optional<FollowerPosition>& end);

    // Time-based rules at event time `now` (end of an import; a quiet live log).
    Status advance(TimePoint now);

    // Saves the engine state with its positions. Cheap enough to call every
    // few seconds; a crash loses nothing (see above).
    Status save();

    // Aligns the engine with flags cleared by command (retryguard flags clear).
    Status sync_flags(TimePoint now);

    // Hot-swap the classifier or the engine settings (configuration reload).
    void set_classifier(std::shared_ptr<const Classifier> classifier) { classifier_ = std::move(classifier); }
    void set_engine_settings(EngineSettings settings);

    const Engine& engine() const noexcept { return engine_; }
    const IngestStats& stats() const noexcept { return stats_; }

    static constexpr std::string_view kStateKey = "engine";

  private:
    void apply_verdicts(std::vector<Verdict>& verdicts);

    Ledger& ledger_;
    std::shared_ptr<const Classifier> classifier_;
    Engine engine_;
    VerdictSink sink_;
    std::map<std::string, FollowerPosition, std::less<>> engine_positions_;
    IngestStats stats_;
    std::vector<IngestItem> items_;  // reused between batches
};

// The category of one event: its reply classified, Category::expired for
// expiry, unknown for events that carry no reply.
Category classify_event(const Classifier& classifier, const Event& event);

}  // namespace retryguard
