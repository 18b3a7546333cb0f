// ingestor.cpp -- log lines -> events -> ledger + rules engine -> verdicts.
// The only place where the parser, the classifier, the ledger and the engine
// meet; see ingest.hpp for the exactly-once argument.
#include "retryguard/ingest/ingest.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "text/cbor_reader.hpp"
#include "text/cbor_writer.hpp"

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

using nlohmann::json;

// Engine destinations are "example.com" or "mx:host"; the ledger keeps a kind.
std::pair<DestinationKind, std::string> ledger_destination(std::string_view key) {
    if (key.starts_with("mx:")) return {DestinationKind::relay, std::string(key.substr(3))};
    return {DestinationKind::domain, std::string(key)};
}

constexpr std::size_t kJournalChunk = 10000;

// A version-2 state (CBOR) walked once: its small entries decoded into
// `small` (when given), the engine's bytes found where they are, without a
// copy. nullopt when the bytes are not such a map (a caller then reads them
// whole, which gives the error).
std::optional<std::string_view> split_envelope(std::string_view bytes, json* small) {
    std::optional<std::string_view> engine;
    const bool ok = cbor::for_each_entry(bytes, [&](std::string_view key, std::string_view value) {
        if (key == "engine")
            engine = cbor::string_bytes(value);
        else if (small)
            (*small)[std::string(key)] = json::from_cbor(value);
        return true;
    });
    if (!ok) return std::nullopt;
    return engine;
}

}  // namespace

// The saved state (version 2): CBOR {version, journal_seq, verdict_seq,
// engine: bytes}. Version 1 was JSON text {version, positions, engine: JSON
// text}; it loads with journal_seq 0 (the journal, new with version 2, is
// replayed from its start) and its positions are no longer needed.
Status Ingestor::restore() {
    auto saved = ledger_.get_state(kStateKey);
    if (!saved) {
        restore_failed_ = true;
        return saved.error();
    }
    std::uint64_t journal_seq = 0, verdict_seq = 0;
    if (saved->has_value()) {
        const std::string& bytes = **saved;
        saved_state_bytes_ = bytes.size();  // what the next save will cost, about (SaveSchedule)
        try {
            std::string engine_copy;
            std::string_view engine_bytes;
            if (!bytes.empty() && bytes.front() == '{') {
                auto j = json::parse(bytes);
                if (j.at("version").get<int>() != 1)
                    throw std::runtime_error("unknown state version " + j.at("version").dump());
                engine_copy = j.at("engine").get<std::string>();
                engine_bytes = engine_copy;
            } else {
                json j = json::object();
                auto engine = split_envelope(bytes, &j);
                if (!engine) {
                    j = json::from_cbor(bytes);
                    const auto& bin = j.at("engine").get_binary();
                    engine_copy.assign(bin.begin(), bin.end());
                    engine = engine_copy;
                }
                if (j.at("version").get<int>() != 2)
                    throw std::runtime_error("unknown state version " + j.at("version").dump());
                journal_seq = j.at("journal_seq").get<std::uint64_t>();
                verdict_seq = j.at("verdict_seq").get<std::uint64_t>();
                engine_bytes = *engine;
            }
            if (auto st = engine_.load_state(engine_bytes); !st) {
                restore_failed_ = true;
                return st;
            }
        } catch (const std::exception& e) {
            restore_failed_ = true;
            return make_error(ErrorKind::invalid_input,
                              std::string("saved engine state unreadable: ") + e.what());
        }
    }
    journal_seq_ = journal_seq;
    verdict_seq_ = verdict_seq;
    // Lines of the last effects commit that may not have reached the sink, before
    // any line of the journal replay.
    auto outbox = ledger_.read_outbox();
    if (!outbox) {
        restore_failed_ = true;
        return make_error(outbox.error().kind, "reading the verdict outbox: " + outbox.error().message);
    }
    if (!outbox->empty()) {
        stats_.outbox_pending += outbox->size();
        if (outbox_sink_) {
            const OutboxReplay r = outbox_sink_(*outbox);
            stats_.outbox_found += r.found;
            stats_.verdict_lines_replayed += r.unchecked;
        } else {
            stats_.outbox_dropped += outbox->size();
        }
        outbox_written_ = std::max(outbox_written_, outbox->back().seq);
        // Trimmed at once (one commit per restart), so that a second crash
        // before the next effects commit does not hand the lines over again.
        if (auto st = ledger_.apply_verdict_effects({}, outbox_written_); !st) ++stats_.effect_errors;
    }
    restoring_ = true;
    auto replayed = catch_up();
    restoring_ = false;
    if (!replayed) {
        restore_failed_ = true;
        return make_error(replayed.error().kind, "replaying the engine journal: " + replayed.error().message);
    }
    restore_failed_ = false;
    return {};
}

