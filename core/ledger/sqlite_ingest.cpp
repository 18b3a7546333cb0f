// sqlite_ingest.cpp -- the SQLite ledger's write path for ingest batches:
// replay protection (seen_batches), the batch's message, recipient and
// destination rows changed in memory and written once, the queue-id map of
// bulk mode, the engine journal entry, all in the batch's one IMMEDIATE
// transaction with its follower position (exactly-once, ingest.hpp). Must
// never leave a half-applied batch: an error rolls the whole batch back.
#include "ledger/sqlite_internal.hpp"

namespace retryguard::ledger_detail {

Result<IngestResult> SqliteLedger::ingest(std::span<const IngestItem> batch,
                                          const std::optional<FollowerPosition>& position,
                                          BatchJournal journal) {
    IngestResult result;
    // The caller's entry, when made for the batch's items (ledger.hpp).
    const bool whole = !journal.entry.empty() && journal.items == batch.size();
    auto st = write([&] {
        result = {};
        journal_.assign(kJournalBatchTag);
        clear_rows();
        drop_touched_destinations();
        if (!dest_cache_.active) dests_.clear();
        qid_map_.discard_staged();
        if (qid_map_.active() || dest_cache_.active) {
            const std::int64_t version = data_version();
            // Another connection wrote since: rows the map does not know may
            // exist, and the kept destination rows may be stale.
            if (qid_map_.active() && version != qid_map_.version())
                leave_queue_id_map("another connection wrote to the ledger");
            if (dest_cache_.active && version != dest_cache_.version) {
                dests_.clear();
                dest_cache_.version = version;
            }
        }
        load_seen(batch);
        Op scratch;
        for (std::size_t i = 0; i < batch.size(); ++i) {
            const IngestItem& item = batch[i];
            prefetch_destinations(batch, i);
            const Op& op = planned_op(item, keyer_, scratch);
            if (!seen_.insert(op.time, op.key)) {
                ++result.duplicates;
                result.fresh.push_back(false);
                continue;
            }
            fresh_keys_.emplace_back(op.time, op.key);
            apply(op);
            if (!whole) append_journal_batch_item(journal_, item);  // else below
            ++result.applied;
            result.fresh.push_back(true);
        }
        flush_rows();
        flush_destinations();
        store_seen();
        if (position) store_position(*position);
        if (result.applied > 0) {
            // The engine journal: the batch's fresh events as one entry, in the
            // batch's transaction, so the engine is fed each exactly once (ingest.hpp).
            // The caller's entry as it is, or the fresh items' parts of it.
            // Stored compressed (stored_journal_entry): the caller's form when
            // it made one for the entry as it is, else made here.
            if (whole && result.duplicates > 0) fresh_journal_entry(batch, journal, result.fresh, journal_);
            const bool as_made = whole && result.duplicates == 0;
            const std::string_view entry = as_made ? journal.entry : journal_;
            const std::string_view stored = as_made && !journal.stored.empty()
                                                ? journal.stored
                                                : stored_journal_entry(entry, journal_compressed_);
            Query q = stmt("INSERT INTO engine_journal(entry) VALUES(?)");
            q.blob_ref(stored).run();
            result.journal_seq = static_cast<std::uint64_t>(sqlite3_last_insert_rowid(db_));
        }
    });
    clear_rows();
    if (!st) {
        // Rolled back with the batch: the map stays as committed, and the
        // destination rows the batch touched are read again.
        drop_touched_destinations();
        qid_map_.discard_staged();
        return counters_.count(Result<IngestResult>(st.error()));
    }
    for (auto* d : dests_touched_) d->value.touched = false;
    dests_touched_.clear();
    if (dest_cache_.unsound) {
        options_.warn("bulk mode: a kept destination row was missing: reading destinations again");
        dest_cache_.unsound = false;
        dests_.clear();
    }
    if (!dest_cache_.active) dests_.clear();
    qid_map_.commit_staged(options_.sqlite_bulk_settled);
    counters_.events += result.applied;
    counters_.duplicates += result.duplicates;
    return counters_.count(Result<IngestResult>(result));
}

Result<std::uint64_t> SqliteLedger::append_journal(std::span<const std::string> entries) {
    std::uint64_t first = 0;
    auto st = write([&] {
        first = 0;
        for (const auto& e : entries) {
            Query q = stmt("INSERT INTO engine_journal(entry) VALUES(?)");
            q.blob(e).run();
            if (first == 0) first = static_cast<std::uint64_t>(sqlite3_last_insert_rowid(db_));
        }
    });
    if (!st) return counters_.count(Result<std::uint64_t>(st.error()));
    return counters_.count(Result<std::uint64_t>(first));
}

Status SqliteLedger::save_engine_state(std::string_view key, std::string_view value,
                                       std::uint64_t journal_seq, std::uint64_t outbox_written) {
    return counters_.count(write([&] {
        store_state(key, value);
        exec_bound("DELETE FROM engine_journal WHERE seq <= ?", {static_cast<std::int64_t>(journal_seq)});
        trim_outbox(outbox_written);
    }));
}

void SqliteLedger::store_position(const FollowerPosition& p) {
    Query q = stmt(
        "INSERT INTO positions(source, device, inode, offset, head_fingerprint, cursor, lines) "
        "VALUES(?, ?, ?, ?, ?, ?, ?) ON CONFLICT(source) DO UPDATE SET device = excluded.device, "
        "inode = excluded.inode, offset = excluded.offset, head_fingerprint = excluded.head_fingerprint, "
        "cursor = excluded.cursor, lines = excluded.lines");
    q.text(p.source)
        .i64(static_cast<std::int64_t>(p.device))
        .i64(static_cast<std::int64_t>(p.inode))
        .i64(static_cast<std::int64_t>(p.offset))
        .text(p.head_fingerprint)
        .text(p.cursor)
        .i64(static_cast<std::int64_t>(p.lines))
        .run();
}

// seen_ := the stored pairs within the batch's time span.
void SqliteLedger::load_seen(std::span<const IngestItem> batch) {
    seen_.clear();
    fresh_keys_.clear();
    if (batch.empty()) return;
    std::int64_t lo = to_micros(batch.front().event.time), hi = lo;
    for (const auto& item : batch) {
        const std::int64_t t = to_micros(item.event.time);
        lo = std::min(lo, t);
        hi = std::max(hi, t);
    }
    {
        Query q = stmt("SELECT keys FROM seen_batches WHERE last >= ?1 AND first <= ?2");
        q.i64(lo).i64(hi);
        while (q.row()) {
            const std::string keys = q.bytes(0);
            const auto* p = reinterpret_cast<const unsigned char*>(keys.data());
            for (std::size_t i = 0; i + 16 <= keys.size(); i += 16) {
                const auto t = static_cast<std::int64_t>(get_u64(p + i));
                if (t >= lo && t <= hi) seen_.insert(t, get_u64(p + i + 8));
            }
        }
    }
    Query q = stmt("SELECT time, key FROM seen_events WHERE time >= ?1 AND time <= ?2");
    q.i64(lo).i64(hi);
    while (q.row()) seen_.insert(q.col(0), static_cast<std::uint64_t>(q.col(1)));
}

void SqliteLedger::store_seen() {
    if (fresh_keys_.empty()) return;
    std::int64_t lo = fresh_keys_.front().first, hi = lo;
    seen_blob_.clear();
    seen_blob_.reserve(fresh_keys_.size() * 16);
    for (const auto& [t, key] : fresh_keys_) {
        lo = std::min(lo, t);
        hi = std::max(hi, t);
        put_u64(seen_blob_, static_cast<std::uint64_t>(t));
        put_u64(seen_blob_, key);
    }
    Query q = stmt("INSERT INTO seen_batches(first, last, count, keys) VALUES(?, ?, ?, ?)");
    q.i64(lo).i64(hi).i64(static_cast<std::int64_t>(fresh_keys_.size())).blob_ref(seen_blob_).run();
    fresh_keys_.clear();
}

// One bounded pass of prune over the replay keys: drops the pairs older than
// `cut`, whole rows oldest first up to about `budget` pairs (a row is one
// ingest batch's keys, so the budget bounds the bytes freed, at least one row),
// then, once no whole row is left, the old pairs of the rows that straddle it
// and at most `budget` legacy seen_events rows. `more` is set when pairs older
// than `cut` may remain. Returns how many pairs went.
std::int64_t SqliteLedger::prune_seen(std::int64_t cut, std::int64_t budget, bool& more) {
    std::int64_t dropped = 0;
    more = false;
    {
        std::vector<std::int64_t> ids;
        {
            Query q = stmt("SELECT id, count FROM seen_batches WHERE last < ? ORDER BY last");
            q.i64(cut);
            while (q.row()) {
                if (!ids.empty() && dropped + q.col(1) > budget) {
                    more = true;
                    break;
                }
                ids.push_back(q.col(0));
                dropped += q.col(1);
            }
        }
        for (auto id : ids) exec_bound("DELETE FROM seen_batches WHERE id = ?1", {id});
        if (more) return dropped;
    }
    std::vector<std::pair<std::int64_t, std::string>> straddling;
    {
        Query q = stmt("SELECT id, keys FROM seen_batches WHERE first < ?1 AND last >= ?1");
        q.i64(cut);
        while (q.row()) straddling.emplace_back(q.col(0), q.bytes(1));
    }
    for (const auto& [id, keys] : straddling) {
        std::string kept;
        std::int64_t n = 0, lo = 0, hi = 0;
        const auto* p = reinterpret_cast<const unsigned char*>(keys.data());
        for (std::size_t i = 0; i + 16 <= keys.size(); i += 16) {
            const auto t = static_cast<std::int64_t>(get_u64(p + i));
            if (t < cut) {
                ++dropped;
                continue;
            }
            lo = n == 0 ? t : std::min(lo, t);
            hi = n == 0 ? t : std::max(hi, t);
            ++n;
            kept.append(keys, i, 16);
        }
        Query q = stmt("UPDATE seen_batches SET first = ?, last = ?, count = ?, keys = ? WHERE id = ?");
        q.i64(lo).i64(hi).i64(n).blob(kept).i64(id).run();
    }
    const std::int64_t legacy = exec_bound(
        "DELETE FROM seen_events WHERE (time, key) IN "
        "(SELECT time, key FROM seen_events WHERE time < ?1 ORDER BY time LIMIT ?2)",
        {cut, budget});
    more = legacy == budget;
    return dropped + legacy;
}

// A queue id the queue-id map retired (finished over an hour of log time
// ago) is logged again: its rows are found by the indexes from now on.
void SqliteLedger::leave_map_if_retired(const std::string& queue_id) {
    if (qid_map_.active() && qid_map_.retired(queue_id))
        leave_queue_id_map("finished queue id " + queue_id + " logged again");
}

// The row of `queue_id`, created (as the first INSERT of one of its events
// would) when the table has none; `updated` raised to t.
//
// Without the queue-id map, the row Postfix still holds is one lookup in the
// small index of unfinished rows (messages_queue_id_live). Should there be
// none, the queue id is either new (nearly always: the first line of each
// message) or that of a finished message logged again, such as an expired
// message's bounce notice and removal after its expiry: queue_ids_ tells
// the two apart without asking every block of messages_block_queue_id for
// each new message. It holds a hash of every queue id the table held when it
// was built, and of each row this connection makes or reads since. Only a
// finished row another process wrote since escapes it: a line of that queue
// id logged later still (rare) then starts a row of its own.
SqliteLedger::MessageRow& SqliteLedger::message_row(const std::string& queue_id, std::int64_t t) {
    auto it = msg_index_.find(queue_id);
    if (it == msg_index_.end()) {
        MessageRow row;
        // With the queue-id map, by row id or not at all (a queue id it does not know has no row).
        const QueueIdMap::Entry* known = nullptr;
        leave_map_if_retired(queue_id);
        if (qid_map_.active()) known = qid_map_.find(queue_id);
#define RG_INGEST_MESSAGE_COLUMNS                                                             \
    "id, first_queue_id, previous_queue_id, next_queue_id, message_id, fingerprint, sender, " \
    "size, nrcpt, arrival, state, updated, finished, host"
        auto load = [&](const char* sql, bool by_id) {
            Query q = stmt(sql);
            if (by_id)
                q.i64(known->message);
            else
                q.text(queue_id);
            if (!q.row()) return false;
            row.id = q.col(0);
            row.first_queue_id = q.str(1);
            row.previous_queue_id = opt_str(q, 2);
            row.next_queue_id = opt_str(q, 3);
            row.message_id = opt_str(q, 4);
            row.fingerprint = opt_str(q, 5);
            row.sender = opt_str(q, 6);
            row.size = q.col(7);
            row.nrcpt = q.col(8);
            row.arrival = opt_i64(q, 9);
            row.state = q.str(10);
            row.updated = q.col(11);
            row.finished = opt_i64(q, 12);
            row.host = q.str(13);
            return true;
        };
        row.queue_id = queue_id;
        bool found = false;
        if (known && known->message != 0) {
            found = load("SELECT " RG_INGEST_MESSAGE_COLUMNS " FROM messages WHERE id = ?", true);
        } else if (!qid_map_.active()) {
            found =
                load(RG_MESSAGE_LIVE(RG_INGEST_MESSAGE_COLUMNS), false) ||
                (queue_id_ever_seen(queue_id) && load(RG_MESSAGE_NEWEST(RG_INGEST_MESSAGE_COLUMNS), false));
            queue_ids_.insert(hash32(queue_id));  // read, or about to be made
        }
#undef RG_INGEST_MESSAGE_COLUMNS
        if (!found) {
            row.first_queue_id = queue_id;
            row.updated = t;
        }
        it = msg_index_.emplace(queue_id, msgs_.size()).first;
        msgs_.push_back(std::move(row));
    }
    MessageRow& row = msgs_[it->second];
    row.updated = std::max(row.updated, t);
    row.dirty = true;
    return row;
}

// Whether the table may hold a row of `queue_id` (see message_row): false
// only when it holds none. The first call reads every queue id of the table
// once (a scan of messages_block_queue_id: 0.2-0.7 s for 1.35 million
// messages) and keeps their hashes (queue_ids_).
bool SqliteLedger::queue_id_ever_seen(const std::string& queue_id) {
    if (!queue_ids_built_) {
        Query q = stmt("SELECT queue_id FROM messages");
        while (q.row()) queue_ids_.insert(hash32(q.text_view(0)));
        queue_ids_built_ = true;
    }
    return queue_ids_.contains(hash32(queue_id));
}

// The row id of `queue_id`'s message in the table; 0 when the table has
// none. Every caller has touched the message's row in this batch first
// (message_row), so this is a lookup in the batch's rows; the table is only
// asked should one not have. Callers with the queue-id map use its row ids
// instead.
std::int64_t SqliteLedger::stored_message_id(const std::string& queue_id) {
    if (auto it = msg_index_.find(queue_id); it != msg_index_.end()) return msgs_[it->second].id;
    Query q = stmt(RG_MESSAGE_BY_QUEUE_ID("id"));
    q.text(queue_id);
    return q.row() ? q.col(0) : 0;
}

// The row of (queue_id, address), loaded on first touch; nullptr when the
// table has none.
SqliteLedger::RecipientRow* SqliteLedger::recipient_row(const std::string& queue_id,
                                                        const std::string& address) {
    std::string key = recipient_key(queue_id, address);
    auto it = rcpt_index_.find(key);
    if (it != rcpt_index_.end()) return it->second == kNoRow ? nullptr : &rcpts_[it->second];
    if (rcpts_loaded_.contains(queue_id)) {
        rcpt_index_.emplace(std::move(key), kNoRow);
        return nullptr;
    }
    leave_map_if_retired(queue_id);
    std::int64_t id = 0;
    if (qid_map_.active()) {
        // With the queue-id map, by row id or not at all.
        if (const auto* known = qid_map_.find(queue_id))
            for (const auto& [a, rid] : known->recipients)
                if (a == address) id = rid;
        if (id == 0) {
            rcpt_index_.emplace(std::move(key), kNoRow);
            return nullptr;
        }
    }
    // Without the map, by the message's row id (schema version 12): a message
    // the table does not hold has no recipient rows there either.
    const std::int64_t message = id != 0 ? 0 : stored_message_id(queue_id);
    if (id == 0 && message == 0) {
        rcpt_index_.emplace(std::move(key), kNoRow);
        return nullptr;
    }
    Query q =
        stmt(id != 0 ? "SELECT " RECIPIENT_ROW_COLUMNS " FROM recipients WHERE id = ?"
                     : "SELECT " RECIPIENT_ROW_COLUMNS " FROM recipients WHERE message = ? AND address = ?");
    if (id != 0)
        q.i64(id);
    else
        q.i64(message).text(address);
    if (!q.row()) {
        rcpt_index_.emplace(std::move(key), kNoRow);
        return nullptr;
    }
    rcpt_index_.emplace(std::move(key), rcpts_.size());
    rcpts_.push_back(read_recipient_row(q));
    return &rcpts_.back();
}

SqliteLedger::RecipientRow SqliteLedger::read_recipient_row(const Query& q) {
    RecipientRow r;
    r.id = q.col(0);
    r.queue_id = q.str(1);
    r.address = q.str(2);
    r.domain = q.str(3);
    r.state = q.str(4);
    r.attempts = q.col(5);
    r.first_attempt = opt_i64(q, 6);
    r.last_attempt = opt_i64(q, 7);
    r.first_deferral = opt_i64(q, 8);
    r.reply_code = q.col(9);
    r.enhanced = q.str(10);
    r.reply_text = q.str(11);
    r.stage = q.str(12);
    r.relay = q.str(13);
    r.category = q.str(14);
    return r;
}

// Every recipient row of `queue_id` (table and batch), in address order.
std::vector<std::size_t> SqliteLedger::recipients_of(const std::string& queue_id) {
    if (!rcpts_loaded_.contains(queue_id)) {
        leave_map_if_retired(queue_id);
        rcpts_loaded_.insert(queue_id);
        auto take = [&](RecipientRow r) {
            std::string key = recipient_key(queue_id, r.address);
            auto it = rcpt_index_.find(key);
            if (it != rcpt_index_.end() && it->second != kNoRow) return;  // the batch's copy is newer
            if (it != rcpt_index_.end())
                it->second = rcpts_.size();
            else
                rcpt_index_.emplace(std::move(key), rcpts_.size());
            rcpts_.push_back(std::move(r));
        };
        if (qid_map_.active()) {
            // With the queue-id map: each row it knows, by its id.
            if (const auto* known = qid_map_.find(queue_id))
                for (const auto& [address, id] : known->recipients) {
                    Query q = stmt("SELECT " RECIPIENT_ROW_COLUMNS " FROM recipients WHERE id = ?");
                    q.i64(id);
                    if (q.row()) take(read_recipient_row(q));
                }
        } else if (const std::int64_t message = stored_message_id(queue_id); message != 0) {
            Query q = stmt("SELECT " RECIPIENT_ROW_COLUMNS " FROM recipients WHERE message = ?");
            q.i64(message);
            while (q.row()) take(read_recipient_row(q));
        }
    }
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < rcpts_.size(); ++i)
        if (rcpts_[i].queue_id == queue_id) out.push_back(i);
    std::sort(out.begin(), out.end(),
              [&](std::size_t a, std::size_t b) { return rcpts_[a].address < rcpts_[b].address; });
    return out;
}

