// redis_scripts.hpp -- the Lua scripts of the Redis ledger backend, embedded
// from core/ledger/redis/*.lua (each file's header states its KEYS, ARGV and
// return value). The definition is generated at build time by
// scripts/gen-redis-scripts.sh (core/CMakeLists.txt); nothing generated is committed.
#pragma once

#include <string_view>
#include <vector>

namespace retryguard::ledger_detail {

struct RedisScript {
    std::string_view name;  // file name without .lua
    std::string_view text;
};

// In file-name order.
const std::vector<RedisScript>& redis_scripts();

}  // namespace retryguard::ledger_detail
