// The engine journal's byte format (core/ledger/journal.cpp): entries written
// by earlier versions (fixed 8-byte integers, tag 'E'; varints, tag 'V') stay
// readable after the layout without the line's text (tag 'W') replaced them,
// and every other field of an event survives it, negative numbers and any
// bytes included.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "retryguard/ledger/ledger.hpp"

namespace retryguard {
namespace {

// The version-1 layout ('E'), written field by field as the earlier program
// did; with `varint`, the version-2 layout ('V': integers and lengths as
// LEB128, signed ones zigzag, the delay still 8 bytes).
struct V1 {
    std::string out;
    bool varint = false;
    void u64(std::uint64_t v) {
        if (varint) {
            for (; v >= 0x80; v >>= 7) out.push_back(static_cast<char>((v & 0x7f) | 0x80));
            out.push_back(static_cast<char>(v));
            return;
        }
        fixed(v);
    }
    void fixed(std::uint64_t v) {
        for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    }
    void i64(std::int64_t v) {
        if (varint)
            u64((static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63));
        else
            u64(static_cast<std::uint64_t>(v));
    }
    void byte(unsigned v) { out.push_back(static_cast<char>(v & 0xff)); }
    void str(std::string_view s) {
        u64(s.size());
        out.append(s);
    }
};

IngestItem sample() {
    IngestItem item;
    item.category = Category::receiver_config;
    Event& e = item.event;
    e.kind = EventKind::delivery;
    e.time = from_micros(1795000000123456);
    e.host = "mx1";
    e.program = "postfix/smtp";
    e.process = "smtp";
    e.pid = 4242;
    e.queue_id = "4BX1";
    e.recipient = "u@dest.test";
    e.relay = "mx.dest.test[192.0.2.1]:25";
    e.relay_host = "mx.dest.test";
    e.relay_addr = "192.0.2.1";
    e.relay_port = 25;
    e.dsn = "4.3.5";
    e.status = DeliveryStatus::deferred;
    e.delay = 1.5;
    static const char kReason[] = "host said: 451 4.3.5 \xc3\x28 config\0error";  // not UTF-8, a NUL inside
    e.reason = std::string(kReason, sizeof kReason - 1);
    Reply r;
    r.code = 451;
    r.enhanced = EnhancedCode{4, 3, 5};
    r.text = "System config error";
    r.stage = SmtpStage::rcpt_to;
    r.remote_host = "mx.dest.test";
    e.reply = r;
    e.size = -1;
    e.nrcpt = 3;
    e.uid = -7;
    e.fields = {{"orig_to", "x@y"}};
    e.text = "4BX1: to=<u@dest.test>, status=deferred";
    return item;
}

std::string v1_entry(const IngestItem& item, bool varint = false) {
    const Event& e = item.event;
    V1 w;
    w.varint = varint;
    w.byte(varint ? 'V' : 'E');
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
    std::uint64_t d;
    std::memcpy(&d, &e.delay, sizeof d);
    w.fixed(d);
    w.str(e.delays);
    w.str(e.conn_use);
    w.str(e.tls);
    w.str(e.reason);
    w.byte(1);
    w.i64(e.reply->code);
    w.byte(1);
    w.byte(e.reply->enhanced->klass);
    w.u64(e.reply->enhanced->subject);
    w.u64(e.reply->enhanced->detail);
    w.str(e.reply->text);
    w.byte(static_cast<unsigned>(e.reply->stage));
    w.byte(static_cast<unsigned>(e.reply->local));
    w.str(e.reply->remote_host);
    w.str(e.reply->remote_addr);
    w.byte(e.reply->truncated ? 1 : 0);
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
    w.str(e.text);
    w.byte(e.truncated ? 1 : 0);
    return w.out;
}

TEST(LedgerJournal, AVersionOneEntryStillDecodesToTheSameEvent) {
    const IngestItem item = sample();
    std::vector<EngineJournalRecord> out;
    ASSERT_TRUE(decode_journal_entry(v1_entry(item), out));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].kind, EngineJournalRecord::Kind::event);
    EXPECT_EQ(out[0].item.event.reason, item.event.reason);
    EXPECT_EQ(out[0].item.event.uid, -7);
    EXPECT_EQ(out[0].item.event.size, -1);
    EXPECT_EQ(out[0].item.event.text, item.event.text) << "the older layouts carry the line's text";
    // Re-encoded (compact), the decoded event is byte for byte the original's encoding.
    EXPECT_EQ(encode_journal_event(out[0].item), encode_journal_event(item));

    // A version-1 batch entry: "B", then each entry framed by its 8-byte length.
    V1 batch;
    batch.out = std::string(kJournalBatchTag);
    batch.str(v1_entry(item));
    batch.str(v1_entry(item));
    out.clear();
    ASSERT_TRUE(decode_journal_entry(batch.out, out));
    EXPECT_EQ(out.size(), 2u);
}

