// loader.cpp -- reads YAML into an immutable Config snapshot, driven by the
// key table: every key, type, range and allowed value comes from table.cpp.
// Collects every error with file:line:column (1-based) instead of stopping at
// the first. Must never throw (yaml-cpp and RE2 errors are caught here) and
// never decide policy.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <unordered_set>

#include "config/internal.hpp"
#include "config/values.hpp"
#include "retryguard/file_access.hpp"
#include "retryguard/follow/follower.hpp"
#include "retryguard/text/text.hpp"

namespace retryguard::config {

using detail::Entry;
using detail::Value;

namespace {

constexpr int kMaxDepth = 32;
constexpr std::size_t kMaxNodes = 200000;
constexpr std::size_t kMaxItems = 10000;  // sources / destinations entries
constexpr std::size_t kMaxErrors = 200;
constexpr std::size_t kMaxSuggestLength = 80;  // edit distance is quadratic; real keys are short

std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j)
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

std::string join(std::span<const std::string_view> items) {
    std::string out;
    for (auto i : items) out += (out.empty() ? "" : ", ") + std::string(i);
    return out;
}

std::string kind_of(const YAML::Node& n) {
    switch (n.Type()) {
        case YAML::NodeType::Map: return "a mapping";
        case YAML::NodeType::Sequence: return "a list";
        case YAML::NodeType::Null: return "nothing";
        case YAML::NodeType::Scalar: return "a scalar";
        default: return "an undefined node";
    }
}

std::string range_text(const KeySpec& k) {
    auto fmt = [&](std::int64_t v) {
        if (k.type == ValueType::duration) return format_duration(Duration(v));
        if (k.type == ValueType::size) return format_size(static_cast<std::uint64_t>(v));
        return std::to_string(v);
    };
    return fmt(k.min) + " and " + fmt(k.max);
}

// The keys and sections valid in one context (top level, a destination rule,
// a source entry), with the prefix that turns them into table spelling.
struct Context {
    enum Kind { top, destination, source } kind;
    std::map<std::string, const Entry*, std::less<>> keys;  // spelled as written in that context
    std::set<std::string, std::less<>> sections;

    explicit Context(Kind k) : kind(k) {
        for (const auto& e : detail::entries()) {
            std::string_view key = e.spec.key;
            bool take = false;
            switch (k) {
                case top: take = e.spec.scope == Scope::global || e.spec.scope == Scope::overridable; break;
                case destination:
                    if (e.spec.scope == Scope::overridable) take = true;
                    if (e.spec.scope == Scope::destination_item)
                        key.remove_prefix(sizeof("destinations[].") - 1), take = true;
                    break;
                case source:
                    if (e.spec.scope == Scope::source_item)
                        key.remove_prefix(sizeof("sources[].") - 1), take = true;
                    break;
            }
            if (!take) continue;
            keys.emplace(std::string(key), &e);
            for (auto dot = key.find('.'); dot != std::string_view::npos; dot = key.find('.', dot + 1))
                sections.emplace(key.substr(0, dot));
        }
    }

    std::string suggest(std::string_view wrong) const {
        if (wrong.size() > kMaxSuggestLength) return {};
        std::string best;
        std::size_t best_d = std::string::npos;
        auto consider = [&](const std::string& cand) {
            std::size_t d = edit_distance(wrong, cand);
            if (d < best_d) best_d = d, best = cand;
        };
        for (const auto& [k, e] : keys) consider(k);
        for (const auto& s : sections) consider(s);
        if (best_d <= std::max<std::size_t>(2, wrong.size() / 4)) return best;
        // A right leaf under the wrong section ("ledger.timeout" for ledger.redis.timeout).
        auto leaf = wrong.substr(wrong.rfind('.') + 1);
        auto head = wrong.substr(0, wrong.find('.'));
        for (const auto& [k, e] : keys)
            if (k.size() > leaf.size() && k.ends_with("." + std::string(leaf)) &&
                k.starts_with(std::string(head)))
                return k;
        return {};
    }
};

const Context& context(Context::Kind k) {
    static const Context top(Context::top), dest(Context::destination), src(Context::source);
    return k == Context::top ? top : k == Context::destination ? dest : src;
}

class Loader {
  public:
    explicit Loader(std::string file) : file_(std::move(file)) {}

    std::vector<Diagnostic> take_errors() { return std::move(errors_); }
    std::set<std::string> take_present() { return std::move(present_); }

    void error(const YAML::Mark& m, std::string message) {
        // A hostile or garbled file could otherwise produce millions of lines.
        if (errors_.size() > kMaxErrors) return;
        if (errors_.size() == kMaxErrors) message = "too many errors; giving up here";
        Diagnostic d;
        d.file = file_;
        if (m.line >= 0) d.line = m.line + 1, d.column = m.column + 1;
        d.message = std::move(message);
        errors_.push_back(std::move(d));
    }

    // The top-level document into `c`, which holds the defaults already.
    void load_root(const YAML::Node& root, Config& c, bool with_cross_checks = true) {
        if (root.IsNull()) return;
        if (!root.IsMap()) {
            error(root.Mark(), "the configuration must be a mapping of keys, got " + kind_of(root));
            return;
        }
        walk_map(
            root, "", context(Context::top), 0,
            [&](const Entry& e, const Value& v) {
                if (e.bind.set_global) e.bind.set_global(c, v);
                if (e.bind.set_settings) e.bind.set_settings(c.global, v);
            },
            &c);
        detail::finalize(c.global);
        if (destinations_node_) load_destinations(destinations_node_, c);
        if (with_cross_checks) cross_checks(c);
    }

