// internal.hpp -- what the config loader, the key table and the generators
// share inside core/config. Owns the binding of table keys to Config fields.
// Must never be included outside core/config (the public face is config.hpp).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <re2/re2.h>
#include <re2/set.h>
#include <yaml-cpp/yaml.h>

#include "retryguard/config/config.hpp"

namespace retryguard::config {

struct MxPatternSet {
    explicit MxPatternSet(const RE2::Options& o) : set(o, RE2::ANCHOR_BOTH) {}
    RE2::Set set;
};

}  // namespace retryguard::config

namespace retryguard::config::detail {

inline TextMark to_text_mark(const YAML::Mark& m) noexcept {
    return TextMark{m.pos, m.line, m.column};
}

// A parsed value before it is stored into a typed field. Sizes, integers and
// file modes are int64; enums and enum lists are their spelled names (already
// checked against the key's allowed values).
using Value = std::variant<bool, std::int64_t, Duration, std::string, std::vector<std::string>, SocketSpec,
                           HostPort, PolicyAction, YAML::Node>;

struct Binder {
    void (*set_global)(Config&, const Value&) = nullptr;
    void (*set_settings)(Settings&, const Value&) = nullptr;
    std::string (*show)(const Settings&) = nullptr;
    void (*set_source)(SourceConfig&, const Value&) = nullptr;
};

struct Entry {
    KeySpec spec;
    Binder bind;
};

std::span<const Entry> entries() noexcept;
const Entry* find_entry(std::string_view dotted) noexcept;

// Section headings for the generated YAML and docs ("ledger" -> one line).
std::string_view section_doc(std::string_view section) noexcept;

// Placeholders allowed in the text of a key (policy actions, reject text).
std::span<const std::string_view> placeholders_for(std::string_view key) noexcept;

// Enum spellings, index = enumerator value.
std::span<const std::string_view> category_names() noexcept;
std::span<const std::string_view> action_verbs() noexcept;

// Settings::subject_ignore_re from subject_ignore (already validated).
void finalize(Settings& s);

// The full-width default Config (every key at its default), built from the table.
Config build_defaults(std::vector<Diagnostic>* problems);

}  // namespace retryguard::config::detail
