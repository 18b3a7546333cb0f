// sqlite_ledger.cpp -- the embedded ledger backend: one SQLite file in WAL mode
// shared by the policy daemon, the milter and the CLI. Owns the schema and its
// migrations and applies ingest batches in one IMMEDIATE transaction together
// with the follower position (exactly-once). Must never let an exception or a
// half-applied batch escape: every public method catches, rolls back and
// returns an Error.
// This file holds the reads and reports, identities, flags, states, the
// verdict effects, prune (in bounded passes) and stats; the schema, the
// statements and the ingest path are in sqlite_schema.cpp,
// sqlite_statements.cpp and sqlite_ingest.cpp (sqlite_internal.hpp).
#include <thread>

#include "ledger/sqlite_internal.hpp"
#include "ledger/sqlite_listings.hpp"
#include "ledger/sqlite_lookups.hpp"
#include "ledger/sqlite_prune.hpp"

namespace retryguard::ledger_detail {
namespace {

MessageInfo read_message(const Query& q) {
    MessageInfo m;
    m.queue_id = q.str(0);
    m.previous_queue_id = q.str(1);
    m.first_queue_id = q.str(2);
    m.next_queue_id = q.str(3);
    m.message_id = q.str(4);
    m.fingerprint = q.str(5);
    m.sender = q.str(6);
    m.size = q.col(7);
    m.nrcpt = static_cast<int>(q.col(8));
    m.arrival = q.time(9);
    m.state = message_state_from_string(q.str(10)).value_or(MessageState::incoming);
    m.updated = from_micros(q.col(11));
    m.finished = q.time(12);
    m.host = q.str(13);
    return m;
}

RecipientInfo read_recipient(const Query& q) {
    RecipientInfo r;
    r.queue_id = q.str(0);
    r.address = q.str(1);
    r.state = recipient_state_from_string(q.str(2)).value_or(RecipientState::pending);
    r.attempts = static_cast<int>(q.col(3));
    r.first_attempt = q.time(4);
    r.last_attempt = q.time(5);
    r.first_deferral = q.time(6);
    r.reply_code = static_cast<int>(q.col(7));
    r.enhanced = q.str(8);
    r.reply_text = q.str(9);
    r.stage = q.str(10);
    r.relay = q.str(11);
    r.category = category_from_string(q.str(12)).value_or(Category::unknown);
    return r;
}

#define DESTINATION_COLUMNS RG_DESTINATION_COLUMNS  // sqlite_listings.hpp

DestinationInfo read_destination(const Query& q) {
    DestinationInfo d;
    d.kind = destination_kind_from_string(q.str(0)).value_or(DestinationKind::domain);
    d.name = q.str(1);
    d.state = q.str(2);
    d.state_changed = q.time(3);
    d.last_success = q.time(4);
    d.last_deferral = q.time(5);
    if (!q.is_null(6)) {
        Episode e;
        e.kind = d.kind;
        e.destination = d.name;
        e.first_deferral = from_micros(q.col(6));
        e.last_deferral = from_micros(q.col(7));
        e.attempts = q.col(8);
        e.messages = q.col(9);
        e.categories = static_cast<CategorySet>(q.col(10));
        e.last_reply = q.str(11);
        e.last_relay = q.str(12);
        d.episode = std::move(e);
    }
    return d;
}

Flag read_flag(const Query& q) {
    Flag f;
    f.id = q.col(0);
    f.destination = q.str(1);
    f.reason = q.str(2);
    f.set_at = from_micros(q.col(3));
    f.expires_at = q.time(4);
    f.cleared_at = q.time(5);
    return f;
}

}  // namespace

SqliteLedger::SqliteLedger(std::string path, LedgerOptions options)
    : path_(std::move(path)), options_(std::move(options)), separate_readers_(!in_memory(path_)) {
    if (!options_.warn) options_.warn = default_warn();
}

SqliteLedger::~SqliteLedger() {
    if (indexes_deferred_) set_bulk_mode(false);
    checkpointer_.reset();  // its thread uses the file; the hook points at it
    idle_readers_.clear();  // before the main connection: the last one to close checkpoints
    for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
    if (db_) sqlite3_close_v2(db_);
}

Result<std::optional<FollowerPosition>> SqliteLedger::load_position(std::string_view source) {
    return read<std::optional<FollowerPosition>>([&]() -> std::optional<FollowerPosition> {
        Query q = stmt(
            "SELECT device, inode, offset, head_fingerprint, cursor, lines FROM positions WHERE source = "
            "?");
        q.text(source);
        if (!q.row()) return std::nullopt;
        FollowerPosition p;
        p.source = std::string(source);
        p.device = static_cast<std::uint64_t>(q.col(0));
        p.inode = static_cast<std::uint64_t>(q.col(1));
        p.offset = static_cast<std::uint64_t>(q.col(2));
        p.head_fingerprint = q.str(3);
        p.cursor = q.str(4);
        p.lines = static_cast<std::uint64_t>(q.col(5));
        return p;
    });
}

Status SqliteLedger::save_position(const FollowerPosition& position) {
    return counters_.count(write([&] { store_position(position); }));
}

Status SqliteLedger::record_identity(const MessageIdentity& id) {
    return record_identities(std::span<const MessageIdentity>(&id, 1));
}

Status SqliteLedger::record_identities(std::span<const MessageIdentity> identities) {
    if (auto st = check_identities(identities); !st) return counters_.count(std::move(st));
    return counters_.count(write([&] {
        if (qid_map_.active()) leave_queue_id_map("a message identity is recorded");  // its upserts need them
        for (const auto& id : identities) store_identity(id);
    }));
}

// An upsert on the queue-id indexes: the message's unfinished row
// (messages_queue_id_live); a finished one of the same queue id, long gone
// from the queue, is another message. While an import in bulk mode (in
// another process) has the indexes dropped (set_bulk_mode), the upsert has no
// conflict target and fails to prepare: the same change is then made by
// an UPDATE, and an INSERT when it found no row (the same outcome under
// the write lock; the lookups scan until the indexes are back).
void SqliteLedger::store_identity(const MessageIdentity& id) {
    const std::int64_t t = to_micros(id.time);
    const std::string message_id = normalize_message_id(id.message_id);
    const std::string sender = normalize_address(id.sender);
    const std::string host = bounded_host(id.host);
    bool unique_indexes = true;
    try {
        Query q = stmt(
            "INSERT INTO messages(queue_id, first_queue_id, message_id, fingerprint, sender, "
            "arrival, updated, host) VALUES(?1, ?1, ?2, ?3, ?4, ?5, ?5, ?6) "
            "ON CONFLICT(queue_id) WHERE finished IS NULL DO UPDATE SET "
            "message_id = COALESCE(excluded.message_id, message_id), "
            "host = CASE WHEN host = '' THEN excluded.host ELSE host END, "
            "fingerprint = COALESCE(excluded.fingerprint, fingerprint), "
            "sender = COALESCE(excluded.sender, sender), "
            "arrival = MIN(COALESCE(arrival, excluded.arrival), excluded.arrival), "
            "updated = MAX(updated, excluded.updated)");
        q.text(id.queue_id).text_or_null(message_id).text_or_null(id.fingerprint).text_or_null(sender);
        q.i64(t).text(host).run();
    } catch (const SqlError& e) {
        if ((e.code & 0xff) != SQLITE_ERROR) throw;
        unique_indexes = false;
        Query u = stmt(
            "UPDATE messages SET message_id = COALESCE(?2, message_id), "
            "host = CASE WHEN host = '' THEN ?6 ELSE host END, fingerprint = COALESCE(?3, fingerprint), "
            "sender = COALESCE(?4, sender), arrival = MIN(COALESCE(arrival, ?5), ?5), "
            "updated = MAX(updated, ?5) WHERE queue_id = ?1 AND finished IS NULL");
        u.text(id.queue_id).text_or_null(message_id).text_or_null(id.fingerprint).text_or_null(sender);
        u.i64(t).text(host).run();
        if (sqlite3_changes(db_) == 0) {
            Query q = stmt(
                "INSERT INTO messages(queue_id, first_queue_id, message_id, fingerprint, sender, "
                "arrival, updated, host) VALUES(?1, ?1, ?2, ?3, ?4, ?5, ?5, ?6)");
            q.text(id.queue_id).text_or_null(message_id).text_or_null(id.fingerprint).text_or_null(sender);
            q.i64(t).text(host).run();
        }
    }
    for (const auto& r : id.recipients) {
        auto address = normalize_address(r);
        if (address.empty()) continue;
        // Keyed by the message's row id (schema version 12), which the upsert above made.
        Query q =
            stmt(unique_indexes
                     ? "INSERT OR IGNORE INTO recipients(message, queue_id, address, domain) "
                       "SELECT id, ?1, ?2, ?3 FROM messages WHERE queue_id = ?1 AND finished IS NULL"
                     : "INSERT INTO recipients(message, queue_id, address, domain) SELECT m.id, ?1, ?2, ?3 "
                       "FROM messages m WHERE m.queue_id = ?1 AND m.finished IS NULL AND NOT EXISTS(SELECT 1 "
                       "FROM recipients "
                       "WHERE message = m.id AND address = ?2)");
        q.text(id.queue_id).text(address).text(domain_of(address)).run();
    }
}

// One statement whatever the number of recipients: the pending recipients
// of the messages with this Message-ID, then the deferred recipients of
// the queued messages with this fingerprint (one index seek each); the
// wanted addresses are picked out here. Copies by Message-ID are few
// (usually none); copies by fingerprint can be many (identical alerts,
// templates). Both halves read only what the queue may be retrying
// (messages_message_id_queued, messages_fingerprint_queued,
// kPendingCopiesSql): their cost follows the queue, not history.
// One statement is its own read transaction: no BEGIN/COMMIT on the
// end-of-message path.
Result<std::vector<PendingCopy>> SqliteLedger::find_pending_copies(const PendingCopyQuery& query) {
    if (auto st = check_query(query); !st)
        return counters_.count(Result<std::vector<PendingCopy>>(st.error()));
    const std::string message_id = normalize_message_id(query.message_id);
    if (message_id.empty() && query.fingerprint.empty()) return std::vector<PendingCopy>{};
    return read_concurrent<std::vector<PendingCopy>>(query.deadline, [&](auto& conn) {
        std::vector<std::string> wanted;
        std::unordered_map<std::string_view, std::size_t> index;
        wanted.reserve(query.recipients.size());
        for (const auto& raw : query.recipients) wanted.push_back(normalize_address(raw));
        for (std::size_t i = 0; i < wanted.size(); ++i) index.emplace(wanted[i], i);
        std::vector<std::optional<PendingCopy>> best(wanted.size());
        Query q = conn.stmt(kPendingCopiesSql);
        q.text_or_null(message_id).text_or_null(query.fingerprint).text(query.exclude_queue_id);
        while (q.row()) {
            auto it = index.find(q.str(10));
            if (it == index.end()) continue;
            PendingCopy c;
            c.recipient = wanted[it->second];
            c.queue_id = q.str(0);
            c.first_queue_id = q.str(1);
            c.destination = q.str(2);
            c.relay = q.str(3);
            c.last_reply = q.str(4);
            c.first_deferral = q.time(5);
            c.last_attempt = q.time(6);
            c.arrival = q.time(7);
            c.attempts = static_cast<int>(q.col(8));
            c.message_state = message_state_from_string(q.str(9)).value_or(MessageState::incoming);
            c.matched_by_message_id = q.col(11) != 0;
            c.host = q.str(12);
            auto& slot = best[it->second];
            // the oldest copy; of one copy, its Message-ID match first
            if (!slot || older(c, *slot) ||
                (c.queue_id == slot->queue_id && c.matched_by_message_id && !slot->matched_by_message_id))
                slot = std::move(c);
        }
        std::vector<PendingCopy> out;
        for (auto& b : best)
            if (b) out.push_back(std::move(*b));
        return out;
    });
}

Status SqliteLedger::for_each_open_identity(
    const std::function<void(std::string_view message_id, std::string_view fingerprint)>& f) {
    auto r = read_concurrent<bool>(std::nullopt, [&](auto& conn) {
        Query q = conn.stmt(
            "SELECT message_id, fingerprint FROM messages "
            "WHERE state IN ('incoming','active','deferred','hold') "
            "AND (message_id IS NOT NULL OR fingerprint IS NOT NULL)");
        while (q.row()) f(q.str(0), q.str(1));
        return true;
    });
    if (!r) return r.error();
    return {};
}

Result<std::optional<MessageInfo>> SqliteLedger::get_message(std::string_view queue_id) {
    return read<std::optional<MessageInfo>>([&]() -> std::optional<MessageInfo> {
        Query q = stmt(kMessageByQueueIdSql);
        q.text(queue_id);
        if (!q.row()) return std::nullopt;
        return read_message(q);
    });
}

Result<std::vector<MessageInfo>> SqliteLedger::find_messages_by_message_id(std::string_view message_id) {
    return read<std::vector<MessageInfo>>([&] {
        std::vector<MessageInfo> out;
        Query q = stmt(kMessagesByMessageIdSql);
        q.text(normalize_message_id(message_id));
        while (q.row()) out.push_back(read_message(q));
        return out;
    });
}

Result<std::vector<RecipientInfo>> SqliteLedger::get_recipients(std::string_view queue_id) {
    return read<std::vector<RecipientInfo>>([&] {
        std::vector<RecipientInfo> out;
        Query q = stmt(kRecipientsByQueueIdSql);
        q.text(queue_id);
        while (q.row()) out.push_back(read_recipient(q));
        return out;
    });
}

Result<std::int64_t> SqliteLedger::count_deliveries(TimePoint from, TimePoint to) {
    return read<std::int64_t>([&] {
        Query q = stmt(
            "SELECT COUNT(*) FROM recipients WHERE state = 'sent' AND last_attempt >= ? AND last_attempt "
            "< ?");
        q.i64(to_micros(from)).i64(to_micros(to));
        return q.row() ? q.col(0) : std::int64_t{0};
    });
}

Result<std::vector<RecipientInfo>> SqliteLedger::find_recipients_by_address(std::string_view address,
                                                                            std::size_t limit) {
    return read<std::vector<RecipientInfo>>([&] {
        std::vector<RecipientInfo> out;
        Query q = stmt(kRecipientsByAddressSql);
        q.text(normalize_address(address))
            .i64(static_cast<std::int64_t>(std::min<std::size_t>(limit, 1u << 30)));
        while (q.row()) out.push_back(read_recipient(q));
        return out;
    });
}

Result<std::optional<DestinationInfo>> SqliteLedger::get_destination(DestinationKind kind,
                                                                     std::string_view name) {
    return read<std::optional<DestinationInfo>>([&]() -> std::optional<DestinationInfo> {
        Query q = stmt("SELECT " DESTINATION_COLUMNS " FROM destinations WHERE kind = ? AND name = ?");
        q.text(to_string(kind)).text(name);
        if (!q.row()) return std::nullopt;
        return read_destination(q);
    });
}

Result<std::vector<DestinationInfo>> SqliteLedger::list_destinations(const DestinationFilter& f) {
    return read<std::vector<DestinationInfo>>([&] {
        std::vector<DestinationInfo> out;
        // One statement per kind of filter (sqlite_listings.hpp), each with
        // the same parameters and order: a few rows of a state or with an
        // open episode are not found by seeking every row in (kind, name) order.
        const char* sql = kListDestinationsSql;
        if (f.state)
            sql = kListDestinationsInStateSql;
        else if (f.open_episode_only)
            sql = kListOpenDestinationsSql;
        Query q = stmt(sql);
        if (f.kind)
            q.text(to_string(*f.kind));
        else
            q.null();
        if (f.state)
            q.text(*f.state);
        else
            q.null();
        // LIMIT -1: every row (SQLite's spelling of no limit).
        constexpr auto kMax = static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max());
        q.i64(f.open_episode_only ? 1 : 0)
            .i64(f.limit >= kMax ? -1 : static_cast<std::int64_t>(f.limit))
            .i64(static_cast<std::int64_t>(std::min(f.offset, kMax)));
        while (q.row()) out.push_back(read_destination(q));
        return out;
    });
}