    // `sources:` list into c.sources (used for the defaults too).
    void load_sources(const YAML::Node& list, Config& c) {
        c.sources.clear();
        if (list.IsNull()) return;
        if (!list.IsSequence()) {
            error(list.Mark(), "'sources' must be a list of source entries, got " + kind_of(list));
            return;
        }
        if (list.size() > kMaxItems) return error(list.Mark(), "too many sources");
        std::map<std::string, int> names;
        for (std::size_t i = 0; i < list.size(); ++i) {
            const YAML::Node item = list[i];
            if (!item.IsMap()) {
                error(item.Mark(),
                      "sources[" + std::to_string(i) + "] must be a mapping, got " + kind_of(item));
                continue;
            }
            SourceConfig s = source_defaults();
            s.mark = detail::to_text_mark(item.Mark());
            std::map<std::string, YAML::Mark> set;
            bool bad = false;
            std::size_t before = errors_.size();
            walk_map(
                item, "", context(Context::source), 0,
                [&](const Entry& e, const Value& v) { e.bind.set_source(s, v); }, nullptr, &set);
            bad = errors_.size() != before;
            std::string where = "sources[" + std::to_string(i) + "]";
            auto mark_of = [&](const char* k) { return set.count(k) ? set[k] : item.Mark(); };
            auto type = s.type;
            bool needs_path = type == SourceType::file || type == SourceType::syslog_unix;
            if (needs_path && s.path.empty())
                error(item.Mark(), where + ": a " + std::string(detail_name(type)) + " source needs 'path'");
            if (needs_path && !s.path.empty() && s.path.front() != '/')
                error(mark_of("path"), where + ": 'path' must be absolute");
            if (!needs_path && !s.path.empty())
                error(mark_of("path"),
                      where + ": 'path' does not apply to " + std::string(detail_name(type)) + " sources");
            if (type == SourceType::syslog_udp) {
                if (!s.address) {
                    error(item.Mark(), where + ": a syslog_udp source needs 'address'");
                } else if (!is_ip_address(s.address->host)) {
                    error(mark_of("address"), where + ": address '" + s.address->text +
                                                  "' must be an IP address (127.0.0.1:PORT or [::1]:PORT on "
                                                  "loopback): the listener binds it as written");
                } else if (!s.allow_non_loopback && !is_loopback(s.address->host)) {
                    error(mark_of("address"), where + ": address '" + s.address->text +
                                                  "' is not loopback; set allow_non_loopback: true to "
                                                  "accept log lines from the network");
                }
            } else if (s.address) {
                error(mark_of("address"), where + ": 'address' applies only to syslog_udp sources");
            }
            if (std::string why; type == SourceType::journald && !valid_journal_match(s.journal_match, &why))
                error(mark_of("journal_match"), where + ": bad journal_match: " + why);
            if (s.name.empty()) s.name = default_source_name(s);
            if (!bad) {
                auto [it, fresh] = names.emplace(s.name, item.Mark().line + 1);
                if (!fresh)
                    error(item.Mark(), where + ": duplicate source '" + s.name + "' (first at line " +
                                           std::to_string(it->second) + ")");
            }
            c.sources.push_back(std::move(s));
        }
    }

    SourceConfig source_defaults() {
        SourceConfig s;
        for (const auto& e : detail::entries()) {
            if (e.spec.scope != Scope::source_item) continue;
            auto v = parse_default(e.spec);
            if (v) e.bind.set_source(s, *v);
        }
        s.address.reset();  // the "" default means: none
        return s;
    }

    std::optional<Value> parse_default(const KeySpec& k) {
        YAML::Node n;
        try {
            n = YAML::Load(std::string(k.default_yaml));
        } catch (const std::exception& ex) {
            error(YAML::Mark::null_mark(), "internal: default of " + std::string(k.key) + ": " + ex.what());
            return std::nullopt;
        }
        return parse_value(k, k.key, n, YAML::Mark::null_mark());
    }

    std::optional<Value> parse_value(const KeySpec& k, std::string_view shown, const YAML::Node& n,
                                     const YAML::Mark& key_mark);

  private:
    static std::string_view detail_name(SourceType t) {
        static constexpr std::string_view names[] = {"file", "journald", "syslog_unix", "syslog_udp"};
        return names[static_cast<int>(t)];
    }

    template <typename Apply>
    void walk_map(const YAML::Node& map, const std::string& prefix, const Context& ctx, int depth,
                  Apply&& apply, Config* top, std::map<std::string, YAML::Mark>* set_keys = nullptr);

    void load_destinations(const YAML::Node& list, Config& c);
    void cross_checks(Config& c);

