// reinjection.* in the YAML configuration reaches the milter's policy.
#include "retryguard/identity/resend_config.hpp"

#include <gtest/gtest.h>

namespace retryguard {
namespace {

TEST(ResendConfig, DefaultsRejectAndFingerprintEverything) {
    auto s = resend_settings_from(*config::defaults());
    EXPECT_EQ(s.policy.action, ResendAction::reject);
    EXPECT_TRUE(s.fingerprint.sender && s.fingerprint.subject && s.fingerprint.body);
    EXPECT_TRUE(s.match_message_id);
    EXPECT_EQ(s.policy.header_name, "X-Retryguard-Resend");
}

TEST(ResendConfig, DestinationRulesBecomePerDomainActions) {
    auto loaded = config::load_string(R"(
reinjection:
  action: log_only
  match_by: [message_id]
  tag_header: X-Resent-Copy
destinations:
  - domain: example.org
    reinjection: {action: reject}
  - domain: "*.example.net"
    reinjection: {action: hold}
  - mx: "mx*.provider.invalid"
    reinjection: {action: tag}
)");
    ASSERT_TRUE(loaded.ok()) << (loaded.errors.empty() ? "" : loaded.errors[0].to_string());
    auto s = resend_settings_from(*loaded.config);
    EXPECT_EQ(s.policy.action, ResendAction::log_only);
    EXPECT_EQ(s.policy.header_name, "X-Resent-Copy");
    EXPECT_FALSE(s.fingerprint.any()) << "match_by without fingerprint turns it off";
    EXPECT_EQ(s.policy.action_for("a@example.org"), ResendAction::reject);
    EXPECT_EQ(s.policy.action_for("a@mx.example.net"), ResendAction::hold);
    EXPECT_EQ(s.policy.action_for("a@example.net"), ResendAction::log_only) << "a wildcard is not the apex";
    EXPECT_EQ(s.policy.action_for("a@elsewhere.invalid"), ResendAction::log_only);
    EXPECT_EQ(s.policy.per_destination.size(), 2u) << "MX groups cannot apply at end of message";
}

// Every reinjection key a destination rule may set reaches the milter for that
// destination: the action, the tag header, the refusal text and dry_run.
TEST(ResendConfig, DestinationRulesCarryTheirTagTextAndDryRun) {
    auto loaded = config::load_string(R"(
destinations:
  - domain: tagged.example
    reinjection: {action: tag, tag_header: X-Copy-Of}
  - domain: "*.texted.example"
    reinjection: {reject_text: "still queued as {original}"}
  - domain: trial.example
    dry_run: true
)");
    ASSERT_TRUE(loaded.ok()) << (loaded.errors.empty() ? "" : loaded.errors[0].to_string());
    auto s = resend_settings_from(*loaded.config);
    EXPECT_EQ(s.policy.rule_for("a@tagged.example").header_name, "X-Copy-Of");
    EXPECT_EQ(s.policy.rule_for("a@tagged.example").action, ResendAction::tag);
    EXPECT_EQ(s.policy.rule_for("a@mx.texted.example").reply_template, "still queued as {original}");
    EXPECT_EQ(s.policy.rule_for("a@mx.texted.example").action, ResendAction::reject);
    EXPECT_TRUE(s.policy.rule_for("a@trial.example").dry_run);
    EXPECT_FALSE(s.policy.rule_for("a@elsewhere.example").dry_run);
    EXPECT_FALSE(s.policy.dry_run);
    EXPECT_EQ(s.policy.per_destination.size(), 3u);

    auto all = config::load_string("dry_run: true\n");
    ASSERT_TRUE(all.ok());
    EXPECT_TRUE(resend_settings_from(*all.config).policy.dry_run);
}

// How a message is looked up (Message-ID, fingerprint and its parts) is one
// thing per message, decided before its recipients' destinations matter.
TEST(ResendConfig, LookupKeysAreGlobalOnly) {
    for (const char* key : {"match_by: [message_id]", "fingerprint: {parts: [body]}",
                            "fingerprint: {body_limit: 4KiB}", "fingerprint: {subject_ignore: x}"}) {
        auto loaded = config::load_string(
            std::string("destinations:\n  - domain: a.example\n    reinjection: {") + key + "}\n");
        ASSERT_FALSE(loaded.ok()) << key;
        EXPECT_NE(loaded.errors[0].message.find("global only"), std::string::npos)
            << loaded.errors[0].to_string();
    }
}

// errors.* tempfail applies to SMTP submissions only; the sendmail path is
// always accepted (pickup would retry a tempfailed message forever).
TEST(ResendConfig, TempfailOnlyOnTheSmtpPath) {
    EXPECT_TRUE(tempfails(config::ErrorAction::tempfail, SubmissionPath::smtp));
    EXPECT_FALSE(tempfails(config::ErrorAction::tempfail, SubmissionPath::sendmail));
    EXPECT_FALSE(tempfails(config::ErrorAction::accept, SubmissionPath::smtp));
    EXPECT_FALSE(tempfails(config::ErrorAction::accept, SubmissionPath::sendmail));
}

}  // namespace
}  // namespace retryguard
