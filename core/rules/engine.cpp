// engine.cpp -- episodes, the escalation ladder, repeat-offender flags, spread
// detection and retry-spacing reports, all on event time (see engine.hpp).
// Nothing here reads the clock, touches storage or logs: callers persist the
// state and write the verdicts.
#include "retryguard/rules/engine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "retryguard/classify/classifier.hpp"
#include "retryguard/text/text.hpp"
#include "text/cbor_reader.hpp"
#include "text/cbor_writer.hpp"

namespace retryguard {

using namespace std::chrono_literals;

std::string_view to_string(Ladder l) noexcept {
    switch (l) {
        case Ladder::none: return "none";
        case Ladder::noted: return "noted";
        case Ladder::watch: return "watch";
        case Ladder::escalate: return "escalate";
        case Ladder::recovered: return "recovered";
    }
    return "none";
}

std::array<CategoryThresholds, kCategoryCount> RuleSettings::default_categories() {
    std::array<CategoryThresholds, kCategoryCount> a{};
    auto set = [&](Category c, int watch, std::optional<Duration> esc) {
        a[static_cast<size_t>(c)] = CategoryThresholds{watch, esc};
    };
    // GUIDANCE section 2: receiver-config is usually fixed within a business day,
    // contact the recipient past 24-48 h; receiver-system only past the retry
    // window of 3-5 days. Categories that are not the destination's outage
    // (greylisting, mailbox, local, ...) never escalate a destination.
    set(Category::receiver_config, 3, std::chrono::hours(24));
    set(Category::receiver_config_permanent, 1, std::nullopt);
    set(Category::receiver_system, 3, std::chrono::hours(72));
    set(Category::greylisting, 5, std::nullopt);
    set(Category::rate_limited, 5, std::chrono::hours(24));
    set(Category::policy, 3, std::chrono::hours(24));
    set(Category::mailbox, 3, std::nullopt);
    set(Category::address, 1, std::nullopt);
    set(Category::network, 3, std::chrono::hours(48));
    set(Category::routing, 3, std::chrono::hours(24));
    set(Category::content, 3, std::nullopt);
    set(Category::expired, 1, std::nullopt);
    set(Category::local, 3, std::nullopt);
    set(Category::unknown, 3, std::chrono::hours(48));
    return a;
}

Category EpisodeState::dominant() const {
    size_t best = static_cast<size_t>(Category::unknown);
    std::int64_t best_count = 0;
    for (size_t i = 0; i < kCategoryCount; ++i)
        if (by_category[i] > best_count) best = i, best_count = by_category[i];
    return static_cast<Category>(best);
}

std::string recipient_domain(std::string_view recipient) {
    auto at = recipient.rfind('@');
    std::string d(at == std::string_view::npos ? std::string_view{} : recipient.substr(at + 1));
    while (!d.empty() && (d.back() == '>' || d.back() == '.')) d.pop_back();
    return text::ascii_lower(d);
}

namespace {

// A relay host as rules match it: lower case, empty for Postfix's pseudo
// relays.
std::string rule_host(std::string_view h) {
    if (h == "none" || h == "local" || h == "virtual" || h == "private") return {};
    return text::ascii_lower(h);
}

}  // namespace

Category flag_reason_category(std::string_view reason) noexcept {
    const auto first = reason.find(' ');
    if (first == std::string_view::npos) return Category::unknown;
    std::string_view word = reason.substr(first + 1);
    word = word.substr(0, word.find(' '));
    return category_from_string(word).value_or(Category::unknown);
}

std::string answering_host(const Event& e) {
    std::string_view h = e.relay_host;
    if ((h.empty() || h == "none") && e.reply && !e.reply->remote_host.empty()) h = e.reply->remote_host;
    return rule_host(h);
}

namespace {

std::string recipient_key(std::string_view qid, std::string_view rcpt) {
    std::string k(qid);
    k += '\x1f';
    k += rcpt;
    return k;
}

// The day of event time (UTC) `t` falls in.
std::int64_t day_of(TimePoint t) {
    return std::chrono::floor<std::chrono::days>(t).time_since_epoch().count();
}

// The flag-category deferrals within the window before `now`: the list is
// trimmed only when one is added, so older ones may still be in it.
int recent_deferrals(const DestinationState& d, TimePoint now, const RuleSettings& rs) {
    const TimePoint horizon = now - rs.repeat_deferral_window;
    return static_cast<int>(std::count_if(d.config_deferrals.begin(), d.config_deferrals.end(),
                                          [&](TimePoint t) { return t >= horizon; }));
}

std::string seconds_str(Duration d) {
    return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count());
}

// Deferral categories that say something about a destination's own system.
bool opens_episode(Category c) {
    return c != Category::mailbox && c != Category::local && c != Category::address &&
           c != Category::content && c != Category::expired;
}

bool contains(const std::vector<Category>& v, Category c) {
    return std::find(v.begin(), v.end(), c) != v.end();
}

// The rule of a tracked destination: an MX host's by its host name; a domain's
// by its name and the host of its last logged relay= value
// ("mx.example.com[192.0.2.1]:25"), as its deferrals were judged (an MX-host
// rule also covers the domains that host serves).
const RuleSettings& settings_of(const Engine& engine, const DestinationState& d) {
    if (d.is_mx) return engine.settings_for({}, std::string_view(d.name).substr(3));
    const EpisodeState* last = d.open ? &*d.open : d.history.empty() ? nullptr : &d.history.back();
    if (!last) return engine.settings_for(d.name, {});
    const std::string_view relay = last->last_relay;
    return engine.settings_for(d.name, rule_host(relay.substr(0, relay.find('['))));
}

}  // namespace

