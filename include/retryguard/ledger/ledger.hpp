// ledger.hpp -- the deferral ledger: the one place where retryguard's processes
// (policy daemon, milter, CLI) share state. Two backends implement it: SQLite
// (embedded default, one file) and Redis (a fleet of MTAs sharing one view).
// docs/ledger.md describes the schema, keys, TTLs and guarantees.
//
// Every operation returns Result<...>; no exception leaves a ledger. A backend
// that cannot answer (Redis down, SQLite locked past its busy timeout) returns
// ErrorKind::unavailable, which callers treat as "fail open"; each such failure
// is counted in counters().
//
// Times stored here are event times (the log's own timestamps), except where a
// caller passes a time explicitly; the ledger never reads the wall clock for
// anything a verdict depends on.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "retryguard/category.hpp"
#include "retryguard/follow/position.hpp"
#include "retryguard/log/events.hpp"
#include "retryguard/result.hpp"
#include "retryguard/time.hpp"

namespace retryguard {

// ---------------------------------------------------------------------------
// Identity normalisation shared by the ledger and its callers (the milter must
// use the same functions, or lookups will not match what the log recorded).

// "<Abc@Example.COM>" -> "Abc@example.com": surrounding blanks and one pair of
// angle brackets removed, the part after the last '@' lower-cased. Bounded: input
// longer than kMaxIdentityLength is truncated.
inline constexpr std::size_t kMaxIdentityLength = 998;
std::string normalize_message_id(std::string_view message_id);
// "<User@Example.COM>" -> "User@example.com" (local part kept: it may be case-sensitive).
std::string normalize_address(std::string_view address);
// "user@Example.COM" -> "example.com"; "" when there is no '@'.
std::string domain_of(std::string_view address);

// The key of one log event in a ledger's replay protection (docs/ledger.md
// "Event keys"): replaying a line gives the same key. Remote servers write the
// reply texts, so the key is SipHash-2-4 of time, host, program, pid and text
// under the ledger's 128-bit secret: without it nobody can make a new event
// share the key of another and pass it off as a replay. A ledger recorded
// before it had a secret keeps its keys for the events it may already hold:
// those at or before `horizon` get the unkeyed FNV-1a key of that time (log
// times come from syslog, not from the remote server).
struct EventKeyer {
    std::array<unsigned char, 16> secret{};
    std::optional<TimePoint> horizon;  // none: every event gets the keyed hash
};
std::uint64_t event_key(const Event& event, const EventKeyer& keyer) noexcept;
// The unkeyed 64-bit FNV-1a key of ledgers recorded before the secret.
std::uint64_t fnv_event_key(const Event& event) noexcept;
// Keys that fell back to fnv_event_key because the SipHash of the crypto
// library could not be computed (process-wide; 0 in practice).
std::uint64_t event_key_fallbacks() noexcept;

// ---------------------------------------------------------------------------
// What the ledger records.

// Where a message is. `requeued`: postsuper -r gave it a new queue id (the
// successor carries on). `gone`: removed from the queue (delivered, bounced or
// deleted), `rejected`: refused before it was queued.
enum class MessageState { incoming, active, deferred, hold, requeued, gone, expired, rejected };
std::string_view to_string(MessageState state) noexcept;
std::optional<MessageState> message_state_from_string(std::string_view name) noexcept;

enum class RecipientState { pending, sent, bounced, expired };
std::string_view to_string(RecipientState state) noexcept;
std::optional<RecipientState> recipient_state_from_string(std::string_view name) noexcept;

// A destination is a recipient domain or the relay host (MX) that answered:
// one broken MX often serves many domains, so both are followed.
enum class DestinationKind { domain, relay };
std::string_view to_string(DestinationKind kind) noexcept;
std::optional<DestinationKind> destination_kind_from_string(std::string_view name) noexcept;

// Bit set over Category (1 << static_cast<int>(category)).
using CategorySet = std::uint32_t;
inline constexpr CategorySet category_bit(Category c) noexcept {
    return CategorySet{1} << static_cast<int>(c);
}
std::vector<Category> categories_in(CategorySet set);

// What an event does to the ledger (core/ledger plans it, both backends apply
// it; plan_ledger_op below). The numbers are part of the Redis script
// protocol (core/ledger/redis/ingest.lua): never renumber.
enum class LedgerOpKind : int {
    none = 0,          // recorded as seen only
    pickup = 1,        // message enters via pickup (maybe a postsuper -r requeue: other_id)
    message_id = 2,    // cleanup message-id= (text = normalised id)
    queue_active = 3,  // qmgr sender/size/nrcpt
    delivery = 4,      // one recipient's attempt
    removed = 5,       // qmgr/postsuper removed
    expired = 6,       // qmgr expired, returned to sender
    hold = 7,          // postsuper placed on hold / milter hold
    release = 8,       // postsuper released from hold
    rejected = 9,      // milter reject/discard after the queue id was assigned
    client = 10,       // smtpd client=: arrival time
};

// Recipient outcome of a delivery op; numbers are part of the script protocol.
enum class LedgerOutcome : int { none = 0, sent = 1, deferred = 2, bounced = 3, expired = 4 };

struct LedgerOp {
    std::uint64_t key = 0;
    LedgerOpKind kind = LedgerOpKind::none;
    std::int64_t time = 0;  // microseconds since the epoch
    std::string queue_id;
    std::string host;      // the log line's host field (bounded_host)
    std::string other_id;  // pickup: orig_id=
    std::string text;      // message_id: normalised id; pickup/queue_active: sender
    bool resent = false;   // message_id from resent-message-id=
    std::int64_t size = -1;
    int nrcpt = -1;
    // delivery
    LedgerOutcome outcome = LedgerOutcome::none;
    std::string recipient;  // normalised
    std::string domain;
    std::string relay;  // relay host that answered (lower case), "" when none
    // destination_hash of ("domain", domain) and ("relay", relay): the key of
    // the destination rows a ledger keeps in memory, hashed with the plan.
    std::uint64_t domain_hash = 0, relay_hash = 0;
    int code = 0;
    std::string enhanced;
    std::string reason;  // literal reason
    std::string stage;
    Category category = Category::unknown;

