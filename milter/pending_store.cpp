// pending_store.cpp -- the PendingStore over the ledger (SQLite or Redis, as
// the spec says). Glue only: the ledger decides what "pending" means.
#include "pending_store.hpp"

#include <fmt/format.h>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "retryguard/ledger.hpp"

namespace retryguard::milter {

namespace {

MessageIdentity identity(const MessageFacts& msg, TimePoint when) {
    MessageIdentity id;
    id.queue_id = msg.queue_id;
    id.message_id = msg.message_id;
    id.fingerprint = msg.fingerprint;
    id.sender = msg.sender;
    id.recipients = msg.recipients;
    id.time = when;
    return id;
}

class LedgerStore final : public PendingStore {
  public:
    LedgerStore(std::unique_ptr<Ledger> ledger, std::string spec)
        : ledger_(std::move(ledger)), spec_(std::move(spec)) {}

    Result<std::vector<PendingCopy>> find_pending(const MessageFacts& msg) override {
        PendingCopyQuery q;
        q.message_id = msg.message_id;
        q.fingerprint = msg.fingerprint;
        q.recipients = msg.recipients;
        q.exclude_queue_id = msg.queue_id;
        return ledger_->find_pending_copies(q);
    }

    Status record(const MessageFacts& msg, TimePoint when) override {
        return ledger_->record_identity(identity(msg, when));
    }

    Status record_many(const std::vector<std::pair<MessageFacts, TimePoint>>& batch) override {
        std::vector<MessageIdentity> ids;
        ids.reserve(batch.size());
        for (const auto& [msg, when] : batch) ids.push_back(identity(msg, when));
        return ledger_->record_identities(ids);
    }

    std::string describe() const override { return fmt::format("{}({})", ledger_->backend(), spec_); }

  private:
    std::unique_ptr<Ledger> ledger_;
    std::string spec_;
};

// Records off the end-of-message path: the decision for this message needs
// only the lookup, and a record is needed only once the message has been
// deferred (seconds later at the earliest), so a worker thread writes them.
// Bounded: when the queue is full the record is dropped and counted (fail
// open: a later resend of that message is then not recognised).
class AsyncRecorder final : public PendingStore {
  public:
    AsyncRecorder(std::unique_ptr<PendingStore> inner, std::size_t limit)
        : inner_(std::move(inner)), limit_(limit), worker_([this] { run(); }) {}
    ~AsyncRecorder() override { close(); }
    void close() override {
        {
            std::lock_guard lock(mu_);
            stop_ = true;
        }
        cv_.notify_one();
        if (worker_.joinable()) worker_.join();
    }
    Result<std::vector<PendingCopy>> find_pending(const MessageFacts& msg) override {
        return inner_->find_pending(msg);
    }
    Status record(const MessageFacts& msg, TimePoint when) override {
        {
            std::lock_guard lock(mu_);
            if (stop_ || queue_.size() >= limit_) {
                ++dropped_;
                return make_error(ErrorKind::limit, "record queue full: identity not recorded");
            }
            queue_.emplace_back(msg, when);
        }
        cv_.notify_one();
        return {};
    }
    std::string describe() const override { return inner_->describe(); }
    std::uint64_t failed_records() const override { return dropped_ + failed_; }

  private:
    void run() {
        std::unique_lock lock(mu_);
        for (;;) {
            cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
            if (queue_.empty() && stop_) return;  // drained: every accepted record written
            // everything waiting goes in one transaction (bounded), so a busy
            // milter writes less often, not more
            std::vector<std::pair<MessageFacts, TimePoint>> batch;
            while (!queue_.empty() && batch.size() < kMaxBatch) {
                batch.push_back(std::move(queue_.front()));
                queue_.pop_front();
            }
            lock.unlock();
            if (!inner_->record_many(batch)) failed_ += batch.size();
            lock.lock();
        }
    }

    static constexpr std::size_t kMaxBatch = 500;
    std::unique_ptr<PendingStore> inner_;
    std::size_t limit_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::pair<MessageFacts, TimePoint>> queue_;
    bool stop_ = false;
    std::atomic<std::uint64_t> dropped_{0}, failed_{0};
    std::thread worker_;  // last: starts once everything above exists
};

}  // namespace

Result<std::unique_ptr<PendingStore>> open_pending_store(const std::string& spec, std::size_t record_queue) {
    if (spec == "none") return std::unique_ptr<PendingStore>();
    auto ledger = open_ledger(spec);
    if (!ledger) return std::move(ledger).error();
    std::unique_ptr<PendingStore> store(new LedgerStore(std::move(*ledger), spec));
    if (record_queue == 0) return store;
    return std::unique_ptr<PendingStore>(new AsyncRecorder(std::move(store), record_queue));
}

}  // namespace retryguard::milter
