// text.hpp -- how text from outside is carried and rendered. Owns the one
// decision, per output, of what happens to bytes written by remote servers,
// clients and log lines: reply texts, addresses, queue ids from policy
// requests, Message-IDs, domains.
//
// Outside text is bytes. The ledger and the events keep them losslessly; only
// a renderer changes them, and each output has exactly one renderer here:
//
//   JSON      always valid UTF-8: every byte that is not part of a well-formed
//             UTF-8 sequence (RFC 3629: no overlong forms, no surrogates,
//             nothing above U+10FFFF) becomes one U+FFFD; C0 controls, DEL and
//             the code points the terminal renderer escapes (below) are written
//             as \uXXXX escapes, so JSON printed on a terminal carries no raw
//             control either.
//   terminal  for people: C0 controls (tab and newline included), DEL and bytes
//             of invalid UTF-8 are shown as \xNN; the C1 controls and the
//             characters that reorder or break lines (U+2028, U+2029,
//             U+202A..U+202E, U+2066..U+2069) as \uXXXX; all other valid UTF-8
//             is kept. Not reversible: it is for reading.
//   verdict   a field value or the key of a verdict line (docs/verdicts.md):
//             quoted when needed, escapes \" \\ \xHH; bytes the terminal
//             renderer would show escaped are escaped byte by byte, so a line
//             is valid UTF-8, one line, and the reader gives back the exact
//             bytes written.
//   HTML      the terminal rendering, then & < > " ' as entities.
//   policy    a value put into a policy answer's text (an SMTP reply line):
//             cut at a byte limit, never inside a character; C0 controls and
//             DEL become spaces; invalid UTF-8 bytes and the code points the
//             terminal renderer escapes become '?'.
//
// Must never throw on any input (it runs on the policy path and in libmilter
// callbacks' callers) except std::bad_alloc.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace retryguard::text {

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 when the byte
// there does not start one (RFC 3629). ASCII bytes are sequences of length 1.
std::size_t utf8_sequence_length(std::string_view s, std::size_t i) noexcept;
bool is_valid_utf8(std::string_view s) noexcept;

// The JSON rule as text: every byte not part of a well-formed sequence becomes
// U+FFFD (EF BF BD). What a JSON reader gets back from json_string(s).
std::string replace_invalid_utf8(std::string_view s);

// A JSON string literal, with the quotes.
void append_json_string(std::string& out, std::string_view s);
std::string json_string(std::string_view s);

// A JSON document serialised with append_json_string for every string (keys
// included): the only way a document leaves retryguard. `indent` < 0 is
// compact, otherwise the layout of nlohmann's dump(indent). Never throws on odd
// string content (nlohmann's own dump() throws on invalid UTF-8).
std::string json_dump(const nlohmann::json& doc, int indent = -1);

// Terminal rendering of one piece of outside text (see above).
void append_terminal(std::string& out, std::string_view s);
std::string terminal(std::string_view s);
// A copy of a JSON document with every string (keys included) rendered for a
// terminal: what the CLI renderers format, so no cell can forget it.
nlohmann::json terminal_document(const nlohmann::json& doc);

// Verdict-line value: returned as is when it needs no quoting, else in double
// quotes. Needs quoting: empty, any byte <= 0x20, '"', '\\', '=', or a byte the
// terminal renderer escapes.
std::string verdict_value(std::string_view value);
// Verdict-line key (the part before ": verdict="): "-" for the empty key
// (and "-" itself, which means "no key"); otherwise the value rule, so a key
// holding ": ", '=' or a space is quoted and cannot add fields to the line.
std::string verdict_key(std::string_view key);
// Reads one value written by verdict_value starting at text[pos]: quoted or a
// bare word up to the next space. Advances pos. False on malformed escapes or
// when a closing quote is followed by something other than `after` (a space
// after a value, ':' after a key, '=' after a field name). An unterminated
// quote runs to the end (a record cut by syslog's length limit).
bool read_verdict_value(std::string_view text, std::size_t& pos, std::string& value, char after = ' ');

// HTML text or attribute value.
std::string html(std::string_view s);

// A value for a policy answer's text, at most max_bytes bytes (see above).
void append_policy_text(std::string& out, std::string_view s, std::size_t max_bytes);
std::string policy_text(std::string_view s, std::size_t max_bytes);

// The longest prefix of s of at most max_bytes that does not end inside a
// well-formed UTF-8 sequence (bytes of invalid UTF-8 count as one unit each).
std::string_view utf8_prefix(std::string_view s, std::size_t max_bytes) noexcept;
// Shortened for a table cell: at most `max_chars` code points, the last three
// "..." when cut. Input must already be rendered (terminal()).
std::string clip(std::string_view s, std::size_t max_chars);
// Columns a rendered cell takes: code points, not counting CSI sequences
// (the renderers' own colours; outside text never holds a raw ESC).
std::size_t display_width(std::string_view s) noexcept;

// ASCII text helpers, independent of the locale: the protocols' keywords,
// header names, domains and addresses compare case-insensitively in ASCII
// only (RFC 5321 2.4, RFC 5322 1.2.2); bytes >= 0x80 are left as they are.
char ascii_lower(char c) noexcept;
std::string ascii_lower(std::string_view s);
bool iequals(std::string_view a, std::string_view b) noexcept;
bool istarts_with(std::string_view s, std::string_view prefix) noexcept;
// Without leading and trailing spaces, tabs, CRs and LFs.
std::string_view trim(std::string_view s) noexcept;

}  // namespace retryguard::text
