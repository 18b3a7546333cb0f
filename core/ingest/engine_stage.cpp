// engine_stage.cpp -- pipelined ingest (ingest.hpp, Ingestor::ingest_pipelined):
// the rules engine fed on a thread of its own, one batch behind the ledger.
// The caller's thread records batch N+1 while the engine thread feeds the
// fresh events of batch N and, at a save point, snapshots its state; the
// caller then applies batch N's verdict effects, writes their lines and the
// snapshot, in the order a serial run would.
#include <exception>

#include "retryguard/ingest/ingest.hpp"
#include "retryguard/runtime/threads.hpp"

namespace retryguard {

Ingestor::~Ingestor() {
    if (!engine_thread_.joinable()) return;
    {
        std::lock_guard lock(job_mutex_);
        job_stop_ = true;
    }
    job_cv_.notify_all();
    engine_thread_.join();
}

void Ingestor::engine_thread_main() {
    set_thread_name("rg-engine");
    std::unique_lock lock(job_mutex_);
    for (;;) {
        job_cv_.wait(lock, [&] { return job_stop_ || (job_ && !job_->done); });
        if (job_ && !job_->done) {
            EngineJob& job = *job_;
            lock.unlock();
            run_job(job);
            lock.lock();
            job.done = true;
            job_cv_.notify_all();
            continue;
        }
        if (job_stop_) return;
    }
}

void Ingestor::run_job(EngineJob& job) {
    const auto items = job.batch->events();
    for (std::size_t i = 0; i < items.size() && i < job.fresh.size(); ++i)
        if (job.fresh[i]) feed_event(items[i], job.seq, job.pending);
    if (!job.snapshot) return;
    job.state_journal_seq = journal_seq_;
    try {
        job.state = encode_state();
    } catch (const std::exception& e) {
        job.state_error = e.what();
    }
}

std::optional<Status> Ingestor::collect_job() {
    std::optional<EngineJob> job;
    {
        std::unique_lock lock(job_mutex_);
        if (!job_) return std::nullopt;
        job_cv_.wait(lock, [&] { return job_->done; });
        job.swap(job_);
    }
    for (auto& p : job->pending) pending_.push_back(std::move(p));
    (void)flush_effects();  // refused effects stay pending and are offered again
    if (job->release) job->release(*job->batch);
    if (!job->snapshot) return std::nullopt;
    if (restore_failed_)
        return make_error(ErrorKind::invalid_input,
                          "the saved engine state could not be restored: not overwriting it");
    if (!job->state) return make_error(ErrorKind::internal, "encoding the engine state: " + job->state_error);
    saved_state_bytes_ = job->state->size();
    if (!pending_.empty())
        return make_error(ErrorKind::unavailable, "verdict effects pending: the engine state is saved later");
    return ledger_.save_engine_state(kStateKey, *job->state, job->state_journal_seq, outbox_written_);
}

Ingestor::PipelineStep Ingestor::ingest_pipelined(PreparedBatch& batch, const Release& release,
                                                  bool save_after) {
    PipelineStep step;
    if (observer_) {
        // The observer is fed on the serial path only.
        step.ingest = ingest_prepared(batch, std::nullopt);
        if (release) release(batch);
        if (save_after && step.ingest) step.saved = save();
        return step;
    }
    if (!engine_thread_.joinable()) {
        submitted_seq_ = journal_seq_;
        job_stop_ = false;
        engine_thread_ = std::thread([this] { engine_thread_main(); });
    }
    auto result = record_batch(batch, std::nullopt);
    if (!result) {
        step.saved = collect_job();
        if (release) release(batch);
        step.ingest = result.error();
        return step;
    }

    if (need_catch_up_ || (result->applied > 0 && result->journal_seq != submitted_seq_ + 1)) {
        // Entries the engine has not seen precede this batch's: the serial
        // path, with the engine thread idle, takes all from the journal.
        step.saved = collect_job();
        if (catch_up()) submitted_seq_ = journal_seq_;
        (void)flush_effects();
        if (release) release(batch);
        if (save_after) step.saved = save();
        return step;
    }
    // The batch before this one: its effects and snapshot, then this one out.
    step.saved = collect_job();
    if (result->applied > 0) submitted_seq_ = result->journal_seq;
    if (result->applied == 0 && !save_after) {
        if (release) release(batch);
        return step;
    }
    EngineJob job;
    job.batch = &batch;
    job.release = release;
    job.fresh = std::move(result->fresh);
    job.seq = result->journal_seq;
    job.snapshot = save_after;
    {
        std::lock_guard lock(job_mutex_);
        job_ = std::move(job);
    }
    job_cv_.notify_all();
    return step;
}

std::optional<Status> Ingestor::finish_pipeline() {
    if (!engine_thread_.joinable()) return std::nullopt;
    auto saved = collect_job();
    {
        std::lock_guard lock(job_mutex_);
        job_stop_ = true;
    }
    job_cv_.notify_all();
    engine_thread_.join();
    return saved;
}

}  // namespace retryguard