Engine::Engine(EngineSettings settings) : settings_(std::move(settings)) {
    if (settings_.defaults.rule.empty()) settings_.defaults.rule = "global";
}

void Engine::set_settings(EngineSettings settings) {
    settings_ = std::move(settings);
    if (settings_.defaults.rule.empty()) settings_.defaults.rule = "global";
}

const RuleSettings& Engine::settings_for(std::string_view domain, std::string_view mx) const {
    if (settings_.resolve)
        if (const RuleSettings* rs = settings_.resolve(domain, mx)) return *rs;
    return settings_.defaults;
}

DestinationState& Engine::dest(std::string_view name, bool is_mx) {
    auto it = dests_.find(name);
    if (it == dests_.end()) {
        it = dests_.emplace(std::string(name), DestinationState{}).first;
        it->second.name = std::string(name);
        it->second.is_mx = is_mx;
    }
    timed_.insert(it->first);
    return it->second;
}

const DestinationState* Engine::destination(std::string_view name) const {
    auto it = dests_.find(name);
    return it == dests_.end() ? nullptr : &it->second;
}

Verdict Engine::destination_verdict(const DestinationState& d, std::string name, TimePoint t,
                                    std::string_view qid) const {
    Verdict v;
    v.time = t;
    v.key = d.name;
    v.name = std::move(name);
    v.add("destination", d.is_mx ? d.name.substr(3) : d.name)
        .add("type", d.is_mx                       ? "mx"
                     : d.name == kLocalDestination ? "local"
                                                   : "domain");
    if (d.open) {
        const EpisodeState& ep = *d.open;
        v.add("category", std::string(to_string(ep.dominant())))
            .add("attempts", std::to_string(ep.attempts))
            .add("messages", std::to_string(ep.messages.size()))
            .add("first_seen", format_rfc3339(ep.first_deferral))
            .add("last_seen", format_rfc3339(ep.last_deferral));
        if (!ep.last_relay.empty()) v.add("relay", ep.last_relay);
        v.add("reply", ep.last_reply);
    }
    if (!qid.empty()) v.add("queue_id", std::string(qid));
    return v;
}

std::vector<Verdict> Engine::on_event(const Event& e, Category c) {
    std::vector<Verdict> out;
    if (e.time > now_) now_ = e.time;
    if (now_ - last_evaluated_ >= settings_.evaluate_every) {
        auto timed = advance(now_);
        out.insert(out.end(), std::make_move_iterator(timed.begin()), std::make_move_iterator(timed.end()));
    }
    const std::string& qid = e.queue_id;
    auto for_message = [&](auto&& fn) {
        if (qid.empty()) return;
        std::string prefix = qid + '\x1f';
        for (auto it = recipients_.lower_bound(prefix);
             it != recipients_.end() && it->first.starts_with(prefix);)
            it = fn(it);
    };
    switch (e.kind) {
        case EventKind::delivery: on_delivery(e, c, out); break;
        case EventKind::queue_removed: for_message([&](auto it) { return recipients_.erase(it); }); break;
        case EventKind::expired:
            for_message([&](auto it) {
                const RecipientState& r = it->second;
                const DestinationState* d = destination(r.domain);
                Verdict v;
                v.time = e.time;
                v.key = qid;
                v.name = "expired";
                v.add("recipient", it->first.substr(qid.size() + 1)).add("destination", r.domain);
                v.add("category", std::string(to_string(r.last_category)));
                v.add("escalated", d && d->open && d->open->ladder == Ladder::escalate ? "yes" : "no");
                out.push_back(std::move(v));
                return recipients_.erase(it);
            });
            break;
        case EventKind::pickup:
            if (!e.orig_queue_id.empty() && e.orig_queue_id != qid) {
                // postsuper -r: the same message under a new queue id.
                std::string prefix = e.orig_queue_id + '\x1f';
                std::vector<std::pair<std::string, RecipientState>> moved;
                for (auto it = recipients_.lower_bound(prefix);
                     it != recipients_.end() && it->first.starts_with(prefix);) {
                    moved.emplace_back(recipient_key(qid, it->first.substr(prefix.size())), it->second);
                    it = recipients_.erase(it);
                }
                for (auto& [k, r] : moved) recipients_.insert_or_assign(k, std::move(r));
            }
            break;
        case EventKind::queue_operation:
        case EventKind::milter_action: {
            bool hold =
                e.action.find("hold") != std::string::npos && e.action.find("released") == std::string::npos;
            bool release = e.action.find("released") != std::string::npos;
            if (!hold && !release) break;
            bool reported = false;
            for_message([&](auto it) {
                it->second.held = hold;
                if (hold && !reported) {
                    Verdict v;
                    v.time = e.time;
                    v.key = qid;
                    v.name = "held";
                    v.add("recipient", it->first.substr(qid.size() + 1))
                        .add("destination", it->second.domain);
                    out.push_back(std::move(v));
                    reported = true;
                }
                return std::next(it);
            });
            break;
        }
        default: break;
    }
    return out;
}

