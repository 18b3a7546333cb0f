// report_period_test.cpp -- the period report and its HTML page (core/report
// html_report.cpp, incidents.cpp) over a ledger fed a synthetic month through
// the real ingest path: a local outage becomes one incident row with its
// destinations folded in, greylisting that delivered and single deferrals
// become counts, escalations (open and closed) come with their notes, the
// timelines are worst first and capped with the rest counted, and the page is
// one file with no script and nothing loaded from outside. The reports read in
// one go what they used to read destination by destination, and give the same
// answers; `destinations` pages are slices of its whole listing in every order.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "../../core/report/report_internal.hpp"
#include "retryguard/config/config_engine.hpp"
#include "retryguard/ingest/ingest.hpp"
#include "retryguard/report/report.hpp"

namespace retryguard {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;

TimePoint at(const char* s) {
    auto t = report::parse_rfc3339(s);
    EXPECT_TRUE(t.ok()) << s;
    return t ? *t : TimePoint{};
}

// Postfix 3.7 smtp lines of a synthetic relay, in time order when taken.
class Log {
  public:
    void deferred(TimePoint t, std::string_view rcpt, std::string_view relay, std::string_view dsn,
                  std::string_view reason) {
        add(t, fmt::format("{}: to=<{}>, relay={}, delay=1, delays=0/0/0.5/0.5, dsn={}, status=deferred ({})",
                           qid(rcpt), rcpt, relay, dsn, reason));
    }
    void refused(TimePoint t, std::string_view rcpt, std::string_view host, std::string_view dsn,
                 std::string_view reply) {
        deferred(t, rcpt, fmt::format("{}[192.0.2.7]:25", host), dsn,
                 fmt::format("host {}[192.0.2.7] said: {} (in reply to RCPT TO command)", host, reply));
    }
    void sent(TimePoint t, std::string_view rcpt, std::string_view host) {
        add(t, fmt::format("{}: to=<{}>, relay={}[192.0.2.7]:25, delay=1, delays=0/0/0.5/0.5, dsn=2.0.0, "
                           "status=sent (250 2.0.0 Ok: queued as 4F2A)",
                           qid(rcpt), rcpt, host));
    }
    // The lines up to `until`, in time order.
    std::vector<std::string> lines_until(TimePoint until) {
        std::stable_sort(lines_.begin(), lines_.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        std::vector<std::string> out;
        for (const auto& [t, l] : lines_)
            if (t <= until) out.push_back(l);
        return out;
    }

  private:
    // One message per recipient: its queue id is derived from the address.
    std::string qid(std::string_view rcpt) {
        auto it = std::find(rcpts_.begin(), rcpts_.end(), rcpt);
        if (it == rcpts_.end()) it = rcpts_.insert(rcpts_.end(), std::string(rcpt));
        return fmt::format("{:011X}", 0xA0000000ULL + static_cast<unsigned long long>(it - rcpts_.begin()));
    }
    void add(TimePoint t, std::string text) {
        const auto secs = std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
        std::time_t tt = static_cast<std::time_t>(secs);
        std::tm tm{};
        gmtime_r(&tt, &tm);
        char stamp[32];
        std::strftime(stamp, sizeof stamp, "%b %d %H:%M:%S", &tm);
        lines_.emplace_back(
            t, fmt::format("{} relay1 postfix/smtp[{}]: {}", stamp, 2000 + lines_.size() % 50, text));
    }
    std::vector<std::pair<TimePoint, std::string>> lines_;
    std::vector<std::string> rcpts_;
};

constexpr int kOutageDomains = 14;  // spread.min_destinations is 10

// The month: two receiver-config outages (one closed after escalating, one
// open and escalated), a local network outage over 14 domains, greylisting
// and single deferrals that delivered, and a receiver-system episode of three
// deferrals that ended.
Log month() {
    Log log;
    const std::string cfg_reply =
        "451 4.3.5 <user@{}>: Recipient address rejected: Server configuration error";
    for (TimePoint t = at("2026-11-10T00:00:00Z"); t <= at("2026-11-11T12:00:00Z"); t += 30min)
        log.refused(t, "user@x-closed.test", "mx.x-closed.test", "4.3.5",
                    fmt::format(fmt::runtime(cfg_reply), "x-closed.test"));
    log.sent(at("2026-11-11T12:30:00Z"), "user@x-closed.test", "mx.x-closed.test");
    for (TimePoint t = at("2026-11-18T10:00:00Z"); t <= at("2026-11-20T11:00:00Z"); t += 1h)
        log.refused(t, "user@esc-open.test", "mx.esc-open.test", "4.3.5",
                    fmt::format(fmt::runtime(cfg_reply), "esc-open.test"));
    for (int i = 0; i < kOutageDomains; ++i) {
        const std::string d = fmt::format("o{:02}.test", i);
        for (int k = 0; k < 3; ++k)
            log.deferred(at("2026-11-15T10:00:00Z") + std::chrono::seconds(20 * i) + k * 30min, "a@" + d,
                         "none", "4.4.1",
                         fmt::format("connect to mx.{}[192.0.2.{}]:25: Connection timed out", d, i + 1));
        log.sent(at("2026-11-15T11:30:00Z") + std::chrono::seconds(10 * i), "a@" + d, "mx." + d);
    }
    for (int i = 1; i <= 3; ++i) {
        const std::string d = fmt::format("g{}.test", i);
        log.refused(
            at("2026-11-12T09:00:00Z") + i * 1min, "a@" + d, "mx." + d, "4.7.1",
            "450 4.7.1 <a@" + d + ">: Recipient address rejected: Greylisted, see http://postgrey.example/");
        log.sent(at("2026-11-12T09:06:00Z") + i * 1min, "a@" + d, "mx." + d);
    }
    for (int i = 1; i <= 2; ++i) {
        const std::string d = fmt::format("b{}.test", i);
        log.refused(at("2026-11-13T08:00:00Z") + i * 1min, "a@" + d, "mx." + d, "4.2.2",
                    "452 4.2.2 <a@" + d + ">: Mailbox full");
        log.sent(at("2026-11-13T09:00:00Z") + i * 1min, "a@" + d, "mx." + d);
    }
    for (int k = 0; k < 3; ++k)
        log.refused(at("2026-11-14T08:00:00Z") + k * 40min, "user@slow.test", "mx.slow.test", "4.3.0",
                    "451 4.3.0 <user@slow.test>: Temporary system problem");
    log.sent(at("2026-11-14T10:30:00Z"), "user@slow.test", "mx.slow.test");
    log.sent(at("2026-11-19T10:00:00Z"), "x@ok.test", "mx.ok.test");
    return log;
}

class ReportPeriod : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / fmt::format("rg-period-{}-{}", ::getpid(), counter_++);
        fs::create_directories(dir_);
        auto l = open_ledger("sqlite:" + (dir_ / "ledger.db").string());
        ASSERT_TRUE(l.ok()) << l.error().message;
        ledger_ = std::move(*l);
        config_ = config::defaults();
    }
    void TearDown() override {
        ledger_.reset();
        fs::remove_all(dir_);
    }

