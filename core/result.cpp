// result.cpp -- names of error kinds, for messages and logs.
#include "retryguard/result.hpp"

namespace retryguard {

const char* to_string(ErrorKind kind) noexcept {
    switch (kind) {
        case ErrorKind::invalid_input: return "invalid input";
        case ErrorKind::config: return "configuration error";
        case ErrorKind::io: return "I/O error";
        case ErrorKind::unavailable: return "unavailable";
        case ErrorKind::timeout: return "deadline passed";
        case ErrorKind::limit: return "limit exceeded";
        case ErrorKind::internal: return "internal error";
    }
    return "error";
}

}  // namespace retryguard