    // Every field as a fresh LedgerOp has it; the strings keep their buffers
    // (the ingest paths plan a batch's events into one LedgerOp).
    void reset() noexcept {
        key = 0;
        kind = LedgerOpKind::none;
        time = 0;
        queue_id.clear();
        host.clear();
        other_id.clear();
        text.clear();
        resent = false;
        size = -1;
        nrcpt = -1;
        outcome = LedgerOutcome::none;
        recipient.clear();
        domain.clear();
        relay.clear();
        domain_hash = relay_hash = 0;
        code = 0;
        enhanced.clear();
        reason.clear();
        stage.clear();
        category = Category::unknown;
    }
};

struct IngestItem;
// The operation `item` makes on a ledger, every field of `op` set and its
// strings' buffers reused. `keyer`: the ledger's (used when item.key is 0).
// Uses only its arguments: an import plans on its reading thread (below).
void plan_ledger_op(const IngestItem& item, const EventKeyer& keyer, LedgerOp& op);

// One event with the category the classifier gave its reply (Category::unknown
// for events without a reply).
struct IngestItem {
    Event event;
    Category category = Category::unknown;
    // event_key(event, ledger.event_keyer()) when computed ahead
    // (Ingestor::add_line, on an import's reading thread); 0: the ledger computes it.
    std::uint64_t key = 0;
    // The item's framed engine journal entry (encode_journal_batch_item) when
    // encoded ahead by a caller that passes no whole-batch entry to
    // Ledger::ingest; empty: the ledger encodes it. Copied as it is.
    std::string journal{};
    // plan_ledger_op(*this, ledger's keyer, op) when planned ahead
    // (Ingestor::add_line, on an import's reading thread, with `key`); false:
    // the ledger plans it. Whoever changes `event` or `key` afterwards clears it.
    bool planned = false;
    LedgerOp op{};
};

struct IngestResult {
    std::size_t applied = 0;     // events whose effects were recorded
    std::size_t duplicates = 0;  // events already seen (replay): ignored
    std::vector<bool> fresh;     // per batch item: true when it was applied (not a duplicate)
    // The engine journal entry that holds the batch's fresh items, in batch
    // order (one entry per batch: cheap to append); 0 when none was fresh.
    std::uint64_t journal_seq = 0;
};

// ---------------------------------------------------------------------------
// The engine journal (docs/ledger.md "Engine journal"): what the rules engine
// has to be fed, in order, so that a restored engine state can be brought up
// to date after a crash. Entries are opaque byte strings (encode_journal_*),
// numbered by the ledger with a sequence that only grows.

struct EngineJournalEntry {
    std::uint64_t seq = 0;
    std::string data;
};

// One entry decoded: an event with its category, a time-based evaluation
// (Engine::advance) or a flag cleared by command (Engine::clear_flag).
struct EngineJournalRecord {
    enum class Kind { event, tick, clear_flag };
    Kind kind = Kind::event;
    IngestItem item;          // event
    TimePoint time{};         // tick, clear_flag
    std::string destination;  // clear_flag
};

// Binary, lossless (any bytes in any text field), versioned by its first byte.
std::string encode_journal_event(const IngestItem& item);
std::string encode_journal_tick(TimePoint now);
std::string encode_journal_clear_flag(std::string_view destination, TimePoint now);
// A batch entry: kJournalBatchTag, then every fresh event as added here.
inline constexpr std::string_view kJournalBatchTag = "B";
void append_journal_batch_item(std::string& batch, const IngestItem& item);
// The bytes append_journal_batch_item adds for `item`, into `out` (replaced).
void encode_journal_batch_item(std::string& out, const IngestItem& item);
// A batch's engine journal entry made ahead (Ledger::ingest): kJournalBatchTag,
// then append_journal_batch_item of each of the batch's `items` in order.
// `stored`: the entry as stored_journal_entry gives it, made ahead too (an
// import compresses on its reading thread); empty: the ledger makes it.
struct BatchJournal {
    std::string_view entry;
    std::size_t items = 0;
    std::string_view stored;
};
// A stored entry may be compressed: kJournalCompressedTag, the entry's size
// (8 bytes little-endian), then a zstd frame of the whole entry (tag and
// all). A batch's entry is about six times smaller so, and it was about half
// of what a bulk import wrote to the database. decode_journal_entry reads
// both forms.
inline constexpr std::string_view kJournalCompressedTag = "Z";
// The largest entry stored compressed, and so the most a compressed entry may
// claim to hold: reading one allocates its size first, and a frame of a few
// bytes can claim any size. A batch of 10,000 lines is about 1.5 MB; one of
// maximal lines (kMaxLogLineLength) can pass this and is stored as it is.
inline constexpr std::size_t kMaxJournalEntryBytes = std::size_t{64} << 20;
// An entry's compressed form into `out` (replaced) when it is smaller than
// the entry; false otherwise (short entries, and those over
// kMaxJournalEntryBytes, are kept as they are).
// Deterministic: the same entry gives the same bytes.
bool compress_journal_entry(std::string_view entry, std::string& out);
// What to store for `entry`: its compressed form (in `scratch`) or the entry.
std::string_view stored_journal_entry(std::string_view entry, std::string& scratch);
// The reverse: the entry a stored one holds (decompressed into `scratch`), or
// `stored` itself when it is not compressed or does not decompress to a batch
// entry (a reader refuses it then, as any damaged entry).
std::string_view plain_journal_entry(std::string_view stored, std::string& scratch);
// The items' parts of a batch entry (each as append_journal_batch_item adds
// it: its 8-byte length, then the item), into `parts` (replaced); false when
// `entry` is not kJournalBatchTag followed by exactly `items` of them.
bool split_journal_batch(std::string_view entry, std::size_t items, std::vector<std::string_view>& parts);
// One entry (a batch gives one record per event) appended to `out`; false
// when `data` is not an entry this program wrote (out unchanged then). A
// compressed entry is read within kMaxJournalEntryBytes.
bool decode_journal_entry(std::string_view data, std::vector<EngineJournalRecord>& out);

// The ledger side of one verdict of the rules engine: its sequence number
// (Ingestor, deterministic), its name (counted in verdict_counts) and what it
// changes. apply_verdict_effects applies them at most once (high-water mark).
struct VerdictEffect {
    enum class Action { none, destination_state, set_flag, clear_flags };
    std::uint64_t seq = 0;
    std::string verdict;  // counted (+1)
    Action action = Action::none;
    DestinationKind kind = DestinationKind::domain;  // destination_state
    std::string name;                                // destination_state: name; flags: destination
    std::string state;                               // destination_state
    TimePoint at{};
    std::string reason;                   // set_flag
    std::optional<TimePoint> expires_at;  // set_flag
    // The rendered verdict line, kept in the outbox with the effects ("": the
    // caller writes no line for it, nothing is kept).
    std::string line;
};

// A verdict line whose effects committed and that the sink may or may not
// have received (docs/ledger.md "Verdict outbox"): seq and time of its verdict.
struct OutboxEntry {
    std::uint64_t seq = 0;
    TimePoint at{};
    std::string line;
};

struct MessageInfo {
    std::string queue_id;
    std::string previous_queue_id;  // postsuper -r: the queue id this one replaced (pickup orig_id=)
    std::string first_queue_id;     // start of the requeue chain (== queue_id when none)
    std::string next_queue_id;      // the successor after a requeue
    std::string message_id;         // normalised
    std::string fingerprint;        // content fingerprint from the milter
    std::string sender;
    std::int64_t size = -1;
    int nrcpt = -1;
    std::optional<TimePoint> arrival;
    MessageState state = MessageState::incoming;
    TimePoint updated{};
    std::optional<TimePoint> finished;  // when it reached gone/expired/requeued/rejected
    // The host that holds it: the host field of its log lines (syslog's host
    // name, or the first label of Postfix's myhostname in a maillog_file), or
    // the milter's host name until the log names one. "" when unknown.
    std::string host;
};

struct RecipientInfo {
    std::string queue_id;
    std::string address;  // normalised
    RecipientState state = RecipientState::pending;
    int attempts = 0;
    std::optional<TimePoint> first_attempt;
    std::optional<TimePoint> last_attempt;
    std::optional<TimePoint> first_deferral;
    int reply_code = 0;
    std::string enhanced;    // "4.3.5" (or the dsn= Postfix logged)
    std::string reply_text;  // the literal reason Postfix logged
    std::string stage;       // to_string(SmtpStage); "" when the reply names no stage
    std::string relay;       // relay host that answered
    Category category = Category::unknown;
};

// A continuous run of deferrals for one destination, from its first deferral
// to the next successful delivery (ended).
struct Episode {
    DestinationKind kind = DestinationKind::domain;
    std::string destination;
    TimePoint first_deferral{};
    TimePoint last_deferral{};
    std::optional<TimePoint> ended;  // the success that ended it; nullopt while open
    std::int64_t attempts = 0;       // deferrals counted in the episode
    std::int64_t messages = 0;       // distinct queue ids affected
    CategorySet categories = 0;
    std::string last_reply;  // the literal reason of the last deferral
    std::string last_relay;  // relay host of the last deferral
};

struct DestinationInfo {
    DestinationKind kind = DestinationKind::domain;
    std::string name;
    std::string state;  // ladder state set by the rules engine ("" until it sets one)
    std::optional<TimePoint> state_changed;
    std::optional<TimePoint> last_success;
    std::optional<TimePoint> last_deferral;
    std::optional<Episode> episode;  // the open episode, if any
};

// Destinations in (kind, name) order, filtered, then paged: rows `offset`
// onwards, at most `limit`. Every row by default: a listing is never cut
// without the caller asking (the reports page and say so).
struct DestinationFilter {
    std::optional<DestinationKind> kind;
    std::optional<std::string> state;  // exact ladder state
    bool open_episode_only = false;
    std::size_t offset = 0;
    std::size_t limit = std::numeric_limits<std::size_t>::max();
};

struct Flag {
    std::int64_t id = 0;  // assigned by set_flag
    std::string destination;
    std::string reason;
    TimePoint set_at{};
    std::optional<TimePoint> expires_at;
    std::optional<TimePoint> cleared_at;
};

// What the milter records for each accepted message (end of message, {i} known).
struct MessageIdentity {
    std::string queue_id;
    std::string message_id;   // normalised with normalize_message_id (done again here)
    std::string fingerprint;  // opaque content fingerprint
    std::string sender;
    std::vector<std::string> recipients;
    TimePoint time{};
    std::string host = {};  // the recording host's name (log.hostname, else the short host name)
};

// At most this many recipients per identity or query (Postfix's own
// smtpd_recipient_limit defaults to 1000); more is ErrorKind::limit.
inline constexpr std::size_t kMaxRecipientsPerMessage = 10000;

struct PendingCopyQuery {
    std::string message_id;   // may be empty
    std::string fingerprint;  // may be empty; either identity matches
    std::vector<std::string> recipients;
    std::string exclude_queue_id;  // the message being checked itself, if already recorded
    // Past this the lookup stops and returns ErrorKind::timeout (SQLite: the
    // query is interrupted; Redis: not sent when the deadline passed while it
    // waited for the connection, the command itself bounded by the Redis timeout).
    std::optional<std::chrono::steady_clock::time_point> deadline;
};

// An earlier copy of a message still pending in the queue for one recipient.
struct PendingCopy {
    std::string recipient;       // as normalised
    std::string queue_id;        // where the copy is now (after any postsuper -r)
    std::string first_queue_id;  // the queue id it was first accepted under
    std::string destination;     // recipient domain
    std::string relay;           // relay host of the last attempt ("" before any attempt)
    std::string last_reply;      // literal reason of the last attempt
    std::optional<TimePoint> first_deferral;
    std::optional<TimePoint> last_attempt;
    std::optional<TimePoint> arrival;
    int attempts = 0;
    MessageState message_state = MessageState::incoming;
    bool matched_by_message_id = false;  // else by fingerprint
    std::string host;                    // the host that holds the copy ("" when unknown)
};

struct RetentionPolicy {
    Duration finished_messages = std::chrono::hours(24 * 30);  // after gone/expired/requeued/rejected
    Duration stale_messages = std::chrono::hours(24 * 60);     // any message not updated for this long
    Duration episodes = std::chrono::hours(24 * 365);          // ended episodes, cleared/expired flags
    Duration seen_events = std::chrono::hours(24 * 14);        // replay protection window
};

struct PruneResult {
    std::int64_t messages = 0;
    std::int64_t recipients = 0;
    std::int64_t episodes = 0;
    std::int64_t flags = 0;
    std::int64_t seen_events = 0;
};

struct LedgerStats {
    std::string backend;   // "sqlite" / "redis"
    std::string location;  // file path / host:port
    std::int64_t messages = 0;
    std::int64_t pending_messages = 0;  // not finished
    std::int64_t recipients = 0;
    std::int64_t destinations = 0;
    std::int64_t open_episodes = 0;
    std::int64_t episodes = 0;  // ended, in history
    std::int64_t flags = 0;     // active
    std::int64_t seen_events = 0;
    std::int64_t bytes = 0;  // file size (SQLite) / used_memory (Redis)
    int schema_version = 0;
};

// Failures and fallbacks, readable at any time from any thread.
struct LedgerCounters {
    std::uint64_t operations = 0;
    std::uint64_t failures = 0;      // operations that returned an error
    std::uint64_t unavailable = 0;   // of which: backend unavailable (callers fail open)
    std::uint64_t reconnects = 0;    // Redis reconnect attempts
    std::uint64_t duplicates = 0;    // replayed events ignored by ingest
    std::uint64_t events = 0;        // events applied by ingest
    std::uint64_t shared_reads = 0;  // SQLite lookups that could not get a read-only connection
};

// ---------------------------------------------------------------------------

// Identity changes as the ledger's writers make them (Ledger::open_identity_stream):
// the normalised Message-ID or the fingerprint of each identity written, by any
// process. Used by one thread at a time.
class IdentityStream {
  public:
    using Visitor = std::function<void(std::string_view message_id, std::string_view fingerprint)>;
    virtual ~IdentityStream() = default;
    // Reading starts after the newest change recorded now. Call before a full
    // scan (Ledger::for_each_open_identity): a key written after the mark is
    // read by read(), a key written before it is in the scan.
    virtual Status mark() = 0;
    // Waits up to `wait` for changes after the last one read (or the mark),
    // calls f once per change and moves past them. An error means changes may
    // have been missed (the stream was trimmed past the reader, Redis restarted
    // or cannot be reached): mark() and scan again.
    virtual Status read(std::chrono::milliseconds wait, const Visitor& f) = 0;
    // Ledger::for_each_open_identity on the stream's own connection: a scan of
    // many messages then never holds up the lookups on the ledger's.
    virtual Status scan(const Visitor& f) = 0;
};

// A bulk load (`retryguard import` into an empty Redis ledger, docs/ledger.md
// "Bulk load into an empty Redis ledger"): the files are recorded in a
// temporary SQLite ledger that takes the Redis ledger's event-key secret, and
// its tables are then copied into Redis, under a marker that names the owner
// until the copy is complete.
struct BulkLoadClaim {
    enum class Outcome {
        claimed,    // the ledger was empty and is now marked as the owner's
        not_empty,  // the ledger holds data: import batch by batch
        busy,       // another owner's bulk load is running, or died on another host
    };
    Outcome outcome = Outcome::not_empty;
    std::string detail;            // not_empty: a key found; busy: the marker
    EventKeyer keyer;              // claimed: the ledger's event-key secret
    std::uint64_t wiped_keys = 0;  // claimed after an owner on this host died mid-copy: its keys removed
    // claimed: the marker now held ("host pid start dir") and its directory:
    // the caller's own, or that of the unfinished load it takes over.
    std::string owner, dir;
};
struct BulkLoadStats {
    std::uint64_t messages = 0, recipients = 0, destinations = 0, episodes = 0, seen_keys = 0;
    std::uint64_t commands = 0;  // Redis commands sent
    // Messages (with their recipients) copied while the import ran
    // (bulk_load_early), and whether those keys were removed and everything
    // copied at the end instead (the temporary ledger reported them unsettled).
    std::uint64_t messages_early = 0;
    bool early_redone = false;
    // Nothing was copied and the marker is gone: the ledger is no longer empty
    // (another writer came first); import the files batch by batch.
    bool refused = false;
    std::string refused_why;
};

// The ledger's interface is split by who uses it (docs/architecture.md, "The
// ledger by role"): a caller that needs one role takes that role, so what it
// may do to the shared state reads off its signature. Ledger is all four and
// is what the backends implement; each method belongs to exactly one role.

// What the log's ingest path writes: batches of events with the follower
// position after them (live follower, `retryguard import`).
class LedgerIngest {
  public:
    virtual ~LedgerIngest() = default;