namespace {
// first_deferral, last_deferral, ended, attempts, messages, categories,
// last_reply, last_relay: the episode columns from column `at` on.
void read_episode_columns(const Query& q, int at, Episode& e) {
    e.first_deferral = from_micros(q.col(at));
    e.last_deferral = from_micros(q.col(at + 1));
    e.ended = from_micros(q.col(at + 2));
    e.attempts = q.col(at + 3);
    e.messages = q.col(at + 4);
    e.categories = static_cast<CategorySet>(q.col(at + 5));
    e.last_reply = q.str(at + 6);
    e.last_relay = q.str(at + 7);
}
}  // namespace

Result<std::vector<Episode>> SqliteLedger::episode_history(DestinationKind kind, std::string_view name,
                                                           TimePoint from, TimePoint to) {
    return read<std::vector<Episode>>([&] {
        std::vector<Episode> out;
        Query q = stmt(
            "SELECT first_deferral, last_deferral, ended, attempts, messages, categories, last_reply, "
            "last_relay FROM episodes WHERE kind = ? AND name = ? AND first_deferral BETWEEN ? AND ? "
            "ORDER BY first_deferral, id");
        q.text(to_string(kind)).text(name).i64(to_micros(from)).i64(to_micros(to));
        while (q.row()) {
            Episode& e = out.emplace_back();
            e.kind = kind;
            e.destination = std::string(name);
            read_episode_columns(q, 0, e);
        }
        return out;
    });
}

