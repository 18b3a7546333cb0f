// sqlite_destination_deltas.cpp -- bulk mode's destination deltas (see
// DestinationDeltas in sqlite_internal.hpp): the rows a batch touched, written
// as one appended row of destination_deltas, and their fold into the
// destinations table.
//
// A delta row's bytes: per destination, in the order the batch first touched
// it, the key ("kind\tname") and the batch columns as they stand after the
// batch. Numbers are 8 bytes little-endian, strings a 4-byte length and the
// bytes, and a flags byte says which optional values follow.
#include <cstring>

#include "ledger/sqlite_internal.hpp"

namespace retryguard::ledger_detail {
namespace {

enum : unsigned char {
    kHasSuccess = 1,
    kHasDeferral = 2,
    kHasEpisode = 4,
    kHasEpFirst = 8,
    kHasEpLast = 16,
};

void put_i64(std::string& out, std::int64_t v) {
    auto u = static_cast<std::uint64_t>(v);
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

void put_str(std::string& out, std::string_view s) {
    const auto n = static_cast<std::uint32_t>(s.size());
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    out.append(s);
}

// Bounds-checked; a short or malformed row is corruption of the file.
class DeltaReader {
  public:
    explicit DeltaReader(std::string_view data) : data_(data) {}
    bool done() const { return at_ == data_.size(); }
    unsigned char byte() {
        need(1);
        return static_cast<unsigned char>(data_[at_++]);
    }
    std::int64_t i64() {
        need(8);
        std::uint64_t u = 0;
        for (int i = 0; i < 8; ++i) u |= std::uint64_t{static_cast<unsigned char>(data_[at_ + i])} << (8 * i);
        at_ += 8;
        return static_cast<std::int64_t>(u);
    }
    std::string str() {
        need(4);
        std::uint32_t n = 0;
        for (int i = 0; i < 4; ++i) n |= std::uint32_t{static_cast<unsigned char>(data_[at_ + i])} << (8 * i);
        at_ += 4;
        need(n);
        std::string s(data_.substr(at_, n));
        at_ += n;
        return s;
    }

  private:
    void need(std::size_t n) const {
        if (data_.size() - at_ < n)
            throw SqlError{SQLITE_CORRUPT, "ledger: unreadable destination_deltas row"};
    }
    std::string_view data_;
    std::size_t at_ = 0;
};

}  // namespace

void SqliteLedger::bind_destination(Query& q, std::string_view key, const DestinationRow& row) {
    auto opt = [&](const std::optional<std::int64_t>& v) -> Query& { return v ? q.i64(*v) : q.null(); };
    static const DestinationEpisode kNoEpisode;
    const DestinationEpisode& ep = row.ep ? *row.ep : kNoEpisode;
    opt(row.last_success);
    opt(row.last_deferral);
    opt(ep.first);
    opt(ep.last);
    q.i64(ep.attempts).i64(ep.messages).i64(ep.categories).text(ep.last_reply);
    q.text(ep.last_relay).i64(row.updated);
    const auto tab = key.find('\t');
    q.text(key.substr(0, tab)).text(key.substr(tab + 1));
}

// `updated` only grows (the verdict effects may have raised it); `state` and
// `state_changed` belong to the verdict effects and are left alone.
void SqliteLedger::upsert_destination(std::string_view key, const DestinationRow& row) {
    static constexpr const char* kUpsert =
        "INSERT INTO destinations(last_success, last_deferral, ep_first, ep_last, ep_attempts, "
        "ep_messages, ep_categories, ep_last_reply, ep_last_relay, updated, kind, name) "
        "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) ON CONFLICT(kind, name) DO UPDATE SET "
        "last_success = excluded.last_success, last_deferral = excluded.last_deferral, "
        "ep_first = excluded.ep_first, ep_last = excluded.ep_last, ep_attempts = excluded.ep_attempts, "
        "ep_messages = excluded.ep_messages, ep_categories = excluded.ep_categories, "
        "ep_last_reply = excluded.ep_last_reply, ep_last_relay = excluded.ep_last_relay, "
        "updated = MAX(updated, excluded.updated)";
    Query q = stmt(kUpsert);
    bind_destination(q, key, row);
    q.run();
}

void SqliteLedger::write_destination_delta() {
    std::string& out = delta_blob_;
    out.clear();
    for (auto* d : dests_touched_) {
        const DestinationRow& row = d->second;
        unsigned char flags = 0;
        if (row.last_success) flags |= kHasSuccess;
        if (row.last_deferral) flags |= kHasDeferral;
        if (row.ep) {
            flags |= kHasEpisode;
            if (row.ep->first) flags |= kHasEpFirst;
            if (row.ep->last) flags |= kHasEpLast;
        }
        put_str(out, d->first);
        out.push_back(static_cast<char>(flags));
        if (row.last_success) put_i64(out, *row.last_success);
        if (row.last_deferral) put_i64(out, *row.last_deferral);
        put_i64(out, row.updated);
        if (row.ep) {
            const DestinationEpisode& ep = *row.ep;
            if (ep.first) put_i64(out, *ep.first);
            if (ep.last) put_i64(out, *ep.last);
            put_i64(out, ep.attempts);
            put_i64(out, ep.messages);
            put_i64(out, ep.categories);
            put_str(out, ep.last_reply);
            put_str(out, ep.last_relay);
        }
        deltas_.staged.push_back(d->first);
    }
    if (out.empty()) return;
    Query q = stmt("INSERT INTO destination_deltas(rows) VALUES(?)");
    q.blob(out).run();
    deltas_.wrote = true;
}

// Every delta row, oldest first, each key's last row upserted (in the order
// keys first appear, so new destinations keep the order first seen), then none.
void SqliteLedger::fold_destination_deltas() {
    std::unordered_map<std::string, DestinationRow> rows;
    std::vector<const std::string*> order;
    {
        Query q = stmt("SELECT rows FROM destination_deltas ORDER BY seq");
        while (q.row()) {
            const std::string blob = q.bytes(0);
            DeltaReader r(blob);
            while (!r.done()) {
                std::string key = r.str();
                if (key.find('\t') == std::string::npos)
                    throw SqlError{SQLITE_CORRUPT, "ledger: unreadable destination_deltas row"};
                DestinationRow row;
                const unsigned char flags = r.byte();
                if (flags & kHasSuccess) row.last_success = r.i64();
                if (flags & kHasDeferral) row.last_deferral = r.i64();
                row.updated = r.i64();
                if (flags & kHasEpisode) {
                    row.ep = std::make_unique<DestinationEpisode>();
                    if (flags & kHasEpFirst) row.ep->first = r.i64();
                    if (flags & kHasEpLast) row.ep->last = r.i64();
                    row.ep->attempts = r.i64();
                    row.ep->messages = r.i64();
                    row.ep->categories = r.i64();
                    row.ep->last_reply = r.str();
                    row.ep->last_relay = r.str();
                }
                auto [it, added] = rows.try_emplace(std::move(key));
                it->second = std::move(row);
                if (added) order.push_back(&it->first);
            }
        }
    }
    for (const std::string* key : order) upsert_destination(*key, rows.find(*key)->second);
    exec("DELETE FROM destination_deltas");
    deltas_.folded = true;
}

// The importing process's own reads of destination rows see its deltas; other
// connections read the table as of the last fold.
void SqliteLedger::fold_own_deltas() noexcept {
    bool pending = false;
    {
        std::lock_guard lock(mutex_);
        pending = deltas_.active && deltas_.batches > 0;
    }
    if (!pending) return;
    auto st = write([&] {
        if (destination_deltas_in_table()) fold_destination_deltas();
    });
    if (!st) options_.warn("bulk mode: writing the destination deltas before a read: " + st.error().message);
}

bool SqliteLedger::destination_deltas_in_table() {
    Query q = stmt("SELECT EXISTS(SELECT 1 FROM destination_deltas)");
    return q.row() && q.col(0) != 0;
}

}  // namespace retryguard::ledger_detail
