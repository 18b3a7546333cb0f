// sqlite_lookups.hpp -- the SQLite ledger's lookups whose speed rests on one
// index each, shared with the ledger's tests, which check with EXPLAIN QUERY
// PLAN that SQLite still uses that index (a changed expression or predicate
// would silently turn a lookup into a scan of the whole history). Included by
// the ledger's tests and sqlite_ledger.cpp only.
#pragma once

// Message row ids per block of the history indexes (schema version 13:
// messages_block_message_id, recipients_block_address; 15:
// messages_block_queue_id): their key starts with
// `id / RG_HISTORY_BLOCK` (messages) or `message / RG_HISTORY_BLOCK`
// (recipients), so that new entries land in the last block, and a lookup asks
// each block in turn. The lookups spell the same expression, or SQLite cannot
// use the index. Part of the file format: another value needs a migration.
#define RG_HISTORY_BLOCK "4096"

// The columns read_recipient reads, in its order.
#define RG_RECIPIENT_COLUMNS                                                                        \
    "queue_id, address, state, attempts, first_attempt, last_attempt, first_deferral, reply_code, " \
    "enhanced, reply_text, stage, relay, category"

// The columns read_message reads, in its order.
#define RG_MESSAGE_COLUMNS                                                                          \
    "queue_id, previous_queue_id, first_queue_id, next_queue_id, message_id, fingerprint, sender, " \
    "size, nrcpt, arrival, state, updated, finished, host"

// The blocks of a history index, oldest to newest: `b(k)` from the block of
// the smallest row id to that of the largest (each a lookup in the rowid or
// (message, address) index), in the lookup's own statement (one snapshot).
#define RG_HISTORY_BLOCKS(MIN_ID, MAX_ID)                             \
    "WITH RECURSIVE b(k) AS (SELECT (" MIN_ID ") / " RG_HISTORY_BLOCK \
    " UNION ALL SELECT k + 1 "                                        \
    "FROM b WHERE k < (" MAX_ID ") / " RG_HISTORY_BLOCK ") "

// The message row of a queue id (schema version 15), in two parts. Postfix
// reuses a queue id only long after its message left the queue, so a queue id
// has at most one row Postfix still holds (finished IS NULL: the unique
// partial index messages_queue_id_live, whose size follows the queue), and
// may have finished rows before it (messages_block_queue_id, asked block by
// block). The row of a queue id is its unfinished one, else its newest.
//  - RG_MESSAGE_LIVE(COLUMNS): the unfinished row; ?1 the queue id.
//  - RG_MESSAGE_NEWEST(COLUMNS): the newest row of any state, each block asked.
#define RG_MESSAGE_LIVE(COLUMNS) "SELECT " COLUMNS " FROM messages WHERE queue_id = ?1 AND finished IS NULL"
#define RG_MESSAGE_NEWEST(COLUMNS)                                                    \
    RG_HISTORY_BLOCKS("SELECT MIN(id) FROM messages", "SELECT MAX(id) FROM messages") \
    "SELECT " COLUMNS " FROM b CROSS JOIN messages WHERE id / " RG_HISTORY_BLOCK      \
    " = b.k AND queue_id = "                                                          \
    "?1 ORDER BY id DESC LIMIT 1"
// Both in one statement (one snapshot): the second part runs only when the
// first finds nothing.
#define RG_MESSAGE_BY_QUEUE_ID(COLUMNS) \
    RG_MESSAGE_LIVE(COLUMNS) " UNION ALL SELECT * FROM (" RG_MESSAGE_NEWEST(COLUMNS) ") LIMIT 1"

namespace retryguard::ledger_detail {

// `explain QUEUE_ID` and the readers by queue id.
inline constexpr const char* kMessageByQueueIdSql = RG_MESSAGE_BY_QUEUE_ID(RG_MESSAGE_COLUMNS);

// The recipients of a queue id's message (its row as kMessageByQueueIdSql
// finds it), in address order.
inline constexpr const char* kRecipientsByQueueIdSql =
    "SELECT " RG_RECIPIENT_COLUMNS
    " FROM recipients WHERE message = (" RG_MESSAGE_BY_QUEUE_ID("id") ") ORDER BY address";

// `explain ADDRESS`: ?1 the normalised address, ?2 the most rows. CROSS JOIN
// keeps the blocks the outer loop.
inline constexpr const char* kRecipientsByAddressSql =
    RG_HISTORY_BLOCKS("SELECT MIN(message) FROM recipients", "SELECT MAX(message) FROM recipients")  //
    "SELECT " RG_RECIPIENT_COLUMNS " FROM b CROSS JOIN recipients WHERE message / " RG_HISTORY_BLOCK
    " = b.k AND address = ?1 ORDER BY COALESCE(last_attempt, 0) DESC, queue_id LIMIT ?2";

// `explain MESSAGE-ID` and the copies `explain` shows: ?1 the normalised
// Message-ID.
inline constexpr const char* kMessagesByMessageIdSql =
    "SELECT " RG_MESSAGE_COLUMNS " FROM (" RG_HISTORY_BLOCKS("SELECT MIN(id) FROM messages",
                                                             "SELECT MAX(id) FROM messages")  //
    "SELECT m.* FROM b CROSS JOIN messages m WHERE m.id / " RG_HISTORY_BLOCK
    " = b.k AND m.message_id = ?1) ORDER BY arrival, queue_id";

// The milter's question at the end of each message: the pending recipients
// of another copy Postfix may still retry, by Message-ID (?1) or by content
// fingerprint (?2), not the message itself (?3). Two single-index queries in
// UNION ALL: SQLite's OR optimisation over both indexes builds a temporary
// table to drop duplicates and was slower (7.1 against 3.6-5.1 us per miss on
// a 100k-message ledger). Each reads a partial index that holds only what the
// queue may be retrying (messages_message_id_queued,
// messages_fingerprint_queued), so its cost follows the queue, not history:
// the state terms must stay as the indexes spell them.
inline constexpr const char* kPendingCopiesSql =
    "SELECT m.queue_id, m.first_queue_id, r.domain, r.relay, r.reply_text, r.first_deferral, "
    "r.last_attempt, m.arrival, r.attempts, m.state, r.address, 1, m.host "
    "FROM messages m JOIN recipients r ON r.message = m.id WHERE m.message_id = ?1 AND "
    "m.queue_id <> ?3 "
    "AND m.state IN ('incoming','active','deferred','hold') AND r.state = 'pending' "
    "UNION ALL "
    "SELECT m.queue_id, m.first_queue_id, r.domain, r.relay, r.reply_text, r.first_deferral, "
    "r.last_attempt, m.arrival, r.attempts, m.state, r.address, 0, m.host "
    "FROM messages m JOIN recipients r ON r.message = m.id WHERE m.fingerprint = ?2 AND "
    "m.queue_id <> ?3 "
    "AND m.state IN ('active','deferred','hold') AND r.state = 'pending' "
    "AND r.first_deferral IS NOT NULL";

}  // namespace retryguard::ledger_detail
