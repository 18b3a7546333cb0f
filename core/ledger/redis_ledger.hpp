// redis_ledger.hpp -- the Redis ledger backend inside the core (not an API):
// the RedisLedger class, shared by its three sources: redis_connection.cpp
// (connection, commands, scripts, pipelining, fail-open), redis_write.cpp
// (ingest and the other writes) and redis_read.cpp (lookups, listings,
// statistics, the identity stream). What the backend guarantees is in
// redis_connection.cpp's header comment and docs/ledger.md, "Redis backend".
#pragma once

#include <hiredis/hiredis.h>
#include <pthread.h>

#include <csignal>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ledger/internal.hpp"
#include "ledger/redis_scripts.hpp"

namespace retryguard::ledger_detail::redis_backend {

struct ReplyDeleter {
    void operator()(redisReply* r) const noexcept {
        if (r) freeReplyObject(r);
    }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

timeval to_timeval(std::chrono::milliseconds ms);
std::string str(const redisReply* r);
std::int64_t to_int(std::string_view s, std::int64_t fallback = 0);
std::optional<TimePoint> opt_time(std::string_view s);
std::string time_str(const std::optional<TimePoint>& t);

using Fields = std::unordered_map<std::string, std::string>;

Fields to_fields(const redisReply* r);
std::string get(const Fields& f, const char* k);
std::string jget(const nlohmann::json& j, const char* k);
MessageInfo to_message(const Fields& f);
RecipientInfo to_recipient(const nlohmann::json& j);
DestinationInfo to_destination(DestinationKind kind, const std::string& name, const Fields& f);
Flag to_flag(const nlohmann::json& j);

// hiredis writes with write(2): a write to a connection the server has reset
// raises SIGPIPE, which would end a process that has not ignored it. The
// ledger must not decide that for its host process, so SIGPIPE is blocked in
// this thread around each exchange and a SIGPIPE it caused is consumed.
class SigpipeGuard {
  public:
    SigpipeGuard() {
        sigemptyset(&pipe_);
        sigaddset(&pipe_, SIGPIPE);
        sigset_t pending;
        sigpending(&pending);
        was_pending_ = sigismember(&pending, SIGPIPE) == 1;
        pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
    }
    ~SigpipeGuard() {
        if (!was_pending_) {
            sigset_t pending;
            sigpending(&pending);
            if (sigismember(&pending, SIGPIPE) == 1) {
                timespec zero{};
                sigtimedwait(&pipe_, nullptr, &zero);
            }
        }
        pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    }
    SigpipeGuard(const SigpipeGuard&) = delete;
    SigpipeGuard& operator=(const SigpipeGuard&) = delete;

  private:
    sigset_t pipe_{}, old_{};
    bool was_pending_ = false;
};

struct Failure {
    Error error;
};

// Marks the operation in progress as read-only for its duration (see call_once).
struct ReadOnlyScope {
    explicit ReadOnlyScope(bool& flag) : flag_(flag) { flag_ = true; }
    ~ReadOnlyScope() { flag_ = false; }
    ReadOnlyScope(const ReadOnlyScope&) = delete;
    ReadOnlyScope& operator=(const ReadOnlyScope&) = delete;
    bool& flag_;
};

class RedisLedger final : public Ledger {
  public:
    RedisLedger(std::string host, int port, int db, std::string unix_path, LedgerOptions options)
        : host_(std::move(host)),
          port_(port),
          db_(db),
          unix_(std::move(unix_path)),
          options_(std::move(options)),
          P_(options_.key_prefix) {
        if (!options_.warn) options_.warn = default_warn();
        shas_.resize(redis_scripts().size());
    }
    ~RedisLedger() override {
        discard_early();
        if (ctx_) redisFree(ctx_);
    }

    std::string location() const { return unix_.empty() ? host_ + ":" + std::to_string(port_) : unix_; }

    void try_first_connect();

    std::optional<EventKeyer> event_keyer() override {
        std::lock_guard lock(mutex_);
        return keyer_;
    }
    // The event-key secret, read (or made) after each new connection.
    EventKeyer keyer_locked();