Result<std::map<std::string, std::int64_t>> SqliteLedger::count_destinations_by_state() {
    return read<std::map<std::string, std::int64_t>>([&] {
        std::map<std::string, std::int64_t> out;
        Query q = stmt(kCountDestinationsByStateSql);
        while (q.row()) out[q.str(0)] += q.col(1);
        return out;
    });
}

Result<std::int64_t> SqliteLedger::count_destinations_delivered(DestinationKind kind, TimePoint since) {
    return read<std::int64_t>([&] {
        Query q = stmt(kCountDestinationsDeliveredSql);
        q.text(to_string(kind)).i64(to_micros(since));
        return q.row() ? q.col(0) : std::int64_t{0};
    });
}

Result<std::vector<Episode>> SqliteLedger::episodes_between(TimePoint from, TimePoint to) {
    return read<std::vector<Episode>>([&] {
        std::vector<Episode> out;
        {
            // Room for them all up front (a walk of the same index entries):
            // a month's hundreds of thousands are not moved again and again as
            // the vector grows. A count only: a write in between costs nothing.
            Query n = stmt(kCountEpisodesBetweenSql);
            n.i64(to_micros(from)).i64(to_micros(to));
            if (n.row()) out.reserve(static_cast<std::size_t>(std::max<std::int64_t>(n.col(0), 0)));
        }
        Query q = stmt(kEpisodesBetweenSql);
        q.i64(to_micros(from)).i64(to_micros(to));
        while (q.row()) {
            Episode& e = out.emplace_back();
            e.kind = destination_kind_from_string(q.str(0)).value_or(DestinationKind::domain);
            e.destination = q.str(1);
            read_episode_columns(q, 2, e);
        }
        return out;
    });
}

