// redis_ledger.cpp -- the shared ledger backend for a fleet of MTAs: every
// multi-key update is one of the Lua scripts in core/ledger/redis/ (atomic on
// the server), every key carries a TTL, and a Redis that is down or slow turns
// into ErrorKind::unavailable within the configured timeouts, with reconnects
// spaced by a doubling back-off. Must never block a caller beyond those
// timeouts, and never let an exception or a hiredis error escape.
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <charconv>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "ledger/internal.hpp"
#include "ledger/redis_scripts.hpp"

namespace retryguard::ledger_detail {
namespace {

struct ReplyDeleter {
    void operator()(redisReply* r) const noexcept {
        if (r) freeReplyObject(r);
    }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

timeval to_timeval(std::chrono::milliseconds ms) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
    return tv;
}

std::string str(const redisReply* r) {
    if (!r) return {};
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) return std::string(r->str, r->len);
    if (r->type == REDIS_REPLY_INTEGER) return std::to_string(r->integer);
    return {};
}

std::int64_t to_int(std::string_view s, std::int64_t fallback = 0) {
    std::int64_t v = fallback;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{}) return fallback;
    (void)p;
    return v;
}

std::optional<TimePoint> opt_time(std::string_view s) {
    if (s.empty()) return std::nullopt;
    return from_micros(to_int(s));
}

std::string time_str(const std::optional<TimePoint>& t) {
    return t ? std::to_string(to_micros(*t)) : std::string();
}

using Fields = std::unordered_map<std::string, std::string>;

Fields to_fields(const redisReply* r) {
    Fields f;
    if (!r || r->type != REDIS_REPLY_ARRAY) return f;
    for (std::size_t i = 0; i + 1 < r->elements; i += 2) f[str(r->element[i])] = str(r->element[i + 1]);
    return f;
}

std::string get(const Fields& f, const char* k) {
    auto it = f.find(k);
    return it == f.end() ? std::string() : it->second;
}

std::string jget(const nlohmann::json& j, const char* k) {
    auto it = j.find(k);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

MessageInfo to_message(const Fields& f) {
    MessageInfo m;
    m.queue_id = get(f, "queue_id");
    m.previous_queue_id = get(f, "previous_queue_id");
    m.first_queue_id = get(f, "first_queue_id");
    m.next_queue_id = get(f, "next_queue_id");
    m.message_id = get(f, "message_id");
    m.fingerprint = get(f, "fingerprint");
    m.sender = get(f, "sender");
    m.size = to_int(get(f, "size"), -1);
    m.nrcpt = static_cast<int>(to_int(get(f, "nrcpt"), -1));
    m.arrival = opt_time(get(f, "arrival"));
    m.state = message_state_from_string(get(f, "state")).value_or(MessageState::incoming);
    m.updated = from_micros(to_int(get(f, "updated")));
    m.finished = opt_time(get(f, "finished"));
    m.host = get(f, "host");
    return m;
}

RecipientInfo to_recipient(const nlohmann::json& j) {
    RecipientInfo r;
    r.queue_id = jget(j, "queue_id");
    r.address = jget(j, "address");
    r.state = recipient_state_from_string(jget(j, "state")).value_or(RecipientState::pending);
    r.attempts = static_cast<int>(to_int(jget(j, "attempts")));
    r.first_attempt = opt_time(jget(j, "first_attempt"));
    r.last_attempt = opt_time(jget(j, "last_attempt"));
    r.first_deferral = opt_time(jget(j, "first_deferral"));
    r.reply_code = static_cast<int>(to_int(jget(j, "reply_code")));
    r.enhanced = jget(j, "enhanced");
    r.reply_text = jget(j, "reply_text");
    r.stage = jget(j, "stage");
    r.relay = jget(j, "relay");
    r.category = category_from_string(jget(j, "category")).value_or(Category::unknown);
    return r;
}

DestinationInfo to_destination(DestinationKind kind, const std::string& name, const Fields& f) {
    DestinationInfo d;
    d.kind = kind;
    d.name = name;
    d.state = get(f, "state");
    d.state_changed = opt_time(get(f, "state_changed"));
    d.last_success = opt_time(get(f, "last_success"));
    d.last_deferral = opt_time(get(f, "last_deferral"));
    if (auto first = get(f, "ep_first"); !first.empty()) {
        Episode e;
        e.kind = kind;
        e.destination = name;
        e.first_deferral = from_micros(to_int(first));
        e.last_deferral = from_micros(to_int(get(f, "ep_last")));
        e.attempts = to_int(get(f, "ep_attempts"));
        e.messages = to_int(get(f, "ep_messages"));
        e.categories = static_cast<CategorySet>(to_int(get(f, "ep_categories")));
        e.last_reply = get(f, "ep_last_reply");
        e.last_relay = get(f, "ep_last_relay");
        d.episode = std::move(e);
    }
    return d;
}

Flag to_flag(const nlohmann::json& j) {
    Flag f;
    f.id = to_int(jget(j, "id"));
    f.destination = jget(j, "destination");
    f.reason = jget(j, "reason");
    f.set_at = from_micros(to_int(jget(j, "set_at")));
    f.expires_at = opt_time(jget(j, "expires_at"));
    f.cleared_at = opt_time(jget(j, "cleared_at"));
    return f;
}

// The ingest script takes a batch as one MessagePack argument (ingest.lua's
// header says why): arrays, strings and unsigned numbers are all it needs, so this
// writes just those, in forms lua-cmsgpack reads.
void msgpack_array(std::string& out, std::size_t n) {
    if (n < 16) {
        out.push_back(static_cast<char>(0x90 | n));
    } else if (n <= 0xffff) {
        out.push_back(static_cast<char>(0xdc));
        out.push_back(static_cast<char>(n >> 8));
        out.push_back(static_cast<char>(n & 0xff));
    } else {
        out.push_back(static_cast<char>(0xdd));
        for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((n >> shift) & 0xff));
    }
}

void msgpack_str(std::string& out, std::string_view s) {
    const std::size_t n = s.size();
    if (n < 32) {
        out.push_back(static_cast<char>(0xa0 | n));
    } else if (n <= 0xff) {
        out.push_back(static_cast<char>(0xd9));
        out.push_back(static_cast<char>(n));
    } else if (n <= 0xffff) {
        out.push_back(static_cast<char>(0xda));
        out.push_back(static_cast<char>(n >> 8));
        out.push_back(static_cast<char>(n & 0xff));
    } else {
        out.push_back(static_cast<char>(0xdb));
        for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((n >> shift) & 0xff));
    }
    out.append(s);
}