Result<SavedStateView> describe_saved_state(std::string_view bytes) {
    SavedStateView view;
    try {
        json engine;
        if (!bytes.empty() && bytes.front() == '{') {
            auto j = json::parse(bytes);
            view.version = j.at("version").get<int>();
            for (const auto& jp : j.value("positions", json::array())) {
                FollowerPosition p;
                p.source = jp.value("source", "");
                p.offset = jp.value("offset", std::uint64_t{0});
                p.lines = jp.value("lines", std::uint64_t{0});
                p.cursor = jp.value("cursor", "");
                view.positions.push_back(std::move(p));
            }
            engine = json::parse(j.at("engine").get<std::string>());
        } else {
            auto j = json::from_cbor(bytes);
            view.version = j.at("version").get<int>();
            view.journal_seq = j.at("journal_seq").get<std::uint64_t>();
            engine = json::from_cbor(j.at("engine").get_binary());
        }
        view.engine_json = engine.dump(-1, ' ', false, json::error_handler_t::replace);
    } catch (const std::exception& e) {
        return make_error(ErrorKind::invalid_input,
                          std::string("saved engine state unreadable: ") + e.what());
    }
    return view;
}

std::optional<std::string_view> saved_engine_cbor(std::string_view bytes) {
    return split_envelope(bytes, nullptr);
}

std::optional<FollowerPosition> Ingestor::resume_position(std::string_view source) const {
    auto p = ledger_.load_position(source);
    if (p && p->has_value()) return **p;
    return std::nullopt;
}

void Ingestor::queue(std::vector<Verdict>& verdicts) {
    queue(verdicts, pending_);
}

void Ingestor::queue(std::vector<Verdict>& verdicts, std::vector<PendingVerdict>& out) {
    for (auto& v : verdicts) {
        PendingVerdict p;
        VerdictEffect& e = p.effect;
        e.seq = ++verdict_seq_;
        e.verdict = v.name;
        e.at = v.time;
        const std::string& n = v.name;
        if (n == "noted" || n == "watch" || n == "escalate" || n == "recovered") {
            e.action = VerdictEffect::Action::destination_state;
            std::tie(e.kind, e.name) = ledger_destination(v.key);
            e.state = n;
        } else if (n == "absorbed") {
            // A local incident took back the destination's deferrals: its
            // ladder state is what is left ("" when nothing is).
            e.action = VerdictEffect::Action::destination_state;
            std::tie(e.kind, e.name) = ledger_destination(v.key);
            e.state = std::string(v.field("state"));
        } else if (n == "flagged") {
            e.action = VerdictEffect::Action::set_flag;
            e.name = v.key;
            e.reason = std::string(v.field("reason"));
            // Read right after the event that flagged it, so a replay reads the same.
            if (auto* d = engine_.destination(v.key)) e.expires_at = d->flag_expires;
        } else if (n == "flag_expired") {
            e.action = VerdictEffect::Action::clear_flags;
            e.name = v.key;
        }
        // Kept in the outbox with the effects when a sink writes it.
        if (sink_ && !v.silent) e.line = format_verdict(v);
        p.verdict = std::move(v);
        if (!v.silent) ++stats_.verdicts;
        out.push_back(std::move(p));
    }
}

std::vector<Verdict> Ingestor::engine_on_event(const IngestItem& item) {
    if (item.event.kind == EventKind::delivery && item.event.status == DeliveryStatus::deferred)
        ++stats_.by_category[std::string(to_string(item.category))];
    return engine_.on_event(item.event, item.category);
}

void Ingestor::feed_event(const IngestItem& item, std::uint64_t seq, std::vector<PendingVerdict>& out) {
    // feed() of an event record, without one to build (no observer wants it).
    std::vector<Verdict> verdicts;
    try {
        verdicts = engine_on_event(item);
    } catch (const std::exception& e) {
        ++stats_.engine_errors;
        if (poison_) poison_("journal entry", seq, e.what());
    }
    queue(verdicts, out);
    journal_seq_ = seq;
}

void Ingestor::feed(const EngineJournalRecord& r, std::uint64_t seq) {
    // The engine must not stop ingestion: an entry it throws on is skipped
    // (deterministically: a replay throws and skips it too).
    std::vector<Verdict> verdicts;
    try {
        switch (r.kind) {
            case EngineJournalRecord::Kind::event: verdicts = engine_on_event(r.item); break;
            case EngineJournalRecord::Kind::tick: verdicts = engine_.advance(r.time); break;
            case EngineJournalRecord::Kind::clear_flag:
                if (auto v = engine_.clear_flag(r.destination, r.time)) verdicts.push_back(std::move(*v));
                break;
        }
    } catch (const std::exception& e) {
        ++stats_.engine_errors;
        if (poison_) poison_("journal entry", seq, e.what());
    }
    if (observer_) {
        try {
            observer_(r, verdicts, restoring_);
        } catch (const std::exception& e) {
            if (poison_) poison_("observer of journal entry", seq, e.what());
        }
    }
    queue(verdicts);
    journal_seq_ = seq;
}