    std::string file_;
    std::vector<Diagnostic> errors_;
    std::set<std::string> present_;
    std::size_t nodes_ = 0;
    YAML::Node destinations_node_;
    std::map<std::string, YAML::Mark> top_marks_;  // where top-level keys were set
};

std::optional<Value> Loader::parse_value(const KeySpec& k, std::string_view shown, const YAML::Node& n,
                                         const YAML::Mark& key_mark) {
    // A missing value has no position of its own worth showing: point at its key.
    YAML::Mark m = (!n.IsNull() && n.Mark().line >= 0) || key_mark.line < 0 ? n.Mark() : key_mark;
    std::string key = "'" + std::string(shown) + "'";
    auto fail = [&](std::string msg) -> std::optional<Value> {
        error(m, std::move(msg));
        return std::nullopt;
    };
    auto type_name = std::string(to_string(k.type));

    if (k.type == ValueType::yaml_sequence) {
        if (n.IsNull()) return Value(YAML::Node(YAML::NodeType::Sequence));
        if (!n.IsSequence()) return fail(key + " must be a list, got " + kind_of(n));
        return Value(n);
    }
    if (k.type == ValueType::socket_list) {
        if (n.IsNull()) return Value(std::vector<std::string>{});
        if (!n.IsSequence()) return fail(key + " must be a list of socket specs, got " + kind_of(n));
        std::vector<std::string> out;
        bool ok = true;
        for (const auto& item : n) {
            ++nodes_;
            std::string why;
            if (!item.IsScalar()) {
                error(item.Mark(), key + ": list items must be socket specs, got " + kind_of(item));
                ok = false;
            } else if (!parse_socket(item.Scalar(), &why)) {
                error(item.Mark(), "bad socket '" + item.Scalar() + "' in " + key + ": " + why);
                ok = false;
            } else {
                out.push_back(item.Scalar());
            }
        }
        if (!ok) return std::nullopt;
        return Value(std::move(out));
    }
    if (k.type == ValueType::enum_list) {
        if (!n.IsSequence())
            return fail(key + " must be a list (e.g. [" + std::string(k.allowed[0]) + "]), got " +
                        kind_of(n));
        std::vector<std::string> out;
        bool ok = true;
        for (const auto& item : n) {
            ++nodes_;
            if (!item.IsScalar()) {
                error(item.Mark(), key + ": list items must be plain values, got " + kind_of(item));
                ok = false;
                continue;
            }
            std::string v = item.Scalar();
            if (std::find(k.allowed.begin(), k.allowed.end(), v) == k.allowed.end()) {
                std::string hint;
                std::size_t best = 3;
                for (auto a : k.allowed)
                    if (auto d = edit_distance(v, a); d < best)
                        best = d, hint = "; did you mean '" + std::string(a) + "'?";
                error(item.Mark(),
                      "bad value '" + v + "' in " + key + ": expected one of " + join(k.allowed) + hint);
                ok = false;
            } else if (std::find(out.begin(), out.end(), v) != out.end()) {
                error(item.Mark(), "'" + v + "' is listed twice in " + key);
                ok = false;
            } else {
                out.push_back(v);
            }
        }
        if (!ok) return std::nullopt;
        if (k.max > 0 &&
            (static_cast<std::int64_t>(out.size()) < k.min || static_cast<std::int64_t>(out.size()) > k.max))
            return fail(key + " needs between " + std::to_string(k.min) + " and " + std::to_string(k.max) +
                        " items");
        return Value(std::move(out));
    }
    if (n.IsNull()) return fail("missing value for " + key + " (expected " + type_name + ")");
    if (!n.IsScalar()) return fail(key + " must be " + type_name + ", got " + kind_of(n));
    const std::string& text = n.Scalar();
    std::string why;
    auto in_range = [&](std::int64_t v) { return (k.min == 0 && k.max == 0) || (v >= k.min && v <= k.max); };

    switch (k.type) {
        case ValueType::duration: {
            auto d = parse_duration(text, k.bare_seconds, &why);
            if (!d) return fail("bad duration '" + text + "' for " + key + ": " + why);
            if (!in_range(d->count()))
                return fail(key + " is out of range: " + text + " is not between " + range_text(k));
            return Value(*d);
        }
        case ValueType::size: {
            auto s = parse_size(text, &why);
            if (!s) return fail("bad size '" + text + "' for " + key + ": " + why);
            if (!in_range(static_cast<std::int64_t>(*s)))
                return fail(key + " is out of range: " + text + " is not between " + range_text(k));
            return Value(static_cast<std::int64_t>(*s));
        }
        case ValueType::integer: {
            std::string_view t = text;
            bool neg = !t.empty() && t.front() == '-';
            if (neg) t.remove_prefix(1);
            if (t.empty() || t.size() > 18 || t.find_first_not_of("0123456789") != std::string_view::npos)
                return fail(key + " must be a whole number, got '" + text + "'");
            std::int64_t v = std::stoll(std::string(t)) * (neg ? -1 : 1);
            if (!in_range(v))
                return fail(key + " is out of range: " + text + " is not between " + range_text(k));
            return Value(v);
        }
        case ValueType::boolean:
            if (text == "true" || text == "True" || text == "TRUE") return Value(true);
            if (text == "false" || text == "False" || text == "FALSE") return Value(false);
            return fail(key + " must be true or false, got '" + text + "'");
        case ValueType::enumeration: {
            if (std::find(k.allowed.begin(), k.allowed.end(), text) != k.allowed.end()) return Value(text);
            std::string hint;
            std::size_t best = 3;
            for (auto a : k.allowed)
                if (auto d = edit_distance(text::ascii_lower(text), a); d < best)
                    best = d, hint = "; did you mean '" + std::string(a) + "'?";
            return fail("bad value '" + text + "' for " + key + ": expected one of " + join(k.allowed) +
                        hint);
        }
        case ValueType::string:
            // A notice body is the one string with lines: line breaks only, no other control.
            if (k.key == "notify.template") {
                std::string without_breaks(text);
                std::replace(without_breaks.begin(), without_breaks.end(), '\n', ' ');
                if (!printable_text(without_breaks, &why)) return fail(key + ": " + why);
            } else if (!printable_text(text, &why)) {
                return fail(key + ": " + why);
            }
            if (k.max > 0 && (static_cast<std::int64_t>(text.size()) < k.min ||
                              static_cast<std::int64_t>(text.size()) > k.max))
                return fail(key + " must be " + std::to_string(k.min) + " to " + std::to_string(k.max) +
                            " characters long");
            if ((k.key == "reinjection.reject_text" || k.key == "notify.template" ||
                 k.key == "notify.subject") &&
                !check_placeholders(text, detail::placeholders_for(k.key), &why))
                return fail(key + ": " + why);
            if (k.key == "reinjection.tag_header") {
                for (char ch : text)
                    if (ch == ':' || ch == ' ' || static_cast<unsigned char>(ch) > 126)
                        return fail(key + " must be a header field name (printable, no ':' or space)");
            }
            return Value(text);
        case ValueType::path:
            if (!printable_text(text, &why)) return fail(key + ": " + why);
            if (k.max > 0 && static_cast<std::int64_t>(text.size()) < k.min)
                return fail(key + " must not be empty");
            if (!text.empty() && text.front() != '/')
                return fail(key + " must be an absolute path, got '" + text + "'");
            if (text.size() > 4096) return fail(key + " is longer than 4096 bytes");
            return Value(text);
        case ValueType::regex: {
            if (text.size() > 4096) return fail(key + ": pattern longer than 4096 bytes");
            RE2::Options o;
            o.set_log_errors(false);
            RE2 re(text, o);
            if (!re.ok()) return fail("bad regular expression for " + key + ": " + re.error());
            return Value(text);
        }
        case ValueType::socket: {
            auto s = parse_socket(text, &why);
            if (!s) return fail("bad socket '" + text + "' for " + key + ": " + why);
            return Value(*s);
        }
        case ValueType::host_port: {
            if (text.empty() && k.scope == Scope::source_item) return std::nullopt;  // "": no address
            auto hp = parse_host_port(text, &why);
            if (!hp) return fail("bad address '" + text + "' for " + key + ": " + why);
            return Value(*hp);
        }
        case ValueType::redis_address: {
            if (text.starts_with("unix:")) {
                if (!parse_socket(text, &why))
                    return fail("bad address '" + text + "' for " + key + ": " + why);
                return Value(text);
            }
            if (!parse_host_port(text, &why))
                return fail("bad address '" + text + "' for " + key + ": " + why + " (or unix:/path)");
            return Value(text);
        }
        case ValueType::file_mode: {
            if (text.empty() || text.size() > 4 || text.find_first_not_of("01234567") != std::string::npos)
                return fail(key + " must be an octal mode such as \"0660\", got '" + text + "'");
            std::int64_t v = std::stoll(text, nullptr, 8);
            if (v > 0777) return fail(key + " must be at most 0777");
            return Value(v);
        }
        case ValueType::policy_action: {
            auto a = parse_policy_action(text, k.allowed, detail::placeholders_for(k.key), &why);
            if (!a) return fail("bad action '" + text + "' for " + key + ": " + why);
            return Value(*a);
        }
        default: return fail("internal: " + key + " cannot be parsed as " + type_name);
    }
}

template <typename Apply>
void Loader::walk_map(const YAML::Node& map, const std::string& prefix, const Context& ctx, int depth,
                      Apply&& apply, Config* top, std::map<std::string, YAML::Mark>* set_keys) {
    if (depth > kMaxDepth)
        return error(map.Mark(), "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    std::set<std::string> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
        if (++nodes_ > kMaxNodes)
            return error(map.Mark(), "more than " + std::to_string(kMaxNodes) + " nodes");
        const YAML::Node kn = it->first;
        const YAML::Node vn = it->second;
        if (!kn.IsScalar()) {
            error(kn.Mark(), "keys must be plain names, got " + kind_of(kn));
            continue;
        }
        std::string name = kn.Scalar();
        std::string full = prefix.empty() ? name : prefix + "." + name;
        if (!seen.insert(name).second) {
            error(kn.Mark(), "duplicate key '" + full + "'");
            continue;
        }
        auto found = ctx.keys.find(full);
        if (found != ctx.keys.end()) {
            const Entry& e = *found->second;
            if (set_keys) (*set_keys)[full] = vn.Mark().line >= 0 ? vn.Mark() : kn.Mark();
            if (ctx.kind == Context::top) top_marks_[full] = vn.Mark().line >= 0 ? vn.Mark() : kn.Mark();
            if (ctx.kind == Context::source)
                present_.insert("sources[]." + full);
            else if (ctx.kind == Context::destination && e.spec.scope == Scope::destination_item)
                present_.insert("destinations[]." + full);
            else if (ctx.kind == Context::top)
                present_.insert(full);
            if (e.spec.type == ValueType::item_list) {
                if (full == "destinations") {
                    if (vn.IsNull()) continue;
                    if (!vn.IsSequence()) {
                        error(vn.Mark(), "'destinations' must be a list of rules, got " + kind_of(vn));
                        continue;
                    }
                    destinations_node_ = vn;
                } else if (top) {
                    load_sources(vn, *top);
                }
                continue;
            }
            if (top && full == "classifier.rules")
                top->classifier.mark = detail::to_text_mark(vn.Mark().line >= 0 ? vn.Mark() : kn.Mark());
            auto v =
                parse_value(e.spec, ctx.kind == Context::source ? "sources[]." + full : full, vn, kn.Mark());
            if (v) apply(e, *v);
            continue;
        }
        if (ctx.sections.count(full)) {
            if (vn.IsNull()) continue;
            if (!vn.IsMap()) {
                error(vn.Mark(), "'" + full + "' is a section and must be a mapping, got " + kind_of(vn));
                continue;
            }
            walk_map(vn, full, ctx, depth + 1, apply, top, set_keys);
            continue;
        }
        if (ctx.kind == Context::destination &&
            (find_key(full) || context(Context::top).sections.count(full)))
            error(kn.Mark(), "'" + full + "' cannot be overridden per destination (global only)");
        else if (ctx.kind == Context::source &&
                 (find_key(full) || context(Context::top).sections.count(full)))
            error(kn.Mark(), "'" + full + "' is a top-level key, not a source setting");
        else {
            std::string msg = "unknown key '" + full + "'";
            if (ctx.kind == Context::source) msg += " in a source entry";
            if (ctx.kind == Context::destination) msg += " in a destination rule";
            auto hint = errors_.size() < kMaxErrors ? ctx.suggest(full) : std::string();
            if (!hint.empty()) msg += "; did you mean '" + hint + "'?";
            error(kn.Mark(), msg);
        }
    }
}

bool valid_domain(std::string_view d, std::string* why) {
    if (d.empty() || d.size() > 253) return *why = "a domain is 1 to 253 characters", false;
    std::size_t label = 0;
    for (std::size_t i = 0; i <= d.size(); ++i) {
        if (i == d.size() || d[i] == '.') {
            if (label == 0) return *why = "empty label", false;
            if (label > 63) return *why = "a label is at most 63 characters", false;
            label = 0;
            continue;
        }
        unsigned char c = static_cast<unsigned char>(d[i]);
        if (c == '*') return *why = "'*' is only allowed as the whole first label ('*.example.com')", false;
        if (c >= 0x80) return *why = "use the ASCII (xn--) form of an international domain", false;
        if (!(std::isalnum(c) || c == '-' || c == '_'))
            return *why = std::string("character '") + d[i] + "' is not allowed in a domain", false;
        ++label;
    }
    return true;
}

void Loader::load_destinations(const YAML::Node& list, Config& c) {
    if (list.size() > kMaxItems) return error(list.Mark(), "too many destination rules (at most 10000)");
    std::map<std::string, int> first_line;
    for (std::size_t i = 0; i < list.size(); ++i) {
        const YAML::Node item = list[i];
        std::string where = "destinations[" + std::to_string(i) + "]";
        if (!item.IsMap()) {
            error(item.Mark(), where + " must be a mapping with 'domain' or 'mx', got " + kind_of(item));
            continue;
        }
        DestinationRule r;
        r.index = i;
        r.line = item.Mark().line + 1;
        r.column = item.Mark().column + 1;
        r.settings = c.global;
        std::string domain, mx, contact;
        bool has_domain = false, has_mx = false;
        std::map<std::string, YAML::Mark> set;
        std::size_t before = errors_.size();
        walk_map(
            item, "", context(Context::destination), 0,
            [&](const Entry& e, const Value& v) {
                if (e.spec.scope == Scope::destination_item) {
                    const auto& s = std::get<std::string>(v);
                    if (e.spec.key.ends_with(".domain"))
                        domain = s, has_domain = true;
                    else if (e.spec.key.ends_with(".mx"))
                        mx = s, has_mx = true;
                    else
                        contact = s;
                    return;
                }
                e.bind.set_settings(r.settings, v);
                r.overridden_keys.emplace_back(e.spec.key);
            },
            nullptr, &set);
        if (set.count("flags.period") && r.settings.flags.period > c.ledger.retention_episodes)
            error(set["flags.period"], where + ": flags.period (" + format_duration(r.settings.flags.period) +
                                           ") is longer than ledger.retention.episodes (" +
                                           format_duration(c.ledger.retention_episodes) +
                                           "): episodes would be pruned before they count");
        bool bad = errors_.size() != before;
        r.settings.contact = contact;
        detail::finalize(r.settings);
        if (has_domain && has_mx) {
            error(set["mx"], where + ": a rule has either 'domain' or 'mx', not both");
            continue;
        }
        if (!has_domain && !has_mx) {
            if (!bad)
                error(item.Mark(),
                      where + ": a rule needs 'domain' (example.com, *.example.com) or 'mx' (a host glob)");
            continue;
        }
        std::string why;
        if (has_domain) {
            std::string d = text::ascii_lower(domain);
            if (!d.empty() && d.back() == '.') d.pop_back();
            bool wildcard = d.starts_with("*.");
            if (!valid_domain(wildcard ? std::string_view(d).substr(2) : std::string_view(d), &why)) {
                error(set["domain"], "bad domain '" + domain + "' in " + where + ": " + why);
                continue;
            }
            r.kind = wildcard ? DestinationRule::Kind::wildcard : DestinationRule::Kind::exact;
            r.pattern = d;
            if (wildcard) r.suffix = d.substr(1);
        } else {
            std::string g = text::ascii_lower(mx);
            if (!g.empty() && g.back() == '.') g.pop_back();
            if (g.empty() || g.size() > 253) {
                error(set["mx"], "bad mx glob in " + where + ": 1 to 253 characters");
                continue;
            }
            auto re = glob_to_regex(g, &r.literal_chars, &why);
            if (!re) {
                error(set["mx"], "bad mx glob '" + mx + "' in " + where + ": " + why);
                continue;
            }
            RE2::Options o;
            o.set_log_errors(false);
            auto compiled = std::make_shared<const RE2>(*re, o);
            if (!compiled->ok()) {
                error(set["mx"], "bad mx glob '" + mx + "' in " + where + ": " + compiled->error());
                continue;
            }
            r.kind = DestinationRule::Kind::mx;
            r.pattern = g;
            r.mx_re = std::move(compiled);
        }
        std::string id = (r.kind == DestinationRule::Kind::mx ? "mx " : "domain ") + r.pattern;
        auto [it, fresh] = first_line.emplace(id, r.line);
        if (!fresh) {
            error(set[has_mx ? "mx" : "domain"], "duplicate destination rule for " + id + " (first at line " +
                                                     std::to_string(it->second) + ")");
            continue;
        }
        if (bad) continue;
        std::size_t idx = c.destinations.size();
        r.index = idx;
        if (r.kind == DestinationRule::Kind::exact) c.exact_rules.emplace(r.pattern, idx);
        if (r.kind == DestinationRule::Kind::wildcard) c.wildcard_rules.emplace(r.suffix, idx);
        if (r.kind == DestinationRule::Kind::mx) c.mx_rules.push_back(idx);
        c.destinations.push_back(std::move(r));
    }
    std::stable_sort(c.mx_rules.begin(), c.mx_rules.end(), [&](std::size_t a, std::size_t b) {
        return c.destinations[a].literal_chars > c.destinations[b].literal_chars;
    });
    if (c.mx_rules.empty()) return;
    // One pass over the relay host for all globs instead of one match per rule.
    RE2::Options o;
    o.set_log_errors(false);
    o.set_max_mem(64 << 20);
    auto set = std::make_shared<MxPatternSet>(o);
    bool ok = true;
    for (std::size_t idx : c.mx_rules)
        ok = ok && set->set.Add(c.destinations[idx].mx_re->pattern(), nullptr) >= 0;
    if (ok && set->set.Compile())
        c.mx_set = std::move(set);  // otherwise resolve() falls back to rule by rule
}

void Loader::cross_checks(Config& c) {
    auto mark = [&](const std::string& k) {
        return top_marks_.count(k) ? top_marks_[k] : YAML::Mark::null_mark();
    };
    // The policy daemon binds exactly what passes here: an IP address (or
    // localhost), on loopback unless allow_non_loopback is set.
    if (c.metrics.enabled && !c.metrics.allow_non_loopback && !is_loopback(c.metrics.listen.host))
        error(mark("metrics.listen"),
              "metrics.listen '" + c.metrics.listen.text +
                  "' is not loopback; set metrics.allow_non_loopback: true to expose it");
    else if (c.metrics.enabled && c.metrics.listen.host != "localhost" &&
             !is_ip_address(c.metrics.listen.host))
        error(mark("metrics.listen"), "metrics.listen '" + c.metrics.listen.text +
                                          "': give an IP address (a host name is not resolved)");
    if (c.milter.socket.text == c.policy.socket.text)
        error(mark("policy.socket"),
              "policy.socket and milter.socket are the same socket '" + c.policy.socket.text + "'");
    const std::string& code = c.milter.reject_code;
    const std::string& xcode = c.milter.reject_xcode;
    if (code.size() != 3 || (code[0] != '4' && code[0] != '5') ||
        !std::isdigit(static_cast<unsigned char>(code[1])) ||
        !std::isdigit(static_cast<unsigned char>(code[2])))
        error(mark("milter.reject_code"), "milter.reject_code must be a 4xx or 5xx code, got '" + code + "'");
    else if (xcode.empty() || xcode[0] != code[0] ||
             xcode.find_first_not_of("0123456789.") != std::string::npos ||
             std::count(xcode.begin(), xcode.end(), '.') != 2)
        error(mark("milter.reject_xcode"), "milter.reject_xcode must look like " + std::string(1, code[0]) +
                                               ".7.1 (same class as milter.reject_code), got '" + xcode +
                                               "'");
    if (c.milter.maximal_backoff < c.milter.minimal_backoff)
        error(mark("milter.maximal_backoff"),
              "milter.maximal_backoff is shorter than milter.minimal_backoff");
    if (c.global.flags.period > c.ledger.retention_episodes)
        error(top_marks_.count("flags.period") ? mark("flags.period") : mark("ledger.retention.episodes"),
              "flags.period (" + format_duration(c.global.flags.period) +
                  ") is longer than ledger.retention.episodes (" +
                  format_duration(c.ledger.retention_episodes) +
                  "): episodes would be pruned before they count");
}

std::shared_ptr<const Config> build_default_snapshot() {
    std::vector<Diagnostic> problems;
    auto c = std::make_shared<Config>(detail::build_defaults(&problems));
    return c;
}

}  // namespace

