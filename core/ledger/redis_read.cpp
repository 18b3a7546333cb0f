// redis_read.cpp -- the Redis ledger backend's reads: messages, recipients,
// destinations, episodes, flags, counters, the engine journal and outbox,
// statistics, the open identities and the milters' identity stream.

#include <algorithm>

#include "ledger/redis_ledger.hpp"

namespace retryguard::ledger_detail::redis_backend {

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

Result<std::optional<FollowerPosition>> RedisLedger::load_position(std::string_view source) {
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

Result<std::vector<PendingCopy>> RedisLedger::find_pending_copies(const PendingCopyQuery& q) {
    if (auto st = check_query(q); !st) return counters_.count(Result<std::vector<PendingCopy>>(st.error()));
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

Status RedisLedger::for_each_open_identity(
    const std::function<void(std::string_view message_id, std::string_view fingerprint)>& f) {
    std::string cursor = "0";
    std::vector<std::string> keys;
    do {
        keys.clear();
        auto page = run<int>([&] {
            auto r = eval("open_identities", {P_ + "open-msgs"}, {P_, cursor, "500"});
            if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[1]->type != REDIS_REPLY_ARRAY)
                throw Failure{make_error(ErrorKind::io, "ledger (redis): malformed open_identities reply")};
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

// The stream's end now: {id of the newest entry ("0-0" when none), its seq (0 when none)}.
Result<std::pair<std::string, std::uint64_t>> RedisLedger::stream_tail() {
    return run<std::pair<std::string, std::uint64_t>>([&] {
        auto r = call({"XREVRANGE", P_ + "identities-stream", "+", "-", "COUNT", "1"});
        std::pair<std::string, std::uint64_t> tail{"0-0", 0};
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 1) tail = stream_entry(r->element[0], nullptr);
        return tail;
    });
}

Result<std::vector<RedisLedger::StreamEntry>> RedisLedger::stream_read(const std::string& after,
                                                                       std::chrono::milliseconds wait) {
    return run<std::vector<StreamEntry>>([&] {
        std::vector<StreamEntry> out;
        auto r =
            call({"XREAD", "COUNT", "1000", "BLOCK", std::to_string(std::max<std::int64_t>(1, wait.count())),
                  "STREAMS", P_ + "identities-stream", after});
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

Result<std::optional<MessageInfo>> RedisLedger::get_message(std::string_view queue_id) {
    return run<std::optional<MessageInfo>>([&] { return message_locked(std::string(queue_id)); });
}

Result<std::vector<MessageInfo>> RedisLedger::find_messages_by_message_id(std::string_view message_id) {
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

Result<std::vector<RecipientInfo>> RedisLedger::get_recipients(std::string_view queue_id) {
    return run<std::vector<RecipientInfo>>([&] {
        std::vector<RecipientInfo> out;
        auto r = call({"HGETALL", P_ + "rcpt:" + std::string(queue_id)});
        for (auto& [k, v] : to_fields(r.get())) out.push_back(to_recipient(nlohmann::json::parse(v)));
        std::sort(out.begin(), out.end(),
                  [](const RecipientInfo& a, const RecipientInfo& b) { return a.address < b.address; });
        return out;
    });
}

Result<std::int64_t> RedisLedger::count_deliveries(TimePoint from, TimePoint to) {
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

Result<std::vector<RecipientInfo>> RedisLedger::find_recipients_by_address(std::string_view address,
                                                                           std::size_t limit) {
    return run<std::vector<RecipientInfo>>([&] {
        std::vector<RecipientInfo> out;
        if (limit == 0) return out;
        auto a = normalize_address(address);
        auto r = call(
            {"ZREVRANGE", P_ + "addr:" + a, "0", std::to_string(std::min<std::size_t>(limit, 1u << 30) - 1)});
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

Result<std::optional<DestinationInfo>> RedisLedger::get_destination(DestinationKind kind,
                                                                    std::string_view name) {
    return run<std::optional<DestinationInfo>>([&]() -> std::optional<DestinationInfo> {
        auto f = to_fields(call({"HGETALL", dest_key(kind, name)}).get());
        if (f.empty()) return std::nullopt;
        return to_destination(kind, std::string(name), f);
    });
}

// The members of a sorted set of destinations ("kind\tname": `dests`,
// `epsidx`), in list_destinations' order (kind, name); members of an unknown
// kind are left out. Runs under the connection lock.
std::vector<std::pair<DestinationKind, std::string>> RedisLedger::destination_members(
    const std::string& key, std::optional<DestinationKind> only) {
    std::vector<std::pair<DestinationKind, std::string>> names;
    auto r = call({"ZRANGE", key, "0", "-1"});
    for (std::size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) {
        auto m = str(r->element[i]);
        auto tab = m.find('\t');
        if (tab == std::string::npos) continue;
        auto kind = destination_kind_from_string(m.substr(0, tab));
        if (!kind || (only && *kind != *only)) continue;
        names.emplace_back(*kind, m.substr(tab + 1));
    }
    std::sort(names.begin(), names.end(), [](const auto& a, const auto& b) {
        auto ka = to_string(a.first), kb = to_string(b.first);
        return ka != kb ? ka < kb : a.second < b.second;
    });
    return names;
}

Result<std::vector<DestinationInfo>> RedisLedger::list_destinations(const DestinationFilter& filter) {
    return run<std::vector<DestinationInfo>>([&] {
        const auto names = destination_members(P_ + "dests", filter.kind);
        // Filtered first, then paged, like the SQLite ledger's query. The
        // hashes are read pipelined, a chunk per round trip, until the page is full.
        constexpr std::size_t kChunk = 1000;
        std::vector<DestinationInfo> out;
        std::vector<std::vector<std::string>> reads;
        std::size_t skipped = 0;
        for (std::size_t next = 0; next < names.size() && out.size() < filter.limit; next += kChunk) {
            const std::size_t end = std::min(names.size(), next + kChunk);
            reads.clear();
            for (std::size_t i = next; i < end; ++i)
                reads.push_back({"HGETALL", dest_key(names[i].first, names[i].second)});
            std::size_t i = next;
            call_pipelined(reads, [&](const redisReply* r) {
                const auto& [kind, name] = names[i++];
                if (out.size() >= filter.limit) return;
                auto f = to_fields(r);
                if (f.empty()) return;
                auto d = to_destination(kind, name, f);
                if (filter.state && d.state != *filter.state) return;
                if (filter.open_episode_only && !d.episode) return;
                if (skipped < filter.offset) {
                    ++skipped;
                    return;
                }
                out.push_back(std::move(d));
            });
        }
        return out;
    });
}

Result<std::map<std::string, std::int64_t>> RedisLedger::count_destinations_by_state() {
    return run<std::map<std::string, std::int64_t>>([&] {
        const auto names = destination_members(P_ + "dests", std::nullopt);
        // Two fields of each hash, pipelined. Every writer of a destination's
        // hash sets `kind`: without it the hash is gone, and list_destinations
        // would skip it too.
        std::map<std::string, std::int64_t> out;
        std::vector<std::vector<std::string>> reads;
        reads.reserve(names.size());
        for (const auto& [kind, name] : names)
            reads.push_back({"HMGET", dest_key(kind, name), "kind", "state"});
        call_pipelined(reads, [&](const redisReply* r) {
            if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type == REDIS_REPLY_NIL)
                return;
            ++out[str(r->element[1])];
        });
        return out;
    });
}

// A destination's score in `dests` is its `updated`, which every writer
// raises to at least the time it writes (ingest.lua, verdict_effects.lua,
// set_destination_state.lua, the bulk load's copy of SQLite's column), so a
// destination delivered to since `since` has a score at or after it: only
// those are read, two fields each, pipelined.
Result<std::int64_t> RedisLedger::count_destinations_delivered(DestinationKind kind, TimePoint since) {
    return run<std::int64_t>([&] {
        auto r = call({"ZRANGEBYSCORE", P_ + "dests", std::to_string(to_micros(since)), "+inf"});
        const std::string prefix = std::string(to_string(kind)) + "\t";
        std::vector<std::vector<std::string>> reads;
        for (std::size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) {
            auto m = str(r->element[i]);
            if (m.starts_with(prefix))
                reads.push_back({"HMGET", dest_key(kind, std::string_view(m).substr(prefix.size())), "kind",
                                 "last_success"});
        }
        std::int64_t n = 0;
        call_pipelined(reads, [&](const redisReply* h) {
            if (h->type != REDIS_REPLY_ARRAY || h->elements != 2 || h->element[0]->type == REDIS_REPLY_NIL)
                return;
            auto t = opt_time(str(h->element[1]));
            if (t && *t >= since) ++n;
        });
        return n;
    });
}

namespace {
// One entry of a destination's episode history (a member of `eps:KIND:NAME`).
Episode episode_from_json(const nlohmann::json& j, DestinationKind kind, std::string name) {
    Episode e;
    e.kind = kind;
    e.destination = std::move(name);
    e.first_deferral = from_micros(to_int(jget(j, "first")));
    e.last_deferral = from_micros(to_int(jget(j, "last")));
    e.ended = from_micros(to_int(jget(j, "ended")));
    e.attempts = to_int(jget(j, "attempts"));
    e.messages = to_int(jget(j, "messages"));
    e.categories = static_cast<CategorySet>(to_int(jget(j, "categories")));
    e.last_reply = jget(j, "last_reply");
    e.last_relay = jget(j, "last_relay");
    return e;
}
}  // namespace

Result<std::vector<Episode>> RedisLedger::episode_history(DestinationKind kind, std::string_view name,
                                                          TimePoint from, TimePoint to) {
    return run<std::vector<Episode>>([&] {
        std::vector<std::pair<std::int64_t, Episode>> eps;
        auto r =
            call({"ZRANGE", P_ + "eps:" + std::string(to_string(kind)) + ":" + std::string(name), "0", "-1"});
        for (std::size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) {
            auto j = nlohmann::json::parse(str(r->element[i]));
            Episode e = episode_from_json(j, kind, std::string(name));
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

// Redis keeps no index of episodes by time across destinations: each
// destination's history is a sorted set of its own, scored by the time an
// episode ended, and an episode may end before its first deferral (a success
// logged out of order), so the score cannot bound the first deferral either.
// The destinations with a history are the members of `epsidx` (retention's
// index: ingest and the bulk load add every destination whose history they
// write, prune removes one only with its last episode); their sets are read
// whole, pipelined, a chunk of destinations per round trip, and filtered
// here. The cost follows the history kept, as episode_history's does.
Result<std::vector<Episode>> RedisLedger::episodes_between(TimePoint from, TimePoint to) {
    return run<std::vector<Episode>>([&] {
        const auto names = destination_members(P_ + "epsidx", std::nullopt);
        std::vector<Episode> out;
        std::vector<std::pair<std::int64_t, Episode>> eps;  // one destination's, with their ids
        std::vector<std::vector<std::string>> reads;
        reads.reserve(names.size());
        for (const auto& [kind, name] : names)
            reads.push_back({"ZRANGE", P_ + "eps:" + std::string(to_string(kind)) + ":" + name, "0", "-1"});
        std::size_t at = 0;
        call_pipelined(reads, [&](const redisReply* r) {
            const auto& [kind, name] = names[at++];
            eps.clear();
            for (std::size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) {
                auto j = nlohmann::json::parse(str(r->element[i]));
                const TimePoint first = from_micros(to_int(jget(j, "first")));
                if (first < from || first > to) continue;
                Episode e = episode_from_json(j, kind, name);
                eps.emplace_back(to_int(jget(j, "id")), std::move(e));
            }
            // episode_history's order within the destination.
            std::sort(eps.begin(), eps.end(), [](const auto& a, const auto& b) {
                return a.second.first_deferral != b.second.first_deferral
                           ? a.second.first_deferral < b.second.first_deferral
                           : a.first < b.first;
            });
            for (auto& [id, e] : eps) out.push_back(std::move(e));
        });
        return out;
    });
}

Result<std::vector<Flag>> RedisLedger::list_flags(std::optional<std::string_view> destination, TimePoint now,
                                                  bool include_inactive) {
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

Result<std::map<std::string, std::int64_t>> RedisLedger::verdict_counts() {
    return run<std::map<std::string, std::int64_t>>([&] {
        std::map<std::string, std::int64_t> out;
        for (auto& [k, v] : to_fields(call({"HGETALL", P_ + "verdicts"}).get())) out[k] = to_int(v);
        return out;
    });
}

Result<std::optional<std::string>> RedisLedger::get_state(std::string_view key) {
    return run<std::optional<std::string>>([&]() -> std::optional<std::string> {
        auto r = call({"HGET", P_ + "state", std::string(key)});
        if (r->type != REDIS_REPLY_STRING) return std::nullopt;
        return str(r.get());
    });
}

Result<std::vector<EngineJournalEntry>> RedisLedger::read_journal(std::uint64_t after, std::size_t limit) {
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

Result<std::vector<OutboxEntry>> RedisLedger::read_outbox() {
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

Result<std::uint64_t> RedisLedger::verdict_mark() {
    return run<std::uint64_t>([&]() -> std::uint64_t {
        auto r = call({"GET", P_ + "verdictmark"});
        if (r->type != REDIS_REPLY_STRING) return 0;
        return std::stoull(str(r.get()));
    });
}

Result<LedgerStats> RedisLedger::stats() {
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

std::string RedisLedger::dest_key(DestinationKind kind, std::string_view name) const {
    return P_ + "dest:" + std::string(to_string(kind)) + ":" + std::string(name);
}

// One stream entry [id, [field, value, ...]]: its id and seq; its keys into *e.
std::pair<std::string, std::uint64_t> RedisLedger::stream_entry(const redisReply* entry, StreamEntry* e) {
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

std::optional<MessageInfo> RedisLedger::message_locked(const std::string& queue_id) {
    auto f = to_fields(call({"HGETALL", P_ + "msg:" + queue_id}).get());
    if (f.empty()) return std::nullopt;
    return to_message(f);
}

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

}  // namespace retryguard::ledger_detail::redis_backend
