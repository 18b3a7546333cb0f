// journal.cpp -- the byte format of engine journal entries (ledger.hpp,
// docs/ledger.md "Engine journal"): what the ledger appends for each fresh
// event, tick and command, and what a restored engine replays. Text fields are
// length-prefixed bytes, so any byte a remote server sent survives unchanged.
// Entries outlive the program that wrote them (until the next state save):
// the first byte names the entry kind and its format version; a new layout
// gets a new byte and this reader keeps the old ones.
#include <zstd.h>

#include <cstring>
#include <memory>

#include "retryguard/ledger/ledger.hpp"

namespace retryguard {
namespace {

constexpr char kEventV1 = 'E';
// The same fields as kEventV1 with integers and lengths as varints (LEB128,
// signed ones zigzag-encoded): about half the bytes, which the ledger writes
// with every batch and deletes at the next state save.
constexpr char kEventV2 = 'V';
// kEventV2 without the line's verbatim text (Event::text), which neither the
// engine nor an observer reads and which was about half of an entry's bytes
// (the journal was about half of what an import wrote to the WAL); a reply
// text found inside the reason is written as its place there.
constexpr char kEventV3 = 'W';
constexpr char kTickV1 = 'T';
constexpr char kClearFlagV1 = 'C';

// Fixed: integers and lengths as 8 bytes little-endian; compact: varints.
class Writer {
  public:
    explicit Writer(char tag, bool compact = false, std::string out = {})
        : out_(std::move(out)), compact_(compact) {
        out_.push_back(tag);
    }
    void u64(std::uint64_t v) {
        if (compact_) {
            while (v >= 0x80) {
                out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
                v >>= 7;
            }
            out_.push_back(static_cast<char>(v));
            return;
        }
        fixed64(v);
    }
    void i64(std::int64_t v) {
        if (compact_)
            u64((static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63));
        else
            u64(static_cast<std::uint64_t>(v));
    }
    void byte(unsigned v) { out_.push_back(static_cast<char>(v & 0xff)); }
    void str(std::string_view s) {
        u64(s.size());
        out_.append(s);
    }
    void f64(double d) {
        std::uint64_t v;
        std::memcpy(&v, &d, sizeof v);
        fixed64(v);
    }
    std::string take() { return std::move(out_); }

  private:
    void fixed64(std::uint64_t v) {
        for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    }
    std::string out_;
    bool compact_;
};

class Reader {
  public:
    explicit Reader(std::string_view in, bool compact = false) : in_(in), compact_(compact) {}
    bool ok() const { return ok_; }
    bool done() const { return in_.empty(); }
    std::uint64_t u64() {
        if (!compact_) return fixed64();
        std::uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (in_.empty()) return fail();
            const auto b = static_cast<unsigned char>(in_.front());
            in_.remove_prefix(1);
            v |= std::uint64_t{b & 0x7fu} << shift;
            if (!(b & 0x80)) return v;
        }
        return fail();
    }
    std::uint64_t fixed64() {
        if (in_.size() < 8) return fail();
        std::uint64_t v = 0;
        for (int i = 0; i < 8; ++i) v |= std::uint64_t{static_cast<unsigned char>(in_[i])} << (8 * i);
        in_.remove_prefix(8);
        return v;
    }
    std::int64_t i64() {
        const std::uint64_t v = u64();
        if (!compact_) return static_cast<std::int64_t>(v);
        return static_cast<std::int64_t>((v >> 1) ^ (~(v & 1) + 1));
    }
    unsigned byte() {
        if (in_.empty()) return static_cast<unsigned>(fail());
        unsigned v = static_cast<unsigned char>(in_.front());
        in_.remove_prefix(1);
        return v;
    }
    // A length-prefixed run of bytes, as a view of the input.
    std::string_view view() {
        std::uint64_t n = u64();
        if (!ok_ || n > in_.size()) {
            fail();
            return {};
        }
        const std::string_view s = in_.substr(0, n);
        in_.remove_prefix(n);
        return s;
    }
    std::string str() { return std::string(view()); }
    std::string_view remaining() const { return in_; }
    double f64() {
        std::uint64_t v = fixed64();
        double d;
        std::memcpy(&d, &v, sizeof d);
        return d;
    }

