// pending_store.cpp -- the PendingStore over the ledger (SQLite or Redis, as
// the spec says). Glue only: the ledger decides what "pending" means.
#include "pending_store.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "retryguard/identity/identity_filter.hpp"
#include "retryguard/identity/identity_filter_feed.hpp"
#include "retryguard/ledger/ledger.hpp"
#include "retryguard/runtime/daemon_guard.hpp"

namespace retryguard::milter {

namespace {

// An exception caught at the top of one of the store's threads, to its log.
GuardReport store_report(const StoreLog& log) {
    return [log](std::string_view where, std::string_view what) {
        if (log)
            log(Severity::error,
                fmt::format("{}: caught exception: {}; carrying on (fail-open)", where, what));
    };
}

// What the log cannot tell: the fingerprint (and the Message-ID and sender,
// which cleanup and qmgr also log, in case their lines come later). Not the
// recipients: a copy counts as being retried only once a recipient has been
// deferred (resend.hpp: counts_as_retrying), and the log's deferral line names
// that recipient; recording them here would cost two more B-tree inserts per
// message for rows no verdict reads.
MessageIdentity identity(const MessageFacts& msg, TimePoint when, const std::string& host) {
    MessageIdentity id;
    id.host = host;
    id.queue_id = msg.queue_id;
    id.message_id = msg.message_id;
    id.fingerprint = msg.fingerprint;
    id.sender = msg.sender;
    id.time = when;
    return id;
}

// The ledger behind an identity filter (identity_filter.hpp): a message none
// of whose keys the ledger holds is answered "no pending copy" without a
// lookup. The filter is kept complete by an IdentityFilterFeed (core: rebuilt
// every `rescan`, and the ledger's change stream in between where it has one);
// the milter's own records are added as they are written.
// rescan 0, or a ledger that cannot list its identities: every message is
// looked up.
class LedgerStore final : public PendingStore {
  public:
    LedgerStore(std::unique_ptr<Ledger> ledger, std::string spec, std::chrono::seconds rescan, StoreLog log,
                std::string host)
        : ledger_(std::move(ledger)),
          spec_(std::move(spec)),
          host_(std::move(host)),
          rescan_(rescan),
          filtered_(rescan.count() > 0 && ledger_->can_list_identities()) {
        if (!filtered_) return;
        std::unique_ptr<IdentityStream> stream;
        if (auto opened = ledger_->open_identity_stream()) stream = std::move(*opened);
        IdentityFilterFeed::Options options;
        options.rescan = rescan;
        feed_.emplace(
            filter_, [this](const IdentityFilter::Visitor& v) { return ledger_->for_each_open_identity(v); },
            std::move(stream), options, std::move(log));
        feed_->start();  // before the first message, so the first lookups are filtered too
    }
    ~LedgerStore() override { close(); }
    void close() override {
        if (feed_) feed_->stop();
    }

    Result<std::vector<PendingCopy>> find_pending(const MessageFacts& msg,
                                                  std::chrono::steady_clock::time_point deadline) override {
        const auto now = std::chrono::steady_clock::now();
        const std::uint64_t content =
            filtered_ ? IdentityFilter::content_key(msg.fingerprint, msg.recipients) : 0;
        if (filtered_ && !filter_.may_have_copy(msg.message_id, msg.fingerprint, content, now)) {
            ++filtered_lookups_;
            return std::vector<PendingCopy>{};
        }
        PendingCopyQuery q;
        q.deadline = deadline;
        q.message_id = msg.message_id;
        q.fingerprint = msg.fingerprint;
        q.recipients = msg.recipients;
        q.exclude_queue_id = msg.queue_id;
        auto found = ledger_->find_pending_copies(q);
        // Identical content: remember for a moment that these recipients have
        // no copy (identity_filter.hpp), so the next identical message is not
        // looked up again. Only an empty answer says so: a copy found by
        // Message-ID can hide one by fingerprint for the same recipient.
        if (found && found->empty() && content != 0) filter_.note_no_fingerprint_copy(content, now);
        return found;
    }

    Status record(const MessageFacts& msg, TimePoint when) override {
        auto st = ledger_->record_identity(identity(msg, when, host_));
        // after the write (see IdentityFilter::rebuild), and even after a failed
        // one: a key too many costs a lookup, a key too few a missed resend
        if (filtered_) filter_.add(msg.message_id, msg.fingerprint);
        return st;
    }

