// actions.hpp -- what retryguard does about a deferral besides writing a
// verdict: tell the local submitter not to resend (a "do not resend" notice on
// the first deferral of a message the guidance says to wait out), and flush a
// destination's deferred mail the moment it delivers again (docs/guidance.md
// "Notices and flushes").
//
// The Planner decides; it is fed the follower's fresh events and the engine's
// verdicts in log order (Ingestor observer) and never runs anything itself.
// The ActionRunner carries a plan out through the local Postfix (sendmail -t,
// postqueue -i) with a timeout; its failures are counted and reported once
// per change of state, and never stop ingestion or mail (fail open).
//
// Must never: notify a remote (unauthenticated relay) client's sender, the null
// sender or a message it cannot tell was submitted locally; notify a message
// twice; put outside text into a header unchecked.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "retryguard/category.hpp"
#include "retryguard/config/config.hpp"
#include "retryguard/ledger/ledger.hpp"
#include "retryguard/log/events.hpp"
#include "retryguard/result.hpp"
#include "retryguard/rules/engine.hpp"
#include "retryguard/rules/verdict.hpp"

namespace retryguard::actions {

// How a message entered the queue, as far as the log tells.
struct Origin {
    enum class Kind { unknown, sendmail, sasl, remote };
    Kind kind = Kind::unknown;
    std::string sender;  // envelope sender (pickup from=, qmgr from=), "" for the null sender
    std::string login;   // sasl_username= or "uid N"
    TimePoint arrival{};
    bool gone = false;  // removed from the queue (delivered, bounced, deleted, expired)
    TimePoint removed{};
};
std::string_view to_string(Origin::Kind k) noexcept;

// One notice to send: everything the template needs, already decided.
struct Notice {
    std::string queue_id;
    std::string sender;  // the address the notice goes to
    std::string destination;
    Category category = Category::unknown;
    std::vector<std::string> recipients;
    std::string reply;  // the receiving server's literal reply, as logged
    TimePoint time{};   // the first deferral
    TimePoint expiry{};
    std::optional<TimePoint> escalation;  // none: this kind of problem is never escalated
    bool escalated = false;               // the destination is escalated already
    bool dry_run = false;                 // its destination's dry_run: logged, not sent
};

// One flush: queue ids deferred to a destination that delivers again, or one
// probe of an escalated destination.
struct Flush {
    std::string destination;  // engine key: "example.com" or "mx:host"
    std::vector<std::string> queue_ids;
    TimePoint time{};
    bool probe = false;
    bool dry_run = false;  // its destination's dry_run: logged, not run
};

// Counters for metrics; every decision not to act is counted by its reason.
struct ActionStats {
    std::uint64_t notices_planned = 0;
    std::uint64_t notices_sent = 0;
    std::uint64_t notice_failures = 0;
    std::map<std::string, std::uint64_t, std::less<>> notices_skipped;  // by reason
    std::uint64_t flushes_planned = 0;
    std::uint64_t flushes_done = 0;
    std::uint64_t flushed_messages = 0;
    std::uint64_t flush_failures = 0;
    std::uint64_t flushes_rate_limited = 0;
    std::uint64_t probes = 0;
};

// The global part of the settings (per-destination parts are read through
// config.resolve()).
struct RunnerSettings {
    std::string sendmail_path = "/usr/sbin/sendmail";
    std::string postqueue_path = "/usr/sbin/postqueue";
    std::string config_directory;  // Postfix -C / -c DIR; "" = the default instance
    std::chrono::milliseconds timeout{10000};
    // After a command failed, it is not run again for this long (the actions
    // meanwhile count as failed): a hung sendmail must not stall the follower
    // for a timeout per notice.
    std::chrono::milliseconds pause_after_failure{60000};
};
RunnerSettings runner_settings_from(const config::Config& c);

// What the notice text is made of (notify.* keys).
struct NoticeTemplate {
    std::string from = "Mail Delivery System <MAILER-DAEMON>";
    std::string subject;
    std::string body;
};
NoticeTemplate notice_template_from(const config::Config& c);

// The complete message handed to `sendmail -t`: headers (From, To, Subject,
// Auto-Submitted: auto-generated, Precedence: bulk, MIME) and the body with
// every placeholder filled. Outside text (addresses, the reply) is cleaned:
// no control characters, never a line break inside a header, long reply lines
// wrapped and the reply cut; bytes that are not UTF-8 become '?'.
std::string render_notice(const Notice& n, const NoticeTemplate& t);
// An address fit for a To: header (printable, no blanks, quotes, angle
// brackets, commas or semicolons, one '@' with text on both sides).
bool safe_header_address(std::string_view address) noexcept;
// Outside text for a mail body line: control characters removed (tab becomes a
// space), invalid UTF-8 bytes become '?'.
std::string mail_text(std::string_view s);
// `text` cut into lines of at most `width` characters (at blanks when it can),
// each prefixed by `indent`; at most `max_lines` lines, the last ending in " ..."
// when text was left out.
std::string wrap_text(std::string_view text, std::size_t width, std::string_view indent,
                      std::size_t max_lines);

// The verdict lines of actions (docs/verdicts.md): `notified` keyed by the
// queue id, `flushed` / `probed` keyed by the destination.
Verdict notified_verdict(const Notice& n);
Verdict flushed_verdict(const Flush& f, std::size_t count);

class Planner {
  public:
    // `first_deferral`: whether this deferral is the first one the ledger holds
    // for the message's recipient (so a restart, which forgets what the planner
    // saw, never makes a later deferral look like the first). Unset: the
    // planner's own memory decides.
    using FirstDeferral = std::function<bool(const Event&)>;
    Planner(std::shared_ptr<const config::Config> config, FirstDeferral first_deferral = {});

