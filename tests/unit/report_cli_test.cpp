// report_cli_test.cpp -- imports the full-run fixture into a temporary SQLite
// ledger with the built CLI, then runs every reporting command: JSON keys and
// values, exit codes, and golden files of the human output (TZ=UTC, fixed
// --now). RETRYGUARD_UPDATE_GOLDEN=1 rewrites the golden files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

const std::string kFixtures = RETRYGUARD_FIXTURES;
const std::string kConfig = kFixtures + "/report/escalate-fast.yaml";
constexpr const char* kNow = "2026-11-29T21:00:00Z";

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

class ReportCli : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        dir_ = fs::temp_directory_path() / ("rg-report-" + std::to_string(::getpid()));
        fs::create_directories(dir_);
        int rc = run_raw("import -q --year 2026 -c '" + kConfig + "' -o " + ledger() + " '" + kFixtures +
                         "/postfix-3.7/full-run.sender.log'");
        ASSERT_EQ(rc, 0) << err_;
    }
    static void TearDownTestSuite() { fs::remove_all(dir_); }

    static std::string ledger() { return "ledger.sqlite.path=" + (dir_ / "ledger.db").string(); }

    static int run_raw(const std::string& args) {
        std::string cmd = "TZ=UTC RETRYGUARD_DATADIR='" RETRYGUARD_SOURCE_DIR "/conf' '" RETRYGUARD_CLI "' " +
                          args + " > '" + (dir_ / "out").string() + "' 2> '" + (dir_ / "err").string() + "'";
        int status = std::system(cmd.c_str());
        out_ = slurp(dir_ / "out");
        err_ = slurp(dir_ / "err");
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    // A reporting command against the imported ledger at the fixed "now".
    static int run(const std::string& args) {
        return run_raw(args + " -c '" + kConfig + "' -o " + ledger() + " --now " + kNow);
    }
    static nlohmann::json json_out() { return nlohmann::json::parse(out_); }

    // Compares with tests/fixtures/golden/NAME, the temporary directory replaced by <dir>.
    static void golden(const std::string& name) {
        std::string text = out_;
        for (auto pos = text.find(dir_.string()); pos != std::string::npos; pos = text.find(dir_.string()))
            text.replace(pos, dir_.string().size(), "<dir>");
        for (auto pos = text.find(kFixtures); pos != std::string::npos; pos = text.find(kFixtures))
            text.replace(pos, kFixtures.size(), "<fixtures>");
        // The wall-clock load time and the file size are the only unstable parts.
        text = std::regex_replace(text, std::regex(", loaded [^\n]*"), ", loaded <time>");
        text = std::regex_replace(text, std::regex("\\(\\d+ bytes"), "(<n> bytes");
        fs::path file = fs::path(kFixtures) / "golden" / name;
        if (std::getenv("RETRYGUARD_UPDATE_GOLDEN")) {
            fs::create_directories(file.parent_path());
            std::ofstream(file, std::ios::binary) << text;
        }
        EXPECT_EQ(text, slurp(file)) << "golden file " << file
                                     << " differs (RETRYGUARD_UPDATE_GOLDEN=1 rewrites)";
    }

    static inline fs::path dir_;
    static inline std::string out_, err_;
};

TEST_F(ReportCli, StatusJsonDescribesLedgerEngineAndFlags) {
    ASSERT_EQ(run("status --json"), 1) << err_;  // escalations exist: needs attention
    auto j = json_out();
    EXPECT_EQ(j.at("ledger").at("backend"), "sqlite");
    EXPECT_GT(j.at("ledger").at("messages").get<int>(), 50);
    EXPECT_GT(j.at("ledger").at("bytes").get<int>(), 0);
    EXPECT_GT(j.at("destinations_by_state").at("escalate").get<int>(), 0);
    EXPECT_TRUE(j.at("engine").at("saved").get<bool>());
    EXPECT_EQ(j.at("engine").at("event_time"), "2026-11-29T20:51:12Z");
    EXPECT_FALSE(j.at("engine").at("local_incident_open").get<bool>());
    ASSERT_EQ(j.at("flags").size(), 1u);
    EXPECT_EQ(j.at("flags")[0].at("destination"), "mx:127.0.0.1");
    EXPECT_GT(j.at("counters").at("verdicts").at("escalate").get<int>(), 0);
    EXPECT_EQ(j.at("config").at("file"), kConfig);
}

