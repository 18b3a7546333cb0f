// redis_write.cpp -- the Redis ledger backend's writes: a batch of events
// (the ingest script, its arguments packed), identities, follower positions,
// flags, destination states, counters, the engine journal and state, verdict
// effects and retention. Each is one script call (atomic on the server).

#include <algorithm>
#include <charconv>
#include <thread>

#include "ledger/redis_ledger.hpp"

namespace retryguard::ledger_detail::redis_backend {

namespace {

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

}  // namespace

Result<IngestResult> RedisLedger::ingest(std::span<const IngestItem> batch,
                                         const std::optional<FollowerPosition>& position,
                                         BatchJournal whole) {
    // The caller's entry, when it splits into the batch's items (ledger.hpp).
    std::vector<std::string_view> parts;
    const bool split = whole.items == batch.size() && split_journal_batch(whole.entry, batch.size(), parts);
    return run<IngestResult>([&] {
        const EventKeyer keyer = keyer_locked();
        std::vector<std::string> args = {P_, ttl(options_.message_ttl), ttl(options_.key_ttl),
                                         ttl(options_.seen_ttl)};
        args.push_back(position ? position->source : std::string());
        args.push_back(position ? position_json(*position) : std::string());
        args.push_back(std::to_string(batch.size()));
        // one MessagePack array of 21 values per event, in ingest.lua's order
        std::string packed;
        packed.reserve(batch.size() * 160);
        msgpack_array(packed, batch.size());
        // the events' journal parts, one after the other
        std::string journal =
            split ? std::string(whole.entry.substr(kJournalBatchTag.size())) : std::string();
        Op scratch;
        for (std::size_t i = 0; i < batch.size(); ++i) {
            const IngestItem& item = batch[i];
            const Op& op = planned_op(item, keyer, scratch);
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
            std::size_t part = 0;
            if (split) {
                part = parts[i].size();
            } else {
                const std::size_t before = journal.size();
                append_journal_batch_item(journal, item);
                part = journal.size() - before;
            }
            msgpack_uint(packed, static_cast<std::uint32_t>(part));
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

Status RedisLedger::save_position(const FollowerPosition& position) {
    return status(run<int>([&] {
        eval("hash_write", {P_ + "pos"},
             {"set", position.source, position_json(position), ttl(options_.key_ttl)});
        return 0;
    }));
}

Status RedisLedger::record_identity(const MessageIdentity& id) {
    return record_identities(std::span<const MessageIdentity>(&id, 1));
}

Status RedisLedger::record_identities(std::span<const MessageIdentity> identities) {
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
            std::this_thread::sleep_for(std::min(options_.reconnect_min, std::chrono::milliseconds(1000)) +
                                        std::chrono::milliseconds(10));
            st = send();
        }
        if (!st) return st;
    }
    return {};
}

// record_identity's KEYS and ARGV for one message.
std::pair<std::vector<std::string>, std::vector<std::string>> RedisLedger::identity_call(
    const MessageIdentity& id) {
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

Status RedisLedger::set_destination_state(DestinationKind kind, std::string_view name, std::string_view state,
                                          TimePoint at) {
    return status(run<int>([&] {
        eval("set_destination_state", {dest_key(kind, name)},
             {P_, ttl(options_.key_ttl), std::string(to_string(kind)), std::string(name), std::string(state),
              std::to_string(to_micros(at))});
        return 0;
    }));
}

Result<std::int64_t> RedisLedger::set_flag(const Flag& flag) {
    return run<std::int64_t>([&] {
        auto r = eval(
            "set_flag", {P_ + "flags", P_ + "flagseq"},
            {ttl(options_.key_ttl), flag.destination, flag.reason, std::to_string(to_micros(flag.set_at)),
             time_str(flag.expires_at), time_str(flag.cleared_at)});
        return static_cast<std::int64_t>(r->integer);
    });
}

Result<std::int64_t> RedisLedger::clear_flags(std::string_view destination, TimePoint at) {
    return run<std::int64_t>([&] {
        auto r = eval("clear_flags", {P_ + "flags"},
                      {ttl(options_.key_ttl), std::string(destination), std::to_string(to_micros(at))});
        return static_cast<std::int64_t>(r->integer);
    });
}

Result<std::int64_t> RedisLedger::add_verdict_count(std::string_view verdict, std::int64_t delta) {
    return run<std::int64_t>([&] {
        auto r = eval("hash_write", {P_ + "verdicts"},
                      {"incr", std::string(verdict), std::to_string(delta), ttl(options_.key_ttl)});
        return static_cast<std::int64_t>(r->integer);
    });
}

Status RedisLedger::put_state(std::string_view key, std::string_view value) {
    return status(run<int>([&] {
        eval("hash_write", {P_ + "state"},
             {"set", std::string(key), std::string(value), ttl(options_.key_ttl)});
        return 0;
    }));
}

Result<std::uint64_t> RedisLedger::append_journal(std::span<const std::string> entries) {
    return run<std::uint64_t>([&] {
        std::vector<std::string> args = {ttl(options_.key_ttl)};
        args.insert(args.end(), entries.begin(), entries.end());
        auto r = eval("journal_append", {P_ + "journal", P_ + "journalseq"}, args);
        return static_cast<std::uint64_t>(r->integer);
    });
}

Status RedisLedger::save_engine_state(std::string_view key, std::string_view value, std::uint64_t journal_seq,
                                      std::uint64_t outbox_written) {
    return status(run<int>([&] {
        eval("engine_save", {P_ + "state", P_ + "journal", P_ + "outbox"},
             {ttl(options_.key_ttl), std::string(key), std::string(value), std::to_string(journal_seq),
              std::to_string(outbox_written)});
        return 0;
    }));
}

Result<std::uint64_t> RedisLedger::apply_verdict_effects(std::span<const VerdictEffect> effects,
                                                         std::uint64_t outbox_written) {
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

Result<PruneResult> RedisLedger::prune(const RetentionPolicy& policy, TimePoint now) {
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

std::string RedisLedger::ttl(std::chrono::seconds s) {
    return std::to_string(std::max<std::int64_t>(1, s.count()));
}

std::string RedisLedger::position_json(const FollowerPosition& p) {
    nlohmann::json j = {{"device", p.device}, {"inode", p.inode},
                        {"offset", p.offset}, {"head_fingerprint", p.head_fingerprint},
                        {"cursor", p.cursor}, {"lines", p.lines}};
    return j.dump();
}

}  // namespace retryguard::ledger_detail::redis_backend