void msgpack_uint(std::string& out, std::uint32_t n) {
    if (n < 128) {
        out.push_back(static_cast<char>(n));
    } else {
        out.push_back(static_cast<char>(0xce));
        for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((n >> shift) & 0xff));
    }
}

// A number the script reads as a decimal string (ingest.lua keeps its fields
// as the strings it stores).
void msgpack_int(std::string& out, std::int64_t v) {
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    (void)ec;
    msgpack_str(out, std::string_view(buf, static_cast<std::size_t>(end - buf)));
}

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
        if (ctx_) redisFree(ctx_);
    }

    std::string location() const { return unix_.empty() ? host_ + ":" + std::to_string(port_) : unix_; }

    void try_first_connect() {
        std::lock_guard lock(mutex_);
        try {
            connect_locked();
        } catch (const Failure&) {
            // counted as unavailable by the first operation that needs the connection
        }
    }

    std::string_view backend() const noexcept override { return "redis"; }

    Result<IngestResult> ingest(std::span<const IngestItem> batch,
                                const std::optional<FollowerPosition>& position) override {
        return run<IngestResult>([&] {
            std::vector<std::string> args = {P_, ttl(options_.message_ttl), ttl(options_.key_ttl),
                                             ttl(options_.seen_ttl)};
            args.push_back(position ? position->source : std::string());
            args.push_back(position ? position_json(*position) : std::string());
            args.push_back(std::to_string(batch.size()));
            // one MessagePack array of 21 values per event, in ingest.lua's order
            std::string packed;
            packed.reserve(batch.size() * 160);
            msgpack_array(packed, batch.size());
            std::string journal;  // the events' journal parts, one after the other
            for (const auto& item : batch) {
                Op op = plan(item);
                msgpack_array(packed, 21);
                msgpack_str(packed, key_hex(op.key));
                msgpack_int(packed, static_cast<int>(op.kind));
                msgpack_int(packed, op.time);
                msgpack_str(packed, op.queue_id);
                msgpack_str(packed, op.other_id);
                msgpack_str(packed, op.text);
                msgpack_str(packed, op.resent ? "1" : "0");
                msgpack_int(packed, op.size);
                msgpack_int(packed, op.nrcpt);
                msgpack_int(packed, static_cast<int>(op.outcome));
                msgpack_str(packed, op.recipient);
                msgpack_str(packed, op.domain);
                msgpack_str(packed, op.relay);
                msgpack_int(packed, op.code);
                msgpack_str(packed, op.enhanced);
                msgpack_str(packed, op.reason);
                msgpack_str(packed, op.stage);
                msgpack_str(packed, to_string(op.category));
                msgpack_int(packed, static_cast<std::int64_t>(category_bit(op.category)));
                const std::size_t before = journal.size();
                append_journal_batch_item(journal, item);
                msgpack_uint(packed, static_cast<std::uint32_t>(journal.size() - before));
                msgpack_str(packed, op.host);
            }
            args.push_back(std::move(packed));
            args.push_back(std::move(journal));
            auto r = eval("ingest", {P_ + "seen"}, args);
            IngestResult result;
            if (r->type == REDIS_REPLY_ARRAY && r->elements == 4) {
                result.applied = static_cast<std::size_t>(r->element[0]->integer);
                result.duplicates = static_cast<std::size_t>(r->element[1]->integer);
                const std::string flags = str(r->element[2]);
                result.fresh.reserve(flags.size());
                for (char c : flags) result.fresh.push_back(c == '1');
                result.journal_seq = static_cast<std::uint64_t>(r->element[3]->integer);
            }
            counters_.events += result.applied;
            counters_.duplicates += result.duplicates;
            return result;
        });
    }

    Result<std::optional<FollowerPosition>> load_position(std::string_view source) override {
        return run<std::optional<FollowerPosition>>([&]() -> std::optional<FollowerPosition> {
            auto r = call({"HGET", P_ + "pos", std::string(source)});
            if (r->type != REDIS_REPLY_STRING) return std::nullopt;
            auto j = nlohmann::json::parse(str(r.get()));
            FollowerPosition p;
            p.source = std::string(source);
            p.device = j.value("device", std::uint64_t{0});
            p.inode = j.value("inode", std::uint64_t{0});
            p.offset = j.value("offset", std::uint64_t{0});
            p.head_fingerprint = j.value("head_fingerprint", std::string());
            p.cursor = j.value("cursor", std::string());
            p.lines = j.value("lines", std::uint64_t{0});
            return p;
        });
    }

    Status save_position(const FollowerPosition& position) override {
        return status(run<int>([&] {
            eval("hash_write", {P_ + "pos"},
                 {"set", position.source, position_json(position), ttl(options_.key_ttl)});
            return 0;
        }));
    }

    Status record_identity(const MessageIdentity& id) override {
        return record_identities(std::span<const MessageIdentity>(&id, 1));
    }

    Status record_identities(std::span<const MessageIdentity> identities) override {
        if (auto st = check_identities(identities); !st) return counters_.count(std::move(st));
        // The milter's writer hands over its records in batches: one round trip
        // per chunk, not per record (each record one EVALSHA, atomic on its
        // own; a failure leaves the earlier ones recorded, as before), and the
        // connection lock released between chunks so lookups are not held up.
        constexpr std::size_t kChunk = 200;
        bool retried = false;
        for (std::size_t from = 0; from < identities.size(); from += kChunk) {
            const auto chunk = identities.subspan(from, std::min(kChunk, identities.size() - from));
            auto send = [&] {
                return status(run<int>([&] {
                    std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> calls;
                    calls.reserve(chunk.size());
                    for (const auto& id : chunk) calls.push_back(identity_call(id));
                    eval_pipelined("record_identity", calls);
                    return 0;
                }));
            };
            auto st = send();
            if (!st && st.error().kind == ErrorKind::unavailable && !retried) {
                // One stall past ledger.redis.timeout would fail every later
                // chunk of the batch during the reconnect back-off: wait that
                // out once and send the chunk again (recording an identity a
                // second time changes nothing). Redis down fails again at once.
                retried = true;
                std::this_thread::sleep_for(
                    std::min(options_.reconnect_min, std::chrono::milliseconds(1000)) +
                    std::chrono::milliseconds(10));
                st = send();
            }
            if (!st) return st;
        }
        return {};
    }

    // record_identity's KEYS and ARGV for one message.
    std::pair<std::vector<std::string>, std::vector<std::string>> identity_call(const MessageIdentity& id) {
        {
            std::vector<std::string> args = {P_,
                                             ttl(options_.message_ttl),
                                             ttl(options_.key_ttl),
                                             id.queue_id,
                                             normalize_message_id(id.message_id),
                                             id.fingerprint.substr(0, kMaxIdentityLength),
                                             normalize_address(id.sender),
                                             std::to_string(to_micros(id.time)),
                                             bounded_host(id.host)};
            for (const auto& r : id.recipients) {
                auto a = normalize_address(r);
                if (a.empty()) continue;
                args.push_back(a);
                args.push_back(domain_of(a));
            }
            return {{P_ + "msg:" + id.queue_id}, std::move(args)};
        }
    }

    Result<std::vector<PendingCopy>> find_pending_copies(const PendingCopyQuery& q) override {
        if (auto st = check_query(q); !st)
            return counters_.count(Result<std::vector<PendingCopy>>(st.error()));
        return run<std::vector<PendingCopy>>([&] {
            // The connection is shared: a lookup that waited its turn past the
            // caller's deadline is not sent (the command itself is bounded by
            // ledger.redis.timeout).
            if (q.deadline && std::chrono::steady_clock::now() >= *q.deadline)
                throw Failure{make_error(ErrorKind::timeout, "ledger (redis): lookup deadline passed")};
            std::vector<std::string> args = {P_, q.exclude_queue_id};
            for (const auto& r : q.recipients) args.push_back(normalize_address(r));
            // Read-only: sent again once on a new connection if Redis closed the
            // old one (a restart), instead of failing open for the back-off.
            ReadOnlyScope read_only(read_only_);
            auto r = eval("find_pending",
                          {P_ + "mid:" + normalize_message_id(q.message_id),
                           P_ + "fp:" + q.fingerprint.substr(0, kMaxIdentityLength)},
                          args);
            std::vector<PendingCopy> out;
            if (r->type != REDIS_REPLY_ARRAY) return out;
            for (std::size_t i = 0; i + 13 <= r->elements; i += 13) {
                auto f = [&](std::size_t k) { return str(r->element[i + k]); };
                PendingCopy c;
                c.recipient = f(0);
                c.queue_id = f(1);
                c.first_queue_id = f(2);
                c.destination = f(3);
                c.relay = f(4);
                c.last_reply = f(5);
                c.first_deferral = opt_time(f(6));
                c.last_attempt = opt_time(f(7));
                c.arrival = opt_time(f(8));
                c.attempts = static_cast<int>(to_int(f(9)));
                c.message_state = message_state_from_string(f(10)).value_or(MessageState::incoming);
                c.matched_by_message_id = f(11) == "1";
                c.host = f(12);
                out.push_back(std::move(c));
            }
            return out;
        });
    }

    // Pages through <prefix>open-msgs (open_identities.lua), one script call
    // per page under the connection lock, f called outside it: lookups wait
    // for at most one page.
    bool can_list_identities() const noexcept override { return true; }
    Status for_each_open_identity(
        const std::function<void(std::string_view message_id, std::string_view fingerprint)>& f) override {
        std::string cursor = "0";
        std::vector<std::string> keys;
        do {
            keys.clear();
            auto page = run<int>([&] {
                auto r = eval("open_identities", {P_ + "open-msgs"}, {P_, cursor, "500"});
                if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
                    r->element[1]->type != REDIS_REPLY_ARRAY)
                    throw Failure{
                        make_error(ErrorKind::io, "ledger (redis): malformed open_identities reply")};
                cursor = str(r->element[0]);
                const redisReply* list = r->element[1];
                for (std::size_t i = 0; i < list->elements; ++i) keys.push_back(str(list->element[i]));
                return 0;
            });
            if (!page) return page.error();
            for (std::size_t i = 0; i + 1 < keys.size(); i += 2) f(keys[i], keys[i + 1]);
        } while (cursor != "0");
        return {};
    }

    Result<std::unique_ptr<IdentityStream>> open_identity_stream() override;

    // The stream's end now: {id of the newest entry ("0-0" when none), its seq (0 when none)}.
    Result<std::pair<std::string, std::uint64_t>> stream_tail() {
        return run<std::pair<std::string, std::uint64_t>>([&] {
            auto r = call({"XREVRANGE", P_ + "identities-stream", "+", "-", "COUNT", "1"});
            std::pair<std::string, std::uint64_t> tail{"0-0", 0};
            if (r->type == REDIS_REPLY_ARRAY && r->elements == 1) tail = stream_entry(r->element[0], nullptr);
            return tail;
        });
    }

    // Entries after `after` (waiting up to `wait` for one), as {id, seq, Message-ID, fingerprint}.
    struct StreamEntry {
        std::string id;
        std::uint64_t seq = 0;
        std::string message_id, fingerprint;
    };
    Result<std::vector<StreamEntry>> stream_read(const std::string& after, std::chrono::milliseconds wait) {
        return run<std::vector<StreamEntry>>([&] {
            std::vector<StreamEntry> out;
            auto r = call({"XREAD", "COUNT", "1000", "BLOCK",
                           std::to_string(std::max<std::int64_t>(1, wait.count())), "STREAMS",
                           P_ + "identities-stream", after});
            // nil: nothing within `wait`; else [[key, [[id, [field, value, ...]], ...]]]
            if (r->type != REDIS_REPLY_ARRAY || r->elements != 1) return out;
            const redisReply* per_key = r->element[0];
            if (per_key->type != REDIS_REPLY_ARRAY || per_key->elements != 2) return out;
            const redisReply* entries = per_key->element[1];
            for (std::size_t i = 0; entries->type == REDIS_REPLY_ARRAY && i < entries->elements; ++i) {
                StreamEntry e;
                std::tie(e.id, e.seq) = stream_entry(entries->element[i], &e);
                out.push_back(std::move(e));
            }
            return out;
        });
    }

    Result<std::optional<MessageInfo>> get_message(std::string_view queue_id) override {
        return run<std::optional<MessageInfo>>([&] { return message_locked(std::string(queue_id)); });
    }

    Result<std::vector<MessageInfo>> find_messages_by_message_id(std::string_view message_id) override {
        return run<std::vector<MessageInfo>>([&] {
            std::vector<MessageInfo> out;
            auto r = call({"SMEMBERS", P_ + "mid:" + normalize_message_id(message_id)});
            for (std::size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i)
                if (auto m = message_locked(str(r->element[i]))) out.push_back(std::move(*m));
            std::sort(out.begin(), out.end(), [](const MessageInfo& a, const MessageInfo& b) {
                auto ka = a.arrival ? to_micros(*a.arrival) : INT64_MIN;
                auto kb = b.arrival ? to_micros(*b.arrival) : INT64_MIN;
                return ka != kb ? ka < kb : a.queue_id < b.queue_id;
            });
            return out;
        });
    }

    Result<std::vector<RecipientInfo>> get_recipients(std::string_view queue_id) override {
        return run<std::vector<RecipientInfo>>([&] {
            std::vector<RecipientInfo> out;
            auto r = call({"HGETALL", P_ + "rcpt:" + std::string(queue_id)});
            for (auto& [k, v] : to_fields(r.get())) out.push_back(to_recipient(nlohmann::json::parse(v)));
            std::sort(out.begin(), out.end(),
                      [](const RecipientInfo& a, const RecipientInfo& b) { return a.address < b.address; });
            return out;
        });
    }

    Result<std::int64_t> count_deliveries(TimePoint from, TimePoint to) override {
        return run<std::int64_t>([&] {
            std::int64_t n = 0;
            auto qids = call({"ZRANGEBYSCORE", P_ + "msgs", std::to_string(to_micros(from)), "+inf"});
            // The messages' recipient hashes are read pipelined, a chunk per
            // round trip, not one round trip per message.
            std::vector<std::vector<std::string>> reads;
            for (std::size_t i = 0; qids->type == REDIS_REPLY_ARRAY && i < qids->elements; ++i)
                reads.push_back({"HGETALL", P_ + "rcpt:" + str(qids->element[i])});
            call_pipelined(reads, [&](const redisReply* r) {
                for (auto& [k, v] : to_fields(r)) {
                    auto rc = to_recipient(nlohmann::json::parse(v));
                    if (rc.state == RecipientState::sent && rc.last_attempt && *rc.last_attempt >= from &&
                        *rc.last_attempt < to)
                        ++n;
                }
            });
            return n;
        });
    }

    Result<std::vector<RecipientInfo>> find_recipients_by_address(std::string_view address,
                                                                  std::size_t limit) override {
        return run<std::vector<RecipientInfo>>([&] {
            std::vector<RecipientInfo> out;
            if (limit == 0) return out;
            auto a = normalize_address(address);
            auto r = call({"ZREVRANGE", P_ + "addr:" + a, "0",
                           std::to_string(std::min<std::size_t>(limit, 1u << 30) - 1)});
            for (std::size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) {
                auto v = call({"HGET", P_ + "rcpt:" + str(r->element[i]), a});
                if (v->type == REDIS_REPLY_STRING)
                    out.push_back(to_recipient(nlohmann::json::parse(str(v.get()))));
            }
            std::sort(out.begin(), out.end(), [](const RecipientInfo& x, const RecipientInfo& y) {
                auto kx = x.last_attempt ? to_micros(*x.last_attempt) : 0;
                auto ky = y.last_attempt ? to_micros(*y.last_attempt) : 0;
                return kx != ky ? kx > ky : x.queue_id < y.queue_id;
            });
            return out;
        });
    }

    Result<std::optional<DestinationInfo>> get_destination(DestinationKind kind,
                                                           std::string_view name) override {
        return run<std::optional<DestinationInfo>>([&]() -> std::optional<DestinationInfo> {
            auto f = to_fields(call({"HGETALL", dest_key(kind, name)}).get());
            if (f.empty()) return std::nullopt;
            return to_destination(kind, std::string(name), f);
        });
    }

    Result<std::vector<DestinationInfo>> list_destinations(const DestinationFilter& filter) override {
        return run<std::vector<DestinationInfo>>([&] {
            std::vector<std::pair<DestinationKind, std::string>> names;
            auto r = call({"ZRANGE", P_ + "dests", "0", "-1"});
            for (std::size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) {
                auto m = str(r->element[i]);
                auto tab = m.find('\t');
                if (tab == std::string::npos) continue;
                auto kind = destination_kind_from_string(m.substr(0, tab));
                if (!kind || (filter.kind && *kind != *filter.kind)) continue;
                names.emplace_back(*kind, m.substr(tab + 1));
            }
            std::sort(names.begin(), names.end(), [](const auto& a, const auto& b) {
                auto ka = to_string(a.first), kb = to_string(b.first);
                return ka != kb ? ka < kb : a.second < b.second;
            });
            // Filtered first, then paged, like the SQLite ledger's query.
            std::vector<DestinationInfo> out;
            std::size_t skipped = 0;
            for (const auto& [kind, name] : names) {
                if (out.size() >= filter.limit) break;
                auto f = to_fields(call({"HGETALL", dest_key(kind, name)}).get());
                if (f.empty()) continue;
                auto d = to_destination(kind, name, f);
                if (filter.state && d.state != *filter.state) continue;
                if (filter.open_episode_only && !d.episode) continue;
                if (skipped < filter.offset) {
                    ++skipped;
                    continue;
                }
                out.push_back(std::move(d));
            }
            return out;
        });
    }

    Result<std::vector<Episode>> episode_history(DestinationKind kind, std::string_view name, TimePoint from,
                                                 TimePoint to) override {
        return run<std::vector<Episode>>([&] {
            std::vector<std::pair<std::int64_t, Episode>> eps;
            auto r = call(
                {"ZRANGE", P_ + "eps:" + std::string(to_string(kind)) + ":" + std::string(name), "0", "-1"});
            for (std::size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) {
                auto j = nlohmann::json::parse(str(r->element[i]));
                Episode e;
                e.kind = kind;
                e.destination = std::string(name);
                e.first_deferral = from_micros(to_int(jget(j, "first")));
                e.last_deferral = from_micros(to_int(jget(j, "last")));
                e.ended = from_micros(to_int(jget(j, "ended")));
                e.attempts = to_int(jget(j, "attempts"));
                e.messages = to_int(jget(j, "messages"));
                e.categories = static_cast<CategorySet>(to_int(jget(j, "categories")));
                e.last_reply = jget(j, "last_reply");
                e.last_relay = jget(j, "last_relay");
                if (e.first_deferral < from || e.first_deferral > to) continue;
                eps.emplace_back(to_int(jget(j, "id")), std::move(e));
            }
            std::sort(eps.begin(), eps.end(), [](const auto& a, const auto& b) {
                return a.second.first_deferral != b.second.first_deferral
                           ? a.second.first_deferral < b.second.first_deferral
                           : a.first < b.first;
            });
            std::vector<Episode> out;
            for (auto& [id, e] : eps) out.push_back(std::move(e));
            return out;
        });
    }

    Status set_destination_state(DestinationKind kind, std::string_view name, std::string_view state,
                                 TimePoint at) override {
        return status(run<int>([&] {
            eval("set_destination_state", {dest_key(kind, name)},
                 {P_, ttl(options_.key_ttl), std::string(to_string(kind)), std::string(name),
                  std::string(state), std::to_string(to_micros(at))});
            return 0;
        }));
    }

    Result<std::int64_t> set_flag(const Flag& flag) override {
        return run<std::int64_t>([&] {
            auto r = eval(
                "set_flag", {P_ + "flags", P_ + "flagseq"},
                {ttl(options_.key_ttl), flag.destination, flag.reason, std::to_string(to_micros(flag.set_at)),
                 time_str(flag.expires_at), time_str(flag.cleared_at)});
            return static_cast<std::int64_t>(r->integer);
        });
    }

    Result<std::int64_t> clear_flags(std::string_view destination, TimePoint at) override {
        return run<std::int64_t>([&] {
            auto r = eval("clear_flags", {P_ + "flags"},
                          {ttl(options_.key_ttl), std::string(destination), std::to_string(to_micros(at))});
            return static_cast<std::int64_t>(r->integer);
        });
    }

    Result<std::vector<Flag>> list_flags(std::optional<std::string_view> destination, TimePoint now,
                                         bool include_inactive) override {
        return run<std::vector<Flag>>([&] {
            std::vector<Flag> out;
            auto r = call({"HGETALL", P_ + "flags"});
            for (auto& [k, v] : to_fields(r.get())) {
                auto f = to_flag(nlohmann::json::parse(v));
                if (destination && f.destination != *destination) continue;
                bool active = !f.cleared_at && (!f.expires_at || *f.expires_at > now);
                if (!include_inactive && !active) continue;
                out.push_back(std::move(f));
            }
            std::sort(out.begin(), out.end(), [](const Flag& a, const Flag& b) { return a.id < b.id; });
            return out;
        });
    }

    Result<std::int64_t> add_verdict_count(std::string_view verdict, std::int64_t delta) override {
        return run<std::int64_t>([&] {
            auto r = eval("hash_write", {P_ + "verdicts"},
                          {"incr", std::string(verdict), std::to_string(delta), ttl(options_.key_ttl)});
            return static_cast<std::int64_t>(r->integer);
        });
    }

    Result<std::map<std::string, std::int64_t>> verdict_counts() override {
        return run<std::map<std::string, std::int64_t>>([&] {
            std::map<std::string, std::int64_t> out;
            for (auto& [k, v] : to_fields(call({"HGETALL", P_ + "verdicts"}).get())) out[k] = to_int(v);
            return out;
        });
    }

    Status put_state(std::string_view key, std::string_view value) override {
        return status(run<int>([&] {
            eval("hash_write", {P_ + "state"},
                 {"set", std::string(key), std::string(value), ttl(options_.key_ttl)});
            return 0;
        }));
    }

    Result<std::optional<std::string>> get_state(std::string_view key) override {
        return run<std::optional<std::string>>([&]() -> std::optional<std::string> {
            auto r = call({"HGET", P_ + "state", std::string(key)});
            if (r->type != REDIS_REPLY_STRING) return std::nullopt;
            return str(r.get());
        });
    }

    Result<std::uint64_t> append_journal(std::span<const std::string> entries) override {
        return run<std::uint64_t>([&] {
            std::vector<std::string> args = {ttl(options_.key_ttl)};
            args.insert(args.end(), entries.begin(), entries.end());
            auto r = eval("journal_append", {P_ + "journal", P_ + "journalseq"}, args);
            return static_cast<std::uint64_t>(r->integer);
        });
    }

    Result<std::vector<EngineJournalEntry>> read_journal(std::uint64_t after, std::size_t limit) override {
        return run<std::vector<EngineJournalEntry>>([&] {
            std::vector<EngineJournalEntry> out;
            auto r = call({"ZRANGEBYSCORE", P_ + "journal", "(" + std::to_string(after), "+inf", "LIMIT", "0",
                           std::to_string(limit)});
            if (r->type != REDIS_REPLY_ARRAY) return out;
            out.reserve(r->elements);
            for (std::size_t i = 0; i < r->elements; ++i) {
                std::string m = str(r->element[i]);
                auto colon = m.find(':');
                if (colon == std::string::npos)
                    throw Failure{make_error(ErrorKind::io, "ledger (redis): malformed journal entry")};
                EngineJournalEntry e;
                e.seq = std::stoull(m.substr(0, colon));
                e.data = m.substr(colon + 1);
                out.push_back(std::move(e));
            }
            return out;
        });
    }

    Status save_engine_state(std::string_view key, std::string_view value, std::uint64_t journal_seq,
                             std::uint64_t outbox_written) override {
        return status(run<int>([&] {
            eval("engine_save", {P_ + "state", P_ + "journal", P_ + "outbox"},
                 {ttl(options_.key_ttl), std::string(key), std::string(value), std::to_string(journal_seq),
                  std::to_string(outbox_written)});
            return 0;
        }));
    }

    Result<std::uint64_t> apply_verdict_effects(std::span<const VerdictEffect> effects,
                                                std::uint64_t outbox_written) override {
        return run<std::uint64_t>([&] {
            std::vector<std::string> args = {P_, ttl(options_.key_ttl), std::to_string(outbox_written),
                                             std::to_string(effects.size())};
            args.reserve(args.size() + effects.size() * 10);
            for (const auto& e : effects) {
                args.push_back(std::to_string(e.seq));
                args.push_back(e.verdict);
                args.push_back(std::to_string(static_cast<int>(e.action)));
                args.push_back(std::string(to_string(e.kind)));
                args.push_back(e.name);
                args.push_back(e.state);
                args.push_back(std::to_string(to_micros(e.at)));
                args.push_back(e.reason);
                args.push_back(time_str(e.expires_at));
                args.push_back(e.line);
            }
            auto r = eval("verdict_effects", {P_ + "verdictmark", P_ + "outbox"}, args);
            return static_cast<std::uint64_t>(r->integer);
        });
    }

    Result<std::vector<OutboxEntry>> read_outbox() override {
        return run<std::vector<OutboxEntry>>([&] {
            std::vector<OutboxEntry> out;
            auto r = call({"ZRANGE", P_ + "outbox", "0", "-1"});
            if (r->type != REDIS_REPLY_ARRAY) return out;
            for (std::size_t i = 0; i < r->elements; ++i) {
                std::string m = str(r->element[i]);
                auto t1 = m.find('\t');
                auto t2 = t1 == std::string::npos ? t1 : m.find('\t', t1 + 1);
                if (t2 == std::string::npos)
                    throw Failure{make_error(ErrorKind::io, "ledger (redis): malformed outbox entry")};
                OutboxEntry e;
                e.seq = std::stoull(m.substr(0, t1));
                e.at = from_micros(std::stoll(m.substr(t1 + 1, t2 - t1 - 1)));
                e.line = m.substr(t2 + 1);
                out.push_back(std::move(e));
            }
            return out;
        });
    }

    Result<std::uint64_t> verdict_mark() override {
        return run<std::uint64_t>([&]() -> std::uint64_t {
            auto r = call({"GET", P_ + "verdictmark"});
            if (r->type != REDIS_REPLY_STRING) return 0;
            return std::stoull(str(r.get()));
        });
    }

    Result<PruneResult> prune(const RetentionPolicy& policy, TimePoint now) override {
        return run<PruneResult>([&] {
            PruneResult total;
            for (int pass = 0; pass < 100000; ++pass) {
                auto r = eval("prune", {P_ + "seen"},
                              {P_, std::to_string(to_micros(now - policy.finished_messages)),
                               std::to_string(to_micros(now - policy.stale_messages)),
                               std::to_string(to_micros(now - policy.episodes)),
                               std::to_string(to_micros(now - policy.seen_events)), "1000"});
                if (r->type != REDIS_REPLY_ARRAY || r->elements != 6) break;
                total.messages += r->element[0]->integer;
                total.recipients += r->element[1]->integer;
                total.episodes += r->element[2]->integer;
                total.flags += r->element[3]->integer;
                total.seen_events += r->element[4]->integer;
                if (r->element[5]->integer == 0) break;
            }
            return total;
        });
    }

    Result<LedgerStats> stats() override {
        return run<LedgerStats>([&] {
            LedgerStats s;
            s.backend = "redis";
            s.location = location();
            auto integer = [&](std::vector<std::string> argv) {
                auto r = call(std::move(argv));
                return r->type == REDIS_REPLY_INTEGER ? static_cast<std::int64_t>(r->integer)
                                                      : to_int(str(r.get()));
            };
            s.messages = integer({"ZCARD", P_ + "msgs"});
            s.pending_messages = s.messages - integer({"ZCARD", P_ + "finished"});
            s.recipients = integer({"HGET", P_ + "counts", "recipients"});
            s.destinations = integer({"ZCARD", P_ + "dests"});
            s.open_episodes = integer({"SCARD", P_ + "open"});
            s.episodes = integer({"HGET", P_ + "counts", "episodes"});
            for (auto& [k, v] : to_fields(call({"HGETALL", P_ + "flags"}).get()))
                if (jget(nlohmann::json::parse(v), "cleared_at").empty()) ++s.flags;
            // the per-hour sets (ingest.lua), and the keys of older builds
            s.seen_events = integer({"ZCARD", P_ + "seen"});
            auto hours = call({"ZRANGE", P_ + "seen-hours", "0", "-1"});
            if (hours->type == REDIS_REPLY_ARRAY)
                for (std::size_t i = 0; i < hours->elements; ++i)
                    s.seen_events += integer({"SCARD", P_ + "seen:" + str(hours->element[i])});
            auto info = str(call({"INFO", "memory"}).get());
            if (auto pos = info.find("used_memory:"); pos != std::string::npos)
                s.bytes = to_int(std::string_view(info).substr(pos + 12, info.find('\r', pos) - pos - 12));
            s.schema_version = 2;  // 2: per-hour seen sets (1: one sorted set, still read)
            return s;
        });
    }

    LedgerCounters counters() const noexcept override { return counters_.snapshot(); }

  private:
    static std::string ttl(std::chrono::seconds s) {
        return std::to_string(std::max<std::int64_t>(1, s.count()));
    }

    std::string dest_key(DestinationKind kind, std::string_view name) const {
        return P_ + "dest:" + std::string(to_string(kind)) + ":" + std::string(name);
    }

    // One stream entry [id, [field, value, ...]]: its id and seq; its keys into *e.
    static std::pair<std::string, std::uint64_t> stream_entry(const redisReply* entry, StreamEntry* e) {
        if (entry->type != REDIS_REPLY_ARRAY || entry->elements != 2 ||
            entry->element[1]->type != REDIS_REPLY_ARRAY)
            throw Failure{make_error(ErrorKind::io, "ledger (redis): malformed identity stream entry")};
        std::pair<std::string, std::uint64_t> out{str(entry->element[0]), 0};
        const redisReply* fields = entry->element[1];
        for (std::size_t i = 0; i + 1 < fields->elements; i += 2) {
            const std::string name = str(fields->element[i]);
            if (name == "s")
                out.second = static_cast<std::uint64_t>(to_int(str(fields->element[i + 1])));
            else if (e && name == "m")
                e->message_id = str(fields->element[i + 1]);
            else if (e && name == "f")
                e->fingerprint = str(fields->element[i + 1]);
        }
        if (out.second == 0)
            throw Failure{make_error(ErrorKind::io, "ledger (redis): identity stream entry without seq")};
        return out;
    }

    static std::string position_json(const FollowerPosition& p) {
        nlohmann::json j = {{"device", p.device}, {"inode", p.inode},
                            {"offset", p.offset}, {"head_fingerprint", p.head_fingerprint},
                            {"cursor", p.cursor}, {"lines", p.lines}};
        return j.dump();
    }

    std::optional<MessageInfo> message_locked(const std::string& queue_id) {
        auto f = to_fields(call({"HGETALL", P_ + "msg:" + queue_id}).get());
        if (f.empty()) return std::nullopt;
        return to_message(f);
    }

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

    void connect_locked() {
        if (ctx_) return;
        auto now = std::chrono::steady_clock::now();
        if (now < next_attempt_)
            throw Failure{
                make_error(ErrorKind::unavailable,
                           "ledger (redis): " + location() + " unavailable, waiting before reconnecting")};
        if (ever_connected_ || attempted_) counters_.reconnects.fetch_add(1, std::memory_order_relaxed);
        attempted_ = true;
        auto tv = to_timeval(options_.connect_timeout);
        redisContext* c = unix_.empty() ? redisConnectWithTimeout(host_.c_str(), port_, tv)
                                        : redisConnectUnixWithTimeout(unix_.c_str(), tv);
        if (!c || c->err) {
            std::string why = c ? c->errstr : "out of memory";
            if (c) redisFree(c);
            back_off(now);
            auto msg = "ledger (redis): cannot connect to " + location() + ": " + why;
            options_.warn(msg);
            throw Failure{make_error(ErrorKind::unavailable, msg)};
        }
        redisSetTimeout(c, to_timeval(options_.command_timeout));
        ctx_ = c;
        try {
            if (!options_.redis_password.empty()) {
                try {
                    call_once(options_.redis_username.empty()
                                  ? std::vector<std::string>{"AUTH", options_.redis_password}
                                  : std::vector<std::string>{"AUTH", options_.redis_username,
                                                             options_.redis_password},
                              false);
                } catch (Failure& f) {
                    // Say which setting is wrong, once per attempt (attempts are
                    // spaced by the back-off), not only "unavailable" afterwards.
                    std::string why = f.error.message;
                    if (why.starts_with("ledger (redis): ")) why.erase(0, 16);
                    f.error.message = "ledger (redis): authentication to " + location() + " failed (" + why +
                                      "): check ledger.redis.password_file";
                    f.error.kind = ErrorKind::unavailable;
                    options_.warn(f.error.message);
                    throw;
                }
            }
            if (db_ != 0) call_once({"SELECT", std::to_string(db_)}, false);
        } catch (Failure&) {
            // Not usable unauthenticated or on the wrong database: drop it, back off.
            if (ctx_) redisFree(ctx_);
            ctx_ = nullptr;
            back_off(now);
            throw;
        }
        backoff_ = std::chrono::milliseconds(0);
        if (ever_connected_) options_.warn("ledger (redis): reconnected to " + location());
        ever_connected_ = true;
    }

    // A pipelined reply could not be read: the connection is unusable (as in
    // call_once); drop it, back off, warn and fail as unavailable.
    [[noreturn]] void drop_connection() {
        std::string why = ctx_->errstr;
        redisFree(ctx_);
        ctx_ = nullptr;
        back_off(std::chrono::steady_clock::now());
        auto msg = "ledger (redis): " + location() + ": " + why;
        options_.warn(msg);
        throw Failure{make_error(ErrorKind::unavailable, msg)};
    }

    void back_off(std::chrono::steady_clock::time_point now) {
        backoff_ =
            backoff_.count() == 0 ? options_.reconnect_min : std::min(backoff_ * 2, options_.reconnect_max);
        next_attempt_ = now + backoff_;
    }

    ReplyPtr call(const std::vector<std::string>& argv) { return call_once(argv, read_only_); }

    ReplyPtr call_once(const std::vector<std::string>& argv, bool may_resend) {
        connect_locked();
        std::vector<const char*> ptrs;
        std::vector<std::size_t> lens;
        ptrs.reserve(argv.size());
        lens.reserve(argv.size());
        for (const auto& a : argv) {
            ptrs.push_back(a.data());
            lens.push_back(a.size());
        }
        SigpipeGuard no_sigpipe;
        auto* raw = static_cast<redisReply*>(
            redisCommandArgv(ctx_, static_cast<int>(argv.size()), ptrs.data(), lens.data()));
        if (!raw) {
            // The connection is unusable after an I/O error or a timeout: drop it
            // and let the next operation reconnect after the back-off. A read on a
            // connection the server had closed (a Redis restart between two
            // messages: end of file, not a timeout) cannot have changed anything:
            // it is sent once more on a new connection, so the first lookup after
            // a restart is answered instead of failing open.
            std::string why = ctx_->errstr;
            const bool closed = ctx_->err == REDIS_ERR_EOF;
            redisFree(ctx_);
            ctx_ = nullptr;
            if (closed && may_resend) {
                options_.warn("ledger (redis): " + location() + ": " + why +
                              "; reconnecting at once for a read");
                return call_once(argv, false);
            }
            back_off(std::chrono::steady_clock::now());
            auto msg = "ledger (redis): " + location() + ": " + why;
            options_.warn(msg);
            throw Failure{make_error(ErrorKind::unavailable, msg)};
        }
        ReplyPtr reply(raw);
        if (reply->type == REDIS_REPLY_ERROR) {
            std::string msg(reply->str, reply->len);
            bool transient = msg.starts_with("LOADING") || msg.starts_with("BUSY") ||
                             msg.starts_with("MASTERDOWN") || msg.starts_with("OOM") ||
                             msg.starts_with("TRYAGAIN") || msg.starts_with("READONLY");
            throw Failure{
                make_error(transient ? ErrorKind::unavailable : ErrorKind::io, "ledger (redis): " + msg)};
        }
        return reply;
    }

    // EVALSHA, loading the script on first use and falling back to EVAL when
    // the server has forgotten it (restart, SCRIPT FLUSH).
    ReplyPtr eval(std::string_view name, const std::vector<std::string>& keys,
                  const std::vector<std::string>& args) {
        std::size_t index = 0;
        const auto& scripts = redis_scripts();
        while (index < scripts.size() && scripts[index].name != name) ++index;
        if (index == scripts.size())
            throw Failure{make_error(ErrorKind::internal, "ledger (redis): no script " + std::string(name))};
        std::vector<std::string> argv;
        argv.reserve(3 + keys.size() + args.size());
        argv.push_back("EVALSHA");
        argv.push_back(shas_[index]);
        argv.push_back(std::to_string(keys.size()));
        argv.insert(argv.end(), keys.begin(), keys.end());
        argv.insert(argv.end(), args.begin(), args.end());
        if (!shas_[index].empty()) {
            try {
                return call(argv);
            } catch (Failure& f) {
                if (f.error.message.find("NOSCRIPT") == std::string::npos) throw;
            }
        }
        argv[0] = "EVAL";
        argv[1] = std::string(scripts[index].text);
        auto reply = call(argv);
        // EVAL cached the script on the server; remember its digest for EVALSHA.
        auto sha = call({"SCRIPT", "LOAD", std::string(scripts[index].text)});
        shas_[index] = str(sha.get());
        return reply;
    }

    // Many commands pipelined, kChunk per round trip, each reply handed to f in
    // order. Every reply of a chunk is read (the connection stays in step)
    // before an error reply is thrown; a broken connection is dropped as in
    // call_once.
    void call_pipelined(const std::vector<std::vector<std::string>>& cmds,
                        const std::function<void(const redisReply*)>& f) {
        constexpr std::size_t kChunk = 1000;
        std::vector<const char*> ptrs;
        std::vector<std::size_t> lens;
        for (std::size_t next = 0; next < cmds.size();) {
            const std::size_t end = std::min(cmds.size(), next + kChunk);
            connect_locked();
            SigpipeGuard no_sigpipe;
            for (std::size_t i = next; i < end; ++i) {
                ptrs.clear();
                lens.clear();
                for (const auto& a : cmds[i]) {
                    ptrs.push_back(a.data());
                    lens.push_back(a.size());
                }
                if (redisAppendCommandArgv(ctx_, static_cast<int>(ptrs.size()), ptrs.data(), lens.data()) !=
                    REDIS_OK)
                    throw Failure{make_error(ErrorKind::internal, "ledger (redis): out of memory")};
            }
            std::optional<Error> failed;
            for (std::size_t i = next; i < end; ++i) {
                void* raw = nullptr;
                if (redisGetReply(ctx_, &raw) != REDIS_OK || !raw) drop_connection();
                ReplyPtr reply(static_cast<redisReply*>(raw));
                if (reply->type == REDIS_REPLY_ERROR) {
                    if (!failed)
                        failed = make_error(ErrorKind::io,
                                            "ledger (redis): " + std::string(reply->str, reply->len));
                    continue;
                }
                if (!failed) f(reply.get());
            }
            if (failed) throw Failure{std::move(*failed)};
            next = end;
        }
    }

    // Many EVALSHA calls of one script in pipelined chunks: every reply is read
    // (the connection stays in step) before the first error is thrown. Calls the
    // server no longer knows the script for (restart, SCRIPT FLUSH) are sent
    // again one by one with eval().
    void eval_pipelined(
        std::string_view name,
        const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>>& calls) {
        std::size_t index = 0;
        const auto& scripts = redis_scripts();
        while (index < scripts.size() && scripts[index].name != name) ++index;
        if (index == scripts.size())
            throw Failure{make_error(ErrorKind::internal, "ledger (redis): no script " + std::string(name))};
        std::size_t next = 0;
        if (shas_[index].empty() && !calls.empty()) {  // the first call loads the script
            eval(name, calls[0].first, calls[0].second);
            next = 1;
        }
        constexpr std::size_t kChunk = 1000;
        std::vector<std::size_t> again;
        std::optional<Error> failed;
        while (next < calls.size()) {
            const std::size_t end = std::min(calls.size(), next + kChunk);
            connect_locked();
            SigpipeGuard no_sigpipe;
            std::vector<std::string> argv;
            std::vector<const char*> ptrs;
            std::vector<std::size_t> lens;
            for (std::size_t i = next; i < end; ++i) {
                const auto& [keys, args] = calls[i];
                argv.clear();
                argv.push_back("EVALSHA");
                argv.push_back(shas_[index]);
                argv.push_back(std::to_string(keys.size()));
                argv.insert(argv.end(), keys.begin(), keys.end());
                argv.insert(argv.end(), args.begin(), args.end());
                ptrs.clear();
                lens.clear();
                for (const auto& a : argv) {
                    ptrs.push_back(a.data());
                    lens.push_back(a.size());
                }
                if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), ptrs.data(), lens.data()) !=
                    REDIS_OK)
                    throw Failure{make_error(ErrorKind::internal, "ledger (redis): out of memory")};
            }
            for (std::size_t i = next; i < end; ++i) {
                void* raw = nullptr;
                if (redisGetReply(ctx_, &raw) != REDIS_OK || !raw) drop_connection();
                ReplyPtr reply(static_cast<redisReply*>(raw));
                if (reply->type != REDIS_REPLY_ERROR) continue;
                std::string msg(reply->str, reply->len);
                if (msg.find("NOSCRIPT") != std::string::npos)
                    again.push_back(i);
                else if (!failed)
                    failed = make_error(ErrorKind::io, "ledger (redis): " + msg);
            }
            next = end;
        }
        if (failed) throw Failure{std::move(*failed)};
        for (std::size_t i : again) eval(name, calls[i].first, calls[i].second);
    }

    std::string host_;
    int port_;
    int db_;
    std::string unix_;
    LedgerOptions options_;
    std::string P_;
    std::mutex mutex_;
    redisContext* ctx_ = nullptr;
    bool read_only_ = false;  // the operation in progress only reads (see call_once)
    bool ever_connected_ = false;
    bool attempted_ = false;
    std::chrono::steady_clock::time_point next_attempt_{};
    std::chrono::milliseconds backoff_{0};
    std::vector<std::string> shas_;
    Counters counters_;
};

