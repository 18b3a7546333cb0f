// classifier.cpp -- loads classifier rules from YAML, compiles each layer's
// text patterns into one RE2::Set, and applies the documented precedence
// (include/retryguard/classify/classifier.hpp, docs/classifier.md).
//
// Owns: rule-file validation (errors carry file:line:column), compilation,
// and the decision. Must never throw out of a public function, never let a
// text pattern silently override a precise enhanced code the rule does not
// name, and never guess: no rule means `unknown`.
#include "retryguard/classify/classifier.hpp"
#include "retryguard/file_access.hpp"

#include <fmt/format.h>
#include <re2/re2.h>
#include <re2/set.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_set>

#include "classify/rules.hpp"
#include "retryguard/classify/status_codes.hpp"

namespace retryguard {

// ---------------------------------------------------------------- RuleFile

RuleFile::RuleFile() = default;
RuleFile::~RuleFile() = default;
RuleFile::RuleFile(RuleFile&&) noexcept = default;
RuleFile& RuleFile::operator=(RuleFile&&) noexcept = default;
RuleFile::RuleFile(const RuleFile&) = default;
RuleFile& RuleFile::operator=(const RuleFile&) = default;
std::size_t RuleFile::size() const noexcept {
    return rules_.size();
}

namespace {

RE2::Options pattern_options() {
    RE2::Options o;
    o.set_case_sensitive(false);
    o.set_log_errors(false);
    o.set_max_mem(64 << 20);
    return o;
}

std::string where(std::string_view file, const YAML::Mark& mark) {
    std::string out(file.empty() ? "<rules>" : file);
    if (!mark.is_null()) {
        out += ':' + std::to_string(mark.line + 1);
        out += ':' + std::to_string(mark.column + 1);
    }
    return out;
}

Error config_error(std::string_view file, const YAML::Mark& mark, const std::string& message) {
    return make_error(ErrorKind::config, where(file, mark) + ": " + message);
}

// A scalar or a sequence of scalars, as strings.
Result<std::vector<std::pair<std::string, YAML::Mark>>> scalar_list(const YAML::Node& node,
                                                                    std::string_view file,
                                                                    std::string_view key) {
    std::vector<std::pair<std::string, YAML::Mark>> out;
    if (node.IsScalar()) {
        out.emplace_back(node.Scalar(), node.Mark());
        return out;
    }
    if (!node.IsSequence())
        return config_error(file, node.Mark(), fmt::format("`{}` must be a value or a list of values", key));
    if (node.size() > 1000)
        return config_error(file, node.Mark(), fmt::format("`{}` has too many entries", key));
    for (const auto& item : node) {
        if (!item.IsScalar())
            return config_error(file, item.Mark(), fmt::format("`{}` entries must be plain values", key));
        out.emplace_back(item.Scalar(), item.Mark());
    }
    if (out.empty()) return config_error(file, node.Mark(), fmt::format("`{}` is empty", key));
    return out;
}

bool parse_number(std::string_view s, unsigned max_digits, unsigned& out) {
    if (s.empty() || s.size() > max_digits) return false;
    unsigned v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + static_cast<unsigned>(c - '0');
    }
    out = v;
    return true;
}

std::optional<CodePattern> parse_code_pattern(std::string_view s) {
    CodePattern p;
    std::size_t dot1 = s.find('.');
    if (dot1 != 1) return std::nullopt;
    std::size_t dot2 = s.find('.', 2);
    if (dot2 == std::string_view::npos) return std::nullopt;
    char k = s[0];
    if (k == 'X' || k == 'x')
        p.klass = 0;
    else if (k == '2' || k == '4' || k == '5')
        p.klass = k - '0';
    else
        return std::nullopt;
    if (!parse_number(s.substr(2, dot2 - 2), 3, p.subject)) return std::nullopt;
    std::string_view d = s.substr(dot2 + 1);
    if (d == "*") {
        p.detail_lo = 0, p.detail_hi = 999;
        return p;
    }
    std::size_t dash = d.find('-');
    if (dash == std::string_view::npos) {
        if (!parse_number(d, 3, p.detail_lo)) return std::nullopt;
        p.detail_hi = p.detail_lo;
        return p;
    }
    if (!parse_number(d.substr(0, dash), 3, p.detail_lo) || !parse_number(d.substr(dash + 1), 3, p.detail_hi))
        return std::nullopt;
    if (p.detail_lo > p.detail_hi) return std::nullopt;
    return p;
}

std::optional<BasicPattern> parse_basic_pattern(std::string_view s) {
    if (s.size() != 3 || s[0] < '2' || s[0] > '5') return std::nullopt;
    int base = (s[0] - '0') * 100;
    auto lower = [](char c) { return c == 'X' ? 'x' : c; };
    char b = lower(s[1]), c = lower(s[2]);
    if (b == 'x' && c == 'x') return BasicPattern{base, base + 99};
    if (b < '0' || b > '9') return std::nullopt;
    base += (b - '0') * 10;
    if (c == 'x') return BasicPattern{base, base + 9};
    if (c < '0' || c > '9') return std::nullopt;
    return BasicPattern{base + (c - '0'), base + (c - '0')};
}

std::optional<LocalFailure> local_from_string(std::string_view s) {
    for (int i = 0; i <= static_cast<int>(LocalFailure::other); ++i) {
        auto f = static_cast<LocalFailure>(i);
        if (to_string(f) == s) return f;
    }
    return std::nullopt;
}

std::optional<SmtpStage> stage_from_string(std::string_view s) {
    for (int i = 0; i <= static_cast<int>(SmtpStage::other); ++i) {
        auto st = static_cast<SmtpStage>(i);
        if (to_string(st) == s) return st;
    }
    return std::nullopt;
}

bool valid_rule_name(std::string_view n) {
    if (n.empty() || n.size() > 100) return false;
    for (char c : n)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
              c == '_' || c == '.'))
            return false;
    return true;
}

