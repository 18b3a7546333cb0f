// The ledger operation an event becomes (core/ledger/common.cpp): the ingest
// paths plan a batch's events one after the other into one reused Op
// (plan_ledger_op), which must leave nothing of the event before.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "../../core/ledger/internal.hpp"
#include "retryguard/classify/classifier.hpp"
#include "retryguard/ingest/ingest.hpp"
#include "retryguard/log/log_parser.hpp"

namespace retryguard::ledger_detail {
namespace {

namespace fs = std::filesystem;

// Every event of every real Postfix 3.7 fixture, in file order.
std::vector<IngestItem> fixture_items() {
    LogParserOptions o;
    o.year = 2026;
    o.local_time = false;
    LogParser parser(o);
    std::vector<fs::path> files;
    for (const auto& f : fs::directory_iterator(fs::path(RETRYGUARD_FIXTURES) / "postfix-3.7"))
        if (f.path().extension() == ".log") files.push_back(f.path());
    std::sort(files.begin(), files.end());
    std::vector<IngestItem> items;
    for (const auto& file : files) {
        std::ifstream in(file);
        for (std::string line; std::getline(in, line);) {
            IngestItem item;
            if (!line.starts_with("#") && parser.parse(line, item.event)) items.push_back(std::move(item));
        }
    }
    return items;
}

auto fields(const Op& op) {
    return std::tie(op.key, op.kind, op.time, op.queue_id, op.host, op.other_id, op.text, op.resent, op.size,
                    op.nrcpt, op.outcome, op.recipient, op.domain, op.relay, op.code, op.enhanced, op.reason,
                    op.stage, op.category, op.domain_hash, op.relay_hash);
}

TEST(LedgerPlan, AnOpPlannedIntoAgainHoldsOnlyTheNewEvent) {
    auto items = fixture_items();
    ASSERT_GT(items.size(), 100u);
    EventKeyer keyer;
    keyer.secret.fill(7);
    // Each kind the fixtures hold, so that every field is set by some event
    // and then left empty or default by another.
    std::size_t deliveries_with_reply = 0, pickups = 0, message_ids = 0, actives = 0, unqueued = 0;
    for (const auto& item : items) {
        const Op op = plan(item, keyer);
        deliveries_with_reply += op.kind == OpKind::delivery && op.code != 0 && !op.stage.empty();
        pickups += op.kind == OpKind::pickup;
        message_ids += op.kind == OpKind::message_id;
        actives += op.kind == OpKind::queue_active;
        unqueued += op.queue_id.empty();
    }
    EXPECT_GT(deliveries_with_reply, 0u);
    EXPECT_GT(pickups, 0u);
    EXPECT_GT(message_ids, 0u);
    EXPECT_GT(actives, 0u);
    EXPECT_GT(unqueued, 0u);

    for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1) std::reverse(items.begin(), items.end());
        Op reused;
        for (std::size_t i = 0; i < items.size(); ++i) {
            plan_ledger_op(items[i], keyer, reused);
            const Op fresh = plan(items[i], keyer);
            ASSERT_TRUE(fields(reused) == fields(fresh))
                << "pass " << pass << ", event " << i << " (queue id " << fresh.queue_id << ")";
        }
    }
}

TEST(LedgerPlan, ABatchPreparedAheadHoldsThePlansTheLedgerWouldMake) {
    // Ingestor::add_line plans each event on an import's reading thread once
    // the batch has the ledger's keyer; the ledger then uses item.op as it is.
    LogParserOptions o;
    o.year = 2026;
    o.local_time = false;
    auto c = Classifier::load();
    ASSERT_TRUE(c.ok());
    std::vector<std::string> lines;
    for (const auto& f : fs::directory_iterator(fs::path(RETRYGUARD_FIXTURES) / "postfix-3.7")) {
        if (f.path().extension() != ".log") continue;
        std::ifstream in(f.path());
        for (std::string line; std::getline(in, line);)
            if (!line.starts_with("#")) lines.push_back(line);
    }
    EventKeyer keyer;
    keyer.secret.fill(9);
    PreparedBatch unkeyed, keyed;
    keyed.keyer = keyer;
    LogParser p1(o), p2(o);
    for (const auto& line : lines) {
        Ingestor::add_line(unkeyed, p1, *c, line, {});
        Ingestor::add_line(keyed, p2, *c, line, {});
    }
    ASSERT_GT(keyed.count, 100u);
    ASSERT_EQ(keyed.count, unkeyed.count);
    std::size_t deliveries = 0;
    for (std::size_t i = 0; i < keyed.count; ++i) {
        const IngestItem& item = keyed.items[i];
        ASSERT_TRUE(item.planned) << i;
        EXPECT_FALSE(unkeyed.items[i].planned) << "no keyer: the ledger plans";
        const Op mine = plan(unkeyed.items[i], keyer);
        ASSERT_TRUE(fields(item.op) == fields(mine)) << "event " << i;
        deliveries += mine.kind == OpKind::delivery;
        if (mine.kind == OpKind::delivery) {
            EXPECT_EQ(mine.domain_hash, destination_hash("domain", mine.domain));
            EXPECT_EQ(mine.relay_hash, destination_hash("relay", mine.relay));
            EXPECT_NE(mine.domain_hash, destination_hash("relay", mine.domain)) << "the kind is in the hash";
        }
    }
    EXPECT_GT(deliveries, 10u);
    // The item keeps its buffers for the next use but not its plan: a line
    // that is not an event leaves the slot unplanned.
    keyed.clear();
    Ingestor::add_line(keyed, p2, *c, "not a log line", {});
    EXPECT_EQ(keyed.count, 0u);
    EXPECT_FALSE(keyed.items[0].planned);
}

}  // namespace
}  // namespace retryguard::ledger_detail