Status SqliteLedger::set_destination_state(DestinationKind kind, std::string_view name,
                                           std::string_view state, TimePoint at) {
    return counters_.count(write([&] {
        Query q = stmt(kSetDestinationState);
        q.text(to_string(kind)).text(name).text(state).i64(to_micros(at)).run();
    }));
}

Result<std::int64_t> SqliteLedger::set_flag(const Flag& flag) {
    std::int64_t id = 0;
    auto st = write([&] {
        Query q = stmt(kInsertFlag);
        q.text(flag.destination).text(flag.reason).i64(to_micros(flag.set_at)).opt(flag.expires_at);
        q.opt(flag.cleared_at).run();
        id = sqlite3_last_insert_rowid(db_);
    });
    if (!st) return counters_.count(Result<std::int64_t>(st.error()));
    return counters_.count(Result<std::int64_t>(id));
}

Result<std::int64_t> SqliteLedger::clear_flags(std::string_view destination, TimePoint at) {
    std::int64_t n = 0;
    auto st = write([&] {
        Query q = stmt(kClearFlags);
        q.i64(to_micros(at)).text(destination).run();
        n = sqlite3_changes(db_);
    });
    if (!st) return counters_.count(Result<std::int64_t>(st.error()));
    return counters_.count(Result<std::int64_t>(n));
}