void Engine::on_delivery(const Event& e, Category c, std::vector<Verdict>& out) {
    const std::string domain = recipient_domain(e.recipient);
    const std::string mx = answering_host(e);
    const std::string rkey = recipient_key(e.queue_id, e.recipient);
    const RuleSettings& rs = settings_for(domain, mx);

    if (e.status == DeliveryStatus::deferred) {
        auto [it, inserted] = recipients_.try_emplace(rkey);
        RecipientState& r = it->second;
        // RFC 5321's retry interval protects the destination: after a failure
        // of the sending Postfix itself (category local) no destination was
        // tried, so the next attempt may come at any time.
        if (!inserted && !r.reported_too_soon && !e.queue_id.empty() && r.last_category != Category::local) {
            Duration gap = e.time - r.last_attempt;
            Duration minimum =
                r.last_category == Category::greylisting ? rs.greylist_min_retry : rs.min_retry_interval;
            if (rs.honor_retry_after_hint && r.retry_after > minimum) minimum = r.retry_after;
            if (gap < minimum) {
                Verdict v;
                v.time = e.time;
                v.key = e.queue_id;
                v.name = "retry_too_soon";
                v.add("recipient", e.recipient).add("destination", domain);
                v.add("category", std::string(to_string(r.last_category)));
                v.add("interval_s", seconds_str(gap)).add("minimum_s", seconds_str(minimum));
                out.push_back(std::move(v));
                r.reported_too_soon = true;
            }
        }
        r.last_attempt = e.time;
        r.last_category = c;
        r.retry_after = Duration{0};
        if (rs.honor_retry_after_hint && e.reply)
            if (auto hint = extract_retry_after(e.reply->text)) r.retry_after = *hint;
        r.domain = domain;
        r.mx = mx;
        r.pending = true;
        r.reported_stalled = false;

        if (settings_.spread_enabled && contains(settings_.spread_categories, c))
            check_spread(
                e, c,
                c == Category::local ? std::string(kLocalDestination) : (mx.empty() ? domain : "mx:" + mx),
                out);
        if (c == Category::local) {
            on_deferral(e, c, kLocalDestination, false, {}, {}, out);
            return;
        }
        if (!opens_episode(c)) return;
        // While a local incident of this class is open, the sending side's own
        // path is the suspect (GUIDANCE 3.5): the deferral is the incident's,
        // counted there, and no destination opens, climbs or is flagged for it.
        // A deferral of another class from the same host is judged on its own.
        if (incident_ && incident_->category == c) {
            ++incident_->deferrals;
            return;
        }
        if (!domain.empty()) on_deferral(e, c, domain, false, domain, mx, out);
        if (!mx.empty()) on_deferral(e, c, "mx:" + mx, true, domain, mx, out);
        return;
    }
    if (e.status == DeliveryStatus::sent) {
        recipients_.erase(rkey);
        if (incident_) {
            std::string key = mx.empty() ? domain : "mx:" + mx;
            if (incident_->destinations.count(key)) incident_->recovered.insert(key);
            if (static_cast<int>(incident_->recovered.size()) * 2 >= settings_.spread_min_destinations)
                end_incident(e.time, "deliveries resumed", out);
        }
        if (!domain.empty()) on_success(e, domain, false, out);
        if (!mx.empty()) on_success(e, "mx:" + mx, true, out);
        return;
    }
    if (e.status == DeliveryStatus::bounced || e.status == DeliveryStatus::expired ||
        e.status == DeliveryStatus::undeliverable)
        recipients_.erase(rkey);
}

