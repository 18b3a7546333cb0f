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
// Exactly once (docs/ledger.md "Engine journal", docs/reliability.md):
// - The ledger records a batch, its follower position and an engine journal
//   entry for every fresh (not yet seen) event in one transaction. Ticks
//   (advance) and flags cleared by command are journaled before the engine
//   sees them. The engine is fed exactly the journal, in journal order.
// - The engine state is saved with the journal sequence it covers, and the
//   journal up to it is trimmed, in one transaction. restore() loads the state
//   and replays the journal after it, so after a crash (kill -9 anywhere) the
//   engine has seen every fresh event once, for a follower (which resumes from
//   the ledger's own position) and for an import alike.
// - Every verdict gets the next number of a sequence kept in the engine state,
//   so a replay numbers its verdicts as the first run did. Their ledger effects
//   (ladder state, flags, verdict counts) are applied with a high-water mark in
//   one transaction: effects at or below the mark are skipped, and the verdict
//   line is written (sink) only for verdicts applied by that call, right after
//   it commits.
// - Verdict outbox: the same transaction stores each applied verdict's line
//   (format_verdict) with its number. The next effects transaction (or the
//   state save) deletes the entries up to the last number handed to the sink,
//   so the outbox costs no commit of its own and holds at most the lines of
//   the last commit. restore() hands the entries still there (lines that may
//   or may not have reached the sink before a crash) to the outbox sink before
//   anything else is written, then trims them (one commit per restart, so a
//   second crash does not hand them over again): a file sink reads its tail
//   and writes only the lines it lacks (exact); a sink that cannot be read
//   back (syslog, postlog, stderr, standard output) writes them again (at
//   least once: a duplicate is possible, a loss is not) and counts them.
//   Without an outbox sink the lines are dropped and counted (at most once).
// - Effects the ledger refused stay pending and are offered again before the
//   next ones; the state is not saved while any are pending (the journal still
//   covers them).
// One engine per ledger: two processes feeding engines from the same ledger
// (a fleet sharing Redis, or an import while the daemon runs) share one
// journal, state key and mark.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "retryguard/classify/classifier.hpp"
#include "retryguard/follow/position.hpp"
#include "retryguard/ledger/ledger.hpp"
#include "retryguard/log/log_parser.hpp"
#include "retryguard/result.hpp"
#include "retryguard/rules/engine.hpp"
#include "retryguard/rules/verdict.hpp"

namespace retryguard {

struct IngestStats {
    std::uint64_t batches = 0;
    std::uint64_t lines = 0;
    std::uint64_t events = 0;      // recognised lines
    std::uint64_t applied = 0;     // new to the ledger
    std::uint64_t duplicates = 0;  // already in the ledger
    std::uint64_t verdicts = 0;
    std::uint64_t ledger_errors = 0;  // batches the ledger refused (the caller retries them)
    std::uint64_t poison_lines = 0;   // lines whose parsing threw: skipped
    std::uint64_t engine_errors = 0;  // journal entries the engine threw on, or could not decode: skipped
    std::uint64_t effect_errors = 0;  // verdict effects the ledger refused (kept pending, retried)
    std::uint64_t replayed = 0;       // journal entries fed by restore() or a catch-up
    // Verdict outbox at restore(): entries found, lines the sink already had,
    // lines it wrote again without being able to check (may duplicate), lines
    // dropped (no outbox sink).
    std::uint64_t outbox_pending = 0;
    std::uint64_t outbox_found = 0;
    std::uint64_t verdict_lines_replayed = 0;
    std::uint64_t outbox_dropped = 0;
    std::map<std::string, std::uint64_t, std::less<>> by_category;  // deferrals by category
};

// Lines parsed and classified, ready for the ledger (Ingestor::ingest_prepared).
// Filled by Ingestor::add_line, which touches nothing but its arguments, so an
// import can parse on one thread while the ledger and the engine work on the
// previous batch on another. The items keep their string buffers between uses
// (clear() does not free them): a batch that is reused parses without
// allocating for most fields.
struct PreparedBatch {
    std::vector<IngestItem> items;  // the first `count` are this batch's events, in log order
    std::size_t count = 0;
    std::size_t lines = 0;           // lines added (recognised or not)
    std::uint64_t poison_lines = 0;  // lines whose parsing threw: skipped
    // The ledger's event keys (Ledger::event_keyer), set by ingest_prepared for
    // the batch's next use; none yet: the ledger computes them.
    std::optional<EventKeyer> keyer;
    // The engine journal entry of the batch's events (kJournalBatchTag, then
    // each event's part), for Ledger::ingest; empty while there are none.
    // `journal_items`: the events it holds, kJournalBroken once an append failed.
    static constexpr std::size_t kJournalBroken = static_cast<std::size_t>(-1);
    std::string journal;
    std::size_t journal_items = 0;
    // The entry as the ledger stores it (stored_journal_entry), made by
    // Ingestor::seal_journal on the thread that filled the batch, when the
    // ledger stores entries compressed (`compress_journal`, set with `keyer`).
    // `sealed`: made for the batch as it is now (add_line clears it);
    // `compressed` empty then means the entry is stored as it is.
    bool compress_journal = false;
    bool sealed = false;
    std::string compressed;
    void clear() noexcept {
        count = 0, lines = 0, poison_lines = 0, journal.clear(), journal_items = 0;
        sealed = false, compressed.clear();
    }
    BatchJournal batch_journal() const noexcept {
        if (!sealed) return {journal, journal_items, {}};
        return {journal, journal_items, compressed.empty() ? std::string_view(journal) : compressed};
    }
    std::span<const IngestItem> events() const noexcept { return {items.data(), count}; }
};

class Ingestor {
  public:
    using VerdictSink = std::function<void(const Verdict&)>;
    // What an outbox sink did with the pending lines it was handed: how many
    // it found already written (not written again) and how many it wrote again
    // without being able to check; the rest it found missing and wrote.
    struct OutboxReplay {
        std::size_t found = 0;
        std::size_t unchecked = 0;
    };
    using OutboxSink = std::function<OutboxReplay(std::span<const OutboxEntry>)>;
    // A line (index in its batch) or journal entry (seq) that was skipped, and why.
    using PoisonSink = std::function<void(std::string_view what, std::uint64_t where, std::string_view why)>;