    // Feeds the lines up to `until` through the ingest path, as an import does.
    void import(Log log, TimePoint until) {
        auto classifier = Classifier::load();
        ASSERT_TRUE(classifier.ok()) << classifier.error().message;
        Ingestor ingestor(*ledger_, std::make_shared<const Classifier>(std::move(*classifier)),
                          config::to_engine_settings(config_));
        LogParserOptions o;
        o.year = 2026;
        o.local_time = false;
        LogParser parser(o);
        const auto lines = log.lines_until(until);
        ASSERT_TRUE(ingestor.ingest_lines(parser, lines, std::nullopt).ok());
        ASSERT_TRUE(ingestor.advance(until).ok());
        ASSERT_TRUE(ingestor.save().ok());
    }

    json period(TimePoint now, std::size_t rows = report::kReportTimelineRows) {
        auto doc = report::period_report(*ledger_, *config_, now, 30, rows);
        EXPECT_TRUE(doc.ok()) << doc.error().message;
        return doc ? *doc : json();
    }

    static std::vector<std::string> row_names(const json& doc) {
        std::vector<std::string> out;
        for (const auto& r : doc.at("timelines").at("rows"))
            out.push_back(r.at("kind").get<std::string>() + ":" + r.at("name").get<std::string>());
        return out;
    }

    fs::path dir_;
    std::unique_ptr<Ledger> ledger_;
    std::shared_ptr<const config::Config> config_;
    static inline int counter_ = 0;
};

const TimePoint kNow = at("2026-11-20T12:00:00Z");

TEST_F(ReportPeriod, AnEndedOutageIsOneIncidentWithItsDestinationsFoldedIn) {
    import(month(), kNow);
    const json doc = period(kNow);
    ASSERT_EQ(doc.at("incidents").size(), 1u) << doc.at("incidents").dump();
    const json& i = doc.at("incidents")[0];
    EXPECT_EQ(i.at("category"), "network");
    EXPECT_EQ(i.at("source"), "ledger") << "ended: rebuilt from the episodes";
    EXPECT_EQ(i.at("destinations"), kOutageDomains);
    EXPECT_EQ(i.at("destination_names")[0], "o00.test");
    EXPECT_EQ(i.at("deferrals"), 3 * kOutageDomains);
    const TimePoint started = at(i.at("started").get<std::string>().c_str());
    EXPECT_GE(started, at("2026-11-15T10:00:00Z"));
    EXPECT_LE(started, at("2026-11-15T10:05:00Z"));
    ASSERT_TRUE(i.at("ended").is_string());
    const TimePoint ended = at(i.at("ended").get<std::string>().c_str());
    EXPECT_GE(ended, at("2026-11-15T11:30:00Z")) << "ended by the deliveries that resumed";
    EXPECT_LE(ended, at("2026-11-15T11:35:00Z"));
    for (const auto& name : row_names(doc)) EXPECT_EQ(name.find(":o"), std::string::npos) << name;
    EXPECT_EQ(doc.at("folded").at("incident_destinations"), kOutageDomains);
    // The same through `incidents`.
    auto only = report::incidents(*ledger_, *config_, kNow, std::chrono::hours(24 * 30));
    ASSERT_TRUE(only.ok());
    EXPECT_EQ(only->at("incidents"), doc.at("incidents"));
}

TEST_F(ReportPeriod, AnOpenOutageIsTheEnginesIncident) {
    const TimePoint mid = at("2026-11-15T10:45:00Z");
    import(month(), mid);
    const json doc = period(mid);
    ASSERT_EQ(doc.at("incidents").size(), 1u) << doc.at("incidents").dump();
    const json& i = doc.at("incidents")[0];
    EXPECT_EQ(i.at("source"), "engine");
    EXPECT_TRUE(i.at("ended").is_null());
    EXPECT_GE(i.at("destinations").get<int>(), 10);
    EXPECT_GT(i.at("absorbed").get<int>(), 0);
    const std::string page = report::render_html_report(doc);
    EXPECT_NE(page.find("A local-outbound incident (network) is open since"), std::string::npos);
}

