// policy.hpp -- the Postfix policy-delegation protocol and the decision seam.
//
// Owns: the attribute model of SMTPD_POLICY_README (Postfix 2.1 .. 3.8), the
// incremental request parser with its limits, answer formatting, the action
// vocabulary, and the PolicyDecider interface through which a request gets its
// verdict. Must never do I/O, block, throw, or decide policy by itself: the
// verdict comes from a PolicyDecider, and the caller owns sockets and time.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "retryguard/result.hpp"

namespace retryguard {

// Every attribute Postfix sends in an smtpd_access_policy request, in the order
// SMTPD_POLICY_README lists them (the version that added each is noted).
enum class PolicyAttr : std::uint8_t {
    request,                   // 2.1
    protocol_state,            // 2.1
    protocol_name,             // 2.1
    helo_name,                 // 2.1
    queue_id,                  // 2.1
    sender,                    // 2.1
    recipient,                 // 2.1
    recipient_count,           // 2.1
    client_address,            // 2.1
    client_name,               // 2.1
    reverse_client_name,       // 2.1
    instance,                  // 2.1
    sasl_method,               // 2.2
    sasl_username,             // 2.2
    sasl_sender,               // 2.2
    size,                      // 2.2
    ccert_subject,             // 2.2, xtext
    ccert_issuer,              // 2.2, xtext
    ccert_fingerprint,         // 2.2
    encryption_protocol,       // 2.3
    encryption_cipher,         // 2.3
    encryption_keysize,        // 2.3
    etrn_domain,               // 2.3
    stress,                    // 2.5
    ccert_pubkey_fingerprint,  // 2.9
    client_port,               // 3.0
    policy_context,            // 3.1
    server_address,            // 3.2
    server_port,               // 3.2
    compatibility_level,       // 3.8
    mail_version,              // 3.8
};
inline constexpr std::size_t kPolicyAttrCount = 31;

std::string_view to_string(PolicyAttr attr) noexcept;
// The attribute named `name`, or false for a name this version does not know.
bool policy_attr_from_name(std::string_view name, PolicyAttr& out) noexcept;
// Postfix xtext-encodes these values (RFC 3461 "+XX"); the parser decodes them.
bool policy_attr_is_xtext(PolicyAttr attr) noexcept;

// Decodes RFC 3461 xtext ("Wietse+20Venema" -> "Wietse Venema") into `out`.
// False on a malformed escape (not "+" and two upper-case hex digits).
bool xtext_decode(std::string_view in, std::string& out);

// One request. Values live in strings whose capacity is kept from one request
// to the next, so a connection's steady state allocates nothing.
class PolicyRequest {
  public:
    std::string_view get(PolicyAttr attr) const noexcept { return values_[index(attr)]; }
    bool has(PolicyAttr attr) const noexcept { return (present_ >> index(attr)) & 1u; }
    // Attributes this version does not know (Postfix adds some over versions).
    std::uint32_t unknown_attributes() const noexcept { return unknown_; }
    std::uint32_t attribute_count() const noexcept { return count_; }

    // The recipient's domain ("" when there is no '@'), as sent.
    std::string_view recipient_domain() const noexcept;

    void clear() noexcept;
    std::string& slot(PolicyAttr attr) noexcept { return values_[index(attr)]; }
    void mark_present(PolicyAttr attr) noexcept { present_ |= (1ull << index(attr)); }
    void count_attribute(bool known) noexcept {
        ++count_;
        if (!known) ++unknown_;
    }

  private:
    static std::size_t index(PolicyAttr a) noexcept { return static_cast<std::size_t>(a); }
    std::array<std::string, kPolicyAttrCount> values_;
    std::uint64_t present_ = 0;
    std::uint32_t unknown_ = 0;
    std::uint32_t count_ = 0;
};

// Bounds on untrusted input. Postfix's own requests are under 2 KB; these leave
// room for long certificate names and attributes future versions may add.
struct PolicyLimits {
    std::size_t max_line_bytes = 4096;      // one "name=value\n" line
    std::size_t max_attributes = 128;       // lines per request, unknown ones included
    std::size_t max_request_bytes = 32768;  // whole request, empty line included
};

// Why a request was refused. The names are metric labels and log words.
enum class PolicyError : std::uint8_t {
    none,
    line_too_long,
    too_many_attributes,
    request_too_large,
    malformed_line,       // no '=' or empty name
    binary_data,          // NUL or another control byte
    bad_xtext,            // a ccert_* value with a broken "+XX" escape
    duplicate_attribute,  // a known attribute twice in one request
    bad_request_type,     // request= missing or not smtpd_access_policy
};
inline constexpr std::size_t kPolicyErrorCount = 9;
std::string_view to_string(PolicyError error) noexcept;

// Incremental parser: bytes may arrive in any pieces, several requests may
// arrive in one piece. feed() consumes bytes up to the end of one request.
class PolicyParser {
  public:
    enum class State { need_more, complete, error };

