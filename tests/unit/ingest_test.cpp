// The ingest path end to end on real Postfix 3.7 logs: parser, classifier,
// SQLite ledger and rules engine together.
#include "retryguard/ingest/ingest.hpp"

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
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

// `retryguard import` parses on one thread (Ingestor::add_line) while the
// ledger and the engine work on another (ingest_prepared), reusing a few
// batches whose items keep their buffers. The ledger's journal holds every
// fresh event losslessly, so equal journals mean equal events: no field of a
// reused item may leak from the line it held before.
TEST(Ingest, BatchesParsedOnAnotherThreadAndReusedGiveWhatIngestLinesGives) {
    auto lines = read_lines("full-run.sender.log");
    ASSERT_GT(lines.size(), 200u);
    constexpr std::size_t kBatch = 37;
    IngestRun direct;
    {
        LogParser parser(fixture_year());
        for (std::size_t i = 0; i < lines.size(); i += kBatch) {
            std::span<const std::string> batch(lines.data() + i, std::min(kBatch, lines.size() - i));
            ASSERT_TRUE(direct.ingestor->ingest_lines(parser, batch, std::nullopt).ok());
        }
    }
    IngestRun piped;
    std::vector<PreparedBatch> batches(2);
    std::vector<std::size_t> items_capacity;
    LogParser parser(fixture_year());  // one stream across batches, as in import
    for (std::size_t i = 0, n = 0; i < lines.size(); i += kBatch, ++n) {
        PreparedBatch& b = batches[n % batches.size()];
        b.clear();
        std::thread reader([&] {
            for (std::size_t j = i; j < std::min(i + kBatch, lines.size()); ++j)
                Ingestor::add_line(b, parser, *classifier(), lines[j], {});
        });
        reader.join();
        EXPECT_EQ(b.lines, std::min(kBatch, lines.size() - i));
        ASSERT_TRUE(piped.ingestor->ingest_prepared(b, std::nullopt).ok());
        items_capacity.push_back(b.items.size());
    }
    EXPECT_GE(items_capacity.back(), kBatch / 2) << "the items stay for the next use";
    EXPECT_EQ(piped.verdicts, direct.verdicts);
    ASSERT_FALSE(direct.verdicts.empty());
    EXPECT_EQ(piped.ingestor->engine().save_state(), direct.ingestor->engine().save_state());
    EXPECT_EQ(piped.ingestor->stats().lines, lines.size());
    EXPECT_EQ(piped.ingestor->stats().events, direct.ingestor->stats().events);
    EXPECT_EQ(piped.ingestor->stats().applied, direct.ingestor->stats().applied);
    auto pj = piped.tl.ledger->read_journal(0, 100000);
    auto dj = direct.tl.ledger->read_journal(0, 100000);
    ASSERT_TRUE(pj.ok() && dj.ok());
    ASSERT_EQ(pj->size(), dj->size());
    ASSERT_GT(pj->size(), 1u);
    for (std::size_t i = 0; i < pj->size(); ++i) EXPECT_EQ((*pj)[i].data, (*dj)[i].data) << "entry " << i;
    auto pc = piped.tl.ledger->verdict_counts();
    auto dc = direct.tl.ledger->verdict_counts();
    ASSERT_TRUE(pc.ok() && dc.ok());
    EXPECT_EQ(*pc, *dc);
}

// `retryguard import` with the engine on its own thread (ingest_pipelined):
// the ledger records a batch while the engine feeds the one before, effects
// and snapshots follow one batch late. The ledger, the verdict lines, the
// engine and the saved state must be what the serial path gives.
struct PipelinedRun {
    IngestRun run;
    std::vector<PreparedBatch> batches = std::vector<PreparedBatch>(4);
    std::vector<int> in_use = std::vector<int>(4, 0);
    std::vector<Status> saves;
    // Feeds lines [from, to) in batches of `size`, a snapshot after every `save_every`-th batch.
    void feed(const std::vector<std::string>& lines, std::size_t from, std::size_t to, std::size_t size,
              std::size_t save_every, LogParser& parser) {
        for (std::size_t i = from, n = 0; i < to; i += size, ++n) {
            std::size_t k = 0;
            while (in_use[k] != 0) ++k;  // a free batch exists: at most two are out (ledger, engine)
            ASSERT_LT(k, batches.size());
            PreparedBatch& b = batches[k];
            b.clear();
            for (std::size_t j = i; j < std::min(i + size, to); ++j)
                Ingestor::add_line(b, parser, *classifier(), lines[j], {});
            in_use[k] = 1;
            auto step = run.ingestor->ingest_pipelined(
                b, [this, k](PreparedBatch&) { --in_use[k]; }, (n + 1) % save_every == 0);
            ASSERT_TRUE(step.ingest.ok()) << step.ingest.error().message;
            if (step.saved) saves.push_back(*step.saved);
            int out = 0;
            for (int u : in_use) out += u;
            EXPECT_LE(out, 1) << "one batch stays with the engine, no more";
        }
    }
};

