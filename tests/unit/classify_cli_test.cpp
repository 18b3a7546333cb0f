// classify_cli_test.cpp -- runs the built `retryguard classify` (RETRYGUARD_CLI)
// as a person or a script would: arguments, stdin, --json, --rules, bad lines.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

class ClassifyCli : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("rg-cli-" + std::to_string(::getpid()) + "-" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    // Runs the CLI with stdin from `input`; returns the exit code, fills out/err.
    int run(const std::string& args, const std::string& input = "") {
        std::ofstream(dir_ / "in", std::ios::binary) << input;
        std::string cmd = "RETRYGUARD_DATADIR='" RETRYGUARD_SOURCE_DIR "/conf' '" RETRYGUARD_CLI
                          "' classify " +
                          args + " < '" + (dir_ / "in").string() + "' > '" + (dir_ / "out").string() +
                          "' 2> '" + (dir_ / "err").string() + "'";
        int status = std::system(cmd.c_str());
        out = slurp(dir_ / "out");
        err = slurp(dir_ / "err");
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    static std::string slurp(const fs::path& p) {
        std::ifstream in(p, std::ios::binary);
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }
    std::vector<nlohmann::json> json_lines() const {
        std::vector<nlohmann::json> v;
        std::istringstream in(out);
        std::string line;
        while (std::getline(in, line)) v.push_back(nlohmann::json::parse(line));
        return v;
    }

    fs::path dir_;
    std::string out, err;
};

TEST_F(ClassifyCli, ExplainsAReplyForAPerson) {
    ASSERT_EQ(run("'451 4.3.5 System config error'"), 0) << err;
    EXPECT_NE(out.find("receiver-config"), std::string::npos) << out;
    EXPECT_NE(out.find("4.3.5 \"System incorrectly configured\""), std::string::npos) << out;
    EXPECT_NE(out.find("the receiving system"), std::string::npos);
    EXPECT_NE(out.find("rule 4.3.5-system-config, classifier.yaml:"), std::string::npos) << out;
    EXPECT_NE(out.find("guidance"), std::string::npos);
}

TEST_F(ClassifyCli, JsonOneObjectPerLineAndBadLinesGoOn) {
    std::string input =
        "host mx[192.0.2.1] said: 450 4.2.0 Greylisted for 300 seconds (in reply to RCPT TO command)\n";
    input += "\n";                                  // empty
    input += std::string("451 \x01\x02 binary\n");  // binary
    input += std::string(1 << 20, 'x') + "\n";      // 1 MB line
    input += "connect to mx[192.0.2.1]:25: Connection refused\r\n";
    input += "451 4.3.0 no newline at the end";
    ASSERT_EQ(run("--json", input), 1) << err;
    auto lines = json_lines();
    ASSERT_EQ(lines.size(), 6u) << out.substr(0, 2000);
    const auto& grey = lines[0];
    for (const char* key : {"input", "code", "enhanced", "category", "rule", "retry_after_s"})
        EXPECT_TRUE(grey.contains(key)) << key;
    EXPECT_EQ(grey["code"], 450);
    EXPECT_EQ(grey["enhanced"], "4.2.0");
    EXPECT_EQ(grey["category"], "greylisting");
    EXPECT_EQ(grey["rule"], "greylisting");
    EXPECT_EQ(grey["retry_after_s"], 300);
    EXPECT_EQ(grey["stage"], "rcpt-to");
    EXPECT_NE(lines[1]["error"].get<std::string>().find("empty"), std::string::npos);
    EXPECT_NE(lines[2]["error"].get<std::string>().find("binary"), std::string::npos);
    EXPECT_NE(lines[3]["error"].get<std::string>().find("too long (1048576 bytes"), std::string::npos);
    EXPECT_LT(lines[3]["input"].get<std::string>().size(), 300u);
    EXPECT_EQ(lines[4]["category"], "network");
    EXPECT_TRUE(lines[4]["code"].is_null());
    EXPECT_TRUE(lines[4]["retry_after_s"].is_null());
    EXPECT_EQ(lines[4]["input"], "connect to mx[192.0.2.1]:25: Connection refused");
    EXPECT_EQ(lines[5]["category"], "receiver-system");
}

TEST_F(ClassifyCli, AcceptsWholePostfixLogLines) {
    const std::string line =
        "Nov 29 20:48:23 sender postfix/smtp[23714]: 1E661116375: to=<user@cfgerr.lab.test>, "
        "relay=127.0.0.1[127.0.0.1]:25602, delay=0.15, delays=0.01/0/0.08/0.06, dsn=4.3.5, status=deferred "
        "(host "
        "127.0.0.1[127.0.0.1] said: 451 4.3.5 <user@cfgerr.lab.test>: Recipient address rejected: Server "
        "configuration error (in reply to RCPT TO command))\n";
    ASSERT_EQ(run("--json", line), 0) << err;
    auto lines = json_lines();
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0]["category"], "receiver-config");
    EXPECT_EQ(lines[0]["stage"], "rcpt-to");
    EXPECT_EQ(lines[0]["remote_addr"], "127.0.0.1");
}

TEST_F(ClassifyCli, UserRulesFileOverridesAndBadFilesFailWithPosition) {
    std::ofstream(dir_ / "mine.yaml")
        << "rules:\n  - {name: acme, category: receiver-system, text: 'acme'}\n";
    ASSERT_EQ(run("--json --rules '" + (dir_ / "mine.yaml").string() + "' '451 4.3.5 acme'"), 0) << err;
    auto lines = json_lines();
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0]["rule"], "acme");
    EXPECT_EQ(lines[0]["decided_by"], "user-rule");

    std::ofstream(dir_ / "bad.yaml") << "rules:\n  - name: x\n    category: nope\n    codes: [451]\n";
    EXPECT_EQ(run("--rules '" + (dir_ / "bad.yaml").string() + "' '451 x'"), 2);
    EXPECT_NE(err.find("bad.yaml:3:15: unknown category"), std::string::npos) << err;
    EXPECT_TRUE(out.empty());
}

TEST_F(ClassifyCli, MissingShippedRulesIsAConfigurationError) {
    std::string cmd = "RETRYGUARD_DATADIR=/nonexistent '" RETRYGUARD_CLI
                      "' classify '451 x' > /dev/null 2> '" +
                      (dir_ / "err").string() + "'";
    int status = std::system(cmd.c_str());
    EXPECT_EQ(WEXITSTATUS(status), 2);
    EXPECT_NE(slurp(dir_ / "err").find("RETRYGUARD_DATADIR"), std::string::npos);
}

}  // namespace