Result<std::vector<Flag>> SqliteLedger::list_flags(std::optional<std::string_view> destination, TimePoint now,
                                                   bool include_inactive) {
    return read<std::vector<Flag>>([&] {
        std::vector<Flag> out;
        Query q = stmt(
            "SELECT id, destination, reason, set_at, expires_at, cleared_at FROM flags WHERE "
            "(?1 IS NULL OR destination = ?1) AND (?2 = 1 OR (cleared_at IS NULL AND "
            "(expires_at IS NULL OR expires_at > ?3))) ORDER BY id");
        if (destination)
            q.text(*destination);
        else
            q.null();
        q.i64(include_inactive ? 1 : 0).i64(to_micros(now));
        while (q.row()) out.push_back(read_flag(q));
        return out;
    });
}

Result<std::int64_t> SqliteLedger::add_verdict_count(std::string_view verdict, std::int64_t delta) {
    std::int64_t v = 0;
    auto st = write([&] {
        Query q = stmt(kAddVerdictCountReturning);
        q.text(verdict).i64(delta);
        if (q.row()) v = q.col(0);
        q.run();
    });
    if (!st) return counters_.count(Result<std::int64_t>(st.error()));
    return counters_.count(Result<std::int64_t>(v));
}

Result<std::map<std::string, std::int64_t>> SqliteLedger::verdict_counts() {
    return read<std::map<std::string, std::int64_t>>([&] {
        std::map<std::string, std::int64_t> out;
        Query q = stmt("SELECT verdict, count FROM verdict_counts");
        while (q.row()) out[q.str(0)] = q.col(1);
        return out;
    });
}