// A log source the policy daemon's user may not read feeds nothing: status
// says so for that follower (not just "never read") and asks for attention.
TEST_F(ReportCli, StatusSaysWhenTheDaemonsUserCannotReadASource) {
    const fs::path log = dir_ / "secret-mail.log";
    std::ofstream(log) << "x\n";
    fs::permissions(log, fs::perms::owner_read | fs::perms::owner_write);
    const fs::path cfg = dir_ / "unreadable.yaml";
    std::ofstream(cfg) << "sources: [{type: file, path: " << log.string() << "}]\npolicy: {user: nobody}\n";
    ASSERT_EQ(run_raw("status --json -c '" + cfg.string() + "' -o " + ledger() + " --now " + kNow), 1)
        << err_;
    const auto doc = json_out();
    bool found = false;
    for (const auto& f : doc.at("followers"))
        if (f.at("problem").is_string()) {
            found = true;
            EXPECT_NE(f["problem"].get<std::string>().find("cannot be read by nobody"), std::string::npos)
                << f;
        }
    EXPECT_TRUE(found) << doc.at("followers");
    ASSERT_EQ(run_raw("status -c '" + cfg.string() + "' -o " + ledger() + " --now " + kNow), 1) << err_;
    EXPECT_NE(out_.find("! file:" + log.string() + ": log source"), std::string::npos) << out_;
}

TEST_F(ReportCli, StatusGolden) {
    ASSERT_EQ(run("status"), 1) << err_;
    golden("status.txt");
}

TEST_F(ReportCli, DestinationsWorstFirstAndFiltered) {
    ASSERT_EQ(run("destinations --json"), 1) << err_;
    auto all = json_out().at("destinations");
    ASSERT_GT(all.size(), 5u);
    EXPECT_EQ(json_out().at("total"), all.size()) << "every row when no page is asked for";
    EXPECT_TRUE(json_out().at("limit").is_null());
    // escalate, then flagged, then watch, then the rest; within each, oldest first deferral first.
    auto rank = [](const nlohmann::json& d) {
        const std::string s = d.at("state");
        return s == "escalate" ? 0 : d.at("flagged").get<bool>() ? 1 : s == "watch" ? 2 : 3;
    };
    for (std::size_t i = 1; i < all.size(); ++i) {
        int a = rank(all[i - 1]), b = rank(all[i]);
        ASSERT_LE(a, b) << all.dump(1);
        if (a == b && all[i - 1].at("first_deferral").is_string() &&
            all[i].at("first_deferral").is_string()) {
            EXPECT_LE(all[i - 1].at("first_deferral").get<std::string>(),
                      all[i].at("first_deferral").get<std::string>());
        }
    }
    EXPECT_EQ(all[0].at("state"), "escalate");
    EXPECT_EQ(all[0].at("name"), "cfgerr.lab.test");
    EXPECT_NE(all[0].at("last_reply").get<std::string>().find("451 4.3.5"), std::string::npos);

    ASSERT_EQ(run("destinations --json --kind mx"), 0) << err_;  // no MX host escalated
    auto mx = json_out().at("destinations");
    ASSERT_FALSE(mx.empty());
    for (const auto& d : mx) EXPECT_EQ(d.at("kind"), "mx");
    bool flagged = false;
    for (const auto& d : mx) flagged |= d.at("name") == "127.0.0.1" && d.at("flagged").get<bool>();
    EXPECT_TRUE(flagged) << mx.dump(1);

    ASSERT_EQ(run("destinations --json --category receiver-system --state watch"), 0) << err_;
    auto rs = json_out().at("destinations");
    ASSERT_FALSE(rs.empty());
    for (const auto& d : rs) {
        EXPECT_EQ(d.at("state"), "watch");
        bool has = false;
        for (const auto& c : d.at("categories")) has |= c == "receiver-system";
        EXPECT_TRUE(has) << d.dump();
    }
    EXPECT_EQ(run("destinations --category no-such-thing"), 2);
    EXPECT_EQ(run("destinations --kind relay"), 2);
}

