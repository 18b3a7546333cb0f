// threads.hpp -- names of the threads a process starts. A named thread shows
// in `top -H`, `ps -L`, perf and /proc/PID/task/TID/comm, so that an admin
// (or a profile) can tell the import's reading, engine and checkpoint threads
// from the one that writes the ledger.
#pragma once

#include <string_view>

namespace retryguard {

// Names the calling thread; Linux keeps the first 15 bytes. Best effort.
void set_thread_name(std::string_view name) noexcept;

}  // namespace retryguard