    // Applies a batch atomically together with the follower position: after a
    // crash either the batch and the position are both recorded, or neither.
    // Events already seen within the seen-events retention are skipped, so a
    // replay never double-counts.
    // `journal`: the engine journal entry of the whole batch, made ahead
    // (Ingestor::add_line builds it on an import's reading thread). Used as it
    // is when every event is fresh, and split into the items' parts when some
    // are duplicates; one not made for batch.size() items, or that does not
    // split into them: the ledger encodes the fresh items itself.
    virtual Result<IngestResult> ingest(std::span<const IngestItem> batch,
                                        const std::optional<FollowerPosition>& position,
                                        BatchJournal journal = {}) = 0;
    // Whether this ledger stores batch entries compressed
    // (stored_journal_entry), so that a caller makes BatchJournal::stored ahead.
    virtual bool stores_compressed_journal() const noexcept { return false; }

    // A bulk import (`retryguard import`) is about to write many batches in a
    // row: the backend may trade memory for fewer writes (SQLite: a larger page
    // cache and fewer WAL checkpoints). Crash safety is unchanged: every batch
    // is still its own transaction. Off again with false (and at close).
    virtual void set_bulk_mode(bool on) noexcept { (void)on; }

    // Bulk load (see BulkLoadClaim; Redis only, other backends refuse it).
    // claim: marks an empty ledger as `owner`'s ("host pid start dir", dir the
    // temporary ledger's directory); the unfinished load of a process of this
    // host that is gone is taken over: the keys it copied are removed and its
    // directory is the claim's, to resume its ledger.
    // copy: checks that the ledger is still empty apart from the marker, writes
    // the SQLite ledger at `sqlite_path` into it and removes the marker last.
    // release: removes the owner's marker (a load given up before its copy).
    virtual Result<BulkLoadClaim> bulk_load_claim(std::string_view owner);
    virtual Result<BulkLoadStats> bulk_load_copy(const std::string& sqlite_path, std::string_view owner);
    virtual Status bulk_load_release(std::string_view owner);
    // early: called after a claim, before the import into the temporary
    // ledger at `sqlite_path`; returns the two functions that ledger's
    // options take (LedgerOptions::sqlite_bulk_settled, _unsettled), through
    // which the rows no later line changes are copied while the import runs.
    // copy then copies only the rest; when the rows were reported unsettled
    // (or the early copy failed), it removes what the early copy wrote and
    // copies everything.
    struct BulkLoadFeed {
        std::function<void(std::int64_t message_row, std::span<const std::int64_t> recipient_rows)> settled;
        std::function<void()> unsettled;
    };
    virtual Result<BulkLoadFeed> bulk_load_early(const std::string& sqlite_path, std::string_view owner);

