// ledger_decider.cpp -- answers policy requests from the destination state the
// ingest thread publishes and the configured actions.
//
// Owns: building PolicySnapshots from the engine or from ledger flags, the
// action precedence (flagged > escalated > local incident > watch > DUNNO),
// placeholder filling and dry-run. Must never block, lock, touch the ledger or
// throw in decide(): anything unexpected answers DUNNO and is counted.
#include "retryguard/policy/ledger_decider.hpp"

#include <fmt/format.h>

#include "retryguard/text/text.hpp"

namespace retryguard {
namespace {

constexpr std::size_t kMaxDomainBytes = 255;
constexpr std::size_t kMaxValueBytes = 200;

std::string lower_domain(std::string_view d) {
    if (!d.empty() && d.back() == '.') d.remove_suffix(1);
    std::string out(d);
    for (char& c : out)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return out;
}

// One line of a Postfix reply: the policy-answer renderer of core/text (control
// bytes become spaces, long values are cut, never inside a character).
void append_safe(std::string& out, std::string_view v) {
    retryguard::text::append_policy_text(out, v, kMaxValueBytes);
}

bool is_domain_destination(std::string_view name) {
    return !name.empty() && name.find(':') == std::string_view::npos;
}

}  // namespace

std::shared_ptr<PolicySnapshot> snapshot_from_engine(const Engine& engine) {
    auto snap = std::make_shared<PolicySnapshot>();
    snap->origin = "engine";
    snap->local_incident = engine.local_incident_open();
    if (snap->local_incident) {
        snap->local_incident_since = engine.local_incident_since();
        snap->local_incident_category = engine.local_incident_category();
    }
    // Only a destination with an open episode or a flag can be in the snapshot.
    engine.for_each_active([&](const DestinationState& d) {
        const std::string& name = d.name;
        if (d.is_mx || !is_domain_destination(name)) return;
        DestinationView v;
        v.flagged = d.flagged_at.has_value();
        if (d.open) {
            v.ladder = d.open->ladder;
            v.category = d.open->dominant();
            v.since = d.open->first_deferral;
            v.last_reply = d.open->last_reply;
            v.relay = d.open->last_relay;
        } else if (!d.history.empty()) {
            v.category = d.history.back().dominant();
            v.last_reply = d.history.back().last_reply;
            v.relay = d.history.back().last_relay;
        }
        if (v.flagged && !d.open) v.since = *d.flagged_at;
        if (!v.flagged && v.ladder != Ladder::watch && v.ladder != Ladder::escalate) return;
        snap->by_domain.emplace(lower_domain(name), std::move(v));
    });
    return snap;
}

std::shared_ptr<const PolicySnapshot> snapshot_from_flags(const std::vector<Flag>& flags) {
    auto snap = std::make_shared<PolicySnapshot>();
    snap->origin = "ledger flags";
    for (const Flag& f : flags) {
        if (f.cleared_at || !is_domain_destination(f.destination)) continue;
        DestinationView v;
        v.flagged = true;
        v.since = f.set_at;
        v.last_reply = f.reason;
        v.category = flag_reason_category(f.reason);
        snap->by_domain.insert_or_assign(lower_domain(f.destination), std::move(v));
    }
    return snap;
}

std::string fill_action_placeholders(std::string_view text, std::string_view domain,
                                     const DestinationView& view, std::string_view contact) {
    std::string out;
    out.reserve(text.size() + 64);
    while (!text.empty()) {
        const auto open = text.find('{');
        if (open == std::string_view::npos) break;
        out.append(text.substr(0, open));
        text.remove_prefix(open);
        const auto close = text.find('}');
        if (close == std::string_view::npos) break;
        const std::string_view name = text.substr(1, close - 1);
        if (name == "domain")
            append_safe(out, domain);
        else if (name == "mx")
            append_safe(out, view.relay.empty() ? std::string_view("-") : std::string_view(view.relay));
        else if (name == "category")
            append_safe(out, to_string(view.category));
        else if (name == "since")
            out += view.since == TimePoint{} ? std::string("-") : format_rfc3339(view.since);
        else if (name == "reply")
            append_safe(out,
                        view.last_reply.empty() ? std::string_view("-") : std::string_view(view.last_reply));
        else if (name == "contact")
            append_safe(out, contact.empty() ? std::string_view("-") : contact);
        else
            out.append(
                text.substr(0, close + 1));  // not ours: kept as written (load-time checks refuse these)
        text.remove_prefix(close + 1);
    }
    out.append(text);
    return out;
}

LedgerDecider::LedgerDecider(std::shared_ptr<const config::ConfigHolder> config, Note note)
    : config_(std::move(config)), note_(std::move(note)) {
    snapshot_.store(std::make_shared<const PolicySnapshot>());
}

Decision LedgerDecider::decide(const PolicyRequest& request, PolicyDeadline) {
    try {
        return decide_unchecked(request);
    } catch (const std::exception& e) {
        fail_open_.fetch_add(1, std::memory_order_relaxed);
        if (note_) note_(fmt::format("fail open (DUNNO): {}", e.what()));
        return {};
    }
}

Decision LedgerDecider::decide_unchecked(const PolicyRequest& request) {
    const std::string_view raw = request.recipient_domain();
    if (raw.empty() || raw.size() > kMaxDomainBytes) return {};
    const std::shared_ptr<const PolicySnapshot> snap = snapshot_.load();
    if (!snap) {
        fail_open_.fetch_add(1, std::memory_order_relaxed);
        if (note_) note_("fail open (DUNNO): no destination state published yet");
        return {};
    }
    // Domains without upper case or a trailing dot (nearly all) need no copy.
    std::string lowered;
    std::string_view domain = raw;
    for (char c : raw) {
        if ((c >= 'A' && c <= 'Z') || raw.back() == '.') {
            lowered = lower_domain(raw);
            domain = lowered;
            break;
        }
    }
    const auto it = snap->by_domain.find(domain);
    const DestinationView* view = it == snap->by_domain.end() ? nullptr : &it->second;
    if (!view && !snap->local_incident) return {};

    const std::shared_ptr<const config::Config> cfg = config_->current();
    if (!cfg) {
        fail_open_.fetch_add(1, std::memory_order_relaxed);
        if (note_) note_("fail open (DUNNO): no configuration");
        return {};
    }
    const config::Resolution res =
        cfg->resolve(domain, view ? std::string_view(view->relay) : std::string_view{});
    const config::Settings& s = *res.settings;
    const config::PolicyAction* action = nullptr;
    DestinationView incident_view;
    if (view && view->flagged && s.actions.flagged.verb != config::PolicyAction::Verb::dunno)
        action = &s.actions.flagged;
    else if (view && view->ladder == Ladder::escalate &&
             s.actions.escalated.verb != config::PolicyAction::Verb::dunno)
        action = &s.actions.escalated;
    else if (snap->local_incident && s.actions.local_incident.verb != config::PolicyAction::Verb::dunno)
        action = &s.actions.local_incident;
    else if (view && view->ladder == Ladder::watch &&
             s.actions.watch.verb != config::PolicyAction::Verb::dunno)
        action = &s.actions.watch;
    if (!action) return {};
    if (action == &s.actions.local_incident) {
        // {category} and {since} are the incident's; {mx} and {reply} the
        // destination's own, when it has an episode.
        if (view) incident_view = *view;
        incident_view.category = snap->local_incident_category;
        incident_view.since = snap->local_incident_since;
        view = &incident_view;
    }
    const std::string text =
        config::PolicyAction{action->verb, fill_action_placeholders(action->text, domain, *view, s.contact)}
            .to_string();
    auto decision = parse_action(text);
    if (!decision) {
        fail_open_.fetch_add(1, std::memory_order_relaxed);
        if (note_)
            note_(fmt::format("fail open (DUNNO) for {}: action '{}': {}", domain, text,
                              decision.error().message));
        return {};
    }
    if (s.dry_run) {
        dry_run_.fetch_add(1, std::memory_order_relaxed);
        if (note_) note_(fmt::format("dry run: {} would get '{}'", domain, decision->action));
        return {};
    }
    return std::move(*decision);
}

std::string LedgerDecider::describe() const {
    const auto snap = snapshot_.load();
    return fmt::format("ledger-backed decider ({} destinations from {})", snap ? snap->by_domain.size() : 0,
                       snap && !snap->origin.empty() ? snap->origin : "nothing yet");
}

}  // namespace retryguard