std::string category_names() {
    std::string out;
    for (const auto& c : all_categories()) {
        if (!out.empty()) out += ", ";
        out += c.name;
    }
    return out;
}

Result<RuleSpec> parse_rule(const YAML::Node& node, std::string_view file) {
    if (!node.IsMap())
        return config_error(file, node.Mark(), "a rule must be a mapping (name:, category:, ...)");
    static const std::set<std::string> kKeys = {"name",  "category", "codes", "enhanced", "refines",
                                                "local", "stages",   "text",  "note"};
    RuleSpec r;
    r.origin = where(file, node.Mark());
    if (auto colon = r.origin.rfind(':'); colon != std::string::npos && !node.Mark().is_null())
        r.origin.erase(colon);  // file:line
    for (const auto& kv : node) {
        if (!kv.first.IsScalar()) return config_error(file, kv.first.Mark(), "rule keys must be plain words");
        const std::string key = kv.first.Scalar();
        if (!kKeys.count(key))
            return config_error(
                file, kv.first.Mark(),
                "unknown rule key `" + key +
                    "` (allowed: name, category, codes, enhanced, refines, local, stages, text, note)");
    }
    const YAML::Node name = node["name"];
    if (!name || !name.IsScalar() || !valid_rule_name(name.Scalar()))
        return config_error(file, name ? name.Mark() : node.Mark(),
                            "every rule needs a `name` of letters, digits, '.', '-' or '_' (at most 100)");
    r.name = name.Scalar();
    const YAML::Node cat = node["category"];
    if (!cat || !cat.IsScalar())
        return config_error(file, node.Mark(), "rule `" + r.name + "` needs a `category`");
    auto category = category_from_string(cat.Scalar());
    if (!category)
        return config_error(file, cat.Mark(),
                            "unknown category `" + cat.Scalar() + "` (one of: " + category_names() + ")");
    r.category = *category;
    if (const YAML::Node note = node["note"]) {
        if (!note.IsScalar()) return config_error(file, note.Mark(), "`note` must be text");
        r.note = note.Scalar();
    }
    if (const YAML::Node codes = node["codes"]) {
        auto list = scalar_list(codes, file, "codes");
        if (!list) return list.error();
        for (const auto& [s, mark] : *list) {
            auto p = parse_basic_pattern(s);
            if (!p) return config_error(file, mark, "bad basic code `" + s + "` (examples: 451, 45x, 4xx)");
            r.codes.push_back(*p);
        }
    }
    for (const char* key : {"enhanced", "refines"}) {
        if (const YAML::Node list_node = node[key]) {
            auto list = scalar_list(list_node, file, key);
            if (!list) return list.error();
            for (const auto& [s, mark] : *list) {
                auto p = parse_code_pattern(s);
                if (!p)
                    return config_error(
                        file, mark,
                        "bad enhanced code `" + s + "` (examples: 4.3.5, X.3.5, 4.7.*, 4.7.500-699)");
                (std::string_view(key) == "enhanced" ? r.enhanced : r.refines).push_back(*p);
            }
        }
    }
    if (const YAML::Node local = node["local"]) {
        auto list = scalar_list(local, file, "local");
        if (!list) return list.error();
        for (const auto& [s, mark] : *list) {
            auto f = local_from_string(s);
            if (!f || *f == LocalFailure::none)
                return config_error(file, mark,
                                    "unknown local failure `" + s + "` (e.g. connection-refused)");
            r.local.push_back(*f);
        }
    }
    if (const YAML::Node stages = node["stages"]) {
        auto list = scalar_list(stages, file, "stages");
        if (!list) return list.error();
        for (const auto& [s, mark] : *list) {
            auto st = stage_from_string(s);
            if (!st)
                return config_error(file, mark, "unknown SMTP stage `" + s + "` (e.g. rcpt-to, end-of-data)");
            r.stages.push_back(*st);
        }
    }
    if (const YAML::Node text = node["text"]) {
        if (!text.IsScalar() || text.Scalar().empty())
            return config_error(file, text.Mark(), "`text` must be a non-empty RE2 pattern");
        if (text.Scalar().size() > kMaxPatternLength)
            return config_error(file, text.Mark(), "`text` pattern is longer than 4096 characters");
        RE2 check(text.Scalar(), pattern_options());
        if (!check.ok())
            return config_error(file, text.Mark(),
                                "bad RE2 pattern in rule `" + r.name + "`: " + check.error());
        r.text = text.Scalar();
    }
    if (!r.refines.empty() && (!r.text || !r.enhanced.empty()))
        return config_error(
            file, node["refines"].Mark(),
            "`refines` belongs to a text rule without `enhanced` (a text rule with `enhanced` "
            "already refines exactly those codes)");
    if (r.text)
        r.tier = Tier::text;
    else if (!r.enhanced.empty())
        r.tier = Tier::enhanced;
    else if (!r.local.empty())
        r.tier = Tier::local;
    else if (!r.codes.empty())
        r.tier = Tier::basic;
    else
        return config_error(file, node.Mark(),
                            "rule `" + r.name + "` has no condition (give text, enhanced, codes or local)");
    return r;
}

}  // namespace