namespace detail {

void finalize(Settings& s) {
    RE2::Options o;
    o.set_log_errors(false);
    s.reinjection.subject_ignore_re = s.reinjection.subject_ignore.empty()
                                          ? nullptr
                                          : std::make_shared<const RE2>(s.reinjection.subject_ignore, o);
}

Config build_defaults(std::vector<Diagnostic>* problems) {
    Config c;
    c.source = "<defaults>";
    Loader l("<defaults>");
    for (const auto& e : entries()) {
        if (e.spec.scope != Scope::global && e.spec.scope != Scope::overridable) continue;
        if (e.spec.type == ValueType::item_list) {
            if (e.spec.key == "sources") {
                try {
                    l.load_sources(YAML::Load(std::string(e.spec.default_yaml)), c);
                } catch (const std::exception& ex) {
                    l.error(YAML::Mark::null_mark(), std::string("internal: default sources: ") + ex.what());
                }
            }
            continue;
        }
        auto v = l.parse_default(e.spec);
        if (!v) continue;
        if (e.bind.set_global) e.bind.set_global(c, *v);
        if (e.bind.set_settings) e.bind.set_settings(c.global, *v);
    }
    finalize(c.global);
    if (problems) *problems = l.take_errors();
    return c;
}

}  // namespace detail

