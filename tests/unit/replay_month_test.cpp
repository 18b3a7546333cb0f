// replay_month_test.cpp -- a generated month of a busy relay's log
// (bench/gen_month_log.cpp, with a truth file of planted cases) imported with
// the built CLI into a temporary SQLite ledger: the verdict lines and the
// CLI's JSON must match the truth. One local outage gives exactly one
// incident, and while it is open no destination is judged for deferrals of
// its class; planted receiver-config outages escalate, a receiver-system one
// does not, a repeat offender is flagged, greylisting never escalates, and a
// destination with its own 4.3.5 during the outage is judged on its own.
//
// The scale is 0.05 (seconds); RETRYGUARD_REPLAY_SCALE=1 runs the full month
// (about 800k lines, 20k domains: ctest replay.month_full, label slow).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "retryguard/report/report.hpp"
#include "retryguard/rules/verdict.hpp"

namespace retryguard {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    std::string cur;
    for (char c : s) {
        if (c == sep) {
            out.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    out.push_back(cur);
    return out;
}

TimePoint at(const std::string& rfc3339) {
    auto t = report::parse_rfc3339(rfc3339);
    EXPECT_TRUE(t.ok()) << rfc3339;
    return t ? *t : TimePoint{};
}

struct Line {
    TimePoint time;
    std::string key, name;
    std::map<std::string, std::string> fields;
    std::string text;
};

struct Truth {
    struct Outage {
        TimePoint start, end;
        int domains = 0;
    };
    struct Window {
        std::string domain;
        TimePoint start, end;
    };
    std::vector<Outage> outages;
    std::vector<Window> escalate, no_escalate;
    std::map<std::string, int> repeat_offenders;
    std::vector<std::string> greylist, during_outage;
};

class ReplayMonth : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        const char* env = std::getenv("RETRYGUARD_REPLAY_SCALE");
        scale_ = env && *env ? env : "0.05";
        dir_ = fs::temp_directory_path() / ("rg-replay-" + std::to_string(::getpid()));
        fs::create_directories(dir_);
        std::ofstream(dir_ / "retryguard.yaml")
            << "ledger:\n  backend: sqlite\n  sqlite:\n    path: " << (dir_ / "ledger.db").string() << "\n";
        ASSERT_EQ(sh("'" RETRYGUARD_GEN_MONTH_LOG "' --scale " + scale_ + " --seed 1 --out '" +
                     (dir_ / "month.log").string() + "' --truth '" + (dir_ / "truth.tsv").string() + "'"),
                  0);
        // Event times come with the lines on standard output (a --verdicts file
        // stamps them with the time of writing).
        ASSERT_EQ(sh("'" RETRYGUARD_CLI "' import --utc --year 2026 -c '" + config() + "' '" +
                     (dir_ / "month.log").string() + "' > '" + (dir_ / "verdicts.txt").string() + "' 2> '" +
                     (dir_ / "import.err").string() + "'"),
                  0)
            << slurp(dir_ / "import.err");
        read_truth();
        read_verdicts();
    }
    static void TearDownTestSuite() { fs::remove_all(dir_); }