Result<RuleFile> parse_rules(const YAML::Node& node, std::string_view file_name) {
    try {
        RuleFile out;
        out.file_name_ = std::string(file_name);
        if (!node || node.IsNull()) return out;
        if (node.IsMap()) {
            for (const auto& kv : node) {
                const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string();
                if (key != "version" && key != "rules")
                    return config_error(file_name, kv.first.Mark(),
                                        "unknown top-level key `" + key + "` (allowed: version, rules)");
            }
            if (const YAML::Node version = node["version"]) {
                if (!version.IsScalar() || version.Scalar() != "1")
                    return config_error(file_name, version.Mark(),
                                        "unsupported rule file version (this is version 1)");
            }
        }
        // Bound once, never assigned: assigning a yaml-cpp node writes through it.
        const YAML::Node rules = node.IsMap() ? node["rules"] : node;
        if (!rules || rules.IsNull()) return out;
        if (!rules.IsSequence())
            return config_error(file_name, rules.Mark(), "`rules` must be a list of rules");
        if (rules.size() > kMaxRulesPerLayer)
            return config_error(file_name, rules.Mark(), "too many rules (limit 4096)");
        std::set<std::string> names;
        for (const auto& item : rules) {
            auto rule = parse_rule(item, file_name);
            if (!rule) return rule.error();
            if (!names.insert(rule->name).second)
                return config_error(file_name, item.Mark(), "duplicate rule name `" + rule->name + "`");
            out.rules_.push_back(std::move(rule).value());
        }
        return out;
    } catch (const YAML::Exception& e) {
        return config_error(file_name, e.mark, e.msg);
    } catch (const std::exception& e) {
        return make_error(ErrorKind::config, std::string(file_name) + ": " + e.what());
    }
}