TEST_F(ReportPeriod, NoIncidentWhereTheEngineOpenedNone) {
    Log log;
    // Many domains with a network deferral each, but hours apart: no spread.
    for (int i = 0; i < 20; ++i) {
        const std::string d = fmt::format("n{:02}.test", i);
        log.deferred(at("2026-11-10T00:00:00Z") + i * 3h, "a@" + d, "none", "4.4.1",
                     "connect to mx." + d + "[192.0.2.1]:25: Connection timed out");
        log.sent(at("2026-11-10T00:20:00Z") + i * 3h, "a@" + d, "mx." + d);
    }
    import(log, kNow);
    const json doc = period(kNow);
    EXPECT_TRUE(doc.at("incidents").empty()) << doc.at("incidents").dump();
    EXPECT_EQ(doc.at("folded").at("single_deferrals"), 20);
}

TEST_F(ReportPeriod, HarmlessPatternsAreCountsNotRows) {
    import(month(), kNow);
    const json doc = period(kNow);
    EXPECT_EQ(doc.at("folded").at("greylisted"), 3);
    EXPECT_EQ(doc.at("folded").at("single_deferrals"), 2);
    for (const auto& name : row_names(doc)) {
        EXPECT_EQ(name.find(":g"), std::string::npos) << name;
        EXPECT_EQ(name.find(":b"), std::string::npos) << name;
    }
    const std::string page = report::render_html_report(doc);
    EXPECT_NE(page.find("3 destinations greylisted and delivered; 2 single deferrals resolved"),
              std::string::npos);
}

TEST_F(ReportPeriod, TimelinesAreWorstFirstAndSayWhatTheyLeaveOut) {
    import(month(), kNow);
    const json doc = period(kNow);
    const auto names = row_names(doc);
    auto pos = [&](const std::string& n) {
        return static_cast<std::size_t>(std::find(names.begin(), names.end(), n) - names.begin());
    };
    ASSERT_LT(pos("domain:esc-open.test"), names.size()) << doc.at("timelines").dump();
    ASSERT_LT(pos("domain:x-closed.test"), names.size());
    ASSERT_LT(pos("domain:slow.test"), names.size());
    EXPECT_LT(pos("domain:esc-open.test"), pos("domain:x-closed.test")) << "escalated now first";
    EXPECT_LT(pos("domain:x-closed.test"), pos("domain:slow.test")) << "then escalated in the period";
    EXPECT_EQ(doc.at("timelines").at("rows")[0].at("why"), "escalated");
    EXPECT_EQ(doc.at("timelines").at("not_drawn"), 0);
    EXPECT_EQ(doc.at("timelines").at("total"), names.size());

    ASSERT_GE(names.size(), 3u);
    const json capped = period(kNow, 1);
    ASSERT_EQ(capped.at("timelines").at("rows").size(), 1u);
    EXPECT_EQ(capped.at("timelines").at("not_drawn"), names.size() - 1);
    EXPECT_EQ(row_names(capped)[0], names[0]);
    const std::string page = report::render_html_report(capped);
    EXPECT_NE(
        page.find(fmt::format("{} more destinations not drawn; see <code>retryguard destinations</code>",
                              names.size() - 1)),
        std::string::npos);
}

TEST_F(ReportPeriod, EscalationsOpenAndClosedInThePeriodComeWithTheirNotes) {
    import(month(), kNow);
    const json doc = period(kNow);
    std::map<std::string, json> by_name;
    for (const auto& e : doc.at("escalations"))
        if (e.at("kind") == "domain") by_name[e.at("name").get<std::string>()] = e;
    ASSERT_TRUE(by_name.count("esc-open.test")) << doc.at("escalations").dump();
    ASSERT_TRUE(by_name.count("x-closed.test")) << doc.at("escalations").dump();
    EXPECT_EQ(by_name["esc-open.test"].at("status"), "open");
    EXPECT_EQ(by_name["x-closed.test"].at("status"), "closed");
    for (const auto& [name, e] : by_name)
        EXPECT_NE(e.at("note").get<std::string>().find("Mail to " + name + " has been deferred"),
                  std::string::npos)
            << e.dump();
    // The MX host's escalation over the same deferrals is named with its domain, not repeated.
    // (x-closed.test sorts after its MX host's engine key "mx:mx.x-closed.test".)
    EXPECT_EQ(by_name["esc-open.test"].at("also_mx"), json::array({"mx.esc-open.test"}));
    EXPECT_EQ(by_name["x-closed.test"].at("also_mx"), json::array({"mx.x-closed.test"}));
    for (const auto& e : doc.at("escalations")) EXPECT_EQ(e.at("kind"), "domain") << e.dump();
    const std::string page = report::render_html_report(doc);
    EXPECT_NE(page.find("Subject: Mail to x-closed.test has been deferred"), std::string::npos);
    EXPECT_NE(page.find("esc-open.test (and mx mx.esc-open.test)"), std::string::npos);
    EXPECT_NE(page.find("is escalated: send <a href=\"#escalation-"), std::string::npos);
}

