// classifier.hpp -- turns a parsed Reply into a deferral category (GUIDANCE
// section 2) using rules that are data: the shipped conf/classifier.yaml plus
// optional user rules in the same format, layered on top.
//
// Precedence (docs/classifier.md): user rule > Postfix local failure > precise
// enhanced code > text pattern > basic code > unknown. A text rule may refine a
// precise enhanced code only when the rule lists that code (`enhanced:` or
// `refines:`); otherwise the code decides and the text is only noted.
//
// A Classifier is an immutable snapshot: build it once (patterns are compiled
// then, all text patterns of a layer into one RE2::Set), share it between
// threads, replace it on reload. Nothing here throws.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "retryguard/category.hpp"
#include "retryguard/reply/reply.hpp"
#include "retryguard/result.hpp"

namespace YAML {
class Node;  // yaml-cpp: callers of parse_rules(node) include <yaml-cpp/yaml.h>
}

namespace retryguard {

// Which tier of the precedence decided.
enum class Decider {
    user_rule,        // a rule from the user's layer
    local_failure,    // the sending Postfix's own failure text (no remote reply)
    enhanced_code,    // a precise enhanced status code
    text_refinement,  // a text rule that may refine the reply's precise code
    text,             // a text rule, no precise code present
    basic_code,       // the 3-digit code alone
    success,          // a 2xx reply or a local delivery: nothing to classify
    none,             // nothing matched: category unknown
};
std::string_view to_string(Decider d) noexcept;  // "user-rule", "enhanced-code", ...

// The strings in a Classification are views of interned rule text: they stay
// valid for the life of the process, across reloads, so a Classification may
// be kept and copied freely and classifying allocates nothing for them.
struct Classification {
    Category category = Category::unknown;
    Decider decided_by = Decider::none;
    std::string_view rule;                            // name of the deciding rule ("" when none)
    std::string_view rule_origin;                     // "file:line" of the deciding rule
    std::string_view rule_note;                       // the deciding rule's `note:`
    std::string_view code_name;                       // registry name of the enhanced code ("" when none)
    std::optional<std::chrono::seconds> retry_after;  // "try again in 5 minutes" -> 300 s
    // decided_by == text_refinement: the precise-code rule the text refined.
    std::string_view refined_rule;
    Category refined_category = Category::unknown;
    // A text rule that matched but was not allowed to override the precise code.
    std::string_view overruled_rule;
    Category overruled_category = Category::unknown;
    bool delivered = false;  // 2xx / "delivered to ...": not a deferral at all

    const CategoryInfo& info() const noexcept { return retryguard::info(category); }
    // One readable sentence from rule_note, refined_rule and overruled_rule
    // ("" when there is nothing to add); `reply` supplies the code's spelling.
    std::string note(const Reply& reply) const;
};

// The parsed, uncompiled rules of one layer (one file or YAML node).
struct RuleSpec;
class RuleFile {
  public:
    RuleFile();
    ~RuleFile();
    RuleFile(RuleFile&&) noexcept;
    RuleFile& operator=(RuleFile&&) noexcept;
    RuleFile(const RuleFile&);
    RuleFile& operator=(const RuleFile&);

    std::size_t size() const noexcept;
    const std::string& file_name() const noexcept { return file_name_; }

  private:
    friend Result<RuleFile> parse_rules(const YAML::Node&, std::string_view);
    friend class Classifier;
    std::string file_name_;
    std::vector<RuleSpec> rules_;
};

// Reads rules from a YAML node: either a map with a `rules:` sequence (the
// file format) or the sequence itself (as embedded in the main config).
// Errors carry "file:line:column: message" and ErrorKind::config. Patterns
// are syntax-checked here with RE2.
Result<RuleFile> parse_rules(const YAML::Node& node, std::string_view file_name);
Result<RuleFile> parse_rules_file(const std::filesystem::path& path);

// Where the shipped rule file is: `explicit_path` if given, else
// $RETRYGUARD_DATADIR/classifier.yaml, else the installed data directory, else
// the source tree's conf/. Errors when the chosen candidate does not exist.
Result<std::filesystem::path> find_shipped_rules(const std::filesystem::path& explicit_path = {});

// Limits that keep a rule file from exhausting memory or time.
inline constexpr std::size_t kMaxRulesPerLayer = 4096;
inline constexpr std::size_t kMaxPatternLength = 4096;

class Classifier {
  public:
    // Compiles the shipped layer and optional user layers (later layers are
    // consulted first: the last user layer wins over earlier ones).
    static Result<Classifier> build(const RuleFile& shipped, const std::vector<RuleFile>& user_layers = {});

    // find_shipped_rules(shipped_path) + optional user rule file.
    static Result<Classifier> load(const std::filesystem::path& shipped_path = {},
                                   const std::filesystem::path& user_rules_path = {});

    Classification classify(const Reply& reply) const;

    // Convenience: parse_postfix_reason(reason, dsn) then classify().
    Classification classify_reason(std::string_view reason, std::string_view dsn = {}) const;

    std::size_t rule_count() const noexcept;

    struct Impl;  // opaque: compiled layers

  private:
    explicit Classifier(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
    std::shared_ptr<const Impl> impl_;
};

// Extracts a retry-after hint from a reply text: "try again in 300 seconds",
// "retry in 5 minutes", "Greylisted for 300 seconds", "come back in 00:05:00".
// "Please try again later" gives nullopt. Bounded to 7 days.
std::optional<std::chrono::seconds> extract_retry_after(std::string_view text);

}  // namespace retryguard
