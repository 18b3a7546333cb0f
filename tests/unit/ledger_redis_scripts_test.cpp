// The Redis backend's Lua scripts as the build embeds them (generated from
// core/ledger/redis/*.lua): one per file, and each states its KEYS, ARGV and
// return value.
#include <gtest/gtest.h>

#include <filesystem>

#include "../../core/ledger/redis_scripts.hpp"

namespace retryguard::ledger_detail {
namespace {

TEST(LedgerRedisScripts, OneEmbeddedScriptPerLuaFile) {
    std::size_t files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(
             std::filesystem::path(RETRYGUARD_SOURCE_DIR) / "core/ledger/redis"))
        if (entry.path().extension() == ".lua") ++files;
    EXPECT_EQ(files, redis_scripts().size());
    for (const auto& script : redis_scripts()) EXPECT_FALSE(script.text.empty()) << script.name;
}

TEST(LedgerRedisScripts, EachScriptStatesKeysArgumentsAndResult) {
    for (const auto& script : redis_scripts()) {
        EXPECT_NE(script.text.find("-- KEYS["), std::string_view::npos) << script.name;
        EXPECT_NE(script.text.find("-- ARGV["), std::string_view::npos) << script.name;
        EXPECT_NE(script.text.find("-- Returns"), std::string_view::npos) << script.name;
    }
}

}  // namespace
}  // namespace retryguard::ledger_detail