TEST_F(ReportPeriod, TheSendingPostfixsOwnEscalationIsForThisHostNotAPostmaster) {
    // The local transport fails for two hours (local escalates after 1 h),
    // then nothing more: the episode is open and escalated at 12:00 and
    // closed after spread.quiet_period (2 h) at 14:00.
    Log log;
    for (TimePoint t = at("2026-11-15T10:00:00Z"); t <= at("2026-11-15T12:00:00Z"); t += 20min)
        log.deferred(t, "a@far.test", "none", "4.3.0", "mail transport unavailable");
    auto check = [&](TimePoint now, const char* status) {
        auto doc =
            report::escalations(*ledger_, *config_, now, report::EscalationQuery{std::chrono::hours(48), {}});
        ASSERT_TRUE(doc.ok()) << doc.error().message;
        const json* local = nullptr;
        for (const auto& e : doc->at("escalations"))
            if (e.at("name") == "local:postfix") local = &e;
        ASSERT_NE(local, nullptr) << doc->dump();
        EXPECT_EQ(local->at("status"), status) << local->dump();
        EXPECT_EQ(local->at("side"), "local") << local->dump();
        const std::string note = report::escalation_note(*local);
        EXPECT_EQ(note.find("postmaster"), std::string::npos) << note;
        EXPECT_NE(note.find("mail transport unavailable"), std::string::npos) << note;
        const std::string text = report::render_escalations(*doc, report::RenderOptions{});
        EXPECT_EQ(text.find("postmaster"), std::string::npos) << text;
        EXPECT_EQ(text.find("destinations[].contact"), std::string::npos) << text;
        if (std::string(status) == "open") {
            EXPECT_NE(text.find("== local:postfix (the sending Postfix itself) ==\nFailing since"),
                      std::string::npos)
                << text;
        }
        // The destinations listing shows the same episode, not an empty row.
        auto listing = report::destinations(*ledger_, report::DestinationQuery{}, now);
        ASSERT_TRUE(listing.ok()) << listing.error().message;
        const json* row = nullptr;
        for (const auto& d : listing->at("destinations"))
            if (d.at("name") == "local:postfix") row = &d;
        ASSERT_NE(row, nullptr) << listing->dump();
        EXPECT_EQ(row->at("last_deferral"), "2026-11-15T12:00:00Z") << row->dump();
        if (std::string(status) == "open") {
            EXPECT_EQ(row->at("attempts"), 7) << row->dump();
            EXPECT_EQ(row->at("category"), "local") << row->dump();
            EXPECT_EQ(row->at("last_reply"), "mail transport unavailable") << row->dump();
            EXPECT_EQ(row->at("first_deferral"), "2026-11-15T10:00:00Z") << row->dump();
        } else {
            EXPECT_EQ(row->at("episode_open"), false) << row->dump();
        }
    };
    import(log, at("2026-11-15T12:10:00Z"));
    check(at("2026-11-15T12:10:00Z"), "open");
    const json doc = period(at("2026-11-15T12:10:00Z"));
    const std::string page = report::render_html_report(doc);
    EXPECT_NE(page.find("The sending Postfix</span> has been failing on its own side"), std::string::npos);
    EXPECT_EQ(page.find("the receiving side's postmaster"), std::string::npos);
    EXPECT_NE(page.find("the sending Postfix, local:postfix &middot; open"), std::string::npos);
    // The same log imported up to 16:00 into a fresh ledger: the episode ended at 14:00.
    TearDown();
    SetUp();
    import(log, at("2026-11-15T16:00:00Z"));
    check(at("2026-11-15T16:00:00Z"), "closed");
}

TEST_F(ReportPeriod, SummaryCountsDeferralsByCategoryOncePerDeferral) {
    import(month(), kNow);
    const json doc = period(kNow);
    std::map<std::string, std::int64_t> by;
    for (const auto& c : doc.at("summary").at("categories"))
        by[c.at("category").get<std::string>()] = c.at("deferrals").get<std::int64_t>();
    EXPECT_EQ(by["network"], 3 * kOutageDomains);
    EXPECT_EQ(by["greylisting"], 3);
    EXPECT_EQ(by["receiver-system"], 3);
    EXPECT_EQ(by["receiver-config"], 73 + 50);
    std::int64_t total = 0;
    for (const auto& [c, n] : by) total += n;
    EXPECT_EQ(doc.at("summary").at("deferrals"), total);
    EXPECT_GE(doc.at("summary").at("destinations_delivered").get<int>(), kOutageDomains + 6);
    // every domain delivered to counts at least one delivered recipient
    EXPECT_GE(doc.at("summary").at("deliveries").get<int>(),
              doc.at("summary").at("destinations_delivered").get<int>());
}

TEST_F(ReportPeriod, ThePageIsOneFileInTheDocumentedOrder) {
    import(month(), kNow);
    const std::string page = report::render_html_report(period(kNow));
    EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
    std::size_t last = 0;
    for (const char* id : {"summary", "folded", "deferrals-by-category", "escalations", "flags", "incidents",
                           "timelines", "categories-over-time"}) {
        const auto p = page.find(fmt::format("id=\"{}\"", id));
        ASSERT_NE(p, std::string::npos) << id;
        EXPECT_GT(p, last) << id << " out of order";
        last = p;
    }
    EXPECT_NE(page.find("<details><summary>14 destinations</summary><ul><li>o00.test</li>"),
              std::string::npos);
    EXPECT_NE(page.find("<svg id=\"timeline-incident-1\""), std::string::npos);
    EXPECT_NE(page.find("<svg id=\"timeline-domain-esc-open.test\" viewBox="), std::string::npos);
    EXPECT_EQ(page.find("<svg id=\"timeline-mx-mx.esc-open.test\""), std::string::npos)
        << "drawn with its domain";
    EXPECT_NE(page.find("via mx.esc-open.test"), std::string::npos);
    EXPECT_NE(page.find("name=\"viewport\""), std::string::npos);
    EXPECT_NE(page.find("@media (max-width:640px)"), std::string::npos);
    EXPECT_NE(page.find("<div class=\"axis\"><span style=\"left:"), std::string::npos) << "a date axis";
    EXPECT_TRUE(std::regex_search(page, std::regex("<span style=\"left:[0-9.]+%\">Nov [0-9]{2}</span>")))
        << "ticks carry dates";
    // Reply text is escaped; no script, nothing from outside.
    EXPECT_NE(page.find("&lt;user@slow.test&gt;"), std::string::npos);
    EXPECT_EQ(page.find("<user@"), std::string::npos);
    EXPECT_EQ(page.find("<script"), std::string::npos);
    EXPECT_EQ(page.find("<b>"), std::string::npos) << "kept for outside markup, which is never raw";
    EXPECT_EQ(page.find("src="), std::string::npos);
    EXPECT_EQ(page.find("href=\"http"), std::string::npos);
    EXPECT_EQ(page.find("url("), std::string::npos);
}