Status Ingestor::catch_up() {
    for (;;) {
        auto entries = ledger_.read_journal(journal_seq_, kJournalChunk);
        if (!entries) return entries.error();
        if (entries->empty()) break;
        std::vector<EngineJournalRecord> records;
        for (const auto& e : *entries) {
            records.clear();
            if (!decode_journal_entry(e.data, records)) {
                ++stats_.engine_errors;
                if (poison_) poison_("journal entry", e.seq, "not readable by this version");
                journal_seq_ = e.seq;
                continue;
            }
            stats_.replayed += records.size();
            for (const auto& r : records) feed(r, e.seq);
        }
        (void)flush_effects();  // pending ones stay queued on failure
    }
    need_catch_up_ = false;
    return {};
}

void Ingestor::add_line(PreparedBatch& batch, LogParser& parser, const Classifier& classifier,
                        std::string_view line, const PoisonSink& poison) {
    const std::size_t index = batch.lines++;
    batch.sealed = false;
    if (batch.count == batch.items.size()) batch.items.emplace_back();
    IngestItem& item = batch.items[batch.count];
    item.planned = false;
    item.journal.clear();  // the part is in batch.journal
    // A line the parser or the classifier throws on must not stop ingestion.
    try {
        if (!parser.parse(line, item.event)) return;  // unknown lines are counted by the parser
        item.category = classify_event(classifier, item.event);
        item.key = batch.keyer ? event_key(item.event, *batch.keyer) : 0;
        // The ledger's operation too, once the key is known (the plan holds it).
        if (batch.keyer) {
            plan_ledger_op(item, *batch.keyer, item.op);
            item.planned = true;
        }
        // The batch's journal entry grows here, off the ledger's thread. Should
        // an append throw half-way, the entry is marked broken and the ledger
        // encodes the batch's items itself (Ledger::ingest).
        if (batch.journal_items != PreparedBatch::kJournalBroken) {
            if (batch.journal.empty()) batch.journal.assign(kJournalBatchTag);
            batch.journal_items = PreparedBatch::kJournalBroken;
            append_journal_batch_item(batch.journal, item);
            batch.journal_items = batch.count + 1;
        }
        ++batch.count;
    } catch (const std::exception& e) {
        ++batch.poison_lines;
        if (poison) poison("line", index, e.what());
    }
}

void Ingestor::seal_journal(PreparedBatch& batch) {
    batch.sealed = false;
    batch.compressed.clear();
    if (!batch.compress_journal || batch.journal.empty() ||
        batch.journal_items == PreparedBatch::kJournalBroken)
        return;
    (void)compress_journal_entry(batch.journal, batch.compressed);  // empty: stored as it is
    batch.sealed = true;
}

Status Ingestor::ingest_lines(LogParser& parser, std::span<const std::string> lines,
                              const std::optional<FollowerPosition>& end) {
    prepared_.clear();
    const Classifier& classifier = *classifier_;
    for (const auto& line : lines) add_line(prepared_, parser, classifier, line, poison_);
    return ingest_prepared(prepared_, end);
}

Result<IngestResult> Ingestor::record_batch(PreparedBatch& batch,
                                            const std::optional<FollowerPosition>& end) {
    // Counted once, even when the caller offers the batch again after a ledger error.
    stats_.poison_lines += batch.poison_lines;
    batch.poison_lines = 0;
    const auto items = batch.events();
    auto result = ledger_.ingest(items, end, batch.batch_journal());
    batch.keyer = ledger_.event_keyer();  // add_line keys the batch's next use with it
    batch.compress_journal = ledger_.stores_compressed_journal();
    if (!result) {
        ++stats_.ledger_errors;
        need_catch_up_ = true;  // a lost reply may hide a committed batch
        return result;
    }
    ++stats_.batches;
    stats_.lines += batch.lines;
    stats_.events += items.size();
    stats_.applied += result->applied;
    stats_.duplicates += result->duplicates;
    return result;
}

Status Ingestor::ingest_prepared(PreparedBatch& batch, const std::optional<FollowerPosition>& end) {
    auto result = record_batch(batch, end);
    if (!result) return result.error();
    const auto items = batch.events();

    if (need_catch_up_ || (result->applied > 0 && result->journal_seq != journal_seq_ + 1)) {
        // Entries the engine has not seen precede this batch's: take all from the journal.
        if (auto st = catch_up(); !st) return {};  // the batch is in; the next call catches up
    } else {
        EngineJournalRecord record;
        for (std::size_t i = 0; i < items.size() && i < result->fresh.size(); ++i) {
            if (!result->fresh[i]) continue;
            if (!observer_) {
                feed_event(items[i], result->journal_seq, pending_);
                continue;
            }
            // Lent to the record and taken back, so the item keeps its buffers.
            std::swap(record.item, batch.items[i]);
            feed(record, result->journal_seq);
            std::swap(record.item, batch.items[i]);
        }
    }
    (void)flush_effects();
    return {};
}