TEST(Ingest, AJournalEntryMadeAheadIsStoredAsTheLedgerWouldEncodeIt) {
    // add_line appends each event's journal part to the batch's entry; the
    // ledger stores that entry as it is when every event is fresh, and only
    // the fresh events' parts when a batch is offered again with some already
    // recorded (an import resumed after a crash). Three ledgers take the same
    // two batches (the first half of a log, then all of it): with the entry
    // made ahead, with none (the ledger encodes), with one that claims a
    // wrong number of events (refused: the ledger encodes), and with the
    // entry made ahead and compressed ahead (seal_journal, as an import's
    // reading thread does). Their journals must be byte for byte the same.
    const auto lines = read_lines("full-run.sender.log");
    ASSERT_GT(lines.size(), 100u);
    const std::vector<std::string> first(lines.begin(), lines.begin() + static_cast<long>(lines.size() / 2));
    enum class Mode { ahead, none, wrong, sealed };
    auto run = [&](Mode mode) {
        TempLedger tl;
        std::vector<IngestResult> results;
        for (const auto* part : {&first, &lines}) {
            PreparedBatch b;
            LogParser parser(fixture_year());
            for (const auto& line : *part) Ingestor::add_line(b, parser, *classifier(), line, {});
            EXPECT_EQ(b.journal_items, b.count);
            if (mode == Mode::sealed) {
                b.compress_journal = true;
                Ingestor::seal_journal(b);
                EXPECT_TRUE(b.sealed);
                EXPECT_FALSE(b.compressed.empty());
            }
            BatchJournal j = b.batch_journal();
            EXPECT_EQ(j.stored.empty(), mode != Mode::sealed);
            if (mode == Mode::none) j = {};
            if (mode == Mode::wrong) j.items += 1;
            auto r = tl.ledger->ingest(b.events(), std::nullopt, j);
            EXPECT_TRUE(r.ok());
            if (r.ok()) results.push_back(*r);
        }
        auto journal = tl.ledger->read_journal(0, 100);
        EXPECT_TRUE(journal.ok());
        std::vector<std::string> entries;
        if (journal.ok())
            for (const auto& e : *journal) entries.push_back(e.data);
        return std::make_pair(results, entries);
    };
    const auto [ahead_results, ahead] = run(Mode::ahead);
    const auto [none_results, none] = run(Mode::none);
    const auto [wrong_results, wrong] = run(Mode::wrong);
    const auto [sealed_results, sealed] = run(Mode::sealed);
    ASSERT_EQ(ahead_results.size(), 2u);
    EXPECT_EQ(ahead_results[0].duplicates, 0u);
    EXPECT_GT(ahead_results[1].duplicates, 10u) << "the first half is seen again";
    EXPECT_GT(ahead_results[1].applied, 10u);
    ASSERT_EQ(ahead.size(), 2u);
    ASSERT_EQ(none.size(), 2u);
    EXPECT_EQ(ahead[0].size(), none[0].size()) << ahead_results[0].applied << " " << none_results[0].applied;
    EXPECT_EQ(ahead[1].size(), none[1].size()) << ahead_results[1].applied << " " << none_results[1].applied;
    EXPECT_EQ(ahead, none);
    EXPECT_EQ(ahead, wrong);
    EXPECT_EQ(ahead, sealed);
    // Stored compressed (the ledger's own form, or the one made ahead).
    EXPECT_EQ(ahead[0].substr(0, 1), kJournalCompressedTag);
    EXPECT_EQ(ahead[1].substr(0, 1), kJournalCompressedTag);
    // The second entry holds the second half's events only.
    std::vector<EngineJournalRecord> records;
    ASSERT_TRUE(decode_journal_entry(ahead[1], records));
    EXPECT_EQ(records.size(), ahead_results[1].applied);
}