TEST_F(ReportPeriod, AnEmptyLedgerSaysThereIsNothingToDo) {
    const std::string page = report::render_html_report(period(kNow));
    EXPECT_NE(page.find("Nothing needs doing"), std::string::npos);
    EXPECT_NE(page.find("None in the period."), std::string::npos);
    EXPECT_NE(page.find("0 destinations greylisted and delivered; 0 single deferrals resolved"),
              std::string::npos);
}

TEST_F(ReportPeriod, DenseEpisodesMergeIntoBarsThatSayHowManyTheyHold) {
    Log log;
    // Two deferrals then a delivery every 10 minutes for 200 rounds, on an
    // axis of almost four weeks (an old deferral elsewhere starts it).
    for (int i = 0; i < 200; ++i) {
        const TimePoint t = at("2026-11-18T00:00:00Z") + i * 10min;
        const std::string rcpt = fmt::format("u{}@busy.test", i);
        log.refused(t, rcpt, "mx.busy.test", "4.2.2", "452 4.2.2 Mailbox full");
        log.refused(t + 2min, rcpt, "mx.busy.test", "4.2.2", "452 4.2.2 Mailbox full");
        log.sent(t + 4min, rcpt, "mx.busy.test");
    }
    log.refused(at("2026-10-24T00:00:00Z"), "a@old.test", "mx.old.test", "4.2.2", "452 4.2.2 Mailbox full");
    import(log, kNow);
    const json doc = period(kNow);
    ASSERT_EQ(doc.at("timelines").at("rows").size(), 2u) << doc.at("timelines").dump();
    EXPECT_EQ(doc.at("timelines").at("rows")[1].at("name"), "busy.test");
    EXPECT_EQ(doc.at("timelines").at("rows")[1].at("episodes").size(), 200u) << "the document keeps them all";
    const std::string page = report::render_html_report(doc);
    const auto from = page.find("<svg id=\"timeline-domain-busy.test\"");
    ASSERT_NE(from, std::string::npos);
    const std::string row = page.substr(from, page.find("</svg>", from) - from);
    std::size_t bars = 0;
    for (auto p = row.find("<rect x="); p != std::string::npos; p = row.find("<rect x=", p + 1)) ++bars;
    EXPECT_EQ(bars, 2u) << "the axis line and one bar: " << row;
    EXPECT_NE(row.find("mailbox: 200 episodes, 400 attempts"), std::string::npos) << row;
}

TEST_F(ReportPeriod, AnOutageWithoutDeliveriesEndsAfterTheQuietPeriod) {
    Log log;
    for (int i = 0; i < kOutageDomains; ++i) {
        const std::string d = fmt::format("q{:02}.test", i);
        for (int k = 0; k < 3; ++k)
            log.deferred(at("2026-11-15T10:00:00Z") + std::chrono::seconds(20 * i) + k * 30min, "a@" + d,
                         "none", "4.4.1",
                         fmt::format("connect to mx.{}[192.0.2.{}]:25: Connection timed out", d, i + 1));
    }
    import(log, kNow);
    const json doc = period(kNow);
    ASSERT_EQ(doc.at("incidents").size(), 1u) << doc.at("incidents").dump();
    const json& i = doc.at("incidents")[0];
    EXPECT_EQ(i.at("destinations"), kOutageDomains);
    ASSERT_TRUE(i.at("ended").is_string()) << i.dump();
    // The last deferral (11:04:20) plus spread.quiet_period (2 h).
    EXPECT_EQ(i.at("ended"), "2026-11-15T13:04:20Z");
    EXPECT_TRUE(doc.at("timelines").at("rows").empty()) << "its open episodes are the incident's";
}

// A ledger whose reads for many destinations at once are answered as the
// reports used to read them: every destination listed, then each one's
// history asked for in turn; and whose saved engine state is handed over as
// version 1 wrote it (JSON text), which the reports read whole where they read
// a CBOR state a destination at a time. Everything else is the ledger's own.
class PerDestinationReads final : public LedgerReports {
  public:
    explicit PerDestinationReads(LedgerReports& inner) : inner_(inner) {}