    Ingestor(Ledger& ledger, std::shared_ptr<const Classifier> classifier, EngineSettings settings,
             VerdictSink sink = {});

    // Loads the engine state and replays the journal after it. On failure the
    // stored state is left alone: save() refuses to write over it.
    Status restore();

    // Where a follower of `source` must start: the ledger's position (the
    // journal brings the engine up to it). nullopt: none saved, start as configured.
    std::optional<FollowerPosition> resume_position(std::string_view source) const;

    // One batch of lines from `parser`'s stream. `end`: the follower position
    // just past the last line (nullopt for imports). On a ledger error nothing
    // of the batch is applied and the error returns: offer the batch again.
    // A line the parser throws on is skipped, counted and reported to the poison sink.
    Status ingest_lines(LogParser& parser, std::span<const std::string> lines,
                        const std::optional<FollowerPosition>& end);

    // The two halves of ingest_lines, for a caller that parses on another
    // thread. add_line parses and classifies one line into `batch` (a line the
    // parser or classifier throws on is counted and reported to `poison` with
    // its index in the batch); it uses only its arguments. ingest_prepared
    // records the batch in the ledger and feeds the engine, as ingest_lines
    // does after parsing; the batch's items keep their buffers for reuse.
    static void add_line(PreparedBatch& batch, LogParser& parser, const Classifier& classifier,
                         std::string_view line, const PoisonSink& poison);
    // Once the batch is full: its journal entry in the form the ledger stores
    // (compressed), when the ledger asked for it (PreparedBatch::compress_journal);
    // uses only its argument, so the thread that filled the batch runs it.
    static void seal_journal(PreparedBatch& batch);
    Status ingest_prepared(PreparedBatch& batch, const std::optional<FollowerPosition>& end);

    // Pipelined ingest (`retryguard import`): the engine is fed on a thread of
    // its own while the caller's thread records the next batch in the ledger.
    // ingest_pipelined records `batch` (as ingest_prepared does) and hands its
    // fresh events to the engine thread; the verdict effects of the batch
    // before it are applied (and their lines written) first, so at most one
    // batch is with the engine and the caller needs one batch more in
    // circulation. `release` gets the batch back once the engine is done with
    // it (or at once when it has nothing to feed). `save_after`: the engine
    // thread snapshots its state right after this batch, and the snapshot is
    // saved (with the journal it covers trimmed) once the batch's effects are
    // applied; the exactly-once argument is the one above: the state saved
    // covers exactly the journal up to its entry, and effects applied one batch
    // later are what a crash between the two commits would leave for restore().
    // A ledger error or a journal written by someone else meanwhile drains the
    // engine thread and takes the serial path (catch_up). finish_pipeline()
    // drains and stops the thread; advance() and save() are serial calls for
    // after it. No observer may be set (the observer runs on the serial path).
    struct PipelineStep {
        Status ingest;                // the ledger's answer for this batch
        std::optional<Status> saved;  // a snapshot's save, when one was written by this call
    };
    using Release = std::function<void(PreparedBatch&)>;
    PipelineStep ingest_pipelined(PreparedBatch& batch, const Release& release, bool save_after);
    // Applies what the engine thread still holds, stops it; the saves this
    // writes are returned as in PipelineStep::saved.
    std::optional<Status> finish_pipeline();
    ~Ingestor();
    Ingestor(const Ingestor&) = delete;
    Ingestor& operator=(const Ingestor&) = delete;