void Engine::on_deferral(const Event& e, Category c, std::string_view name, bool is_mx,
                         std::string_view domain, std::string_view mx, std::vector<Verdict>& out) {
    DestinationState& d = dest(name, is_mx);
    const RuleSettings& rs = is_mx ? settings_for({}, mx) : settings_for(domain, mx);
    bool opened = false;
    if (!d.open) {
        d.open.emplace();
        d.open->first_deferral = e.time;
        opened = true;
    }
    EpisodeState& ep = *d.open;
    const Ladder before = ep.ladder;
    ep.attempts++;
    ep.by_category[static_cast<size_t>(c)]++;
    ep.last_deferral = e.time;
    if (ep.messages.size() < settings_.max_messages_per_episode && !e.queue_id.empty())
        ep.messages.insert(e.queue_id);
    ep.last_reply = e.reason;
    ep.last_relay = e.relay;
    if (incident_ && incident_->category == c) ep.local_suspect = true;

    const Category dom = ep.dominant();
    const CategoryThresholds& th = rs.thresholds(dom);
    if (ep.ladder == Ladder::none) {
        ep.ladder = Ladder::noted;
        ep.peak = std::max(ep.peak, Ladder::noted);
        auto v = destination_verdict(d, "noted", e.time, e.queue_id);
        v.add("rule", rs.rule);
        out.push_back(std::move(v));
    }
    if (ep.ladder == Ladder::noted && ep.attempts >= th.watch_after_deferrals) {
        ep.ladder = Ladder::watch;
        ep.peak = std::max(ep.peak, Ladder::watch);
        out.push_back(destination_verdict(d, "watch", e.time, e.queue_id));
    }
    maybe_escalate(d, rs, e.time, e.queue_id, out);
    if (contains(rs.flag_categories, c) && !ep.local_suspect) {
        d.config_deferrals.push_back(e.time);
        auto horizon = e.time - rs.repeat_deferral_window;
        auto keep = std::find_if(d.config_deferrals.begin(), d.config_deferrals.end(),
                                 [&](TimePoint t) { return t >= horizon; });
        d.config_deferrals.erase(d.config_deferrals.begin(), keep);
    }
    if (opened || contains(rs.flag_categories, c) || ep.ladder != before)
        check_flag(d, rs, e.time, e.queue_id, out);
}

void Engine::on_success(const Event& e, std::string_view name, bool is_mx, std::vector<Verdict>& out) {
    auto it = dests_.find(name);
    if (it == dests_.end()) {
        // Remember successes only for destinations we already track: a busy
        // server delivers to many more destinations than ever defer.
        return;
    }
    DestinationState& d = it->second;
    (void)is_mx;
    d.last_success = e.time;
    if (!d.open) return;
    out.push_back(recovered(d, e.time, e.queue_id));
}

// d's open episode ends at `t`: the "recovered" verdict, and the episode goes
// into its history.
Verdict Engine::recovered(DestinationState& d, TimePoint t, std::string_view qid) {
    auto v = destination_verdict(d, "recovered", t, qid);
    v.add("previous", std::string(to_string(d.open->ladder)));
    v.add("duration_s", seconds_str(t - d.open->first_deferral));
    d.open->ended = t;
    d.open->ladder = Ladder::recovered;
    d.history.push_back(std::move(*d.open));
    d.open.reset();
    if (d.history.size() > settings_.max_episode_history)
        d.history.erase(d.history.begin(),
                        d.history.end() - static_cast<long>(settings_.max_episode_history));
    return v;
}

// One place decides escalation: on a deferral and as event time passes.
void Engine::maybe_escalate(DestinationState& d, const RuleSettings& rs, TimePoint t, std::string_view qid,
                            std::vector<Verdict>& out) {
    EpisodeState& ep = *d.open;
    const auto& th = rs.thresholds(ep.dominant());
    if (ep.ladder == Ladder::escalate || ep.local_suspect || !th.escalate_after ||
        t - ep.first_deferral < *th.escalate_after)
        return;
    ep.ladder = Ladder::escalate;
    ep.peak = Ladder::escalate;
    ep.escalated_at = t;
    auto v = destination_verdict(d, "escalate", t, qid);
    if (!rs.contact.empty()) v.add("contact", rs.contact);
    out.push_back(std::move(v));
}

void Engine::check_flag(DestinationState& d, const RuleSettings& rs, TimePoint now, std::string_view qid,
                        std::vector<Verdict>& out) {
    if (d.flagged_at || !rs.flags_enabled || d.name == kLocalDestination) return;
    int episodes = 0;
    auto horizon = now - rs.repeat_period;
    // Blips (an episode that never reached `watch`) do not count.
    auto counts = [&](const EpisodeState& ep) {
        return !ep.local_suspect && ep.peak >= Ladder::watch && contains(rs.flag_categories, ep.dominant());
    };
    for (const EpisodeState& ep : d.history)
        if (ep.first_deferral >= horizon && counts(ep)) ++episodes;
    if (d.open && counts(*d.open)) ++episodes;
    // flag_reason_category reads the class back from the reason.
    const std::string what = rs.flag_categories.size() == 1 ? std::string(to_string(rs.flag_categories[0]))
                                                            : std::string("flag-category");
    std::string reason;
    if (rs.repeat_episodes > 0 && episodes >= rs.repeat_episodes)
        reason = fmt::format("{} {} episodes within {} s", episodes, what, seconds_str(rs.repeat_period));
    else if (rs.repeat_deferrals > 0 && recent_deferrals(d, now, rs) >= rs.repeat_deferrals)
        reason = fmt::format("{} {} deferrals within {} s", recent_deferrals(d, now, rs), what,
                             seconds_str(rs.repeat_deferral_window));
    if (reason.empty()) return;
    d.flagged_at = now;
    d.flag_expires = now + rs.flag_ttl;
    d.flag_reason = reason;
    auto v = destination_verdict(d, "flagged", now, qid);
    v.add("reason", reason).add("expires", format_rfc3339(d.flag_expires)).add("rule", rs.rule);
    out.push_back(std::move(v));
}