TEST(LedgerJournal, CompactEntriesAreSmallerAndRoundTripEveryField) {
    const IngestItem item = sample();
    const std::string compact = encode_journal_event(item);
    EXPECT_LT(compact.size() * 3, v1_entry(item).size() * 2) << "at least a third smaller";
    std::vector<EngineJournalRecord> out;
    ASSERT_TRUE(decode_journal_entry(compact, out));
    ASSERT_EQ(out.size(), 1u);
    const Event& e = out[0].item.event;
    EXPECT_EQ(out[0].item.category, Category::receiver_config);
    EXPECT_EQ(e.time, item.event.time);
    EXPECT_EQ(e.pid, 4242);
    EXPECT_EQ(e.uid, -7);
    EXPECT_EQ(e.size, -1);
    EXPECT_EQ(e.delay, 1.5);
    EXPECT_EQ(e.reason, item.event.reason);
    ASSERT_TRUE(e.reply && e.reply->enhanced);
    EXPECT_EQ(e.reply->enhanced->detail, 5);
    EXPECT_EQ(e.fields, item.event.fields);
    EXPECT_EQ(encode_journal_event(out[0].item), compact);

    std::string batch(kJournalBatchTag);
    append_journal_batch_item(batch, item);
    append_journal_batch_item(batch, item);
    out.clear();
    ASSERT_TRUE(decode_journal_entry(batch, out));
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(encode_journal_event(out[1].item), compact);
    out.clear();
    EXPECT_FALSE(decode_journal_entry(compact.substr(0, compact.size() - 3), out))
        << "a cut entry is refused";
    EXPECT_FALSE(decode_journal_entry(batch.substr(0, batch.size() - 1), out));
    EXPECT_TRUE(out.empty());
}

TEST(LedgerJournal, AnEntryEncodedAheadIsCopiedAsTheLedgerWouldEncodeIt) {
    // Ingestor::add_line encodes each item's entry on the reading thread; the
    // ledger's batch entry must be byte for byte what it encodes itself.
    IngestItem ahead = sample();
    encode_journal_batch_item(ahead.journal, ahead);
    ASSERT_FALSE(ahead.journal.empty());
    const IngestItem plain = sample();
    std::string mine(kJournalBatchTag), theirs(kJournalBatchTag);
    append_journal_batch_item(mine, plain);
    append_journal_batch_item(mine, plain);
    append_journal_batch_item(theirs, ahead);
    append_journal_batch_item(theirs, plain);
    EXPECT_EQ(theirs, mine);
    // What is copied is the stored encoding, not the event: a stale one would show.
    ahead.journal.back() ^= 1;
    std::string changed(kJournalBatchTag);
    append_journal_batch_item(changed, ahead);
    append_journal_batch_item(changed, plain);
    EXPECT_NE(changed, mine);
}

TEST(LedgerJournal, AVersionTwoEntryStillDecodesWithTheLineText) {
    const IngestItem item = sample();
    std::vector<EngineJournalRecord> out;
    ASSERT_TRUE(decode_journal_entry(v1_entry(item, true), out));
    ASSERT_EQ(out.size(), 1u);
    const Event& e = out[0].item.event;
    EXPECT_EQ(e.text, item.event.text);
    EXPECT_EQ(e.reason, item.event.reason);
    EXPECT_EQ(e.uid, -7);
    EXPECT_EQ(e.delay, 1.5);
    ASSERT_TRUE(e.reply);
    EXPECT_EQ(e.reply->text, "System config error");
    EXPECT_EQ(encode_journal_event(out[0].item), encode_journal_event(item));
}

TEST(LedgerJournal, EntriesLeaveOutTheLineTextAndPointIntoTheReason) {
    IngestItem item = sample();
    const std::string short_text = encode_journal_event(item);
    item.event.text.assign(2000, 'x');
    EXPECT_EQ(encode_journal_event(item).size(), short_text.size()) << "the line's text is not written";

    // A reply text inside the reason (as Postfix logs it) is written as its place there.
    static const char kReason[] = "host mx said: 451 4.3.5 \xc3\x28 config\0error (in reply to RCPT)";
    item.event.reason = std::string(kReason, sizeof kReason - 1);
    item.event.reply->text = item.event.reason.substr(21, 25);
    const std::string inside = encode_journal_event(item);
    std::string outside_reason = item.event.reason;
    outside_reason[21] = 'y';  // the reply text no longer appears in it
    IngestItem outside = item;
    outside.event.reason = outside_reason;
    const std::string literal = encode_journal_event(outside);
    EXPECT_LT(inside.size() + 20, literal.size());

    for (const auto* it : {&item, &outside}) {
        std::vector<EngineJournalRecord> out;
        ASSERT_TRUE(decode_journal_entry(encode_journal_event(*it), out));
        ASSERT_EQ(out.size(), 1u);
        const Event& e = out[0].item.event;
        EXPECT_TRUE(e.text.empty());
        EXPECT_EQ(e.reason, it->event.reason);
        ASSERT_TRUE(e.reply);
        EXPECT_EQ(e.reply->text, it->event.reply->text);
        EXPECT_EQ(e.reply->remote_host, "mx.dest.test");
    }
    // A place past the reason's end is refused, not read out of bounds.
    std::string bad = inside;
    const std::size_t at = bad.find("\x16\x19");  // offset 21 plus one, length 25
    ASSERT_NE(at, std::string::npos);
    bad[at] = static_cast<char>(100);
    std::vector<EngineJournalRecord> out;
    EXPECT_FALSE(decode_journal_entry(bad, out));
}