    Result<std::map<std::string, std::int64_t>> count_destinations_by_state() override {
        auto all = inner_.list_destinations(DestinationFilter{});
        if (!all) return all.error();
        std::map<std::string, std::int64_t> out;
        for (const auto& d : *all) ++out[d.state];
        return out;
    }
    Result<std::int64_t> count_destinations_delivered(DestinationKind kind, TimePoint since) override {
        auto all = inner_.list_destinations(DestinationFilter{});
        if (!all) return all.error();
        std::int64_t n = 0;
        for (const auto& d : *all) n += d.kind == kind && d.last_success && *d.last_success >= since;
        return n;
    }
    Result<std::vector<Episode>> episodes_between(TimePoint from, TimePoint to) override {
        auto all = inner_.list_destinations(DestinationFilter{});
        if (!all) return all.error();
        std::vector<Episode> out;
        for (const auto& d : *all) {
            auto h = inner_.episode_history(d.kind, d.name, from, to);
            if (!h) return h.error();
            out.insert(out.end(), h->begin(), h->end());
        }
        return out;
    }

    Result<std::optional<MessageInfo>> get_message(std::string_view q) override {
        return inner_.get_message(q);
    }
    Result<std::vector<MessageInfo>> find_messages_by_message_id(std::string_view m) override {
        return inner_.find_messages_by_message_id(m);
    }
    Result<std::vector<RecipientInfo>> get_recipients(std::string_view q) override {
        return inner_.get_recipients(q);
    }
    Result<std::int64_t> count_deliveries(TimePoint from, TimePoint to) override {
        return inner_.count_deliveries(from, to);
    }
    Result<std::vector<RecipientInfo>> find_recipients_by_address(std::string_view a,
                                                                  std::size_t limit) override {
        return inner_.find_recipients_by_address(a, limit);
    }
    Result<std::optional<DestinationInfo>> get_destination(DestinationKind kind,
                                                           std::string_view name) override {
        return inner_.get_destination(kind, name);
    }
    Result<std::vector<DestinationInfo>> list_destinations(const DestinationFilter& f) override {
        return inner_.list_destinations(f);
    }
    Result<std::vector<Episode>> episode_history(DestinationKind kind, std::string_view name, TimePoint from,
                                                 TimePoint to) override {
        return inner_.episode_history(kind, name, from, to);
    }
    Result<std::vector<Flag>> list_flags(std::optional<std::string_view> destination, TimePoint now,
                                         bool include_inactive) override {
        return inner_.list_flags(destination, now, include_inactive);
    }
    Result<std::map<std::string, std::int64_t>> verdict_counts() override { return inner_.verdict_counts(); }
    Result<std::optional<std::string>> get_state(std::string_view key) override {
        auto s = inner_.get_state(key);
        if (!s || !*s || key != "engine" || (*s)->empty() || (*s)->front() == '{') return s;
        const auto envelope = nlohmann::json::from_cbor(**s);
        const auto& bin = envelope.at("engine").get_binary();
        const auto engine = nlohmann::json::from_cbor(bin);
        const nlohmann::json v1{
            {"version", 1},
            {"positions", nlohmann::json::array()},
            {"engine", engine.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)}};
        return std::optional<std::string>(v1.dump());
    }
    Result<std::optional<FollowerPosition>> load_position(std::string_view source) override {
        return inner_.load_position(source);
    }
    Result<LedgerStats> stats() override { return inner_.stats(); }
    LedgerCounters counters() const noexcept override { return inner_.counters(); }

  private:
    LedgerReports& inner_;
};

class ReportReads : public ReportPeriod {
  protected:
    // The period report, the incidents and the status's counts by state, read
    // both ways at `now`.
    void expect_same_answers(TimePoint now) {
        PerDestinationReads old_way(*ledger_);
        for (int days : {30, 5, 1}) {
            auto fresh = report::period_report(*ledger_, *config_, now, days);
            auto before = report::period_report(old_way, *config_, now, days);
            ASSERT_TRUE(fresh.ok() && before.ok());
            EXPECT_EQ(*fresh, *before) << days << " days";
            EXPECT_EQ(report::render_html_report(*fresh), report::render_html_report(*before));
        }
        auto fresh = report::incidents(*ledger_, *config_, now, 24h * 30);
        auto before = report::incidents(old_way, *config_, now, 24h * 30);
        ASSERT_TRUE(fresh.ok() && before.ok());
        EXPECT_EQ(*fresh, *before);
        const report::StatusInputs in{config_.get(), ""};
        auto status = report::status(*ledger_, in, now);
        auto status_before = report::status(old_way, in, now);
        ASSERT_TRUE(status.ok() && status_before.ok());
        EXPECT_EQ(status->at("destinations_by_state"), status_before->at("destinations_by_state"));
        EXPECT_EQ(status->at("engine"), status_before->at("engine"));
        report::EscalationQuery eq;
        eq.since = 24h * 30;
        auto esc = report::escalations(*ledger_, *config_, now, eq);
        auto esc_before = report::escalations(old_way, *config_, now, eq);
        ASSERT_TRUE(esc.ok() && esc_before.ok());
        EXPECT_EQ(*esc, *esc_before);
        for (const auto& e : esc->at("escalations"))
            ++(e.at("status") == "closed" ? closed_seen_ : open_seen_);
    }
    std::size_t open_seen_ = 0, closed_seen_ = 0;
};

// One destination of a period as text: its row and its episodes.
std::string period_text(const report::detail::DestinationEpisodes& de) {
    const auto& d = de.destination;
    auto t = [](const std::optional<TimePoint>& x) { return x ? format_rfc3339(*x) : std::string("-"); };
    std::string out =
        fmt::format("{}:{} state={} changed={} success={} deferral={} open={}\n", to_string(d.kind), d.name,
                    d.state, t(d.state_changed), t(d.last_success), t(d.last_deferral),
                    d.episode ? format_rfc3339(d.episode->first_deferral) : "-");
    for (const auto& e : de.episodes)
        out += fmt::format("  {}:{} {} {} ended={} {}/{} {} {} {}\n", to_string(e.kind), e.destination,
                           format_rfc3339(e.first_deferral), format_rfc3339(e.last_deferral), t(e.ended),
                           e.attempts, e.messages, e.categories, e.last_relay, e.last_reply);
    return out;
}