void Engine::check_spread(const Event& e, Category c, std::string_view spread_key,
                          std::vector<Verdict>& out) {
    spread_.push_back(SpreadHit{e.time, c, std::string(spread_key)});
    auto horizon = e.time - settings_.spread_window;
    auto keep =
        std::find_if(spread_.begin(), spread_.end(), [&](const SpreadHit& h) { return h.time >= horizon; });
    spread_.erase(spread_.begin(), keep);
    if (incident_) {
        if (incident_->category == c) {
            incident_->destinations.insert(std::string(spread_key));
            incident_->recovered.erase(std::string(spread_key));
            incident_->last_hit = e.time;
        }
        return;
    }
    std::set<std::string> keys;
    for (const auto& h : spread_)
        if (h.category == c) keys.insert(h.key);
    if (static_cast<int>(keys.size()) < settings_.spread_min_destinations) return;
    incident_ = Incident{c, e.time, keys, e.time, {}, 0, 0};
    Verdict v;
    v.time = e.time;
    v.key = "-";
    v.name = "local_outbound_suspected";
    // The deferrals that revealed it were judged per destination before it
    // existed: take them back (silent state resets follow this one line).
    std::vector<Verdict> resets = absorb_into_incident(horizon, c);
    v.add("category", std::string(to_string(c)))
        .add("destinations", std::to_string(keys.size()))
        .add("window_s", seconds_str(settings_.spread_window))
        .add("absorbed", std::to_string(incident_->absorbed))
        .add("reply", e.reason);
    out.push_back(std::move(v));
    for (auto& r : resets) out.push_back(std::move(r));
}

// Episodes opened within the detection window by deferrals of the incident's
// class were the incident's from the start: their deferrals move to it, and
// what they raised (noted, watch) is undone. An episode that also holds
// deferrals of another class keeps those and is judged on them alone. Episodes
// older than the window are the destination's own outage and stay as they are.
std::vector<Verdict> Engine::absorb_into_incident(TimePoint horizon, Category c) {
    std::vector<Verdict> resets;
    const auto ci = static_cast<size_t>(c);
    for (auto& [name, d] : dests_) {
        if (!d.open || d.open->first_deferral < horizon || d.open->by_category[ci] == 0 ||
            d.name == kLocalDestination)
            continue;
        EpisodeState& ep = *d.open;
        const std::int64_t taken = ep.by_category[ci];
        // A deferral is in its domain's episode and its MX host's: count it once.
        if (!d.is_mx) incident_->deferrals += taken;
        ++incident_->absorbed;
        const RuleSettings& rs = settings_of(*this, d);
        if (contains(rs.flag_categories, c)) {
            // Only this window's deferrals can be the incident's.
            auto from = std::find_if(d.config_deferrals.begin(), d.config_deferrals.end(),
                                     [&](TimePoint t) { return t >= horizon; });
            auto drop = std::min<std::int64_t>(taken, d.config_deferrals.end() - from);
            d.config_deferrals.erase(d.config_deferrals.end() - drop, d.config_deferrals.end());
        }
        ep.by_category[ci] = 0;
        ep.attempts -= taken;
        std::string state;
        if (ep.attempts <= 0) {
            d.open.reset();
        } else {
            // What is left was judged with the incident's deferrals counted in:
            // rejudge the ladder on the rest (escalation needs a day or more,
            // so nothing opened within the window has escalated).
            const auto& th = rs.thresholds(ep.dominant());
            ep.ladder = ep.attempts >= th.watch_after_deferrals ? Ladder::watch : Ladder::noted;
            ep.peak = ep.ladder;
            state = std::string(to_string(ep.ladder));
        }
        Verdict r;
        r.time = incident_->started;
        r.key = d.name;
        r.name = "absorbed";
        r.silent = true;
        r.add("state", state);
        resets.push_back(std::move(r));
    }
    return resets;
}