    // The key function of this ledger's events (its secret and horizon), for
    // a caller that computes IngestItem::key ahead on another thread. nullopt
    // while the ledger has not read its secret (Redis not reached yet): leave
    // the keys 0 and ingest() computes them.
    virtual std::optional<EventKeyer> event_keyer() = 0;

    // A follower position by source id (LedgerReports::load_position reads it).
    virtual Status save_position(const FollowerPosition& position) = 0;
};

// What the milter asks and records per message: its identity, the pending
// copies of the same message, the identities a filter in front of those
// lookups is built from.
class LedgerLookup {
  public:
    virtual ~LedgerLookup() = default;

    virtual std::string_view backend() const noexcept = 0;

    // Milter: record an accepted message, then look up pending copies.
    virtual Status record_identity(const MessageIdentity& identity) = 0;
    // Many at once (imports, benchmarks): one transaction on SQLite; on Redis each
    // identity is atomic and a failure may leave the earlier ones recorded.
    virtual Status record_identities(std::span<const MessageIdentity> identities) = 0;
    // One entry per requested recipient whose earlier copy is still pending
    // (the oldest copy when several are): by Message-ID any pending copy; by
    // fingerprint only a copy deferred at least once, of a message the queue
    // manager has picked up (identical content never deferred is ordinary
    // traffic, and reading it would make each lookup cost more than the last).
    virtual Result<std::vector<PendingCopy>> find_pending_copies(const PendingCopyQuery& query) = 0;
    // Calls f with the (normalised) Message-ID and the fingerprint of every
    // message not yet finished, i.e. every message find_pending_copies could
    // match (either may be empty): the milter's identity filter is built from
    // it. A backend that cannot list them cheaply answers ErrorKind::unavailable
    // and the milter asks it about every message instead (SQLite scans its
    // messages; Redis pages through the set of unfinished messages its
    // writers keep, open_identities.lua).
    virtual bool can_list_identities() const noexcept { return false; }
    virtual Status for_each_open_identity(
        const std::function<void(std::string_view message_id, std::string_view fingerprint)>& f);
    // The identities other processes write, as they write them (Redis: a stream
    // every identity write appends to), so that an identity filter built from
    // for_each_open_identity stays complete between scans. On its own
    // connection: a read may wait. ErrorKind::unavailable where there is none
    // (SQLite: the filter is rebuilt from scans only).
    virtual Result<std::unique_ptr<IdentityStream>> open_identity_stream();
};

// Reads of what is recorded: messages, recipients, destinations, episodes,
// flags, the saved engine state, follower positions, counts (the CLI's reports
// and `explain`; the notice planner's first-deferral check; the engine's
// restore and the followers' resume).
class LedgerReports {
  public:
    virtual ~LedgerReports() = default;