    void set_config(std::shared_ptr<const config::Config> config);

    // One journal record as the engine was fed it: the event (none for ticks)
    // and the verdicts the engine returned for it. `replayed`: the record was
    // fed again at a restart (it may have been acted on before): state only.
    void observe(const Event* event, Category category, TimePoint time, std::span<const Verdict> verdicts,
                 const Engine& engine, bool replayed);

    // Work planned since the last call.
    std::vector<Notice> take_notices();
    std::vector<Flush> take_flushes();

    // Outcome of carrying a plan out (for the at-most-once memory and explain).
    void notice_done(const Notice& n, bool ok);
    void flush_done(const Flush& f, bool ok);

    ActionStats& stats() noexcept { return stats_; }
    const ActionStats& stats() const noexcept { return stats_; }

    // What was done, for `retryguard explain` and a restart: notices by queue
    // id, flushes by destination; bounded, newest kept. JSON text.
    std::string save_state() const;
    Status load_state(std::string_view text);

    static constexpr std::string_view kStateKey = "actions";
    static constexpr std::size_t kMaxRemembered = 5000;
    static constexpr std::size_t kMaxTracked = 200000;  // messages whose origin is tracked

  private:
    struct PendingNotice {
        Notice notice;
        std::string episode_key;
    };
    void on_event(const Event& e, Category c, const Engine& engine, bool replayed);
    void on_deferral(const Event& e, Category c, const Engine& engine);
    void on_verdict(const Verdict& v, const Engine& engine, bool replayed);
    void maybe_probe(TimePoint now, const Engine& engine);
    bool skip(std::string_view reason);
    void set_derived();
    Origin* origin(std::string_view qid);
    void forget_old(TimePoint now);