std::vector<Verdict> Engine::advance(TimePoint now) {
    std::vector<Verdict> out;
    if (now > now_) now_ = now;
    now = now_;
    // Once a day of event time, at the first evaluation of the day (derived
    // from the saved state alone, so a restored engine forgets when an
    // uninterrupted one would).
    if (last_evaluated_ != TimePoint{} && day_of(now) != day_of(last_evaluated_)) forget_idle(now);
    last_evaluated_ = now;
    for (auto t = timed_.begin(); t != timed_.end();) {
        auto found = dests_.find(*t);
        if (found == dests_.end()) {
            t = timed_.erase(t);
            continue;
        }
        auto& [name, d] = *found;
        // Postfix's own failures have no destination whose delivery would
        // end them: their episode ends when none was seen for
        // incident_quiet_after (longer than Postfix's maximal_backoff_time,
        // so a retry gap does not end it), as a local incident does.
        if (d.open && name == kLocalDestination &&
            now - d.open->last_deferral >= settings_.incident_quiet_after) {
            Verdict v = recovered(d, now, {});
            v.add("why", "no failure of the sending Postfix for " +
                             seconds_str(now - d.history.back().last_deferral) + " s");
            out.push_back(std::move(v));
        }
        if (d.open && d.open->ladder != Ladder::escalate && !d.open->local_suspect)
            maybe_escalate(d, settings_of(*this, d), now, {}, out);
        if (d.flagged_at && now >= d.flag_expires) {
            Verdict v;
            v.time = now;
            v.key = d.name;
            v.name = "flag_expired";
            v.add("destination", d.is_mx ? d.name.substr(3) : d.name)
                .add("flagged_at", format_rfc3339(*d.flagged_at));
            out.push_back(std::move(v));
            d.flagged_at.reset();
            d.flag_reason.clear();
        }
        if (!d.open && !d.flagged_at)
            t = timed_.erase(t);
        else
            ++t;
    }
    for (auto& [key, r] : recipients_) {
        if (!r.pending || r.held || r.reported_stalled) continue;
        const RuleSettings& rs = settings_for(r.domain, r.mx);
        if (now - r.last_attempt > rs.stalled_after) {
            auto sep = key.find('\x1f');
            Verdict v;
            v.time = now;
            v.key = key.substr(0, sep);
            v.name = "stalled";
            v.add("recipient", key.substr(sep + 1)).add("destination", r.domain);
            v.add("last_attempt", format_rfc3339(r.last_attempt))
                .add("category", std::string(to_string(r.last_category)));
            out.push_back(std::move(v));
            r.reported_stalled = true;
        }
    }
    auto horizon = now - settings_.spread_window;
    auto keep =
        std::find_if(spread_.begin(), spread_.end(), [&](const SpreadHit& h) { return h.time >= horizon; });
    spread_.erase(spread_.begin(), keep);
    if (incident_ && now - incident_->last_hit >= settings_.incident_quiet_after)
        end_incident(now, "no more deferrals of its class", out);
    return out;
}

// A destination whose state can no longer change a verdict: no open episode,
// no flag, no closed episode that check_flag could count and no flag-category
// deferral it could count (all before `horizon`: now less the longest repeat
// period or deferral window of any rule). Its state is then what a
// destination never seen has but for last_success, which no rule reads, so
// forgetting it changes nothing; what the engine keeps follows the
// destinations that deferred within that time instead of every one that ever
// did (a long-running daemon, a year's import).
bool Engine::idle(const DestinationState& d, TimePoint horizon) const {
    if (d.open || d.flagged_at || d.name == kLocalDestination) return false;
    if (!d.history.empty() && d.history.back().first_deferral >= horizon) return false;
    return std::none_of(d.config_deferrals.begin(), d.config_deferrals.end(),
                        [&](TimePoint t) { return t >= horizon; });
}

void Engine::forget_idle(TimePoint now) {
    const Duration memory =
        std::max({settings_.defaults.repeat_period, settings_.defaults.repeat_deferral_window,
                  settings_.longest_rule_memory});
    const TimePoint horizon = now - memory;
    std::erase_if(dests_, [&](const auto& kv) {
        if (!idle(kv.second, horizon)) return false;
        timed_.erase(kv.first);
        return true;
    });
}

void Engine::end_incident(TimePoint now, std::string_view why, std::vector<Verdict>& out) {
    Verdict v;
    v.time = now;
    v.key = "-";
    v.name = "local_outbound_cleared";
    v.add("category", std::string(to_string(incident_->category)))
        .add("started", format_rfc3339(incident_->started))
        .add("destinations", std::to_string(incident_->destinations.size()))
        .add("deferrals", std::to_string(incident_->deferrals))
        .add("absorbed", std::to_string(incident_->absorbed))
        .add("why", std::string(why));
    out.push_back(std::move(v));
    // The hits that made it must not make the next one: without this, the
    // first deferral of its class after it ended would find the whole outage
    // still in the window and open a second incident at once.
    const Category c = incident_->category;
    std::erase_if(spread_, [c](const SpreadHit& h) { return h.category == c; });
    incident_.reset();
}

std::optional<Verdict> Engine::clear_flag(std::string_view destination, TimePoint now) {
    auto it = dests_.find(destination);
    if (it == dests_.end() || !it->second.flagged_at) return std::nullopt;
    DestinationState& d = it->second;
    Verdict v;
    v.time = now;
    v.key = d.name;
    v.name = "flag_cleared";
    v.add("destination", d.is_mx ? d.name.substr(3) : d.name)
        .add("flagged_at", format_rfc3339(*d.flagged_at));
    d.flagged_at.reset();
    d.flag_reason.clear();
    // Start counting afresh: the history that caused the flag is forgiven.
    for (auto& ep : d.history) ep.local_suspect = true;
    d.config_deferrals.clear();
    return v;
}

// ---------------------------------------------------------------- state
// Saved as CBOR (RFC 8949): reply texts are whatever bytes a remote server
// sent, and CBOR carries them unchanged where JSON text would need valid
// UTF-8. Version 1 states saved as JSON text (first byte '{') still load.

