// pending_store.hpp -- what the milter needs from the ledger, and nothing more:
// the pending copies for a message's recipients, and recording an accepted
// message's identity under its queue ID. The ledger adapter implements it;
// implementations must be safe to call from several libmilter threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "log_sink.hpp"
#include "retryguard/identity/resend.hpp"
#include "retryguard/ledger/ledger.hpp"
#include "retryguard/result.hpp"
#include "retryguard/time.hpp"

namespace retryguard::milter {

class PendingStore {
  public:
    virtual ~PendingStore() = default;
    // Every pending copy (deferred or being retried) of this message -- same
    // Message-ID or same fingerprint -- for any of msg.recipients.
    // Past the deadline the lookup ends with ErrorKind::timeout.
    virtual Result<std::vector<PendingCopy>> find_pending(const MessageFacts& msg,
                                                          std::chrono::steady_clock::time_point deadline) = 0;
    // The message was accepted under msg.queue_id: its identity is recorded
    // (its recipients come from the log, see identity() in pending_store.cpp).
    virtual Status record(const MessageFacts& msg, TimePoint when) = 0;
    // Several at once (one ledger transaction where the backend allows it).
    virtual Status record_many(const std::vector<std::pair<MessageFacts, TimePoint>>& batch) {
        for (const auto& [msg, when] : batch)
            if (auto st = record(msg, when); !st) return st;
        return {};
    }
    virtual std::string describe() const = 0;
    // Records that could not be written after record() returned (asynchronous stores).
    virtual std::uint64_t failed_records() const { return 0; }
    // Writes what is still queued and stops accepting records.
    virtual void close() {}
    // Lookups the identity filter answered without the ledger, and its failed rebuilds.
    virtual std::uint64_t filtered_lookups() const { return 0; }
    virtual std::uint64_t filter_errors() const { return 0; }
    // Exceptions caught at the top of the store's own threads (failed open:
    // the thread carries on, the records or rebuild at hand count as failed).
    virtual std::uint64_t exceptions_caught() const { return 0; }
};

// Where a store reports what it does on its own (the filter's rebuilds).
using StoreLog = std::function<void(Severity, const std::string&)>;

// ledger: opened by the caller (open_configured_ledger); described as `spec`.
// record_queue > 0: records are written by a worker thread through a queue of
// that many entries (see AsyncRecorder); 0: written at end of message.
// filter_rescan > 0: lookups go through an identity filter rebuilt that often
// (see LedgerStore); 0: every message is looked up in the ledger.
// host: this host's name, recorded with each message (MessageIdentity::host).
Result<std::unique_ptr<PendingStore>> open_pending_store(std::unique_ptr<Ledger> ledger,
                                                         const std::string& spec, std::size_t record_queue,
                                                         std::chrono::seconds filter_rescan, StoreLog log,
                                                         std::string host = {});

}  // namespace retryguard::milter