    virtual Result<std::optional<MessageInfo>> get_message(std::string_view queue_id) = 0;
    virtual Result<std::vector<MessageInfo>> find_messages_by_message_id(std::string_view message_id) = 0;
    virtual Result<std::vector<RecipientInfo>> get_recipients(std::string_view queue_id) = 0;
    // Recipients delivered (state sent) whose delivery attempt falls in
    // [from, to): the report's summary. Reads every message updated since
    // `from`, so it is for reports, not for the mail path.
    virtual Result<std::int64_t> count_deliveries(TimePoint from, TimePoint to) = 0;
    // Every recipient record for an address, newest first, at most `limit`.
    virtual Result<std::vector<RecipientInfo>> find_recipients_by_address(std::string_view address,
                                                                          std::size_t limit) = 0;
    virtual Result<std::optional<DestinationInfo>> get_destination(DestinationKind kind,
                                                                   std::string_view name) = 0;
    virtual Result<std::vector<DestinationInfo>> list_destinations(const DestinationFilter& filter) = 0;
    // How many destinations are in each ladder state ("" for those the engine
    // set none): the rows of list_destinations(DestinationFilter{}) counted by
    // `state`, without reading them. A state no destination is in is absent.
    virtual Result<std::map<std::string, std::int64_t>> count_destinations_by_state() = 0;
    // How many destinations of `kind` had their last success at or after
    // `since`: the rows of list_destinations that say so, counted without
    // reading them.
    virtual Result<std::int64_t> count_destinations_delivered(DestinationKind kind, TimePoint since) = 0;
    // Ended episodes whose first deferral lies in [from, to], oldest first.
    virtual Result<std::vector<Episode>> episode_history(DestinationKind kind, std::string_view name,
                                                         TimePoint from, TimePoint to) = 0;
    // episode_history(kind, name, from, to) of every destination at once, in
    // one read rather than one per destination: ended episodes whose first
    // deferral lies in [from, to], by destination in list_destinations' order
    // (kind, name), each destination's oldest first. A destination's row may
    // be gone (retention) while episodes of it are still here.
    virtual Result<std::vector<Episode>> episodes_between(TimePoint from, TimePoint to) = 0;
    // Flags neither cleared nor expired at `now` (all flags when include_inactive).
    virtual Result<std::vector<Flag>> list_flags(std::optional<std::string_view> destination, TimePoint now,
                                                 bool include_inactive) = 0;
    virtual Result<std::map<std::string, std::int64_t>> verdict_counts() = 0;
    virtual Result<std::optional<std::string>> get_state(std::string_view key) = 0;
    // Follower positions by source id.
    virtual Result<std::optional<FollowerPosition>> load_position(std::string_view source) = 0;
    virtual Result<LedgerStats> stats() = 0;
    virtual LedgerCounters counters() const noexcept = 0;
};

// What the rules engine's persistence writes and replays: ladder states,
// flags, verdict counts, engine state, journal, verdict effects and outbox;
// and retention.
class LedgerState {
  public:
    virtual ~LedgerState() = default;