void SqliteLedger::set_message_state(const std::string& queue_id, std::int64_t t, const char* state,
                                     bool finishes) {
    MessageRow& m = message_row(queue_id, t);
    if (m.finished) return;
    m.state = state;
    if (finishes) m.finished = t;
}

void SqliteLedger::apply(const Op& op) {
    // The log's host field names the host that holds the queue id; it wins
    // over the name the milter recorded.
    if (op.kind != OpKind::none && !op.host.empty()) {
        MessageRow& m = message_row(op.queue_id, op.time);
        if (m.host != op.host) m.host = op.host;
    }
    switch (op.kind) {
        case OpKind::none: return;
        case OpKind::client: {
            MessageRow& m = message_row(op.queue_id, op.time);
            m.arrival = m.arrival ? std::min(*m.arrival, op.time) : op.time;
            return;
        }
        case OpKind::pickup: return apply_pickup(op);
        case OpKind::message_id: {
            MessageRow& m = message_row(op.queue_id, op.time);
            if (!op.resent || !m.message_id) m.message_id = op.text;
            return;
        }
        case OpKind::queue_active: {
            MessageRow& m = message_row(op.queue_id, op.time);
            m.sender = op.text;
            m.size = op.size;
            m.nrcpt = op.nrcpt;
            if (!m.arrival) m.arrival = op.time;
            if (!m.finished) m.state = "active";
            return;
        }
        case OpKind::delivery: return apply_delivery(op);
        case OpKind::removed: return set_message_state(op.queue_id, op.time, "gone", true);
        case OpKind::expired: {
            set_message_state(op.queue_id, op.time, "expired", true);
            for (std::size_t i : recipients_of(op.queue_id)) {
                RecipientRow& r = rcpts_[i];
                if (r.state != "pending") continue;
                r.state = "expired";
                r.dirty = true;
            }
            return;
        }
        case OpKind::hold: return set_message_state(op.queue_id, op.time, "hold", false);
        case OpKind::release: return set_message_state(op.queue_id, op.time, "deferred", false);
        case OpKind::rejected: return set_message_state(op.queue_id, op.time, "rejected", true);
    }
}