std::shared_ptr<const Config> defaults() {
    static const std::shared_ptr<const Config> d = build_default_snapshot();
    return d;
}

namespace {

// "a.b.c=value" -> {a: {b: {c: value}}}. Scalars are taken as written (no YAML
// parsing, so "reject_text=queued: {original}" is one string); list keys take
// YAML flow syntax. Returns a null node and `why` when the text is no override.
std::optional<YAML::Node> override_node(const std::string& text, std::string* why) {
    auto eq = text.find('=');
    if (eq == std::string::npos || eq == 0) {
        *why = "expected key=value (a dotted key of the configuration table)";
        return std::nullopt;
    }
    std::string key = text.substr(0, eq);
    std::string value = text.substr(eq + 1);
    if (key.find("[]") != std::string::npos) {
        *why = "'" + key +
               "': set the whole list instead (e.g. -o 'sources=[{type: file, path: /var/log/mail.log}]')";
        return std::nullopt;
    }
    const auto* spec = find_key(key);
    YAML::Node leaf;
    if (spec && (spec->type == ValueType::enum_list || spec->type == ValueType::yaml_sequence ||
                 spec->type == ValueType::socket_list || spec->type == ValueType::item_list)) {
        try {
            leaf = YAML::Load(value);
        } catch (const YAML::Exception& ex) {
            *why = "'" + key + "': YAML syntax error in the value: " + ex.msg;
            return std::nullopt;
        }
    } else {
        leaf = YAML::Node(value);
    }
    // Built from the innermost key outwards: a fresh map per level, so no
    // node is shared with anything else.
    std::vector<std::string> parts;
    for (std::size_t start = 0;;) {
        auto dot = key.find('.', start);
        parts.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    YAML::Node node = leaf;
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        YAML::Node map(YAML::NodeType::Map);
        map[*it] = node;
        node.reset(map);
    }
    return node;
}

// Copies every leaf of `from` (nested maps) into `into`, replacing what is there.
void merge_into(YAML::Node into, const YAML::Node& from) {
    for (auto it = from.begin(); it != from.end(); ++it) {
        const std::string k = it->first.Scalar();
        const YAML::Node v = it->second;
        if (v.IsMap() && into[k] && into[k].IsMap()) {
            merge_into(into[k], v);
        } else {
            into[k] = v;
        }
    }
}

}  // namespace