// The milter's reader of <prefix>identities-stream (record_identity.lua,
// ingest.lua), on a connection of its own: XREAD BLOCK would hold the shared
// one. Entries carry consecutive seq numbers; one that does not follow the
// last one read means entries were lost (trimmed by MAXLEN before they were
// read, or a Redis restarted without its data), reported as an error so the
// reader scans again.
class RedisIdentityStream final : public IdentityStream {
  public:
    explicit RedisIdentityStream(std::unique_ptr<RedisLedger> conn) : conn_(std::move(conn)) {}
    Status mark() override {
        marked_ = false;
        auto tail = conn_->stream_tail();
        if (!tail) return tail.error();
        last_id_ = tail->first;
        last_seq_ = tail->second;
        marked_ = true;
        return {};
    }
    Status read(std::chrono::milliseconds wait, const Visitor& f) override {
        if (!marked_) return make_error(ErrorKind::internal, "identity stream: read before mark");
        auto entries = conn_->stream_read(last_id_, std::min(wait, kMaxWait));
        if (!entries) {
            marked_ = false;
            return entries.error();
        }
        for (const auto& e : *entries) {
            // last_seq_ 0: the stream was empty at the mark, any seq may come first
            if (last_seq_ != 0 && e.seq != last_seq_ + 1) {
                marked_ = false;
                return make_error(ErrorKind::unavailable, "ledger (redis): identity stream skipped from " +
                                                              std::to_string(last_seq_) + " to " +
                                                              std::to_string(e.seq) +
                                                              " (trimmed, or Redis lost its data)");
            }
            last_id_ = e.id;
            last_seq_ = e.seq;
            f(e.message_id, e.fingerprint);
        }
        return {};
    }
    Status scan(const Visitor& f) override { return conn_->for_each_open_identity(f); }
    // The connection's command timeout is raised by this much, so that a read
    // waiting this long is not taken for a Redis that does not answer.
    static constexpr std::chrono::milliseconds kMaxWait{1000};

