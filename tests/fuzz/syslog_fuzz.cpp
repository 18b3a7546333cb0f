// syslog_fuzz.cpp -- fuzz target for the syslog datagram parser: any bytes must
// give either a clear error or a bounded line without newline or NUL.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "retryguard/follow/follower.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    constexpr std::size_t kMax = 2048;
    auto r = retryguard::syslog_datagram_to_line(in, "fuzzhost", kMax);
    if (r.ok()) {
        const auto& line = r->line;
        if (line.size() > kMax) std::abort();
        if (line.find('\n') != std::string::npos || line.find('\0') != std::string::npos) std::abort();
        if (r->facility < 0 || r->facility > 23 || r->severity < 0 || r->severity > 7) std::abort();
        if (r->truncated && line.size() != kMax) std::abort();
    } else if (r.error().message.empty()) {
        std::abort();
    }
    return 0;
}