    Status record_many(const std::vector<std::pair<MessageFacts, TimePoint>>& batch) override {
        std::vector<MessageIdentity> ids;
        ids.reserve(batch.size());
        for (const auto& [msg, when] : batch) ids.push_back(identity(msg, when, host_));
        auto st = ledger_->record_identities(ids);
        if (filtered_)
            for (const auto& [msg, when] : batch) filter_.add(msg.message_id, msg.fingerprint);
        return st;
    }

    std::string describe() const override {
        return fmt::format("{}({}){}{}", ledger_->backend(), spec_,
                           filtered_ ? fmt::format(" filter-rescan={}s", rescan_.count()) : "",
                           feed_ && feed_->has_stream() ? " filter-stream" : "");
    }
    std::uint64_t filtered_lookups() const override { return filtered_lookups_; }
    std::uint64_t filter_errors() const override { return feed_ ? feed_->errors() : 0; }
    std::uint64_t exceptions_caught() const override { return feed_ ? feed_->exceptions_caught() : 0; }

  private:
    std::unique_ptr<LedgerLookup> ledger_;
    std::string spec_;
    std::string host_;  // recorded with each message (MessageIdentity::host)
    std::chrono::seconds rescan_;
    bool filtered_;
    IdentityFilter filter_;
    std::atomic<std::uint64_t> filtered_lookups_{0};
    std::optional<IdentityFilterFeed> feed_;  // keeps filter_ complete (filtered_ only)
};

// Records off the end-of-message path: the decision for this message needs
// only the lookup, and a record is needed only once the message has been
// deferred (seconds later at the earliest), so a worker thread writes them, in
// batches gathered for up to kGather: the ledger's indexes are keyed by
// random-looking values (Message-ID, fingerprint), so a transaction costs what
// its distinct pages cost, and bigger batches share pages.
// A lookup that meets a copy still waiting for its batch has the batch
// committed first, so a resend that follows its original within milliseconds
// is still recognised (the ledger then answers, with what it knows of the copy).
// Bounded: when the queue is full the record is dropped and counted (fail
// open: a later resend of that message is then not recognised).
// Every libmilter thread takes mu_ twice per message, so nothing slow happens
// under it: keys are hashed before, and a written batch's keys are released
// by swapping maps, their memory freed after.
class AsyncRecorder final : public PendingStore {
  public:
    AsyncRecorder(std::unique_ptr<PendingStore> inner, std::size_t limit, StoreLog log)
        : inner_(std::move(inner)), limit_(limit), log_(std::move(log)), worker_([this] { run(); }) {}
    ~AsyncRecorder() override { close(); }
    void close() override {
        {
            std::lock_guard lock(mu_);
            stop_ = true;
        }
        cv_.notify_one();
        if (worker_.joinable()) worker_.join();
        inner_->close();
    }
    Result<std::vector<PendingCopy>> find_pending(const MessageFacts& msg,
                                                  std::chrono::steady_clock::time_point deadline) override {
        const Keys k = keys(msg);
        {
            // Rare: a copy of this message was accepted moments ago and is still
            // waiting for its batch. Have the batch committed now (bounded wait),
            // so the ledger answers with that copy and what it knows of it.
            std::unique_lock lock(mu_);
            if (unwritten_copy(k)) {
                flush_now_ = true;
                cv_.notify_one();
                written_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + kFlushWait),
                                    [&] { return stop_ || !unwritten_copy(k); });
            }
        }
        return inner_->find_pending(msg, deadline);
    }
    Status record(const MessageFacts& msg, TimePoint when) override {
        const Keys k = keys(msg);  // outside the lock, like the copy
        Item item{msg, when};
        {
            std::lock_guard lock(mu_);
            if (stop_ || queue_.size() >= limit_)  // the caller counts it (failed_records does not)
                return make_error(ErrorKind::limit, "record queue full: identity not recorded");
            for (std::size_t i = 0; i < k.of.n; ++i) queued_keys_.emplace(k.of.key[i], k.self);
            queue_.push_back(std::move(item));
            // wake the writer only when there is something new for it to do:
            // the first record of a batch, or a full batch
            if (queue_.size() != 1 && queue_.size() != kMaxBatch) return {};
        }
        cv_.notify_one();
        return {};
    }
    std::string describe() const override { return inner_->describe(); }
    std::uint64_t failed_records() const override { return failed_; }
    std::uint64_t filtered_lookups() const override { return inner_->filtered_lookups(); }
    std::uint64_t filter_errors() const override { return inner_->filter_errors(); }
    std::uint64_t exceptions_caught() const override { return exceptions_ + inner_->exceptions_caught(); }