    static std::string config() { return (dir_ / "retryguard.yaml").string(); }
    static int sh(const std::string& cmd) {
        int status =
            std::system(("TZ=UTC RETRYGUARD_DATADIR='" RETRYGUARD_SOURCE_DIR "/conf' " + cmd).c_str());
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    // A reporting command's JSON at the end of the month (exit 1: something
    // is escalated then, e.g. a destination rate-limiting for good).
    static nlohmann::json cli_json(const std::string& args) {
        const fs::path out = dir_ / "cli.json";
        int rc = sh("'" RETRYGUARD_CLI "' " + args + " --json -c '" + config() + "' --now " + end_of_log_ +
                    " > '" + out.string() + "' 2>&1");
        EXPECT_TRUE(rc == 0 || rc == 1) << args << ": " << slurp(out);
        return nlohmann::json::parse(slurp(out), nullptr, false);
    }

    static void read_truth() {
        std::istringstream in(slurp(dir_ / "truth.tsv"));
        for (std::string l; std::getline(in, l);) {
            auto f = split(l, '\t');
            if (f[0] == "outage" && f.size() == 4)
                truth_.outages.push_back({at(f[1]), at(f[2]), std::stoi(f[3])});
            else if (f[0] == "escalate" && f.size() == 5)
                truth_.escalate.push_back({f[1], at(f[3]), at(f[4])});
            else if (f[0] == "no-escalate" && f.size() == 5)
                truth_.no_escalate.push_back({f[1], at(f[3]), at(f[4])});
            else if (f[0] == "repeat-offender" && f.size() == 3)
                truth_.repeat_offenders[f[1]] = std::stoi(f[2]);
            else if (f[0] == "greylist" && f.size() == 2)
                truth_.greylist.push_back(f[1]);
            else if (f[0] == "during-outage" && f.size() == 3)
                truth_.during_outage.push_back(f[1]);
            else
                ADD_FAILURE() << "unknown truth line: " << l;
        }
    }

    static void read_verdicts() {
        std::istringstream in(slurp(dir_ / "verdicts.txt"));
        for (std::string l; std::getline(in, l);) {
            auto sp = l.find(' ');
            ASSERT_NE(sp, std::string::npos) << l;
            VerdictLine vl;
            ASSERT_TRUE(parse_verdict_line(l.substr(sp + 1), vl)) << l;
            Line v;
            v.time = at(l.substr(0, sp));
            v.key = vl.key;
            for (auto& [k, val] : vl.fields) v.fields.emplace(k, val);
            v.name = v.fields["verdict"];
            v.text = l;
            end_of_log_ = l.substr(0, sp);
            verdicts_.push_back(std::move(v));
        }
    }

    static std::vector<const Line*> named(std::string_view name, std::string_view key = {}) {
        std::vector<const Line*> out;
        for (const auto& v : verdicts_)
            if (v.name == name && (key.empty() || v.key == key)) out.push_back(&v);
        return out;
    }

    static inline fs::path dir_;
    static inline std::string scale_, end_of_log_;
    static inline Truth truth_;
    static inline std::vector<Line> verdicts_;
};

TEST_F(ReplayMonth, TheTruthFilePlantsEveryCase) {
    ASSERT_EQ(truth_.outages.size(), 1u);
    EXPECT_GE(truth_.outages[0].domains, 8) << "enough destinations for the spread check";
    EXPECT_GE(truth_.escalate.size(), 2u);
    EXPECT_GE(truth_.no_escalate.size(), 1u);
    EXPECT_GE(truth_.repeat_offenders.size(), 1u);
    EXPECT_GE(truth_.greylist.size(), 1u);
    EXPECT_EQ(truth_.during_outage.size(), 1u);
    EXPECT_GT(verdicts_.size(), 100u);
}

TEST_F(ReplayMonth, OneIncidentPerOutage) {
    auto suspected = named("local_outbound_suspected");
    ASSERT_EQ(suspected.size(), truth_.outages.size());
    for (const auto& o : truth_.outages) {
        int in = 0;
        for (const Line* v : suspected) in += v->time >= o.start && v->time <= o.end;
        EXPECT_EQ(in, 1) << "outage from " << format_rfc3339(o.start);
    }
    for (const Line* v : suspected) {
        EXPECT_EQ(v->fields.at("category"), "network") << v->text;
    }
    auto cleared = named("local_outbound_cleared");
    ASSERT_EQ(cleared.size(), suspected.size());
    EXPECT_GT(std::stoll(cleared[0]->fields.at("deferrals")), truth_.outages[0].domains)
        << "the incident counts the deferrals of its class";
}

TEST_F(ReplayMonth, NoDestinationIsJudgedForTheIncidentsDeferrals) {
    auto suspected = named("local_outbound_suspected");
    auto cleared = named("local_outbound_cleared");
    ASSERT_EQ(suspected.size(), cleared.size());
    for (std::size_t i = 0; i < suspected.size(); ++i) {
        const std::string cat = suspected[i]->fields.at("category");
        // In log order: the lines between the incident's two lines.
        std::size_t per_destination = 0;
        for (const Line* v = suspected[i] + 1; v < cleared[i]; ++v) {
            if (v->name != "noted" && v->name != "watch" && v->name != "escalate" && v->name != "flagged")
                continue;
            ++per_destination;
            EXPECT_NE(v->fields.count("category") ? v->fields.at("category") : "", cat)
                << "a destination judged for the incident's deferrals: " << v->text;
        }
        // Other classes were still judged meanwhile (greylisting of the planted domains at least).
        EXPECT_GT(per_destination, 0u);
        EXPECT_GT(std::stoi(suspected[i]->fields.at("absorbed")), 0)
            << "the first deferrals, judged before the incident existed, were taken back";
    }
}

TEST_F(ReplayMonth, PlantedReceiverConfigOutagesEscalateAndTheCliListsThem) {
    auto doc = cli_json("escalations --since 40d");
    ASSERT_FALSE(doc.is_discarded());
    std::map<std::string, nlohmann::json> listed;
    for (const auto& e : doc.at("escalations"))
        if (e.at("kind") == "domain") listed[e.at("name").get<std::string>()] = e;
    EXPECT_EQ(doc.at("total"), doc.at("escalations").size()) << "no page asked for: every row";
    for (const auto& w : truth_.escalate) {
        int n = 0;
        for (const Line* v : named("escalate", w.domain)) {
            ++n;
            EXPECT_GE(v->time, w.start) << v->text;
            EXPECT_LE(v->time, w.end) << v->text;
            EXPECT_EQ(v->fields.at("category"), "receiver-config") << v->text;
        }
        EXPECT_EQ(n, 1) << w.domain;
        ASSERT_TRUE(listed.count(w.domain)) << w.domain << " not in escalations --since 40d";
        const auto& e = listed[w.domain];
        EXPECT_EQ(e.at("status"), "closed") << e.dump();
        ASSERT_TRUE(e.at("opened").is_string()) << e.dump();
        ASSERT_TRUE(e.at("closed").is_string()) << e.dump();
        EXPECT_GE(at(e.at("opened")), w.start);
        EXPECT_GE(at(e.at("closed")), w.end) << "closed by the delivery that ended it";
    }
}

TEST_F(ReplayMonth, ReceiverSystemAndGreylistingNeverEscalate) {
    for (const auto& w : truth_.no_escalate) {
        EXPECT_TRUE(named("escalate", w.domain).empty()) << w.domain;
        EXPECT_FALSE(named("watch", w.domain).empty()) << w.domain << " is watched, just not escalated";
    }
    for (const auto& g : truth_.greylist) {
        EXPECT_TRUE(named("escalate", g).empty()) << g;
        EXPECT_TRUE(named("flagged", g).empty()) << g;
    }
}

TEST_F(ReplayMonth, RepeatOffendersAreFlagged) {
    for (const auto& [domain, episodes] : truth_.repeat_offenders) {
        auto f = named("flagged", domain);
        ASSERT_EQ(f.size(), 1u) << domain << " (" << episodes << " planted episodes)";
        EXPECT_NE(f[0]->fields.at("reason").find("receiver-config episodes"), std::string::npos)
            << f[0]->text;
    }
    std::set<std::string> planted;
    for (const auto& [d, n] : truth_.repeat_offenders) planted.insert(d);
    for (const Line* f : named("flagged"))
        if (f->fields.at("type") == "domain") {
            EXPECT_TRUE(planted.count(f->key)) << "flagged without being planted: " << f->text;
        }
}

TEST_F(ReplayMonth, AReceiverConfigFaultDuringTheOutageIsJudgedOnItsOwn) {
    ASSERT_EQ(truth_.outages.size(), 1u);
    const auto& o = truth_.outages[0];
    for (const auto& d : truth_.during_outage) {
        bool watched = false;
        for (const auto& v : verdicts_) {
            if (v.key != d) continue;
            if (v.fields.count("category")) {
                EXPECT_NE(v.fields.at("category"), "network") << v.text;
            }
            watched |= v.name == "watch" && v.fields.at("category") == "receiver-config" &&
                       v.time >= o.start - 1h && v.time <= o.end + 1h;
        }
        EXPECT_TRUE(watched) << d << ": its own 4.3.5s reach watch around the outage";
    }
}

// The month up to the middle of the outage, in a ledger of its own: status
// shows the open incident with what it owns.
TEST_F(ReplayMonth, StatusShowsTheOpenIncidentWithItsCounts) {
    ASSERT_EQ(truth_.outages.size(), 1u);
    const TimePoint cut = truth_.outages[0].start + 15min;
    static const char* const kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                          "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    std::ifstream in(dir_ / "month.log");
    std::ofstream out(dir_ / "half.log");
    for (std::string l; std::getline(in, l);) {
        // "Nov 17 10:30:00 host ...": the generator's syslog stamps, UTC, year 2026.
        int month = 0;
        while (month < 12 && l.compare(0, 3, kMonths[month]) != 0) ++month;
        ASSERT_LT(month, 12) << l;
        char stamp[32];
        std::snprintf(stamp, sizeof stamp, "2026-%02d-%02dT%sZ", month + 1, std::atoi(l.substr(4, 2).c_str()),
                      l.substr(7, 8).c_str());
        if (at(stamp) > cut) break;
        out << l << '\n';
    }
    out.close();
    std::ofstream(dir_ / "half.yaml")
        << "ledger:\n  backend: sqlite\n  sqlite:\n    path: " << (dir_ / "half.db").string() << "\n";
    ASSERT_EQ(sh("'" RETRYGUARD_CLI "' import -q --utc --year 2026 -c '" + (dir_ / "half.yaml").string() +
                 "' '" + (dir_ / "half.log").string() + "' 2> '" + (dir_ / "half.err").string() + "'"),
              0)
        << slurp(dir_ / "half.err");
    const fs::path status = dir_ / "status.json";
    sh("'" RETRYGUARD_CLI "' status --json -c '" + (dir_ / "half.yaml").string() + "' --now " +
       format_rfc3339(cut) + " > '" + status.string() + "'");
    auto doc = nlohmann::json::parse(slurp(status), nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << slurp(status);
    EXPECT_FALSE(doc.contains("engine_state_error")) << doc.dump();
    const auto& e = doc.at("engine");
    ASSERT_TRUE(e.at("local_incident_open").get<bool>()) << e.dump();
    EXPECT_EQ(e.at("incident").at("category"), "network");
    EXPECT_GT(e.at("incident").at("deferrals").get<std::int64_t>(), 0);
    EXPECT_GT(e.at("incident").at("absorbed").get<std::int64_t>(), 0);
    EXPECT_GE(e.at("incident").at("destinations").size(), 8u);
}

TEST_F(ReplayMonth, ListingsShowEveryRowOrSayWhatTheyLeftOut) {
    auto all = cli_json("destinations");
    ASSERT_FALSE(all.is_discarded());
    const auto total = all.at("total").get<std::size_t>();
    EXPECT_EQ(all.at("destinations").size(), total);
    EXPECT_GE(total, truth_.escalate.size() + truth_.greylist.size());
    auto page = cli_json("destinations --limit 5 --offset 2");
    EXPECT_EQ(page.at("total"), total);
    ASSERT_EQ(page.at("destinations").size(), std::min<std::size_t>(5, total - 2));
    for (std::size_t i = 0; i < page.at("destinations").size(); ++i)
        EXPECT_EQ(page.at("destinations")[i], all.at("destinations")[i + 2]);
    if (scale_ == "1") {
        EXPECT_GT(total, 10000u) << "the full month has more destinations than the old silent cap";
    }
}

}  // namespace
}  // namespace retryguard