Status Ingestor::journal_and_feed(std::vector<std::string> entries,
                                  std::vector<EngineJournalRecord> records) {
    auto first = ledger_.append_journal(entries);
    if (!first) {
        need_catch_up_ = true;
        return first.error();
    }
    if (need_catch_up_ || *first != journal_seq_ + 1) {
        if (auto st = catch_up(); !st) return st;
    } else {
        for (std::size_t i = 0; i < records.size(); ++i) feed(records[i], *first + i);
    }
    (void)flush_effects();
    return {};
}

Status Ingestor::advance(TimePoint now) {
    EngineJournalRecord r;
    r.kind = EngineJournalRecord::Kind::tick;
    r.time = now;
    return journal_and_feed({encode_journal_tick(now)}, {std::move(r)});
}

Status Ingestor::flush_effects() {
    if (pending_.empty()) return {};
    std::vector<VerdictEffect> effects;
    effects.reserve(pending_.size());
    for (const auto& p : pending_) effects.push_back(p.effect);
    auto before = ledger_.apply_verdict_effects(effects, outbox_written_);
    if (!before) {
        ++stats_.effect_errors;
        return before.error();
    }
    // Written after the effects commit; those at or below the mark were
    // written before a crash (or handed to the outbox sink by restore()) and
    // are not written again.
    bool wrote = false;
    std::uint64_t last = *before;
    for (const auto& p : pending_) {
        last = std::max(last, p.effect.seq);
        if (p.effect.seq > *before && sink_ && !p.verdict.silent) {
            sink_(p.verdict);
            wrote = true;
        }
    }
    // The next effects transaction or state save trims the outbox up to here.
    outbox_written_ = std::max(outbox_written_, last);
    pending_.clear();
    if (wrote && lines_done_) lines_done_();
    return {};
}

Status Ingestor::save() {
    if (restore_failed_)
        return make_error(ErrorKind::invalid_input,
                          "the saved engine state could not be restored: not overwriting it");
    if (auto st = flush_effects(); !st)
        return make_error(st.error().kind, "verdict effects pending: " + st.error().message);
    const std::string state = encode_state();
    saved_state_bytes_ = state.size();
    return ledger_.save_engine_state(kStateKey, state, journal_seq_, outbox_written_);
}

bool SaveSchedule::due(std::uint64_t lines, std::size_t state_bytes) const noexcept {
    const std::uint64_t after = lines_ + lines;
    const bool interval = batches_ + 1 >= settings_.every_batches || after >= settings_.every_lines;
    return interval && size_reached(lines, state_bytes);
}

bool SaveSchedule::size_reached(std::uint64_t lines, std::size_t state_bytes) const noexcept {
    return (lines_ + lines) * settings_.state_bytes_per_line >= state_bytes;
}

void SaveSchedule::done(std::uint64_t lines, bool saved) noexcept {
    if (saved) {
        batches_ = lines_ = 0;
    } else {
        ++batches_;
        lines_ += lines;
    }
}

// The map nlohmann::json would write for {version, journal_seq, verdict_seq,
// engine (binary)}, keys sorted, without copying the engine's bytes twice.
std::string Ingestor::encode_state() const {
    const std::string engine_bytes = engine_.save_state();
    cbor::Writer w;
    w.out().reserve(engine_bytes.size() + 64);
    w.map(4);
    w.key("engine").bytes(engine_bytes);
    w.key("journal_seq").uint(journal_seq_);
    w.key("verdict_seq").uint(verdict_seq_);
    w.key("version").integer(2);
    return w.take();
}

Status Ingestor::sync_flags(TimePoint now) {
    auto active = ledger_.list_flags(std::nullopt, now, false);
    if (!active) return active.error();
    std::vector<std::string> entries;
    std::vector<EngineJournalRecord> records;
    engine_.for_each_active([&](const DestinationState& d) {
        const std::string& name = d.name;
        if (!d.flagged_at) return;
        bool still = false;
        for (const auto& f : *active) still = still || f.destination == name;
        if (still) return;
        entries.push_back(encode_journal_clear_flag(name, now));
        EngineJournalRecord r;
        r.kind = EngineJournalRecord::Kind::clear_flag;
        r.time = now;
        r.destination = name;
        records.push_back(std::move(r));
    });
    if (entries.empty()) return {};
    return journal_and_feed(std::move(entries), std::move(records));
}

}  // namespace retryguard
