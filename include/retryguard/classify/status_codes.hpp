// status_codes.hpp -- the IANA "SMTP Enhanced Status Codes" registry (RFC 3463,
// RFC 5248 and the later additions through X.7.30), for naming a code in
// reports and explanations. Naming only: what a code means for the sender is
// the classifier's business (conf/classifier.yaml).
#pragma once

#include <span>
#include <string_view>

#include "retryguard/reply/reply.hpp"

namespace retryguard {

struct EnhancedCodeEntry {
    std::string_view code;       // registry spelling: "X.3.5", "X.7.YYY" (subject), "4.XXX.YYY" (class)
    std::string_view name;       // registry summary: "System incorrectly configured"
    std::string_view reference;  // defining document: "RFC 3463"
};

// Every enumerated code (X.S.D) of the registry, in registry order.
std::span<const EnhancedCodeEntry> enhanced_code_registry() noexcept;

// The subject sub-codes (X.0.YYY ... X.7.YYY) and class sub-codes (2/4/5.XXX.YYY).
std::span<const EnhancedCodeEntry> enhanced_subject_registry() noexcept;
std::span<const EnhancedCodeEntry> enhanced_class_registry() noexcept;

// The most precise registry entry for a code: the enumerated X.S.D entry when
// there is one, else the subject's generic X.S.YYY entry (e.g. 4.7.650 ->
// "X.7.YYY Security or Policy Status"), else nullptr (unregistered subject).
const EnhancedCodeEntry* lookup_enhanced_code(const EnhancedCode& code) noexcept;

// The name for display: the enumerated name, or "<subject name> (unregistered
// detail)" semantics via the generic entry; "" when the subject is unknown.
std::string_view enhanced_code_name(const EnhancedCode& code) noexcept;

// True when the registry enumerates exactly this subject.detail.
bool is_registered(const EnhancedCode& code) noexcept;

}  // namespace retryguard