// The period as the reports read it before: every destination listed, then
// each one's history of the period and its open episode.
std::vector<std::string> period_destination_by_destination(LedgerReports& ledger, TimePoint from,
                                                           TimePoint to) {
    std::vector<std::string> out;
    auto all = ledger.list_destinations(DestinationFilter{});
    EXPECT_TRUE(all.ok());
    for (auto& d : *all) {
        auto h = ledger.episode_history(d.kind, d.name, from, to);
        EXPECT_TRUE(h.ok());
        report::detail::DestinationEpisodes de{d, *h};
        if (d.episode) de.episodes.push_back(*d.episode);
        if (!de.episodes.empty()) out.push_back(period_text(de));
    }
    return out;
}

std::vector<std::string> period_in_one_go(LedgerReports& ledger, TimePoint from, TimePoint to) {
    std::vector<std::string> out;
    auto period = report::detail::read_period(ledger, from, to);
    EXPECT_TRUE(period.ok()) << period.error().message;
    if (period)
        for (const auto& de : *period) out.push_back(period_text(de));
    return out;
}

// read_period merges the period's ended episodes (one read) with the
// destinations that have an open episode, in listing order, and reads the
// other rows it needs one by one: the same destinations, rows and episodes as
// reading every destination's history. A destination whose row retention
// removed while its episodes stay is in neither.
TEST_F(ReportReads, ThePeriodIsEveryDestinationsHistoryAndOpenEpisode) {
    const TimePoint mid = at("2026-11-15T10:45:00Z");
    import(month(), mid);
    auto check = [&](TimePoint from, TimePoint to) {
        const auto want = period_destination_by_destination(*ledger_, from, to);
        EXPECT_EQ(period_in_one_go(*ledger_, from, to), want)
            << format_rfc3339(from) << " " << format_rfc3339(to);
        return want.size();
    };
    EXPECT_GT(check(mid - 24h * 30, mid), 14u) << "the outage's open episodes and the ended ones";
    EXPECT_GT(check(at("2026-11-12T09:00:00Z"), at("2026-11-12T09:10:00Z")), 14u)
        << "greylisting and the open";
    EXPECT_EQ(check(mid + 24h, mid + 48h), 28u) << "only the outage's open episodes, domains and MX hosts";
    ledger_.reset();
    {
        // Retention removed g1.test's row; its episode stays.
        sqlite3* db = nullptr;
        ASSERT_EQ(sqlite3_open((dir_ / "ledger.db").string().c_str(), &db), SQLITE_OK);
        EXPECT_EQ(
            sqlite3_exec(db, "DELETE FROM destinations WHERE name = 'g1.test'", nullptr, nullptr, nullptr),
            SQLITE_OK);
        sqlite3_close(db);
    }
    auto l = open_ledger("sqlite:" + (dir_ / "ledger.db").string());
    ASSERT_TRUE(l.ok());
    ledger_ = std::move(*l);
    auto kept = ledger_->episode_history(DestinationKind::domain, "g1.test", mid - 24h * 30, mid);
    ASSERT_TRUE(kept.ok());
    EXPECT_EQ(kept->size(), 1u);
    const auto without = period_in_one_go(*ledger_, mid - 24h * 30, mid);
    EXPECT_EQ(without, period_destination_by_destination(*ledger_, mid - 24h * 30, mid));
    bool mx_kept = false;
    for (const auto& text : without) {
        EXPECT_NE(text.rfind("domain:g1.test ", 0), 0u) << text;
        mx_kept |= text.rfind("relay:mx.g1.test ", 0) == 0;
    }
    EXPECT_TRUE(mx_kept) << "its MX host's row is still there";
    check(mid - 24h * 30, mid);
}

TEST_F(ReportReads, AnOpenOutageReadsTheSameInOneGo) {
    const TimePoint mid = at("2026-11-15T10:45:00Z");
    import(month(), mid);
    ASSERT_TRUE(ledger_->set_destination_state(DestinationKind::domain, "o05.test", "watch", mid).ok());
    expect_same_answers(mid);
    const json doc = period(mid);
    EXPECT_EQ(doc.at("incidents").size(), 1u);
    EXPECT_FALSE(doc.at("timelines").at("rows").empty());
}

TEST_F(ReportReads, AMonthReadsTheSameInOneGo) {
    import(month(), kNow);
    expect_same_answers(kNow);
    // Later, with the month's first episodes out of a 5-day period.
    expect_same_answers(kNow + 24h * 3);
    EXPECT_GT(open_seen_, 0u) << "the month's open escalation";
    const json doc = period(kNow);
    EXPECT_GT(doc.at("summary").at("destinations_delivered").get<int>(), 0);
    EXPECT_GT(doc.at("summary").at("episodes").get<int>(), 0);
}

// An escalation that ended is known from the saved engine's history alone:
// read a destination at a time, it is found among the many that never
// escalated, as it is when the state is read whole.
TEST_F(ReportReads, AClosedEscalationReadsTheSameFromTheSavedEngine) {
    Log log = month();
    for (TimePoint t = at("2026-11-01T00:00:00Z"); t <= at("2026-11-04T00:00:00Z"); t += 1h)
        log.refused(t, "user@long.test", "mx.long.test", "4.3.5",
                    "451 4.3.5 <user@long.test>: Recipient address rejected: Server configuration error");
    log.sent(at("2026-11-04T06:00:00Z"), "user@long.test", "mx.long.test");
    import(std::move(log), kNow);
    expect_same_answers(kNow);
    EXPECT_GT(closed_seen_, 0u) << "long.test's escalation, ended on 2026-11-04";
    EXPECT_GT(open_seen_, 0u);
}