Status SqliteLedger::put_state(std::string_view key, std::string_view value) {
    return counters_.count(write([&] { store_state(key, value); }));
}

Result<std::optional<std::string>> SqliteLedger::get_state(std::string_view key) {
    return read<std::optional<std::string>>([&]() -> std::optional<std::string> {
        Query q = stmt("SELECT value FROM engine_state WHERE key = ?");
        q.text(key);
        if (!q.row()) return std::nullopt;
        return q.bytes(0);
    });
}

Result<std::vector<EngineJournalEntry>> SqliteLedger::read_journal(std::uint64_t after, std::size_t limit) {
    return read<std::vector<EngineJournalEntry>>([&] {
        std::vector<EngineJournalEntry> out;
        Query q = stmt("SELECT seq, entry FROM engine_journal WHERE seq > ? ORDER BY seq LIMIT ?");
        q.i64(static_cast<std::int64_t>(after)).i64(static_cast<std::int64_t>(limit));
        while (q.row()) out.push_back(EngineJournalEntry{static_cast<std::uint64_t>(q.col(0)), q.bytes(1)});
        return out;
    });
}

Result<std::uint64_t> SqliteLedger::apply_verdict_effects(std::span<const VerdictEffect> effects,
                                                          std::uint64_t outbox_written) {
    std::uint64_t before = 0;
    auto st = write([&] {
        before = load_mark();
        trim_outbox(outbox_written);
        std::uint64_t mark = before;
        std::map<std::string, std::int64_t> counts;
        for (const auto& e : effects) {
            if (e.seq <= before) continue;  // applied before a crash: a replay
            mark = std::max(mark, e.seq);
            ++counts[e.verdict];
            if (!e.line.empty()) {
                Query q = stmt("INSERT OR REPLACE INTO verdict_outbox(seq, at, line) VALUES(?, ?, ?)");
                q.i64(static_cast<std::int64_t>(e.seq)).i64(to_micros(e.at)).text(e.line).run();
            }
            switch (e.action) {
                case VerdictEffect::Action::none: break;
                case VerdictEffect::Action::destination_state: {
                    Query q = stmt(kSetDestinationState);
                    q.text(to_string(e.kind)).text(e.name).text(e.state).i64(to_micros(e.at)).run();
                    break;
                }
                case VerdictEffect::Action::set_flag: {
                    Query q = stmt(kInsertFlag);
                    q.text(e.name).text(e.reason).i64(to_micros(e.at)).opt(e.expires_at).null().run();
                    break;
                }
                case VerdictEffect::Action::clear_flags: {
                    Query q = stmt(kClearFlags);
                    q.i64(to_micros(e.at)).text(e.name).run();
                    break;
                }
            }
        }
        for (const auto& [name, n] : counts) {
            Query q = stmt(kAddVerdictCount);
            q.text(name).i64(n).run();
        }
        if (mark != before) {
            Query q = stmt(
                "INSERT INTO engine_marks(name, value) VALUES('verdicts', ?1) ON CONFLICT(name) DO "
                "UPDATE "
                "SET value = excluded.value");
            q.i64(static_cast<std::int64_t>(mark)).run();
        }
    });
    if (!st) return counters_.count(Result<std::uint64_t>(st.error()));
    return counters_.count(Result<std::uint64_t>(before));
}

Result<std::uint64_t> SqliteLedger::verdict_mark() {
    return read<std::uint64_t>([&] { return load_mark(); });
}

Result<std::vector<OutboxEntry>> SqliteLedger::read_outbox() {
    return read<std::vector<OutboxEntry>>([&] {
        std::vector<OutboxEntry> out;
        Query q = stmt("SELECT seq, at, line FROM verdict_outbox ORDER BY seq");
        while (q.row())
            out.push_back(
                OutboxEntry{static_cast<std::uint64_t>(q.col(0)), from_micros(q.col(1)), q.bytes(2)});
        return out;
    });
}