void SqliteLedger::apply_pickup(const Op& op) {
    {
        MessageRow& m = message_row(op.queue_id, op.time);
        if (!op.other_id.empty()) m.previous_queue_id = op.other_id;
        m.sender = op.text;
        m.arrival = m.arrival ? std::min(*m.arrival, op.time) : op.time;
    }
    if (op.other_id.empty() || op.other_id == op.queue_id) return;
    // postsuper -r: the same message under a new queue id. The successor inherits
    // the identity and the still-pending recipients with their history, so the
    // milter keeps recognising it and attempts keep counting.
    MessageRow& old = message_row(op.other_id, op.time);
    MessageRow& m = msgs_[msg_index_.at(op.queue_id)];  // message_row may have moved it
    m.first_queue_id = old.first_queue_id;
    if (!m.message_id) m.message_id = old.message_id;
    if (!m.fingerprint) m.fingerprint = old.fingerprint;
    if (old.arrival) m.arrival = old.arrival;
    if (m.size < 0) m.size = old.size;
    old.state = "requeued";
    old.next_queue_id = op.queue_id;
    if (!old.finished) old.finished = op.time;
    bool deferred = false;
    for (std::size_t i : recipients_of(op.other_id)) {
        if (rcpts_[i].state != "pending") continue;
        const std::string address = rcpts_[i].address;      // recipient_row may grow rcpts_
        if (recipient_row(op.queue_id, address)) continue;  // INSERT OR IGNORE
        RecipientRow copy = rcpts_[i];
        copy.id = 0;
        copy.queue_id = op.queue_id;
        copy.dirty = true;
        deferred = deferred || copy.first_deferral.has_value();
        rcpt_index_[recipient_key(copy.queue_id, copy.address)] = rcpts_.size();
        rcpts_.push_back(std::move(copy));
    }
    // A successor that carries deferred recipients is a copy the queue is
    // retrying from its first line on, before its next attempt is logged
    // (the lookups by fingerprint read only queued states: a resend in
    // between must still meet it).
    MessageRow& successor = msgs_[msg_index_.at(op.queue_id)];
    if (deferred && successor.state == "incoming" && !successor.finished) successor.state = "deferred";
}

