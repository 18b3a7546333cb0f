// identity_filter.hpp -- a negative cache in front of the milter's ledger
// lookup: 64-bit hashes of every Message-ID and fingerprint the ledger holds
// for messages not yet finished. A message none of whose keys is in the set
// has no pending copy, so the ledger need not be asked; a message with a key
// in it (a resend, or a hash collision) is looked up as before. The filter
// therefore never changes an answer; it only skips lookups that must come
// back empty, which is nearly every message.
//
// Complete only while every key the ledger gains either is add()ed after its
// write, or is read by a rebuild: keys written by another process (the log
// follower's `message-id=` lines, another milter) arrive with the next
// rebuild, or sooner from the ledger's change stream where it has one
// (add_normalised; invalidate when the stream broke). Never throws; thread-safe.
//
// One answer is remembered for a short time: identical content (alerts, cron
// mail, templates) keeps its fingerprint in the set, so every such message
// would be looked up. When a lookup finds no copy by fingerprint for a
// message's recipients, note_no_fingerprint_copy() remembers that for
// kFingerprintClearFor; a message with the same fingerprint and recipients and
// no known Message-ID is then answered "no copy" without a lookup. A copy that
// became retryable in that window (its first deferral logged and ingested) is
// found at most kFingerprintClearFor later, well inside the second the
// milter's protection is meant to start in.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "retryguard/result.hpp"

namespace retryguard {

class IdentityFilter {
  public:
    // Calls its argument once per message with that message's Message-ID and
    // fingerprint (either may be empty); Ledger::for_each_open_identity.
    using Visitor = std::function<void(std::string_view message_id, std::string_view fingerprint)>;
    using Scan = std::function<Status(const Visitor&)>;

    // False until the first rebuild succeeds; until then every message may
    // have a copy (every lookup goes to the ledger).
    bool ready() const;
    // Whether the ledger may hold a copy with this Message-ID (as the message
    // carries it; normalised here) or this fingerprint.
    bool may_have_copy(std::string_view message_id, std::string_view fingerprint) const;
    // The same, and false also when only the fingerprint is in the set and a
    // lookup for this content key found no copy by fingerprint less than
    // kFingerprintClearFor before `now`.
    bool may_have_copy(std::string_view message_id, std::string_view fingerprint, std::uint64_t content_key,
                       std::chrono::steady_clock::time_point now) const;
    // The key of (fingerprint, recipients): the answer by fingerprint holds
    // for these recipients only. 0 when there is no fingerprint.
    static std::uint64_t content_key(std::string_view fingerprint,
                                     const std::vector<std::string>& recipients);
    // A lookup at `now` found no copy by fingerprint for this content key.
    void note_no_fingerprint_copy(std::uint64_t content_key, std::chrono::steady_clock::time_point now);
    static constexpr std::chrono::milliseconds kFingerprintClearFor{250};
    // A message the ledger now holds (call after the write).
    void add(std::string_view message_id, std::string_view fingerprint);
    // A message's keys as the ledger stores them (Message-ID already
    // normalised): what Ledger::open_identity_stream reports.
    void add_normalised(std::string_view message_id, std::string_view fingerprint);
    // Keys may have been missed (a change stream broke): not ready, every
    // message may have a copy, until a rebuild that starts after this call
    // succeeds.
    void invalidate();
    // Replaces the set with the keys scan reports, plus every key added while
    // it ran. On error the filter is no longer ready (keys the scan would have
    // brought may be missing) until a rebuild succeeds. Returns the keys held.
    Result<std::size_t> rebuild(const Scan& scan);

    // A message's keys as the filter hashes them (Message-ID normalised here):
    // for whoever else must tell messages apart by identity in memory (the
    // milter's record queue). Two messages with the same Message-ID or
    // fingerprint share a key; a shared key otherwise is a hash collision.
    struct Keys {
        std::uint64_t key[2] = {};
        std::size_t n = 0;
    };
    static Keys keys_of(std::string_view message_id, std::string_view fingerprint);

  private:
    static Keys keys_of_normalised(std::string_view message_id, std::string_view fingerprint);
    static void insert(std::unordered_set<std::uint64_t>& into, std::vector<std::uint64_t>* also,
                       const Keys& keys);

    mutable std::mutex mu_;
    std::unordered_set<std::uint64_t> keys_;
    // content key -> when a lookup found no copy by fingerprint (bounded: cleared when full)
    std::unordered_map<std::uint64_t, std::chrono::steady_clock::time_point> clear_;
    static constexpr std::size_t kMaxClear = 4096;
    std::vector<std::uint64_t> added_during_rebuild_;
    bool ready_ = false;
    bool rebuilding_ = false;
    bool lost_during_rebuild_ = false;
};

}  // namespace retryguard