    explicit PolicyParser(PolicyLimits limits = {}) : limits_(limits) {}

    // Consumes bytes from the front of `input`. Returns `complete` with the
    // request in request() (valid until the next feed), `need_more` when all of
    // `input` was consumed without finishing a request, or `error` (sticky:
    // the connection must be closed; error() says why).
    State feed(std::string_view& input);

    const PolicyRequest& request() const noexcept { return request_; }
    PolicyError error() const noexcept { return error_; }
    // True while a request has started but not ended (for read deadlines).
    bool in_request() const noexcept { return request_bytes_ > 0; }

  private:
    State fail(PolicyError e) {
        error_ = e;
        return State::error;
    }
    State end_line();

    PolicyLimits limits_;
    PolicyRequest request_;
    std::string line_;  // the current line when it spans reads
    std::size_t request_bytes_ = 0;
    // successor_[i]: the attribute that followed attribute i-1 last time
    // (index 0: the first line). Starts in SMTPD_POLICY_README order.
    std::array<std::uint8_t, kPolicyAttrCount + 1> successor_ = [] {
        std::array<std::uint8_t, kPolicyAttrCount + 1> a{};
        for (std::size_t i = 0; i <= kPolicyAttrCount; ++i) a[i] = static_cast<std::uint8_t>(i);
        return a;
    }();
    std::size_t prev_ = 0;
    bool complete_pending_clear_ = false;
    PolicyError error_ = PolicyError::none;
};

// The actions retryguard may answer (SMTPD_ACCESS_README), by kind; the names
// are metric labels.
enum class ActionKind : std::uint8_t { dunno, warn, info, prepend, hold, defer_if_permit, reject };
inline constexpr std::size_t kActionKindCount = 7;
std::string_view to_string(ActionKind kind) noexcept;

struct Decision {
    ActionKind kind = ActionKind::dunno;
    std::string action = "DUNNO";  // the full action text sent to Postfix
};

// Checks an administrator's action text ("REJECT 5.7.1 closed", "WARN why",
// "PREPEND X-Retryguard: flagged") and classifies it. Refuses text Postfix would
// misread (newlines, control bytes, a missing required argument, > 512 bytes).
Result<Decision> parse_action(std::string_view text);

// Appends "action=<text>\n\n" to `out`.
void format_policy_answer(std::string& out, std::string_view action);

using PolicyClock = std::chrono::steady_clock;
using PolicyDeadline = PolicyClock::time_point;

// Where a request gets its verdict. The daemon calls decide() inline on its
// event loop when may_block() is false, otherwise on a worker thread with the
// deadline; a decider that misses the deadline is answered DUNNO by the caller.
// decide() must be thread-safe and must not throw.
class PolicyDecider {
  public:
    virtual ~PolicyDecider() = default;
    virtual Decision decide(const PolicyRequest& request, PolicyDeadline deadline) = 0;
    virtual bool may_block() const noexcept = 0;
    // Re-reads whatever the decider is built from (SIGHUP). On error the old
    // state stays in force and the error says why.
    virtual Status reload() = 0;
    virtual std::string describe() const = 0;
};

// A fixed table: destination domain -> action, read from a file with lines
// "domain ACTION [text...]" ('#' comments, blank lines). Lookups are
// case-insensitive and ignore a trailing dot. Used until the ledger-backed
// decider is wired in; answers inline (never blocks).
class StaticDestinationDecider final : public PolicyDecider {
  public:
    static Result<std::unique_ptr<StaticDestinationDecider>> load(std::string path);

    Decision decide(const PolicyRequest& request, PolicyDeadline deadline) override;
    bool may_block() const noexcept override { return false; }
    Status reload() override;
    std::string describe() const override;
    std::size_t size() const;

    struct Table;

  private:
    explicit StaticDestinationDecider(std::string path) : path_(std::move(path)) {}
    std::string path_;
    std::atomic<std::shared_ptr<const Table>> table_;  // swapped whole on reload
};

// Parses the table text (exposed for tests). Errors name the line.
Result<std::shared_ptr<const StaticDestinationDecider::Table>> parse_destination_table(std::string_view text);

}  // namespace retryguard