Result<RuleFile> parse_rules_file(const std::filesystem::path& path) {
    const std::string name = path.string();
    try {
        std::ifstream in(path, std::ios::binary);
        if (!in) {
            std::string why = unreadable_file(path);
            return make_error(ErrorKind::config, why.empty() ? name + ": cannot open rule file" : why);
        }
        std::ostringstream buf;
        buf << in.rdbuf();
        if (buf.str().size() > (8u << 20))
            return make_error(ErrorKind::config, name + ": rule file larger than 8 MiB");
        return parse_rules(YAML::Load(buf.str()), name);
    } catch (const YAML::DeepRecursion& e) {
        return config_error(name, e.mark, "nesting is too deep");
    } catch (const YAML::Exception& e) {
        return config_error(name, e.mark, e.msg);
    } catch (const std::exception& e) {
        return make_error(ErrorKind::config, name + ": " + e.what());
    }
}

namespace {
// A candidate rule file: the path when it can be read; an error when it exists
// but cannot be read (said with the reason and the user); nullopt when absent.
std::optional<Result<std::filesystem::path>> try_rule_file(const std::filesystem::path& p) {
    int err = 0;
    std::string why = unreadable_file(p, &err);
    if (why.empty()) {
        std::error_code ec;
        if (std::filesystem::is_regular_file(p, ec)) return Result<std::filesystem::path>(p);
        return Result<std::filesystem::path>(
            make_error(ErrorKind::config, p.string() + ": not a regular file"));
    }
    if (err == ENOENT) return std::nullopt;
    return Result<std::filesystem::path>(make_error(ErrorKind::config, why));
}
}  // namespace

Result<std::filesystem::path> find_shipped_rules(const std::filesystem::path& explicit_path) {
    if (!explicit_path.empty()) {
        if (auto r = try_rule_file(explicit_path)) return *r;
        return make_error(ErrorKind::config, explicit_path.string() + ": rule file not found");
    }
    if (const char* env = std::getenv("RETRYGUARD_DATADIR"); env && *env) {
        std::filesystem::path p = std::filesystem::path(env) / "classifier.yaml";
        if (auto r = try_rule_file(p)) return *r;
        return make_error(ErrorKind::config,
                          "RETRYGUARD_DATADIR is set, but " + p.string() + " does not exist");
    }
    std::string looked;
#ifdef RETRYGUARD_DATADIR
    {
        std::filesystem::path p = std::filesystem::path(RETRYGUARD_DATADIR) / "classifier.yaml";
        if (auto r = try_rule_file(p)) return *r;
        looked += p.string();
    }
#endif
    {
        // Beside the program: <prefix>/bin/../share/retryguard (an install under
        // any prefix, and the build tree, which keeps a copy in build/share).
        std::error_code ec;
        std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
        if (!ec) {
            std::filesystem::path p =
                exe.parent_path().parent_path() / "share" / "retryguard" / "classifier.yaml";
            if (auto r = try_rule_file(p)) return *r;
            looked += (looked.empty() ? "" : ", ") + p.string();
        }
    }
    return make_error(ErrorKind::config, "no classifier.yaml found (looked in: " + looked +
                                             "); set RETRYGUARD_DATADIR or pass the rule file explicitly");
}

// ---------------------------------------------------------------- Classifier