TEST(Ingest, PipelinedIngestGivesWhatTheSerialPathGives) {
    auto lines = read_lines("full-run.sender.log");
    ASSERT_GT(lines.size(), 200u);
    constexpr std::size_t kBatch = 29;
    IngestRun serial;
    {
        LogParser parser(fixture_year());
        for (std::size_t i = 0; i < lines.size(); i += kBatch) {
            std::span<const std::string> batch(lines.data() + i, std::min(kBatch, lines.size() - i));
            ASSERT_TRUE(serial.ingestor->ingest_lines(parser, batch, std::nullopt).ok());
        }
    }
    PipelinedRun piped;
    LogParser parser(fixture_year());
    piped.feed(lines, 0, lines.size(), kBatch, 3, parser);
    auto last = piped.run.ingestor->finish_pipeline();
    if (last) piped.saves.push_back(*last);
    for (int u : piped.in_use) EXPECT_EQ(u, 0) << "every batch came back once";
    ASSERT_GE(piped.saves.size(), 2u);
    for (const auto& s : piped.saves) EXPECT_TRUE(s.ok()) << s.error().message;

    ASSERT_FALSE(serial.verdicts.empty());
    EXPECT_EQ(piped.run.verdicts, serial.verdicts);
    EXPECT_EQ(piped.run.ingestor->engine().save_state(), serial.ingestor->engine().save_state());
    EXPECT_EQ(piped.run.ingestor->verdict_seq(), serial.ingestor->verdict_seq());
    EXPECT_EQ(piped.run.ingestor->journal_seq(), serial.ingestor->journal_seq());
    EXPECT_EQ(piped.run.ingestor->stats().applied, serial.ingestor->stats().applied);
    EXPECT_EQ(piped.run.ingestor->stats().verdicts, serial.ingestor->stats().verdicts);
    EXPECT_EQ(piped.run.ingestor->stats().by_category, serial.ingestor->stats().by_category);
    auto pc = piped.run.tl.ledger->verdict_counts();
    auto sc = serial.tl.ledger->verdict_counts();
    ASSERT_TRUE(pc.ok() && sc.ok());
    EXPECT_EQ(*pc, *sc);
    auto pd = piped.run.tl.ledger->list_destinations({});
    auto sd = serial.tl.ledger->list_destinations({});
    ASSERT_TRUE(pd.ok() && sd.ok());
    ASSERT_EQ(pd->size(), sd->size());
    for (std::size_t i = 0; i < pd->size(); ++i) EXPECT_EQ((*pd)[i].state, (*sd)[i].state) << (*pd)[i].name;

    // The snapshots were saved: the state in the ledger restores into an
    // engine that, fed what the journal still holds, is the serial one.
    Ingestor restored(*piped.run.tl.ledger, classifier(), EngineSettings{});
    ASSERT_TRUE(restored.restore().ok());
    EXPECT_LT(restored.stats().replayed, piped.run.ingestor->stats().applied) << "the journal was trimmed";
    EXPECT_EQ(restored.engine().save_state(), serial.ingestor->engine().save_state());
}

TEST(Ingest, PipelinedIngestStoppedWithABatchAtTheEngineResumesExactlyOnce) {
    // The process stops while the engine thread holds a batch whose effects
    // and lines were never applied: the restart replays the journal after the
    // last snapshot and writes those lines, none twice.
    auto lines = read_lines("full-run.sender.log");
    ASSERT_GT(lines.size(), 300u);
    constexpr std::size_t kBatch = 23;
    IngestRun reference;
    {
        LogParser parser(fixture_year());
        ASSERT_TRUE(reference.ingestor->ingest_lines(parser, lines, std::nullopt).ok());
    }
    PipelinedRun crashed;
    LogParser parser(fixture_year());
    const std::size_t cut = 250;
    crashed.feed(lines, 0, cut, kBatch, 4, parser);
    crashed.run.ingestor.reset();  // no finish_pipeline: the last batch's effects are lost with the process

    std::vector<std::string> after;
    Ingestor resumed(*crashed.run.tl.ledger, classifier(), EngineSettings{},
                     [&](const Verdict& v) { after.push_back(format_verdict(v)); });
    ASSERT_TRUE(resumed.restore().ok());
    EXPECT_GT(resumed.stats().replayed, 0u);
    for (std::size_t i = cut; i < lines.size(); i += kBatch) {
        std::span<const std::string> batch(lines.data() + i, std::min(kBatch, lines.size() - i));
        ASSERT_TRUE(resumed.ingest_lines(parser, batch, std::nullopt).ok());
    }
    std::vector<std::string> all(crashed.run.verdicts.begin(), crashed.run.verdicts.end());
    all.insert(all.end(), after.begin(), after.end());
    ASSERT_FALSE(reference.verdicts.empty());
    EXPECT_EQ(all, reference.verdicts) << "every verdict line written exactly once";
    EXPECT_EQ(resumed.engine().save_state(), reference.ingestor->engine().save_state());
    auto counts = crashed.run.tl.ledger->verdict_counts();
    auto ref_counts = reference.tl.ledger->verdict_counts();
    ASSERT_TRUE(counts.ok() && ref_counts.ok());
    EXPECT_EQ(*counts, *ref_counts);
}

