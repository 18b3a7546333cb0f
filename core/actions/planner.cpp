// planner.cpp -- decides which notices and flushes the follower's events call
// for (see actions.hpp). Event time only, no clock, no I/O: the runner and the
// policy daemon carry the plans out. Everything it remembers is bounded.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "retryguard/actions/actions.hpp"
#include "retryguard/ledger/ledger.hpp"
#include "retryguard/text/text.hpp"

namespace retryguard::actions {

std::string_view to_string(Origin::Kind k) noexcept {
    switch (k) {
        case Origin::Kind::unknown: return "unknown";
        case Origin::Kind::sendmail: return "sendmail";
        case Origin::Kind::sasl: return "sasl";
        case Origin::Kind::remote: return "remote";
    }
    return "unknown";
}

RunnerSettings runner_settings_from(const config::Config& c) {
    RunnerSettings s;
    s.sendmail_path = c.postfix.sendmail_path;
    s.postqueue_path = c.postfix.postqueue_path;
    s.config_directory = c.postfix.config_directory;
    s.timeout = c.postfix.command_timeout;
    return s;
}

NoticeTemplate notice_template_from(const config::Config& c) {
    NoticeTemplate t;
    t.from = c.notice.from;
    t.subject = c.notice.subject;
    t.body = c.notice.body;
    return t;
}

namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr Duration kForgetEvery = std::chrono::minutes(10);
constexpr Duration kKeepGone = std::chrono::hours(1);  // a removed message's origin, for late lines
constexpr Duration kProbeCheckEvery = std::chrono::minutes(1);
constexpr Duration kSameRecovery = std::chrono::minutes(1);

std::string unbracket(std::string_view a) {
    if (a.size() >= 2 && a.front() == '<' && a.back() == '>') a = a.substr(1, a.size() - 2);
    return std::string(a);
}

// Senders that are programs, not people: list owners, bounce handlers,
// no-reply robots (the log carries no header; docs/guidance.md says so).
bool automated_sender(std::string_view sender) {
    const std::string local = text::ascii_lower(sender.substr(0, sender.rfind('@')));
    static constexpr std::string_view kExact[] = {"mailer-daemon", "postmaster", "listserv",   "majordomo",
                                                  "noreply",       "no-reply",   "donotreply", "do-not-reply",
                                                  "bounce",        "bounces"};
    for (auto e : kExact)
        if (local == e) return true;
    return local.starts_with("owner-") || local.ends_with("-request") || local.ends_with("-owner") ||
           local.ends_with("-bounces") || local.starts_with("bounce-") || local.starts_with("bounces+");
}

bool contains(const std::vector<Category>& v, Category c) {
    return std::find(v.begin(), v.end(), c) != v.end();
}

std::string_view field(const Event& e, std::string_view key) {
    for (const auto& [k, v] : e.fields)
        if (k == key) return v;
    return {};
}

const config::Settings& settings_for_destination(const config::Config& cfg, std::string_view key) {
    if (key.starts_with("mx:")) return *cfg.resolve({}, key.substr(3)).settings;
    return *cfg.resolve(key, {}).settings;
}

}  // namespace

Planner::Planner(std::shared_ptr<const config::Config> config, FirstDeferral first_deferral)
    : config_(std::move(config)), first_deferral_(std::move(first_deferral)) {
    set_derived();
}

void Planner::set_config(std::shared_ptr<const config::Config> config) {
    config_ = std::move(config);
    set_derived();
}

void Planner::set_derived() {
    probe_anywhere_ = config_->global.flush.probe;
    notify_anywhere_ = config_->global.notify.enabled;
    for (const auto& r : config_->destinations) {
        probe_anywhere_ = probe_anywhere_ || r.settings.flush.probe;
        notify_anywhere_ = notify_anywhere_ || r.settings.notify.enabled;
    }
}

bool Planner::skip(std::string_view reason) {
    auto it = stats_.notices_skipped.find(reason);
    if (it == stats_.notices_skipped.end()) it = stats_.notices_skipped.emplace(std::string(reason), 0).first;
    ++it->second;
    return false;
}

Origin* Planner::origin(std::string_view qid) {
    auto it = origins_.find(qid);
    return it == origins_.end() ? nullptr : &it->second;
}

void Planner::observe(const Event* event, Category category, TimePoint time,
                      std::span<const Verdict> verdicts, const Engine& engine, bool replayed) {
    if (time > now_) now_ = time;
    if (event) on_event(*event, category, engine, replayed);
    for (const auto& v : verdicts) on_verdict(v, engine, replayed);
    if (!replayed && probe_anywhere_ && now_ - last_probe_check_ >= kProbeCheckEvery) {
        last_probe_check_ = now_;
        maybe_probe(now_, engine);
    }
    if (now_ - last_forget_ >= kForgetEvery) {
        last_forget_ = now_;
        forget_old(now_);
    }
}