  private:
    std::unique_ptr<RedisLedger> conn_;
    std::string last_id_ = "0-0";
    std::uint64_t last_seq_ = 0;
    bool marked_ = false;
};

Result<std::unique_ptr<IdentityStream>> RedisLedger::open_identity_stream() {
    try {
        LedgerOptions o = options_;
        o.command_timeout += RedisIdentityStream::kMaxWait;
        auto conn = std::make_unique<RedisLedger>(host_, port_, db_, unix_, o);
        conn->try_first_connect();
        return std::unique_ptr<IdentityStream>(new RedisIdentityStream(std::move(conn)));
    } catch (const std::exception& e) {
        return make_error(ErrorKind::internal, std::string("ledger (redis): ") + e.what());
    }
}

}  // namespace

Result<std::unique_ptr<Ledger>> open_redis_ledger(const std::string& host, int port, int db,
                                                  const std::string& unix_path,
                                                  const LedgerOptions& options) {
    try {
        auto ledger = std::make_unique<RedisLedger>(host, port, db, unix_path, options);
        // A Redis that is down at start-up is not fatal: operations fail open
        // until it answers. The first attempt only warms the connection.
        ledger->try_first_connect();
        return std::unique_ptr<Ledger>(std::move(ledger));
    } catch (const std::exception& e) {
        return make_error(ErrorKind::internal, std::string("ledger (redis): ") + e.what());
    }
}

}  // namespace retryguard::ledger_detail
