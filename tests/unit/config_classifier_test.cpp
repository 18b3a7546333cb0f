// config_classifier_test.cpp -- classifier.rules is handed over as YAML with
// its file and position, for the classifier to validate and report on.
#include <gtest/gtest.h>

#include "retryguard/config.hpp"

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
    ASSERT_TRUE(c.rules.IsSequence());
    ASSERT_EQ(c.rules.size(), 2u);
    EXPECT_EQ(c.rules[1]["code"].as<std::string>(), "4.7.650");
    EXPECT_EQ(c.mark.line + 1, 4);  // yaml-cpp marks are 0-based
    EXPECT_EQ(c.rules[1].Mark().line + 1, 5);
}

TEST(ConfigClassifierRules, DefaultIsEmptyListAndWrongTypeIsAnError) {
    auto out = cfg::load_string("", "e.yaml");
    ASSERT_TRUE(out.ok());
    EXPECT_TRUE(out.config->classifier.rules.IsSequence());
    EXPECT_EQ(out.config->classifier.rules.size(), 0u);
    auto bad = cfg::load_string("classifier:\n  rules: {text: x}\n", "e.yaml");
    ASSERT_EQ(bad.errors.size(), 1u);
    EXPECT_EQ(bad.errors[0].to_string(),
              "e.yaml:2:10: error: 'classifier.rules' must be a list, got a mapping");
}
