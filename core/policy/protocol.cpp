// protocol.cpp -- the Postfix policy-delegation wire format: attribute names,
// xtext, the incremental request parser and answer formatting.
//
// Owns the bytes-to-PolicyRequest path, which runs once per request on the
// daemon's event loop, so it must stay allocation-free in the steady state and
// bounded on every input. Must never throw, log, or decide anything.
#include <algorithm>
#include <cstring>

#include "retryguard/policy/policy.hpp"

namespace retryguard {
namespace {

constexpr std::array<std::string_view, kPolicyAttrCount> kAttrNames = {
    "request",
    "protocol_state",
    "protocol_name",
    "helo_name",
    "queue_id",
    "sender",
    "recipient",
    "recipient_count",
    "client_address",
    "client_name",
    "reverse_client_name",
    "instance",
    "sasl_method",
    "sasl_username",
    "sasl_sender",
    "size",
    "ccert_subject",
    "ccert_issuer",
    "ccert_fingerprint",
    "encryption_protocol",
    "encryption_cipher",
    "encryption_keysize",
    "etrn_domain",
    "stress",
    "ccert_pubkey_fingerprint",
    "client_port",
    "policy_context",
    "server_address",
    "server_port",
    "compatibility_level",
    "mail_version",
};

constexpr std::array<std::string_view, kPolicyErrorCount> kErrorNames = {
    "none",        "line_too_long", "too_many_attributes", "request_too_large", "malformed_line",
    "binary_data", "bad_xtext",     "duplicate_attribute", "bad_request_type",
};

int hex_value(char c) noexcept {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

bool has_control_byte_scalar(const char* p, std::size_t n) noexcept {
    for (std::size_t i = 0; i < n; ++i) {
        const auto c = static_cast<unsigned char>(p[i]);
        if ((c < 0x20 && c != '\t') || c == 0x7f) return true;
    }
    return false;
}

// Control bytes never occur in what Postfix sends (it sanitizes peer input);
// one here means a confused or hostile peer. TAB is allowed: it is printable
// in Postfix's sense and may appear in certificate names. This scan touches
// every byte of every request, so it tests eight bytes at a time (exact "is
// there any byte < 0x20 or == 0x7f" tests) and looks closer only on a hit.
bool has_control_byte(std::string_view s) noexcept {
    constexpr std::uint64_t k01 = 0x0101010101010101ull;
    constexpr std::uint64_t k80 = 0x8080808080808080ull;
    const char* p = s.data();
    std::size_t n = s.size();
    while (n >= 8) {
        std::uint64_t x;
        std::memcpy(&x, p, 8);
        const std::uint64_t below_space = (x - 0x20 * k01) & ~x & k80;
        const std::uint64_t y = x ^ (0x7f * k01);
        const std::uint64_t del = (y - k01) & ~y & k80;
        if ((below_space | del) != 0 && has_control_byte_scalar(p, 8)) return true;
        p += 8;
        n -= 8;
    }
    return has_control_byte_scalar(p, n);
}

}  // namespace

std::string_view to_string(PolicyAttr attr) noexcept {
    return kAttrNames[static_cast<std::size_t>(attr)];
}

std::string_view to_string(PolicyError error) noexcept {
    return kErrorNames[static_cast<std::size_t>(error)];
}

bool policy_attr_from_name(std::string_view name, PolicyAttr& out) noexcept {
    for (std::size_t i = 0; i < kPolicyAttrCount; ++i) {
        if (kAttrNames[i] == name) {
            out = static_cast<PolicyAttr>(i);
            return true;
        }
    }
    return false;
}

bool policy_attr_is_xtext(PolicyAttr attr) noexcept {
    return attr == PolicyAttr::ccert_subject || attr == PolicyAttr::ccert_issuer;
}

bool xtext_decode(std::string_view in, std::string& out) {
    out.clear();
    for (std::size_t i = 0; i < in.size(); ++i) {
        const char c = in[i];
        if (c != '+') {
            out.push_back(c);
            continue;
        }
        if (i + 2 >= in.size()) return false;
        const int hi = hex_value(in[i + 1]);
        const int lo = hex_value(in[i + 2]);
        if (hi < 0 || lo < 0) return false;
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
    }
    return true;
}

std::string_view PolicyRequest::recipient_domain() const noexcept {
    const std::string_view rcpt = get(PolicyAttr::recipient);
    const auto at = rcpt.rfind('@');
    if (at == std::string_view::npos) return {};
    return rcpt.substr(at + 1);
}

void PolicyRequest::clear() noexcept {
    // Only the slots that were filled need clearing; clear() keeps capacity.
    std::uint64_t bits = present_;
    while (bits != 0) {
        const int i = __builtin_ctzll(bits);
        values_[static_cast<std::size_t>(i)].clear();
        bits &= bits - 1;
    }
    present_ = 0;
    unknown_ = 0;
    count_ = 0;
}

PolicyParser::State PolicyParser::feed(std::string_view& input) {
    if (error_ != PolicyError::none) return State::error;
    while (!input.empty()) {
        if (complete_pending_clear_) {
            request_.clear();
            complete_pending_clear_ = false;
        }
        const void* nl = std::memchr(input.data(), '\n', input.size());
        if (nl == nullptr) {
            if (line_.size() + input.size() > limits_.max_line_bytes) return fail(PolicyError::line_too_long);
            if (request_bytes_ + input.size() > limits_.max_request_bytes)
                return fail(PolicyError::request_too_large);
            // Refuse binary garbage (a TLS hello, say) now rather than at the
            // line limit; a CR at the very end may be half of a CRLF.
            if (!line_.empty() && line_.back() == '\r') return fail(PolicyError::binary_data);  // CR, no LF
            std::string_view head = input;
            if (head.back() == '\r') head.remove_suffix(1);
            if (has_control_byte(head)) return fail(PolicyError::binary_data);
            line_.append(input);
            request_bytes_ += input.size();
            input = {};
            return State::need_more;
        }
        const auto pos = static_cast<std::size_t>(static_cast<const char*>(nl) - input.data());
        request_bytes_ += pos + 1;
        if (request_bytes_ > limits_.max_request_bytes) return fail(PolicyError::request_too_large);
        if (line_.size() + pos + 1 > limits_.max_line_bytes) return fail(PolicyError::line_too_long);
        std::string_view line;
        if (line_.empty()) {
            line = input.substr(0, pos);
        } else {
            line_.append(input.data(), pos);
            line = line_;
        }
        input.remove_prefix(pos + 1);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // tolerate CRLF peers

        if (line.empty()) {
            line_.clear();
            const State s = end_line();
            if (s != State::need_more) return s;
            continue;
        }
        if (has_control_byte(line)) return fail(PolicyError::binary_data);
        const auto eq = line.find('=');
        if (eq == std::string_view::npos || eq == 0) return fail(PolicyError::malformed_line);
        if (request_.attribute_count() >= limits_.max_attributes)
            return fail(PolicyError::too_many_attributes);
        const std::string_view name = line.substr(0, eq);
        const std::string_view value = line.substr(eq + 1);
        // A Postfix version sends its attributes in one fixed order: guess the
        // successor seen last time before searching the table.
        const std::size_t guess = successor_[prev_];
        PolicyAttr attr = static_cast<PolicyAttr>(guess);
        bool known = guess < kPolicyAttrCount && kAttrNames[guess] == name;
        if (!known) known = policy_attr_from_name(name, attr);
        if (known) {
            successor_[prev_] = static_cast<std::uint8_t>(attr);
            prev_ = static_cast<std::size_t>(attr) + 1;
        }
        request_.count_attribute(known);
        if (known) {
            if (request_.has(attr)) return fail(PolicyError::duplicate_attribute);
            if (policy_attr_is_xtext(attr)) {
                if (!xtext_decode(value, request_.slot(attr))) return fail(PolicyError::bad_xtext);
            } else {
                request_.slot(attr).assign(value);
            }
            request_.mark_present(attr);
        }
        line_.clear();
    }
    return State::need_more;
}

// The empty line ends a request.
PolicyParser::State PolicyParser::end_line() {
    if (!request_.has(PolicyAttr::request) || request_.get(PolicyAttr::request) != "smtpd_access_policy")
        return fail(PolicyError::bad_request_type);
    request_bytes_ = 0;
    prev_ = 0;
    complete_pending_clear_ = true;
    return State::complete;
}

void format_policy_answer(std::string& out, std::string_view action) {
    out.append("action=");
    out.append(action);
    out.append("\n\n");
}

}  // namespace retryguard