void SqliteLedger::apply_delivery(const Op& op) {
    const std::string first = message_row(op.queue_id, op.time).first_queue_id;
    const char* rstate = op.outcome == Outcome::sent       ? "sent"
                         : op.outcome == Outcome::deferred ? "pending"
                         : op.outcome == Outcome::bounced  ? "bounced"
                                                           : "expired";
    RecipientRow* r = recipient_row(op.queue_id, op.recipient);
    if (!r) {
        rcpt_index_[recipient_key(op.queue_id, op.recipient)] = rcpts_.size();
        r = &rcpts_.emplace_back();
        r->queue_id = op.queue_id;
        r->address = op.recipient;
        r->domain = op.domain;
    }
    r->state = rstate;
    r->attempts += 1;
    r->first_attempt = r->first_attempt ? std::min(*r->first_attempt, op.time) : op.time;
    r->last_attempt = r->last_attempt ? std::max(*r->last_attempt, op.time) : op.time;
    if (!r->first_deferral && op.outcome == Outcome::deferred) r->first_deferral = op.time;
    r->reply_code = op.code;
    r->enhanced = op.enhanced;
    r->reply_text = op.reason;
    r->stage = op.stage;
    r->relay = op.relay;
    r->category = std::string(to_string(op.category));
    r->dirty = true;
    if (op.outcome == Outcome::deferred) {
        MessageRow& m = msgs_[msg_index_.at(op.queue_id)];
        if (!m.finished && m.state != "hold") m.state = "deferred";
    }
    for (int i = 0; i < 2; ++i) {
        const char* kind = i == 0 ? "domain" : "relay";
        const std::string& name = i == 0 ? op.domain : op.relay;
        if (name.empty()) continue;
        if (op.outcome == Outcome::deferred)
            record_deferral(kind, name, i == 0 ? op.domain_hash : op.relay_hash, first, op);
        else if (op.outcome == Outcome::sent)
            record_success(kind, name, i == 0 ? op.domain_hash : op.relay_hash, op.time);
    }
}

