// event_key_upgrade.hpp -- what a ledger recorded before the event-key secret
// must do at its first opening with it (docs/ledger.md "Event keys"), checked
// the same way on each backend; the test rewrites the store as the older
// version left it and says how to look up one stored (time, key) pair.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "retryguard/ledger/ledger.hpp"

namespace retryguard::ledger_test {

// `l`: the ledger opened after the rewrite; `old`: the events recorded before
// it (FNV-1a keys), `later`: events after them; `stored(time, key)`: whether
// the store holds that seen key.
inline void expect_upgrade_keeps_replays(Ledger& l, const std::vector<IngestItem>& old,
                                         const std::vector<IngestItem>& later,
                                         const std::function<bool(std::int64_t, std::uint64_t)>& stored) {
    auto keyer = l.event_keyer();
    ASSERT_TRUE(keyer.has_value());
    ASSERT_TRUE(keyer->horizon.has_value());
    EXPECT_EQ(*keyer->horizon, old.back().event.time);
    auto again = l.ingest(old, std::nullopt);
    ASSERT_TRUE(again.ok()) << again.error().message;
    EXPECT_EQ(again->applied, 0u);
    EXPECT_EQ(again->duplicates, old.size());
    auto fresh = l.ingest(later, std::nullopt);
    ASSERT_TRUE(fresh.ok()) << fresh.error().message;
    EXPECT_EQ(fresh->applied, later.size());
    for (const auto& item : later) {
        const auto t = to_micros(item.event.time);
        EXPECT_TRUE(stored(t, event_key(item.event, *keyer)));
        EXPECT_FALSE(stored(t, fnv_event_key(item.event)));
    }
    EXPECT_EQ(l.ingest(later, std::nullopt)->duplicates, later.size());
}

}  // namespace retryguard::ledger_test
