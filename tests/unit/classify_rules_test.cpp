// classify_rules_test.cpp -- the classifier against real replies: every
// status=... reason in the Postfix 3.7 fixtures, a table of provider and MTA
// replies (tests/fixtures/replies/provider-replies.tsv), precedence,
// refinement, user layers, bad rule files, retry-after hints, the registry.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "retryguard/classify/classifier.hpp"
#include "retryguard/classify/status_codes.hpp"
#include "unit/classify_util.hpp"

namespace retryguard {
namespace {

const std::filesystem::path& kShipped = test::kShippedRules;

const Classifier& shipped() {
    return test::shipped_classifier();
}

Classifier with_user_rules(const std::string& yaml, const std::string& name = "user.yaml") {
    auto file = parse_rules_file(kShipped);
    EXPECT_TRUE(file.ok());
    auto user = parse_rules(YAML::Load(yaml), name);
    EXPECT_TRUE(user.ok()) << (user.ok() ? "" : user.error().message);
    auto c = Classifier::build(*file, {*user});
    EXPECT_TRUE(c.ok());
    return std::move(c).value();
}

std::string category_of(const Classification& c) {
    return c.delivered ? "delivered" : std::string(to_string(c.category));
}

// ------------------------------------------------------------ fixtures

// What each fixture reason must be; the first matching substring decides. A
// fixture reason that matches none fails the test, so new fixtures get a row.
struct FixtureExpectation {
    const char* substring;
    const char* category;
};
const FixtureExpectation kFixtureExpectations[] = {
    {"451 4.3.5", "receiver-config"},
    {"451 4.3.0", "receiver-system"},
    {"greylisted", "greylisting"},
    {"Greylisted", "greylisting"},
    {"451 4.7.1 Service unavailable - try again later", "receiver-system"},
    {"450 4.7.1", "policy"},
    {"554 5.7.1 <reject@access.lab.test>: Recipient address rejected: lab access map: no such mailbox",
     "address"},
    {"5.7.1", "policy"},
    {"550 5.1.1", "address"},
    {"Connection refused", "network"},
    {"lost connection", "network"},
    {"mail transport unavailable", "local"},
    {"250 2.0.0", "delivered"},
    {"delivered to maildir", "delivered"},
};

TEST(ClassifyFixtures, EveryPostfixReasonGetsItsCategory) {
    const std::regex line_re(R"(dsn=([0-9.]+), status=([a-z]+) \((.*)\)$)");
    std::size_t seen = 0;
    std::set<std::string> categories;
    for (const auto& entry : std::filesystem::directory_iterator(RETRYGUARD_FIXTURES "/postfix-3.7")) {
        if (entry.path().extension() != ".log") continue;
        std::ifstream in(entry.path());
        std::string line;
        while (std::getline(in, line)) {
            std::smatch m;
            if (!std::regex_search(line, m, line_re)) continue;
            const std::string dsn = m[1], reason = m[3];
            const char* expected = nullptr;
            for (const auto& e : kFixtureExpectations)
                if (reason.find(e.substring) != std::string::npos) {
                    expected = e.category;
                    break;
                }
            ASSERT_NE(expected, nullptr) << "no expectation for fixture reason: " << reason;
            Classification c = shipped().classify_reason(reason, dsn);
            EXPECT_EQ(category_of(c), expected)
                << reason << "\n  rule " << c.rule << " (" << to_string(c.decided_by) << ")";
            categories.insert(category_of(c));
            ++seen;
        }
    }
    EXPECT_GT(seen, 200u);
    EXPECT_GE(categories.size(), 8u);
}

// ------------------------------------------------------------ providers

struct ProviderReply {
    std::string category, source, reply;
};

std::vector<ProviderReply> provider_replies() {
    std::vector<ProviderReply> out;
    std::ifstream in(RETRYGUARD_FIXTURES "/replies/provider-replies.tsv");
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        auto t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
        if (t1 == std::string::npos || t2 == std::string::npos) {
            ADD_FAILURE() << "bad row: " << line;
            continue;
        }
        out.push_back({line.substr(0, t1), line.substr(t1 + 1, t2 - t1 - 1), line.substr(t2 + 1)});
    }
    return out;
}

TEST(ClassifyProviders, EveryCollectedReplyGetsItsCategory) {
    auto rows = provider_replies();
    ASSERT_GE(rows.size(), 80u);
    std::set<std::string> sources;
    for (const auto& row : rows) {
        ASSERT_TRUE(category_from_string(row.category).has_value()) << row.category;
        Classification c = shipped().classify_reason(row.reply);
        EXPECT_EQ(category_of(c), row.category) << "[" << row.source << "] " << row.reply << "\n  rule "
                                                << c.rule << " (" << to_string(c.decided_by) << ")";
        sources.insert(row.source);
    }
    for (const char* s :
         {"gmail", "microsoft", "yahoo", "icloud", "gmx", "orange", "mimecast", "proofpoint", "exim",
          "sendmail", "qmail", "postfix", "postgrey", "sqlgrey", "rspamd", "postfix-local"})
        EXPECT_TRUE(sources.count(s)) << "no replies from " << s;
}

// ------------------------------------------------------------ precedence

TEST(ClassifyPrecedence, PreciseCodeBeatsContradictingText) {
    // GUIDANCE section 4: "server overload" under 4.3.5 stays a configuration fault.
    Classification c =
        shipped().classify_reason("451 4.3.5 Server overload, too many connections, try again later");
    EXPECT_EQ(c.category, Category::receiver_config);
    EXPECT_EQ(c.decided_by, Decider::enhanced_code);
    EXPECT_EQ(c.rule, "4.3.5-system-config");
    EXPECT_EQ(c.overruled_rule, "rate-limited");  // the text is noted, not obeyed
    EXPECT_EQ(c.overruled_category, Category::rate_limited);
    EXPECT_NE(c.note(parse_smtp_reply("451 4.3.5 x").value()).find("precise code 4.3.5 decides"),
              std::string::npos);
}

TEST(ClassifyPrecedence, TextRefinesOnlyTheCodesItNames) {
    Classification grey =
        shipped().classify_reason("450 4.7.1 <u@example.net>: Recipient address rejected: greylisted");
    EXPECT_EQ(grey.category, Category::greylisting);
    EXPECT_EQ(grey.decided_by, Decider::text_refinement);
    EXPECT_EQ(grey.refined_rule, "x.7.1-not-authorized");
    EXPECT_EQ(grey.refined_category, Category::policy);
    // The same word under a code the greylisting rule does not name: the code decides.
    Classification cfg = shipped().classify_reason("451 4.3.5 greylisting backend misconfigured");
    EXPECT_EQ(cfg.category, Category::receiver_config);
    // Authentication codes are never turned into rate limits by text.
    Classification auth = shipped().classify_reason("421 4.7.26 rate limited because it is unauthenticated");
    EXPECT_EQ(auth.category, Category::policy);
}

TEST(ClassifyPrecedence, TextThatAgreesWithTheCodeLeavesTheDecisionToTheCode) {
    Classification c = shipped().classify_reason("554 5.4.7 Delivery expired (message too old)");
    EXPECT_EQ(c.category, Category::expired);
    EXPECT_EQ(c.decided_by, Decider::enhanced_code);
    EXPECT_TRUE(c.refined_rule.empty());
}

TEST(ClassifyPrecedence, TextDecidesWhenThereIsNoPreciseCode) {
    Classification c = shipped().classify_reason("450 Greylisted for 5 minutes");
    EXPECT_EQ(c.category, Category::greylisting);
    EXPECT_EQ(c.decided_by, Decider::text);
    // Postfix's synthetic dsn=4.0.0 is not precise either.
    Classification d = shipped().classify_reason(
        "host h[192.0.2.1] said: 450 Greylisted (in reply to RCPT TO command)", "4.0.0");
    EXPECT_EQ(d.category, Category::greylisting);
}

TEST(ClassifyPrecedence, BasicCodeThenHonestUnknown) {
    Classification b = shipped().classify_reason("452 something odd");
    EXPECT_EQ(b.category, Category::receiver_system);
    EXPECT_EQ(b.decided_by, Decider::basic_code);
    Classification u = shipped().classify_reason("550 Requested action not taken");
    EXPECT_EQ(u.category, Category::unknown);
    EXPECT_EQ(u.decided_by, Decider::none);
    EXPECT_TRUE(u.rule.empty());
    Classification v = shipped().classify_reason("something no mail server ever said");
    EXPECT_EQ(v.category, Category::unknown);
}

TEST(ClassifyPrecedence, MostSpecificEnhancedPatternWins) {
    auto c = with_user_rules("{}");
    EXPECT_EQ(c.classify_reason("451 4.7.650 whatever").rule, "microsoft-4.7.500-699-throttling");
    EXPECT_EQ(c.classify_reason("451 4.7.1 whatever").rule, "x.7.1-not-authorized");
    EXPECT_EQ(c.classify_reason("451 4.7.99 whatever").rule, "x.7-policy");
    EXPECT_EQ(c.classify_reason("554 5.3.5 whatever").category, Category::receiver_config_permanent);
    EXPECT_EQ(c.classify_reason("451 4.3.5 whatever").category, Category::receiver_config);
}

TEST(ClassifyPrecedence, LocalFailureIsNotARemoteReply) {
    Classification c =
        shipped().classify_reason("connect to mx.example.net[192.0.2.1]:25: Connection refused");
    EXPECT_EQ(c.category, Category::network);
    EXPECT_EQ(c.decided_by, Decider::local_failure);
    EXPECT_TRUE(info(c.category).system_condition);
    EXPECT_EQ(shipped().classify_reason("mail transport unavailable").category, Category::local);
    EXPECT_EQ(shipped().classify_reason("message expired").category, Category::expired);
    EXPECT_EQ(shipped().classify_reason("454 4.7.1 x", "").category, Category::policy);
}

TEST(ClassifyPrecedence, SuccessIsNotADeferral) {
    EXPECT_TRUE(shipped().classify_reason("250 2.0.0 Ok: queued as ABC").delivered);
    EXPECT_TRUE(shipped().classify_reason("delivered to maildir").delivered);
    EXPECT_FALSE(shipped().classify_reason("451 4.3.0 x").delivered);
}

// ------------------------------------------------------------ user rules

TEST(ClassifyUserRules, UserRuleOverridesAPreciseCode) {
    auto c = with_user_rules(R"(
rules:
  - name: acme-maintenance
    category: receiver-system
    text: 'acme maintenance window'
    codes: [4xx]
)");
    Classification r = c.classify_reason("451 4.3.5 acme maintenance window, back at 06:00");
    EXPECT_EQ(r.category, Category::receiver_system);
    EXPECT_EQ(r.decided_by, Decider::user_rule);
    EXPECT_EQ(r.rule, "acme-maintenance");
    EXPECT_EQ(r.rule_origin, "user.yaml:3");
    // Without the text the shipped rules still apply.
    EXPECT_EQ(c.classify_reason("451 4.3.5 other").category, Category::receiver_config);
}

TEST(ClassifyUserRules, ConditionsAreAndedAndOrderMatters) {
    auto c = with_user_rules(R"(
- name: only-rcpt
  category: mailbox
  enhanced: [4.7.1]
  stages: [rcpt-to]
- name: any-4.7.1
  category: rate-limited
  enhanced: [X.7.1]
)");
    EXPECT_EQ(c.classify_reason("host h[192.0.2.1] said: 450 4.7.1 x (in reply to RCPT TO command)").rule,
              "only-rcpt");
    EXPECT_EQ(c.classify_reason("host h[192.0.2.1] said: 450 4.7.1 x (in reply to MAIL FROM command)").rule,
              "any-4.7.1");
    EXPECT_EQ(c.classify_reason("550 5.7.1 x").category, Category::rate_limited);
}

TEST(ClassifyUserRules, LaterLayerWins) {
    auto shipped_file = parse_rules_file(kShipped);
    ASSERT_TRUE(shipped_file.ok());
    auto a = parse_rules(YAML::Load("[{name: a, category: mailbox, codes: [451]}]"), "a.yaml");
    auto b = parse_rules(YAML::Load("[{name: b, category: content, codes: [451]}]"), "b.yaml");
    ASSERT_TRUE(a.ok() && b.ok());
    auto c = Classifier::build(*shipped_file, {*a, *b});
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->classify_reason("451 4.3.0 x").rule, "b");
    EXPECT_EQ(c->rule_count(), shipped_file->size() + 2);
}