// Writes the batch's rows: new ones in first-touch order (ids as before),
// changed ones in place.
void SqliteLedger::flush_rows() {
    auto opt_text = [](Query& q, const std::optional<std::string>& v) -> Query& {
        return v ? q.text_ref(*v) : q.null();
    };
    auto opt_int = [](Query& q, const std::optional<std::int64_t>& v) -> Query& {
        return v ? q.i64(*v) : q.null();
    };
    // A new recipient's message row is in the batch (apply touches it
    // first); should one not be, it is read (or made) now, so that every
    // recipient row is inserted with its message's row id.
    for (const RecipientRow& r : rcpts_)
        if (r.dirty && r.id == 0 && !msg_index_.contains(r.queue_id)) (void)message_row(r.queue_id, 0);
    for (MessageRow& m : msgs_) {
        if (!m.dirty) continue;
        Query q = stmt(
            m.id == 0 ? "INSERT INTO messages(first_queue_id, previous_queue_id, next_queue_id, "
                        "message_id, fingerprint, sender, size, nrcpt, arrival, state, updated, finished, "
                        "host, "
                        "queue_id) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                      : "UPDATE messages SET first_queue_id = ?, previous_queue_id = ?, next_queue_id = "
                        "?, message_id = ?, fingerprint = ?, sender = ?, size = ?, nrcpt = ?, arrival = ?, "
                        "state = ?, updated = ?, finished = ?, host = ? WHERE id = ?");
        q.text_ref(m.first_queue_id);
        opt_text(q, m.previous_queue_id);
        opt_text(q, m.next_queue_id);
        opt_text(q, m.message_id);
        opt_text(q, m.fingerprint);
        opt_text(q, m.sender);
        q.i64(m.size).i64(m.nrcpt);
        opt_int(q, m.arrival);
        q.text_ref(m.state).i64(m.updated);
        opt_int(q, m.finished);
        q.text_ref(m.host);
        if (m.id == 0) {
            q.text_ref(m.queue_id).run();
            m.id = sqlite3_last_insert_rowid(db_);
            qid_map_.stage_message(m.queue_id, m.id);
        } else {
            q.i64(m.id).run();
        }
        if (m.finished) qid_map_.stage_finished(m.queue_id, *m.finished);
    }
    for (const RecipientRow& r : rcpts_) {
        if (!r.dirty) continue;
        Query q = stmt(
            r.id == 0 ? "INSERT INTO recipients(domain, state, attempts, first_attempt, last_attempt, "
                        "first_deferral, reply_code, enhanced, reply_text, stage, relay, category, "
                        "queue_id, address, message) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                      : "UPDATE recipients SET domain = ?, state = ?, attempts = ?, first_attempt = ?, "
                        "last_attempt = ?, first_deferral = ?, reply_code = ?, enhanced = ?, reply_text = "
                        "?, stage = ?, relay = ?, category = ? WHERE id = ?");
        q.text_ref(r.domain).text_ref(r.state).i64(r.attempts);
        opt_int(q, r.first_attempt);
        opt_int(q, r.last_attempt);
        opt_int(q, r.first_deferral);
        q.i64(r.reply_code)
            .text_ref(r.enhanced)
            .text_ref(r.reply_text)
            .text_ref(r.stage)
            .text_ref(r.relay)
            .text_ref(r.category);
        if (r.id == 0) {
            q.text_ref(r.queue_id).text_ref(r.address).i64(msgs_[msg_index_.at(r.queue_id)].id).run();
            qid_map_.stage_recipient(r.queue_id, r.address, sqlite3_last_insert_rowid(db_));
        } else {
            q.i64(r.id).run();
        }
    }
    clear_rows();
}