LoadOutcome load_string(std::string_view yaml_text, std::string file_name,
                        const std::vector<std::string>& overrides) {
    LoadOutcome out;
    Loader l(file_name);
    try {
        if (yaml_text.size() > kMaxConfigBytes) {
            l.error(YAML::Mark::null_mark(),
                    "file larger than " + std::to_string(kMaxConfigBytes) + " bytes");
        } else if (yaml_text.find('\0') != std::string_view::npos) {
            l.error(YAML::Mark::null_mark(), "file contains a NUL byte");
        } else {
            YAML::Node root;
            bool parsed = true;
            try {
                root = YAML::Load(std::string(yaml_text));
            } catch (const YAML::Exception& ex) {
                parsed = false;
                l.error(ex.mark, "YAML syntax error: " + ex.msg);
            }
            // Each override is checked on its own first, so its errors name it.
            std::vector<Diagnostic> override_errors;
            for (const auto& o : overrides) {
                Loader ol("-o " + o);
                std::string why;
                std::optional<YAML::Node> node = override_node(o, &why);
                if (!node) {
                    ol.error(YAML::Mark::null_mark(), why);
                } else {
                    Config scratch(*defaults());
                    ol.load_root(*node, scratch, false);
                }
                for (auto d : ol.take_errors()) {
                    d.line = d.column = 0;  // positions inside one argument say nothing
                    override_errors.push_back(std::move(d));
                }
                if (parsed && node && override_errors.empty()) {
                    if (root.IsNull()) root.reset(YAML::Node(YAML::NodeType::Map));
                    if (root.IsMap()) merge_into(root, *node);
                }
            }
            if (!override_errors.empty()) {
                out.errors = l.take_errors();
                out.errors.insert(out.errors.end(), override_errors.begin(), override_errors.end());
                return out;
            }
            if (parsed) {
                auto c = std::make_shared<Config>(*defaults());
                c->source = file_name;
                c->loaded_at = std::chrono::system_clock::now();
                c->classifier.file = file_name;
                l.load_root(root, *c);
                out.keys_present = l.take_present();
                out.errors = l.take_errors();
                std::stable_sort(out.errors.begin(), out.errors.end(),
                                 [](const Diagnostic& a, const Diagnostic& b) {
                                     return std::pair(a.line, a.column) < std::pair(b.line, b.column);
                                 });
                if (out.errors.empty()) out.config = std::move(c);
                return out;
            }
        }
    } catch (const std::exception& ex) {
        l.error(YAML::Mark::null_mark(), std::string("internal error while loading: ") + ex.what());
    }
    out.errors = l.take_errors();
    return out;
}

