// config_resolve_test.cpp -- destination rule precedence: exact > longest
// wildcard > MX group (most literal characters, then file order) > global,
// and that a rule overrides only the keys it sets.
#include <gtest/gtest.h>

#include "retryguard/config/config.hpp"

namespace cfg = retryguard::config;
using namespace std::chrono_literals;

namespace {

const char* kRules = R"(categories:
  receiver_config:
    escalate_after: 36h
destinations:
  - domain: example.com
    contact: "noc@example.com"
    categories:
      receiver_config:
        escalate_after: 12h
  - domain: "*.example.com"
    reinjection:
      action: hold
  - domain: "*.mail.example.com"
    reinjection:
      action: tag
  - mx: "mx*.provider.net"
    actions:
      flagged: "REJECT flagged {domain}"
  - mx: "*.net"
    dry_run: true
  - mx: "mx?.provider.net"
    dry_run: true
)";

std::shared_ptr<const cfg::Config> load() {
    auto out = cfg::load_string(kRules, "rules.yaml");
    EXPECT_TRUE(out.ok()) << (out.errors.empty() ? "" : out.errors[0].to_string());
    return out.config;
}

}  // namespace

TEST(ConfigResolve, ExactDomainWinsOverEverything) {
    auto c = load();
    auto r = c->resolve("Example.COM.", "mx1.provider.net");
    ASSERT_NE(r.rule, nullptr);
    EXPECT_EQ(r.rule->pattern, "example.com");
    EXPECT_EQ(r.rule->line, 5);
    EXPECT_EQ(r.settings->thresholds(retryguard::Category::receiver_config).escalate_after, 12h);
    EXPECT_EQ(r.settings->contact, "noc@example.com");
    // Not overridden: inherits the global value, which the file changed.
    EXPECT_EQ(r.settings->reinjection.action, cfg::ReinjectionAction::reject);
    ASSERT_EQ(r.also_matched.size(), 3u);  // the three mx globs that match mx1.provider.net
    EXPECT_NE(r.reason().find("exact match for 'example.com'"), std::string::npos) << r.reason();
}

TEST(ConfigResolve, WildcardMatchesSubdomainsNotApex) {
    auto c = load();
    auto r = c->resolve("a.b.example.com");
    ASSERT_NE(r.rule, nullptr);
    EXPECT_EQ(r.rule->pattern, "*.example.com");
    EXPECT_EQ(r.settings->reinjection.action, cfg::ReinjectionAction::hold);
    EXPECT_EQ(r.settings->thresholds(retryguard::Category::receiver_config).escalate_after, 36h);
    EXPECT_TRUE(r.settings->contact.empty());
    // The apex has its own exact rule here; without it the wildcard must not apply.
    auto apex_only = cfg::load_string("destinations:\n  - domain: \"*.example.org\"\n", "w.yaml");
    ASSERT_TRUE(apex_only.ok());
    EXPECT_EQ(apex_only.config->resolve("example.org").rule, nullptr);
    EXPECT_NE(apex_only.config->resolve("x.example.org").rule, nullptr);
    EXPECT_EQ(apex_only.config->resolve("xexample.org").rule, nullptr);
}

TEST(ConfigResolve, LongestWildcardWins) {
    auto c = load();
    auto r = c->resolve("in.mail.example.com", "mx1.provider.net");
    ASSERT_NE(r.rule, nullptr);
    EXPECT_EQ(r.rule->pattern, "*.mail.example.com");
    EXPECT_EQ(r.settings->reinjection.action, cfg::ReinjectionAction::tag);
    ASSERT_GE(r.also_matched.size(), 1u);
    EXPECT_EQ(r.also_matched[0]->pattern, "*.example.com");
}

TEST(ConfigResolve, MxGroupCoversEveryDomainOfThatHost) {
    auto c = load();
    for (const char* domain : {"customer-a.test", "customer-b.test", "other.org"}) {
        auto r = c->resolve(domain, "MX2.provider.net.");
        ASSERT_NE(r.rule, nullptr) << domain;
        EXPECT_EQ(r.rule->pattern, "mx*.provider.net") << domain;
        EXPECT_EQ(r.settings->actions.flagged.verb, cfg::PolicyAction::Verb::reject);
    }
    // Postfix's relay= form is accepted too.
    EXPECT_EQ(c->resolve("x.test", "mx7.provider.net[192.0.2.7]:25").rule->pattern, "mx*.provider.net");
}

TEST(ConfigResolve, MxTieBreakMostLiteralCharactersThenFileOrder) {
    auto c = load();
    // "mx*.provider.net" and "mx?.provider.net" both have 14 literal characters: the first in the file wins;
    // "*.net" has fewer and loses.
    auto r = c->resolve("x.test", "mx1.provider.net");
    ASSERT_NE(r.rule, nullptr);
    EXPECT_EQ(r.rule->index, 3u);
    ASSERT_EQ(r.also_matched.size(), 2u);
    EXPECT_EQ(r.also_matched[0]->pattern, "mx?.provider.net");
    EXPECT_EQ(r.also_matched[1]->pattern, "*.net");
    // Only the broad glob matches a host that is not mx<one char>.
    auto broad = c->resolve("x.test", "relay.other.net");
    ASSERT_NE(broad.rule, nullptr);
    EXPECT_EQ(broad.rule->pattern, "*.net");
    EXPECT_TRUE(broad.settings->dry_run);
}

TEST(ConfigResolve, GlobalWhenNothingMatches) {
    auto c = load();
    auto r = c->resolve("unrelated.org", "mx.unrelated.org");
    EXPECT_EQ(r.rule, nullptr);
    EXPECT_EQ(r.settings, &c->global);
    EXPECT_EQ(r.reason(),
              "no destination rule matches domain 'unrelated.org' or relay host 'mx.unrelated.org': global "
              "settings");
    auto no_mx = c->resolve("x.test");
    EXPECT_EQ(no_mx.rule, nullptr);
    EXPECT_EQ(no_mx.reason(),
              "no destination rule matches domain 'x.test' (relay host unknown): global settings");
}

TEST(ConfigResolve, RuleRecordsOnlyTheKeysItSets) {
    auto c = load();
    ASSERT_EQ(c->destinations.size(), 6u);
    EXPECT_EQ(c->destinations[0].overridden_keys,
              std::vector<std::string>{"categories.receiver_config.escalate_after"});
    EXPECT_EQ(cfg::show_setting(c->destinations[0].settings, "categories.receiver_config.escalate_after"),
              "12h");
    EXPECT_EQ(cfg::show_setting(c->global, "categories.receiver_config.escalate_after"), "36h");
}

TEST(ConfigResolve, GlobalKeysAfterDestinationsStillInherited) {
    // A rule inherits the final global value even when the global key comes later in the file.
    auto out = cfg::load_string(
        "destinations:\n  - domain: a.example\n    dry_run: true\nretry:\n  min_interval: 45m\n", "o.yaml");
    ASSERT_TRUE(out.ok());
    auto r = out.config->resolve("a.example");
    EXPECT_EQ(r.settings->retry.min_interval, 45min);
    EXPECT_TRUE(r.settings->dry_run);
}