TEST(ClassifyUserRules, UserFileThroughLoad) {
    auto dir = std::filesystem::temp_directory_path() / ("rg-classify-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "mine.yaml")
        << "version: 1\nrules:\n  - {name: mine, category: content, text: 'zzz-marker'}\n";
    auto c = Classifier::load(kShipped, dir / "mine.yaml");
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_EQ(c->classify_reason("550 5.1.1 zzz-marker").rule, "mine");
    std::filesystem::remove_all(dir);
}

// ------------------------------------------------------------ bad rule files

struct BadRules {
    const char* yaml;
    const char* where;  // expected "file:line:column" prefix
    const char* words;  // expected part of the message
};

TEST(ClassifyRuleErrors, EveryErrorNamesFileLineAndColumn) {
    const BadRules cases[] = {
        {"rules:\n  - name: a\n    category: nonsense\n    codes: [451]\n", "bad.yaml:3:15",
         "unknown category"},
        {"rules:\n  - name: a\n    category: policy\n    colour: red\n", "bad.yaml:4:5", "unknown rule key"},
        {"rules:\n  - name: a\n    category: policy\n    text: 'a(b'\n", "bad.yaml:4:11", "bad RE2 pattern"},
        {"rules:\n  - name: a\n    category: policy\n    enhanced: [4.3]\n", "bad.yaml:4:16",
         "bad enhanced code"},
        {"rules:\n  - name: a\n    category: policy\n    codes: [651]\n", "bad.yaml:4:13", "bad basic code"},
        {"rules:\n  - {name: a, category: policy, codes: [451]}\n  - {name: a, category: policy, codes: "
         "[452]}\n",
         "bad.yaml:3:5", "duplicate rule name"},
        {"rules:\n  - name: a\n    category: policy\n", "bad.yaml:2:5", "no condition"},
        {"rules:\n  - name: a\n    category: policy\n    enhanced: [4.7.1]\n    refines: [4.7.0]\n",
         "bad.yaml:5:14", "refines"},
        {"rules:\n  - name: a\n    category: policy\n    local: [moon-phase]\n", "bad.yaml:4:13",
         "unknown local failure"},
        {"rules:\n  - name: a\n    category: policy\n    stages: [lunch]\n", "bad.yaml:4:14",
         "unknown SMTP stage"},
        {"version: 2\nrules: []\n", "bad.yaml:1:10", "version"},
        {"rulez: []\n", "bad.yaml:1:1", "unknown top-level key"},
        {"rules:\n  - name: 'has space'\n    category: policy\n    codes: [451]\n", "bad.yaml:2:11", "name"},
        {"rules: {name: a}\n", "bad.yaml:1:8", "must be a list"},
    };
    for (const auto& c : cases) {
        auto r = parse_rules(YAML::Load(c.yaml), "bad.yaml");
        ASSERT_FALSE(r.ok()) << c.yaml;
        EXPECT_EQ(r.error().kind, ErrorKind::config);
        EXPECT_EQ(r.error().message.rfind(std::string(c.where) + ": ", 0), 0u) << r.error().message;
        EXPECT_NE(r.error().message.find(c.words), std::string::npos) << r.error().message;
    }
}

TEST(ClassifyRuleErrors, YamlSyntaxErrorsFromAFileCarryThePosition) {
    auto dir = std::filesystem::temp_directory_path() / ("rg-classify-bad-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto path = dir / "broken.yaml";
    std::ofstream(path) << "rules:\n  - name: a\n    category: [policy\n";
    auto r = parse_rules_file(path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message.rfind(path.string() + ":", 0), 0u) << r.error().message;
    EXPECT_TRUE(std::regex_search(r.error().message, std::regex(R"(broken\.yaml:\d+:\d+: )")))
        << r.error().message;
    std::ofstream(dir / "deep.yaml") << "rules: " << std::string(100000, '[') << "\n";
    auto deep = parse_rules_file(dir / "deep.yaml");
    ASSERT_FALSE(deep.ok());
    EXPECT_NE(deep.error().message.find("nesting is too deep"), std::string::npos) << deep.error().message;
    auto missing = Classifier::load(kShipped, dir / "absent.yaml");
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.error().message.find("absent.yaml"), std::string::npos);
    std::filesystem::remove_all(dir);
}

TEST(ClassifyRuleErrors, FindingTheShippedFile) {
    EXPECT_FALSE(find_shipped_rules("/nonexistent/classifier.yaml").ok());
    ::setenv("RETRYGUARD_DATADIR", (std::string(RETRYGUARD_SOURCE_DIR) + "/conf").c_str(), 1);
    auto via_env = find_shipped_rules();
    ASSERT_TRUE(via_env.ok());
    EXPECT_EQ(*via_env, std::filesystem::path(RETRYGUARD_SOURCE_DIR) / "conf" / "classifier.yaml");
    ::setenv("RETRYGUARD_DATADIR", "/nonexistent-dir", 1);
    auto bad_env = find_shipped_rules();
    ASSERT_FALSE(bad_env.ok());
    EXPECT_NE(bad_env.error().message.find("RETRYGUARD_DATADIR"), std::string::npos);
    ::unsetenv("RETRYGUARD_DATADIR");
    EXPECT_TRUE(find_shipped_rules().ok());  // installed data dir or the source tree
}

TEST(ClassifyRuleErrors, ShippedFileIsValidAndCoversEveryCategory) {
    auto file = parse_rules_file(kShipped);
    ASSERT_TRUE(file.ok()) << file.error().message;
    EXPECT_GT(file->size(), 50u);
    std::set<Category> seen;
    auto c = Classifier::build(*file);
    ASSERT_TRUE(c.ok());
    for (const char* reply :
         {"451 4.3.5 x", "554 5.3.5 x", "451 4.3.0 x", "450 4.2.0 greylisted", "451 4.7.650 x", "554 5.7.1 x",
          "452 4.2.2 x", "550 5.1.1 x", "451 4.4.1 x", "550 5.4.4 x", "552 5.6.0 x", "451 4.4.7 x",
          "mail transport unavailable", "hello"})
        seen.insert(c->classify_reason(reply).category);
    EXPECT_EQ(seen.size(), all_categories().size());
}

// ------------------------------------------------------------ retry-after

TEST(ClassifyRetryAfter, ExtractsTheDelayAskedFor) {
    struct Case {
        const char* text;
        long long seconds;  // -1: none
    } cases[] = {
        {"Greylisted, please try again in 300 seconds", 300},
        {"try again in 5 minutes", 300},
        {"please retry in 2 min", 120},
        {"Greylisted for 300 seconds (see http://postgrey.schweikert.ch/help/x.html)", 300},
        {"Greylisting in action, please come back in 00:05:00", 300},
        {"You have been greylisted, please wait 90 s", 90},
        {"deferred for 1 hour", 3600},
        {"Please try again later", -1},
        {"Try again later (10)", -1},
        {"Messages from 192.0.2.1 temporarily deferred - 4.16.55.1", -1},
        {"limit of 100 messages in 1 hour", -1},
        {"try again in 30 days", -1},
        {"", -1},
    };
    for (const auto& c : cases) {
        auto r = extract_retry_after(c.text);
        if (c.seconds < 0)
            EXPECT_FALSE(r.has_value()) << c.text << " -> " << (r ? r->count() : 0);
        else {
            ASSERT_TRUE(r.has_value()) << c.text;
            EXPECT_EQ(r->count(), c.seconds) << c.text;
        }
    }
    EXPECT_EQ(shipped().classify_reason("450 4.2.0 Greylisted for 300 seconds").retry_after->count(), 300);
    EXPECT_FALSE(
        shipped().classify_reason("450 4.2.0 Greylisted, please try again later").retry_after.has_value());
}

// ------------------------------------------------------------ registry

TEST(ClassifyRegistry, NamesEveryRegisteredCode) {
    auto code = [](const char* s) { return *parse_enhanced_code(s); };
    EXPECT_EQ(enhanced_code_name(code("4.3.5")), "System incorrectly configured");
    EXPECT_EQ(enhanced_code_name(code("5.1.1")), "Bad destination mailbox address");
    EXPECT_EQ(enhanced_code_name(code("5.7.26")), "Multiple authentication checks failed");
    EXPECT_EQ(enhanced_code_name(code("5.7.30")), "REQUIRETLS support required");
    EXPECT_EQ(enhanced_code_name(code("4.3.6")), "Requested priority was changed");
    EXPECT_EQ(enhanced_code_name(code("5.1.10")), "Recipient address has null MX");
    EXPECT_TRUE(is_registered(code("2.0.0")));
    EXPECT_FALSE(is_registered(code("4.7.650")));
    const auto* generic = lookup_enhanced_code(code("4.7.650"));
    ASSERT_NE(generic, nullptr);
    EXPECT_EQ(generic->code, "X.7.YYY");
    EXPECT_EQ(lookup_enhanced_code(code("4.9.1")), nullptr);
    EXPECT_GE(enhanced_code_registry().size(), 80u);
    std::set<std::string_view> codes;
    for (const auto& e : enhanced_code_registry()) {
        EXPECT_TRUE(codes.insert(e.code).second) << e.code;
        std::string concrete = "5" + std::string(e.code.substr(1));
        auto parsed = parse_enhanced_code(concrete);
        ASSERT_TRUE(parsed.has_value()) << e.code;
        EXPECT_EQ(lookup_enhanced_code(*parsed), &e);
    }
}

}  // namespace
}  // namespace retryguard