TEST(Ingest, CrashBetweenLedgerAndEngineSaveLosesNothing) {
    // The engine saved its state at line 200; the ledger went on to line 400
    // before the crash. The follower resumes at the ledger's 400: the engine
    // replays lines 200-400 from the ledger's journal, and says none of their
    // verdicts twice (their effects are below the ledger's high-water mark).
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
    feed(*crashed.ingestor, 200, 400);  // ledger and journal have it, the saved engine state does not
    auto counts_before = crashed.tl.ledger->verdict_counts();
    ASSERT_TRUE(counts_before.ok());

    std::vector<std::string> after;
    Ingestor resumed(*crashed.tl.ledger, classifier(), EngineSettings{},
                     [&](const Verdict& v) { after.push_back(format_verdict(v)); });
    ASSERT_TRUE(resumed.restore().ok());
    EXPECT_GT(resumed.stats().replayed, 150u) << "lines 200-400 came back from the journal";
    auto counts_restored = crashed.tl.ledger->verdict_counts();
    ASSERT_TRUE(counts_restored.ok());
    EXPECT_EQ(*counts_restored, *counts_before) << "a replay counts no verdict twice";
    ASSERT_EQ(resumed.resume_position(pos.source)->offset, 400u);
    feed(resumed, 400, lines.size());
    EXPECT_EQ(resumed.engine().save_state(), reference.ingestor->engine().save_state());
    EXPECT_EQ(resumed.verdict_seq(), reference.ingestor->verdict_seq());
    std::vector<std::string> all(crashed.verdicts.begin(), crashed.verdicts.end());
    all.insert(all.end(), after.begin(), after.end());
    EXPECT_EQ(all, reference.verdicts) << "every verdict line written exactly once";
    EXPECT_EQ(crashed.ingestor->stats().applied + resumed.stats().applied,
              reference.ingestor->stats().applied);
    auto counts = crashed.tl.ledger->verdict_counts();
    auto ref_counts = reference.tl.ledger->verdict_counts();
    ASSERT_TRUE(counts.ok() && ref_counts.ok());
    EXPECT_EQ(*counts, *ref_counts);
}

TEST(Ingest, VerdictLinesOfACommitTheSinkNeverGotComeBackFromTheOutbox) {
    auto lines = read_lines("full-run.sender.log");
    ASSERT_GT(lines.size(), 400u);
    IngestRun reference;
    {
        LogParser parser(fixture_year());
        ASSERT_TRUE(reference.ingestor->ingest_lines(parser, lines, std::nullopt).ok());
    }
    IngestRun crashed;
    LogParser parser(fixture_year());
    for (std::size_t from = 0; from < 400; from += 50)
        ASSERT_TRUE(
            crashed.ingestor
                ->ingest_lines(parser, std::span<const std::string>(lines.data() + from, 50), std::nullopt)
                .ok());
    // The outbox holds the last effects commit's lines; a crash right after
    // that commit means the sink never got them.
    auto box = crashed.tl.ledger->read_outbox();
    ASSERT_TRUE(box.ok());
    ASSERT_FALSE(box->empty());
    ASSERT_GE(crashed.verdicts.size(), box->size());
    for (auto it = box->rbegin(); it != box->rend(); ++it) {
        EXPECT_EQ(crashed.verdicts.back(), it->line);
        crashed.verdicts.pop_back();
    }

    std::vector<std::string> after;
    Ingestor resumed(*crashed.tl.ledger, classifier(), EngineSettings{},
                     [&](const Verdict& v) { after.push_back(format_verdict(v)); });
    resumed.set_outbox_sink([&](std::span<const OutboxEntry> entries) {
        for (const auto& e : entries) after.push_back(e.line);
        return Ingestor::OutboxReplay{0, entries.size()};
    });
    ASSERT_TRUE(resumed.restore().ok());
    EXPECT_EQ(resumed.stats().outbox_pending, box->size());
    EXPECT_EQ(resumed.stats().verdict_lines_replayed, box->size());
    auto trimmed = crashed.tl.ledger->read_outbox();
    ASSERT_TRUE(trimmed.ok());
    EXPECT_TRUE(trimmed->empty()) << "handed over once: a second crash does not repeat them";
    ASSERT_TRUE(resumed
                    .ingest_lines(parser,
                                  std::span<const std::string>(lines.data() + 400, lines.size() - 400),
                                  std::nullopt)
                    .ok());
    std::vector<std::string> all(crashed.verdicts.begin(), crashed.verdicts.end());
    all.insert(all.end(), after.begin(), after.end());
    EXPECT_EQ(all, reference.verdicts) << "every verdict line written exactly once";

    // A clean save leaves an empty outbox: the next start hands nothing over.
    ASSERT_TRUE(resumed.save().ok());
    auto box_after = crashed.tl.ledger->read_outbox();
    ASSERT_TRUE(box_after.ok());
    EXPECT_TRUE(box_after->empty());
    Ingestor next(*crashed.tl.ledger, classifier(), EngineSettings{}, [](const Verdict&) {});
    ASSERT_TRUE(next.restore().ok());
    EXPECT_EQ(next.stats().outbox_pending, 0u);
}