struct Classifier::Impl {
    struct Layer {
        std::vector<RuleSpec> rules;
        std::unique_ptr<RE2::Set> set;  // text patterns, index i -> set_rule[i]
        std::vector<std::size_t> set_rule;
        std::vector<std::size_t> local, text, basic;  // rule indices by tier, file order
        // Enhanced-code rules by the subject their patterns name (0-7), others last.
        std::array<std::vector<std::size_t>, 9> enhanced_by_subject;
    };
    std::vector<Layer> user;  // consulted in this order
    Layer shipped;
    std::size_t total = 0;
};

namespace {

using Layer = Classifier::Impl::Layer;

// Set index that stands for the retry-hint pattern rather than a rule.
constexpr std::size_t kRetryHint = static_cast<std::size_t>(-1);

const char* const kRetryPattern =
    R"((?:(?:again|retry|retrying|later|back|gr[ae]ylist\w*|deferred|delayed|resend|blocked|throttled|limited)\b[^.;!]{0,40}?\b(?:in|after|for)|\bwait(?:\s+for)?)\s+(?:at\s+least\s+|another\s+|about\s+|approximately\s+)?(?:(\d{1,2}):(\d{2}):(\d{2})\b|(\d{1,7})\s*(seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h)\b))";

// Rule names, origins and notes live for the whole process: classifications
// hold views of them, and reloads with the same rules add nothing.
std::string_view intern(std::string_view s) {
    static std::mutex mutex;
    static std::unordered_set<std::string> pool;
    if (s.empty()) return {};
    std::lock_guard<std::mutex> lock(mutex);
    return *pool.emplace(s).first;
}

Result<Layer> compile_layer(const std::vector<RuleSpec>& rules, const std::string& file,
                            bool with_retry_hint) {
    Layer layer;
    layer.rules = rules;
    layer.set = std::make_unique<RE2::Set>(pattern_options(), RE2::UNANCHORED);
    for (std::size_t i = 0; i < layer.rules.size(); ++i) {
        RuleSpec& r = layer.rules[i];
        r.iname = intern(r.name);
        r.iorigin = intern(r.origin);
        r.inote = intern(r.note);
        switch (r.tier) {
            case Tier::local: layer.local.push_back(i); break;
            case Tier::text: layer.text.push_back(i); break;
            case Tier::basic: layer.basic.push_back(i); break;
            case Tier::enhanced:
                for (const auto& p : r.enhanced) {
                    auto& bucket = layer.enhanced_by_subject[std::min<std::size_t>(p.subject, 8)];
                    if (bucket.empty() || bucket.back() != i) bucket.push_back(i);
                }
                break;
        }
        if (r.text) {
            std::string error;
            int idx = layer.set->Add(*r.text, &error);
            if (idx < 0)
                return make_error(ErrorKind::config,
                                  r.origin + ": bad RE2 pattern in rule `" + r.name + "`: " + error);
            layer.set_rule.push_back(i);
        }
    }
    if (with_retry_hint) {
        std::string error;
        if (layer.set->Add(kRetryPattern, &error) < 0)
            return make_error(ErrorKind::internal, "retry-hint pattern: " + error);
        layer.set_rule.push_back(kRetryHint);
    }
    if (!layer.set_rule.empty() && !layer.set->Compile())
        return make_error(ErrorKind::config,
                          file + ": the text patterns need more memory than allowed (64 MiB)");
    if (layer.set_rule.empty()) layer.set.reset();
    return layer;
}

// Indices (into layer.rules) of the text rules whose pattern matches, in file
// order; `retry_hint` tells whether the retry-hint pattern matched too.
void text_hits(const Layer& layer, std::string_view text, std::vector<int>& hits, bool& retry_hint) {
    hits.clear();
    retry_hint = false;
    if (!layer.set || text.empty()) return;
    if (!layer.set->Match(re2::StringPiece(text.data(), text.size()), &hits)) {
        hits.clear();
        return;
    }
    std::size_t out = 0;
    for (int h : hits) {
        std::size_t rule = layer.set_rule[static_cast<std::size_t>(h)];
        if (rule == kRetryHint)
            retry_hint = true;
        else
            hits[out++] = static_cast<int>(rule);
    }
    hits.resize(out);
    std::sort(hits.begin(), hits.end());
}

bool is_delivered(const Reply& r) {
    if (r.code >= 200 && r.code < 300) return true;
    return r.code == 0 && r.local == LocalFailure::none && !r.text.empty();
}

void decide(Classification& c, const RuleSpec& r, Decider by) {
    c.category = r.category;
    c.decided_by = by;
    c.rule = r.iname;
    c.rule_origin = r.iorigin;
    c.rule_note = r.inote;
}

std::optional<std::chrono::seconds> retry_after_unchecked(std::string_view text);

}  // namespace