TEST_F(ReportCli, DestinationsPageSaySoAndFollowOneOrder) {
    ASSERT_EQ(run("destinations --json"), 1) << err_;
    const auto all = json_out().at("destinations");
    const std::size_t n = all.size();
    ASSERT_GT(n, 6u);
    // Pages of 4, one after the other, give the whole listing in the same order.
    nlohmann::json paged = nlohmann::json::array();
    for (std::size_t off = 0; off < n; off += 4) {
        ASSERT_EQ(run("destinations --json --limit 4 --offset " + std::to_string(off)), 1)
            << "exit code judged on every row, not the page: " << err_;
        auto doc = json_out();
        EXPECT_EQ(doc.at("total"), n);
        EXPECT_EQ(doc.at("offset"), off);
        EXPECT_EQ(doc.at("limit"), 4);
        for (auto& d : doc.at("destinations")) paged.push_back(d);
    }
    EXPECT_EQ(paged, all);
    ASSERT_EQ(run("destinations --limit 4"), 1) << err_;
    EXPECT_NE(out_.find("showing 1-4 of " + std::to_string(n) + "; --offset 4 for more\n"), std::string::npos)
        << out_;
    ASSERT_EQ(run("destinations --limit 4 --offset " + std::to_string(n - 2)), 1) << err_;
    EXPECT_NE(out_.find("showing " + std::to_string(n - 1) + "-" + std::to_string(n) + " of " +
                        std::to_string(n) + "\n"),
              std::string::npos)
        << out_;
    EXPECT_EQ(out_.find("for more"), std::string::npos) << out_;
    ASSERT_EQ(run("destinations --offset " + std::to_string(n + 5)), 1) << err_;
    EXPECT_NE(out_.find("showing none of " + std::to_string(n)), std::string::npos) << out_;
    EXPECT_EQ(run("destinations --limit 0"), 2) << "a page of nothing is a usage error";

    ASSERT_EQ(run("destinations --json --sort name"), 1) << err_;
    auto by_name = json_out().at("destinations");
    ASSERT_EQ(by_name.size(), n);
    for (std::size_t i = 1; i < n; ++i) {
        auto key = [](const nlohmann::json& d) {
            return std::string(d.at("kind") == "domain" ? "0" : "1") + d.at("name").get<std::string>();
        };
        EXPECT_LT(key(by_name[i - 1]), key(by_name[i]));
    }
    ASSERT_EQ(run("destinations --json --sort deferrals"), 1) << err_;
    auto by_def = json_out().at("destinations");
    for (std::size_t i = 1; i < n; ++i)
        EXPECT_GE(by_def[i - 1].at("attempts").get<std::int64_t>(),
                  by_def[i].at("attempts").get<std::int64_t>());
    ASSERT_EQ(run("destinations --json --sort age"), 1) << err_;
    auto by_age = json_out().at("destinations");
    bool seen_none = false;
    for (std::size_t i = 0; i < n; ++i) {
        if (!by_age[i].at("first_deferral").is_string()) {
            seen_none = true;
            continue;
        }
        EXPECT_FALSE(seen_none) << "destinations without an open episode come last";
        if (i > 0 && by_age[i - 1].at("first_deferral").is_string()) {
            EXPECT_LE(by_age[i - 1].at("first_deferral").get<std::string>(),
                      by_age[i].at("first_deferral").get<std::string>());
        }
    }
    EXPECT_EQ(run("destinations --sort size"), 2);
}

