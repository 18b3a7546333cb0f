// cbor_writer.hpp -- CBOR (RFC 8949) written straight to bytes, for the
// engine's saved state (core/rules/engine.cpp) and its envelope
// (core/ingest/ingestor.cpp). Building an nlohmann::json tree of every tracked
// destination and then encoding it cost more than everything else the engine
// thread did at 400k destinations; this writes the same bytes as
// nlohmann::json::to_cbor would for that tree, provided the caller writes
// each map's keys in sorted order (as std::map holds them) and definite
// lengths (the test `EngineState.StreamedStateIsWhatTheJsonTreeEncodes`
// re-encodes the result through nlohmann::json and compares). Internal to
// the core.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace retryguard::cbor {

class Writer {
  public:
    void uint(std::uint64_t v) { head(0x00, v); }
    void integer(std::int64_t v) {
        if (v >= 0)
            head(0x00, static_cast<std::uint64_t>(v));
        else
            head(0x20, static_cast<std::uint64_t>(-(v + 1)));
    }
    void boolean(bool b) { out_.push_back(static_cast<char>(b ? 0xf5 : 0xf4)); }
    void null() { out_.push_back(static_cast<char>(0xf6)); }
    // Text strings carry whatever bytes they hold, as nlohmann::json writes them.
    void text(std::string_view s) {
        head(0x60, s.size());
        out_.append(s);
    }
    void bytes(std::string_view s) {
        head(0x40, s.size());
        out_.append(s);
    }
    void array(std::uint64_t n) { head(0x80, n); }
    void map(std::uint64_t n) { head(0xa0, n); }
    // A key and then its value's writer call.
    Writer& key(std::string_view k) {
        text(k);
        return *this;
    }
    std::string& out() noexcept { return out_; }
    std::string take() { return std::move(out_); }

  private:
    // The shortest head for `v`, as nlohmann::json's CBOR writer chooses it.
    void head(unsigned major, std::uint64_t v) {
        if (v <= 0x17) {
            out_.push_back(static_cast<char>(major | v));
        } else if (v <= 0xff) {
            out_.push_back(static_cast<char>(major | 0x18));
            be(v, 1);
        } else if (v <= 0xffff) {
            out_.push_back(static_cast<char>(major | 0x19));
            be(v, 2);
        } else if (v <= 0xffffffffULL) {
            out_.push_back(static_cast<char>(major | 0x1a));
            be(v, 4);
        } else {
            out_.push_back(static_cast<char>(major | 0x1b));
            be(v, 8);
        }
    }
    void be(std::uint64_t v, int n) {
        for (int i = n - 1; i >= 0; --i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    }
    std::string out_;
};

}  // namespace retryguard::cbor