void SqliteLedger::clear_rows() {
    msgs_.clear();
    msg_index_.clear();
    rcpts_.clear();
    rcpt_index_.clear();
    rcpts_loaded_.clear();
}

// The row of (kind, name): kept, else read from the table.
SqliteLedger::DestinationRow& SqliteLedger::destination_row(const char* kind, const std::string& name,
                                                            std::uint64_t hash) {
    dest_key_.assign(kind).push_back('\t');
    dest_key_.append(name);
    DestinationRows::Entry* entry = dests_.find(dest_key_, hash);
    if (!entry) {
        DestinationRow row;
        Query q = stmt(
            "SELECT last_success, last_deferral, ep_first, ep_last, ep_attempts, ep_messages, "
            "ep_categories, ep_last_reply, ep_last_relay, updated, id FROM destinations WHERE kind = ? AND "
            "name = ?");
        q.text_ref(kind).text_ref(name);
        if (q.row()) {
            row.in_table = true;
            row.id = q.col(10);
            row.last_success = opt_i64(q, 0);
            row.last_deferral = opt_i64(q, 1);
            row.updated = q.col(9);
            if (!q.is_null(2) || !q.is_null(3) || q.col(4) != 0 || q.col(5) != 0 || q.col(6) != 0 ||
                !q.str(7).empty() || !q.str(8).empty()) {
                row.ep = std::make_unique<DestinationEpisode>();
                row.ep->first = opt_i64(q, 2);
                row.ep->last = opt_i64(q, 3);
                row.ep->attempts = q.col(4);
                row.ep->messages = q.col(5);
                row.ep->categories = q.col(6);
                row.ep->last_reply = q.str(7);
                row.ep->last_relay = q.str(8);
            }
        }
        entry = &dests_.insert(dest_key_, hash, std::move(row));
    }
    if (!entry->value.touched) {
        entry->value.touched = true;
        dests_touched_.push_back(entry);
    }
    return entry->value;
}

