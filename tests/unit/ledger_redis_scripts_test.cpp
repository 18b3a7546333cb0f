// The Redis backend's Lua scripts: the embedded copies match the files in
// core/ledger/redis/, and each file states its KEYS, ARGV and return value.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "../../core/ledger/redis_scripts.hpp"

namespace retryguard::ledger_detail {
namespace {

std::filesystem::path script_dir() {
    return std::filesystem::path(RETRYGUARD_SOURCE_DIR) / "core/ledger/redis";
}

TEST(LedgerRedisScripts, EmbeddedTextMatchesTheLuaFiles) {
    std::size_t files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(script_dir()))
        if (entry.path().extension() == ".lua") ++files;
    ASSERT_EQ(files, redis_scripts().size()) << "run scripts/gen-redis-scripts.sh";
    for (const auto& script : redis_scripts()) {
        std::ifstream in(script_dir() / (std::string(script.name) + ".lua"));
        ASSERT_TRUE(in) << script.name;
        std::stringstream text;
        text << in.rdbuf();
        EXPECT_EQ(text.str(), script.text) << script.name << ".lua changed: run scripts/gen-redis-scripts.sh";
    }
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