  private:
    std::uint64_t fail() {
        ok_ = false;
        in_ = {};
        return 0;
    }
    std::string_view in_;
    bool compact_;
    bool ok_ = true;
};

}  // namespace

namespace {
// The fields of an event record, in the order of kEventV1/kEventV2 (`v3`:
// kEventV3, see there).
void write_event(Writer& w, const IngestItem& item, bool v3) {
    const Event& e = item.event;
    w.byte(static_cast<unsigned>(item.category));
    w.byte(static_cast<unsigned>(e.kind));
    w.i64(to_micros(e.time));
    w.str(e.host);
    w.str(e.program);
    w.str(e.process);
    w.i64(e.pid);
    w.str(e.queue_id);
    w.str(e.recipient);
    w.str(e.orig_recipient);
    w.str(e.relay);
    w.str(e.relay_host);
    w.str(e.relay_addr);
    w.i64(e.relay_port);
    w.str(e.dsn);
    w.byte(static_cast<unsigned>(e.status));
    w.f64(e.delay);
    w.str(e.delays);
    w.str(e.conn_use);
    w.str(e.tls);
    w.str(e.reason);
    w.byte(e.reply ? 1 : 0);
    if (e.reply) {
        const Reply& r = *e.reply;
        w.i64(r.code);
        w.byte(r.enhanced ? 1 : 0);
        if (r.enhanced) {
            w.byte(r.enhanced->klass);
            w.u64(r.enhanced->subject);
            w.u64(r.enhanced->detail);
        }
        if (v3) {
            // 0 and the text, or its offset in the reason plus one, then its length.
            const std::size_t at = r.text.empty() ? std::string::npos : e.reason.find(r.text);
            if (at == std::string::npos) {
                w.u64(0);
                w.str(r.text);
            } else {
                w.u64(at + 1);
                w.u64(r.text.size());
            }
        } else {
            w.str(r.text);
        }
        w.byte(static_cast<unsigned>(r.stage));
        w.byte(static_cast<unsigned>(r.local));
        w.str(r.remote_host);
        w.str(r.remote_addr);
        w.byte(r.truncated ? 1 : 0);
    }
    w.str(e.sender);
    w.i64(e.size);
    w.i64(e.nrcpt);
    w.str(e.message_id);
    w.byte(e.resent ? 1 : 0);
    w.str(e.orig_queue_id);
    w.i64(e.uid);
    w.str(e.client);
    w.str(e.action);
    w.str(e.stage);
    w.str(e.new_queue_id);
    w.u64(e.fields.size());
    for (const auto& [k, v] : e.fields) {
        w.str(k);
        w.str(v);
    }
    w.str(e.destination);
    w.str(e.unknown_kind);
    if (!v3) w.str(e.text);
    w.byte(e.truncated ? 1 : 0);
}
}  // namespace

std::string encode_journal_event(const IngestItem& item) {
    Writer w(kEventV3, true);
    write_event(w, item, true);
    return w.take();
}

std::string encode_journal_tick(TimePoint now) {
    Writer w(kTickV1);
    w.i64(to_micros(now));
    return w.take();
}

std::string encode_journal_clear_flag(std::string_view destination, TimePoint now) {
    Writer w(kClearFlagV1);
    w.i64(to_micros(now));
    w.str(destination);
    return w.take();
}

