// resolve.cpp -- which destination rule applies to a domain and its relay
// host, and the atomic snapshot holder. Precedence: exact domain > longest
// "*." wildcard > MX-host group (most literal characters, then the first in
// the file) > global. Must never allocate a new Config nor throw; called on
// every policy request and milter message.

#include <algorithm>

#include "config/internal.hpp"

namespace retryguard::config {
namespace {

std::string normalise(std::string_view s, bool strip_relay_suffix) {
    if (strip_relay_suffix) {
        // Accept Postfix's relay= form "mx1.example.net[192.0.2.1]:25" as well.
        if (auto b = s.find('['); b != std::string_view::npos && b > 0) s = s.substr(0, b);
    }
    std::string out(s);
    for (auto& c : out)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');  // ASCII only: no locale lookups
    if (!out.empty() && out.back() == '.') out.pop_back();
    return out;
}

std::string describe(const Config& c, const DestinationRule& r) {
    std::string kind = r.kind == DestinationRule::Kind::exact      ? "domain"
                       : r.kind == DestinationRule::Kind::wildcard ? "wildcard"
                                                                   : "mx group";
    return kind + " rule '" + r.pattern + "' (destinations[" + std::to_string(r.index) + "] at " + c.source +
           ":" + std::to_string(r.line) + ")";
}

}  // namespace

Resolution Config::resolve(std::string_view domain_in, std::string_view mx_in) const {
    Resolution res;
    res.settings = &global;
    res.config = this;
    res.domain = normalise(domain_in, false);
    res.mx = normalise(mx_in, true);
    const std::string& domain = res.domain;
    const DestinationRule* win = nullptr;
    auto consider = [&](const DestinationRule* r) {
        if (!win)
            win = r;
        else
            res.also_matched.push_back(r);
    };
    if (!exact_rules.empty())
        if (auto it = exact_rules.find(domain); it != exact_rules.end()) consider(&destinations[it->second]);
    // Suffixes from the longest (".b.example.com") to the shortest (".com");
    // the apex never matches its own wildcard because the suffix starts at a dot.
    if (!wildcard_rules.empty())
        for (std::size_t dot = domain.find('.'); dot != std::string::npos; dot = domain.find('.', dot + 1))
            if (auto it = wildcard_rules.find(domain.substr(dot)); it != wildcard_rules.end())
                consider(&destinations[it->second]);
    if (!res.mx.empty() && !mx_rules.empty()) {
        std::vector<int> hits;
        RE2::Set::ErrorInfo info{RE2::Set::kNoError};
        if (mx_set && (mx_set->set.Match(res.mx, &hits, &info) || info.kind == RE2::Set::kNoError)) {
            std::sort(hits.begin(), hits.end());  // set index order is precedence order
            for (int h : hits) consider(&destinations[mx_rules[static_cast<std::size_t>(h)]]);
        } else {
            // No set, or its DFA ran out of memory: match rule by rule, same order.
            for (std::size_t idx : mx_rules)
                if (RE2::FullMatch(res.mx, *destinations[idx].mx_re)) consider(&destinations[idx]);
        }
    }
    if (win) {
        res.rule = win;
        res.settings = &win->settings;
    }
    return res;
}

std::string Resolution::reason() const {
    if (!rule)
        return "no destination rule matches domain '" + domain + "'" +
               (mx.empty() ? std::string(" (relay host unknown)") : " or relay host '" + mx + "'") +
               ": global settings";
    std::string head = config ? describe(*config, *rule) : rule->pattern;
    switch (rule->kind) {
        case DestinationRule::Kind::exact:
            return head + ": exact match for '" + domain + "' (exact rules come first)";
        case DestinationRule::Kind::wildcard:
            return head + ": '" + domain + "' is a subdomain of '" + rule->suffix.substr(1) +
                   "'; no exact rule, and this is the longest matching wildcard";
        case DestinationRule::Kind::mx: {
            bool other_mx = false;
            for (const auto* r : also_matched) other_mx = other_mx || r->kind == DestinationRule::Kind::mx;
            return head + ": relay host '" + mx + "' matches; no domain rule matches '" + domain + "'" +
                   (other_mx ? ", and this glob has the most literal characters (ties: first in file)" : "");
        }
    }
    return head;
}

ConfigHolder::ConfigHolder(std::shared_ptr<const Config> initial, std::vector<std::string> overrides)
    : current_(std::move(initial)), overrides_(std::move(overrides)) {}

std::vector<Diagnostic> ConfigHolder::reload(const std::string& path, const Validator& validate) {
    auto running = current_.load();
    std::string file = path.empty() && running ? running->source : path;
    // Built-in defaults (no file, source "<...>"): only the overrides are read again.
    LoadOutcome out =
        file.empty() || file.front() == '<' ? load_string("", file, overrides_) : load_file(file, overrides_);
    if (!out.ok()) return out.errors;
    if (validate) {
        auto problems = validate(*out.config);
        if (!problems.empty()) return problems;
    }
    current_.store(std::move(out.config));
    generation_.fetch_add(1);
    return {};
}

}  // namespace retryguard::config