TEST(LedgerJournal, ACompressedBatchEntryDecodesToTheSameEventsAndHostileOnesAreRefused) {
    // A batch of varied events (as a log gives: the same hosts and replies,
    // different queue ids and recipients) is stored compressed; it must read
    // back to exactly the events of the plain entry.
    std::string batch(kJournalBatchTag);
    for (int i = 0; i < 200; ++i) {
        IngestItem item = sample();
        item.event.queue_id = "4BX" + std::to_string(i * 7919);
        item.event.recipient = "user" + std::to_string(i) + "@dest" + std::to_string(i % 13) + ".test";
        item.event.reason.push_back(static_cast<char>(i));  // any byte survives
        append_journal_batch_item(batch, item);
    }
    std::string z;
    ASSERT_TRUE(compress_journal_entry(batch, z));
    EXPECT_EQ(z.substr(0, 1), kJournalCompressedTag);
    EXPECT_LT(z.size() * 3, batch.size()) << "a batch of a log's events compresses well";
    std::string again;
    ASSERT_TRUE(compress_journal_entry(batch, again));
    EXPECT_EQ(again, z) << "deterministic: the entry made ahead equals the ledger's";
    EXPECT_EQ(stored_journal_entry(batch, again), std::string_view(z));
    std::string plain_scratch;
    EXPECT_EQ(plain_journal_entry(z, plain_scratch), std::string_view(batch)) << "and back";
    EXPECT_EQ(plain_journal_entry(batch, plain_scratch), std::string_view(batch));
    EXPECT_EQ(plain_journal_entry(z.substr(0, 20), plain_scratch), z.substr(0, 20)) << "damaged: as it is";

    std::vector<EngineJournalRecord> plain, unpacked;
    ASSERT_TRUE(decode_journal_entry(batch, plain));
    ASSERT_TRUE(decode_journal_entry(z, unpacked));
    ASSERT_EQ(unpacked.size(), 200u);
    ASSERT_EQ(plain.size(), unpacked.size());
    for (std::size_t i = 0; i < plain.size(); ++i)
        EXPECT_EQ(encode_journal_event(unpacked[i].item), encode_journal_event(plain[i].item)) << i;

    // Short entries are kept as they are.
    std::string one(kJournalBatchTag);
    append_journal_batch_item(one, sample());
    std::string scratch = "left over";
    EXPECT_FALSE(compress_journal_entry(one, scratch));
    EXPECT_TRUE(scratch.empty());
    EXPECT_EQ(stored_journal_entry(one, scratch), std::string_view(one));

    // Damaged or hostile compressed entries: refused, nothing appended.
    std::vector<EngineJournalRecord> out;
    auto with_size = [&](std::uint64_t size) {
        std::string e = z;
        for (int i = 0; i < 8; ++i) e[1 + i] = static_cast<char>((size >> (8 * i)) & 0xff);
        return e;
    };
    EXPECT_FALSE(decode_journal_entry(z.substr(0, z.size() - 1), out)) << "cut frame";
    EXPECT_FALSE(decode_journal_entry(z.substr(0, 5), out)) << "cut size";
    EXPECT_FALSE(decode_journal_entry(with_size(batch.size() + 1), out)) << "size that is not the frame's";
    EXPECT_FALSE(decode_journal_entry(with_size(std::uint64_t{1} << 62), out)) << "absurd size";
    EXPECT_FALSE(decode_journal_entry(with_size(kMaxJournalEntryBytes + 1), out)) << "over the bound";
    std::string huge(kMaxJournalEntryBytes + 1, 'x');
    huge.front() = kJournalBatchTag.front();
    EXPECT_FALSE(compress_journal_entry(huge, scratch)) << "stored as it is: readable without the bound";
    EXPECT_FALSE(decode_journal_entry(with_size(0), out));
    std::string flipped = z;
    flipped[flipped.size() / 2] ^= 0x5a;
    std::vector<EngineJournalRecord> maybe;
    if (decode_journal_entry(flipped, maybe)) {
        EXPECT_LE(maybe.size(), 200u);  // no crash either way
    }
    // A compressed entry inside a compressed one is not a form this program writes.
    std::string nested;
    ASSERT_TRUE(compress_journal_entry(z + std::string(300, 'x'), nested));
    EXPECT_FALSE(decode_journal_entry(nested, out));
    // Nor is a compressed tick: only batch entries are compressed.
    std::string tick_z;
    const std::string tick = encode_journal_tick(from_micros(1795000000000000)) + std::string(400, '\0');
    ASSERT_TRUE(compress_journal_entry(tick, tick_z));
    EXPECT_FALSE(decode_journal_entry(tick_z, out));
    EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace retryguard
