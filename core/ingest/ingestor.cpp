// ingestor.cpp -- log lines -> events -> ledger + rules engine -> verdicts.
// The only place where the parser, the classifier, the ledger and the engine
// meet; see ingest.hpp for the exactly-once argument.
#include "retryguard/ingest.hpp"

#include <nlohmann/json.hpp>

namespace retryguard {

Category classify_event(const Classifier& classifier, const Event& event) {
    if (event.kind == EventKind::expired) return Category::expired;
    if (event.kind != EventKind::delivery) return Category::unknown;
    if (event.status == DeliveryStatus::sent) return Category::unknown;
    if (event.status == DeliveryStatus::expired) return Category::expired;
    if (event.reply) return classifier.classify(*event.reply).category;
    return classifier.classify_reason(event.reason, event.dsn).category;
}

Ingestor::Ingestor(Ledger& ledger, std::shared_ptr<const Classifier> classifier, EngineSettings settings,
                   VerdictSink sink)
    : ledger_(ledger),
      classifier_(std::move(classifier)),
      engine_(std::move(settings)),
      sink_(std::move(sink)) {}

void Ingestor::set_engine_settings(EngineSettings settings) {
    engine_.set_settings(std::move(settings));
}

namespace {

nlohmann::json position_to_json(const FollowerPosition& p) {
    return {{"source", p.source},         {"device", p.device}, {"inode", p.inode}, {"offset", p.offset},
            {"head", p.head_fingerprint}, {"cursor", p.cursor}, {"lines", p.lines}};
}

FollowerPosition position_from_json(const nlohmann::json& j) {
    FollowerPosition p;
    p.source = j.at("source").get<std::string>();
    p.device = j.at("device").get<std::uint64_t>();
    p.inode = j.at("inode").get<std::uint64_t>();
    p.offset = j.at("offset").get<std::uint64_t>();
    p.head_fingerprint = j.at("head").get<std::string>();
    p.cursor = j.at("cursor").get<std::string>();
    p.lines = j.at("lines").get<std::uint64_t>();
    return p;
}

// Engine destinations are "example.com" or "mx:host"; the ledger keeps a kind.
std::pair<DestinationKind, std::string> ledger_destination(std::string_view key) {
    if (key.starts_with("mx:")) return {DestinationKind::relay, std::string(key.substr(3))};
    return {DestinationKind::domain, std::string(key)};
}

}  // namespace

Status Ingestor::restore() {
    auto saved = ledger_.get_state(kStateKey);
    if (!saved) return saved.error();
    if (!saved->has_value()) return {};
    try {
        auto j = nlohmann::json::parse(**saved);
        std::map<std::string, FollowerPosition, std::less<>> positions;
        for (const auto& jp : j.at("positions")) {
            auto p = position_from_json(jp);
            positions[p.source] = std::move(p);
        }
        if (auto st = engine_.load_state(j.at("engine").get<std::string>()); !st) return st;
        engine_positions_ = std::move(positions);
    } catch (const std::exception& e) {
        return make_error(ErrorKind::invalid_input,
                          std::string("saved engine state unreadable: ") + e.what());
    }
    return {};
}

std::optional<FollowerPosition> Ingestor::resume_position(std::string_view source) const {
    auto it = engine_positions_.find(source);
    if (it != engine_positions_.end()) return it->second;
    // No engine state for this source yet: the ledger's position (if any) is
    // where the last run stopped.
    auto p = ledger_.load_position(source);
    if (p && p->has_value()) return **p;
    return std::nullopt;
}

Status Ingestor::ingest_lines(LogParser& parser, std::span<const std::string> lines,
                              const std::optional<FollowerPosition>& end) {
    items_.clear();
    items_.reserve(lines.size());
    const Classifier& classifier = *classifier_;
    for (const auto& line : lines) {
        IngestItem item;
        if (!parser.parse(line, item.event)) continue;  // unknown lines are counted by the parser
        item.category = classify_event(classifier, item.event);
        items_.push_back(std::move(item));
    }
    stats_.lines += lines.size();
    stats_.events += items_.size();

    auto result = ledger_.ingest(items_, end);
    if (!result) {
        ++stats_.ledger_errors;
        return result.error();
    }
    ++stats_.batches;
    stats_.applied += result->applied;
    stats_.duplicates += result->duplicates;

    // A follower batch is new to the engine as a whole (it resumed from the
    // engine's own position); an import feeds it only what the ledger had not seen.
    const bool whole_batch = end.has_value();
    std::vector<Verdict> verdicts;
    for (std::size_t i = 0; i < items_.size(); ++i) {
        if (!whole_batch && i < result->fresh.size() && !result->fresh[i]) continue;
        const auto& item = items_[i];
        if (item.event.kind == EventKind::delivery && item.event.status == DeliveryStatus::deferred)
            ++stats_.by_category[std::string(to_string(item.category))];
        auto vs = engine_.on_event(item.event, item.category);
        verdicts.insert(verdicts.end(), std::make_move_iterator(vs.begin()),
                        std::make_move_iterator(vs.end()));
    }
    if (end) engine_positions_[end->source] = *end;
    apply_verdicts(verdicts);
    return {};
}

Status Ingestor::advance(TimePoint now) {
    auto verdicts = engine_.advance(now);
    apply_verdicts(verdicts);
    return {};
}

void Ingestor::apply_verdicts(std::vector<Verdict>& verdicts) {
    std::map<std::string, std::int64_t> counts;
    for (auto& v : verdicts) {
        ++counts[v.name];
        ++stats_.verdicts;
        const std::string& n = v.name;
        // The ledger mirrors what readers (CLI, policy decisions) need; a failure
        // here is counted by the ledger and never stops ingest.
        if (n == "noted" || n == "watch" || n == "escalate" || n == "recovered") {
            auto [kind, name] = ledger_destination(v.key);
            (void)ledger_.set_destination_state(kind, name, n, v.time);
        } else if (n == "flagged") {
            Flag f;
            f.destination = v.key;
            f.reason = std::string(v.field("reason"));
            f.set_at = v.time;
            if (auto* d = engine_.destination(v.key)) f.expires_at = d->flag_expires;
            (void)ledger_.set_flag(f);
        } else if (n == "flag_expired") {
            (void)ledger_.clear_flags(v.key, v.time);
        }
        if (sink_) sink_(v);
    }
    for (const auto& [name, n] : counts) (void)ledger_.add_verdict_count(name, n);
}

Status Ingestor::save() {
    nlohmann::json positions = nlohmann::json::array();
    for (const auto& [source, p] : engine_positions_) positions.push_back(position_to_json(p));
    nlohmann::json j{{"version", 1}, {"positions", positions}, {"engine", engine_.save_state()}};
    return ledger_.put_state(kStateKey, j.dump());
}

Status Ingestor::sync_flags(TimePoint now) {
    auto active = ledger_.list_flags(std::nullopt, now, false);
    if (!active) return active.error();
    std::vector<std::string> cleared;
    for (const auto& [name, d] : engine_.destinations()) {
        if (!d.flagged_at) continue;
        bool still = false;
        for (const auto& f : *active) still = still || f.destination == name;
        if (!still) cleared.push_back(name);
    }
    std::vector<Verdict> verdicts;
    for (const auto& name : cleared)
        if (auto v = engine_.clear_flag(name, now)) verdicts.push_back(std::move(*v));
    apply_verdicts(verdicts);
    return {};
}

}  // namespace retryguard
