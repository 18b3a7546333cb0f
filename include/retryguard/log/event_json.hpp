// event_json.hpp -- the JSON and one-line text forms of an Event, as printed by
// `retryguard events` and documented in docs/events.md. Field names here are a
// public interface: add, never rename.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "retryguard/log/events.hpp"

namespace retryguard {

// One JSON object: kind, time (RFC 3339), host, program, pid, queue_id, then the
// fields that apply to the kind. Deliveries always carry recipient, relay, dsn,
// status, reply_code, reply_enhanced, reply_text and stage (null when absent).
nlohmann::json event_to_json(const Event& event);

// The same object appended to `out` as compact JSON without building a DOM: the
// fast path for streams. Invalid UTF-8 becomes U+FFFD; never throws.
void append_event_json(const Event& event, std::string& out);

// The same as one human-readable line: "TIME KIND QID key=value ...".
std::string event_to_text(const Event& event);

}  // namespace retryguard
