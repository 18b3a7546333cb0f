// actions_ingest_test.cpp -- the actions planner behind the real ingest path
// (SQLite ledger, Ingestor, engine), as retryguard-policyd wires it: the
// observer sees each fresh record once, a restart's journal replay comes back
// flagged, and neither a restart nor a replayed log line sends a notice twice.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "retryguard/actions/actions.hpp"
#include "retryguard/config/config_engine.hpp"
#include "retryguard/ingest/ingest.hpp"

namespace retryguard::actions {
namespace {

namespace cfg = retryguard::config;
namespace fs = std::filesystem;

struct TempLedger {
    fs::path dir;
    std::unique_ptr<Ledger> ledger;
    TempLedger() {
        static int n = 0;
        dir = fs::temp_directory_path() /
              ("rg-actions-ingest-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
        fs::remove_all(dir);
        fs::create_directories(dir);
        auto l = open_ledger("sqlite:" + (dir / "ledger.db").string());
        EXPECT_TRUE(l.ok()) << (l.ok() ? "" : l.error().message);
        ledger = std::move(l.value());
    }
    ~TempLedger() { fs::remove_all(dir); }
};

std::shared_ptr<const Classifier> classifier() {
    static auto c = [] {
        auto r = Classifier::load();
        EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
        return std::make_shared<const Classifier>(std::move(r.value()));
    }();
    return c;
}

LogParserOptions year_2026() {
    LogParserOptions o;
    o.year = 2026;
    o.local_time = false;
    return o;
}

const std::vector<std::string> kFirst = {
    "Dec  1 10:00:00 sender postfix/pickup[100]: AAA0000001: uid=1000 from=<alice@sender.example>",
    "Dec  1 10:00:00 sender postfix/qmgr[102]: AAA0000001: from=<alice@sender.example>, size=400, nrcpt=1 "
    "(queue "
    "active)",
    "Dec  1 10:00:01 sender postfix/smtp[103]: AAA0000001: to=<bob@defer.example>, "
    "relay=mx.defer.example[192.0.2.1]:25, "
    "delay=1, delays=0/0/0/1, dsn=4.3.5, status=deferred (host mx.defer.example[192.0.2.1] said: 451 4.3.5 "
    "System "
    "config error (in reply to RCPT TO command))",
};
const std::vector<std::string> kRetry = {
    "Dec  1 10:05:00 sender postfix/qmgr[102]: AAA0000001: from=<alice@sender.example>, size=400, nrcpt=1 "
    "(queue "
    "active)",
    "Dec  1 10:05:01 sender postfix/smtp[103]: AAA0000001: to=<bob@defer.example>, "
    "relay=mx.defer.example[192.0.2.1]:25, "
    "delay=301, delays=300/0/0/1, dsn=4.3.5, status=deferred (host mx.defer.example[192.0.2.1] said: 451 "
    "4.3.5 System "
    "config error (in reply to RCPT TO command))",
};

struct Seen {
    std::string what;  // "event <qid>" or "tick"
    std::vector<std::string> verdicts;
    bool replayed = false;
};

TEST(ActionsIngest, TheObserverSeesEachFreshRecordOnceAndARestartsReplayFlagged) {
    TempLedger tl;
    std::vector<Seen> seen;
    auto observer = [&](const EngineJournalRecord& r, std::span<const Verdict> verdicts, bool replayed) {
        Seen s;
        s.what = r.kind == EngineJournalRecord::Kind::event ? "event " + r.item.event.queue_id : "tick";
        for (const auto& v : verdicts) s.verdicts.push_back(v.name);
        s.replayed = replayed;
        seen.push_back(std::move(s));
    };
    {
        Ingestor ing(*tl.ledger, classifier(), EngineSettings{});
        ing.set_observer(observer);
        ASSERT_TRUE(ing.restore());
        LogParser p(year_2026());
        ASSERT_TRUE(ing.ingest_lines(p, kFirst, std::nullopt));
        ASSERT_EQ(seen.size(), 3u);
        EXPECT_EQ(seen[2].what, "event AAA0000001");
        EXPECT_EQ(seen[2].verdicts, (std::vector<std::string>{"noted", "noted"}));  // domain and MX host
        EXPECT_FALSE(seen[2].replayed);
        ASSERT_TRUE(ing.save());
        ASSERT_TRUE(ing.ingest_lines(p, kRetry, std::nullopt));  // journaled, not in the saved state
        ASSERT_EQ(seen.size(), 5u);
        // The same lines again (a follower re-reading them): duplicates, not observed.
        ASSERT_TRUE(ing.ingest_lines(p, kRetry, std::nullopt));
        EXPECT_EQ(seen.size(), 5u);
    }
    seen.clear();
    Ingestor resumed(*tl.ledger, classifier(), EngineSettings{});
    resumed.set_observer(observer);
    ASSERT_TRUE(resumed.restore());
    ASSERT_EQ(seen.size(), 2u) << "the journal after the saved state comes back";
    for (const auto& s : seen) EXPECT_TRUE(s.replayed) << s.what;
    seen.clear();
    ASSERT_TRUE(resumed.advance(TimePoint{std::chrono::seconds(1796140000)}));
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].what, "tick");
    EXPECT_FALSE(seen[0].replayed);
}

// As retryguard-policyd wires it: planner behind the Ingestor, the ledger's
// first deferral as the check.
struct Daemon {
    std::shared_ptr<const cfg::Config> config;
    Ingestor ingestor;
    Planner planner;
    Daemon(Ledger& ledger, std::shared_ptr<const cfg::Config> c)
        : config(c),
          ingestor(ledger, classifier(), cfg::to_engine_settings(c)),
          planner(c, [&ledger](const Event& e) { return ledger_first_deferral(ledger, e); }) {
        ingestor.set_observer(
            [this](const EngineJournalRecord& r, std::span<const Verdict> v, bool replayed) {
                const bool event = r.kind == EngineJournalRecord::Kind::event;
                planner.observe(event ? &r.item.event : nullptr, r.item.category,
                                event ? r.item.event.time : r.time, v, ingestor.engine(), replayed);
            });
        EXPECT_TRUE(ingestor.restore());
    }
};

TEST(ActionsIngest, NeitherARestartNorTheJournalReplaySendsASecondNotice) {
    TempLedger tl;
    auto c = cfg::load_string("", "<test>", {"notify.enabled=true"}).config;
    ASSERT_TRUE(c);
    {
        Daemon d(*tl.ledger, c);
        LogParser p(year_2026());
        ASSERT_TRUE(d.ingestor.ingest_lines(p, kFirst, std::nullopt));
        auto n = d.planner.take_notices();
        ASSERT_EQ(n.size(), 1u);
        EXPECT_EQ(n[0].sender, "alice@sender.example");
        // Crash: neither the engine state nor the planner's memory is saved.
    }
    {
        // The journal replays the first deferral (flagged): nothing is sent again.
        Daemon d(*tl.ledger, c);
        EXPECT_TRUE(d.planner.take_notices().empty());
    }
    // A planner that forgot everything (its state lost, the journal trimmed)
    // and a follower that reads the submission again: the pickup line is a
    // duplicate the ledger drops, so the planner never learns where the
    // message came from, and its next deferral gets no notice.
    Ingestor saver(*tl.ledger, classifier(), cfg::to_engine_settings(c));
    ASSERT_TRUE(saver.restore());
    ASSERT_TRUE(saver.save());
    Daemon d(*tl.ledger, c);
    LogParser p(year_2026());
    const std::vector<std::string> pickup_again = {kFirst[0]};
    ASSERT_TRUE(d.ingestor.ingest_lines(p, pickup_again, std::nullopt));
    ASSERT_TRUE(d.ingestor.ingest_lines(p, kRetry, std::nullopt));
    EXPECT_TRUE(d.planner.take_notices().empty());
    EXPECT_EQ(d.planner.stats().notices_skipped.at("origin_unknown"), 1u);
}

TEST(ActionsIngest, TheLedgerCheckSaysFirstOnlyForTheFirstDeferral) {
    TempLedger tl;
    Ingestor ing(*tl.ledger, classifier(), EngineSettings{});
    ASSERT_TRUE(ing.restore());
    LogParser p(year_2026());
    std::vector<Event> deferrals;
    for (const auto* batch : {&kFirst, &kRetry}) {
        ASSERT_TRUE(ing.ingest_lines(p, *batch, std::nullopt));
        Event e;
        LogParser q(year_2026());
        ASSERT_TRUE(q.parse(batch->back(), e));
        deferrals.push_back(e);
    }
    EXPECT_TRUE(ledger_first_deferral(*tl.ledger, deferrals[0]));
    EXPECT_FALSE(ledger_first_deferral(*tl.ledger, deferrals[1]));
    Event unknown = deferrals[0];
    unknown.queue_id = "BBB0000009";
    EXPECT_TRUE(ledger_first_deferral(*tl.ledger, unknown));
}

}  // namespace
}  // namespace retryguard::actions