    virtual Status set_destination_state(DestinationKind kind, std::string_view name, std::string_view state,
                                         TimePoint at) = 0;
    virtual Result<std::int64_t> set_flag(const Flag& flag) = 0;  // returns the new flag's id
    // Clears every active flag of the destination; returns how many were cleared.
    virtual Result<std::int64_t> clear_flags(std::string_view destination, TimePoint at) = 0;
    virtual Result<std::int64_t> add_verdict_count(std::string_view verdict, std::int64_t delta) = 0;
    // Engine state values are byte strings (any bytes; LedgerReports::get_state reads them).
    virtual Status put_state(std::string_view key, std::string_view value) = 0;

    // Engine journal. ingest() appends every fresh event; these add the other
    // entries, read them back and save a state together with the trim.
    // Appends entries in order; returns the sequence number of the first.
    virtual Result<std::uint64_t> append_journal(std::span<const std::string> entries) = 0;
    // Entries with seq > after, oldest first, at most `limit`.
    virtual Result<std::vector<EngineJournalEntry>> read_journal(std::uint64_t after, std::size_t limit) = 0;
    // One transaction: state `key` := value, journal entries with seq <=
    // journal_seq deleted (the state covers them) and outbox entries with seq
    // <= outbox_written deleted (their lines reached the sink).
    virtual Status save_engine_state(std::string_view key, std::string_view value, std::uint64_t journal_seq,
                                     std::uint64_t outbox_written) = 0;
    // One transaction: the effects of verdicts above the stored high-water mark
    // (destination state, flags, verdict counts) are applied, their non-empty
    // lines are added to the outbox, and the mark is raised to the highest
    // seq; effects at or below it are skipped (a replay). Outbox entries with
    // seq <= outbox_written (lines the caller has written) are deleted in the
    // same transaction, so the outbox costs no commit of its own.
    // Returns the mark as it was before, so the caller writes only the verdict
    // lines of effects that were applied now.
    virtual Result<std::uint64_t> apply_verdict_effects(std::span<const VerdictEffect> effects,
                                                        std::uint64_t outbox_written) = 0;
    // The outbox, oldest first: lines committed and not yet trimmed.
    virtual Result<std::vector<OutboxEntry>> read_outbox() = 0;
    // The stored high-water mark (0: none yet).
    virtual Result<std::uint64_t> verdict_mark() = 0;