// Prune runs in passes, each its own IMMEDIATE transaction, so that the write
// lock is free between them and another connection (the policy daemon's log
// follower while its pruner runs, the milter) commits within its busy_timeout
// instead of waiting for the whole prune of a month of mail
// (docs/ledger.md "Retention", docs/performance.md "Prune on a large ledger").
// A pass removes at most kPruneMessages messages with their recipients and
// episode_messages rows. Each pass rewrites most leaf pages of the indexes
// keyed by random values (queue id, message id, address) whatever its size,
// so that small passes multiply that work: on a 60-day ledger 2,000 took 35 %
// more lock time in all than 5,000, whose passes held the lock about 0.25 s
// each on a busy machine, well under the default 2 s busy_timeout.
constexpr std::int64_t kPruneMessages = 5000;
// Episodes, flags, destinations per pass (small rows, one index each).
constexpr std::int64_t kPruneRows = 10000;
// Replay-key pairs per pass: seen_batches rows are one ingest batch's keys
// each (up to about 10,000 pairs, 160 KB), freed whole in about a millisecond.
constexpr std::int64_t kPruneSeenPairs = 100000;
// SQLite's busy handler sleeps at most 100 ms between two attempts: a pause
// that long after a pass lets every writer that waited during it in; after
// a shorter pass, a pause as long as the pass lets one in at least half of the
// time.
constexpr std::chrono::milliseconds kPrunePauseMax{100};

void set_prune_pass_hook(Ledger& ledger, std::function<void()> hook) {
    if (auto* sqlite = dynamic_cast<SqliteLedger*>(&ledger)) sqlite->prune_pass_hook_ = std::move(hook);
}

Result<PruneResult> SqliteLedger::prune(const RetentionPolicy& policy, TimePoint now) {
    PruneResult r;
    const std::int64_t finished_cut = to_micros(now - policy.finished_messages);
    const std::int64_t stale_cut = to_micros(now - policy.stale_messages);
    const std::int64_t ep_cut = to_micros(now - policy.episodes);
    const std::int64_t seen_cut = to_micros(now - policy.seen_events);
    // One pass: `step` returns whether rows may remain. After a pass the thread
    // pauses (kPrunePauseMax) so that a writer polling in its busy handler finds
    // the lock free, not only in the instant between two passes.
    bool first = true;
    auto passes = [&](auto&& step) -> Status {
        for (bool more = true; more;) {
            if (!first && prune_pass_hook_) prune_pass_hook_();
            first = false;
            const auto start = std::chrono::steady_clock::now();
            auto st = write([&] {
                if (qid_map_.active()) leave_queue_id_map("pruning");  // deletes rows the map knows
                dests_.clear();  // deletes destination rows bulk mode keeps
                more = step();
            });
            if (!st) return st;
            if (more)
                std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
                    std::chrono::steady_clock::now() - start, kPrunePauseMax));
        }
        return {};
    };
    // The candidates come from the indexes messages_finished and messages_updated
    // (a range scan each, never the whole table), at most kPruneMessages per pass.
    auto st = passes([&] {
        // By row id: a queue id may name a finished message and, long after,
        // another one still queued (schema version 15).
        exec_bound(
            "CREATE TEMP TABLE IF NOT EXISTS doomed_rows(id INTEGER PRIMARY KEY, queue_id TEXT NOT NULL)",
            {});
        exec_bound("DELETE FROM temp.doomed_rows", {});
        std::int64_t n = exec_bound(
            "INSERT OR IGNORE INTO temp.doomed_rows SELECT id, queue_id FROM messages WHERE finished < ?1 "
            "LIMIT ?2",
            {finished_cut, kPruneMessages});
        if (n < kPruneMessages)
            n += exec_bound(
                "INSERT OR IGNORE INTO temp.doomed_rows SELECT id, queue_id FROM messages WHERE updated < ?1 "
                "AND (finished IS NULL OR finished >= ?2) LIMIT ?3",
                {stale_cut, finished_cut, kPruneMessages - n});
        if (n == 0) return false;
        r.recipients +=
            exec_bound("DELETE FROM recipients WHERE message IN (SELECT id FROM temp.doomed_rows)", {});
        r.messages += exec_bound("DELETE FROM messages WHERE id IN (SELECT id FROM temp.doomed_rows)", {});
        exec_bound("DELETE FROM episode_messages WHERE queue_id IN (SELECT queue_id FROM temp.doomed_rows)",
                   {});
        exec_bound("DELETE FROM temp.doomed_rows", {});
        return n == kPruneMessages;  // fewer: both candidate queries ran dry
    });
    // Episodes, flags, destinations: at most kPruneRows of one table per pass.
    auto rows = [&](const char* sql, std::int64_t* removed) {
        return passes([&] {
            const auto n = exec_bound(sql, {ep_cut, kPruneRows});
            if (removed) *removed += n;
            return n == kPruneRows;
        });
    };
    if (st)
        st = rows("DELETE FROM episodes WHERE id IN (SELECT id FROM episodes WHERE ended < ?1 LIMIT ?2)",
                  &r.episodes);
    if (st)
        st = rows(
            "DELETE FROM flags WHERE id IN (SELECT id FROM flags WHERE (cleared_at IS NOT NULL AND "
            "cleared_at < ?1) OR (expires_at IS NOT NULL AND expires_at < ?1) LIMIT ?2)",
            &r.flags);
    if (st)
        st = rows(
            "DELETE FROM destinations WHERE id IN (SELECT id FROM destinations WHERE "
            "ep_first IS NULL AND updated < ?1 AND (state = '' OR state = 'recovered') LIMIT ?2)",
            nullptr);
    if (st)
        st = passes([&] {
            bool more = false;
            r.seen_events += prune_seen(seen_cut, kPruneSeenPairs, more);
            return more;
        });
    if (!st) return counters_.count(Result<PruneResult>(st.error()));
    return counters_.count(Result<PruneResult>(r));
}

