// syslog_header.hpp -- the pieces of a syslog header that the log parser (lines
// from files and as received on a socket, log_parser.cpp) and the syslog
// datagram reader (core/follow/syslog_parse.cpp) read alike: the priority, RFC
// 5424's version, its structured data and the byte-order mark before the
// message. Time stamps are time.hpp's. What a malformed header means (an
// unknown line, an error) stays each caller's. Not part of the public API.
//
// Must never: throw, allocate, or look past the view it is given.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace retryguard::syslog_header {

struct Priority {
    int value = 0;
    std::size_t length = 0;  // "<PRI>" with its brackets
};

// "<PRI>" at the start of s: one to three digits (their range is the caller's
// to check), or nullopt.
std::optional<Priority> scan_priority(std::string_view s) noexcept;

// RFC 5424's "1 " (VERSION SP) at the start of s: removed, true.
bool take_rfc5424_version(std::string_view& s) noexcept;

enum class StructuredData {
    skipped,       // "-" or every "[...]" element removed
    missing,       // s starts with neither: unchanged
    unterminated,  // an element never closes: s is left empty
};

// RFC 5424 STRUCTURED-DATA at the start of s: "-", or one or more
// "[id param="value" ...]" whose quoted values may hold escaped '"', '\' and ']'.
StructuredData skip_structured_data(std::string_view& s) noexcept;

// The UTF-8 byte-order mark RFC 5424 allows before MSG: removed.
void skip_bom(std::string_view& s) noexcept;

}  // namespace retryguard::syslog_header
