// live.cpp -- the ingest thread: sources -> Ingestor -> ledger, engine,
// verdict log; then snapshots for the policy path and metrics text.
//
// Owns every call into the Ingestor, the engine and the ledger of the daemon
// (one thread, so none of them needs a lock). Must never let an error stop the
// thread: a refused batch is offered again with back-off, a failed save or
// flag refresh is logged and retried on the next tick, a line the parser
// throws on is logged with its position and skipped, and anything thrown
// reaches the loop's top level, is logged and counted, and the loop goes on.
#include "live.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "retryguard/config/config_engine.hpp"
#include "retryguard/runtime/runtime.hpp"
#include "retryguard/runtime/threads.hpp"
#include "server.hpp"

namespace retryguard::policyd {
namespace {

TimePoint wall_now() {
    return std::chrono::time_point_cast<std::chrono::microseconds>(std::chrono::system_clock::now());
}

std::string escape_label(std::string_view v) {
    std::string out;
    for (char c : v) {
        if (c == '\\' || c == '"') out.push_back('\\');
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out.push_back(c);
    }
    return out;
}

FollowerSettings follower_settings(const config::Config& cfg, const config::SourceConfig& s) {
    FollowerSettings f;
    f.batch_max_lines = static_cast<std::size_t>(std::max<std::int64_t>(1, cfg.ingest.batch_max_events));
    if (s.max_line_length >= 80) f.max_line_bytes = static_cast<std::size_t>(s.max_line_length);
    f.start_at_end = s.start == config::SourceStart::end;
    f.journal_match = s.journal_match;
    f.poll_interval = std::chrono::milliseconds(250);
    return f;
}

}  // namespace

LiveIngest::LiveIngest(std::unique_ptr<Ledger> ledger, std::shared_ptr<config::ConfigHolder> config,
                       std::shared_ptr<const Classifier> classifier, LedgerDecider& decider,
                       VerdictLog& verdicts, PolicyMetrics& metrics, Logger& log, LiveOptions options)
    : ledger_(std::move(ledger)),
      config_(std::move(config)),
      decider_(decider),
      verdicts_(verdicts),
      metrics_(metrics),
      log_(log),
      options_(options) {
    ingest_ =
        std::make_unique<Ingestor>(*ledger_, std::move(classifier),
                                   config::to_engine_settings(config_->current()), [this](const Verdict& v) {
                                       ++verdict_counts_[v.name];
                                       verdicts_.write(v);
                                   });
    const auto cfg = config_->current();
    planner_ = std::make_unique<actions::Planner>(
        cfg, [this](const Event& e) { return first_deferral_in_ledger(e); });
    runner_ = std::make_unique<actions::ActionRunner>(actions::runner_settings_from(*cfg),
                                                      [this](bool error, std::string_view m) {
                                                          if (error)
                                                              log_.error("actions: " + std::string(m));
                                                          else
                                                              log_.info("actions: " + std::string(m));
                                                      });
    notice_template_ = actions::notice_template_from(*cfg);
    // The planner sees what the engine is fed, with its verdicts (core/actions/).
    ingest_->set_observer(
        [this](const EngineJournalRecord& r, std::span<const Verdict> verdicts, bool replayed) {
            const bool event = r.kind == EngineJournalRecord::Kind::event;
            planner_->observe(event ? &r.item.event : nullptr, r.item.category,
                              event ? r.item.event.time : r.time, verdicts, ingest_->engine(), replayed);
        });
    ingest_->set_poison_sink([this](std::string_view what, std::uint64_t where, std::string_view why) {
        log_.error(fmt::format("ingest: skipped {} {}{}: {}", what, where, poison_context_, why));
    });
    // Verdict lines a crash left in the outbox: the verdict log writes those it
    // lacks (a file target is read back; other targets write them again).
    ingest_->set_outbox_sink([this](std::span<const OutboxEntry> entries) {
        std::vector<std::string> lines;
        lines.reserve(entries.size());
        for (const auto& e : entries) lines.push_back(e.line);
        const VerdictLog::Replay r = verdicts_.replay(lines);
        log_.info(
            fmt::format("verdict outbox: {} pending lines, {} already written, {} written again unchecked{}",
                        lines.size(), r.found, r.unchecked, r.torn ? ", a cut last line ended" : ""));
        return Ingestor::OutboxReplay{r.found, r.unchecked};
    });
}

LiveIngest::~LiveIngest() {
    stop();
}

Status LiveIngest::open_sources() {
    const auto cfg = config_->current();
    for (const auto& s : cfg->sources) {
        const FollowerSettings fs = follower_settings(*cfg, s);
        Source src;
        src.resumes = config::resumes_from_position(s);
        Result<std::unique_ptr<LineSource>> opened = make_error(ErrorKind::internal, "no source");
        switch (s.type) {
            case config::SourceType::file: {
                src.id = config::position_id(s);
                FollowerPosition start;
                if (auto p = ingest_->resume_position(src.id)) start = *p;
                start.source = src.id;
                opened = open_file_follower(s.path, start, fs);
                break;
            }
            case config::SourceType::journald: {
                src.id = config::position_id(s);
                FollowerPosition start;
                if (auto p = ingest_->resume_position(src.id)) start = *p;
                start.source = src.id;
                opened = open_journal_follower("", start, fs);
                break;
            }
            case config::SourceType::syslog_unix:
                src.id = s.name;
                opened = open_syslog_unix_source(s.path, fs);
                break;
            case config::SourceType::syslog_udp:
                src.id = s.name;
                if (!s.address) return make_error(ErrorKind::config, "source " + s.name + ": no address");
                opened = open_syslog_udp_source(s.address->host, s.address->port, fs, s.allow_non_loopback);
                if (opened && !config::is_loopback(s.address->host))
                    log_.warning(
                        fmt::format("source {}: listening for log lines on {} (allow_non_loopback): "
                                    "anyone who can reach it can feed the ledger",
                                    s.name, s.address->text));
                break;
        }
        if (!opened)
            return make_error(opened.error().kind, "source " + s.name + ": " + opened.error().message);
        src.line_source = std::move(*opened);
        LogParserOptions po;
        po.reference_time = wall_now();
        src.parser = std::make_unique<LogParser>(po);
        sources_.push_back(std::move(src));
    }
    return {};
}

bool LiveIngest::first_deferral_in_ledger(const Event& e) {
    return actions::ledger_first_deferral(*ledger_, e);
}

void LiveIngest::run_actions() {
    auto done = actions::carry_out(*planner_, *runner_, notice_template_);
    if (!done.planned) return;
    actions_dirty_ = true;
    for (const auto& v : done.verdicts) {
        ++verdict_counts_[v.name];
        (void)ledger_->add_verdict_count(v.name, 1);
        verdicts_.write(v);
    }
}

void LiveIngest::save_actions() {
    if (!actions_dirty_) return;
    if (auto st = ledger_->put_state(actions::Planner::kStateKey, planner_->save_state()); !st)
        log_.warning("saving the actions state: " + st.error().message);
    else
        actions_dirty_ = false;
}

Status LiveIngest::start() {
    // What the planner did before a restart (notified queue ids), before the
    // journal replay shows it the records again.
    if (auto saved = ledger_->get_state(actions::Planner::kStateKey); saved && saved->has_value())
        if (auto st = planner_->load_state(**saved); !st) log_.warning(st.error().message);
    // A state that cannot be restored is left as it is on disk (the Ingestor
    // refuses to save over it, and stop() does not try).
    if (auto st = ingest_->restore(); !st)
        return make_error(st.error().kind, "restoring engine state: " + st.error().message);
    started_ = true;
    if (auto st = open_sources(); !st) return st;
    refresh_flags(wall_now());
    check_sources();
    publish();
    thread_ = std::thread([this] {
        set_thread_name("rg-follow");
        run();
    });
    return {};
}

void LiveIngest::request_reload() {
    reload_.store(true);
}

void LiveIngest::stop() {
    if (stop_.exchange(true)) return;
    for (auto& s : sources_) s.line_source->stop();
    if (thread_.joinable()) thread_.join();
    if (ingest_ && started_) {
        run_actions();
        save_actions();
        if (auto st = ingest_->save(); !st)
            log_.error("saving engine state at shutdown: " + st.error().message);
        else
            log_.info("engine state saved");
    }
}

void LiveIngest::apply_reload() {
    const auto cfg = config_->current();
    auto classifier = classifier_from(*cfg);
    if (!classifier) {
        log_.error("reload: classifier: " + classifier.error().message + " (keeping the previous rules)");
    } else {
        ingest_->set_classifier(std::move(*classifier));
    }
    ingest_->set_engine_settings(config::to_engine_settings(cfg));
    planner_->set_config(cfg);
    runner_->set_settings(actions::runner_settings_from(*cfg));
    notice_template_ = actions::notice_template_from(*cfg);
    ++reloads_;
    log_.info("ingest: engine settings and classifier rebuilt from " + cfg->source);
}

void LiveIngest::refresh_flags(TimePoint now) {
    auto flags = ledger_->list_flags(std::nullopt, now, false);
    if (!flags) {
        log_.warning("ledger flags: " + flags.error().message + " (keeping the previous list)");
        return;
    }
    flags_ = std::move(*flags);
    if (auto st = ingest_->sync_flags(now); !st) log_.warning("sync flags: " + st.error().message);
}

// A source that cannot be read (the service user lacks the group, a journal
// without access) is logged once per change, shown by /health and counted;
// true when something changed.
bool LiveIngest::check_sources() {
    bool changed = false;
    std::string problems;
    for (auto& s : sources_) {
        const FollowerStatus fst = s.line_source->status();
        if (fst.unreadable != s.unreadable) {
            if (!fst.unreadable.empty())
                log_.error(
                    fmt::format("follower {}: {}; nothing from it reaches the ledger", s.id, fst.unreadable));
            else
                log_.info(fmt::format("follower {}: readable again", s.id));
            s.unreadable = fst.unreadable;
            changed = true;
        }
        if (!s.unreadable.empty()) problems += fmt::format("follower {}: {}\n", s.id, s.unreadable);
    }
    if (changed) metrics_.set_problems(std::make_shared<const std::string>(std::move(problems)));
    return changed;
}

void LiveIngest::publish() {
    // The engine's view wins; flags set elsewhere (another host of a Redis
    // fleet, or before this engine state existed) fill the gaps.
    auto mine = snapshot_from_engine(ingest_->engine());  // built for us: filled in place, no copy
    const auto from_flags = snapshot_from_flags(flags_);
    for (const auto& [domain, view] : from_flags->by_domain) mine->by_domain.try_emplace(domain, view);
    mine->origin = sources_.empty() ? "ledger flags" : "engine and ledger flags";
    decider_.publish(mine);
    metrics_.set_destinations(mine->by_domain.size());

    std::array<std::uint64_t, 5> ladder{};
    std::uint64_t flagged = 0;
    ingest_->engine().for_each_active([&](const DestinationState& d) {
        if (d.open) ++ladder[static_cast<std::size_t>(d.open->ladder)];
        if (d.flagged_at) ++flagged;
    });
    std::string o;
    auto out = std::back_inserter(o);
    const IngestStats& st = ingest_->stats();
    fmt::format_to(out, "# TYPE retryguard_deferrals_total counter\n");
    for (const auto& [cat, n] : st.by_category)
        fmt::format_to(out, "retryguard_deferrals_total{{category=\"{}\"}} {}\n", escape_label(cat), n);
    fmt::format_to(out, "# TYPE retryguard_destinations gauge\n");
    for (Ladder l : {Ladder::noted, Ladder::watch, Ladder::escalate, Ladder::recovered})
        fmt::format_to(out, "retryguard_destinations{{state=\"{}\"}} {}\n", to_string(l),
                       ladder[static_cast<std::size_t>(l)]);
    fmt::format_to(out,
                   "# TYPE retryguard_flagged_destinations gauge\nretryguard_flagged_destinations {}\n"
                   "# TYPE retryguard_ledger_flags gauge\nretryguard_ledger_flags {}\n"
                   "# TYPE retryguard_local_incident_open gauge\nretryguard_local_incident_open {}\n",
                   flagged, flags_.size(), ingest_->engine().local_incident_open() ? 1 : 0);
    fmt::format_to(
        out,
        "# TYPE retryguard_ingest_batches_total counter\nretryguard_ingest_batches_total {}\n"
        "# TYPE retryguard_ingest_lines_total counter\nretryguard_ingest_lines_total {}\n"
        "# TYPE retryguard_ingest_events_total counter\nretryguard_ingest_events_total {}\n"
        "# TYPE retryguard_ingest_errors_total counter\nretryguard_ingest_errors_total {}\n"
        "# TYPE retryguard_ingest_save_errors_total counter\nretryguard_ingest_save_errors_total {}\n"
        "# TYPE retryguard_ingest_reloads_total counter\nretryguard_ingest_reloads_total {}\n"
        "# TYPE retryguard_ingest_poison_lines_total counter\nretryguard_ingest_poison_lines_total {}\n"
        "# TYPE retryguard_ingest_engine_errors_total counter\nretryguard_ingest_engine_errors_total {}\n"
        "# TYPE retryguard_ingest_loop_errors_total counter\nretryguard_ingest_loop_errors_total {}\n"
        "# TYPE retryguard_verdict_outbox_pending_total counter\nretryguard_verdict_outbox_pending_total {}\n"
        "# TYPE retryguard_verdict_lines_found_total counter\nretryguard_verdict_lines_found_total {}\n"
        "# TYPE retryguard_verdict_lines_replayed_total counter\nretryguard_verdict_lines_replayed_total "
        "{}\n",
        st.batches, st.lines, st.events, ledger_refusals_, save_errors_, reloads_, st.poison_lines,
        st.engine_errors, loop_errors_, st.outbox_pending, st.outbox_found, st.verdict_lines_replayed);
    const actions::ActionStats& as = planner_->stats();
    fmt::format_to(out,
                   "# TYPE retryguard_notices_total counter\n"
                   "retryguard_notices_total{{result=\"planned\"}} {}\n"
                   "retryguard_notices_total{{result=\"sent\"}} {}\n"
                   "retryguard_notices_total{{result=\"failed\"}} {}\n"
                   "# TYPE retryguard_notices_skipped_total counter\n",
                   as.notices_planned, as.notices_sent, as.notice_failures);
    for (const auto& [why, n] : as.notices_skipped)
        fmt::format_to(out, "retryguard_notices_skipped_total{{reason=\"{}\"}} {}\n", escape_label(why), n);
    fmt::format_to(out,
                   "# TYPE retryguard_flushes_total counter\n"
                   "retryguard_flushes_total{{result=\"done\"}} {}\n"
                   "retryguard_flushes_total{{result=\"failed\"}} {}\n"
                   "retryguard_flushes_total{{result=\"rate_limited\"}} {}\n"
                   "retryguard_flushes_total{{result=\"probe\"}} {}\n"
                   "# TYPE retryguard_flushed_messages_total counter\nretryguard_flushed_messages_total {}\n",
                   as.flushes_done, as.flush_failures, as.flushes_rate_limited, as.probes,
                   as.flushed_messages);
    fmt::format_to(out, "# TYPE retryguard_verdicts_total counter\n");
    for (const auto& [name, n] : verdict_counts_)
        fmt::format_to(out, "retryguard_verdicts_total{{verdict=\"{}\"}} {}\n", escape_label(name), n);
    fmt::format_to(
        out,
        "# TYPE retryguard_decider_fail_open_total counter\nretryguard_decider_fail_open_total {}\n"
        "# TYPE retryguard_decider_dry_run_total counter\nretryguard_decider_dry_run_total {}\n",
        decider_.fail_open(), decider_.dry_run_answers());
    fmt::format_to(out,
                   "# TYPE retryguard_follower_position gauge\n# TYPE retryguard_follower_lag_bytes gauge\n"
                   "# TYPE retryguard_follower_lines_total counter\n"
                   "# TYPE retryguard_follower_lines_truncated_total counter\n"
                   "# TYPE retryguard_follower_unreadable gauge\n"
                   "# TYPE retryguard_follower_open_errors_total counter\n");
    for (auto& s : sources_) {
        const FollowerStatus fst = s.line_source->status();
        const std::string label = escape_label(s.id);
        fmt::format_to(out,
                       "retryguard_follower_position{{source=\"{}\"}} {}\n"
                       "retryguard_follower_lag_bytes{{source=\"{}\"}} {}\n"
                       "retryguard_follower_lines_total{{source=\"{}\"}} {}\n"
                       "retryguard_follower_lines_truncated_total{{source=\"{}\"}} {}\n"
                       "retryguard_follower_unreadable{{source=\"{}\"}} {}\n"
                       "retryguard_follower_open_errors_total{{source=\"{}\"}} {}\n",
                       label, fst.offset, label, fst.lag_bytes, label, s.lines, label, fst.lines_truncated,
                       label, fst.unreadable.empty() ? 0 : 1, label, fst.open_errors);
    }
    metrics_.set_extra(std::make_shared<const std::string>(std::move(o)));
}

void LiveIngest::run() {
    using clock = std::chrono::steady_clock;
    auto last_save = clock::now(), last_flags = clock::now(), last_line = clock::now();
    auto last_advance = clock::now();
    bool dirty = false;
    int ticks_since_save = 0;
    constexpr int kTicksBeforeSave = 150;  // 5 minutes of quiet at the default quiet_advance
    // The whole engine state is saved (which trims the journal a restart
    // replays) at most every save_every, and only once the lines since the
    // last save reach its size / state_bytes_per_line, the rule an import
    // saves by (SaveSchedule). Saved every save_every while lines came, its
    // cost followed the destinations ever tracked, not the lines read: about
    // 13 MB written every 5 s at 300k destinations, on a live log too.
    SaveSchedule saves;
    std::chrono::milliseconds backoff{0};
    std::vector<std::string> lines;
    const auto cfg0 = config_->current();
    const auto delay =
        std::max(std::chrono::milliseconds(10),
                 std::chrono::duration_cast<std::chrono::milliseconds>(cfg0->ingest.batch_max_delay));
    while (!stop_.load()) {
        // Nothing thrown may end the thread (the daemon would stop ingesting and
        // the process abort): log, count, pause briefly and go on.
        try {
            if (reload_.exchange(false)) {
                apply_reload();
                publish();
            }
            bool got_lines = false;
            if (sources_.empty()) {
                std::this_thread::sleep_for(std::chrono::milliseconds(200));
            }
            for (auto& s : sources_) {
                if (stop_.load()) break;
                const auto wait =
                    sources_.size() == 1
                        ? delay
                        : std::chrono::milliseconds(delay.count() / static_cast<long>(sources_.size()) + 1);
                auto batch = s.line_source->next_batch(wait);
                if (!batch) {
                    log_.warning("source " + s.id + ": " + batch.error().message);
                    std::this_thread::sleep_for(std::chrono::milliseconds(500));
                    continue;
                }
                if (!*batch) continue;
                const LineBatch& b = **batch;
                lines.clear();
                for (const auto& l : b.lines) lines.push_back(l.text);
                // Files and the journal resume from a saved position; datagrams cannot
                // be read twice, so their batches go in like an import (no position).
                std::optional<FollowerPosition> end;
                if (s.resumes) end = b.end;
                poison_context_ = fmt::format(" of a batch from {} ending at offset {}", s.id, b.end.offset);
                if (auto st = ingest_->ingest_lines(*s.parser, lines, end); !st) {
                    // Back-pressure: the batch stays pending and is offered again.
                    ++ledger_refusals_;
                    s.line_source->refuse(st.error());
                    backoff = std::min(std::chrono::milliseconds(5000),
                                       std::max(backoff * 2, std::chrono::milliseconds(100)));
                    log_.warning(fmt::format(
                        "ingest: ledger refused a batch of {} lines from {} ({}); retrying in {} ms",
                        lines.size(), s.id, st.error().message, backoff.count()));
                    publish();
                    std::this_thread::sleep_for(backoff);
                    continue;
                }
                backoff = std::chrono::milliseconds(0);
                s.line_source->commit();
                run_actions();
                s.lines += lines.size();
                saves.done(lines.size(), false);
                ++s.batches;
                got_lines = dirty = true;
            }
            const auto now = clock::now();
            if (got_lines) {
                last_line = now;
            } else if (now - last_line >= options_.quiet_advance &&
                       now - last_advance >= options_.quiet_advance && wall_now() > ingest_->engine().now()) {
                // (A clock behind the log's own times has nothing to add: the engine
                // evaluated as the log's time went by. Not advancing then keeps a
                // replay of such a log independent of when the daemon was quiet.)
                // A quiet log: time-based rules (escalation by age, flag expiry) still run.
                // Republish and save only when they changed something (a verdict): both
                // cost a pass over every destination, and with 100k destinations in
                // watch doing it every quiet_advance held requests back by milliseconds.
                const auto verdicts_before = ingest_->stats().verdicts;
                if (auto st = ingest_->advance(wall_now()); !st)
                    log_.warning("advance: " + st.error().message);
                run_actions();
                last_advance = now;
                if (ingest_->stats().verdicts != verdicts_before) dirty = got_lines = true;
                // Each advance is a journal entry that a restart replays (a pass over every
                // destination each): a long quiet spell saves now and then to keep that short.
                if (++ticks_since_save >= kTicksBeforeSave) dirty = true;
            }
            if (now - last_flags >= options_.flags_every) {
                refresh_flags(wall_now());
                last_flags = now;
                got_lines = true;
            }
            if (check_sources()) got_lines = true;
            if (got_lines) publish();
            const bool save_worth =
                ticks_since_save >= kTicksBeforeSave || saves.size_reached(0, ingest_->saved_state_bytes());
            if (dirty && save_worth && now - last_save >= options_.save_every) {
                save_actions();
                if (auto st = ingest_->save(); !st) {
                    ++save_errors_;
                    log_.warning("saving engine state: " + st.error().message);
                } else {
                    dirty = false;
                    ticks_since_save = 0;
                    saves.done(0, true);
                }
                last_save = now;
            }
        } catch (const std::exception& e) {
            ++loop_errors_;
            log_.error(std::string("ingest: unexpected error, continuing: ") + e.what());
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        } catch (...) {
            ++loop_errors_;
            log_.error("ingest: unexpected error, continuing");
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    }
}

}  // namespace retryguard::policyd