Result<LedgerStats> SqliteLedger::stats() {
    return read<LedgerStats>([&] {
        LedgerStats s;
        s.backend = "sqlite";
        s.location = path_;
        auto scalar = [&](const char* sql) {
            Query q = stmt(sql);
            return q.row() ? q.col(0) : 0;
        };
        s.messages = scalar("SELECT COUNT(*) FROM messages");
        s.pending_messages = scalar("SELECT COUNT(*) FROM messages WHERE finished IS NULL");
        s.recipients = scalar("SELECT COUNT(*) FROM recipients");
        s.destinations = scalar("SELECT COUNT(*) FROM destinations");
        s.open_episodes = scalar("SELECT COUNT(*) FROM destinations WHERE ep_first IS NOT NULL");
        s.episodes = scalar("SELECT COUNT(*) FROM episodes");
        s.flags = scalar("SELECT COUNT(*) FROM flags WHERE cleared_at IS NULL");
        s.seen_events = scalar("SELECT COUNT(*) FROM seen_events") +
                        scalar("SELECT COALESCE(SUM(count), 0) FROM seen_batches");
        s.bytes = scalar("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()");
        s.schema_version = static_cast<int>(scalar("SELECT MAX(version) FROM schema_version"));
        return s;
    });
}

bool SqliteLedger::older(const PendingCopy& a, const PendingCopy& b) {
    auto ka = a.arrival.value_or(a.first_deferral.value_or(TimePoint::max()));
    auto kb = b.arrival.value_or(b.first_deferral.value_or(TimePoint::max()));
    if (ka != kb) return ka < kb;
    return a.queue_id < b.queue_id;
}

void SqliteLedger::store_state(std::string_view key, std::string_view value) {
    Query q = stmt(
        "INSERT INTO engine_state(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET "
        "value = excluded.value");
    q.text_ref(key).blob_ref(value).run();  // both outlive the statement
}

// Usually a no-op probe of an empty or one-commit table (the primary key).
void SqliteLedger::trim_outbox(std::uint64_t written) {
    if (written == 0) return;
    Query q = stmt("DELETE FROM verdict_outbox WHERE seq <= ?");
    q.i64(static_cast<std::int64_t>(written)).run();
}

std::uint64_t SqliteLedger::load_mark() {
    Query q = stmt("SELECT value FROM engine_marks WHERE name = 'verdicts'");
    return q.row() ? static_cast<std::uint64_t>(q.col(0)) : 0;
}

Result<std::unique_ptr<Ledger>> open_sqlite_ledger(const std::string& path, const LedgerOptions& options) {
    try {
        auto ledger = std::make_unique<SqliteLedger>(path, options);
        if (auto st = ledger->open(); !st) return st.error();
        return std::unique_ptr<Ledger>(std::move(ledger));
    } catch (const std::exception& e) {
        return make_error(ErrorKind::internal, std::string("ledger (sqlite): ") + e.what());
    }
}

}  // namespace retryguard::ledger_detail
