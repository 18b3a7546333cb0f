// redis_connection.cpp -- the shared ledger backend for a fleet of MTAs: every
// multi-key update is one of the Lua scripts in core/ledger/redis/ (atomic on
// the server), every key carries a TTL, and a Redis that is down or slow turns
// into ErrorKind::unavailable within the configured timeouts, with reconnects
// spaced by a doubling back-off. Must never block a caller beyond those
// timeouts, and never let an exception or a hiredis error escape. This file
// owns the connection: connecting and authenticating, commands and scripts
// (EVALSHA, EVAL when the server forgot a script), pipelining, the back-off and
// the conversion of every failure into an Error; the writes are in
// redis_write.cpp, the reads in redis_read.cpp, the class in redis_ledger.hpp.

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <charconv>
#include <thread>
#include <tuple>

#include "ledger/redis_ledger.hpp"

namespace retryguard::ledger_detail::redis_backend {

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

std::int64_t to_int(std::string_view s, std::int64_t fallback) {
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

void RedisLedger::try_first_connect() {
    std::lock_guard lock(mutex_);
    try {
        keyer_locked();
    } catch (const Failure&) {
        // counted as unavailable by the first operation that needs the connection
    }
}

// The event-key secret (docs/ledger.md "Event keys"): <prefix>event_keyer,
// read after each new connection (a Redis that lost its data makes a new
// one). The first host to write it wins (SET NX), so a fleet shares one.
// Seen keys already stored (FNV-1a, from before the secret) make the horizon:
// the newest time of the sorted set older builds wrote, or the end of the
// newest hour set (seen:<hour>, listed in seen-hours), whichever is later. Its
// TTL (the long-lived keys') is renewed at every connection of any host: if
// it lapsed, the seen keys written under it would no longer match.
EventKeyer RedisLedger::keyer_locked() {
    connect_locked();
    if (keyer_) return *keyer_;
    const std::string key = P_ + "event_keyer";
    auto stored = call({"GET", key});
    if (stored->type != REDIS_REPLY_STRING) {
        std::optional<TimePoint> horizon;
        auto newest = call({"ZREVRANGE", P_ + "seen", "0", "0", "WITHSCORES"});
        if (newest->type == REDIS_REPLY_ARRAY && newest->elements == 2)
            horizon = from_micros(to_int(str(newest->element[1])));
        auto hour = call({"ZREVRANGE", P_ + "seen-hours", "0", "0", "WITHSCORES"});
        if (hour->type == REDIS_REPLY_ARRAY && hour->elements == 2) {
            const TimePoint end_of_hour =
                from_micros((to_int(str(hour->element[1])) + 1) * 3'600'000'000LL - 1);
            if (!horizon || end_of_hour > *horizon) horizon = end_of_hour;
        }
        auto made = new_event_keyer(horizon);
        if (!made)
            throw Failure{
                make_error(ErrorKind::internal, "ledger (redis): no random bytes for the event key")};
        call({"SET", key, encode_event_keyer(*made), "NX", "EX", ttl(options_.key_ttl)});
        stored = call({"GET", key});
    }
    call({"EXPIRE", key, ttl(options_.key_ttl)});
    auto keyer = decode_event_keyer(str(stored.get()));
    if (!keyer) throw Failure{make_error(ErrorKind::io, "ledger (redis): unreadable " + key)};
    keyer_ = keyer;
    return *keyer;
}

void RedisLedger::connect_locked() {
    if (ctx_) return;
    auto now = std::chrono::steady_clock::now();
    if (now < next_attempt_)
        throw Failure{make_error(ErrorKind::unavailable, "ledger (redis): " + location() +
                                                             " unavailable, waiting before reconnecting")};
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
    keyer_.reset();  // read again on this connection (keyer_locked)
    try {
        if (!options_.redis_password.empty()) {
            try {
                call_once(
                    options_.redis_username.empty()
                        ? std::vector<std::string>{"AUTH", options_.redis_password}
                        : std::vector<std::string>{"AUTH", options_.redis_username, options_.redis_password},
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
[[noreturn]] void RedisLedger::drop_connection() {
    std::string why = ctx_->errstr;
    redisFree(ctx_);
    ctx_ = nullptr;
    back_off(std::chrono::steady_clock::now());
    auto msg = "ledger (redis): " + location() + ": " + why;
    options_.warn(msg);
    throw Failure{make_error(ErrorKind::unavailable, msg)};
}

void RedisLedger::back_off(std::chrono::steady_clock::time_point now) {
    backoff_ =
        backoff_.count() == 0 ? options_.reconnect_min : std::min(backoff_ * 2, options_.reconnect_max);
    next_attempt_ = now + backoff_;
}

ReplyPtr RedisLedger::call_once(const std::vector<std::string>& argv, bool may_resend) {
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
            options_.warn("ledger (redis): " + location() + ": " + why + "; reconnecting at once for a read");
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
ReplyPtr RedisLedger::eval(std::string_view name, const std::vector<std::string>& keys,
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
void RedisLedger::call_pipelined(const std::vector<std::vector<std::string>>& cmds,
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
                    failed =
                        make_error(ErrorKind::io, "ledger (redis): " + std::string(reply->str, reply->len));
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
void RedisLedger::eval_pipelined(
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

}  // namespace retryguard::ledger_detail::redis_backend

namespace retryguard::ledger_detail {

using redis_backend::RedisLedger;

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