TEST(Ingest, InvalidUtf8ReplySavesAndRestoresByteExact) {
    IngestRun run;
    LogParser parser(fixture_year());
    std::vector<std::string> lines = {
        "Nov 29 20:48:23 sender postfix/smtp[23714]: 1E661116375: to=<user@utf.test>, "
        "relay=127.0.0.1[127.0.0.1]:25602, delay=0.15, delays=0.01/0/0.08/0.06, dsn=4.3.5, status=deferred "
        "(host 127.0.0.1[127.0.0.1] said: 451 4.3.5 caf\xc3\x28 \xff broken (in reply to RCPT TO command))"};
    ASSERT_TRUE(run.ingestor->ingest_lines(parser, lines, std::nullopt).ok());
    ASSERT_EQ(run.ingestor->stats().events, 1u);
    const auto* d = run.ingestor->engine().destination("utf.test");
    ASSERT_NE(d, nullptr);
    ASSERT_TRUE(d->open.has_value());
    EXPECT_NE(d->open->last_reply.find("caf\xc3\x28 \xff"), std::string::npos);
    ASSERT_TRUE(run.ingestor->save().ok());
    Ingestor restored(*run.tl.ledger, classifier(), EngineSettings{});
    ASSERT_TRUE(restored.restore().ok());
    EXPECT_EQ(restored.engine().save_state(), run.ingestor->engine().save_state());
    EXPECT_EQ(restored.engine().destination("utf.test")->open->last_reply, d->open->last_reply);
    auto view = describe_saved_state(**run.tl.ledger->get_state(Ingestor::kStateKey));
    ASSERT_TRUE(view.ok()) << view.error().message;
    EXPECT_EQ(view->version, 2);
}

TEST(Ingest, FailedRestoreLeavesTheStoredStateUntouched) {
    IngestRun run;
    const std::string garbage("\xa1\x67version\x63odd and more bytes", 25);
    ASSERT_TRUE(run.tl.ledger->put_state(Ingestor::kStateKey, garbage).ok());
    Ingestor ing(*run.tl.ledger, classifier(), EngineSettings{});
    EXPECT_FALSE(ing.restore().ok());
    EXPECT_FALSE(ing.save().ok()) << "a failed restore must not be saved over";
    auto stored = run.tl.ledger->get_state(Ingestor::kStateKey);
    ASSERT_TRUE(stored.ok() && stored->has_value());
    EXPECT_EQ(**stored, garbage);
}

TEST(Ingest, VersionOneJsonStateStillLoads) {
    IngestRun run;
    LogParser parser(fixture_year());
    auto lines = read_lines("full-run.sender.log");
    ASSERT_TRUE(run.ingestor->ingest_lines(parser, lines, std::nullopt).ok());
    // What version 1 saved: JSON text with the engine state as JSON text.
    auto engine_json = nlohmann::json::from_cbor(run.ingestor->engine().save_state()).dump();
    nlohmann::json v1{{"version", 1}, {"positions", nlohmann::json::array()}, {"engine", engine_json}};
    TempLedger fresh;
    ASSERT_TRUE(fresh.ledger->put_state(Ingestor::kStateKey, v1.dump()).ok());
    Ingestor ing(*fresh.ledger, classifier(), EngineSettings{});
    ASSERT_TRUE(ing.restore().ok());
    EXPECT_EQ(ing.engine().save_state(), run.ingestor->engine().save_state());
}