namespace {
void append_framed_item(std::string& batch, const IngestItem& item) {
    // The batch frames each entry with its length (8 bytes, as Writer::str),
    // written once the entry is: encoded in place, not copied.
    const std::size_t at = batch.size();
    batch.append(8, '\0');
    Writer w(kEventV3, true, std::move(batch));
    write_event(w, item, true);
    batch = w.take();
    const std::uint64_t n = batch.size() - at - 8;
    for (int i = 0; i < 8; ++i)
        batch[at + static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
}
}  // namespace

void append_journal_batch_item(std::string& batch, const IngestItem& item) {
    if (!item.journal.empty()) {
        batch += item.journal;
        return;
    }
    append_framed_item(batch, item);
}

void encode_journal_batch_item(std::string& out, const IngestItem& item) {
    out.clear();
    append_framed_item(out, item);
}

bool split_journal_batch(std::string_view entry, std::size_t items, std::vector<std::string_view>& parts) {
    parts.clear();
    if (!entry.starts_with(kJournalBatchTag)) return false;
    // Each part as decode_journal_entry reads it: a length, then the item.
    Reader r(entry.substr(kJournalBatchTag.size()));
    while (!r.done()) {
        if (parts.size() == items) return false;
        const std::string_view from = r.remaining();
        (void)r.view();
        if (!r.ok()) return false;
        parts.push_back(from.substr(0, from.size() - r.remaining().size()));
    }
    return parts.size() == items;
}

namespace {
bool decode_one(std::string_view data, EngineJournalRecord& out);

// Entries shorter than this are kept as they are: a frame's own bytes would
// take most of what compression saves (a follower's batch of a few lines).
constexpr std::size_t kCompressFrom = 256;
// zstd's fastest regular level: a batch's entry about 6x smaller at several
// hundred MB/s on one core (docs/performance.md).
constexpr int kCompressLevel = 1;

struct CCtxFree {
    void operator()(ZSTD_CCtx* c) const noexcept { ZSTD_freeCCtx(c); }
};
struct DCtxFree {
    void operator()(ZSTD_DCtx* d) const noexcept { ZSTD_freeDCtx(d); }
};

// One context per thread, kept: making one costs more than a small entry's
// compression. nullptr when zstd could not allocate it.
ZSTD_CCtx* thread_cctx() {
    thread_local std::unique_ptr<ZSTD_CCtx, CCtxFree> c(ZSTD_createCCtx());
    return c.get();
}
ZSTD_DCtx* thread_dctx() {
    thread_local std::unique_ptr<ZSTD_DCtx, DCtxFree> d(ZSTD_createDCtx());
    return d.get();
}

// The batch entry inside a compressed one, into `out`; false when `data` is
// not a compressed entry this program wrote (only batch entries are
// compressed), or would exceed kMaxJournalEntryBytes.
bool decompress_batch_entry(std::string_view data, std::string& out) {
    Reader r(data.substr(kJournalCompressedTag.size()));
    const std::uint64_t size = r.fixed64();
    if (!r.ok() || size == 0 || size > kMaxJournalEntryBytes) return false;
    const std::string_view frame = r.remaining();
    if (ZSTD_getFrameContentSize(frame.data(), frame.size()) != size) return false;
    ZSTD_DCtx* d = thread_dctx();
    if (!d) return false;
    out.resize(static_cast<std::size_t>(size));
    const std::size_t n = ZSTD_decompressDCtx(d, out.data(), out.size(), frame.data(), frame.size());
    return !ZSTD_isError(n) && n == size && out.front() == kJournalBatchTag.front();
}
}  // namespace

bool compress_journal_entry(std::string_view entry, std::string& out) {
    out.clear();
    if (entry.size() < kCompressFrom || entry.size() > kMaxJournalEntryBytes) return false;
    ZSTD_CCtx* c = thread_cctx();
    if (!c) return false;
    const std::size_t head = kJournalCompressedTag.size() + 8;
    out.resize(head + ZSTD_compressBound(entry.size()));
    const std::size_t n = ZSTD_compressCCtx(c, out.data() + head, out.size() - head, entry.data(),
                                            entry.size(), kCompressLevel);
    if (ZSTD_isError(n) || head + n >= entry.size()) {
        out.clear();
        return false;
    }
    out.resize(head + n);
    Writer prefix(kJournalCompressedTag.front());  // fixed 8-byte size
    prefix.u64(entry.size());
    out.replace(0, head, prefix.take());
    return true;
}

std::string_view stored_journal_entry(std::string_view entry, std::string& scratch) {
    return compress_journal_entry(entry, scratch) ? std::string_view(scratch) : entry;
}

std::string_view plain_journal_entry(std::string_view stored, std::string& scratch) {
    if (stored.empty() || stored.front() != kJournalCompressedTag.front()) return stored;
    return decompress_batch_entry(stored, scratch) ? std::string_view(scratch) : stored;
}

bool decode_journal_entry(std::string_view data, std::vector<EngineJournalRecord>& out) {
    if (data.empty()) return false;
    if (data.front() == kJournalCompressedTag.front()) {
        std::string inner;
        return decompress_batch_entry(data, inner) && decode_journal_entry(inner, out);
    }
    if (data.front() != kJournalBatchTag.front()) {
        EngineJournalRecord r;
        if (!decode_one(data, r)) return false;
        out.push_back(std::move(r));
        return true;
    }
    const std::size_t before = out.size();
    Reader r(data.substr(1));
    while (!r.done()) {
        const std::string_view e = r.view();
        EngineJournalRecord rec;
        if (!r.ok() || !decode_one(e, rec) || rec.kind != EngineJournalRecord::Kind::event) {
            out.resize(before);
            return false;
        }
        out.push_back(std::move(rec));
    }
    return true;
}

namespace {
bool decode_one(std::string_view data, EngineJournalRecord& out) {
    if (data.empty()) return false;
    const char tag = data.front();
    Reader r(data.substr(1));
    out = EngineJournalRecord{};
    if (tag == kTickV1) {
        out.kind = EngineJournalRecord::Kind::tick;
        out.time = from_micros(r.i64());
        return r.ok() && r.done();
    }
    if (tag == kClearFlagV1) {
        out.kind = EngineJournalRecord::Kind::clear_flag;
        out.time = from_micros(r.i64());
        out.destination = r.str();
        return r.ok() && r.done();
    }
    if (tag != kEventV1 && tag != kEventV2 && tag != kEventV3) return false;
    const bool v3 = tag == kEventV3;
    if (tag != kEventV1) r = Reader(data.substr(1), true);
    out.kind = EngineJournalRecord::Kind::event;
    const unsigned category = r.byte();
    if (category > static_cast<unsigned>(Category::unknown)) return false;
    out.item.category = static_cast<Category>(category);
    Event& e = out.item.event;
    const unsigned kind = r.byte();
    if (kind > static_cast<unsigned>(EventKind::unknown)) return false;
    e.kind = static_cast<EventKind>(kind);
    e.time = from_micros(r.i64());
    e.host = r.str();
    e.program = r.str();
    e.process = r.str();
    e.pid = r.i64();
    e.queue_id = r.str();
    e.recipient = r.str();
    e.orig_recipient = r.str();
    e.relay = r.str();
    e.relay_host = r.str();
    e.relay_addr = r.str();
    e.relay_port = static_cast<int>(r.i64());
    e.dsn = r.str();
    const unsigned status = r.byte();
    if (status > static_cast<unsigned>(DeliveryStatus::undeliverable)) return false;
    e.status = static_cast<DeliveryStatus>(status);
    e.delay = r.f64();
    e.delays = r.str();
    e.conn_use = r.str();
    e.tls = r.str();
    e.reason = r.str();
    if (r.byte()) {
        Reply rep;
        rep.code = static_cast<int>(r.i64());
        if (r.byte()) {
            EnhancedCode ec;
            ec.klass = static_cast<std::uint8_t>(r.byte());
            ec.subject = static_cast<std::uint16_t>(r.u64());
            ec.detail = static_cast<std::uint16_t>(r.u64());
            rep.enhanced = ec;
        }
        if (!v3) {
            rep.text = r.str();
        } else if (const std::uint64_t at = r.u64(); at == 0) {
            rep.text = r.str();
        } else {
            const std::uint64_t n = r.u64();
            if (at - 1 > e.reason.size() || n > e.reason.size() - (at - 1)) return false;
            rep.text = e.reason.substr(at - 1, n);
        }
        rep.stage = static_cast<SmtpStage>(r.byte());
        rep.local = static_cast<LocalFailure>(r.byte());
        rep.remote_host = r.str();
        rep.remote_addr = r.str();
        rep.truncated = r.byte() != 0;
        e.reply = std::move(rep);
    }
    e.sender = r.str();
    e.size = r.i64();
    e.nrcpt = static_cast<int>(r.i64());
    e.message_id = r.str();
    e.resent = r.byte() != 0;
    e.orig_queue_id = r.str();
    e.uid = r.i64();
    e.client = r.str();
    e.action = r.str();
    e.stage = r.str();
    e.new_queue_id = r.str();
    const std::uint64_t nfields = r.u64();
    for (std::uint64_t i = 0; i < nfields && r.ok(); ++i) {
        std::string k = r.str();
        std::string v = r.str();
        e.fields.emplace_back(std::move(k), std::move(v));
    }
    e.destination = r.str();
    e.unknown_kind = r.str();
    if (!v3) e.text = r.str();
    e.truncated = r.byte() != 0;
    return r.ok() && r.done();
}

}  // namespace

}  // namespace retryguard