void Planner::on_event(const Event& e, Category c, const Engine& engine, bool replayed) {
    const std::string& qid = e.queue_id;
    if (qid.empty()) return;
    switch (e.kind) {
        case EventKind::pickup: {
            Origin o;
            // postsuper -r: the same message under a new queue id keeps what is known of it.
            if (!e.orig_queue_id.empty() && e.orig_queue_id != qid) {
                if (auto* old = origin(e.orig_queue_id)) o = *old;
                if (deferred_.count(e.orig_queue_id)) deferred_.insert(qid);
                if (auto n = notified_.find(e.orig_queue_id); n != notified_.end())
                    notified_[qid] = n->second;
                o.gone = false;
            } else {
                o.kind = Origin::Kind::sendmail;
                o.sender = unbracket(e.sender);
                o.login = "uid " + std::to_string(e.uid);
                o.arrival = e.time;
            }
            if (origins_.size() < kMaxTracked) origins_[qid] = std::move(o);
            break;
        }
        case EventKind::smtpd_client: {
            if (origins_.size() >= kMaxTracked && !origin(qid)) break;
            Origin& o = origins_[qid];
            const std::string_view login = field(e, "sasl_username");
            o.kind = login.empty() ? Origin::Kind::remote : Origin::Kind::sasl;
            o.login = std::string(login);
            o.arrival = e.time;
            break;
        }
        case EventKind::queue_active:
            if (auto* o = origin(qid)) {
                o->sender = unbracket(e.sender);
                if (o->arrival == TimePoint{}) o->arrival = e.time;
            }
            break;
        case EventKind::queue_removed:
        case EventKind::expired: {
            if (origins_.size() >= kMaxTracked && !origin(qid)) break;
            Origin& o = origins_[qid];
            o.gone = true;
            o.removed = e.time;
            break;
        }
        case EventKind::delivery:
            if (e.status != DeliveryStatus::deferred) break;
            if (replayed) {
                deferred_.insert(qid);
                break;
            }
            on_deferral(e, c, engine);
            break;
        default: break;
    }
}

void Planner::on_deferral(const Event& e, Category c, const Engine& engine) {
    const std::string& qid = e.queue_id;
    const bool seen = !deferred_.insert(qid).second;
    const std::string domain = recipient_domain(e.recipient);
    const std::string mx = answering_host(e);
    if (!notify_anywhere_) return;
    const config::Settings& s = *config_->resolve(domain, mx).settings;
    if (!s.notify.enabled || !contains(s.notify.categories, c)) return;

    // More recipients of a message whose notice is still being planned.
    for (auto& p : notices_)
        if (p.notice.queue_id == qid) {
            if (std::find(p.notice.recipients.begin(), p.notice.recipients.end(), e.recipient) ==
                p.notice.recipients.end())
                p.notice.recipients.push_back(e.recipient);
            return;
        }
    if (notified_.count(qid)) return void(skip("already_notified"));
    if (seen) return void(skip("not_first_deferral"));
    const Origin* o = origin(qid);
    if (!o || o->kind == Origin::Kind::unknown) return void(skip("origin_unknown"));
    if (o->kind == Origin::Kind::remote) return void(skip("remote_client"));
    if (o->sender.empty()) return void(skip("null_sender"));
    if (automated_sender(o->sender)) return void(skip("automated_sender"));
    if (!safe_header_address(o->sender)) return void(skip("unsafe_address"));

    const DestinationState* d = engine.destination(domain);
    const EpisodeState* ep = d && d->open ? &*d->open : nullptr;
    const TimePoint episode_start = ep ? ep->first_deferral : e.time;
    std::string episode_key = fmt::format("{}\x1f{}\x1f{}", o->sender, domain, to_micros(episode_start));
    if (episode_notices_.count(episode_key)) return void(skip("episode_notified"));
    // Last, as it may cost a ledger read.
    if (first_deferral_ && !first_deferral_(e)) return void(skip("not_first_deferral"));

    Notice n;
    n.queue_id = qid;
    n.sender = o->sender;
    n.destination = domain;
    n.category = c;
    n.recipients.push_back(e.recipient);
    n.reply = e.reason;
    n.time = e.time;
    n.expiry = (o->arrival == TimePoint{} ? e.time : o->arrival) +
               std::chrono::duration_cast<Duration>(config_->postfix.maximal_queue_lifetime);
    const RuleSettings& rs = engine.settings_for(domain, mx);
    if (auto esc = rs.thresholds(ep ? ep->dominant() : c).escalate_after) n.escalation = episode_start + *esc;
    n.escalated = ep && ep->ladder == Ladder::escalate;
    n.dry_run = s.dry_run;
    notified_[qid] = e.time;
    episode_notices_[episode_key] = e.time;
    ++stats_.notices_planned;
    notices_.push_back(PendingNotice{std::move(n), std::move(episode_key)});
}