// The envelope around the engine's bytes is written directly as CBOR: it
// must be the map nlohmann::json writes for {version, journal_seq,
// verdict_seq, engine}, and what the save wrote is what saved_state_bytes()
// says.
TEST(Ingest, SavedStateEnvelopeIsWhatTheJsonTreeEncodes) {
    IngestRun run;
    LogParser parser(fixture_year());
    auto lines = read_lines("full-run.sender.log");
    ASSERT_TRUE(run.ingestor->ingest_lines(parser, lines, std::nullopt).ok());
    ASSERT_TRUE(run.ingestor->save().ok());
    auto saved = run.tl.ledger->get_state(Ingestor::kStateKey);
    ASSERT_TRUE(saved.ok() && saved->has_value());
    const std::string& bytes = **saved;
    EXPECT_EQ(run.ingestor->saved_state_bytes(), bytes.size());
    const auto tree = nlohmann::json::from_cbor(bytes);
    const auto again = nlohmann::json::to_cbor(tree);
    EXPECT_EQ(std::string(again.begin(), again.end()), bytes);
    EXPECT_EQ(tree.at("version"), 2);
    EXPECT_EQ(tree.at("journal_seq").get<std::uint64_t>(), run.ingestor->journal_seq());
    EXPECT_EQ(tree.at("verdict_seq").get<std::uint64_t>(), run.ingestor->verdict_seq());
    const auto& engine = tree.at("engine").get_binary();
    EXPECT_EQ(std::string(engine.begin(), engine.end()), run.ingestor->engine().save_state());
}

// A save follows the interval (batches or lines), but no sooner than the
// last saved state's size allows at state_bytes_per_line.
TEST(SaveSchedule, FollowsTheIntervalAndTheSizeOfTheState) {
    SaveSchedule s({.every_batches = 50, .every_lines = 100000, .state_bytes_per_line = 16});
    EXPECT_FALSE(s.due(10000, 0));
    for (int i = 0; i < 9; ++i) s.done(10000, false);
    EXPECT_TRUE(s.due(10000, 0)) << "100,000 lines";
    EXPECT_TRUE(s.due(10000, 1600000)) << "a 1.6 MB state needs 100,000 lines";
    EXPECT_FALSE(s.due(10000, 1600001));
    EXPECT_FALSE(s.due(10000, 20000000)) << "a 20 MB state waits for 1.25M lines";
    for (int i = 0; i < 114; ++i) s.done(10000, false);
    EXPECT_FALSE(s.due(10000, 20000000));
    s.done(10000, false);
    EXPECT_TRUE(s.due(10000, 20000000));
    s.done(10000, true);
    EXPECT_EQ(s.lines_since_save(), 0u);
    EXPECT_FALSE(s.due(10000, 0));

    SaveSchedule small({.every_batches = 50, .every_lines = 100000, .state_bytes_per_line = 16});
    for (int i = 0; i < 49; ++i) small.done(700, false);
    EXPECT_TRUE(small.due(700, 0)) << "the 50th batch of 700 lines";
    EXPECT_TRUE(small.due(700, 35000 * 16));
    EXPECT_FALSE(small.due(700, 35000 * 16 + 1));
}

// The size rule alone, as the log follower applies it on its own clock: the
// lines since the last save against the saved state's size, reset by a save.
TEST(SaveSchedule, TheSizeRuleAloneCountsLinesSinceTheLastSave) {
    SaveSchedule s;  // the defaults the follower uses: 16 bytes per line
    EXPECT_TRUE(s.size_reached(0, 0)) << "nothing saved yet";
    EXPECT_FALSE(s.size_reached(0, 13000000));
    for (int i = 0; i < 406; ++i) s.done(2000, false);
    EXPECT_FALSE(s.size_reached(0, 13000000)) << "812,000 lines: 12,992,000 bytes";
    EXPECT_TRUE(s.size_reached(500, 13000000));
    s.done(500, false);
    EXPECT_TRUE(s.size_reached(0, 13000000));
    s.done(0, true);
    EXPECT_FALSE(s.size_reached(0, 13000000));
    EXPECT_FALSE(s.size_reached(2000, 32001));
    EXPECT_TRUE(s.size_reached(2000, 32000));
}

}  // namespace
}  // namespace retryguard