  private:
    using Item = std::pair<MessageFacts, TimePoint>;
    // key hash -> hash of the queue id that holds it. Hashes, not strings: a
    // collision costs one early commit, never a missed copy.
    using KeyMap = std::unordered_multimap<std::uint64_t, std::uint64_t>;
    struct Keys {
        IdentityFilter::Keys of;  // the message's identity
        std::uint64_t self = 0;   // its own queue id
    };

    // The Message-ID only. A copy matches by fingerprint only once the queue
    // has deferred one of its recipients (docs/milter.md, "Identical content"),
    // and a copy still waiting for its batch (at most kGather plus a commit)
    // would need a delivery attempt, its log line and the follower's ingest
    // in that time. With the fingerprint here, identical content (alerts, cron
    // mail, templates) had every message wait for a commit of the one before it.
    static Keys keys(const MessageFacts& msg) {
        return {IdentityFilter::keys_of(msg.message_id, {}), std::hash<std::string_view>{}(msg.queue_id)};
    }

    // Whether a record not yet committed has one of these keys (and is not
    // the message itself). Called with mu_ held.
    bool unwritten_copy(const Keys& k) const {
        for (const KeyMap* map : {&queued_keys_, &writing_keys_}) {
            if (map->empty()) continue;
            for (std::size_t i = 0; i < k.of.n; ++i) {
                auto [lo, hi] = map->equal_range(k.of.key[i]);
                for (auto it = lo; it != hi; ++it)
                    if (it->second != k.self) return true;
            }
        }
        return false;
    }

    // The writer thread's top level: whatever throws is counted and logged and
    // the loop starts again (the records at hand count as failed); a writer
    // that died would leave end-of-message waiting on a full queue.
    void run() {
        while (!run_guarded(
            "record writer", [this] { write_loop(); }, exceptions_, store_report(log_))) {
        }
    }
    void write_loop() {
        std::unique_lock lock(mu_);
        for (;;) {
            cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
            if (queue_.empty() && stop_) return;  // drained: every accepted record written
            cv_.wait_for(lock, kGather, [this] { return stop_ || flush_now_ || queue_.size() >= kMaxBatch; });
            flush_now_ = false;
            // the whole queue (at most limit_ records) is one batch
            std::vector<Item> batch;
            batch.swap(queue_);
            writing_keys_.swap(queued_keys_);
            lock.unlock();
            bool ok = false;
            if (!run_guarded(
                    "record writer", [&] { ok = inner_->record_many(batch).ok(); }, exceptions_,
                    store_report(log_)))
                ok = false;
            if (!ok) failed_ += batch.size();
            KeyMap written;
            lock.lock();
            written.swap(writing_keys_);  // committed (or counted as failed): the ledger answers for them now
            written_.notify_all();
            lock.unlock();
            written.clear();  // freed outside the lock
            batch.clear();
            lock.lock();
        }
    }

    static constexpr std::size_t kMaxBatch = 5000;
    static constexpr std::chrono::milliseconds kGather{100};
    static constexpr std::chrono::milliseconds kFlushWait{1000};
    std::unique_ptr<PendingStore> inner_;
    std::size_t limit_;
    StoreLog log_;
    std::mutex mu_;
    std::condition_variable cv_;       // to the writer: records waiting, flush, stop
    std::condition_variable written_;  // from the writer: a batch is committed
    bool flush_now_ = false;
    std::vector<Item> queue_;
    KeyMap queued_keys_;   // of queue_
    KeyMap writing_keys_;  // of the batch being written
    bool stop_ = false;
    std::atomic<std::uint64_t> failed_{0}, exceptions_{0};
    std::thread worker_;  // last: starts once everything above exists
};

}  // namespace

Result<std::unique_ptr<PendingStore>> open_pending_store(std::unique_ptr<Ledger> ledger,
                                                         const std::string& spec, std::size_t record_queue,
                                                         std::chrono::seconds filter_rescan, StoreLog log,
                                                         std::string host) {
    if (!log) log = [](Severity, const std::string&) {};
    std::unique_ptr<PendingStore> store(
        new LedgerStore(std::move(ledger), spec, filter_rescan, log, std::move(host)));
    if (record_queue == 0) return store;
    return std::unique_ptr<PendingStore>(new AsyncRecorder(std::move(store), record_queue, std::move(log)));
}

}  // namespace retryguard::milter
