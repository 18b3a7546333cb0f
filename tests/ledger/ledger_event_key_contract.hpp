// ledger_event_key_contract.hpp -- the event-key part of the ledger contract
// (docs/ledger.md "Event keys"), included by ledger_contract.hpp so that it
// runs on every backend: one secret per ledger, kept across openings, no
// horizon when fresh, and keys computed ahead with Ledger::event_keyer are the
// ones the ledger computes itself.
#pragma once

#include "ledger/ledger_contract.hpp"

namespace retryguard::ledger_test {

TEST_P(LedgerContract, EachLedgerKeepsOneSecretAndAFreshOneHasNoHorizon) {
    auto a = open();
    ASSERT_TRUE(a);
    auto k = a->event_keyer();
    ASSERT_TRUE(k.has_value());
    EXPECT_FALSE(k->horizon.has_value());
    EXPECT_NE(k->secret, decltype(k->secret){});
    auto again = open();
    ASSERT_TRUE(again);
    auto same = again->event_keyer();
    ASSERT_TRUE(same.has_value());
    EXPECT_EQ(same->secret, k->secret);
    EXPECT_EQ(same->horizon, k->horizon);
    auto other = open(".other");
    ASSERT_TRUE(other);
    auto k2 = other->event_keyer();
    ASSERT_TRUE(k2.has_value());
    EXPECT_NE(k2->secret, k->secret);
}

TEST_P(LedgerContract, KeysComputedAheadWithTheLedgersKeyerAreItsOwn) {
    auto l = open();
    ASSERT_TRUE(l);
    auto keyer = l->event_keyer();
    ASSERT_TRUE(keyer.has_value());
    auto items = synthetic_stream(20);
    ingest(*l, items);  // keys 0: the ledger computes them
    auto ahead = items;
    for (auto& item : ahead) item.key = event_key(item.event, *keyer);
    auto r = l->ingest(ahead, std::nullopt);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->applied, 0u);
    EXPECT_EQ(r->duplicates, items.size());
    // Keys under another secret are other keys: the ledger's are keyed by its own.
    EventKeyer foreign = *keyer;
    foreign.secret[0] ^= 1;
    auto other = synthetic_stream(1);
    for (auto& item : other) item.key = event_key(item.event, foreign);
    auto f = l->ingest(other, std::nullopt);
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ(f->applied, other.size());
}

}  // namespace retryguard::ledger_test
