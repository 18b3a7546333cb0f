// internal.hpp -- what both ledger backends share: the translation of a log
// event into one ledger operation (so both backends apply the same rules), the
// failure counters, and the backend constructors used by open_ledger(). Never
// included outside core/ledger/.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "retryguard/ledger/ledger.hpp"

namespace retryguard::ledger_detail {

// What an event does to the ledger. The numbers are part of the Redis script
// protocol (core/ledger/redis/ingest.lua): never renumber.
enum class OpKind : int {
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
enum class Outcome : int { none = 0, sent = 1, deferred = 2, bounced = 3, expired = 4 };

struct Op {
    std::uint64_t key = 0;
    OpKind kind = OpKind::none;
    std::int64_t time = 0;  // microseconds since the epoch
    std::string queue_id;
    std::string host;      // the log line's host field (bounded_host)
    std::string other_id;  // pickup: orig_id=
    std::string text;      // message_id: normalised id; pickup/queue_active: sender
    bool resent = false;   // message_id from resent-message-id=
    std::int64_t size = -1;
    int nrcpt = -1;
    // delivery
    Outcome outcome = Outcome::none;
    std::string recipient;  // normalised
    std::string domain;
    std::string relay;  // relay host that answered (lower case), "" when none
    int code = 0;
    std::string enhanced;
    std::string reason;  // literal reason
    std::string stage;
    Category category = Category::unknown;

    // Every field as a fresh Op has it; the strings keep their buffers
    // (plan_into plans a batch's events into one Op).
    void reset() noexcept {
        key = 0;
        kind = OpKind::none;
        time = 0;
        queue_id.clear();
        host.clear();
        other_id.clear();
        text.clear();
        resent = false;
        size = -1;
        nrcpt = -1;
        outcome = Outcome::none;
        recipient.clear();
        domain.clear();
        relay.clear();
        code = 0;
        enhanced.clear();
        reason.clear();
        stage.clear();
        category = Category::unknown;
    }
};

// `keyer`: the ledger's (used when item.key is 0).
Op plan(const IngestItem& item, const EventKeyer& keyer);
// The same into `op`, every field set, its strings' buffers reused: the
// ingest paths plan a batch's events one after the other into one Op.
void plan_into(const IngestItem& item, const EventKeyer& keyer, Op& op);

// The event-key secret as a ledger stores it (one value: secret and horizon
// are written together, once): "1 <32 hex digits> <horizon in us, or ->".
std::string encode_event_keyer(const EventKeyer& keyer);
std::optional<EventKeyer> decode_event_keyer(std::string_view stored);
// A new secret from the system's CSPRNG; nullopt when it gives none.
std::optional<EventKeyer> new_event_keyer(std::optional<TimePoint> horizon);

// A host name as stored: at most 255 bytes, characters outside printable
// ASCII (and spaces) replaced by '?'. Log lines and configurations are not
// trusted to be well formed.
std::string bounded_host(std::string_view host);

std::string key_hex(std::uint64_t key);

// Counters shared by both backends.
struct Counters {
    std::atomic<std::uint64_t> operations{0}, failures{0}, unavailable{0}, reconnects{0}, duplicates{0},
        events{0}, shared_reads{0};
    LedgerCounters snapshot() const noexcept;
    template <typename R>
    R&& count(R&& result) noexcept {
        operations.fetch_add(1, std::memory_order_relaxed);
        if (!result.ok()) {
            failures.fetch_add(1, std::memory_order_relaxed);
            if (result.error().kind == ErrorKind::unavailable)
                unavailable.fetch_add(1, std::memory_order_relaxed);
        }
        return std::forward<R>(result);
    }
};

std::function<void(std::string_view)> default_warn();

bool is_finished(MessageState state) noexcept;

// Input checks shared by both backends (queue id present, recipient counts bounded).
Status check_identities(std::span<const MessageIdentity> identities);
Status check_query(const PendingCopyQuery& query);

Result<std::unique_ptr<Ledger>> open_sqlite_ledger(const std::string& path, const LedgerOptions& options);
Result<std::unique_ptr<Ledger>> open_redis_ledger(const std::string& host, int port, int db,
                                                  const std::string& unix_path, const LedgerOptions& options);

}  // namespace retryguard::ledger_detail