    std::string_view backend() const noexcept override { return "redis"; }

    Result<IngestResult> ingest(std::span<const IngestItem> batch,
                                const std::optional<FollowerPosition>& position,
                                BatchJournal journal = {}) override;

    Result<std::optional<FollowerPosition>> load_position(std::string_view source) override;

    Status save_position(const FollowerPosition& position) override;

    Status record_identity(const MessageIdentity& id) override;

    Status record_identities(std::span<const MessageIdentity> identities) override;

    std::pair<std::vector<std::string>, std::vector<std::string>> identity_call(const MessageIdentity& id);

    Result<std::vector<PendingCopy>> find_pending_copies(const PendingCopyQuery& q) override;

    // Pages through <prefix>open-msgs (open_identities.lua), one script call
    // per page under the connection lock, f called outside it: lookups wait
    // for at most one page.
    bool can_list_identities() const noexcept override { return true; }
    Status for_each_open_identity(
        const std::function<void(std::string_view message_id, std::string_view fingerprint)>& f) override;

    Result<std::unique_ptr<IdentityStream>> open_identity_stream() override;

    Result<std::pair<std::string, std::uint64_t>> stream_tail();

    // Entries after `after` (waiting up to `wait` for one), as {id, seq, Message-ID, fingerprint}.
    struct StreamEntry {
        std::string id;
        std::uint64_t seq = 0;
        std::string message_id, fingerprint;
    };
    Result<std::vector<StreamEntry>> stream_read(const std::string& after, std::chrono::milliseconds wait);

    Result<std::optional<MessageInfo>> get_message(std::string_view queue_id) override;

    Result<std::vector<MessageInfo>> find_messages_by_message_id(std::string_view message_id) override;

    Result<std::vector<RecipientInfo>> get_recipients(std::string_view queue_id) override;

    Result<std::int64_t> count_deliveries(TimePoint from, TimePoint to) override;

    Result<std::vector<RecipientInfo>> find_recipients_by_address(std::string_view address,
                                                                  std::size_t limit) override;

    Result<std::optional<DestinationInfo>> get_destination(DestinationKind kind,
                                                           std::string_view name) override;

    Result<std::vector<DestinationInfo>> list_destinations(const DestinationFilter& filter) override;

    Result<std::map<std::string, std::int64_t>> count_destinations_by_state() override;

    Result<std::int64_t> count_destinations_delivered(DestinationKind kind, TimePoint since) override;

    Result<std::vector<Episode>> episode_history(DestinationKind kind, std::string_view name, TimePoint from,
                                                 TimePoint to) override;

    Result<std::vector<Episode>> episodes_between(TimePoint from, TimePoint to) override;

    Status set_destination_state(DestinationKind kind, std::string_view name, std::string_view state,
                                 TimePoint at) override;

    Result<std::int64_t> set_flag(const Flag& flag) override;

    Result<std::int64_t> clear_flags(std::string_view destination, TimePoint at) override;

    Result<std::vector<Flag>> list_flags(std::optional<std::string_view> destination, TimePoint now,
                                         bool include_inactive) override;

    Result<std::int64_t> add_verdict_count(std::string_view verdict, std::int64_t delta) override;

    Result<std::map<std::string, std::int64_t>> verdict_counts() override;

    Status put_state(std::string_view key, std::string_view value) override;

    Result<std::optional<std::string>> get_state(std::string_view key) override;

    Result<std::uint64_t> append_journal(std::span<const std::string> entries) override;

    Result<std::vector<EngineJournalEntry>> read_journal(std::uint64_t after, std::size_t limit) override;

    Status save_engine_state(std::string_view key, std::string_view value, std::uint64_t journal_seq,
                             std::uint64_t outbox_written) override;

    Result<std::uint64_t> apply_verdict_effects(std::span<const VerdictEffect> effects,
                                                std::uint64_t outbox_written) override;

    Result<std::vector<OutboxEntry>> read_outbox() override;

    Result<std::uint64_t> verdict_mark() override;