namespace {
using nlohmann::json;

Ladder ladder_from(const std::string& s) {
    for (Ladder l : {Ladder::none, Ladder::noted, Ladder::watch, Ladder::escalate, Ladder::recovered})
        if (to_string(l) == s) return l;
    return Ladder::none;
}

Category category_from(const std::string& s) {
    return category_from_string(s).value_or(Category::unknown);
}

EpisodeState episode_from_json(const json& j) {
    EpisodeState ep;
    ep.first_deferral = from_micros(j.at("first").get<std::int64_t>());
    ep.last_deferral = from_micros(j.at("last").get<std::int64_t>());
    ep.ended = from_micros(j.at("ended").get<std::int64_t>());
    ep.attempts = j.at("attempts").get<std::int64_t>();
    for (const auto& [k, v] : j.at("by_category").items())
        ep.by_category[static_cast<size_t>(category_from(k))] = v.get<std::int64_t>();
    ep.messages = j.at("messages").get<std::set<std::string>>();
    ep.last_reply = j.at("reply").get<std::string>();
    ep.last_relay = j.at("relay").get<std::string>();
    ep.ladder = ladder_from(j.at("ladder").get<std::string>());
    ep.peak = ladder_from(j.at("peak").get<std::string>());
    ep.escalated_at = from_micros(j.at("escalated_at").get<std::int64_t>());
    ep.local_suspect = j.at("local_suspect").get<bool>();
    return ep;
}

// Written with cbor::Writer, keys in the order std::map holds them (sorted):
// the same bytes as the nlohmann::json tree load_state() reads, without
// building it (EngineState.StreamedStateIsWhatTheJsonTreeEncodes).
void write_episode(cbor::Writer& w, const EpisodeState& ep) {
    std::vector<std::pair<std::string_view, std::int64_t>> by;
    for (size_t i = 0; i < kCategoryCount; ++i)
        if (ep.by_category[i]) by.emplace_back(to_string(static_cast<Category>(i)), ep.by_category[i]);
    std::sort(by.begin(), by.end());
    w.map(12);
    w.key("attempts").integer(ep.attempts);
    w.key("by_category").map(by.size());
    for (const auto& [name, n] : by) w.key(name).integer(n);
    w.key("ended").integer(to_micros(ep.ended));
    w.key("escalated_at").integer(to_micros(ep.escalated_at));
    w.key("first").integer(to_micros(ep.first_deferral));
    w.key("ladder").text(to_string(ep.ladder));
    w.key("last").integer(to_micros(ep.last_deferral));
    w.key("local_suspect").boolean(ep.local_suspect);
    w.key("messages").array(ep.messages.size());
    for (const auto& m : ep.messages) w.text(m);
    w.key("peak").text(to_string(ep.peak));
    w.key("relay").text(ep.last_relay);
    w.key("reply").text(ep.last_reply);
}

void write_strings(cbor::Writer& w, const std::set<std::string>& set) {
    w.array(set.size());
    for (const auto& s : set) w.text(s);
}
}  // namespace

std::string Engine::save_state() const {
    cbor::Writer w;
    w.out().reserve(64 + 56 * dests_.size() + 96 * recipients_.size());
    w.map(7);
    w.key("dests").array(dests_.size());
    for (const auto& [name, d] : dests_) {
        w.map(9);
        w.key("config_deferrals").array(d.config_deferrals.size());
        for (auto t : d.config_deferrals) w.integer(to_micros(t));
        w.key("flag_expires").integer(to_micros(d.flag_expires));
        w.key("flag_reason").text(d.flag_reason);
        w.key("flagged_at");
        if (d.flagged_at)
            w.integer(to_micros(*d.flagged_at));
        else
            w.null();
        w.key("history").array(d.history.size());
        for (const auto& ep : d.history) write_episode(w, ep);
        w.key("is_mx").boolean(d.is_mx);
        w.key("last_success").integer(to_micros(d.last_success));
        w.key("name").text(d.name);
        w.key("open");
        if (d.open)
            write_episode(w, *d.open);
        else
            w.null();
    }
    w.key("incident");
    if (incident_) {
        w.map(7);
        w.key("absorbed").integer(incident_->absorbed);
        w.key("category").text(to_string(incident_->category));
        w.key("deferrals").integer(incident_->deferrals);
        w.key("destinations");
        write_strings(w, incident_->destinations);
        w.key("last_hit").integer(to_micros(incident_->last_hit));
        w.key("recovered");
        write_strings(w, incident_->recovered);
        w.key("started").integer(to_micros(incident_->started));
    } else {
        w.null();
    }
    w.key("last_evaluated").integer(to_micros(last_evaluated_));
    w.key("now").integer(to_micros(now_));
    w.key("recipients").array(recipients_.size());
    for (const auto& [k, r] : recipients_) {
        w.map(9);
        w.key("category").text(to_string(r.last_category));
        w.key("domain").text(r.domain);
        w.key("held").boolean(r.held);
        w.key("key").text(k);
        w.key("last").integer(to_micros(r.last_attempt));
        w.key("mx").text(r.mx);
        w.key("pending").boolean(r.pending);
        w.key("stalled").boolean(r.reported_stalled);
        w.key("too_soon").boolean(r.reported_too_soon);
    }
    w.key("spread").array(spread_.size());
    for (const auto& h : spread_) {
        w.map(3);
        w.key("c").text(to_string(h.category));
        w.key("k").text(h.key);
        w.key("t").integer(to_micros(h.time));
    }
    w.key("version").integer(1);
    return w.take();
}

