// The ingest path end to end on real Postfix 3.7 logs: parser, classifier,
// SQLite ledger and rules engine together.
#include "retryguard/ingest.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace retryguard {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> read_lines(const std::string& name) {
    std::ifstream in(std::string(RETRYGUARD_FIXTURES) + "/postfix-3.7/" + name);
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);)
        if (!line.starts_with("#")) out.push_back(line);
    return out;
}

struct TempLedger {
    fs::path dir;
    std::unique_ptr<Ledger> ledger;
    TempLedger() {
        dir = fs::temp_directory_path() /
              ("rg-ingest-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
        fs::remove_all(dir);
        fs::create_directories(dir);
        auto l = open_ledger("sqlite:" + (dir / "ledger.db").string());
        EXPECT_TRUE(l.ok()) << (l.ok() ? "" : l.error().message);
        ledger = std::move(l.value());
    }
    ~TempLedger() { fs::remove_all(dir); }
    static int& counter() {
        static int n = 0;
        return n;
    }
};

std::shared_ptr<const Classifier> classifier() {
    static auto c = [] {
        auto r = Classifier::load();
        EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
        return std::make_shared<const Classifier>(std::move(r.value()));
    }();
    return c;
}

LogParserOptions fixture_year() {
    LogParserOptions o;
    o.year = 2026;
    o.local_time = false;
    return o;
}

struct IngestRun {
    TempLedger tl;
    std::vector<std::string> verdicts;
    std::unique_ptr<Ingestor> ingestor;
    IngestRun() {
        ingestor =
            std::make_unique<Ingestor>(*tl.ledger, classifier(), EngineSettings{},
                                       [this](const Verdict& v) { verdicts.push_back(format_verdict(v)); });
    }
};

TEST(Ingest, LifecycleFixtureRecordsTheDeferralAndNotesTheDestination) {
    IngestRun run;
    LogParser parser(fixture_year());
    auto lines = read_lines("41-lifecycle-deferred-retries-delay-warning.sender.log");
    ASSERT_TRUE(run.ingestor->ingest_lines(parser, lines, std::nullopt).ok());
    EXPECT_GT(run.ingestor->stats().applied, 10u);
    EXPECT_EQ(run.ingestor->stats().by_category.at("receiver-config"),
              static_cast<std::uint64_t>(std::count_if(lines.begin(), lines.end(), [](const std::string& l) {
                  return l.find("status=deferred") != std::string::npos;
              })));

    auto d = run.tl.ledger->get_destination(DestinationKind::domain, "cfgerr.lab.test");
    ASSERT_TRUE(d.ok());
    ASSERT_TRUE(d->has_value());
    EXPECT_EQ((*d)->state, "watch");
    ASSERT_TRUE((*d)->episode.has_value());
    EXPECT_NE((*d)->episode->last_reply.find("451 4.3.5"), std::string::npos);

    // Postfix's lab backoff retries within seconds: the engine reports it once.
    bool too_soon = false, noted = false;
    for (const auto& v : run.verdicts) {
        too_soon = too_soon || v.starts_with("1E661116375: verdict=retry_too_soon");
        noted = noted || v.starts_with("cfgerr.lab.test: verdict=noted");
    }
    EXPECT_TRUE(too_soon);
    EXPECT_TRUE(noted);
}

TEST(Ingest, ReimportingTheSameLogChangesNothing) {
    IngestRun run;
    auto lines = read_lines("full-run.sender.log");
    {
        LogParser parser(fixture_year());
        ASSERT_TRUE(run.ingestor->ingest_lines(parser, lines, std::nullopt).ok());
    }
    auto first_verdicts = run.verdicts.size();
    // Postfix logs the odd identical line twice in one second (postqueue -f):
    // the ledger keeps one of them, so count what the first import applied.
    const auto applied = run.ingestor->stats().applied;
    const auto events = run.ingestor->stats().events;
    auto first_stats = run.tl.ledger->stats();
    ASSERT_TRUE(first_stats.ok());
    ASSERT_GT(first_verdicts, 0u);
    {
        LogParser parser(fixture_year());
        ASSERT_TRUE(run.ingestor->ingest_lines(parser, lines, std::nullopt).ok());
    }
    EXPECT_EQ(run.verdicts.size(), first_verdicts) << "a replay must not repeat verdicts";
    EXPECT_EQ(run.ingestor->stats().applied, applied) << "nothing new on a replay";
    EXPECT_EQ(run.ingestor->stats().events, 2 * events);
    EXPECT_EQ(run.ingestor->stats().applied + run.ingestor->stats().duplicates, 2 * events);
    auto again = run.tl.ledger->stats();
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->messages, first_stats->messages);
    EXPECT_EQ(again->open_episodes, first_stats->open_episodes);
}