    Result<PruneResult> prune(const RetentionPolicy& policy, TimePoint now) override;

    Result<BulkLoadClaim> bulk_load_claim(std::string_view owner) override;

    Result<BulkLoadStats> bulk_load_copy(const std::string& sqlite_path, std::string_view owner) override;

    Status bulk_load_release(std::string_view owner) override;

    Result<BulkLoadFeed> bulk_load_early(const std::string& sqlite_path, std::string_view owner) override;

    Result<LedgerStats> stats() override;

    LedgerCounters counters() const noexcept override { return counters_.snapshot(); }

  private:
    // bulk_load.lua's reply: {outcome, detail}
    std::pair<std::string, std::string> bulk_load_script(const char* op, std::string_view owner);
    std::uint64_t wipe_prefix_locked(bool keep_marker = false);
    // The early copy of a bulk load (redis_bulk.cpp): its thread copies the
    // settled rows a chunk at a time, each chunk under the connection lock.
    class EarlyCopy;
    void early_copy_loop(EarlyCopy& e);
    void early_chunk_locked(EarlyCopy& e, const std::vector<std::int64_t>& work);
    // Ends the early copy's thread (its queue copied first unless unsettled).
    void stop_early() noexcept;
    // Ends it without copying its queue (a ledger closed without its copy).
    void discard_early() noexcept;
    static std::string ttl(std::chrono::seconds s);

    std::string dest_key(DestinationKind kind, std::string_view name) const;

    std::vector<std::pair<DestinationKind, std::string>> destination_members(
        const std::string& key, std::optional<DestinationKind> only);

    static std::pair<std::string, std::uint64_t> stream_entry(const redisReply* entry, StreamEntry* e);

    static std::string position_json(const FollowerPosition& p);

    std::optional<MessageInfo> message_locked(const std::string& queue_id);

    // Runs f under the connection lock; a Failure thrown by call()/eval() or any
    // std::exception becomes an Error, counted.
    template <typename T, typename F>
    Result<T> run(F&& f) noexcept {
        std::lock_guard lock(mutex_);
        try {
            return counters_.count(Result<T>(f()));
        } catch (Failure& e) {
            return counters_.count(Result<T>(std::move(e.error)));
        } catch (const std::exception& e) {
            return counters_.count(
                Result<T>(make_error(ErrorKind::internal, std::string("ledger (redis): ") + e.what())));
        } catch (...) {
            return counters_.count(
                Result<T>(make_error(ErrorKind::internal, "ledger (redis): unknown failure")));
        }
    }

    template <typename T>
    static Status status(const Result<T>& r) {
        if (r.ok()) return {};
        return r.error();
    }

    void connect_locked();

    [[noreturn]] void drop_connection();

    void back_off(std::chrono::steady_clock::time_point now);

    ReplyPtr call(const std::vector<std::string>& argv) { return call_once(argv, read_only_); }

    ReplyPtr call_once(const std::vector<std::string>& argv, bool may_resend);

    ReplyPtr eval(std::string_view name, const std::vector<std::string>& keys,
                  const std::vector<std::string>& args);

    void call_pipelined(const std::vector<std::vector<std::string>>& cmds,
                        const std::function<void(const redisReply*)>& f);

    void eval_pipelined(
        std::string_view name,
        const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>>& calls);

    std::string host_;
    int port_;
    int db_;
    std::string unix_;
    LedgerOptions options_;
    std::string P_;
    std::mutex mutex_;
    redisContext* ctx_ = nullptr;
    std::optional<EventKeyer> keyer_;  // the event-key secret, once read on the connection
    bool read_only_ = false;           // the operation in progress only reads (see call_once)
    bool ever_connected_ = false;
    bool attempted_ = false;
    std::chrono::steady_clock::time_point next_attempt_{};
    std::chrono::milliseconds backoff_{0};
    std::vector<std::string> shas_;
    Counters counters_;
    std::shared_ptr<EarlyCopy> early_;  // a bulk load's early copy, from bulk_load_early to bulk_load_copy
};

}  // namespace retryguard::ledger_detail::redis_backend
