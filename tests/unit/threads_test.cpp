// threads_test.cpp -- a thread's name is its own: naming one thread leaves
// the others, the calling one included, alone.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "retryguard/runtime/threads.hpp"

namespace {

using retryguard::set_thread_name;

std::string comm_of(long tid) {
    std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/comm");
    std::string name;
    std::getline(in, name);
    return name;
}

long this_tid() {
    return static_cast<long>(::syscall(SYS_gettid));
}

TEST(Threads, ANameIsTheThreadsOwnAndCutTo15Bytes) {
    const std::string before = comm_of(this_tid());
    std::string inside, short_name;
    std::thread t([&] {
        set_thread_name("rg-a-name-longer-than-fifteen");
        inside = comm_of(this_tid());
        set_thread_name("rg-x");
        short_name = comm_of(this_tid());
    });
    t.join();
    EXPECT_EQ(inside, "rg-a-name-longe");
    EXPECT_EQ(short_name, "rg-x");
    EXPECT_EQ(comm_of(this_tid()), before);
}

}  // namespace