void Planner::on_verdict(const Verdict& v, const Engine& engine, bool replayed) {
    if (v.name != "recovered" || replayed) return;
    const std::string_view previous = v.field("previous");
    if (previous != "watch" && previous != "escalate") return;
    const config::Settings& s = settings_for_destination(*config_, v.key);
    if (!s.flush.enabled) return;
    const Duration min_interval = std::chrono::duration_cast<Duration>(s.flush.min_interval);
    if (auto it = last_flush_.find(v.key); it != last_flush_.end() && v.time - it->second < min_interval) {
        ++stats_.flushes_rate_limited;
        return;
    }
    const DestinationState* d = engine.destination(v.key);
    if (!d || d->history.empty()) return;
    const std::string_view delivered = v.field("queue_id");
    Flush f;
    f.destination = v.key;
    f.time = v.time;
    f.dry_run = s.dry_run;
    const auto max = static_cast<std::size_t>(config_->flush_max_messages);
    for (const auto& qid : d->history.back().messages) {
        if (f.queue_ids.size() >= max) break;
        if (qid == delivered) continue;
        if (const Origin* o = origin(qid); o && o->gone) continue;
        // Flushed already for another destination of the same delivery (its
        // domain and its MX host recover together), or within the interval.
        if (auto it = flushed_.find(qid);
            it != flushed_.end() && v.time - it->second < std::max(min_interval, kSameRecovery))
            continue;
        f.queue_ids.push_back(qid);
    }
    last_flush_[v.key] = v.time;
    if (f.queue_ids.empty()) return;
    for (const auto& qid : f.queue_ids) flushed_[qid] = v.time;
    ++stats_.flushes_planned;
    flushes_.push_back(std::move(f));
}

void Planner::maybe_probe(TimePoint now, const Engine& engine) {
    engine.for_each_active([&](const DestinationState& d) {
        const std::string& name = d.name;
        if (!d.open || d.open->ladder != Ladder::escalate) return;
        const config::Settings& s = settings_for_destination(*config_, name);
        if (!s.flush.probe) return;
        const Duration interval = std::chrono::duration_cast<Duration>(s.flush.probe_interval);
        auto it = last_probe_.find(name);
        const TimePoint last = it == last_probe_.end() ? d.open->escalated_at : it->second;
        if (now - last < interval) return;
        for (const auto& qid : d.open->messages) {
            if (const Origin* o = origin(qid); o && o->gone) continue;
            Flush f;
            f.destination = name;
            f.time = now;
            f.probe = true;
            f.dry_run = s.dry_run;
            f.queue_ids.push_back(qid);
            flushes_.push_back(std::move(f));
            ++stats_.probes;
            break;
        }
        last_probe_[name] = now;
    });
}

void Planner::forget_old(TimePoint now) {
    const Duration lifetime = std::chrono::duration_cast<Duration>(config_->postfix.maximal_queue_lifetime);
    for (auto it = origins_.begin(); it != origins_.end();) {
        const bool old = it->second.gone ? now - it->second.removed > kKeepGone
                                         : now - it->second.arrival > lifetime + std::chrono::hours(24);
        // A removed message is kept a while for lines logged after its removal.
        const bool drop = old || (it->second.gone && origins_.size() > kMaxTracked / 2);
        if (drop) {
            deferred_.erase(it->first);
            it = origins_.erase(it);
        } else {
            ++it;
        }
    }
    auto prune = [&](auto& m, Duration keep) {
        for (auto it = m.begin(); it != m.end();) it = now - it->second > keep ? m.erase(it) : std::next(it);
    };
    prune(notified_, lifetime + std::chrono::hours(24));
    prune(episode_notices_, lifetime + std::chrono::hours(24));
    prune(flushed_, std::chrono::hours(24));
    if (deferred_.size() > kMaxTracked) deferred_.clear();  // bounded; the ledger check still holds
}

std::vector<Notice> Planner::take_notices() {
    std::vector<Notice> out;
    out.reserve(notices_.size());
    for (auto& p : notices_) out.push_back(std::move(p.notice));
    notices_.clear();
    return out;
}

std::vector<Flush> Planner::take_flushes() {
    return std::exchange(flushes_, {});
}

void Planner::notice_done(const Notice& n, bool ok) {
    if (!ok) {
        ++stats_.notice_failures;
        return;
    }
    ++stats_.notices_sent;
    done_.push_back(Done{n.time, "notified", n.queue_id,
                         fmt::format("notice to {} for {} recipient(s) at {} ({})", n.sender,
                                     n.recipients.size(), n.destination, to_string(n.category))});
    if (done_.size() > kMaxRemembered)
        done_.erase(done_.begin(), done_.begin() + (done_.size() - kMaxRemembered));
}

