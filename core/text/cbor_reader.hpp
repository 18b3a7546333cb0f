// cbor_reader.hpp -- the boundaries of CBOR (RFC 8949) data items, without
// decoding them: lets the engine's saved state (core/rules/engine.cpp) be read
// one destination at a time through nlohmann::json::from_cbor, instead of as
// one tree of the whole state, whose nodes cost ten times the state's bytes
// and stayed in the process's heap after the load. Definite lengths only (what
// cbor::Writer and nlohmann::json write); anything else, and any item that
// runs past the end or nests deeper than kMaxDepth, is "not an item" and the
// caller reads the bytes the old way, which gives the error. Every length is
// checked against the bytes left before it is used. Internal to the core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace retryguard::cbor {

struct Head {
    int major = 0;            // 0..7
    std::uint64_t value = 0;  // the argument: a length, a count or the value itself
    std::size_t next = 0;     // offset of the bytes after the head
};

// The head of the item at `pos`; nullopt when truncated or of indefinite length.
inline std::optional<Head> head(std::string_view b, std::size_t pos) {
    if (pos >= b.size()) return std::nullopt;
    const auto ib = static_cast<unsigned char>(b[pos]);
    Head h{ib >> 5, ib & 31u, pos + 1};
    if (h.value < 24) return h;
    if (h.value > 27) return std::nullopt;  // 28-30 reserved, 31 indefinite
    const std::size_t n = std::size_t{1} << (h.value - 24);
    if (b.size() - h.next < n) return std::nullopt;
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v = (v << 8) | static_cast<unsigned char>(b[h.next + i]);
    h.value = v;
    h.next += n;
    return h;
}

inline constexpr int kMaxDepth = 64;

// The offset just past the item starting at `pos`, or nullopt (see above).
inline std::optional<std::size_t> item_end(std::string_view b, std::size_t pos, int depth = 0) {
    if (depth > kMaxDepth) return std::nullopt;
    auto h = head(b, pos);
    if (!h) return std::nullopt;
    switch (h->major) {
        case 2:
        case 3:  // byte and text strings
            if (h->value > b.size() - h->next) return std::nullopt;
            return h->next + static_cast<std::size_t>(h->value);
        case 4:
        case 5: {  // arrays, maps (two items a pair)
            // Each item is at least a byte: more than the bytes left cannot fit.
            if (h->value > b.size() - h->next) return std::nullopt;
            const std::uint64_t items = h->major == 4 ? h->value : 2 * h->value;
            if (items > b.size() - h->next) return std::nullopt;
            std::size_t at = h->next;
            for (std::uint64_t i = 0; i < items; ++i) {
                auto end = item_end(b, at, depth + 1);
                if (!end) return std::nullopt;
                at = *end;
            }
            return at;
        }
        case 6:  // a tag: the item it tags follows
            return item_end(b, h->next, depth + 1);
        default:  // unsigned and negative integers, simple values and floats
            return h->next;
    }
}

// The bytes of a text or byte string item that is all of `item`, or nullopt.
inline std::optional<std::string_view> string_bytes(std::string_view item) {
    auto h = head(item, 0);
    if (!h || (h->major != 2 && h->major != 3) || h->value != item.size() - h->next) return std::nullopt;
    return item.substr(h->next);
}

// Calls f(key, value) for each entry of the map that is all of `b`, the value
// as the bytes of its item; stops when f returns false. False when `b` is not
// exactly one map of at most kMaxEntries entries with text keys, no key twice
// (a map read whole by nlohmann::json would keep one of them), or f stopped.
inline constexpr std::uint64_t kMaxEntries = 256;
template <class F>
bool for_each_entry(std::string_view b, F&& f) {
    auto h = head(b, 0);
    if (!h || h->major != 5 || h->value > kMaxEntries) return false;
    std::vector<std::string_view> keys;
    std::size_t at = h->next;
    for (std::uint64_t i = 0; i < h->value; ++i) {
        auto key_end = item_end(b, at);
        if (!key_end) return false;
        auto key = b.substr(at, *key_end - at);
        auto k = head(key, 0);
        if (!k || k->major != 3) return false;
        key.remove_prefix(k->next);
        auto value_end = item_end(b, *key_end);
        if (!value_end) return false;
        for (std::string_view seen : keys)
            if (seen == key) return false;
        keys.push_back(key);
        if (!f(key, b.substr(*key_end, *value_end - *key_end))) return false;
        at = *value_end;
    }
    return at == b.size();
}

// Calls f(item) for each item of the array that is all of `b`; stops when f
// returns false. False when `b` is not exactly one array or f stopped.
template <class F>
bool for_each_item(std::string_view b, F&& f) {
    auto h = head(b, 0);
    if (!h || h->major != 4 || h->value > b.size()) return false;
    std::size_t at = h->next;
    for (std::uint64_t i = 0; i < h->value; ++i) {
        auto end = item_end(b, at);
        if (!end) return false;
        if (!f(b.substr(at, *end - at))) return false;
        at = *end;
    }
    return at == b.size();
}

}  // namespace retryguard::cbor
