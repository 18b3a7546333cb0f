// identity_filter.cpp -- the milter's negative cache of ledger identities
// (identity_filter.hpp). Owns hashing and the rebuild protocol; must never
// answer "no copy" for a key it was given, whatever a rebuild does.
#include "retryguard/identity/identity_filter.hpp"

#include <algorithm>
#include <exception>
#include <functional>
#include <string>

#include "retryguard/ledger/ledger.hpp"

namespace retryguard {
namespace {

// Message-IDs and fingerprints share one set; a Message-ID equal to some
// fingerprint would only cost a lookup, but the mask keeps the two apart.
constexpr std::uint64_t kFingerprintMask = 0x9e3779b97f4a7c15ULL;

}  // namespace

IdentityFilter::Keys IdentityFilter::keys_of_normalised(std::string_view message_id,
                                                        std::string_view fingerprint) {
    Keys k;
    std::hash<std::string_view> h;
    if (!message_id.empty()) k.key[k.n++] = h(message_id);
    if (!fingerprint.empty()) k.key[k.n++] = h(fingerprint) ^ kFingerprintMask;
    return k;
}

IdentityFilter::Keys IdentityFilter::keys_of(std::string_view message_id, std::string_view fingerprint) {
    return keys_of_normalised(message_id.empty() ? std::string() : normalize_message_id(message_id),
                              fingerprint);
}

bool IdentityFilter::ready() const {
    std::lock_guard lock(mu_);
    return ready_;
}

bool IdentityFilter::may_have_copy(std::string_view message_id, std::string_view fingerprint) const {
    Keys k;
    try {
        k = keys_of(message_id, fingerprint);
    } catch (...) {
        return true;  // cannot tell: ask the ledger
    }
    std::lock_guard lock(mu_);
    if (!ready_) return true;
    for (std::size_t i = 0; i < k.n; ++i)
        if (keys_.contains(k.key[i])) return true;
    return false;
}

bool IdentityFilter::may_have_copy(std::string_view message_id, std::string_view fingerprint,
                                   std::uint64_t content_key,
                                   std::chrono::steady_clock::time_point now) const {
    Keys k;
    try {
        k = keys_of(message_id, fingerprint);
    } catch (...) {
        return true;
    }
    std::lock_guard lock(mu_);
    if (!ready_) return true;
    const std::size_t fp_index = fingerprint.empty() ? k.n : k.n - 1;  // keys_of: the fingerprint last
    for (std::size_t i = 0; i < k.n; ++i) {
        if (!keys_.contains(k.key[i])) continue;
        if (i != fp_index || content_key == 0) return true;  // by Message-ID
        auto it = clear_.find(content_key);
        if (it == clear_.end() || now - it->second >= kFingerprintClearFor || now < it->second) return true;
    }
    return false;
}

std::uint64_t IdentityFilter::content_key(std::string_view fingerprint,
                                          const std::vector<std::string>& recipients) {
    if (fingerprint.empty()) return 0;
    try {
        std::vector<std::string> sorted;
        sorted.reserve(recipients.size());
        for (const auto& r : recipients) sorted.push_back(normalize_address(r));
        std::sort(sorted.begin(), sorted.end());
        std::string all(fingerprint);
        for (const auto& r : sorted) {
            all.push_back('\0');
            all += r;
        }
        std::uint64_t h = std::hash<std::string>{}(all);
        return h == 0 ? 1 : h;
    } catch (...) {
        return 0;  // cannot tell: no remembered answer applies
    }
}

void IdentityFilter::note_no_fingerprint_copy(std::uint64_t content_key,
                                              std::chrono::steady_clock::time_point now) {
    if (content_key == 0) return;
    std::lock_guard lock(mu_);
    try {
        if (clear_.size() >= kMaxClear && !clear_.contains(content_key)) clear_.clear();
        clear_[content_key] = now;
    } catch (...) {
        clear_.clear();
    }
}

void IdentityFilter::insert(std::unordered_set<std::uint64_t>& into, std::vector<std::uint64_t>* also,
                            const Keys& keys) {
    for (std::size_t i = 0; i < keys.n; ++i) {
        into.insert(keys.key[i]);
        if (also) also->push_back(keys.key[i]);
    }
}

void IdentityFilter::add(std::string_view message_id, std::string_view fingerprint) {
    try {
        const Keys k = keys_of(message_id, fingerprint);
        std::lock_guard lock(mu_);
        insert(keys_, rebuilding_ ? &added_during_rebuild_ : nullptr, k);
    } catch (...) {
        // Out of memory: the key may be missing, so no answer from the set can be trusted.
        std::lock_guard lock(mu_);
        ready_ = false;
        lost_during_rebuild_ = rebuilding_;
    }
}

void IdentityFilter::add_normalised(std::string_view message_id, std::string_view fingerprint) {
    const Keys k = keys_of_normalised(message_id, fingerprint);
    std::lock_guard lock(mu_);
    try {
        insert(keys_, rebuilding_ ? &added_during_rebuild_ : nullptr, k);
    } catch (...) {
        ready_ = false;
        lost_during_rebuild_ = rebuilding_;
    }
}

void IdentityFilter::invalidate() {
    std::lock_guard lock(mu_);
    ready_ = false;
    // a rebuild running now may have read the ledger before the lost keys
    if (rebuilding_) lost_during_rebuild_ = true;
}

Result<std::size_t> IdentityFilter::rebuild(const Scan& scan) {
    {
        std::lock_guard lock(mu_);
        if (rebuilding_) return make_error(ErrorKind::internal, "identity filter: a rebuild is running");
        rebuilding_ = true;
        lost_during_rebuild_ = false;
        added_during_rebuild_.clear();
    }
    std::unordered_set<std::uint64_t> fresh;
    Status st;
    try {
        // The ledger stores Message-IDs normalised: they are hashed as they come.
        st = scan([&](std::string_view mid, std::string_view fp) {
            insert(fresh, nullptr, keys_of_normalised(mid, fp));
        });
    } catch (const std::exception& e) {
        st = make_error(ErrorKind::internal, std::string("identity filter: ") + e.what());
    } catch (...) {
        st = make_error(ErrorKind::internal, "identity filter: unknown exception");
    }
    if (st) {
        try {
            // room for as many keys again before the set rehashes: a rehash
            // would run under the lock every end of message takes
            fresh.reserve(2 * fresh.size() + 1024);
        } catch (...) {
        }
    }
    std::lock_guard lock(mu_);
    rebuilding_ = false;
    if (st && lost_during_rebuild_)
        st = make_error(
            ErrorKind::internal,
            "identity filter: keys were lost while it ran (out of memory, or the change stream broke)");
    if (st) {
        try {
            fresh.insert(added_during_rebuild_.begin(), added_during_rebuild_.end());
        } catch (...) {
            st = make_error(ErrorKind::internal, "identity filter: out of memory");
        }
    }
    if (!st) {
        added_during_rebuild_.clear();
        ready_ = false;
        return st.error();
    }
    added_during_rebuild_.clear();
    keys_.swap(fresh);
    ready_ = true;
    return keys_.size();
}

}  // namespace retryguard