    // Retention (docs/ledger.md "Retention"), by event time `now`.
    virtual Result<PruneResult> prune(const RetentionPolicy& policy, TimePoint now) = 0;
};

class Ledger : public LedgerIngest, public LedgerLookup, public LedgerReports, public LedgerState {
  public:
    Ledger() = default;
    Ledger(const Ledger&) = delete;
    Ledger& operator=(const Ledger&) = delete;
};

// Where the ledger lives and how to reach it.
//   "sqlite:/var/lib/retryguard/ledger.db"   (also a bare path)
//   "redis://127.0.0.1:6379/0"               (host, port, database number)
//   "redis+unix:/run/redis/redis.sock"
struct LedgerOptions {
    std::string spec;
    // SQLite
    std::chrono::milliseconds busy_timeout{2000};
    // Bulk mode's background WAL checkpoint every this many pages, and the
    // writer waiting for the WAL to start over at four times as many. 0: the
    // defaults (16384, 65536). Not a setting: tests make it small.
    int sqlite_bulk_checkpoint_pages = 0;
    // false: bulk mode's end leaves the secondary indexes it dropped unbuilt
    // (a throwaway ledger, the Redis bulk load's, which is only read in rowid
    // order; an opening builds them). Not a setting.
    bool sqlite_bulk_build_indexes = true;
    // ledger.sqlite.gather_wal_writes (core/ledger/sqlite_wal_writes.hpp).
    bool sqlite_gather_wal_writes = true;
    // The event-key secret a new SQLite ledger takes instead of a random one
    // (the bulk load's temporary ledger takes the Redis ledger's). Not a setting.
    std::optional<EventKeyer> new_event_keyer;
    // Bulk mode's queue-id map (SQLite, into an empty ledger): called on the
    // writing thread after a batch commits, with the row ids of a message the
    // map let go of (finished an hour of log time before the latest finish)
    // and of its recipients: no later batch changes these rows while the map
    // lasts. unsettled: the map ended before bulk mode did (a let-go queue id
    // logged again, another writer, a failed batch), so rows given before may
    // change after all. The Redis bulk load copies settled rows while the
    // import runs (LedgerIngest::bulk_load_early). Not a setting.
    std::function<void(std::int64_t message_row, std::span<const std::int64_t> recipient_rows)>
        sqlite_bulk_settled;
    std::function<void()> sqlite_bulk_unsettled;
    // The Redis bulk load's early copy wakes when this many numbers (a
    // message's row, its recipients' count and rows) are queued. 0: 16384.
    // Not a setting: tests make it small.
    std::size_t redis_bulk_early_chunk = 0;
    // Redis
    std::string key_prefix = "retryguard:";
    std::chrono::milliseconds connect_timeout{200};
    std::chrono::milliseconds command_timeout{200};
    std::chrono::milliseconds reconnect_min{100};   // back-off after a failure, doubling...
    std::chrono::milliseconds reconnect_max{5000};  // ...up to this
    std::string redis_username, redis_password;     // AUTH after connecting (empty password: none)
    std::chrono::seconds key_ttl{std::chrono::hours(24 * 400)};     // long-lived keys
    std::chrono::seconds message_ttl{std::chrono::hours(24 * 60)};  // per-message keys, refreshed on update
    std::chrono::seconds seen_ttl{std::chrono::hours(24 * 14)};     // replay protection
    // Warnings (connection lost, fallbacks). Default: stderr, rate-limited.
    std::function<void(std::string_view)> warn;
};

Result<std::unique_ptr<Ledger>> open_ledger(const LedgerOptions& options);
inline Result<std::unique_ptr<Ledger>> open_ledger(std::string spec) {
    LedgerOptions options;
    options.spec = std::move(spec);
    return open_ledger(options);
}

}  // namespace retryguard