    // Time-based rules at event time `now` (end of an import; a quiet live log),
    // journaled first: an error means nothing was evaluated (try again later).
    Status advance(TimePoint now);

    // Saves the engine state and trims the journal it covers (one transaction).
    // Refused after a failed restore() and while verdict effects are pending.
    Status save();

    // Aligns the engine with flags cleared by command (retryguard flags clear);
    // each clear is journaled first.
    Status sync_flags(TimePoint now);

    void set_poison_sink(PoisonSink sink) { poison_ = std::move(sink); }
    // Sees every journal record as the engine is fed it, with the verdicts the
    // engine returned for it, before their effects are applied (the actions
    // planner, core/actions/, plans from these). `replayed`: restore() feeds
    // the record again after a restart, so what was done about it outside the
    // ledger may have happened already. What it throws is reported to the
    // poison sink and ingestion goes on.
    using Observer = std::function<void(const EngineJournalRecord& record, std::span<const Verdict> verdicts,
                                        bool replayed)>;
    void set_observer(Observer observer) { observer_ = std::move(observer); }
    // Receives the verdict outbox at restore() (see above); set it before.
    void set_outbox_sink(OutboxSink sink) { outbox_sink_ = std::move(sink); }
    // Called right after the verdict lines of one effects commit went to the
    // sink: a sink that buffers writes them out here (a crash after the commit
    // must find as few of its lines unwritten as possible).
    void set_lines_done(std::function<void()> f) { lines_done_ = std::move(f); }

    // Hot-swap the classifier or the engine settings (configuration reload).
    void set_classifier(std::shared_ptr<const Classifier> classifier) { classifier_ = std::move(classifier); }
    void set_engine_settings(EngineSettings settings);

    const Engine& engine() const noexcept { return engine_; }
    const IngestStats& stats() const noexcept { return stats_; }

    std::uint64_t journal_seq() const noexcept { return journal_seq_; }
    std::uint64_t verdict_seq() const noexcept { return verdict_seq_; }
    // Bytes of the last engine state this Ingestor saved (or tried to): what
    // the next save will cost, about (SaveSchedule).
    std::size_t saved_state_bytes() const noexcept { return saved_state_bytes_; }

    static constexpr std::string_view kStateKey = "engine";

  private:
    struct PendingVerdict {
        VerdictEffect effect;
        Verdict verdict;
    };
    // One batch with the engine thread (pipelined ingest).
    struct EngineJob {
        PreparedBatch* batch = nullptr;
        Release release;
        std::vector<bool> fresh;
        std::uint64_t seq = 0;  // the batch's journal entry (0: nothing fresh)
        bool snapshot = false;
        // Filled by the engine thread:
        std::vector<PendingVerdict> pending;
        std::optional<std::string> state;  // the snapshot's bytes
        std::string state_error;
        std::uint64_t state_journal_seq = 0;
        bool done = false;
    };
    void engine_thread_main();
    void run_job(EngineJob& job);
    // Waits for the engine thread's job, applies its effects, writes its
    // snapshot, releases its batch. nullopt: no snapshot was written.
    std::optional<Status> collect_job();
    // The engine state as saved (CBOR), covering journal_seq_ and verdict_seq_.
    std::string encode_state() const;
    // Feeds one journal record to the engine; its verdicts are numbered and queued.
    void feed(const EngineJournalRecord& record, std::uint64_t seq);
    void feed_event(const IngestItem& item, std::uint64_t seq, std::vector<PendingVerdict>& out);
    // The ledger half of a batch (both ingest paths): recorded and counted.
    Result<IngestResult> record_batch(PreparedBatch& batch, const std::optional<FollowerPosition>& end);
    std::vector<Verdict> engine_on_event(const IngestItem& item);
    void queue(std::vector<Verdict>& verdicts);
    void queue(std::vector<Verdict>& verdicts, std::vector<PendingVerdict>& out);
    // Journal entries after journal_seq_ (written by an earlier run or with a
    // lost reply) into the engine.
    Status catch_up();
    // Appends entries, then feeds them (or catches up when others came between).
    Status journal_and_feed(std::vector<std::string> entries, std::vector<EngineJournalRecord> records);
    // Pending verdict effects to the ledger; lines for the ones applied now.
    Status flush_effects();

