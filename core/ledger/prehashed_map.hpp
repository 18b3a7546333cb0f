// prehashed_map.hpp -- a map from strings to values whose keys come hashed
// by the caller (the hash is computed once, possibly on another thread: an
// import plans its events, destination hashes included, on its reading
// thread). Open addressing with linear probing over slots of 16 bytes (the
// hash and the entry), at most half full, so a lookup reads one slot and the
// entry it points to; std::unordered_map walks from a bucket to the node
// before the one it wants, then to that node and to its key's buffer. The
// slots and entries can be fetched ahead (prefetch), so
// a batch's lookups overlap their cache misses. Entries keep their address
// until erased (pointers to them stay valid across inserts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace retryguard::ledger_detail {

template <typename Value>
class PrehashedMap {
  public:
    struct Entry {
        Entry(std::string_view k, std::uint64_t h, Value v) : key(k), hash(h), value(std::move(v)) {}
        const std::string key;
        const std::uint64_t hash;
        Value value;
    };

    // The entry of `key` (whose hash is `hash`), or nullptr.
    Entry* find(std::string_view key, std::uint64_t hash) const noexcept {
        if (size_ == 0) return nullptr;
        for (std::size_t i = home(hash);; i = (i + 1) & mask_) {
            const Slot& s = slots_[i];
            if (!s.entry) return nullptr;
            if (s.hash == hash && s.entry->key == key) return s.entry.get();
        }
    }

    // Adds `key`, which must not be present; returns its entry.
    Entry& insert(std::string_view key, std::uint64_t hash, Value value) {
        if (2 * (size_ + 1) > slots_.size()) grow();
        auto entry = std::make_unique<Entry>(key, hash, std::move(value));
        Entry& e = *entry;
        std::size_t i = home(hash);
        while (slots_[i].entry) i = (i + 1) & mask_;
        slots_[i] = Slot{hash, std::move(entry)};
        ++size_;
        return e;
    }

    // Removes an entry of this map (`e` is gone afterwards).
    void erase(const Entry& e) noexcept {
        std::size_t i = home(e.hash);
        while (slots_[i].entry.get() != &e) i = (i + 1) & mask_;
        slots_[i] = Slot{};
        --size_;
        // Backward shift: a later slot of the run moves into the hole unless
        // its home lies cyclically in (hole, slot], so every entry stays
        // reachable from its home without tombstones.
        for (std::size_t j = (i + 1) & mask_; slots_[j].entry; j = (j + 1) & mask_) {
            const std::size_t k = home(slots_[j].hash);
            const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
            if (stays) continue;
            slots_[i] = std::move(slots_[j]);
            i = j;
        }
    }

    // Drops every entry; keeps the slots' memory (release() frees it).
    void clear() noexcept {
        if (size_ == 0) return;
        for (Slot& s : slots_) s = Slot{};
        size_ = 0;
    }
    void release() noexcept {
        std::vector<Slot>().swap(slots_);
        mask_ = 0;
        size_ = 0;
    }

    std::size_t size() const noexcept { return size_; }

    // Fetch ahead, in three steps some lookups apart, each once the one
    // before has likely arrived: the slot a lookup of `hash` reads first, the
    // entry it holds, that entry's key bytes. Never waits on a miss itself
    // beyond reading what the step before fetched.
    void prefetch(std::uint64_t hash, int step) const noexcept {
        if (slots_.empty()) return;
        const Slot& s = slots_[home(hash)];
        if (step == 0) {
            __builtin_prefetch(&s);
            return;
        }
        if (s.hash != hash || !s.entry) return;
        if (step == 1)
            __builtin_prefetch(s.entry.get());
        else
            __builtin_prefetch(s.entry->key.data());
    }

  private:
    struct Slot {
        std::uint64_t hash = 0;
        std::unique_ptr<Entry> entry;  // null: empty
    };

    std::size_t home(std::uint64_t hash) const noexcept {
        // The hash's high bits, mixed (callers' hashes may vary in few bits).
        return static_cast<std::size_t>((hash * 0x9e3779b97f4a7c15ULL) >> 17) & mask_;
    }

    void grow() {
        std::vector<Slot> old =
            std::exchange(slots_, std::vector<Slot>(slots_.empty() ? 64 : 2 * slots_.size()));
        mask_ = slots_.size() - 1;
        for (Slot& s : old) {
            if (!s.entry) continue;
            std::size_t i = home(s.hash);
            while (slots_[i].entry) i = (i + 1) & mask_;
            slots_[i] = std::move(s);
        }
    }

    std::vector<Slot> slots_;
    std::size_t mask_ = 0;
    std::size_t size_ = 0;
};

}  // namespace retryguard::ledger_detail