void SqliteLedger::prefetch_destinations(std::span<const IngestItem> batch, std::size_t i) const noexcept {
    // Items ahead for each step (PrehashedMap::prefetch): far enough for a
    // miss to arrive while the items between are applied.
    static constexpr std::size_t kAhead[] = {12, 8, 4};
    for (int step = 0; step < 3; ++step) {
        const std::size_t k = i + kAhead[step];
        if (k >= batch.size()) continue;
        const IngestItem& item = batch[k];
        if (!item.planned || item.op.kind != OpKind::delivery) continue;
        if (item.op.outcome != Outcome::sent && item.op.outcome != Outcome::deferred) continue;
        if (!item.op.domain.empty()) dests_.prefetch(item.op.domain_hash, step);
        if (!item.op.relay.empty()) dests_.prefetch(item.op.relay_hash, step);
    }
}

// After a rolled-back batch (or one whose end was never reached): the rows
// it touched are not as committed.
void SqliteLedger::drop_touched_destinations() {
    for (auto* d : dests_touched_) dests_.erase(*d);
    dests_touched_.clear();
}

void SqliteLedger::record_deferral(const char* kind, const std::string& name, std::uint64_t hash,
                                   const std::string& message, const Op& op) {
    auto& row = destination_row(kind, name, hash);
    if (!row.episode_messages) row.episode_messages = std::make_unique<std::unordered_set<std::string>>();
    if (!row.ep) row.ep = std::make_unique<DestinationEpisode>();
    DestinationEpisode& ep = *row.ep;
    if (!row.episode_messages->contains(message)) {
        Query q = stmt("INSERT OR IGNORE INTO episode_messages(kind, name, queue_id) VALUES(?, ?, ?)");
        q.text_ref(kind).text_ref(name).text_ref(message).run();
        ep.messages += sqlite3_changes(db_);
        row.episode_messages->insert(message);
    }
    row.last_deferral = max_opt(row.last_deferral, op.time);
    if (!ep.first) ep.first = op.time;
    ep.last = max_opt(ep.last, op.time);
    ep.attempts += 1;
    ep.categories |= category_bit(op.category);
    ep.last_reply = op.reason;
    ep.last_relay = op.relay;
    row.updated = std::max(row.updated, op.time);
}

