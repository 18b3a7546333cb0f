// rules.hpp -- the in-memory form of one classifier rule (private to
// core/classify). Owns matching of the non-text conditions; never compiles or
// runs regular expressions (classifier.cpp does, all patterns of a layer at once).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "retryguard/category.hpp"
#include "retryguard/reply/reply.hpp"

namespace retryguard {

// An enhanced-code pattern: "4.3.5", "X.3.5", "4.7.*", "4.7.500-699".
struct CodePattern {
    int klass = 0;  // 2/4/5, 0 for X (any class)
    unsigned subject = 0;
    unsigned detail_lo = 0;
    unsigned detail_hi = 0;  // inclusive; "*" is 0-999

    bool matches(const EnhancedCode& c) const noexcept {
        return (klass == 0 || klass == c.klass) && subject == c.subject && c.detail >= detail_lo &&
               c.detail <= detail_hi;
    }
    // Higher is more precise: exact detail > range > any; explicit class > X.
    int specificity() const noexcept {
        int s = detail_lo == detail_hi ? 4 : (detail_lo == 0 && detail_hi == 999 ? 0 : 2);
        return s + (klass != 0 ? 1 : 0);
    }
};

// A basic-code pattern: "451" (451-451), "45x" (450-459), "4xx" (400-499).
struct BasicPattern {
    int lo = 0;
    int hi = 0;
    bool matches(int code) const noexcept { return code >= lo && code <= hi; }
};

enum class Tier { local, enhanced, text, basic };

struct RuleSpec {
    std::string name;
    Category category = Category::unknown;
    std::string origin;  // "file:line"
    std::string note;
    Tier tier = Tier::basic;
    std::vector<BasicPattern> codes;
    std::vector<CodePattern> enhanced;
    std::vector<CodePattern> refines;
    std::vector<LocalFailure> local;
    std::vector<SmtpStage> stages;
    std::optional<std::string> text;
    // Interned copies of name, origin and note (see Classification).
    std::string_view iname, iorigin, inote;

    // Every condition but the text pattern.
    bool conditions_hold(const Reply& r) const noexcept {
        if (!codes.empty()) {
            bool any = false;
            for (const auto& p : codes) any = any || p.matches(r.code);
            if (!any) return false;
        }
        if (!enhanced.empty()) {
            if (!r.enhanced) return false;
            bool any = false;
            for (const auto& p : enhanced) any = any || p.matches(*r.enhanced);
            if (!any) return false;
        }
        if (!local.empty()) {
            bool any = false;
            for (auto l : local) any = any || l == r.local;
            if (!any) return false;
        }
        if (!stages.empty()) {
            bool any = false;
            for (auto s : stages) any = any || s == r.stage;
            if (!any) return false;
        }
        return true;
    }

    // May this text rule decide over a precise code decision for `code`?
    bool may_refine(const EnhancedCode& code) const noexcept {
        for (const auto& p : enhanced)
            if (p.matches(code)) return true;
        for (const auto& p : refines)
            if (p.matches(code)) return true;
        return false;
    }
};

}  // namespace retryguard
