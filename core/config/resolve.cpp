// resolve.cpp -- which destination rule applies to a domain and its relay
// host, and the atomic snapshot holder. Precedence: exact domain > longest
// "*." wildcard > MX-host group (most literal characters, then the first in
// the file) > global. Must never allocate a new Config nor throw; called on
// every policy request and milter message.
#include <cctype>

#include "config/internal.hpp"

namespace retryguard::config {
namespace {

std::string normalise(std::string_view s, bool strip_relay_suffix) {
    if (strip_relay_suffix) {
        // Accept Postfix's relay= form "mx1.example.net[192.0.2.1]:25" as well.
        if (auto b = s.find('['); b != std::string_view::npos && b > 0) s = s.substr(0, b);
    }
    std::string out(s);
    for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
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
    const std::string domain = normalise(domain_in, false);
    const std::string mx = normalise(mx_in, true);
    std::vector<const DestinationRule*> matches;
    if (auto it = exact_rules.find(domain); it != exact_rules.end())
        matches.push_back(&destinations[it->second]);
    // Suffixes from the longest (".b.example.com") to the shortest (".com");
    // the apex never matches its own wildcard because the suffix starts at a dot.
    for (std::size_t dot = domain.find('.'); dot != std::string::npos; dot = domain.find('.', dot + 1))
        if (auto it = wildcard_rules.find(domain.substr(dot)); it != wildcard_rules.end())
            matches.push_back(&destinations[it->second]);
    if (!mx.empty())
        for (std::size_t idx : mx_rules)
            if (RE2::FullMatch(mx, *destinations[idx].mx_re)) matches.push_back(&destinations[idx]);

    if (matches.empty()) {
        res.reason = "no destination rule matches domain '" + domain + "'" +
                     (mx.empty() ? std::string(" (relay host unknown)") : " or relay host '" + mx + "'") +
                     ": global settings";
        return res;
    }
    const DestinationRule* win = matches.front();
    res.rule = win;
    res.settings = &win->settings;
    res.also_matched.assign(matches.begin() + 1, matches.end());
    switch (win->kind) {
        case DestinationRule::Kind::exact:
            res.reason =
                describe(*this, *win) + ": exact match for '" + domain + "' (exact rules come first)";
            break;
        case DestinationRule::Kind::wildcard:
            res.reason = describe(*this, *win) + ": '" + domain + "' is a subdomain of '" +
                         win->suffix.substr(1) +
                         "'; no exact rule, and this is the longest matching wildcard";
            break;
        case DestinationRule::Kind::mx:
            res.reason =
                describe(*this, *win) + ": relay host '" + mx + "' matches; no domain rule matches '" +
                domain + "'" +
                (matches.size() > 1 ? ", and this glob has the most literal characters (ties: first in file)"
                                    : "");
            break;
    }
    return res;
}

ConfigHolder::ConfigHolder(std::shared_ptr<const Config> initial) : current_(std::move(initial)) {}

std::vector<Diagnostic> ConfigHolder::reload(const std::string& path) {
    auto running = current_.load();
    std::string file = path.empty() && running ? running->source : path;
    LoadOutcome out = load_file(file);
    if (!out.ok()) return out.errors;
    current_.store(std::move(out.config));
    generation_.fetch_add(1);
    return {};
}

}  // namespace retryguard::config