// `destinations` sorts only the rows up to its page's end and renders only the
// page: every page is the slice of the whole listing, whose total and count of
// escalated rows it keeps, in every order and under every filter; and the
// whole listing is in the order the documentation gives.
TEST_F(ReportPeriod, DestinationPagesAreSlicesOfTheWholeListingInEveryOrder) {
    const TimePoint mid = at("2026-11-15T10:45:00Z");
    import(month(), mid);
    // A watched, an escalated and two flagged destinations among the open episodes.
    ASSERT_TRUE(ledger_->set_destination_state(DestinationKind::domain, "o05.test", "watch", mid).ok());
    ASSERT_TRUE(ledger_->set_destination_state(DestinationKind::domain, "o09.test", "escalate", mid).ok());
    ASSERT_TRUE(ledger_->set_flag(Flag{0, "o02.test", "test", mid, std::nullopt, std::nullopt}).ok());
    ASSERT_TRUE(ledger_->set_flag(Flag{0, "mx:mx.o07.test", "test", mid, std::nullopt, std::nullopt}).ok());

    auto first_deferral = [](const json& d) {
        return d.at("first_deferral").is_string()
                   ? std::optional<TimePoint>(at(d["first_deferral"].get<std::string>().c_str()))
                   : std::nullopt;
    };
    auto by_name = [](const json& a, const json& b) {
        const auto ka = std::make_pair(a.at("kind") != "domain", a.at("name").get<std::string>());
        const auto kb = std::make_pair(b.at("kind") != "domain", b.at("name").get<std::string>());
        return ka < kb;
    };
    // The documented orders (docs/cli.md), each ending with kind and name.
    auto before = [&](report::DestinationSort sort, const json& a, const json& b) {
        auto rank = [](const json& d) {
            const std::string s = d.at("state");
            return s == "escalate" ? 0 : d.at("flagged").get<bool>() ? 1 : s == "watch" ? 2 : 3;
        };
        auto fa = first_deferral(a), fb = first_deferral(b);
        switch (sort) {
            case report::DestinationSort::worst:
                if (rank(a) != rank(b)) return rank(a) < rank(b);
                [[fallthrough]];
            case report::DestinationSort::age:
                if (fa.has_value() != fb.has_value()) return fa.has_value();
                if (fa && *fa != *fb) return *fa < *fb;
                break;
            case report::DestinationSort::deferrals:
                if (a.at("attempts") != b.at("attempts"))
                    return a.at("attempts").get<std::int64_t>() > b.at("attempts").get<std::int64_t>();
                break;
            case report::DestinationSort::name: break;
        }
        return by_name(a, b);
    };

    std::vector<report::DestinationQuery> filters(4);
    filters[1].kind = DestinationKind::relay;
    filters[2].state = "none";
    filters[3].category = Category::network;
    std::size_t pages = 0;
    for (auto sort : {report::DestinationSort::worst, report::DestinationSort::name,
                      report::DestinationSort::age, report::DestinationSort::deferrals})
        for (auto q : filters) {
            q.sort = sort;
            q.page = {};
            auto whole = report::destinations(*ledger_, q, mid);
            ASSERT_TRUE(whole.ok());
            const json& all = whole->at("destinations");
            const std::size_t n = all.size();
            ASSERT_GE(n, 10u) << whole->dump();
            ASSERT_EQ(whole->at("total"), n);
            for (std::size_t i = 1; i < n; ++i)
                EXPECT_TRUE(before(sort, all[i - 1], all[i]))
                    << report::to_string(sort) << " row " << i << ": " << all[i - 1].dump() << " then "
                    << all[i].dump();
            for (std::size_t offset :
                 {std::size_t{0}, std::size_t{1}, std::size_t{2}, n / 2, n - 1, n, n + 3})
                for (std::size_t limit : {std::size_t{1}, std::size_t{2}, std::size_t{5}, n + 1}) {
                    q.page.offset = offset;
                    q.page.limit = limit;
                    auto page = report::destinations(*ledger_, q, mid);
                    ASSERT_TRUE(page.ok());
                    json slice = json::array();
                    for (std::size_t i = offset; i < std::min(n, offset + limit); ++i)
                        slice.push_back(all[i]);
                    EXPECT_EQ(page->at("destinations"), slice)
                        << report::to_string(sort) << " offset " << offset << " limit " << limit;
                    EXPECT_EQ(page->at("total"), n);
                    EXPECT_EQ(page->at("offset"), offset);
                    EXPECT_EQ(page->at("limit"), limit);
                    EXPECT_EQ(page->at("escalated"), whole->at("escalated"));
                    ++pages;
                }
        }
    EXPECT_EQ(pages, 4u * 4u * 7u * 4u);
    auto escalated = report::destinations(*ledger_, report::DestinationQuery{}, mid);
    ASSERT_TRUE(escalated.ok());
    EXPECT_EQ(escalated->at("escalated"), 1);
    EXPECT_EQ(escalated->at("destinations")[0].at("name"), "o09.test");
    EXPECT_EQ(escalated->at("destinations")[1].at("name"), "o02.test") << "flagged next";
}

}  // namespace
}  // namespace retryguard
