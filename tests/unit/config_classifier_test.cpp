// config_classifier_test.cpp -- classifier.rules is handed over as YAML with
// its file and position, for the classifier to validate and report on.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "retryguard/config/config.hpp"
#include "retryguard/runtime/runtime.hpp"

namespace cfg = retryguard::config;

TEST(ConfigClassifierRules, KeptAsNodeWithFileAndPosition) {
    auto out = cfg::load_string(
        "dry_run: false\n"
        "classifier:\n"
        "  rules:\n"
        "    - {text: \"greylisted\", category: greylisting}\n"
        "    - {code: \"4.7.650\", category: rate_limited}\n",
        "site.yaml");
    ASSERT_TRUE(out.ok());
    const auto& c = out.config->classifier;
    EXPECT_EQ(c.file, "site.yaml");
    ASSERT_TRUE(c.rules);
    const YAML::Node& rules = *c.rules;
    ASSERT_TRUE(rules.IsSequence());
    ASSERT_EQ(rules.size(), 2u);
    EXPECT_EQ(rules[1]["code"].as<std::string>(), "4.7.650");
    EXPECT_EQ(c.mark.line + 1, 4);  // yaml-cpp marks are 0-based
    EXPECT_EQ(rules[1].Mark().line + 1, 5);
}

TEST(ConfigClassifierRules, DefaultIsEmptyListAndWrongTypeIsAnError) {
    auto out = cfg::load_string("", "e.yaml");
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(out.config->classifier.rules);
    EXPECT_TRUE(out.config->classifier.rules->IsSequence());
    EXPECT_EQ(out.config->classifier.rules->size(), 0u);
    auto bad = cfg::load_string("classifier:\n  rules: {text: x}\n", "e.yaml");
    ASSERT_EQ(bad.errors.size(), 1u);
    EXPECT_EQ(bad.errors[0].to_string(),
              "e.yaml:2:10: error: 'classifier.rules' must be a list, got a mapping");
}

// runtime_checks() compiles the user rules as the daemons do (classifier_from)
// and reports a refused rule at its position in the configuration file.
TEST(ConfigClassifierRules, RuntimeChecksReportRefusedRuleWithPosition) {
    auto good = cfg::load_string(
        "classifier:\n"
        "  rules:\n"
        "    - {name: grey, category: greylisting, text: \"greylisted\"}\n",
        "site.yaml");
    ASSERT_TRUE(good.ok());
    EXPECT_TRUE(retryguard::runtime_checks(*good.config).empty());
    EXPECT_TRUE(retryguard::classifier_from(*good.config).ok());

    auto bad = cfg::load_string(
        "classifier:\n"
        "  rules:\n"
        "    - {name: grey, category: greylisting, text: \"greylisted\"}\n"
        "    - {name: grey2, category: no_such_category, text: \"x\"}\n",
        "site.yaml");
    ASSERT_TRUE(bad.ok());  // the file itself is well formed
    EXPECT_FALSE(retryguard::classifier_from(*bad.config).ok());
    const auto problems = retryguard::runtime_checks(*bad.config);
    ASSERT_EQ(problems.size(), 1u);
    EXPECT_EQ(problems[0].file, "site.yaml");
    EXPECT_EQ(problems[0].line, 4);
    EXPECT_EQ(problems[0].column, 31);
    EXPECT_EQ(problems[0].message.rfind("unknown category `no_such_category`", 0), 0u) << problems[0].message;
}