LoadOutcome load_file(const std::string& path, const std::vector<std::string>& overrides) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        LoadOutcome out;
        const int err = errno;
        out.errors.push_back(Diagnostic{path, 0, 0, "cannot open the file: " + file_error_reason(err)});
        return out;
    }
    std::string text;
    char buf[65536];
    while (in.read(buf, sizeof buf) || in.gcount() > 0) {
        text.append(buf, static_cast<std::size_t>(in.gcount()));
        if (text.size() > kMaxConfigBytes) {
            LoadOutcome out;
            out.errors.push_back(
                Diagnostic{path, 0, 0, "file larger than " + std::to_string(kMaxConfigBytes) + " bytes"});
            return out;
        }
    }
    return load_string(text, path, overrides);
}

std::string Diagnostic::to_string() const {
    if (line <= 0) return file + ": error: " + message;
    return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": error: " + message;
}

std::string_view to_string(ValueType t) noexcept {
    switch (t) {
        case ValueType::duration: return "a duration";
        case ValueType::size: return "a size";
        case ValueType::integer: return "an integer";
        case ValueType::boolean: return "a boolean";
        case ValueType::enumeration: return "one of a set of words";
        case ValueType::enum_list: return "a list of words";
        case ValueType::string: return "a string";
        case ValueType::path: return "an absolute path";
        case ValueType::regex: return "an RE2 regular expression";
        case ValueType::socket: return "a socket spec";
        case ValueType::host_port: return "a host:port address";
        case ValueType::redis_address: return "a Redis address";
        case ValueType::file_mode: return "an octal file mode";
        case ValueType::policy_action: return "a policy action";
        case ValueType::yaml_sequence: return "a list";
        case ValueType::socket_list: return "a list of socket specs";
        case ValueType::item_list: return "a list of entries";
    }
    return "a value";
}