TEST_F(ReportCli, EscalationsAndFlagsPageToo) {
    ASSERT_EQ(run("escalations --json --limit 1"), 1) << err_;
    auto doc = json_out();
    EXPECT_EQ(doc.at("escalations").size(), 1u);
    EXPECT_GE(doc.at("total").get<std::size_t>(), 2u);
    EXPECT_EQ(doc.at("open"), doc.at("total"));
    EXPECT_EQ(doc.at("escalations")[0].at("status"), "open");
    EXPECT_TRUE(doc.at("escalations")[0].at("opened").is_string()) << "read from the engine's saved state";
    EXPECT_TRUE(doc.at("escalations")[0].at("closed").is_null());
    ASSERT_EQ(run("escalations --limit 1"), 1) << err_;
    EXPECT_NE(out_.find("; --offset 1 for more\n"), std::string::npos) << out_;
    ASSERT_EQ(run("escalations --json --since 30d"), 1) << err_;
    EXPECT_EQ(json_out().at("since"), 30 * 86400);
    EXPECT_EQ(run("escalations --since soon"), 2);
    ASSERT_EQ(run("flags list --json --all --limit 1 --offset 0"), 0) << err_;
    doc = json_out();
    EXPECT_LE(doc.at("flags").size(), 1u);
    EXPECT_EQ(doc.at("offset"), 0);
    EXPECT_EQ(doc.at("limit"), 1);
    EXPECT_GE(doc.at("total").get<std::size_t>(), doc.at("flags").size());
}

TEST_F(ReportCli, DestinationsGolden) {
    ASSERT_EQ(run("destinations"), 1) << err_;
    golden("destinations.txt");
}

TEST_F(ReportCli, EscalationsCarryNoteAndContactAndExitOne) {
    ASSERT_EQ(run("escalations --json"), 1) << err_;
    auto e = json_out().at("escalations");
    ASSERT_FALSE(e.empty());
    bool contact_seen = false;
    for (const auto& x : e) {
        EXPECT_EQ(x.at("state"), "escalate");
        const auto note = x.at("note").get<std::string>();
        EXPECT_NE(note.find(x.at("last_reply").get<std::string>()), std::string::npos) << note;
        EXPECT_NE(note.find(x.at("first_deferral").get<std::string>()), std::string::npos) << note;
        if (x.at("name") == "cfgerr.lab.test") {
            contact_seen = true;
            EXPECT_EQ(x.at("contact"), "postmaster@cfgerr.lab.test, NOC +1 555 0100");
            EXPECT_EQ(x.at("escalate_after_seconds"), 120);
        }
    }
    EXPECT_TRUE(contact_seen) << e.dump(1);
}

TEST_F(ReportCli, EscalationsGolden) {
    ASSERT_EQ(run("escalations"), 1) << err_;
    golden("escalations.txt");
}

TEST_F(ReportCli, ExplainFollowsTheRequeueChain) {
    ASSERT_EQ(run("explain --json 0343E1160BF"), 0) << err_;
    auto j = json_out();
    EXPECT_EQ(j.at("matched_by"), "queue_id");
    auto chain = j.at("chains").at(0);
    EXPECT_EQ(chain.at("queue_ids"), nlohmann::json::array({"3E7F7116184", "0343E1160BF"}));
    auto r = chain.at("messages").at(0).at("recipients").at(0);
    EXPECT_EQ(r.at("category"), "receiver-config");
    EXPECT_FALSE(r.at("guidance").get<std::string>().empty());
    // The same message found by its Message-ID.
    ASSERT_EQ(run("explain --json '<lab-queue-ops-1795985452-23603-1@client.lab.test>'"), 0) << err_;
    EXPECT_EQ(json_out().at("matched_by"), "message_id");
    EXPECT_EQ(json_out().at("chains").at(0).at("queue_ids").size(), 2u);
}

TEST_F(ReportCli, ExplainByAddressGivesWhatHappensNext) {
    ASSERT_EQ(run("explain --json --queue-lifetime 3d user@cfgerr.lab.test"), 0) << err_;
    auto j = json_out();
    EXPECT_EQ(j.at("matched_by"), "address");
    EXPECT_EQ(j.at("queue_lifetime_seconds"), 3 * 86400);
    auto r = j.at("chains").at(0).at("messages").at(0).at("recipients").at(0);
    ASSERT_TRUE(r.at("next").is_object()) << r.dump(1);
    // escalation = first deferral + 2 min (config); expiry = arrival + 3 d.
    EXPECT_EQ(r.at("first_deferral"), "2026-11-29T20:48:23Z");
    EXPECT_EQ(r.at("next").at("escalation"), "2026-11-29T20:50:23Z");
    EXPECT_EQ(r.at("next").at("expiry"), "2026-12-02T20:48:23Z");
    EXPECT_EQ(run("explain nobody@nowhere.test"), 1);
    EXPECT_EQ(run("explain --queue-lifetime 5x user@cfgerr.lab.test"), 2);
}