TEST(Ingest, LiveFollowInBatchesGivesTheSameVerdictsAsAnImport) {
    auto lines = read_lines("full-run.sender.log");
    IngestRun imported;
    {
        LogParser parser(fixture_year());
        ASSERT_TRUE(imported.ingestor->ingest_lines(parser, lines, std::nullopt).ok());
    }
    IngestRun live;
    LogParser parser(fixture_year());
    FollowerPosition pos;
    pos.source = "file:/var/log/mail.log";
    for (std::size_t i = 0; i < lines.size(); i += 37) {
        std::span<const std::string> batch(lines.data() + i, std::min<std::size_t>(37, lines.size() - i));
        pos.offset += batch.size();
        pos.lines += batch.size();
        ASSERT_TRUE(live.ingestor->ingest_lines(parser, batch, pos).ok());
        if (i % 111 == 0) {
            // A restart in the middle: a new ingestor resumes from the saved state.
            ASSERT_TRUE(live.ingestor->save().ok());
            auto resumed = std::make_unique<Ingestor>(
                *live.tl.ledger, classifier(), EngineSettings{},
                [&](const Verdict& v) { live.verdicts.push_back(format_verdict(v)); });
            ASSERT_TRUE(resumed->restore().ok());
            auto rp = resumed->resume_position(pos.source);
            ASSERT_TRUE(rp.has_value());
            EXPECT_EQ(rp->offset, pos.offset);
            live.ingestor = std::move(resumed);
        }
    }
    EXPECT_EQ(live.verdicts, imported.verdicts);
}

TEST(Ingest, CrashBetweenLedgerAndEngineSaveLosesNothing) {
    // The engine saved its state at line 200; the ledger went on to line 400
    // before the crash. The follower resumes at 200: the ledger skips lines
    // 200-400 as duplicates and the engine sees them for the first time.
    auto lines = read_lines("full-run.sender.log");
    ASSERT_GT(lines.size(), 400u);
    IngestRun reference;
    {
        LogParser parser(fixture_year());
        ASSERT_TRUE(reference.ingestor->ingest_lines(parser, lines, std::nullopt).ok());
    }
    IngestRun crashed;
    FollowerPosition pos;
    pos.source = "file:/var/log/mail.log";
    LogParser parser(fixture_year());
    auto feed = [&](Ingestor& ing, std::size_t from, std::size_t to) {
        pos.offset = to;
        ASSERT_TRUE(
            ing.ingest_lines(parser, std::span<const std::string>(lines.data() + from, to - from), pos).ok());
    };
    feed(*crashed.ingestor, 0, 200);
    ASSERT_TRUE(crashed.ingestor->save().ok());
    feed(*crashed.ingestor, 200, 400);  // ledger has it, engine state on disk does not
    std::vector<std::string> before_crash(crashed.verdicts.begin(), crashed.verdicts.end());

    std::vector<std::string> after;
    Ingestor resumed(*crashed.tl.ledger, classifier(), EngineSettings{},
                     [&](const Verdict& v) { after.push_back(format_verdict(v)); });
    ASSERT_TRUE(resumed.restore().ok());
    ASSERT_EQ(resumed.resume_position(pos.source)->offset, 200u);
    feed(resumed, 200, lines.size());
    // Verdicts of lines 200-400 are said twice (before and after the crash), as
    // a restarted daemon would; the final engine state equals the reference.
    EXPECT_EQ(resumed.engine().save_state(), reference.ingestor->engine().save_state());
    // Every event was applied to the ledger exactly once across the crash.
    EXPECT_EQ(crashed.ingestor->stats().applied + resumed.stats().applied,
              reference.ingestor->stats().applied);
    EXPECT_GT(resumed.stats().duplicates, 150u) << "lines 200-400 were re-read";
}

}  // namespace
}  // namespace retryguard