    std::shared_ptr<const config::Config> config_;
    FirstDeferral first_deferral_;
    std::map<std::string, Origin, std::less<>> origins_;             // by queue id
    std::set<std::string, std::less<>> deferred_;                    // queue ids seen deferred (this run)
    std::map<std::string, TimePoint, std::less<>> notified_;         // queue id -> when
    std::map<std::string, TimePoint, std::less<>> episode_notices_;  // "sender\x1fdestination\x1fepisode"
    std::map<std::string, TimePoint, std::less<>> last_flush_;       // destination -> when
    std::map<std::string, TimePoint, std::less<>> last_probe_;       // destination -> when
    std::map<std::string, TimePoint, std::less<>> flushed_;          // queue id -> when
    struct Done {
        TimePoint time{};
        std::string what;  // "notified" / "flushed" / "probed"
        std::string key;   // queue id or destination
        std::string detail;
    };
    std::vector<Done> done_;
    std::vector<PendingNotice> notices_;
    std::vector<Flush> flushes_;
    TimePoint now_{};
    TimePoint last_forget_{};
    TimePoint last_probe_check_{};
    bool probe_anywhere_ = false;   // flush.probe is on globally or in a destination rule
    bool notify_anywhere_ = false;  // notify.enabled likewise
    ActionStats stats_;
};

// Planner::FirstDeferral from the ledger: true when the ledger (which has the
// batch before the engine and the planner see it) holds no deferral of the
// event's recipient earlier than the event. A ledger error answers false: a
// notice may be lost, never sent twice.
bool ledger_first_deferral(LedgerReports& ledger, const Event& e);

// `retryguard explain`: the notices and flushes a saved planner state
// (Planner::save_state) records for the messages of an explain document
// (report::explain): notices of its queue ids, flushes that named one of them.
// Each {time, what, key, detail}, oldest first; empty when the state is unreadable.
nlohmann::json actions_for_explain(std::string_view state, const nlohmann::json& explain_doc);

// Runs one command (argv[0] an absolute path) with `input` on its standard
// input, within `timeout` (then killed). Ok when it exits 0; otherwise the
// error says how it ended and the first line of what it wrote on stderr.
Status run_command(const std::vector<std::string>& argv, std::string_view input,
                   std::chrono::milliseconds timeout);

// Carries plans out through the local Postfix. A failure (sendmail or
// postqueue missing or failing) is reported through `log` when the state
// changes (first failure, a different failure, working again), counted in
// the planner's stats, and never retried in a loop.
class ActionRunner {
  public:
    using Log = std::function<void(bool error, std::string_view message)>;
    using Exec = std::function<Status(const std::vector<std::string>& argv, std::string_view input,
                                      std::chrono::milliseconds timeout)>;
    ActionRunner(RunnerSettings settings, Log log, Exec exec = run_command);
    void set_settings(RunnerSettings settings) { settings_ = std::move(settings); }

    // argv of the two commands (for tests and docs).
    std::vector<std::string> sendmail_argv() const;
    std::vector<std::string> postqueue_argv(std::string_view queue_id) const;

    Status send(const Notice& n, const NoticeTemplate& t);
    // Flushes each queue id; returns how many Postfix accepted. Stops at the
    // first failure (postqueue accepts a queue id that is gone: a failure
    // means postqueue itself is broken).
    std::size_t flush(const Flush& f);

  private:
    void report(std::string_view what, const Status& st);
    // The command's last failure while it is paused, else nullopt.
    std::optional<Error> paused(std::string_view what) const;
    std::map<std::string, std::chrono::steady_clock::time_point, std::less<>> paused_until_;
    RunnerSettings settings_;
    Log log_;
    Exec exec_;
    std::map<std::string, std::string, std::less<>> last_error_;  // per command: "" when it worked
};

// Carries out what the planner has decided since the last call: each notice
// through the runner and each flush through postqueue (neither when its
// destination's dry_run, global or from a rule, is set: the planner gives each
// its own), and tells the planner how each went (its state changed when
// `planned`). The verdicts are the ones to log and count: `notified` per
// notice sent, `flushed`/`probed` per flush Postfix accepted (with dry_run=yes
// in dry-run mode).
struct CarriedOut {
    bool planned = false;  // there was a notice or a flush to carry out
    std::vector<Verdict> verdicts;
};
CarriedOut carry_out(Planner& planner, ActionRunner& runner, const NoticeTemplate& tmpl);

}  // namespace retryguard::actions
