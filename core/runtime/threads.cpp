// threads.cpp -- see threads.hpp.
#include "retryguard/runtime/threads.hpp"

#include <pthread.h>

#include <algorithm>

namespace retryguard {

void set_thread_name(std::string_view name) noexcept {
    char buf[16] = {};
    name.copy(buf, std::min<std::size_t>(name.size(), sizeof buf - 1));
    (void)::pthread_setname_np(::pthread_self(), buf);
}

}  // namespace retryguard
