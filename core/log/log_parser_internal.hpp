// log_parser_internal.hpp -- what the files of the log parser share: the
// small field readers (postfix_fields.cpp), the Postfix message shapes
// (postfix_message.cpp) and the syslog header pieces (syslog_header.hpp, also
// read by core/follow's datagram reader). LogParser itself (log_parser.cpp)
// reads the header and hands the message here. Not part of the public API:
// nothing outside core/log includes it.
//
// Must never: throw, or scan a line more than a constant number of times.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "retryguard/log/events.hpp"

namespace retryguard::log_detail {

using sv = std::string_view;
constexpr sv::size_type npos = sv::npos;

constexpr bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
constexpr bool is_upper_hex(char c) {
    return is_digit(c) || (c >= 'A' && c <= 'F');
}
constexpr bool is_alnum(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
constexpr bool is_lower(char c) {
    return c >= 'a' && c <= 'z';
}

inline bool starts_with(sv s, sv p) {
    return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

// Fixed-width decimal field; false unless every char is a digit.
bool digits(sv s, int& out);
bool parse_int64(sv s, std::int64_t& out);
bool parse_double(sv s, double& out);

// Postfix queue ids, short and long (enable_long_queue_ids).
bool is_queue_id(sv s);

// host[addr] or host[addr]:port at the start of s. Returns consumed length, 0 if
// s does not start with one.
std::size_t parse_host_addr(sv s, sv& host, sv& addr, int& port);
// relay=, split into host, address and port when it has that shape.
void set_relay(Event& ev, sv relay);

// Bounds what one hostile line can allocate; real lines carry a handful.
constexpr std::size_t kMaxFields = 64;

template <typename K, typename V>
void add_field(Event& ev, K&& key, V&& value) {
    if (ev.fields.size() < kMaxFields) ev.fields.emplace_back(std::string(key), std::string(value));
}

// "<a>" -> "a"; anything else unchanged.
sv strip_brackets(sv v);

// One "key=value" of a comma-separated Postfix list ("to=<a>, relay=x, ...").
// A value in angle brackets runs to the first ">" that ends the item, so a
// comma inside an address does not split it.
struct CommaScan {
    std::size_t pos = 0;
    // Next ">, " at or after the last search start (npos: none left). Remembered
    // so a hostile run of "<" items does not rescan the line for every item.
    std::size_t close = 0;
    bool close_valid = false;
};
bool next_comma_item(sv s, CommaScan& scan, sv& key, sv& value);

// Space-separated "key=value" tail of smtpd/cleanup action lines; the reason
// after ": " goes to *trailing_reason when given.
void parse_space_tail(sv s, Event& ev, sv* trailing_reason);

// "4.7.1" at the start of s or after a 3-digit code ("451 4.7.1 ...").
sv leading_dsn(sv s);

bool is_delivery_agent_like(sv process);
// A daemon (or command) name of Postfix's own.
bool is_postfix_process(sv p);

// Every field of an Event back to "nothing parsed".
void reset(Event& ev);

// retryguard's own "QID: verdict=NAME key=value ..." lines.
bool parse_verdict(sv text, Event& ev);

// Everything Postfix logs after "program[pid]: ". Returns the unknown kind when
// the message is not recognised, an empty view when it is.
sv parse_postfix_message(sv process, sv text, Event& ev);

}  // namespace retryguard::log_detail
