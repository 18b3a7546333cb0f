// Event keys: SipHash-2-4 under the ledger's secret, the FNV-1a key of earlier
// versions before a ledger's horizon, and the upgrade of an SQLite ledger whose
// seen keys are all FNV-1a (docs/ledger.md "Event keys"). The contract part
// (both backends) is tests/ledger/ledger_event_key_contract.hpp.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "ledger/event_key_upgrade.hpp"
#include "ledger/ledger_events.hpp"
#include "retryguard/ledger/ledger.hpp"
#include "unit/follow_util.hpp"

namespace retryguard::ledger_test {
namespace {

EventKeyer keyer_with(unsigned char first) {
    EventKeyer k;
    for (std::size_t i = 0; i < k.secret.size(); ++i) k.secret[i] = static_cast<unsigned char>(first + i);
    return k;
}

// The reference SipHash-2-4 (Aumasson and Bernstein's key 00..0f) over the
// documented input layout: time in us, pid, the three lengths (64-bit little
// endian each), then host, program and text. Computed outside this code base;
// a change of this value changes every key stored in the field.
TEST(LedgerEventKey, IsSipHash24OfTheDocumentedLayout) {
    Event e;
    e.time = from_micros(1795000000123456);
    e.pid = 4242;
    e.host = "relay1";
    e.program = "postfix/smtp";
    e.text =
        "4F2A1B: to=<u@example.org>, status=deferred (host mx.example.org[192.0.2.1] said: 451 4.3.5 System "
        "config error)";
    EXPECT_EQ(event_key(e, keyer_with(0)), 0x0ed70306f790ce65ULL);
    EXPECT_EQ(event_key_fallbacks(), 0u);
}

TEST(LedgerEventKey, DependsOnEveryIdentifyingFieldAndTheSecret) {
    const EventKeyer keyer = keyer_with(7);
    auto a = deferred("Q1", 1, "a@b.test").event;
    auto k = event_key(a, keyer);
    EXPECT_EQ(k, event_key(deferred("Q1", 1, "a@b.test").event, keyer));
    EXPECT_NE(k, event_key(a, keyer_with(8)));
    auto b = a;
    b.pid = 7;
    EXPECT_NE(event_key(b, keyer), k);
    b = a;
    b.host = "other";
    EXPECT_NE(event_key(b, keyer), k);
    b = a;
    b.program = "postfix-out/smtp";
    EXPECT_NE(event_key(b, keyer), k);
    b = a;
    b.time += std::chrono::microseconds(1);
    EXPECT_NE(event_key(b, keyer), k);
    b = a;
    b.text += " ";
    EXPECT_NE(event_key(b, keyer), k);
    // Bytes moved from one field to the next make another input.
    b = a;
    b.host = a.host + a.program.substr(0, 1);
    b.program = a.program.substr(1);
    EXPECT_NE(event_key(b, keyer), k);
}

// Anyone can compute two reply texts with one FNV-1a key offline; the keyed
// key cannot be computed without the ledger's secret: under two secrets the
// keys of the same events agree nowhere, and neither is the FNV-1a key.
TEST(LedgerEventKey, KeysUnderTwoSecretsAreUnrelated) {
    const EventKeyer one = keyer_with(1), two = keyer_with(2);
    std::set<std::uint64_t> keys;
    for (int i = 0; i < 2000; ++i) {
        auto e = deferred("Q" + std::to_string(i), 1000, "u@dest.test").event;
        const auto k1 = event_key(e, one), k2 = event_key(e, two);
        EXPECT_NE(k1, k2);
        EXPECT_NE(k1, fnv_event_key(e));
        EXPECT_NE(k2, fnv_event_key(e));
        keys.insert(k1);
    }
    EXPECT_EQ(keys.size(), 2000u);
}

TEST(LedgerEventKey, EventsUpToTheHorizonKeepTheirUnkeyedKey) {
    EventKeyer keyer = keyer_with(3);
    keyer.horizon = at(500);
    auto before = deferred("Q1", 499, "a@b.test").event;
    auto on = deferred("Q1", 500, "a@b.test").event;
    auto after = deferred("Q1", 501, "a@b.test").event;
    EXPECT_EQ(event_key(before, keyer), fnv_event_key(before));
    EXPECT_EQ(event_key(on, keyer), fnv_event_key(on));
    EXPECT_NE(event_key(after, keyer), fnv_event_key(after));
    keyer.horizon.reset();
    EXPECT_NE(event_key(before, keyer), fnv_event_key(before));
}

void sql(const std::string& path, const std::string& text) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(db, text.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
}

// The (time, key) pairs of seen_batches, as the SQLite ledger packs them.
std::set<std::pair<std::int64_t, std::uint64_t>> seen_batch_keys(const std::string& path) {
    std::set<std::pair<std::int64_t, std::uint64_t>> out;
    sqlite3* db = nullptr;
    if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) return out;
    sqlite3_stmt* s = nullptr;
    sqlite3_prepare_v2(db, "SELECT keys FROM seen_batches", -1, &s, nullptr);
    auto u64 = [](const unsigned char* p) {
        std::uint64_t v = 0;
        for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
        return v;
    };
    while (s && sqlite3_step(s) == SQLITE_ROW) {
        auto* p = static_cast<const unsigned char*>(sqlite3_column_blob(s, 0));
        int n = sqlite3_column_bytes(s, 0);
        for (int i = 0; i + 16 <= n; i += 16)
            out.emplace(static_cast<std::int64_t>(u64(p + i)), u64(p + i + 8));
    }
    sqlite3_finalize(s);
    sqlite3_close(db);
    return out;
}

// A ledger recorded before the secret: its seen keys are FNV-1a, it has no
// secret. The first opening with the secret sets the horizon at the newest
// seen event; a re-import of the old lines adds nothing, new lines are keyed.
TEST(LedgerEventKey, SqliteLedgerFromBeforeTheSecretKeepsItsReplaysSeen) {
    const test::TempDir dir;
    const auto path = dir / "upgrade.db";
    const std::vector<IngestItem> old = {client("Q1", 100), queue_active("Q1", 101, "a@src.test"),
                                         deferred("Q1", 102, "u@dest.test")};
    {
        auto l = open_ledger("sqlite:" + path);
        ASSERT_TRUE(l.ok()) << l.error().message;
        ASSERT_TRUE((*l)->ingest(old, std::nullopt).ok());
    }
    std::string rewrite = "BEGIN; DROP TABLE ledger_meta; DELETE FROM seen_batches;";
    for (const auto& item : old)
        rewrite += "INSERT INTO seen_events(time, key) VALUES(" + std::to_string(to_micros(item.event.time)) +
                   ", " + std::to_string(static_cast<std::int64_t>(fnv_event_key(item.event))) + ");";
    sql(path, rewrite + "COMMIT;");

    auto l = open_ledger("sqlite:" + path);
    ASSERT_TRUE(l.ok()) << l.error().message;
    const std::vector<IngestItem> later = {deferred("Q1", 700, "u@dest.test"),
                                           sent("Q1", 900, "u@dest.test")};
    expect_upgrade_keeps_replays(**l, old, later, [&](std::int64_t t, std::uint64_t key) {
        return seen_batch_keys(path).contains({t, key});
    });
    auto keyer = (*l)->event_keyer();
    ASSERT_TRUE(keyer.has_value());

    // The horizon is stored with the secret: the next opening keeps both.
    l->reset();
    auto reopened = open_ledger("sqlite:" + path);
    ASSERT_TRUE(reopened.ok());
    auto same = (*reopened)->event_keyer();
    ASSERT_TRUE(same.has_value());
    EXPECT_EQ(same->secret, keyer->secret);
    EXPECT_EQ(same->horizon, keyer->horizon);
    EXPECT_EQ((*reopened)->ingest(old, std::nullopt)->duplicates, old.size());
}

TEST(LedgerEventKey, AnUnreadableSecretRefusesToOpen) {
    const test::TempDir dir;
    const auto path = dir / "unreadable.db";
    ASSERT_TRUE(open_ledger("sqlite:" + path).ok());
    sql(path, "UPDATE ledger_meta SET value = 'garbage' WHERE name = 'event_keyer';");
    auto l = open_ledger("sqlite:" + path);
    ASSERT_FALSE(l.ok());
    EXPECT_NE(l.error().message.find("event key"), std::string::npos);
}

}  // namespace
}  // namespace retryguard::ledger_test