std::span<const KeySpec> key_table() noexcept {
    static const std::vector<KeySpec> specs = [] {
        std::vector<KeySpec> v;
        for (const auto& e : detail::entries()) v.push_back(e.spec);
        return v;
    }();
    return specs;
}

const KeySpec* find_key(std::string_view dotted) noexcept {
    const auto* e = detail::find_entry(dotted);
    return e ? &e->spec : nullptr;
}

std::string show_setting(const Settings& s, std::string_view key) {
    const auto* e = detail::find_entry(key);
    if (!e || !e->bind.show) return {};
    return e->bind.show(s);
}

const CategoryThresholds& Settings::thresholds(Category c) const {
    for (std::size_t i = 0; i < kLadderCategories.size(); ++i)
        if (kLadderCategories[i] == c) return categories[i];
    return categories[kLadderCategories.size() - 1];  // unknown
}

std::string default_source_name(const SourceConfig& s) {
    switch (s.type) {
        case SourceType::file: return "file:" + s.path;
        case SourceType::journald: return "journal:" + s.journal_match;
        case SourceType::syslog_unix: return "syslog:unix:" + s.path;
        case SourceType::syslog_udp: return "syslog:udp:" + (s.address ? s.address->text : "");
    }
    return {};
}

std::string position_id(const SourceConfig& s) {
    if (s.type == SourceType::journald && (s.name.empty() || s.name == default_source_name(s)))
        return std::string(kJournalSourceId);
    if (s.type == SourceType::file && s.name.empty()) return file_source_id(s.path);
    return s.name;
}

bool resumes_from_position(const SourceConfig& s) noexcept {
    return s.type == SourceType::file || s.type == SourceType::journald;
}

}  // namespace retryguard::config