void SqliteLedger::record_success(const char* kind, const std::string& name, std::uint64_t hash,
                                  std::int64_t t) {
    auto& row = destination_row(kind, name, hash);
    if (row.ep && row.ep->first) {
        const DestinationEpisode& ep = *row.ep;
        Query q = stmt(
            "INSERT INTO episodes(kind, name, first_deferral, last_deferral, ended, attempts, messages, "
            "categories, last_reply, last_relay) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
        q.text_ref(kind).text_ref(name).i64(*ep.first).i64(ep.last.value_or(*ep.first)).i64(t);
        q.i64(ep.attempts).i64(ep.messages).i64(ep.categories).text_ref(ep.last_reply);
        q.text_ref(ep.last_relay).run();
        Query d = stmt("DELETE FROM episode_messages WHERE kind = ? AND name = ?");
        d.text_ref(kind).text_ref(name).run();
        if (row.episode_messages) row.episode_messages->clear();
    }
    row.last_success = max_opt(row.last_success, t);
    row.ep.reset();
    row.updated = std::max(row.updated, t);
}

// Rows known to be in the table are UPDATEd, new ones INSERTed (no upsert
// probe). `updated` only grows: the verdict effects may have raised it
// since the row was read. `state` and `state_changed` belong to the verdict
// effects and are left alone.
void SqliteLedger::flush_destinations() {
    // By id: no probe of the (kind, name) index per row. The row's own kind
    // and name are checked too, so an id that no longer holds it changes
    // nothing and takes the unsound path below, which updates by key.
#define UPDATE_DESTINATION_BY_KEY                                                                      \
    "UPDATE destinations SET last_success = ?1, last_deferral = ?2, ep_first = ?3, ep_last = ?4, "     \
    "ep_attempts = ?5, ep_messages = ?6, ep_categories = ?7, ep_last_reply = ?8, ep_last_relay = ?9, " \
    "updated = MAX(updated, ?10) WHERE kind = ?11 AND name = ?12"
    static constexpr const char* kUpdateByKey = UPDATE_DESTINATION_BY_KEY;
    static constexpr const char* kUpdate = UPDATE_DESTINATION_BY_KEY " AND id = ?13";
#undef UPDATE_DESTINATION_BY_KEY
    static constexpr const char* kInsert =
        "INSERT INTO destinations(last_success, last_deferral, ep_first, ep_last, ep_attempts, "
        "ep_messages, ep_categories, ep_last_reply, ep_last_relay, updated, kind, name) "
        "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";
    // ?1-?12 from the row and its key; ?13, the id, only for kUpdate.
    auto run = [&](const char* sql, std::string_view key, const DestinationRow& row) {
        Query q = stmt(sql);
        auto opt = [&](const std::optional<std::int64_t>& v) -> Query& { return v ? q.i64(*v) : q.null(); };
        static const DestinationEpisode kNoEpisode;
        const DestinationEpisode& ep = row.ep ? *row.ep : kNoEpisode;
        opt(row.last_success);
        opt(row.last_deferral);
        opt(ep.first);
        opt(ep.last);
        q.i64(ep.attempts).i64(ep.messages).i64(ep.categories).text_ref(ep.last_reply);
        q.text_ref(ep.last_relay).i64(row.updated);
        const auto tab = key.find('\t');
        q.text_ref(key.substr(0, tab)).text_ref(key.substr(tab + 1));
        if (sql == kUpdate) q.i64(row.id);
        q.run();
    };
    for (auto* d : dests_touched_) {
        const std::string& key = d->key;
        DestinationRow& row = d->value;
        if (row.in_table) {
            run(kUpdate, key, row);
            // Only a cache out of step with the table gets here (the batch
            // holds the write lock): the row is written anyway and the cache
            // is dropped after the batch.
            if (sqlite3_changes(db_) == 0) {
                dest_cache_.unsound = true;
                run(kUpdateByKey, key, row);
                if (sqlite3_changes(db_) == 0) run(kInsert, key, row);
            }
        } else {
            run(kInsert, key, row);
            row.in_table = true;
            row.id = sqlite3_last_insert_rowid(db_);
        }
        row.episode_messages.reset();
    }
}

}  // namespace retryguard::ledger_detail