namespace {

// The state's top-level map with each destination's bytes apart (CBOR, as
// save_state writes it): every other key decoded, "dests" left out of the
// tree. nullopt when the bytes are not such a map; the caller then decodes
// them whole, which gives the error.
struct SplitState {
    json top = json::object();
    std::vector<std::string_view> dests;
};

std::optional<SplitState> split_state(std::string_view b) {
    SplitState out;
    bool have_dests = false;
    const bool ok = cbor::for_each_entry(b, [&](std::string_view key, std::string_view value) {
        if (key != "dests") {
            out.top[std::string(key)] = json::from_cbor(value);
            return true;
        }
        have_dests = true;
        return cbor::for_each_item(value, [&](std::string_view d) {
            out.dests.push_back(d);
            return true;
        });
    });
    if (!ok || !have_dests) return std::nullopt;
    return out;
}

}  // namespace

// CBOR states are read one destination at a time (split_state): a tree of
// the whole state took about ten times its bytes (250 MiB for a 16 MB state
// of 20,000 destinations with full histories), which the process kept after
// the load. The JSON text of older versions is read whole.
Status Engine::load_state(std::string_view text) {
    try {
        const bool is_text = !text.empty() && text.front() == '{';
        std::optional<SplitState> split;
        if (!is_text) split = split_state(text);
        json whole;
        if (!split) whole = is_text ? json::parse(text) : json::from_cbor(text);
        const json& j = split ? split->top : whole;
        if (j.at("version").get<int>() != 1)
            return make_error(ErrorKind::invalid_input, "unknown engine state version");
        Engine fresh(settings_);
        fresh.now_ = from_micros(j.at("now").get<std::int64_t>());
        fresh.last_evaluated_ = from_micros(j.at("last_evaluated").get<std::int64_t>());
        auto add_destination = [&](const json& jd) {
            DestinationState d;
            d.name = jd.at("name").get<std::string>();
            d.is_mx = jd.at("is_mx").get<bool>();
            for (const auto& je : jd.at("history")) d.history.push_back(episode_from_json(je));
            for (auto t : jd.at("config_deferrals").get<std::vector<std::int64_t>>())
                d.config_deferrals.push_back(from_micros(t));
            d.last_success = from_micros(jd.at("last_success").get<std::int64_t>());
            d.flag_reason = jd.at("flag_reason").get<std::string>();
            d.flag_expires = from_micros(jd.at("flag_expires").get<std::int64_t>());
            if (!jd.at("open").is_null()) d.open = episode_from_json(jd.at("open"));
            if (!jd.at("flagged_at").is_null())
                d.flagged_at = from_micros(jd.at("flagged_at").get<std::int64_t>());
            if (d.open || d.flagged_at) fresh.timed_.insert(d.name);
            fresh.dests_.emplace(d.name, std::move(d));
        };
        if (split)
            for (std::string_view bytes : split->dests) add_destination(json::from_cbor(bytes));
        else
            for (const auto& jd : j.at("dests")) add_destination(jd);
        for (const auto& jr : j.at("recipients")) {
            RecipientState r;
            r.last_attempt = from_micros(jr.at("last").get<std::int64_t>());
            r.last_category = category_from(jr.at("category").get<std::string>());
            r.domain = jr.at("domain").get<std::string>();
            r.mx = jr.at("mx").get<std::string>();
            r.pending = jr.at("pending").get<bool>();
            r.held = jr.at("held").get<bool>();
            r.reported_too_soon = jr.at("too_soon").get<bool>();
            r.reported_stalled = jr.at("stalled").get<bool>();
            fresh.recipients_.emplace(jr.at("key").get<std::string>(), std::move(r));
        }
        for (const auto& jh : j.at("spread"))
            fresh.spread_.push_back(SpreadHit{from_micros(jh.at("t").get<std::int64_t>()),
                                              category_from(jh.at("c").get<std::string>()),
                                              jh.at("k").get<std::string>()});
        if (!j.at("incident").is_null()) {
            const auto& ji = j.at("incident");
            fresh.incident_ =
                Incident{category_from(ji.at("category").get<std::string>()),
                         from_micros(ji.at("started").get<std::int64_t>()),
                         ji.at("destinations").get<std::set<std::string>>(),
                         from_micros(ji.at("last_hit").get<std::int64_t>()),
                         ji.at("recovered").get<std::set<std::string>>(),
                         // Absent in states saved before incidents counted their deferrals.
                         ji.value("deferrals", std::int64_t{0}), ji.value("absorbed", std::int64_t{0})};
        }
        *this = std::move(fresh);
        return {};
    } catch (const std::exception& ex) {
        return make_error(ErrorKind::invalid_input, std::string("bad engine state: ") + ex.what());
    }
}

}  // namespace retryguard