std::string_view to_string(Decider d) noexcept {
    switch (d) {
        case Decider::user_rule: return "user-rule";
        case Decider::local_failure: return "local-failure";
        case Decider::enhanced_code: return "enhanced-code";
        case Decider::text_refinement: return "text-refinement";
        case Decider::text: return "text";
        case Decider::basic_code: return "basic-code";
        case Decider::success: return "success";
        case Decider::none: return "none";
    }
    return "none";
}

Result<Classifier> Classifier::build(const RuleFile& shipped, const std::vector<RuleFile>& user_layers) {
    try {
        auto impl = std::make_shared<Impl>();
        auto s = compile_layer(shipped.rules_, shipped.file_name_, true);
        if (!s) return s.error();
        impl->shipped = std::move(s).value();
        impl->total = impl->shipped.rules.size();
        for (auto it = user_layers.rbegin(); it != user_layers.rend(); ++it) {
            auto u = compile_layer(it->rules_, it->file_name_, false);
            if (!u) return u.error();
            impl->total += u->rules.size();
            impl->user.push_back(std::move(u).value());
        }
        return Classifier(std::move(impl));
    } catch (const std::exception& e) {
        return make_error(ErrorKind::internal, std::string("building the classifier failed: ") + e.what());
    }
}

Result<Classifier> Classifier::load(const std::filesystem::path& shipped_path,
                                    const std::filesystem::path& user_rules_path) {
    auto path = find_shipped_rules(shipped_path);
    if (!path) return path.error();
    auto shipped = parse_rules_file(*path);
    if (!shipped) return shipped.error();
    std::vector<RuleFile> user;
    if (!user_rules_path.empty()) {
        auto u = parse_rules_file(user_rules_path);
        if (!u) return u.error();
        user.push_back(std::move(u).value());
    }
    return build(*shipped, user);
}

std::size_t Classifier::rule_count() const noexcept {
    return impl_ ? impl_->total : 0;
}