TEST_F(ReportCli, ExplainGolden) {
    ASSERT_EQ(run("explain 0343E1160BF"), 0) << err_;
    golden("explain.txt");
}

TEST_F(ReportCli, FlagsListAndClearThenPrune) {
    // Own copy: clearing changes the ledger the other tests read.
    fs::copy_file(dir_ / "ledger.db", dir_ / "copy.db", fs::copy_options::overwrite_existing);
    std::string l =
        " -c '" + kConfig + "' -o ledger.sqlite.path=" + (dir_ / "copy.db").string() + " --now " + kNow;
    ASSERT_EQ(run_raw("flags list --json" + l), 0) << err_;
    ASSERT_EQ(json_out().at("flags").size(), 1u);
    ASSERT_EQ(run_raw("flags clear mx:127.0.0.1 --json" + l), 0) << err_;
    EXPECT_EQ(json_out().at("cleared"), 1);
    ASSERT_EQ(run_raw("flags list --json" + l), 0) << err_;
    EXPECT_TRUE(json_out().at("flags").empty());
    ASSERT_EQ(run_raw("flags list --all --json" + l), 0) << err_;
    ASSERT_EQ(json_out().at("flags").size(), 1u);
    EXPECT_TRUE(json_out().at("flags")[0].at("cleared_at").is_string());
    EXPECT_EQ(run_raw("flags clear mx:127.0.0.1" + l), 1);  // nothing left to clear
    // Prune a year later: finished messages are past the retention.
    std::string later = " -c '" + kConfig + "' -o ledger.sqlite.path=" + (dir_ / "copy.db").string() +
                        " --now 2027-11-29T21:00:00Z";
    ASSERT_EQ(run_raw("prune --json" + later), 0) << err_;
    EXPECT_GT(json_out().at("messages").get<int>(), 0);
}

TEST_F(ReportCli, QueueGroupsSavedPostqueueOutputByDomainAndCategory) {
    const std::string saved = " --postqueue-json '" + kFixtures + "/postfix-3.7/postqueue-j-deferred.json'";
    ASSERT_EQ(run("queue --json" + saved), 0) << err_;
    auto j = json_out();
    EXPECT_EQ(j.at("messages"), 25);
    EXPECT_EQ(j.at("recipients"), 26);
    EXPECT_EQ(j.at("bad_lines"), 0);
    std::int64_t sum = 0;
    for (const auto& d : j.at("destinations")) {
        std::int64_t b = 0;
        for (const auto& n : d.at("buckets")) b += n.get<std::int64_t>();
        EXPECT_EQ(b, d.at("total").get<std::int64_t>()) << d.dump();
        sum += b;
        if (d.at("domain") == "cfgerr.lab.test") {
            EXPECT_EQ(d.at("state"), "escalate");  // joined with the ledger
            EXPECT_EQ(d.at("categories").at("receiver-config"), 2);
        }
    }
    EXPECT_EQ(sum, 26);
    bool guided = false;
    for (const auto& c : j.at("categories"))
        guided |= c.at("category") == "receiver-config" && !c.at("guidance").get<std::string>().empty();
    EXPECT_TRUE(guided);
    ASSERT_EQ(run("queue" + saved), 0) << err_;
    golden("queue.txt");
    EXPECT_EQ(run("queue --postqueue-json /nonexistent.json"), 2);
}

