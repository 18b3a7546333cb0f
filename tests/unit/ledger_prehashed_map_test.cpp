// The map that keeps the SQLite ledger's destination rows in bulk mode
// (core/ledger/prehashed_map.hpp): keys hashed by the caller, open addressing
// with backward-shift erase. Checked against std::unordered_map under random
// inserts and erases, with hashes that collide on purpose.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "../../core/ledger/prehashed_map.hpp"

namespace retryguard::ledger_detail {
namespace {

TEST(PrehashedMap, AgreesWithAStandardMapUnderInsertsAndErases) {
    // hash_bits 2: four hash values for hundreds of keys (long runs, the
    // full key compared); 64: the hashes of real use.
    for (const int hash_bits : {2, 10, 64}) {
        std::mt19937_64 rng(static_cast<unsigned>(hash_bits));
        auto hash_of = [&](const std::string& key) -> std::uint64_t {
            const std::uint64_t h = std::hash<std::string>{}(key);
            return hash_bits == 64 ? h : h & ((std::uint64_t{1} << hash_bits) - 1);
        };
        PrehashedMap<int> map;
        std::unordered_map<std::string, std::pair<int, PrehashedMap<int>::Entry*>> model;
        for (int step = 0; step < 20000; ++step) {
            const std::string key = "domain\t" + std::to_string(rng() % 700);
            const std::uint64_t h = hash_of(key);
            auto* found = map.find(key, h);
            auto m = model.find(key);
            ASSERT_EQ(found != nullptr, m != model.end()) << key << " at step " << step;
            if (m != model.end()) {
                ASSERT_EQ(found, m->second.second) << "an entry keeps its address";
                ASSERT_EQ(found->value, m->second.first);
                ASSERT_EQ(found->key, key);
            }
            if (rng() % 3 == 0 && found) {
                map.erase(*found);
                model.erase(m);
            } else if (!found) {
                const int v = step;
                auto& e = map.insert(key, h, v);
                model.emplace(key, std::make_pair(v, &e));
            } else {
                found->value = step;
                m->second.first = step;
            }
            ASSERT_EQ(map.size(), model.size());
            map.prefetch(h, step % 3);  // harmless whatever the map holds
        }
        // Every key the model holds is found, and no other.
        for (const auto& [key, v] : model) {
            auto* e = map.find(key, hash_of(key));
            ASSERT_NE(e, nullptr) << key;
            EXPECT_EQ(e->value, v.first);
        }
        for (int k = 700; k < 800; ++k) {
            const std::string key = "domain\t" + std::to_string(k);
            EXPECT_EQ(map.find(key, hash_of(key)), nullptr);
        }
        map.clear();
        EXPECT_EQ(map.size(), 0u);
        EXPECT_EQ(map.find("domain\t1", hash_of("domain\t1")), nullptr);
        map.insert("relay\tmx", 5, 1);
        EXPECT_NE(map.find("relay\tmx", 5), nullptr);
        EXPECT_EQ(map.find("relay\tmx", 6), nullptr) << "looked up by the hash given";
        map.release();
        EXPECT_EQ(map.find("relay\tmx", 5), nullptr);
        map.prefetch(5, 1);
    }
}

}  // namespace
}  // namespace retryguard::ledger_detail
