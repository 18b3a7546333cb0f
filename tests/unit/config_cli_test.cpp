// config_cli_test.cpp -- `retryguard check-config` as an administrator runs
// it: exit codes, error lines, --explain and --json.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace {

struct Run {
    int status = -1;
    std::string out;
};

Run run(const std::string& args, const std::string& cwd = {}) {
    Run r;
    std::string cmd =
        (cwd.empty() ? "" : "cd " + cwd + " && ") + std::string(RETRYGUARD_CLI) + " " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

std::string temp_config(const std::string& text) {
    static int n = 0;
    auto path = std::filesystem::temp_directory_path() /
                ("rg-cli-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".yaml");
    std::ofstream(path) << text;
    return path.string();
}

const std::string kShipped = std::string(RETRYGUARD_SOURCE_DIR) + "/conf/retryguard.yaml";

}  // namespace

TEST(ConfigCli, CleanFileExitsZero) {
    auto r = run("check-config " + kShipped);
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(r.out, kShipped + ": OK (1 log source(s), 3 destination rule(s))\n");
}

TEST(ConfigCli, ErrorsPrintedWithPositionAndExitTwo) {
    auto f = temp_config("ledger:\n  backnd: sqlite\nretry:\n  min_interval: 30\n");
    auto r = run("check-config " + f);
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(
        r.out,
        f + ":2:3: error: unknown key 'ledger.backnd'; did you mean 'ledger.backend'?\n" + f +
            ":4:17: error: bad duration '30' for 'retry.min_interval': a duration needs a unit: ms, s, m, "
            "h, d or w (e.g. \"30m\")\n" +
            f + ": 2 errors\n");
    std::filesystem::remove(f);
}

TEST(ConfigCli, JsonErrors) {
    auto f = temp_config("dry_run: maybe\n");
    auto r = run("check-config --json " + f);
    EXPECT_EQ(r.status, 2);
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["ok"], false);
    ASSERT_EQ(j["errors"].size(), 1u);
    EXPECT_EQ(j["errors"][0]["line"], 1);
    EXPECT_EQ(j["errors"][0]["column"], 10);
    EXPECT_EQ(j["errors"][0]["message"], "'dry_run' must be true or false, got 'maybe'");
    std::filesystem::remove(f);
}

TEST(ConfigCli, ExplainShowsRuleReasonAndDifferences) {
    auto f = temp_config(
        "destinations:\n"
        "  - domain: \"*.example.com\"\n"
        "    contact: \"noc@example.com\"\n"
        "    reinjection: {action: hold}\n"
        "  - mx: \"mx*.provider.net\"\n"
        "    dry_run: true\n");
    auto r = run("check-config " + f + " --explain a.example.com --mx mx1.provider.net");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("rule:    destinations[0] wildcard '*.example.com' at " + f + ":2:5\n"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("also:    mx 'mx*.provider.net' at line 5 matches too, but has lower precedence\n"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("contact: noc@example.com\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("  reinjection.action: hold   (global: reject)\n"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("dry_run"), std::string::npos) << r.out;  // the mx rule did not apply

    auto j = nlohmann::json::parse(
        run("check-config --json " + f + " --explain other.org --mx MX9.provider.net").out);
    EXPECT_EQ(j["explain"]["rule"]["kind"], "mx");
    EXPECT_EQ(j["explain"]["rule"]["line"], 5);
    EXPECT_EQ(j["explain"]["differs_from_global"]["dry_run"]["value"], "true");
    EXPECT_EQ(j["explain"]["differs_from_global"]["dry_run"]["global"], "false");
    EXPECT_EQ(j["explain"]["differs_from_global"].size(), 1u);

    auto g = run("check-config " + f + " --explain example.com");
    EXPECT_NE(g.out.find("rule:    none (global settings)\n"), std::string::npos) << g.out;
    EXPECT_NE(g.out.find("effective settings: the global ones\n"), std::string::npos) << g.out;
    std::filesystem::remove(f);
}

TEST(ConfigCli, DefaultFileFromSourceTree) {
    // Without FILE: /etc/retryguard/retryguard.yaml when installed, else the source tree's default.
    bool installed = std::filesystem::exists("/etc/retryguard/retryguard.yaml");
    auto r = run("check-config --json", RETRYGUARD_SOURCE_DIR);
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["file"], installed ? "/etc/retryguard/retryguard.yaml" : "conf/retryguard.yaml");
    if (!installed) {
        EXPECT_EQ(j["ok"], true);
    }
}

TEST(ConfigCli, UsageErrors) {
    EXPECT_EQ(run("check-config " + kShipped + " --mx mx.example").status, 2);
    EXPECT_EQ(run("check-config /nonexistent/retryguard.yaml").status, 2);
    EXPECT_EQ(run("check-config --bogus").status, 2);
}

TEST(ConfigCli, DumpDocsMatchesCommittedFile) {
    auto r = run("check-config --dump-docs");
    EXPECT_EQ(r.status, 0);
    std::ifstream in(std::string(RETRYGUARD_SOURCE_DIR) + "/docs/configuration.md");
    std::string committed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(r.out == committed) << "docs/configuration.md differs from --dump-docs";
}

// A classifier rule the daemons would refuse fails the check, at its position,
// and the same file without it passes: check-config and the daemons agree.
TEST(ConfigCli, BadClassifierRuleFailsWithPosition) {
    auto f = temp_config(
        "classifier:\n"
        "  rules:\n"
        "    - {name: greylist, category: greylisting, text: \"greylisted\"}\n"
        "    - {name: broken, category: greylisting, text: \"(unclosed\"}\n");
    auto r = run("check-config " + f);
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_EQ(r.out.rfind(f + ":4:51: error: bad RE2 pattern in rule `broken`: ", 0), 0u) << r.out;
    EXPECT_NE(r.out.find(f + ": 1 error\n"), std::string::npos) << r.out;
    auto j = nlohmann::json::parse(run("check-config --json " + f).out);
    EXPECT_EQ(j["ok"], false);
    ASSERT_EQ(j["errors"].size(), 1u);
    EXPECT_EQ(j["errors"][0]["line"], 4);
    EXPECT_EQ(j["errors"][0]["column"], 51);
    std::filesystem::remove(f);

    auto good = temp_config(
        "classifier:\n"
        "  rules:\n"
        "    - {name: greylist, category: greylisting, text: \"greylisted\"}\n");
    auto ok = run("check-config " + good);
    EXPECT_EQ(ok.status, 0) << ok.out;
    std::filesystem::remove(good);
}

// metrics.allow_non_loopback is an explicit opt-in the daemon honours: the
// check accepts it, refuses a non-loopback address without it, and refuses a
// host name the daemon would not resolve.
TEST(ConfigCli, MetricsNonLoopbackNeedsTheOptInAndAnAddress) {
    auto allowed = temp_config("metrics: {listen: \"0.0.0.0:9487\", allow_non_loopback: true}\n");
    EXPECT_EQ(run("check-config " + allowed).status, 0);
    auto refused = temp_config("metrics: {listen: \"0.0.0.0:9487\"}\n");
    auto r = run("check-config " + refused);
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.out.find("is not loopback; set metrics.allow_non_loopback: true"), std::string::npos)
        << r.out;
    auto named = temp_config("metrics: {listen: \"metrics.example:9487\", allow_non_loopback: true}\n");
    auto n = run("check-config " + named);
    EXPECT_EQ(n.status, 2);
    EXPECT_NE(n.out.find("give an IP address"), std::string::npos) << n.out;
    for (const auto& f : {allowed, refused, named}) std::filesystem::remove(f);
}
