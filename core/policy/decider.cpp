// decider.cpp -- the action vocabulary and the static destination table.
//
// Owns: checking an administrator's action text before it reaches Postfix, and
// StaticDestinationDecider, the table-driven decider used until the
// ledger-backed one is wired in. Must never block in decide() (it answers on
// the event loop) and never throw out of any function here.
#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "retryguard/policy/policy.hpp"
#include "retryguard/text/text.hpp"

namespace retryguard {
namespace {

constexpr std::array<std::string_view, kActionKindCount> kActionNames = {
    "dunno", "warn", "info", "prepend", "hold", "defer_if_permit", "reject",
};

constexpr std::size_t kMaxActionBytes = 512;
constexpr std::size_t kMaxDomainBytes = 255;

// Lower-cases `domain` into `buf` and drops one trailing dot; false if it
// cannot be a domain name (too long or empty).
bool normalize_domain(std::string_view domain, char* buf, std::size_t& len) noexcept {
    if (!domain.empty() && domain.back() == '.') domain.remove_suffix(1);
    if (domain.empty() || domain.size() > kMaxDomainBytes) return false;
    // ASCII only, independent of the locale: domain names in the table and in
    // Postfix's requests compare byte for byte apart from letter case.
    for (std::size_t i = 0; i < domain.size(); ++i) {
        const char c = domain[i];
        buf[i] = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    }
    len = domain.size();
    return true;
}

struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

}  // namespace

std::string_view to_string(ActionKind kind) noexcept {
    return kActionNames[static_cast<std::size_t>(kind)];
}

Result<Decision> parse_action(std::string_view text) {
    text = text::trim(text);
    if (text.empty()) return make_error(ErrorKind::invalid_input, "empty action");
    if (text.size() > kMaxActionBytes)
        return make_error(ErrorKind::limit,
                          "action longer than " + std::to_string(kMaxActionBytes) + " bytes");
    for (unsigned char c : text) {
        if (c < 0x20 || c == 0x7f)
            return make_error(ErrorKind::invalid_input, "action contains a control character");
    }
    const auto sp = text.find_first_of(" \t");
    const std::string_view verb = text.substr(0, sp);
    const std::string_view rest =
        sp == std::string_view::npos ? std::string_view{} : text::trim(text.substr(sp));
    Decision d;
    struct Verb {
        std::string_view name;
        ActionKind kind;
        bool takes_text;
        bool needs_text;
    };
    static constexpr Verb kVerbs[] = {
        {"DUNNO", ActionKind::dunno, false, false},
        {"WARN", ActionKind::warn, true, false},
        {"INFO", ActionKind::info, true, false},
        {"PREPEND", ActionKind::prepend, true, true},
        {"HOLD", ActionKind::hold, true, false},
        {"DEFER_IF_PERMIT", ActionKind::defer_if_permit, true, false},
        {"REJECT", ActionKind::reject, true, false},
    };
    for (const Verb& v : kVerbs) {
        if (!text::iequals(verb, v.name)) continue;
        if (!v.takes_text && !rest.empty())
            return make_error(ErrorKind::invalid_input, std::string(v.name) + " takes no text");
        if (v.needs_text && rest.empty())
            return make_error(ErrorKind::invalid_input, std::string(v.name) + " needs text");
        if (v.kind == ActionKind::prepend) {
            // PREPEND takes a whole header: a name without spaces, then ':'.
            const auto colon = rest.find(':');
            if (colon == std::string_view::npos || colon == 0 ||
                rest.substr(0, colon).find_first_of(" \t") != std::string_view::npos)
                return make_error(ErrorKind::invalid_input, "PREPEND needs 'Header-Name: value'");
        }
        d.kind = v.kind;
        d.action.assign(v.name);
        if (!rest.empty()) {
            d.action.push_back(' ');
            d.action.append(rest);
        }
        return d;
    }
    return make_error(ErrorKind::invalid_input,
                      "unknown action '" + std::string(verb) +
                          "' (expected DUNNO, WARN, INFO, PREPEND, HOLD, DEFER_IF_PERMIT or REJECT)");
}

struct StaticDestinationDecider::Table {
    std::unordered_map<std::string, Decision, StringHash, std::equal_to<>> by_domain;
};

Result<std::shared_ptr<const StaticDestinationDecider::Table>> parse_destination_table(
    std::string_view text) {
    try {
        auto table = std::make_shared<StaticDestinationDecider::Table>();
        std::size_t line_no = 0;
        while (!text.empty()) {
            ++line_no;
            const auto nl = text.find('\n');
            std::string_view line = text.substr(0, nl);
            text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
            line = text::trim(line);
            if (line.empty() || line.front() == '#') continue;
            const auto sp = line.find_first_of(" \t");
            const std::string where = "line " + std::to_string(line_no) + ": ";
            if (sp == std::string_view::npos)
                return make_error(ErrorKind::config, where + "expected 'domain ACTION [text]'");
            char buf[kMaxDomainBytes];
            std::size_t len = 0;
            const std::string_view domain = line.substr(0, sp);
            if (domain.find('@') != std::string_view::npos || !normalize_domain(domain, buf, len))
                return make_error(ErrorKind::config, where + "bad domain '" + std::string(domain) + "'");
            auto action = parse_action(line.substr(sp));
            if (!action) return make_error(ErrorKind::config, where + action.error().message);
            auto [it, inserted] = table->by_domain.try_emplace(std::string(buf, len), std::move(*action));
            if (!inserted)
                return make_error(ErrorKind::config, where + "domain '" + it->first + "' listed twice");
        }
        return std::shared_ptr<const StaticDestinationDecider::Table>(std::move(table));
    } catch (const std::exception& e) {
        return make_error(ErrorKind::internal, std::string("loading destination table: ") + e.what());
    }
}

namespace {
Result<std::shared_ptr<const StaticDestinationDecider::Table>> load_table_file(const std::string& path) {
    try {
        std::ifstream in(path, std::ios::binary);
        if (!in) return make_error(ErrorKind::io, "cannot open " + path);
        std::ostringstream ss;
        ss << in.rdbuf();
        if (in.bad()) return make_error(ErrorKind::io, "cannot read " + path);
        auto table = parse_destination_table(ss.str());
        if (!table) return make_error(table.error().kind, path + ": " + table.error().message);
        return table;
    } catch (const std::exception& e) {
        return make_error(ErrorKind::io, path + ": " + e.what());
    }
}
}  // namespace

Result<std::unique_ptr<StaticDestinationDecider>> StaticDestinationDecider::load(std::string path) {
    auto table = load_table_file(path);
    if (!table) return std::move(table).error();
    std::unique_ptr<StaticDestinationDecider> d(new StaticDestinationDecider(std::move(path)));
    d->table_.store(std::move(*table));
    return d;
}

Status StaticDestinationDecider::reload() {
    auto table = load_table_file(path_);
    if (!table) return std::move(table).error();
    table_.store(std::move(*table));
    return {};
}

Decision StaticDestinationDecider::decide(const PolicyRequest& request, PolicyDeadline) {
    char buf[kMaxDomainBytes];
    std::size_t len = 0;
    if (!normalize_domain(request.recipient_domain(), buf, len)) return {};
    const std::shared_ptr<const Table> table = table_.load();
    const auto it = table->by_domain.find(std::string_view(buf, len));
    if (it == table->by_domain.end()) return {};
    return it->second;
}

std::size_t StaticDestinationDecider::size() const {
    return table_.load()->by_domain.size();
}

std::string StaticDestinationDecider::describe() const {
    return "static destination table " + path_ + " (" + std::to_string(size()) + " destinations)";
}

}  // namespace retryguard