Classification Classifier::classify(const Reply& reply) const {
    Classification c;
    if (reply.enhanced) c.code_name = enhanced_code_name(*reply.enhanced);
    if (!impl_) {
        c.retry_after = extract_retry_after(reply.text);
        return c;
    }
    thread_local std::vector<int> hits;
    bool retry_hint = false;
    // 1. user layers: first rule (file order) whose conditions all hold.
    for (const Layer& layer : impl_->user) {
        text_hits(layer, reply.text, hits, retry_hint);
        std::size_t hit_pos = 0;
        for (std::size_t i = 0; i < layer.rules.size(); ++i) {
            const RuleSpec& r = layer.rules[i];
            if (r.text) {
                while (hit_pos < hits.size() && static_cast<std::size_t>(hits[hit_pos]) < i) ++hit_pos;
                if (hit_pos >= hits.size() || static_cast<std::size_t>(hits[hit_pos]) != i) continue;
            }
            if (!r.conditions_hold(reply)) continue;
            decide(c, r, Decider::user_rule);
            c.retry_after = extract_retry_after(reply.text);
            return c;
        }
    }
    if (is_delivered(reply)) {
        c.delivered = true;
        c.decided_by = Decider::success;
        c.rule = "delivered";
        return c;
    }
    const Layer& s = impl_->shipped;
    // One pass over the text finds the shipped text rules and the retry hint.
    text_hits(s, reply.text, hits, retry_hint);
    if (retry_hint) c.retry_after = retry_after_unchecked(reply.text);
    // 2. the sending Postfix's own failures.
    if (reply.local != LocalFailure::none) {
        for (std::size_t i : s.local) {
            if (!s.rules[i].conditions_hold(reply)) continue;
            decide(c, s.rules[i], Decider::local_failure);
            return c;
        }
    }
    // 3. the most specific enhanced-code rule.
    const RuleSpec* precise = nullptr;
    if (reply.enhanced) {
        int best = -1;
        for (std::size_t i : s.enhanced_by_subject[std::min<std::size_t>(reply.enhanced->subject, 8)]) {
            const RuleSpec& r = s.rules[i];
            int spec = -1;
            for (const auto& p : r.enhanced)
                if (p.matches(*reply.enhanced)) spec = std::max(spec, p.specificity());
            if (spec > best && r.conditions_hold(reply)) best = spec, precise = &r;
        }
    }
    // 4. text rules, first in file order; over a precise code only if they name it.
    for (int h : hits) {
        const RuleSpec& r = s.rules[static_cast<std::size_t>(h)];
        if (!r.conditions_hold(reply)) continue;
        if (precise && !r.may_refine(*reply.enhanced)) {
            if (c.overruled_rule.empty() && r.category != precise->category)
                c.overruled_rule = r.iname, c.overruled_category = r.category;
            continue;
        }
        // A text rule that agrees with the code refines nothing: the code decides.
        if (precise && r.category == precise->category) break;
        c.overruled_rule = {};
        decide(c, r, precise ? Decider::text_refinement : Decider::text);
        if (precise) c.refined_rule = precise->iname, c.refined_category = precise->category;
        return c;
    }
    if (precise) {
        decide(c, *precise, Decider::enhanced_code);
        return c;
    }
    // 5. the basic code alone.
    for (std::size_t i : s.basic) {
        if (!s.rules[i].conditions_hold(reply)) continue;
        decide(c, s.rules[i], Decider::basic_code);
        return c;
    }
    return c;
}

std::string Classification::note(const Reply& reply) const {
    std::string out(rule_note);
    auto add = [&out](const std::string& s) { out += (out.empty() ? "" : "; ") + s; };
    const std::string code = reply.enhanced ? reply.enhanced->str() : std::string("the code");
    if (!refined_rule.empty())
        add("refines " + code + " (" + std::string(to_string(refined_category)) + " by rule " +
            std::string(refined_rule) + ")");
    if (!overruled_rule.empty())
        add("text rule " + std::string(overruled_rule) + " (" + std::string(to_string(overruled_category)) +
            ") matched, but the precise code " + code + " decides");
    return out;
}

Classification Classifier::classify_reason(std::string_view reason, std::string_view dsn) const {
    return classify(parse_postfix_reason(reason, dsn));
}

// ---------------------------------------------------------------- retry-after

namespace {

std::optional<std::chrono::seconds> retry_after_unchecked(std::string_view text) {
    static const RE2 re(kRetryPattern, pattern_options());
    re2::StringPiece h, m, sec, num, unit;
    if (!RE2::PartialMatch(re2::StringPiece(text.data(), text.size()), re, &h, &m, &sec, &num, &unit))
        return std::nullopt;
    auto to_int = [](re2::StringPiece s) {
        long long v = 0;
        for (char ch : s) v = v * 10 + (ch - '0');
        return v;
    };
    long long seconds = 0;
    if (!h.empty()) {
        seconds = to_int(h) * 3600 + to_int(m) * 60 + to_int(sec);
    } else {
        long long n = to_int(num);
        char u = unit.empty() ? 's' : static_cast<char>(unit[0] | 0x20);
        seconds = u == 'h' ? n * 3600 : u == 'm' ? n * 60 : n;
    }
    if (seconds <= 0 || seconds > 7 * 24 * 3600) return std::nullopt;
    return std::chrono::seconds(seconds);
}

}  // namespace

std::optional<std::chrono::seconds> extract_retry_after(std::string_view text) {
    // Cheap gate: every hint carries a digit.
    if (text.find_first_of("0123456789") == std::string_view::npos) return std::nullopt;
    return retry_after_unchecked(text);
}

}  // namespace retryguard
