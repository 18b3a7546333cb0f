// internal.hpp -- what both ledger backends share: the translation of a log
// event into one ledger operation (so both backends apply the same rules), the
// failure counters, and the backend constructors used by open_ledger(). Never
// included outside core/ledger/.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "retryguard/ledger/ledger.hpp"

namespace retryguard::ledger_detail {

// The ledger operation of an event (LedgerOp, ledger.hpp), by its short names.
using OpKind = LedgerOpKind;
using Outcome = LedgerOutcome;
using Op = LedgerOp;

// `keyer`: the ledger's (used when item.key is 0).
Op plan(const IngestItem& item, const EventKeyer& keyer);
// The item's operation: the one planned ahead (item.planned), else planned into `scratch`.
inline const Op& planned_op(const IngestItem& item, const EventKeyer& keyer, Op& scratch) {
    if (item.planned) return item.op;
    plan_ledger_op(item, keyer, scratch);
    return scratch;
}

// The hash of a destination's key (kind "domain" or "relay", and its name)
// in the rows the SQLite ledger keeps (LedgerOp::domain_hash, relay_hash).
inline std::uint64_t destination_hash(std::string_view kind, std::string_view name) noexcept {
    const std::uint64_t h = std::hash<std::string_view>{}(name);
    return kind == "relay" ? h ^ 0x9e3779b97f4a7c15ULL : h;
}

// The engine journal entry of the fresh items of `batch` (fresh[i]) into `out`
// (replaced): their parts of `whole` (made for all of them, Ledger::ingest),
// or the items encoded, when it does not split into them.
void fresh_journal_entry(std::span<const IngestItem> batch, BatchJournal whole,
                         const std::vector<bool>& fresh, std::string& out);

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