    Ledger& ledger_;
    std::shared_ptr<const Classifier> classifier_;
    Engine engine_;
    VerdictSink sink_;
    PoisonSink poison_;
    Observer observer_;
    bool restoring_ = false;  // restore() is replaying the journal
    OutboxSink outbox_sink_;
    std::function<void()> lines_done_;
    IngestStats stats_;
    PreparedBatch prepared_;            // ingest_lines' batch, reused between calls
    std::uint64_t journal_seq_ = 0;     // last journal entry the engine consumed
    std::uint64_t verdict_seq_ = 0;     // last verdict number given
    std::uint64_t outbox_written_ = 0;  // outbox entries up to here reached the sink: trim them
    std::size_t saved_state_bytes_ = 0;
    std::vector<PendingVerdict> pending_;
    bool restore_failed_ = false;
    bool need_catch_up_ = false;  // a ledger call failed: the journal may hold entries not fed

    // Pipelined ingest: the engine thread and its one job. While a job is out,
    // the engine, journal_seq_, verdict_seq_ and stats_.verdicts/by_category/
    // engine_errors belong to the engine thread; the rest to the caller's.
    std::thread engine_thread_;
    std::mutex job_mutex_;
    std::condition_variable job_cv_;
    std::optional<EngineJob> job_;
    bool job_stop_ = false;
    std::uint64_t submitted_seq_ = 0;  // last journal entry handed to the engine thread
};

// When a long import saves the engine state (a save trims the engine journal,
// which a restart replays): after `every_batches` batches or `every_lines`
// lines, but never before the lines since the last save reach the saved
// state's size divided by `state_bytes_per_line`. A save writes the whole
// state, whose size follows the destinations and recipients the engine
// tracks (about 2 MB at 20k destinations, 20 MB at 400k): at a fixed
// interval its cost per line grew with the ledger; this way the state saved
// stays under `state_bytes_per_line` bytes per line imported, a fraction of
// the journal's own bytes (docs/ledger.md, "Engine journal").
class SaveSchedule {
  public:
    struct Settings {
        std::uint64_t every_batches = 50;
        std::uint64_t every_lines = 100000;
        std::uint64_t state_bytes_per_line = 16;
    };
    SaveSchedule() = default;
    explicit SaveSchedule(Settings s) : settings_(s) {}
    // Whether the batch of `lines` about to be recorded should be followed by a
    // save, given the size of the state saved last.
    bool due(std::uint64_t lines, std::size_t state_bytes) const noexcept;
    // The size half of due(): the lines since the last save, and `lines`
    // more, reach state_bytes / state_bytes_per_line. The log follower saves
    // on its own clock but by this rule too (policyd/live.cpp).
    bool size_reached(std::uint64_t lines, std::size_t state_bytes) const noexcept;
    // The batch went in; `saved`: a save followed it.
    void done(std::uint64_t lines, bool saved) noexcept;
    std::uint64_t lines_since_save() const noexcept { return lines_; }

  private:
    Settings settings_;
    std::uint64_t batches_ = 0;
    std::uint64_t lines_ = 0;
};

// A saved engine state (the Ingestor's kStateKey value) for readers such as
// `retryguard status`: the engine part as JSON text (bytes that are not UTF-8
// replaced), and the follower positions a version-1 state carried.
struct SavedStateView {
    int version = 0;
    std::string engine_json;
    std::vector<FollowerPosition> positions;
    std::uint64_t journal_seq = 0;
};
Result<SavedStateView> describe_saved_state(std::string_view bytes);
// The engine part of a saved state as its CBOR bytes (a view into `bytes`),
// for readers that take only some of it without decoding it all (the
// reports); nullopt for a version-1 (JSON) state or bytes that are no state.
std::optional<std::string_view> saved_engine_cbor(std::string_view bytes);

// The category of one event: its reply classified, Category::expired for
// expiry, unknown for events that carry no reply.
Category classify_event(const Classifier& classifier, const Event& event);

}  // namespace retryguard