void Planner::flush_done(const Flush& f, bool ok) {
    if (!ok) {
        ++stats_.flush_failures;
        return;
    }
    ++stats_.flushes_done;
    stats_.flushed_messages += f.queue_ids.size();
    std::string ids;
    for (const auto& q : f.queue_ids) ids += (ids.empty() ? "" : " ") + q;
    done_.push_back(Done{f.time, f.probe ? "probed" : "flushed", f.destination, ids});
    if (done_.size() > kMaxRemembered)
        done_.erase(done_.begin(), done_.begin() + (done_.size() - kMaxRemembered));
}

std::string Planner::save_state() const {
    json done = json::array();
    for (const auto& d : done_)
        done.push_back(json{{"time", format_rfc3339(d.time)},
                            {"us", to_micros(d.time)},
                            {"what", d.what},
                            {"key", d.key},
                            {"detail", d.detail}});
    // Queue ids already notified: a restart must not notify them again.
    std::vector<std::pair<TimePoint, std::string>> recent;
    for (const auto& [q, t] : notified_) recent.emplace_back(t, q);
    std::sort(recent.begin(), recent.end());
    if (recent.size() > kMaxRemembered) recent.erase(recent.begin(), recent.end() - kMaxRemembered);
    json notified = json::object();
    for (const auto& [t, q] : recent) notified[q] = to_micros(t);
    json j{{"version", 1}, {"done", done}, {"notified", notified}};
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Status Planner::load_state(std::string_view text) {
    try {
        auto j = json::parse(text);
        if (j.at("version").get<int>() != 1)
            return make_error(ErrorKind::invalid_input, "unknown actions state version");
        std::vector<Done> done;
        for (const auto& d : j.at("done"))
            done.push_back(Done{from_micros(d.at("us").get<std::int64_t>()), d.at("what").get<std::string>(),
                                d.at("key").get<std::string>(), d.at("detail").get<std::string>()});
        for (const auto& [q, t] : j.at("notified").items()) notified_[q] = from_micros(t.get<std::int64_t>());
        done_ = std::move(done);
    } catch (const std::exception& e) {
        return make_error(ErrorKind::invalid_input, std::string("actions state unreadable: ") + e.what());
    }
    return {};
}

bool ledger_first_deferral(LedgerReports& ledger, const Event& e) {
    auto rcpts = ledger.get_recipients(e.queue_id);
    if (!rcpts) return false;
    const std::string address = normalize_address(e.recipient);
    for (const auto& r : *rcpts)
        if (r.address == address) return !r.first_deferral || *r.first_deferral >= e.time;
    return true;
}

json actions_for_explain(std::string_view state, const json& doc) {
    json out = json::array();
    std::set<std::string, std::less<>> qids;
    try {
        for (const auto& c : doc.at("chains"))
            for (const auto& q : c.at("queue_ids")) qids.insert(q.get<std::string>());
        const json j = json::parse(state);
        for (const auto& d : j.at("done")) {
            const std::string what = d.at("what").get<std::string>();
            bool match = false;
            if (what == "notified") {
                match = qids.count(d.at("key").get<std::string>()) > 0;
            } else {
                std::string_view ids = d.at("detail").get_ref<const std::string&>();
                while (!ids.empty() && !match) {
                    const auto sp = ids.find(' ');
                    match = qids.count(ids.substr(0, sp)) > 0;
                    ids = sp == std::string_view::npos ? std::string_view{} : ids.substr(sp + 1);
                }
            }
            if (match)
                out.push_back(json{{"time", d.at("time")},
                                   {"what", what},
                                   {"key", d.at("key")},
                                   {"detail", d.at("detail")}});
        }
    } catch (const std::exception&) {
        return json::array();
    }
    return out;
}

Verdict notified_verdict(const Notice& n) {
    Verdict v;
    v.time = n.time;
    v.key = n.queue_id;
    v.name = "notified";
    v.add("sender", n.sender).add("destination", n.destination);
    v.add("recipients", std::to_string(n.recipients.size()));
    v.add("category", std::string(to_string(n.category)));
    v.add("expiry", format_rfc3339(n.expiry));
    if (n.escalation) v.add("escalation", format_rfc3339(*n.escalation));
    return v;
}

Verdict flushed_verdict(const Flush& f, std::size_t count) {
    Verdict v;
    v.time = f.time;
    v.key = f.destination;
    v.name = f.probe ? "probed" : "flushed";
    v.add("destination", f.destination.starts_with("mx:") ? f.destination.substr(3) : f.destination);
    v.add("type", f.destination.starts_with("mx:") ? "mx" : "domain");
    v.add("count", std::to_string(count));
    if (f.probe && !f.queue_ids.empty()) v.add("queue_id", f.queue_ids.front());
    return v;
}

}  // namespace retryguard::actions
