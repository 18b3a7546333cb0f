// identity.hpp -- what makes two submissions "the same message": the
// normalised Message-ID and a content fingerprint that survives a resend from
// a mail client (new Message-ID, Date, Received headers, MIME boundaries).
//
// The milter computes both at end of message; the ledger stores them under
// the queue ID and the log ingest normalises the `message-id=<...>` Postfix
// logs with the same function, so both sides compare like with like.
// Nothing here throws; untrusted input is bounded.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace re2 {
class RE2;
}

namespace retryguard {

inline constexpr std::size_t kMaxMessageIdLength = 998;  // RFC 5322 line limit

// A Message-ID header value as a mail client wrote it ->  the form the ledger
// keys on (ledger.hpp normalize_message_id: no brackets, domain lowercased):
// "  <AbC.123@Example.COM> (comment)" -> "AbC.123@example.com".
// Unfolds, drops RFC 5322 comments (nested, with quoted-pairs), removes the
// whitespace the obsolete syntax allows, keeps the left part's case (it is
// case-sensitive) and lowercases the domain part. Takes the first <...> when
// there are several. nullopt: empty, unbalanced, too long or non-printable.
std::optional<std::string> parse_message_id_header(std::string_view header_value);

// Whether a header marks the message as sent by a program, not typed by a
// person: Auto-Submitted other than "no" (RFC 3834: alerts, cron mail,
// auto-replies), Precedence bulk/list/junk, or a mailing-list header
// (List-Id, List-Unsubscribe, List-Post; RFC 2369/2919). Such mail repeats
// identical content by nature (the same alert again, the same newsletter), so
// identical content from it is a new message, never a resend (docs/milter.md).
bool marks_automated(std::string_view header_name, std::string_view header_value) noexcept;

// Which parts of a message count for its fingerprint. All three by default;
// with none the fingerprint is disabled (empty).
struct FingerprintParts {
    bool sender = true;   // envelope sender, lowercased
    bool subject = true;  // unfolded, whitespace collapsed, ASCII-lowercased; prefixes are kept
    bool body = true;     // see FingerprintBuilder::body()
    bool any() const noexcept { return sender || subject || body; }
};

inline constexpr std::size_t kDefaultFingerprintBodyLimit = 16 * 1024 * 1024;

// Subject as it counts for the fingerprint: unfolded, runs of whitespace as one
// space, trimmed, ASCII-lowercased. "Re:", "Fwd:" and "[tag]" are kept on
// purpose: a resend keeps the subject, and stripping them would make a reply
// in a thread look like a resend of the message it answers.
std::string normalize_subject(std::string_view subject);

// Builds the fingerprint incrementally (the milter feeds body chunks as
// libmilter delivers them). The body is normalised line by line:
//  - line endings and all whitespace are ignored (CRLF vs LF, trailing
//    blanks, re-wrapped text and re-wrapped base64 hash the same);
//  - a quoted-printable soft line break (a line ending in "=") is ignored;
//  - MIME boundary strings (from the Content-Type header and from any
//    `boundary=` parameter inside the body) are replaced by a placeholder,
//    as clients choose a new one for every send.
// Only the first body_limit bytes of the body count.
class FingerprintBuilder {
  public:
    // subject_ignore (reinjection.fingerprint.subject_ignore): every match is
    // removed from the normalised subject before it is hashed; null: none.
    explicit FingerprintBuilder(FingerprintParts parts = {},
                                std::size_t body_limit = kDefaultFingerprintBodyLimit,
                                std::shared_ptr<const re2::RE2> subject_ignore = nullptr);
    ~FingerprintBuilder();
    FingerprintBuilder(FingerprintBuilder&&) noexcept;
    FingerprintBuilder& operator=(FingerprintBuilder&&) noexcept;

    void sender(std::string_view envelope_sender);
    // Every header may be passed; only Subject and Content-Type are used.
    void header(std::string_view name, std::string_view value);
    void body(std::string_view chunk);
    // Whether more body would change nothing: the body is not a part, or its
    // first body_limit bytes have been seen.
    bool body_done() const noexcept { return !parts_.body || body_seen_ >= body_limit_; }
    // 40 lowercase hex digits, or "" when no part counts. Ends the builder.
    std::string finish();

  private:
    void body_line(std::string_view line);
    void note_boundary(std::string_view text);
    void feed(std::string_view bytes);
    void flush_line();

    FingerprintParts parts_;
    std::size_t body_limit_;
    std::size_t body_seen_ = 0;
    std::string sender_;
    std::string subject_;
    bool have_subject_ = false;
    std::shared_ptr<const re2::RE2> subject_ignore_;
    std::string line_;            // the current partial body line (bounded)
    bool line_overflow_ = false;  // the current line exceeded the buffer: hashed as it came
    std::vector<std::string> boundaries_;
    // incremental hash of the normalised body, kept opaque here
    struct Hash;
    std::unique_ptr<Hash> body_hash_;
};

}  // namespace retryguard
