#include "retryguard/category.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace retryguard {
namespace {

TEST(Category, EveryCategoryRoundTripsThroughItsName) {
    for (const auto& entry : all_categories()) {
        auto parsed = category_from_string(entry.name);
        ASSERT_TRUE(parsed.has_value()) << entry.name;
        EXPECT_EQ(*parsed, entry.category);
        EXPECT_EQ(to_string(entry.category), entry.name);
    }
}

TEST(Category, NamesAreUniqueAndUnknownNamesAreRejected) {
    std::set<std::string> names;
    for (const auto& entry : all_categories()) EXPECT_TRUE(names.insert(std::string(entry.name)).second);
    EXPECT_FALSE(category_from_string("receiver_config").has_value());
    EXPECT_FALSE(category_from_string("").has_value());
}

TEST(Category, SystemConditionsAreNeverReputationSignals) {
    // GUIDANCE 3.6: receiver-config, receiver-system and network never penalise the sender or address.
    EXPECT_TRUE(info(Category::receiver_config).system_condition);
    EXPECT_TRUE(info(Category::receiver_system).system_condition);
    EXPECT_TRUE(info(Category::network).system_condition);
    EXPECT_FALSE(info(Category::address).system_condition);
    EXPECT_FALSE(info(Category::policy).system_condition);
}

}  // namespace
}  // namespace retryguard