TEST_F(ReportCli, HtmlReportIsSelfContainedWithTimelines) {
    const auto file = (dir_ / "report.html").string();
    ASSERT_EQ(run("report --html '" + file + "'"), 0) << err_;
    const std::string page = slurp(file);
    EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
    EXPECT_NE(page.find("<svg id=\"timeline-domain-cfgerr.lab.test\""), std::string::npos);
    EXPECT_NE(page.find("<svg id=\"timeline-mx-127.0.0.1\""), std::string::npos);
    EXPECT_NE(page.find("id=\"categories-over-time\""), std::string::npos);
    EXPECT_NE(page.find("postmaster@cfgerr.lab.test"), std::string::npos);  // escalation contact
    // Reply text is escaped, never raw markup; nothing is loaded from outside.
    EXPECT_NE(page.find("&lt;user@cfgerr.lab.test&gt;"), std::string::npos);
    EXPECT_EQ(page.find("<user@"), std::string::npos);
    EXPECT_EQ(page.find("src=\"http"), std::string::npos);
    EXPECT_EQ(page.find("href=\"http"), std::string::npos);
    EXPECT_EQ(run("report"), 2);  // --html is required
}

// `retryguard import -o KEY=VALUE /var/log/mail.log*`: the words after -o are
// files (not more values of -o), and the shell's newest-first order is read
// oldest first, so the ledger is the one a single file gives.
TEST_F(ReportCli, ImportReadsRotatedFilesOldestFirst) {
    const std::string whole = slurp(kFixtures + "/postfix-3.7/full-run.sender.log");
    std::size_t half = whole.find('\n', whole.size() / 2) + 1;
    std::ofstream(dir_ / "mail.log.1", std::ios::binary) << whole.substr(0, half);
    std::ofstream(dir_ / "mail.log", std::ios::binary) << whole.substr(half);
    auto import = [&](const std::string& db, const std::string& files) {
        return run_raw("import -q --year 2026 -c '" + kConfig +
                       "' -o ledger.sqlite.path=" + (dir_ / db).string() + " " + files);
    };
    auto destinations = [&](const std::string& db) {
        const int rc = run_raw("destinations --json -c '" + kConfig +
                               "' -o ledger.sqlite.path=" + (dir_ / db).string() + " --now " + kNow);
        EXPECT_TRUE(rc == 0 || rc == 1) << rc << err_;  // 1: an escalated destination
        return out_;
    };
    ASSERT_EQ(import("whole.db", "'" + kFixtures + "/postfix-3.7/full-run.sender.log'"), 0) << err_;
    ASSERT_EQ(import("rotated.db",
                     "'" + (dir_ / "mail.log").string() + "' '" + (dir_ / "mail.log.1").string() + "'"),
              0)
        << err_;
    EXPECT_NE(err_.find("reading the files oldest first (by their first time stamp): " +
                        (dir_ / "mail.log.1").string() + ", " + (dir_ / "mail.log").string()),
              std::string::npos)
        << err_;
    const std::string expected = destinations("whole.db");
    EXPECT_GT(expected.size(), 100u);
    EXPECT_EQ(destinations("rotated.db"), expected);
}

TEST_F(ReportCli, UsageAndConfigErrorsExitTwo) {
    EXPECT_EQ(run_raw("status -o " + ledger() + " --now yesterday"), 2);
    EXPECT_EQ(run_raw("status -c /nonexistent/retryguard.yaml -o " + ledger()), 2);
    EXPECT_EQ(run_raw("destinations --no-such-option"), 2);
    for (const char* c :
         {"status", "destinations", "explain", "escalations", "flags", "prune", "queue", "report"}) {
        EXPECT_EQ(run_raw(std::string(c) + " --help"), 0) << c;
        EXPECT_NE(out_.find(std::string(c) == "flags" ? "clear" : "KEY=VALUE"), std::string::npos)
            << c << out_;
    }
    EXPECT_EQ(run_raw("flags list --help"), 0);
    EXPECT_NE(out_.find("KEY=VALUE"), std::string::npos) << out_;
    EXPECT_EQ(run_raw("status -o ledger.sqlite.pth=/tmp/x"), 2);  // unknown key
    EXPECT_NE(err_.find("-o ledger.sqlite.pth=/tmp/x: error: unknown key"), std::string::npos) << err_;
}

}  // namespace
